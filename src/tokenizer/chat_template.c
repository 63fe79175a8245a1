/* Gemma 3 and Gemma 4 chat templates, rendered in C so that the engine needs no Jinja.
 *
 * Reference: the chat_template of Gemma 3's tokenizer_config.json (HF). Rendered output is
 * byte-identical to jinja2 on that template (tests/data/tokenizer/chat_*.txt):
 *
 *   <bos>
 *   for each message after an optional leading system message:
 *     <start_of_turn>{user|model}\n
 *     [first turn only: system content + "\n\n", NOT trimmed]
 *     content | trim            (Python str.strip(): Unicode whitespace, both ends)
 *     <end_of_turn>\n
 *   [<start_of_turn>model\n]    if add_generation_prompt
 *
 * Like the HF template we require user/model alternation starting with user ("assistant"
 * is rendered as "model"). Stricter than HF, on purpose: an unknown role is an error (HF
 * would render any non-user role verbatim in a model slot), so is a system message that
 * is not first, and so is a system message with no turn to fold it into (HF silently
 * drops it).
 *
 * Gemma 4 (ls_chat_render_gemma4): reference is the chat template stored in llama.cpp's
 * Gemma 4 vocab GGUF (the HF template of the large models), rendered by jinja2 in
 * tests/data/tokenizer_bpe/chat4_golden.txt (tools/gen_chat_template_golden.py). Unlike
 * Gemma 3 it has a real system turn (content trimmed), needs no user/model alternation (the
 * template does not check it, so neither do we), strips earlier thinking from model turns,
 * and pre-closes an empty thought after the generation prompt when thinking is off. Image and
 * audio parts are not rendered here. Tools (ls_chat_render_gemma4_tools) come pre-rendered in
 * the template's native format by the server (src/server/tools.c, docs/tool_calls.md): the
 * declarations go at the end of the system turn, a model turn starts with its calls and
 * responses, a turn with responses and no content stays open, and then the generation prompt
 * does not open a model turn (the model continues the turn with the responses). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} chat_sb;

static void sb_put(chat_sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *nb = realloc(b->buf, nc);
        if (!nb) {
            b->oom = true;
            return;
        }
        b->buf = nb;
        b->cap = nc;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

static void sb_puts(chat_sb *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void chat_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void chat_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Jinja `trim` == Python str.strip(): strip whitespace code points from both ends. Bytes
 * that are not valid UTF-8 stop the stripping (Python strings cannot hold them anyway). */
static void py_strip(const char *s, size_t n, size_t *start, size_t *end) {
    size_t a = 0, z = n;
    while (a < z) {
        uint32_t cp;
        int k = ls_utf8_decode(s + a, z - a, &cp);
        if (k == 0 || !ls_utf8_is_py_space(cp)) break;
        a += (size_t)k;
    }
    while (z > a) {
        /* Back up to the start of the last character (at most 3 continuation bytes). */
        size_t b = z - 1;
        while (b > a && z - b < 4 && ((uint8_t)s[b] & 0xC0) == 0x80) b--;
        uint32_t cp;
        int k = ls_utf8_decode(s + b, z - b, &cp);
        if (k == 0 || (size_t)k != z - b || !ls_utf8_is_py_space(cp)) break;
        z = b;
    }
    *start = a;
    *end = z;
}

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_MODEL, ROLE_BAD } chat_role;

static chat_role parse_role(const char *r) {
    if (!r) return ROLE_BAD;
    if (strcmp(r, "system") == 0) return ROLE_SYSTEM;
    if (strcmp(r, "user") == 0) return ROLE_USER;
    if (strcmp(r, "assistant") == 0 || strcmp(r, "model") == 0) return ROLE_MODEL;
    return ROLE_BAD;
}

char *ls_chat_render_gemma3(const ls_chat_msg *msgs, int n, bool add_generation_prompt, char *err, size_t errlen) {
    if (!msgs || n <= 0) {
        chat_err(err, errlen, "chat: no messages");
        return NULL;
    }
    /* Validate everything before rendering anything. */
    int first = 0;
    for (int i = 0; i < n; i++) {
        chat_role role = parse_role(msgs[i].role);
        if (role == ROLE_BAD) {
            chat_err(err, errlen, "chat: message %d has unknown role '%s' (want system, user, assistant or model)", i,
                     msgs[i].role ? msgs[i].role : "(null)");
            return NULL;
        }
        if (!msgs[i].content) {
            chat_err(err, errlen, "chat: message %d has no content", i);
            return NULL;
        }
        if (role == ROLE_SYSTEM) {
            if (i != 0) {
                chat_err(err, errlen, "chat: system message %d must be the first message", i);
                return NULL;
            }
            first = 1;
            continue;
        }
        /* After the optional system message: user, model, user, model, ... */
        chat_role want = ((i - first) % 2 == 0) ? ROLE_USER : ROLE_MODEL;
        if (role != want) {
            chat_err(err, errlen, "chat: roles must alternate user/model starting with user (message %d is '%s')", i,
                     msgs[i].role);
            return NULL;
        }
    }
    chat_sb b = {0};
    sb_puts(&b, "<bos>");
    if (first == n) {
        /* Only a system message (OpenAI accepts it). Gemma 3 has no system turn: the template
         * folds the system text into the first user turn, so render it as the template renders
         * the system message followed by an empty user message. */
        sb_puts(&b, "<start_of_turn>user\n");
        sb_puts(&b, msgs[0].content);
        sb_puts(&b, "\n\n<end_of_turn>\n");
    }
    for (int i = first; i < n; i++) {
        bool user = parse_role(msgs[i].role) == ROLE_USER;
        sb_puts(&b, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (i == first && first == 1) {
            sb_puts(&b, msgs[0].content); /* the template does not trim the system text */
            sb_puts(&b, "\n\n");
        }
        size_t a, z;
        const char *c = msgs[i].content;
        py_strip(c, strlen(c), &a, &z);
        sb_put(&b, c + a, z - a);
        sb_puts(&b, "<end_of_turn>\n");
    }
    if (add_generation_prompt) sb_puts(&b, "<start_of_turn>model\n");
    if (b.oom) {
        free(b.buf);
        chat_err(err, errlen, "chat: out of memory");
        return NULL;
    }
    return b.buf;
}

/* ---------------------------------------------------------------------------------------
 * Gemma 4
 * --------------------------------------------------------------------------------------- */

ls_chat_opts ls_chat_opts_default(void) {
    return (ls_chat_opts){.add_generation_prompt = true, .enable_thinking = false, .empty_thought = true};
}

/* The template's strip_thinking macro: split on "<channel|>", keep each part up to its first
 * "<|channel>" (whole part if none), join, then trim. */
static void put_stripped_thinking(chat_sb *b, const char *c) {
    chat_sb tmp = {0};
    sb_put(&tmp, "", 0);
    const char *p = c;
    for (;;) {
        const char *close = strstr(p, "<channel|>");
        size_t plen = close ? (size_t)(close - p) : strlen(p);
        const char *open = NULL;
        for (const char *q = p; q + 10 <= p + plen && !open; q++)
            if (memcmp(q, "<|channel>", 10) == 0) open = q;
        sb_put(&tmp, p, open ? (size_t)(open - p) : plen);
        if (!close) break;
        p = close + 10;
    }
    if (tmp.oom) {
        b->oom = true;
    } else {
        size_t a, z;
        py_strip(tmp.buf, tmp.len, &a, &z);
        sb_put(b, tmp.buf + a, z - a);
    }
    free(tmp.buf);
}

static void put_trimmed(chat_sb *b, const char *c) {
    size_t a, z;
    py_strip(c, strlen(c), &a, &z);
    sb_put(b, c + a, z - a);
}

char *ls_chat_render_gemma4(const ls_chat_msg *msgs, int n, const ls_chat_opts *opts, char *err, size_t errlen) {
    return ls_chat_render_gemma4_tools(msgs, n, opts, NULL, err, errlen);
}

char *ls_chat_render_gemma4_tools(const ls_chat_msg *msgs, int n, const ls_chat_opts *opts, const ls_chat_tool_text *tt,
                                  char *err, size_t errlen) {
    ls_chat_opts o = opts ? *opts : ls_chat_opts_default();
    const char *tools = tt && tt->tools && tt->tools[0] ? tt->tools : NULL;
    if (!msgs || n <= 0) {
        chat_err(err, errlen, "chat: no messages");
        return NULL;
    }
    bool has_system = false;
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        bool sys = r && (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0);
        if (!msgs[i].content) {
            chat_err(err, errlen, "chat: message %d has no content", i);
            return NULL;
        }
        if (sys && i != 0) {
            chat_err(err, errlen, "chat: system message %d must be the first message", i);
            return NULL;
        }
        has_system |= sys;
        if (!sys && parse_role(r) != ROLE_USER && parse_role(r) != ROLE_MODEL) {
            chat_err(err, errlen,
                     "chat: message %d has unknown role '%s' (want system, developer, user, assistant or model)", i,
                     r ? r : "(null)");
            return NULL;
        }
    }
    chat_sb b = {0};
    sb_puts(&b, "<bos>");
    if (o.enable_thinking || has_system || tools) {
        sb_puts(&b, "<|turn>system\n");
        if (o.enable_thinking) sb_puts(&b, "<|think|>");
        if (has_system) put_trimmed(&b, msgs[0].content);
        if (tools) sb_puts(&b, tools);
        sb_puts(&b, "<turn|>\n");
    }
    bool open_responses = false; /* the last turn ended with tool responses and was left open */
    for (int i = has_system ? 1 : 0; i < n; i++) {
        bool model = parse_role(msgs[i].role) == ROLE_MODEL;
        const char *calls = tt && tt->calls ? tt->calls[i] : NULL;
        const char *resp = tt && tt->responses ? tt->responses[i] : NULL;
        sb_puts(&b, model ? "<|turn>model\n" : "<|turn>user\n");
        if (calls) sb_puts(&b, calls);
        if (resp) sb_puts(&b, resp);
        if (model)
            put_stripped_thinking(&b, msgs[i].content);
        else
            put_trimmed(&b, msgs[i].content);
        open_responses = resp && resp[0] && !msgs[i].content[0];
        if (!open_responses) sb_puts(&b, "<turn|>\n");
    }
    if (o.add_generation_prompt) {
        if (!open_responses) sb_puts(&b, "<|turn>model\n");
        if (!o.enable_thinking && o.empty_thought) sb_puts(&b, "<|channel>thought\n<channel|>");
    }
    if (b.oom) {
        free(b.buf);
        chat_err(err, errlen, "chat: out of memory");
        return NULL;
    }
    return b.buf;
}

ls_chat_style ls_chat_style_of(const ls_tokenizer *t) {
    if (ls_tokenizer_find(t, "<|turn>") >= 0 && ls_tokenizer_find(t, "<turn|>") >= 0) return LS_CHAT_GEMMA4;
    if (ls_tokenizer_find(t, "<start_of_turn>") >= 0 && ls_tokenizer_find(t, "<end_of_turn>") >= 0)
        return LS_CHAT_GEMMA3;
    return LS_CHAT_UNKNOWN;
}

char *ls_chat_render(const ls_tokenizer *t, const ls_chat_msg *msgs, int n, const ls_chat_opts *opts, char *err,
                     size_t errlen) {
    ls_chat_opts o = opts ? *opts : ls_chat_opts_default();
    switch (ls_chat_style_of(t)) {
    case LS_CHAT_GEMMA4: return ls_chat_render_gemma4(msgs, n, &o, err, errlen);
    case LS_CHAT_GEMMA3: return ls_chat_render_gemma3(msgs, n, o.add_generation_prompt, err, errlen);
    default:
        chat_err(err, errlen,
                 "chat: the vocabulary has neither Gemma 4 (<|turn>) nor Gemma 3 (<start_of_turn>) turn tokens");
        return NULL;
    }
}
