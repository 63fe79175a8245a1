/* GGUF tokenizer metadata (tokenizer.ggml.*) -> ls_tokenizer: model "llama" (SentencePiece,
 * Gemma 3) or "gemma4" (merge-rank BPE, Gemma 4), with llama.cpp's defaults for absent keys
 * so ids equal llama.cpp's (docs/tokenizer.md). The file is untrusted: every array is
 * type- and length-checked before ls_tokenizer_create (tokenizer.c) copies it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Optional u32 id key: absent -> dflt; present but not a u32-compatible integer -> error. */
static int gguf_id(const gguf_file *f, const char *key, int32_t dflt, int32_t *out, char *err, size_t errlen) {
    uint32_t v;
    int rc = ls_gguf_get_u32(f, key, &v);
    if (rc == -1) {
        *out = dflt;
        return 0;
    }
    if (rc != 0 || v > INT32_MAX) {
        set_err(err, errlen, "tokenizer: %s has a bad type or value", key);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int gguf_flag(const gguf_file *f, const char *key, bool dflt, bool *out, char *err, size_t errlen) {
    int v;
    int rc = ls_gguf_get_bool(f, key, &v);
    if (rc == -1) {
        *out = dflt;
        return 0;
    }
    if (rc != 0) {
        set_err(err, errlen, "tokenizer: %s is not a bool", key);
        return -1;
    }
    *out = v != 0;
    return 0;
}

static uint32_t rd_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The metadata arrays a tokenizer is read from (checked, still in the mapped file). */
typedef struct {
    bool is_bpe;
    const gguf_value *merges; /* NULL for SPM */
    const gguf_value *toks;
    const gguf_value *scores, *types; /* NULL when absent */
    uint64_t n;                       /* vocab size */
} gguf_tok_arrays;

/* tokenizer.ggml.model, and for gemma4 tokenizer.ggml.merges. */
static int read_model(const gguf_file *f, gguf_tok_arrays *a, char *err, size_t errlen) {
    gguf_str model;
    int rc = ls_gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (rc != 0) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.model %s", rc == -1 ? "missing" : "is not a string");
        return -1;
    }
    a->is_bpe = model.len == 6 && memcmp(model.ptr, "gemma4", 6) == 0;
    if (!a->is_bpe && (model.len != 5 || memcmp(model.ptr, "llama", 5) != 0)) {
        set_err(
            err, errlen,
            "tokenizer: unsupported tokenizer.ggml.model '%.*s' (only \"llama\" / SentencePiece and \"gemma4\" / BPE)",
            (int)(model.len > 64 ? 64 : model.len), model.ptr);
        return -1;
    }
    if (!a->is_bpe) return 0;
    const gguf_value *merges = NULL;
    rc = ls_gguf_get_arr(f, "tokenizer.ggml.merges", &merges);
    if (rc != 0 || merges->v.arr.elem != GGUF_VT_STRING || (merges->v.arr.count && !merges->v.arr.items)) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.merges %s",
                rc == -1 ? "missing (required for gemma4)" : "is not an array of strings");
        return -1;
    }
    if (merges->v.arr.count > (1u << 26)) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.merges has %llu entries (too many)",
                (unsigned long long)merges->v.arr.count);
        return -1;
    }
    a->merges = merges;
    return 0;
}

/* tokenizer.ggml.tokens, and the optional scores and token_type of the same length. */
static int read_vocab_arrays(const gguf_file *f, gguf_tok_arrays *a, char *err, size_t errlen) {
    const gguf_value *toks, *scores = NULL, *types = NULL;
    int rc = ls_gguf_get_arr(f, "tokenizer.ggml.tokens", &toks);
    if (rc != 0 || toks->v.arr.elem != GGUF_VT_STRING || !toks->v.arr.items) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.tokens %s",
                rc == -1 ? "missing" : "is not an array of strings");
        return -1;
    }
    uint64_t n = toks->v.arr.count;
    if (n < 1 || n > TOK_MAX_VOCAB) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.tokens has %llu entries (want 1..%d)", (unsigned long long)n,
                TOK_MAX_VOCAB);
        return -1;
    }
    rc = ls_gguf_get_arr(f, "tokenizer.ggml.scores", &scores);
    if (rc == -1)
        scores = NULL; /* optional, as in llama.cpp: all 0 */
    else if (rc != 0 || scores->v.arr.elem != GGUF_VT_F32 || scores->v.arr.count != n || !scores->v.arr.data) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.scores must be %llu f32 values", (unsigned long long)n);
        return -1;
    }
    rc = ls_gguf_get_arr(f, "tokenizer.ggml.token_type", &types);
    if (rc == -1)
        types = NULL; /* optional: all normal */
    else if (rc != 0 || (types->v.arr.elem != GGUF_VT_I32 && types->v.arr.elem != GGUF_VT_U32) ||
             types->v.arr.count != n || !types->v.arr.data) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.token_type must be %llu i32 values", (unsigned long long)n);
        return -1;
    }
    a->toks = toks;
    a->scores = scores;
    a->types = types;
    a->n = n;
    return 0;
}

/* Special ids and flags into d, with llama.cpp's defaults when a key is absent. */
static int read_specials(const gguf_file *f, const gguf_tok_arrays *a, ls_tokenizer_desc *d, char *err, size_t errlen) {
    /* llama.cpp's defaults when a key is absent: SPM 1/2/0, gemma4 none. */
    int32_t dflt_bos = a->n > 1 ? 1 : -1, dflt_eos = a->n > 2 ? 2 : -1, dflt_unk = 0;
    if (a->is_bpe) dflt_bos = dflt_eos = dflt_unk = -1;
    if (gguf_id(f, "tokenizer.ggml.bos_token_id", dflt_bos, &d->bos, err, errlen) ||
        gguf_id(f, "tokenizer.ggml.eos_token_id", dflt_eos, &d->eos, err, errlen) ||
        gguf_id(f, "tokenizer.ggml.unknown_token_id", dflt_unk, &d->unk, err, errlen) ||
        gguf_id(f, "tokenizer.ggml.padding_token_id", -1, &d->pad, err, errlen) ||
        gguf_id(f, "tokenizer.ggml.eot_token_id", -1, &d->eot, err, errlen) ||
        gguf_id(f, "tokenizer.ggml.eom_token_id", -1, &d->eom, err, errlen) ||
        gguf_flag(f, "tokenizer.ggml.add_bos_token", true, &d->add_bos, err, errlen) ||
        gguf_flag(f, "tokenizer.ggml.add_space_prefix", true, &d->add_space_prefix, err, errlen))
        return -1;
    if (a->is_bpe) {
        /* llama.cpp forces add_bos on for Gemma 4 (PR 21500) and its BPE path never adds a
         * space prefix. */
        d->add_bos = true;
        d->add_space_prefix = false;
        d->model = LS_TOKENIZER_MODEL_BPE;
    }
    return 0;
}

/* The arrays ls_tokenizer_create copies from (pointing into the mapped file). */
typedef struct {
    const char **texts;
    uint64_t *lens;
    float *sc;
    int32_t *ty;
    const char **ma, **mb;
    uint64_t *mla, *mlb;
} gguf_tok_views;

static void views_free(gguf_tok_views *v) {
    free(v->texts);
    free(v->lens);
    free(v->sc);
    free(v->ty);
    free(v->ma);
    free(v->mb);
    free(v->mla);
    free(v->mlb);
}

static int views_alloc(const gguf_tok_arrays *a, gguf_tok_views *v, char *err, size_t errlen) {
    uint64_t n = a->n, nm = a->merges ? a->merges->v.arr.count : 0;
    v->texts = malloc(n * sizeof *v->texts);
    v->lens = malloc(n * sizeof *v->lens);
    v->sc = a->scores ? malloc(n * sizeof *v->sc) : NULL;
    v->ty = a->types ? malloc(n * sizeof *v->ty) : NULL;
    if (a->merges) {
        v->ma = malloc((nm ? nm : 1) * sizeof *v->ma);
        v->mb = malloc((nm ? nm : 1) * sizeof *v->mb);
        v->mla = malloc((nm ? nm : 1) * sizeof *v->mla);
        v->mlb = malloc((nm ? nm : 1) * sizeof *v->mlb);
    }
    if (!v->texts || !v->lens || (a->scores && !v->sc) || (a->types && !v->ty) ||
        (a->merges && (!v->ma || !v->mb || !v->mla || !v->mlb))) {
        set_err(err, errlen, "tokenizer: out of memory");
        return LS_ERR_NOMEM;
    }
    return 0;
}

/* "a b": split at the first space after the first byte, as llama.cpp does (a merge
 * without one becomes ("", ""), which never applies). */
static int split_merges(const gguf_value *merges, gguf_tok_views *v, char *err, size_t errlen) {
    uint64_t nm = merges ? merges->v.arr.count : 0;
    for (uint64_t i = 0; i < nm; i++) {
        const gguf_value *m = &merges->v.arr.items[i];
        if (m->type != GGUF_VT_STRING) {
            set_err(err, errlen, "tokenizer: merge %llu is not a string", (unsigned long long)i);
            return -1;
        }
        const char *w = m->v.s.ptr;
        uint64_t wl = m->v.s.len, sp = 0;
        for (uint64_t j = 1; j < wl && !sp; j++)
            if (w[j] == ' ') sp = j;
        v->ma[i] = w;
        v->mb[i] = sp ? w + sp + 1 : w;
        v->mla[i] = sp;
        v->mlb[i] = sp ? wl - sp - 1 : 0;
    }
    return 0;
}

static int fill_tokens(const gguf_tok_arrays *a, gguf_tok_views *v, char *err, size_t errlen) {
    for (uint64_t i = 0; i < a->n; i++) {
        const gguf_value *t = &a->toks->v.arr.items[i];
        if (t->type != GGUF_VT_STRING) {
            set_err(err, errlen, "tokenizer: token %llu is not a string", (unsigned long long)i);
            return -1;
        }
        v->texts[i] = t->v.s.ptr;
        v->lens[i] = t->v.s.len;
        /* Raw little-endian elements; memcpy avoids unaligned loads. */
        if (v->sc) {
            uint32_t bits = rd_u32le(a->scores->v.arr.data + 4 * i);
            memcpy(&v->sc[i], &bits, 4);
        }
        if (v->ty) {
            uint32_t bits = rd_u32le(a->types->v.arr.data + 4 * i);
            if (a->types->v.arr.elem == GGUF_VT_U32 && bits > INT32_MAX) bits = 0xFFFFFFFFu; /* -> invalid type */
            memcpy(&v->ty[i], &bits, 4);
        }
    }
    return 0;
}

int ls_tokenizer_from_gguf(const gguf_file *f, ls_tokenizer **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!f || !out) {
        set_err(err, errlen, "tokenizer: NULL argument");
        return -1;
    }
    gguf_tok_arrays a = {0};
    ls_tokenizer_desc d = {0};
    if (read_model(f, &a, err, errlen) || read_vocab_arrays(f, &a, err, errlen)) return -1;
    d.n_vocab = (int32_t)a.n;
    if (read_specials(f, &a, &d, err, errlen)) return -1;
    gguf_tok_views v = {0};
    int rc = views_alloc(&a, &v, err, errlen);
    if (rc == 0 && (rc = split_merges(a.merges, &v, err, errlen)) == 0 &&
        (rc = fill_tokens(&a, &v, err, errlen)) == 0) {
        d.n_merges = a.merges ? (int64_t)a.merges->v.arr.count : 0;
        d.merge_a = v.ma;
        d.merge_b = v.mb;
        d.merge_la = v.mla;
        d.merge_lb = v.mlb;
        d.texts = v.texts;
        d.lens = v.lens;
        d.scores = v.sc;
        d.types = v.ty;
        rc = ls_tokenizer_create(&d, out, err, errlen);
    }
    views_free(&v);
    return rc;
}
