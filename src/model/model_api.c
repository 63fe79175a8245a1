/* Public-API glue for model-level services: tokenizer, chat template, detokenizer,
 * version and backend names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/backend.h"
#include "lockstep.h"
#include "model/model.h"
#include "model/session.h"

const ls_model *ls_session_model(const ls_session *s) {
    return s->model;
}

int64_t ls_model_tokenize(const ls_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                          int32_t *out, int64_t cap) {
    return ls_tokenize(m->tok, text, len, add_bos, parse_special, out, cap);
}

int32_t *ls_model_tokenize_alloc(const ls_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                                 int32_t *n) {
    /* SentencePiece never makes more tokens than bytes, plus BOS: one pass almost always
     * suffices; if not, the first pass told us the size. */
    int64_t cap = (int64_t)len + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return NULL;
    int64_t k = ls_model_tokenize(m, text, len, add_bos, parse_special, ids, cap);
    if (k > cap) {
        int32_t *nb = realloc(ids, sizeof(int32_t) * (size_t)k);
        if (!nb) {
            free(ids);
            return NULL;
        }
        ids = nb;
        k = ls_model_tokenize(m, text, len, add_bos, parse_special, ids, k);
    }
    if (k < 0 || k > INT32_MAX) {
        free(ids);
        return NULL;
    }
    *n = (int32_t)k;
    return ids;
}

char *ls_chat_apply(const ls_model *m, const ls_message *msgs, int n, char *err, size_t errlen) {
    /* The template follows the vocabulary: Gemma 4's turn tokens pick its template (the
     * large-model default: generation prompt, thinking off, empty thought); anything else
     * keeps the Gemma 3 template. */
    if (ls_chat_style_of(m->tok) == LS_CHAT_GEMMA4)
        return ls_chat_render_gemma4((const ls_chat_msg *)msgs, n, NULL, err, errlen);
    return ls_chat_render_gemma3((const ls_chat_msg *)msgs, n, true, err, errlen);
}

int ls_model_chat_style(const ls_model *m) {
    return (int)ls_chat_style_of(m->tok);
}

char *ls_chat_render_style(int style, const ls_message *msgs, int n, const ls_chat_tools *tools, char *err,
                           size_t errlen) {
    if (style == LS_CHAT_GEMMA4) {
        ls_chat_tool_text tt = {0};
        if (tools) tt = (ls_chat_tool_text){tools->tools, tools->calls, tools->responses};
        return ls_chat_render_gemma4_tools((const ls_chat_msg *)msgs, n, NULL, &tt, err, errlen);
    }
    return ls_chat_render_gemma3((const ls_chat_msg *)msgs, n, true, err, errlen);
}

bool ls_token_is_eog(const ls_model *m, int32_t id) {
    return ls_tokenizer_is_eog(m->tok, id);
}
bool ls_model_same_vocab(const ls_model *a, const ls_model *b) {
    int32_t n = ls_tokenizer_n_vocab(a->tok);
    if (n != ls_tokenizer_n_vocab(b->tok)) return false;
    for (int32_t i = 0; i < n; i++) {
        size_t la, lb;
        const char *ta = ls_tokenizer_token_text(a->tok, i, &la), *tb = ls_tokenizer_token_text(b->tok, i, &lb);
        if (la != lb || (la && memcmp(ta, tb, la) != 0)) return false;
    }
    return true;
}

int32_t ls_token_bos(const ls_model *m) {
    return ls_tokenizer_bos(m->tok);
}

int ls_detok_token(const ls_model *m, ls_detok *st, int32_t id, char *out, int cap) {
    return ls_detok_push(m->tok, (ls_detok_state *)st, id, false, out, cap);
}

int ls_token_text(const ls_model *m, int32_t id, char *buf, int cap) {
    return ls_token_to_bytes(m->tok, id, false, buf, cap);
}

int ls_detok_finish(ls_detok *st, char *out, int cap) {
    return ls_detok_flush((ls_detok_state *)st, out, cap);
}

const char *ls_version(void) {
    return "0.1.0";
}
const char *ls_backend_name(void) {
    return ls_backend_cpu_isa_name();
}
void ls_set_log_level(int level) {
    ls_log_set_level((ls_log_level)level);
}

_Static_assert(sizeof(ls_message) == sizeof(ls_chat_msg), "ls_message mirrors ls_chat_msg");
_Static_assert(sizeof(ls_detok) == sizeof(ls_detok_state), "ls_detok mirrors ls_detok_state");
