/* N-gram (prompt lookup) drafter: find the most recent earlier occurrence of the last n
 * tokens of the history (n from n_max down to n_min) and propose the tokens that followed
 * it. Free to run; strong on edits, quotes and code where the output repeats the input. */
#include <stdio.h>
#include <stdlib.h>

#include "decode/drafter.h"

typedef struct {
    int32_t n_min, n_max;
} ngram_impl;

static int32_t ngram_propose(ls_drafter *d, ls_session *target, const int32_t *hist, int32_t n, int32_t max,
                             const ls_sampling *sp, bool greedy, int32_t *out) {
    (void)target, (void)sp, (void)greedy;
    const ngram_impl *g = d->impl;
    for (int32_t len = g->n_max; len >= g->n_min; len--) {
        if (len > n - 1) continue;
        const int32_t *key = hist + n - len;
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
            return best_cnt;
        }
    }
    return 0;
}

static void ngram_rollback(ls_drafter *d, int32_t n) {
    (void)d, (void)n;
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
