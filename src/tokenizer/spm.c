/* SentencePiece-style encoding of one plain-text fragment, a faithful port of llama.cpp's
 * llm_tokenizer_spm_session (the "llama" vocab type) so that our ids equal llama.cpp's.
 *
 *  1. Escape: every ' ' becomes U+2581 "▁" (only 0x20; tabs and newlines stay as they are),
 *     with one extra leading "▁" when the vocab asks for a dummy prefix.
 *  2. Split into symbols of one UTF-8 character each, using only the lead byte's length
 *     (no validation, a truncated last character is cut at the end of the text), exactly as
 *     llama.cpp does, so even invalid UTF-8 splits the same way.
 *  3. Merge: every adjacent pair whose concatenation is a vocab token is a candidate with
 *     that token's score. Repeatedly merge the best candidate (highest score; ties go to
 *     the leftmost pair), then offer the merged symbol's new neighbour pairs. Candidates
 *     are kept in a binary heap; entries made stale by an earlier merge are recognised by
 *     their recorded byte size and skipped (a live symbol's size only grows, so size
 *     equality means neither side changed).
 *  4. Emit: each final symbol is its token if the text is in the vocab, else one byte-
 *     fallback token per byte (<0xXX>). A symbol only grows by merging into a vocab token,
 *     so non-vocab symbols are single characters and llama.cpp's "resegment" recursion
 *     reduces to exactly this.
 *
 * Shapes: text of n bytes -> escaped e <= 3n + 3 bytes -> at most e symbols -> at most
 * 3e heap pushes (e - 1 seeds, 2 per merge); the heap starts at e + 16 entries and grows.
 * Scratch is malloc'ed per call: tokenizing is not on the per-token decode path. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

typedef struct {
    const char *text;   /* into the escaped buffer */
    uint32_t n;         /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next; /* -1 at the ends */
} spm_sym;

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when proposed */
} spm_bigram;

typedef struct {
    const ls_tokenizer *t;
    spm_sym *sym;
    spm_bigram *heap;
    size_t n_heap, cap_heap;
    bool oom;
} spm_session;

/* Heap order of llama.cpp's llm_bigram_spm::comparator: higher score first, then the
 * smaller left index. */
static int spm_better(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void spm_push(spm_session *s, spm_bigram b) {
    if (s->n_heap == s->cap_heap) {
        size_t nc = s->cap_heap * 2;
        spm_bigram *nh = realloc(s->heap, nc * sizeof *nh);
        if (!nh) {
            s->oom = true; /* checked by the caller after the merge loop */
            return;
        }
        s->heap = nh;
        s->cap_heap = nc;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!spm_better(&b, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
}

static spm_bigram spm_pop(spm_session *s) {
    spm_bigram top = s->heap[0];
    spm_bigram last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && spm_better(&s->heap[c + 1], &s->heap[c])) c++;
        if (!spm_better(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* Offer the pair (left, right) if their joined text is a token. Symbols are adjacent in
 * the escaped buffer, so the joined text is just a longer span from the left one. */
static void spm_try_add(spm_session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    uint32_t size = s->sym[left].n + s->sym[right].n;
    int32_t id = ls_tokenizer_find_n(s->t, s->sym[left].text, size);
    if (id < 0) return;
    spm_push(s, (spm_bigram){ls_tokenizer_token_score(s->t, id), left, right, size});
}

static inline int64_t spm_emit(int32_t *out, int64_t cap, int64_t n, int32_t id) {
    if (n < cap) out[n] = id;
    return n + 1;
}

int64_t ls_spm_encode(const ls_tokenizer *t, const char *text, size_t len, bool space_prefix, int32_t *out, int64_t cap,
                      int64_t n) {
    if (!t || (!text && len) || n < 0 || len > ((size_t)1 << 28)) return -1;
    /* 1. escape */
    char *esc = malloc(3 * len + 3 + 1);
    if (!esc) return -1;
    size_t e = 0;
    if (space_prefix) {
        memcpy(esc, "\xE2\x96\x81", 3);
        e = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + e, "\xE2\x96\x81", 3);
            e += 3;
        } else {
            esc[e++] = text[i];
        }
    }
    if (e == 0) {
        free(esc);
        return n;
    }

    spm_session s = {.t = t};
    s.sym = malloc(e * sizeof *s.sym);
    s.cap_heap = e + 16;
    s.heap = malloc(s.cap_heap * sizeof *s.heap);
    if (!s.sym || !s.heap) {
        n = -1;
        goto done;
    }

    /* 2. one symbol per (lead-byte-length) character */
    int32_t n_sym = 0;
    for (size_t off = 0; off < e;) {
        size_t l = ls_utf8_lead_len((uint8_t)esc[off]);
        if (l > e - off) l = e - off;
        s.sym[n_sym] = (spm_sym){esc + off, (uint32_t)l, n_sym - 1, off + l == e ? -1 : n_sym + 1};
        n_sym++;
        off += l;
    }

    /* 3. merge best pairs first */
    for (int32_t i = 1; i < n_sym; i++) spm_try_add(&s, i - 1, i);
    while (s.n_heap > 0 && !s.oom) {
        spm_bigram b = spm_pop(&s);
        spm_sym *l = &s.sym[b.left], *r = &s.sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s.sym[r->next].prev = b.left;
        spm_try_add(&s, l->prev, b.left);
        spm_try_add(&s, b.left, l->next);
    }

    if (s.oom) {
        n = -1;
        goto done;
    }

    /* 4. emit tokens, byte fallback for characters outside the vocab */
    for (int32_t i = 0; i != -1; i = s.sym[i].next) {
        const spm_sym *y = &s.sym[i];
        int32_t id = ls_tokenizer_find_n(t, y->text, y->n);
        if (id >= 0) {
            n = spm_emit(out, cap, n, id);
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t bt = ls_tokenizer_byte_token(t, (uint8_t)y->text[j]);
            if (bt < 0) {
                n = -1;
                goto done;
            }
            n = spm_emit(out, cap, n, bt);
        }
    }
done:
    free(s.sym);
    free(s.heap);
    free(esc);
    return n;
}
