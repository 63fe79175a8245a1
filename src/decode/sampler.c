/* Sampling: penalties, then greedy or top-k -> top-p -> min-p -> temperature -> draw
 * (llama.cpp's default order). The draw uses ls_uniform(seed, pos), so the chosen token is
 * a pure function of (logits row, history, settings, seed, position): any schedule that
 * produces the same logits row for a position picks the same token there. Ties are broken
 * towards the lower token id everywhere, so the result never depends on sort stability. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "decode/rng.h"
#include "decode/sampler.h"
#include "lockstep.h"

ls_sampling ls_sampling_default(void) {
    ls_sampling s = {
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .frequency_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .seed = 0,
    };
    return s;
}

typedef ls_cand cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static bool penalties_on(const ls_sampling *sp) {
    return sp->repeat_penalty != 1.0f || sp->frequency_penalty != 0.0f || sp->presence_penalty != 0.0f;
}

/* Apply repetition / frequency / presence penalties (llama.cpp semantics) to the tokens of
 * the last repeat_last_n history entries, in the copy `l`. Each distinct token is penalized
 * once, by its count in the window (count: zeroed scratch, left zeroed). */
static void apply_penalties(const ls_sampling *sp, float *l, int32_t n_vocab, int32_t *count, const int32_t *hist,
                            int32_t pos) {
    int32_t n = sp->repeat_last_n < 0 ? pos : (sp->repeat_last_n < pos ? sp->repeat_last_n : pos);
    if (n <= 0) return;
    const int32_t *w = hist + (pos - n);
    for (int32_t i = 0; i < n; i++)
        if (w[i] >= 0 && w[i] < n_vocab) count[w[i]]++;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = w[i];
        if (t < 0 || t >= n_vocab || count[t] == 0) continue;
        int32_t cnt = count[t];
        count[t] = 0;
        float v = l[t];
        v = v <= 0 ? v * sp->repeat_penalty : v / sp->repeat_penalty;
        v -= (float)cnt * sp->frequency_penalty + sp->presence_penalty;
        l[t] = v;
    }
}

/* The first index of the largest logit, as `if (l[i] > l[best]) best = i` finds it (a NaN
 * never wins, a NaN at 0 stays), in two passes the compiler can keep in eight independent
 * lanes: the maximum (order-free), then its first index. It runs for every row a verify
 * block checks, over the whole vocabulary. */
static int32_t argmax(const float *l, int32_t n) {
    if (l[0] != l[0]) return 0; /* NaN first: nothing compares greater */
    float m8[8];
    for (int j = 0; j < 8; j++) m8[j] = l[0];
    int32_t i = 1;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m8[j] = l[i + j] > m8[j] ? l[i + j] : m8[j];
    float m = m8[0];
    for (int j = 1; j < 8; j++) m = m8[j] > m ? m8[j] : m;
    for (; i < n; i++) m = l[i] > m ? l[i] : m;
    for (i = 0; i < n; i++)
        if (l[i] == m) return i;
    return 0;
}

/* Keep the k best of n logits in c[0..k) sorted (descending logit, ascending id). */
static int32_t select_top(const float *l, int32_t n, int32_t k, cand *c) {
    int32_t m = 0;
    if (k >= n) {
        for (int32_t i = 0; i < n; i++) c[m++] = (cand){i, l[i], 0};
        qsort(c, (size_t)m, sizeof(cand), cand_cmp);
        return m;
    }
    /* Insertion into a sorted array of k: O(n k) worst case but k is small (~40) and most
     * logits fail the first comparison against the current k-th best. */
    for (int32_t i = 0; i < n; i++) {
        cand x = {i, l[i], 0};
        if (m == k && cand_cmp(&x, &c[k - 1]) >= 0) continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && cand_cmp(&x, &c[j - 1]) < 0) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
    return m;
}

static void softmax(cand *c, int32_t n, float temp) {
    float mx = c[0].logit, sum = 0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - mx) / temp);
        sum += c[i].p;
    }
    for (int32_t i = 0; i < n; i++) c[i].p /= sum;
}

int ls_sampler_init(ls_sampler *s, int32_t n_vocab, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (n_vocab <= 0) {
        snprintf(err, errlen, "sampler: vocabulary of %d tokens", n_vocab);
        return LS_ERR_ARG;
    }
    s->n_vocab = n_vocab;
    s->logits = ls_fault_malloc(LS_FAULT_SAMPLER, sizeof(float) * (size_t)n_vocab);
    s->count = ls_fault_calloc(LS_FAULT_SAMPLER, (size_t)n_vocab, sizeof(int32_t));
    s->cand = ls_fault_malloc(LS_FAULT_SAMPLER, sizeof(ls_cand) * (size_t)n_vocab);
    if (!s->logits || !s->count || !s->cand) {
        ls_sampler_free(s);
        snprintf(err, errlen, "out of memory for the sampler's scratch (%d-token vocabulary, %zu bytes)", n_vocab,
                 (sizeof(float) + sizeof(int32_t) + sizeof(ls_cand)) * (size_t)n_vocab);
        return LS_ERR_NOMEM;
    }
    return LS_OK;
}

void ls_sampler_free(ls_sampler *s) {
    free(s->logits);
    free(s->count);
    free(s->cand);
    memset(s, 0, sizeof *s);
}

int32_t ls_sampler_dist(ls_sampler *s, const ls_sampling *sp, const float *logits, const int32_t *history, int32_t pos,
                        const ls_cand **out, int32_t *greedy_tok) {
    *out = NULL;
    int32_t n_vocab = s->n_vocab;
    const float *l = logits;
    if (penalties_on(sp) && history && pos > 0) {
        memcpy(s->logits, logits, sizeof(float) * (size_t)n_vocab);
        apply_penalties(sp, s->logits, n_vocab, s->count, history, pos);
        l = s->logits;
    }
    if (sp->temperature <= 0.0f) {
        *greedy_tok = argmax(l, n_vocab);
        return 0;
    }
    int32_t k = sp->top_k > 0 && sp->top_k < n_vocab ? sp->top_k : n_vocab;
    cand *c = s->cand;
    int32_t n = select_top(l, n_vocab, k, c);
    if (sp->top_p < 1.0f) {
        softmax(c, n, 1.0f);
        float cum = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= sp->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (sp->min_p > 0.0f && n > 1) {
        softmax(c, n, 1.0f);
        float thr = c[0].p * sp->min_p;
        int32_t keep = 1;
        while (keep < n && c[keep].p >= thr) keep++;
        n = keep;
    }
    softmax(c, n, sp->temperature);
    *out = c;
    return n;
}

int32_t ls_cand_draw(const ls_cand *c, int32_t n, float u, int32_t skip) {
    float total = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].id != skip) total += c[i].p;
    float cum = 0, target = u * total;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].id == skip) continue;
        last = c[i].id;
        cum += c[i].p;
        if (target < cum) return c[i].id;
    }
    return last >= 0 ? last : c[0].id;
}

int32_t ls_sampler_sample(ls_sampler *s, const ls_sampling *sp, const float *logits, const int32_t *history,
                          int32_t pos) {
    const ls_cand *c;
    int32_t greedy;
    int32_t n = ls_sampler_dist(s, sp, logits, history, pos, &c, &greedy);
    if (n == 0) return greedy;
    return ls_cand_draw(c, n, ls_uniform(sp->seed, pos, 0), -1);
}

int32_t ls_sample(const ls_sampling *sp, const float *logits, int32_t n_vocab, const int32_t *history, int32_t pos) {
    ls_sampler s;
    char err[160];
    int rc = ls_sampler_init(&s, n_vocab, err, sizeof err);
    if (rc != LS_OK) return rc;
    int32_t tok = ls_sampler_sample(&s, sp, logits, history, pos);
    ls_sampler_free(&s);
    return tok;
}
