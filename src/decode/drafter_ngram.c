/* N-gram (prompt lookup) drafter: find the most recent earlier occurrence of the last n
 * tokens of the history (n from n_max down to n_min) and propose the tokens that followed
 * it. Free to run; strong on edits, quotes and code where the output repeats the input.
 *
 * Among the matches of one length, the one at the distance of the last accepted proposal
 * wins over the most recent: while the output copies a source (an edit returns the file),
 * a short n-gram (one or two tokens) usually also occurs nearby in the output itself, and
 * the nearby occurrence continues differently more often than the copy does. A longer match
 * still wins over a shorter aligned one. Only which tokens are proposed changes: every
 * emitted token is the target's choice (docs/speculative.md). */
#include <stdio.h>
#include <stdlib.h>

#include "decode/drafter.h"

typedef struct {
    int32_t n_min, n_max;
    /* align: n - from of the last proposal that had a draft accepted (0: none yet);
     * last_n / last_from: the pending proposal (last_from -1: none) */
    int32_t align, last_n, last_from;
} ngram_impl;

/* The aligned candidate for key length len: the continuation at distance align, if the
 * len tokens before it equal the key. */
static int32_t ngram_aligned(const ngram_impl *g, const int32_t *hist, int32_t n, int32_t len, int32_t max,
                             int32_t *from) {
    const int32_t d = g->align;
    if (d <= 0 || n - d - len < 0) return 0;
    for (int32_t k = 0; k < len; k++)
        if (hist[n - d - len + k] != hist[n - len + k]) return 0;
    *from = n - d;
    return d < max ? d : max;
}

static int32_t ngram_propose(ls_drafter *d, ls_session *target, const int32_t *hist, int32_t n, int32_t max,
                             const ls_sampling *sp, bool greedy, int32_t *out) {
    (void)target, (void)sp, (void)greedy;
    ngram_impl *g = d->impl;
    g->last_from = -1;
    for (int32_t len = g->n_max; len >= g->n_min; len--) {
        if (len > n - 1) continue;
        const int32_t *key = hist + n - len;
        int32_t from, cnt = ngram_aligned(g, hist, n, len, max, &from);
        if (cnt > 0) {
            for (int32_t i = 0; i < cnt; i++) out[i] = hist[from + i];
            g->last_n = n, g->last_from = from;
            return cnt;
        }
        /* Scan backwards: the most recent match with a full continuation of `max` tokens
         * wins; failing that, the match with the longest continuation (in a run of one
         * repeated token the nearest match has only one token after it). */
        int32_t best_from = -1, best_cnt = 0;
        for (int32_t start = n - len - 1; start >= 0 && best_cnt < max; start--) {
            int32_t k = 0;
            while (k < len && hist[start + k] == key[k]) k++;
            if (k < len) continue;
            int32_t from = start + len, cnt = n - from < max ? n - from : max;
            if (cnt > best_cnt) {
                best_cnt = cnt;
                best_from = from;
            }
        }
        if (best_cnt > 0) {
            for (int32_t i = 0; i < best_cnt; i++) out[i] = hist[best_from + i];
            g->last_n = n, g->last_from = best_from;
            return best_cnt;
        }
    }
    return 0;
}

/* The loop calls this with the history length minus the new bonus: longer than at the
 * proposal exactly when a draft was accepted; 0 starts a generation. */
static void ngram_rollback(ls_drafter *d, int32_t n) {
    ngram_impl *g = d->impl;
    if (n == 0) g->align = 0;
    if (g->last_from >= 0 && n > g->last_n) g->align = g->last_n - g->last_from;
    g->last_from = -1;
}

static void ngram_free(ls_drafter *d) {
    if (!d) return;
    free(d->impl);
    free(d);
}

static const ls_drafter_ops ngram_ops = {
    .name = "ngram", .propose = ngram_propose, .rollback = ngram_rollback, .free = ngram_free};

int ls_drafter_ngram_create(int32_t n_min, int32_t n_max, ls_drafter **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_min < 1 || n_max < n_min || n_max > 64) {
        snprintf(err, errlen, "ngram drafter: sizes must satisfy 1 <= n_min <= n_max <= 64 (got %d..%d)", n_min, n_max);
        return LS_ERR_ARG;
    }
    ls_drafter *d = calloc(1, sizeof *d);
    ngram_impl *g = calloc(1, sizeof *g);
    if (!d || !g) {
        free(d);
        free(g);
        snprintf(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    g->n_min = n_min;
    g->n_max = n_max;
    g->last_from = -1;
    d->ops = &ngram_ops;
    d->impl = g;
    *out = d;
    return LS_OK;
}

void ls_drafter_free(ls_drafter *d) {
    if (d) d->ops->free(d);
}

const char *ls_drafter_name(const ls_drafter *d) {
    return d ? d->ops->name : "none";
}
