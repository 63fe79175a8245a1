/* Merge-rank BPE over UTF-8 symbols, as Gemma 4 ships it (GGUF tokenizer.ggml.model "gemma4")
 * and as the HF tokenizer.json of Gemma 3 / Gemma 4 describes it (model.type "BPE" with
 * byte_fallback). Two front ends feed the same merge loop:
 *
 *  - llama.cpp (GGUF "gemma4", llm_tokenizer_bpe_session with LLAMA_VOCAB_PRE_TYPE_GEMMA4):
 *    every ' ' becomes U+2581, the fragment splits into runs of '\n' and runs of anything
 *    else (the regex [^\n]+|[\n]+), a newline run that is itself a token is emitted whole
 *    (llama.cpp PR 21343), every other run is merged. A symbol that ends up outside the
 *    vocab becomes one <0xXX> token per byte; a byte without such a token is dropped, as
 *    llama.cpp drops it.
 *  - HF tokenizers (tokenizer.json): the normalizer steps (Replace, Prepend) and the
 *    pre-tokenizer steps (Split on a literal, five behaviours) run in order, then each word
 *    is merged. A character outside the vocab becomes byte tokens when byte_fallback is on
 *    and all its bytes have one, else <unk> (consecutive ones fused when fuse_unk).
 *
 * Merge loop (both): symbols start as single characters (split by lead-byte length, no
 * validation, exactly like llama.cpp's unicode_len_utf8, so invalid UTF-8 splits the same
 * way); every adjacent pair that is a merge is a candidate keyed by (rank, left index); the
 * lowest rank merges first, ties go to the leftmost pair (llama.cpp's llm_bigram_bpe
 * comparator and HF's Merge ordering agree on this). Candidates sit in a binary heap, and
 * an entry whose symbols changed since it was pushed is skipped: symbols only grow, so the
 * pair is unchanged iff both are non-empty and their sizes still add up to the recorded
 * size. Each merge pushes at most two new pairs, so a word of n symbols costs O(n log n),
 * not the O(n^2) of rescanning for the best pair.
 *
 * Merges are looked up by text (the pair's two spans), not by token id, because llama.cpp
 * keys its rank table by strings and does not require a merge's parts or result to be
 * tokens. (HF does; tokenizer_json.c checks that at load.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

#define BPE_MAX_MERGES (1 << 26)

/* ---------------------------------------------------------------------------------------
 * Merge table
 * --------------------------------------------------------------------------------------- */

static uint32_t pow2_ge(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return (uint32_t)c;
}

int32_t ls_tok_bpe_rank(const ls_tokenizer *t, const char *s, uint32_t la, uint32_t lb) {
    if (!t->merge_hash) return -1;
    uint32_t h = tok_pair_hash(s, la, lb);
    for (uint32_t i = h & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        int32_t r = t->merge_hash[i];
        if (r < 0) return -1;
        const tok_merge *m = &t->merges[r];
        if (m->h == h && m->la == la && m->lb == lb && memcmp(t->merge_blob + m->off, s, (size_t)la + lb) == 0)
            return r;
    }
}

int ls_tok_bpe_build(ls_tokenizer *t, const ls_tokenizer_desc *d, char *err, size_t errlen) {
    int64_t n = d->n_merges;
    if (n < 0 || n > BPE_MAX_MERGES) {
        if (err && errlen) snprintf(err, errlen, "tokenizer: %lld merges (want 0..%d)", (long long)n, BPE_MAX_MERGES);
        return -1;
    }
    if (n > 0 && (!d->merge_a || !d->merge_b || !d->merge_la || !d->merge_lb)) {
        if (err && errlen) snprintf(err, errlen, "tokenizer: merges given without their texts");
        return -1;
    }
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t la = d->merge_la[i], lb = d->merge_lb[i];
        if ((la && !d->merge_a[i]) || (lb && !d->merge_b[i]) || la > UINT32_MAX / 4 || lb > UINT32_MAX / 4 ||
            (total += la + lb) > (1ull << 31)) {
            if (err && errlen) snprintf(err, errlen, "tokenizer: merge %lld has bad or too large texts", (long long)i);
            return -1;
        }
    }
    t->n_merges = (int32_t)n;
    t->merge_blob = malloc(total ? total : 1);
    t->merges = malloc((size_t)(n ? n : 1) * sizeof *t->merges);
    t->merge_mask = pow2_ge((uint64_t)n * 2) - 1;
    t->merge_hash = malloc(((size_t)t->merge_mask + 1) * sizeof *t->merge_hash);
    if (!t->merge_blob || !t->merges || !t->merge_hash) {
        if (err && errlen) snprintf(err, errlen, "tokenizer: out of memory");
        return LS_ERR_NOMEM;
    }
    memset(t->merge_hash, 0xff, ((size_t)t->merge_mask + 1) * sizeof *t->merge_hash);
    uint64_t pos = 0;
    for (int32_t i = 0; i < (int32_t)n; i++) {
        uint32_t la = (uint32_t)d->merge_la[i], lb = (uint32_t)d->merge_lb[i];
        if (la) memcpy(t->merge_blob + pos, d->merge_a[i], la);
        if (lb) memcpy(t->merge_blob + pos + la, d->merge_b[i], lb);
        tok_merge *m = &t->merges[i];
        *m = (tok_merge){(uint32_t)pos, la, lb, tok_pair_hash(t->merge_blob + pos, la, lb)};
        pos += (uint64_t)la + lb;
        /* A merge with an empty side can never apply (symbols are never empty). */
        if (la == 0 || lb == 0) continue;
        uint32_t k = m->h & t->merge_mask;
        bool dup = false;
        for (; t->merge_hash[k] >= 0; k = (k + 1) & t->merge_mask) {
            const tok_merge *o = &t->merges[t->merge_hash[k]];
            if (o->h == m->h && o->la == la && o->lb == lb &&
                memcmp(t->merge_blob + o->off, t->merge_blob + m->off, (size_t)la + lb) == 0) {
                dup = true; /* keep the first (lowest) rank, like std::map::emplace in llama.cpp */
                break;
            }
        }
        if (!dup) t->merge_hash[k] = i;
    }
    return 0;
}

void ls_tok_bpe_free(ls_tokenizer *t) {
    free(t->merge_blob);
    free(t->merges);
    free(t->merge_hash);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    for (int i = 0; i < t->n_pre; i++) {
        free(t->pre[i].a);
        free(t->pre[i].b);
    }
}

/* ---------------------------------------------------------------------------------------
 * Merge loop over one word
 * --------------------------------------------------------------------------------------- */

typedef struct {
    const char *text;
    uint32_t n;         /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next; /* -1 at the ends */
} bpe_sym;

typedef struct {
    int32_t rank, left, right;
    uint32_t size; /* bytes of left + right when pushed */
} bpe_pair;

typedef struct {
    const ls_tokenizer *t;
    bpe_sym *sym;   /* [cap_sym] */
    bpe_pair *heap; /* [cap_heap] */
    size_t cap_sym, n_heap, cap_heap;
    int32_t *out;
    int64_t cap, n;
    bool oom;
} bpe_session;

static inline bool pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_session *s, bpe_pair p) {
    if (s->n_heap == s->cap_heap) {
        size_t nc = s->cap_heap ? s->cap_heap * 2 : 64;
        bpe_pair *nh = realloc(s->heap, nc * sizeof *nh);
        if (!nh) {
            s->oom = true;
            return;
        }
        s->heap = nh;
        s->cap_heap = nc;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = p;
}

static bpe_pair heap_pop(bpe_session *s) {
    bpe_pair top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!pair_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static void try_pair(bpe_session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const bpe_sym *l = &s->sym[left], *r = &s->sym[right];
    int32_t rank = ls_tok_bpe_rank(s->t, l->text, l->n, r->n); /* adjacent: r->text == l->text + l->n */
    if (rank >= 0) heap_push(s, (bpe_pair){rank, left, right, l->n + r->n});
}

static inline void emit(bpe_session *s, int32_t id) {
    if (s->n < s->cap) s->out[s->n] = id;
    s->n++;
}

/* A final symbol that is not a token: byte tokens, or (HF without a full byte fallback)
 * <unk>. *prev_unk tracks HF's fuse_unk within one word. */
static void emit_unknown(bpe_session *s, const char *p, uint32_t n, bool *prev_unk) {
    const ls_tokenizer *t = s->t;
    bool all_bytes = true;
    for (uint32_t j = 0; j < n; j++) all_bytes &= t->byte_hex[(uint8_t)p[j]] >= 0;
    if (t->hf && !(t->byte_fallback && all_bytes)) {
        if (t->unk >= 0 && !(t->fuse_unk && *prev_unk)) emit(s, t->unk);
        *prev_unk = t->unk >= 0; /* HF drops the character when there is no <unk> */
        return;
    }
    for (uint32_t j = 0; j < n; j++) {
        int32_t id = t->byte_hex[(uint8_t)p[j]];
        if (id >= 0) emit(s, id); /* llama.cpp skips a byte that has no token */
    }
    *prev_unk = false;
}

static void bpe_word(bpe_session *s, const char *w, size_t len) {
    const ls_tokenizer *t = s->t;
    if (len == 0) return;
    if (t->ignore_merges) {
        int32_t id = ls_tokenizer_find_n(t, w, len);
        if (id >= 0) {
            emit(s, id);
            return;
        }
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < len;) {
        size_t l = ls_utf8_lead_len((uint8_t)w[off]);
        if (l > len - off) l = len - off;
        s->sym[n_sym] = (bpe_sym){w + off, (uint32_t)l, n_sym - 1, off + l == len ? -1 : n_sym + 1};
        n_sym++;
        off += l;
    }
    s->n_heap = 0;
    for (int32_t i = 1; i < n_sym; i++) try_pair(s, i - 1, i);
    while (s->n_heap > 0 && !s->oom) {
        bpe_pair p = heap_pop(s);
        bpe_sym *l = &s->sym[p.left], *r = &s->sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = p.left;
        try_pair(s, l->prev, p.left);
        try_pair(s, p.left, l->next);
    }
    bool prev_unk = false;
    for (int32_t i = 0; i != -1; i = s->sym[i].next) {
        const bpe_sym *y = &s->sym[i];
        int32_t id = ls_tokenizer_find_n(t, y->text, y->n);
        if (id >= 0) {
            emit(s, id);
            prev_unk = false;
        } else {
            emit_unknown(s, y->text, y->n, &prev_unk);
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * Front ends
 * --------------------------------------------------------------------------------------- */

/* llama.cpp gemma4: runs of '\n' and runs of other bytes; a newline run that is a token
 * stays whole. (llama.cpp's regex works on code points; splitting on the byte 0x0A is the
 * same for valid UTF-8, and keeps invalid bytes intact for byte fallback.) */
static void llama_words(bpe_session *s, const char *e, size_t n) {
    for (size_t p = 0; p < n;) {
        bool nl = e[p] == '\n';
        size_t q = p;
        while (q < n && (e[q] == '\n') == nl) q++;
        int32_t id = nl ? ls_tokenizer_find_n(s->t, e + p, q - p) : -1;
        if (id >= 0)
            emit(s, id);
        else
            bpe_word(s, e + p, q - p);
        p = q;
    }
}

/* Find the next occurrence of pat in s[from..n), or n. */
static size_t find_lit(const char *s, size_t n, size_t from, const char *pat, size_t lp) {
    if (lp == 0 || lp > n) return n;
    for (size_t i = from; i + lp <= n; i++)
        if (s[i] == pat[0] && memcmp(s + i, pat, lp) == 0) return i;
    return n;
}

/* HF pre-tokenizer steps from index k on, then BPE on each resulting word. */
static void hf_pretok(bpe_session *s, int k, const char *w, size_t n) {
    const ls_tokenizer *t = s->t;
    if (n == 0) return;
    if (k == t->n_pre) {
        bpe_word(s, w, n);
        return;
    }
    const tok_step *st = &t->pre[k];
    size_t start = 0; /* start of the piece being built */
    size_t p = 0;
    while (p < n) {
        size_t m = find_lit(w, n, p, st->a, st->la);
        if (m == n) break;
        size_t e = m + st->la;
        switch (st->kind) {
        case TOK_SPLIT_REMOVED:
            hf_pretok(s, k + 1, w + start, m - start);
            start = e;
            break;
        case TOK_SPLIT_ISOLATED:
            hf_pretok(s, k + 1, w + start, m - start);
            hf_pretok(s, k + 1, w + m, e - m);
            start = e;
            break;
        case TOK_SPLIT_MERGED_PREV:
            hf_pretok(s, k + 1, w + start, e - start);
            start = e;
            break;
        case TOK_SPLIT_MERGED_NEXT:
            hf_pretok(s, k + 1, w + start, m - start);
            start = m;
            break;
        case TOK_SPLIT_CONTIGUOUS: {
            /* Consecutive delimiters form one piece. */
            while (e + st->la <= n && memcmp(w + e, st->a, st->la) == 0) e += st->la;
            hf_pretok(s, k + 1, w + start, m - start);
            hf_pretok(s, k + 1, w + m, e - m);
            start = e;
            break;
        }
        default: break;
        }
        p = e;
    }
    hf_pretok(s, k + 1, w + start, n - start);
}

/* Apply one Replace / Prepend step: returns a new malloc'ed buffer (or NULL on OOM). */
static char *hf_norm_step(const tok_step *st, const char *in, size_t n, size_t *out_n) {
    if (st->kind == TOK_NORM_PREPEND) {
        /* HF Prepend: only a non-empty string gets the prefix. */
        size_t m = n ? n + st->lb : 0;
        char *o = malloc(m + 1);
        if (!o) return NULL;
        if (n) {
            memcpy(o, st->b, st->lb);
            memcpy(o + st->lb, in, n);
        }
        *out_n = m;
        return o;
    }
    /* Replace: count, then copy (non-overlapping, left to right, like str::replace). */
    size_t cnt = 0;
    for (size_t p = find_lit(in, n, 0, st->a, st->la); p < n; p = find_lit(in, n, p + st->la, st->a, st->la)) cnt++;
    if (st->lb > st->la && cnt > (SIZE_MAX - n - 1) / (st->lb - st->la)) return NULL;
    size_t m = st->lb >= st->la ? n + cnt * (st->lb - st->la) : n - cnt * (st->la - st->lb);
    char *o = malloc(m + 1);
    if (!o) return NULL;
    size_t q = 0, p = 0;
    for (size_t f = find_lit(in, n, 0, st->a, st->la); f < n; f = find_lit(in, n, p, st->a, st->la)) {
        memcpy(o + q, in + p, f - p);
        q += f - p;
        memcpy(o + q, st->b, st->lb);
        q += st->lb;
        p = f + st->la;
    }
    memcpy(o + q, in + p, n - p);
    *out_n = m;
    return o;
}

int64_t ls_tok_bpe_encode_fragment(const ls_tokenizer *t, const char *text, size_t len, int32_t *out, int64_t cap,
                                   int64_t n) {
    if (!t || (!text && len) || n < 0 || len > ((size_t)1 << 28)) return -1;
    if (len == 0) return n;
    /* 1. Normalize: llama.cpp escapes spaces; HF runs its normalizer steps. */
    char *buf = NULL;
    size_t blen = 0;
    if (!t->hf) {
        buf = malloc(3 * len + 1);
        if (!buf) return -1;
        for (size_t i = 0; i < len; i++) {
            if (text[i] == ' ') {
                memcpy(buf + blen, "\xE2\x96\x81", 3);
                blen += 3;
            } else {
                buf[blen++] = text[i];
            }
        }
    } else {
        buf = malloc(len + 1);
        if (!buf) return -1;
        memcpy(buf, text, len);
        blen = len;
        for (int k = 0; k < t->n_norm; k++) {
            size_t m;
            char *nb = hf_norm_step(&t->norm[k], buf, blen, &m);
            free(buf);
            if (!nb) return -1;
            buf = nb;
            blen = m;
            if (blen > ((size_t)1 << 30)) {
                free(buf);
                return -1;
            }
        }
    }
    /* 2. Words, merged one at a time; the scratch fits the whole normalized fragment. */
    bpe_session s = {.t = t, .out = out, .cap = cap, .n = n};
    s.cap_sym = blen ? blen : 1;
    s.sym = malloc(s.cap_sym * sizeof *s.sym);
    if (!s.sym) {
        free(buf);
        return -1;
    }
    if (t->hf)
        hf_pretok(&s, 0, buf, blen);
    else
        llama_words(&s, buf, blen);
    free(s.sym);
    free(s.heap);
    free(buf);
    return s.oom ? -1 : s.n;
}
