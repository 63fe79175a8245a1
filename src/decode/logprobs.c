/* Log-probabilities of a logits row (docs/logprobs.md): the raw model distribution, i.e. the
 * log-softmax of the row as the forward pass produced it (no temperature, penalties or
 * truncation), computed in one fixed order so that equal rows give equal bits:
 *
 *   m   = the largest logit (float compares, index order);
 *   s   = sum over i = 0..n-1, in index order, of exp((double)x_i - m), in double;
 *   lse = m + log(s)                      (double);
 *   logprob(i) = (float)((double)x_i - lse).
 *
 * The engine guarantees that a verify block's row for a position is bitwise the row a
 * one-token decode produces there (batch-invariant kernels), and ls_generate computes the
 * logprobs of an emitted token from exactly the row that chose it: with and without a drafter,
 * alone or batched with other requests, the logprobs are the same bytes. */
#include <math.h>
#include <string.h>

#include "lockstep.h"

/* Order of the top list: higher logit first, ties towards the lower token id (a logprob is a
 * monotone function of the logit, so this is also the logprob order). */
static bool before(float xa, int32_t a, float xb, int32_t b) {
    return xa > xb || (xa == xb && a < b);
}

int ls_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top, ls_token_logprobs *out) {
    if (!logits || !out || n_vocab <= 0 || token < 0 || token >= n_vocab || n_top < 0 || n_top > LS_MAX_TOP_LOGPROBS)
        return LS_ERR_ARG;
    memset(out, 0, sizeof *out);
    float m = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > m) m = logits[i];
    double s = 0;
    for (int32_t i = 0; i < n_vocab; i++) s += exp((double)logits[i] - (double)m);
    double lse = (double)m + log(s);
    out->token = token;
    out->logprob = (float)((double)logits[token] - lse);
    /* Top n_top by insertion into a sorted list (n_top <= 20; most logits fail the first
     * comparison against the current last entry). */
    int32_t k = n_top < n_vocab ? n_top : n_vocab, n = 0;
    int32_t ids[LS_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < n_vocab && k > 0; i++) {
        float x = logits[i];
        if (n == k && !before(x, i, logits[ids[k - 1]], ids[k - 1])) continue;
        int32_t j = n < k ? n++ : k - 1;
        while (j > 0 && before(x, i, logits[ids[j - 1]], ids[j - 1])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    out->n_top = n;
    for (int32_t j = 0; j < n; j++) {
        out->top[j].id = ids[j];
        out->top[j].logprob = (float)((double)logits[ids[j]] - lse);
    }
    return LS_OK;
}
