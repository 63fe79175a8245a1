/* Hugging Face tokenizer.json (model.type "BPE") -> ls_tokenizer, with cJSON.
 *
 * What Gemma 3's file holds (and Gemma 4's, per its model card and llama.cpp's converter):
 * a BPE model with byte_fallback, 262k vocab entries, ~515k merges (Gemma 3: ["a", "b"]
 * pairs; older files: "a b" strings), ~6.4k added tokens (special: true for <bos>,
 * <start_of_turn>...; false for whitespace runs, HTML tags, <unusedN>), the normalizer
 * Replace(" " -> "▁") (no Prepend: no dummy prefix), the pre-tokenizer Split(" ",
 * MergedWithPrevious) (a no-op after that normalizer), and a TemplateProcessing
 * post-processor that puts <bos> first.
 *
 * Mapping onto ls_tokenizer: added special tokens become CONTROL (matched only with
 * parse_special), other added tokens USER_DEFINED (always matched), "<0xXX>" vocab entries
 * BYTE, the rest NORMAL; matching follows HF (leftmost-longest), not llama.cpp (see
 * tokenizer.c). Anything that would change ids and that we do not implement is rejected
 * with a message rather than ignored: other model types, dropout, subword prefixes/suffixes,
 * added tokens with normalized/lstrip/rstrip/single_word, regex patterns, other normalizer
 * or pre-tokenizer types. The file is untrusted: every id is range-checked (0..2^24), every
 * field type-checked, holes and duplicate ids rejected, and merges must name vocab tokens
 * (as HF requires). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tokenizer/tok_internal.h"

#define JSON_MAX_VOCAB (1 << 24)
#define JSON_MAX_FILE  ((size_t)1 << 30)

static void jerr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void jerr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(err, errlen, "tokenizer.json: ");
    if (k > 0 && (size_t)k < errlen) vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

/* Integral id in [0, JSON_MAX_VOCAB), else -1. */
static int32_t json_id(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < JSON_MAX_VOCAB) || floor(d) != d) return -1;
    return (int32_t)d;
}

/* Optional bool member: absent/null -> dflt; 1 if present and not a bool. */
static int json_bool(const cJSON *obj, const char *key, bool dflt, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v)) return 1;
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A member that must be null, absent, or one of the harmless values. */
static bool json_null_or_empty(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0') ||
           (cJSON_IsNumber(v) && v->valuedouble == 0);
}

/* The text of a special-token setting in tokenizer_config.json: "text" or {"content": "text"}. */
static const char *cfg_token_text(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Normalizer -> t->norm steps. Returns 0, or -1 + message. */
static int parse_normalizer(const cJSON *nz, ls_tokenizer *t, char *err, size_t errlen, int depth) {
    if (!nz || cJSON_IsNull(nz)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(nz, "type");
    if (!cJSON_IsObject(nz) || !cJSON_IsString(type)) {
        jerr(err, errlen, "normalizer must be an object with a string \"type\"");
        return -1;
    }
    const char *ty = type->valuestring;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(nz, "normalizers");
        if (!cJSON_IsArray(list) || depth > 4) {
            jerr(err, errlen, "normalizer Sequence needs a \"normalizers\" array");
            return -1;
        }
        const cJSON *c;
        int rc;
        cJSON_ArrayForEach(c, list) if ((rc = parse_normalizer(c, t, err, errlen, depth + 1)) != 0) return rc;
        return 0;
    }
    if (t->n_norm >= TOK_MAX_PIPELINE) {
        jerr(err, errlen, "too many normalizer steps (max %d)", TOK_MAX_PIPELINE);
        return -1;
    }
    tok_step *st = &t->norm[t->n_norm];
    if (strcmp(ty, "Replace") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(nz, "pattern");
        const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(nz, "content");
        if (!cJSON_IsString(lit) || !cJSON_IsString(content) || lit->valuestring[0] == '\0') {
            jerr(err, errlen,
                 "normalizer Replace: only a non-empty {\"String\": ...} pattern and a string content are supported");
            return -1;
        }
        st->kind = TOK_NORM_REPLACE;
        st->la = strlen(lit->valuestring);
        st->lb = strlen(content->valuestring);
        st->a = dup_n(lit->valuestring, st->la);
        st->b = dup_n(content->valuestring, st->lb);
    } else if (strcmp(ty, "Prepend") == 0) {
        const cJSON *pre = cJSON_GetObjectItemCaseSensitive(nz, "prepend");
        if (!cJSON_IsString(pre)) {
            jerr(err, errlen, "normalizer Prepend needs a string \"prepend\"");
            return -1;
        }
        st->kind = TOK_NORM_PREPEND;
        st->lb = strlen(pre->valuestring);
        st->b = dup_n(pre->valuestring, st->lb);
        st->a = dup_n("", 0);
    } else {
        jerr(err, errlen, "unsupported normalizer type '%.40s' (supported: Replace, Prepend, Sequence)", ty);
        return -1;
    }
    t->n_norm++;
    if (!st->a || !st->b) {
        jerr(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    return 0;
}

static int parse_pretok(const cJSON *pt, ls_tokenizer *t, char *err, size_t errlen, int depth) {
    if (!pt || cJSON_IsNull(pt)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsObject(pt) || !cJSON_IsString(type)) {
        jerr(err, errlen, "pre_tokenizer must be an object with a string \"type\"");
        return -1;
    }
    const char *ty = type->valuestring;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list) || depth > 4) {
            jerr(err, errlen, "pre_tokenizer Sequence needs a \"pretokenizers\" array");
            return -1;
        }
        const cJSON *c;
        int rc;
        cJSON_ArrayForEach(c, list) if ((rc = parse_pretok(c, t, err, errlen, depth + 1)) != 0) return rc;
        return 0;
    }
    if (strcmp(ty, "Split") != 0) {
        jerr(err, errlen, "unsupported pre_tokenizer type '%.40s' (supported: Split on a string, Sequence)", ty);
        return -1;
    }
    if (t->n_pre >= TOK_MAX_PIPELINE) {
        jerr(err, errlen, "too many pre_tokenizer steps (max %d)", TOK_MAX_PIPELINE);
        return -1;
    }
    const cJSON *lit = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pt, "pattern"), "String");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
    bool invert;
    if (!cJSON_IsString(lit) || lit->valuestring[0] == '\0' || !cJSON_IsString(beh) ||
        json_bool(pt, "invert", false, &invert) || invert) {
        jerr(err, errlen,
             "pre_tokenizer Split: only a non-empty {\"String\": ...} pattern, a string behavior and "
             "invert false are supported");
        return -1;
    }
    static const struct {
        const char *name;
        int kind;
    } behs[] = {{"Removed", TOK_SPLIT_REMOVED},
                {"Isolated", TOK_SPLIT_ISOLATED},
                {"MergedWithPrevious", TOK_SPLIT_MERGED_PREV},
                {"MergedWithNext", TOK_SPLIT_MERGED_NEXT},
                {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
    int kind = 0;
    for (size_t i = 0; i < sizeof behs / sizeof *behs; i++)
        if (strcmp(beh->valuestring, behs[i].name) == 0) kind = behs[i].kind;
    if (!kind) {
        jerr(err, errlen, "pre_tokenizer Split: unknown behavior '%.40s'", beh->valuestring);
        return -1;
    }
    tok_step *st = &t->pre[t->n_pre++];
    st->kind = kind;
    st->la = strlen(lit->valuestring);
    st->a = dup_n(lit->valuestring, st->la);
    st->b = dup_n("", 0);
    if (!st->a || !st->b) {
        jerr(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    return 0;
}

/* True if the decoder (or a step of its Sequence) replaces U+2581 with a space. */
static bool decoder_unescapes(const cJSON *dec, int depth) {
    if (!cJSON_IsObject(dec) || depth > 4) return false;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(dec, "type");
    if (!cJSON_IsString(type)) return false;
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *c;
        cJSON_ArrayForEach(
            c, cJSON_GetObjectItemCaseSensitive(dec, "decoders")) if (decoder_unescapes(c, depth + 1)) return true;
        return false;
    }
    const cJSON *lit = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(dec, "pattern"), "String");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(dec, "content");
    return strcmp(type->valuestring, "Replace") == 0 && cJSON_IsString(lit) && cJSON_IsString(content) &&
           strcmp(lit->valuestring, "\xE2\x96\x81") == 0 && strcmp(content->valuestring, " ") == 0;
}

/* BOS named by a TemplateProcessing post-processor: its "single" template starts with a
 * SpecialToken whose "ids" list has one id. -1 if none. */
static int32_t post_processor_bos(const cJSON *pp) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pp, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "TemplateProcessing") != 0 || !cJSON_IsArray(single))
        return -1;
    const cJSON *first = cJSON_GetArrayItem(single, 0);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
    if (!cJSON_IsString(name)) return -1;
    const cJSON *entry =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pp, "special_tokens"), name->valuestring);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
    if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) != 1) return -1;
    return json_id(cJSON_GetArrayItem(ids, 0));
}

/* Everything read from tokenizer.json (and tokenizer_config.json) on the way to an
 * ls_tokenizer_desc. The strings point into the cJSON trees. */
typedef struct {
    cJSON *root, *cfg;
    const cJSON *model, *vocab, *merges, *added;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t n;          /* vocab size: the largest id + 1 */
    const char **texts; /* [n] */
    uint64_t *lens;     /* [n] */
    int32_t *types;     /* [n] */
    uint8_t *in_model;  /* [n] 1 if the id is in model.vocab (not only an added token) */
    int nm;             /* merges */
    const char **ma, **mb;
    uint64_t *mla, *mlb; /* [nm] */
} json_tok;

static void json_tok_free(json_tok *j) {
    cJSON_Delete(j->root);
    cJSON_Delete(j->cfg);
    free(j->texts);
    free(j->lens);
    free(j->types);
    free(j->in_model);
    free(j->ma);
    free(j->mb);
    free(j->mla);
    free(j->mlb);
}

/* Parses both files and checks the model object's type and flags. */
static int parse_model(json_tok *j, const char *json, size_t len, const char *config_json, size_t config_len, char *err,
                       size_t errlen) {
    const char *end = NULL;
    j->root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!j->root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t at = ep && ep >= json && ep <= json + len ? (size_t)(ep - json) : len;
        jerr(err, errlen, "malformed JSON (truncated or invalid) near byte %zu of %zu", at, len);
        return -1;
    }
    if (config_json) {
        j->cfg = cJSON_ParseWithLengthOpts(config_json, config_len, &end, 0);
        if (!cJSON_IsObject(j->cfg)) {
            jerr(err, errlen, "tokenizer_config.json is not a valid JSON object");
            return -1;
        }
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j->root, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(j->root) || !cJSON_IsObject(model)) {
        jerr(err, errlen, "missing \"model\" object");
        return -1;
    }
    if (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE") != 0) {
        jerr(err, errlen, "model.type must be \"BPE\" (got %s%.40s%s)", cJSON_IsString(mtype) ? "'" : "",
             cJSON_IsString(mtype) ? mtype->valuestring : "none", cJSON_IsString(mtype) ? "'" : "");
        return -1;
    }
    if (!json_null_or_empty(model, "dropout") || !json_null_or_empty(model, "continuing_subword_prefix") ||
        !json_null_or_empty(model, "end_of_word_suffix")) {
        jerr(err, errlen, "model: dropout, continuing_subword_prefix and end_of_word_suffix are not supported");
        return -1;
    }
    if (json_bool(model, "byte_fallback", false, &j->byte_fallback) ||
        json_bool(model, "fuse_unk", false, &j->fuse_unk) ||
        json_bool(model, "ignore_merges", false, &j->ignore_merges)) {
        jerr(err, errlen, "model: byte_fallback, fuse_unk and ignore_merges must be booleans");
        return -1;
    }
    j->model = model;
    j->vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    j->merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    j->added = cJSON_GetObjectItemCaseSensitive(j->root, "added_tokens");
    if (!cJSON_IsObject(j->vocab)) {
        jerr(err, errlen, "model.vocab must be an object of token -> id");
        return -1;
    }
    if (!cJSON_IsArray(j->merges)) {
        jerr(err, errlen, "model.merges must be an array");
        return -1;
    }
    if (j->added && !cJSON_IsNull(j->added) && !cJSON_IsArray(j->added)) {
        jerr(err, errlen, "added_tokens must be an array");
        return -1;
    }
    return 0;
}

/* Vocab size: the largest id + 1, over the vocab and the added tokens (ids range-checked). */
static int count_vocab(json_tok *j, char *err, size_t errlen) {
    int32_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, j->vocab) {
        int32_t id = json_id(it);
        if (id < 0) {
            jerr(err, errlen, "vocab entry '%.60s': id must be an integer in [0, %d)", it->string, JSON_MAX_VOCAB);
            return -1;
        }
        if (id + 1 > n) n = id + 1;
    }
    cJSON_ArrayForEach(it, j->added) {
        const cJSON *idv = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        int32_t id = json_id(idv);
        if (!cJSON_IsObject(it) || id < 0 || !cJSON_IsString(content)) {
            jerr(err, errlen, "added_tokens: each entry needs an integer \"id\" in [0, %d) and a string \"content\"",
                 JSON_MAX_VOCAB);
            return -1;
        }
        if (id + 1 > n) n = id + 1;
    }
    if (n == 0) {
        jerr(err, errlen, "empty vocab");
        return -1;
    }
    j->n = n;
    return 0;
}

/* model.vocab entries: NORMAL, or BYTE for SentencePiece byte pieces "<0xXX>" (as HF's
 * ByteFallback decoder reads them). */
static int read_vocab(json_tok *j, char *err, size_t errlen) {
    const cJSON *it;
    cJSON_ArrayForEach(it, j->vocab) {
        int32_t id = json_id(it);
        if (j->texts[id]) {
            jerr(err, errlen, "vocab: id %d is used by '%.60s' and '%.60s'", id, j->texts[id], it->string);
            return -1;
        }
        const char *s = it->string;
        j->texts[id] = s;
        j->lens[id] = strlen(s);
        j->in_model[id] = 1;
        j->types[id] = LS_TOKEN_NORMAL;
        if (j->byte_fallback && j->lens[id] == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
            strchr("0123456789ABCDEF", s[3]) && strchr("0123456789ABCDEF", s[4]) && s[3] && s[4])
            j->types[id] = LS_TOKEN_BYTE;
    }
    return 0;
}

/* added_tokens: CONTROL when special, else USER_DEFINED; then every id must have a text. */
static int read_added(json_tok *j, char *err, size_t errlen) {
    const cJSON *it;
    cJSON_ArrayForEach(it, j->added) {
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(it, "id"));
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        bool special, normalized, lstrip, rstrip, single_word;
        if (json_bool(it, "special", false, &special) || json_bool(it, "normalized", false, &normalized) ||
            json_bool(it, "lstrip", false, &lstrip) || json_bool(it, "rstrip", false, &rstrip) ||
            json_bool(it, "single_word", false, &single_word)) {
            jerr(err, errlen, "added token %d: special/normalized/lstrip/rstrip/single_word must be booleans", id);
            return -1;
        }
        if (normalized || lstrip || rstrip || single_word) {
            jerr(err, errlen, "added token %d ('%.60s'): normalized, lstrip, rstrip and single_word are not supported",
                 id, content);
            return -1;
        }
        if (content[0] == '\0') {
            jerr(err, errlen, "added token %d has empty content", id);
            return -1;
        }
        if (j->texts[id] && strcmp(j->texts[id], content) != 0) {
            jerr(err, errlen, "added token %d ('%.60s') conflicts with '%.60s' at that id", id, content, j->texts[id]);
            return -1;
        }
        j->texts[id] = content;
        j->lens[id] = strlen(content);
        j->types[id] = special ? LS_TOKEN_CONTROL : LS_TOKEN_USER_DEFINED;
    }
    for (int32_t i = 0; i < j->n; i++)
        if (!j->texts[i]) {
            jerr(err, errlen, "no token has id %d (ids must be 0..%d without gaps)", i, j->n - 1);
            return -1;
        }
    return 0;
}

/* Merges: "a b" or ["a", "b"]. */
static int read_merges(json_tok *j, char *err, size_t errlen) {
    int nm = cJSON_GetArraySize(j->merges);
    j->nm = nm;
    j->ma = malloc((size_t)(nm ? nm : 1) * sizeof *j->ma);
    j->mb = malloc((size_t)(nm ? nm : 1) * sizeof *j->mb);
    j->mla = malloc((size_t)(nm ? nm : 1) * sizeof *j->mla);
    j->mlb = malloc((size_t)(nm ? nm : 1) * sizeof *j->mlb);
    if (!j->ma || !j->mb || !j->mla || !j->mlb) {
        jerr(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, j->merges) {
        if (cJSON_IsString(it)) {
            const char *w = it->valuestring, *sp = w[0] ? strchr(w + 1, ' ') : NULL;
            if (!sp || sp[1] == '\0') {
                jerr(err, errlen, "merge %d ('%.60s') is not of the form \"a b\"", k, w);
                return -1;
            }
            j->ma[k] = w;
            j->mla[k] = (uint64_t)(sp - w);
            j->mb[k] = sp + 1;
            j->mlb[k] = strlen(sp + 1);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            j->ma[k] = cJSON_GetArrayItem(it, 0)->valuestring;
            j->mb[k] = cJSON_GetArrayItem(it, 1)->valuestring;
            j->mla[k] = strlen(j->ma[k]);
            j->mlb[k] = strlen(j->mb[k]);
        } else {
            jerr(err, errlen, "merge %d must be a string \"a b\" or an array [\"a\", \"b\"]", k);
            return -1;
        }
        k++;
    }
    return 0;
}

/* Special ids into d: tokenizer_config.json, else the post-processor and the usual texts,
 * looked up on t (built without specials). */
static int resolve_specials(const json_tok *j, const ls_tokenizer *t, ls_tokenizer_desc *d, char *err, size_t errlen) {
    const cJSON *unk_tok = cJSON_GetObjectItemCaseSensitive(j->model, "unk_token");
    if (unk_tok && !cJSON_IsNull(unk_tok) && !cJSON_IsString(unk_tok)) {
        jerr(err, errlen, "model.unk_token must be a string or null");
        return -1;
    }
    int32_t pp_bos = post_processor_bos(cJSON_GetObjectItemCaseSensitive(j->root, "post_processor"));
    if (pp_bos >= j->n) pp_bos = -1;
    const cJSON *cfg = j->cfg;
    const char *bos_text = cfg ? cfg_token_text(cfg, "bos_token") : NULL;
    const char *eos_text = cfg ? cfg_token_text(cfg, "eos_token") : NULL;
    const char *pad_text = cfg ? cfg_token_text(cfg, "pad_token") : NULL;
    d->bos = bos_text ? ls_tokenizer_find(t, bos_text) : pp_bos >= 0 ? pp_bos : ls_tokenizer_find(t, "<bos>");
    d->eos = ls_tokenizer_find(t, eos_text ? eos_text : "<eos>");
    d->pad = ls_tokenizer_find(t, pad_text ? pad_text : "<pad>");
    d->unk = cJSON_IsString(unk_tok) ? ls_tokenizer_find(t, unk_tok->valuestring) : -1;
    if (cJSON_IsString(unk_tok) && d->unk < 0) {
        jerr(err, errlen, "model.unk_token '%.60s' is not in the vocab", unk_tok->valuestring);
        return -1;
    }
    bool add_bos = pp_bos >= 0;
    if (cfg && json_bool(cfg, "add_bos_token", add_bos, &add_bos)) {
        jerr(err, errlen, "tokenizer_config.json: add_bos_token must be a boolean");
        return -1;
    }
    /* Gemma 4's files say add_bos_token = false because its chat template writes <bos>; like
     * llama.cpp we always start a Gemma 4 sequence with BOS (docs/gemma.md section 7). */
    if (ls_tokenizer_find(t, "<|turn>") >= 0 && d->bos >= 0) add_bos = true;
    d->add_bos = add_bos && d->bos >= 0;
    return 0;
}

/* Merges must name model-vocab tokens, and so must their result (HF refuses otherwise). */
static int check_merges(const json_tok *j, const ls_tokenizer *t, char *err, size_t errlen) {
    size_t jcap = 1;
    for (int i = 0; i < j->nm; i++)
        if (j->mla[i] + j->mlb[i] > jcap) jcap = j->mla[i] + j->mlb[i];
    char *joined = malloc(jcap);
    if (!joined) {
        jerr(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    for (int i = 0; i < j->nm; i++) {
        int32_t a = ls_tokenizer_find_n(t, j->ma[i], j->mla[i]), b = ls_tokenizer_find_n(t, j->mb[i], j->mlb[i]);
        memcpy(joined, j->ma[i], j->mla[i]);
        memcpy(joined + j->mla[i], j->mb[i], j->mlb[i]);
        int32_t ab = ls_tokenizer_find_n(t, joined, j->mla[i] + j->mlb[i]);
        if (a < 0 || b < 0 || ab < 0 || !j->in_model[a] || !j->in_model[b] || !j->in_model[ab]) {
            free(joined);
            jerr(err, errlen, "merge %d ('%.40s' '%.40s') refers to a token that is not in model.vocab", i, j->ma[i],
                 j->mb[i]);
            return -1;
        }
    }
    free(joined);
    return 0;
}

/* Reads both files into j (vocab, added tokens, merges: every id and field checked). */
static int read_json_tok(json_tok *j, const char *json, size_t len, const char *config_json, size_t config_len,
                         char *err, size_t errlen) {
    if (parse_model(j, json, len, config_json, config_len, err, errlen) || count_vocab(j, err, errlen)) return -1;
    j->texts = calloc((size_t)j->n, sizeof *j->texts);
    j->lens = calloc((size_t)j->n, sizeof *j->lens);
    j->types = calloc((size_t)j->n, sizeof *j->types);
    j->in_model = calloc((size_t)j->n, 1);
    if (!j->texts || !j->lens || !j->types || !j->in_model) {
        jerr(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    if (read_vocab(j, err, errlen) || read_added(j, err, errlen)) return -1;
    return read_merges(j, err, errlen);
}

int ls_tokenizer_from_json_mem(const char *json, size_t len, const char *config_json, size_t config_len,
                               ls_tokenizer **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!json || !out) {
        jerr(err, errlen, "NULL argument");
        return -1;
    }
    json_tok j = {0};
    ls_tokenizer *t = NULL;
    int rc = -1;
    if ((rc = read_json_tok(&j, json, len, config_json, config_len, err, errlen)) != 0) goto done;
    ls_tokenizer_desc d = {
        .n_vocab = j.n,
        .texts = j.texts,
        .lens = j.lens,
        .types = j.types,
        .model = LS_TOKENIZER_MODEL_BPE,
        .hf = true,
        .ignore_merges = j.ignore_merges,
        .n_merges = j.nm,
        .merge_a = j.ma,
        .merge_b = j.mb,
        .merge_la = j.mla,
        .merge_lb = j.mlb,
        .bos = -1,
        .eos = -1,
        .unk = -1,
        .pad = -1,
        .eot = -1,
        .eom = -1,
    };
    /* Built once without specials: resolving them needs the text -> id map; they are set on
     * the built tokenizer afterwards (ls_tok_set_specials, as ls_tokenizer_create sets them). */
    if ((rc = ls_tokenizer_create(&d, &t, err, errlen)) != 0 || (rc = resolve_specials(&j, t, &d, err, errlen)) != 0 ||
        (rc = check_merges(&j, t, err, errlen)) != 0 || (rc = ls_tok_set_specials(t, &d, err, errlen)) != 0)
        goto done;
    t->byte_fallback = j.byte_fallback;
    t->fuse_unk = j.fuse_unk;
    t->unescape_user = decoder_unescapes(cJSON_GetObjectItemCaseSensitive(j.root, "decoder"), 0);
    if ((rc = parse_normalizer(cJSON_GetObjectItemCaseSensitive(j.root, "normalizer"), t, err, errlen, 0)) != 0 ||
        (rc = parse_pretok(cJSON_GetObjectItemCaseSensitive(j.root, "pre_tokenizer"), t, err, errlen, 0)) != 0)
        goto done;
    *out = t;
    t = NULL;
    rc = 0;
done:
    ls_tokenizer_free(t);
    json_tok_free(&j);
    return rc;
}

/* Whole file, NUL-terminated; NULL + *why (1: it does not exist, LS_ERR_NOMEM, -1: unreadable)
 * and a message. */
static char *slurp(const char *path, size_t *len, int *why, char *err, size_t errlen) {
    *why = -1;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        *why = 1;
        jerr(err, errlen, "cannot open %s", path);
        return NULL;
    }
    char *buf = NULL;
    long sz = -1;
    if (fseek(fp, 0, SEEK_END) == 0) sz = ftell(fp);
    if (sz < 0 || (size_t)sz > JSON_MAX_FILE || fseek(fp, 0, SEEK_SET) != 0) {
        jerr(err, errlen, "%s: unreadable or larger than %zu bytes", path, JSON_MAX_FILE);
    } else if (!(buf = malloc((size_t)sz + 1))) {
        jerr(err, errlen, "out of memory");
        *why = LS_ERR_NOMEM;
    } else if (fread(buf, 1, (size_t)sz, fp) != (size_t)sz) {
        jerr(err, errlen, "%s: read error", path);
        free(buf);
        buf = NULL;
    } else {
        buf[sz] = '\0';
        *len = (size_t)sz;
    }
    fclose(fp);
    return buf;
}

int ls_tokenizer_from_json(const char *path, ls_tokenizer **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!path || !out) {
        jerr(err, errlen, "NULL argument");
        return -1;
    }
    size_t len = 0, clen = 0;
    int why;
    char *json = slurp(path, &len, &why, err, errlen);
    if (!json) return why == LS_ERR_NOMEM ? LS_ERR_NOMEM : -1;
    /* tokenizer_config.json next to it: "<dir>/<prefix>tokenizer_config.json" for
     * "<dir>/<prefix>tokenizer.json", else "<dir>/tokenizer_config.json". */
    char *cfg = NULL;
    size_t pl = strlen(path);
    char *cpath = malloc(pl + 32);
    if (!cpath) {
        free(json);
        jerr(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    if (bl >= 14 && strcmp(base + bl - 14, "tokenizer.json") == 0) {
        memcpy(cpath, path, pl - 5);
        strcpy(cpath + pl - 5, "_config.json");
        cfg = slurp(cpath, &clen, &why, err, errlen);
        if (!cfg && why != 1) goto fail;
    }
    if (!cfg) {
        memcpy(cpath, path, (size_t)(base - path));
        strcpy(cpath + (base - path), "tokenizer_config.json");
        cfg = slurp(cpath, &clen, &why, err, errlen);
        if (!cfg && why != 1) goto fail;
    }
    int rc = ls_tokenizer_from_json_mem(json, len, cfg, clen, out, err, errlen);
    free(cpath);
    free(json);
    free(cfg);
    return rc;
fail:
    free(cpath);
    free(json);
    return why == LS_ERR_NOMEM ? LS_ERR_NOMEM : -1;
}
