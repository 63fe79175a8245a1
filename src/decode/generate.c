/* Classic generation: prefill the prompt in chunks of n_batch, then one token per
 * forward. The first token after prefill comes from the same sampler at the same
 * position as every later one; EOS is checked on every token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lockstep.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Prefill tokens[0..n) into an empty-or-not session in n_batch chunks; the last row's
 * logits land in `logits`. Chunking never changes results (every op is row-exact). */
static int prefill(ls_session *s, const int32_t *tokens, int32_t n, int32_t n_batch, float *logits, char *err,
                   size_t errlen) {
    for (int32_t i = 0; i < n; i += n_batch) {
        int32_t m = n - i < n_batch ? n - i : n_batch;
        bool last = i + m == n;
        int rc = ls_session_eval(s, tokens + i, m, last ? m - 1 : m, last ? logits : NULL, err, errlen);
        if (rc != LS_OK) return rc;
    }
    return LS_OK;
}

int ls_generate(ls_session *s, const int32_t *prompt, int32_t n_prompt, const ls_gen_params *gp, ls_text_cb cb,
                void *ud, ls_gen_stats *stats, char *err, size_t errlen) {
    ls_gen_stats st = {.n_prompt = n_prompt, .stop_reason = "length"};
    int32_t n_ctx = ls_session_n_ctx(s), n_vocab = ls_session_n_vocab(s);
    if (n_prompt <= 0) {
        snprintf(err, errlen, "empty prompt");
        return LS_ERR_ARG;
    }
    if (n_prompt >= n_ctx) {
        snprintf(err, errlen, "prompt of %d tokens does not fit the context of %d", n_prompt, n_ctx);
        return LS_ERR_CONTEXT;
    }
    int32_t budget = gp->n_predict < 0 ? n_ctx - n_prompt : gp->n_predict;
    int32_t *hist = malloc(sizeof(int32_t) * (size_t)n_ctx);
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    if (!hist || !logits) {
        free(hist);
        free(logits);
        snprintf(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    memcpy(hist, prompt, sizeof(int32_t) * (size_t)n_prompt);
    const ls_model *m = ls_session_model(s);

    int rc = LS_OK;
    double t0 = now_ms();
    ls_session_truncate(s, 0);
    rc = prefill(s, prompt, n_prompt, ls_session_n_batch(s), logits, err, errlen);
    double t1 = now_ms();
    st.prefill_ms = t1 - t0;
    ls_detok dt = {0};
    char text[256];
    int32_t pos = n_prompt;
    while (rc == LS_OK && st.n_generated < budget) {
        int32_t tok = ls_sample(&gp->sampling, logits, n_vocab, hist, pos);
        if (!gp->ignore_eos && ls_token_is_eog(m, tok)) {
            st.stop_reason = "eos";
            break;
        }
        hist[pos] = tok;
        st.n_generated++;
        int n = ls_detok_token(m, &dt, tok, text, sizeof text);
        if (n > 0 && cb && !cb(text, (size_t)n, ud)) {
            st.stop_reason = "stopped";
            break;
        }
        pos++;
        if (st.n_generated >= budget) break;
        if (pos >= n_ctx) {
            st.stop_reason = "context";
            break;
        }
        rc = ls_session_eval(s, &tok, 1, 0, logits, err, errlen);
    }
    int n = ls_detok_finish(&dt, text, sizeof text);
    if (n > 0 && cb) cb(text, (size_t)n, ud);
    st.decode_ms = now_ms() - t1;
    if (stats) *stats = st;
    free(hist);
    free(logits);
    return rc;
}
