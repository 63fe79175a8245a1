/* lockstep bench: prefill (512 tokens in one batch) and decode (128 single-token steps)
 * throughput, median of 5 repetitions, plus peak RSS; then the cost of a verify block of K
 * rows (all with logits, as speculative decoding asks) against a one-token step at the same
 * context, and the weight bytes streamed per decoded token (every weight is read once per
 * step: the LM head is the tied embedding) as GB/s. Token ids are a fixed pseudo-random
 * sequence, as llama-bench does, so runs are comparable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cmd_bench(int argc, char **argv) {
    cli_opts o;
    memset(&o, 0, sizeof o);
    o.v[OPT_N_PROMPT].i = 512;
    o.v[OPT_N_GEN].i = 128;
    o.v[OPT_REPS].i = 5;
    o.v[OPT_VERIFY].i = 4;
    int pr = cli_opts_parse(CLI_CMD_BENCH, argc, argv, &o);
    if (pr != CLI_CONTINUE) return pr;
    cli_common c = {.model = o.v[OPT_MODEL].s, .n_threads = o.v[OPT_THREADS].i};
    int32_t n_pp = o.v[OPT_N_PROMPT].i, n_tg = o.v[OPT_N_GEN].i, reps = o.v[OPT_REPS].i, kv = o.v[OPT_VERIFY].i;
    ls_model *m = cli_open_model(c.model);
    if (!m) return CLI_FAIL;
    char err[512];
    ls_session *s = NULL;
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = n_pp + n_tg + 16;
    sp.n_threads = c.n_threads;
    sp.n_batch = n_pp;
    cli_session_tp(&o, &sp);
    int rc = CLI_FAIL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_pp);
    float *logits = NULL;
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!ids || !pp || !tg || ls_session_create(m, &sp, &s, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: %s\n", s ? "out of memory" : err);
        goto done;
    }
    int32_t nv = ls_session_n_vocab(s);
    logits = malloc(sizeof(float) * (size_t)nv * (size_t)(kv > 1 ? kv : 1));
    if (!logits) goto done;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int32_t i = 0; i < n_pp; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* skip the low (control) ids where the vocabulary is large enough to */
        int32_t lo = nv > 2000 ? 1000 : 0;
        ids[i] = (int32_t)(x % (uint64_t)(nv - lo)) + lo;
    }
    ids[0] = ls_token_bos(m);
    for (int r = 0; r < reps; r++) {
        ls_session_truncate(s, 0);
        double t0 = now_s();
        if (ls_session_eval(s, ids, n_pp, n_pp - 1, logits, err, sizeof err) != LS_OK) goto evalfail;
        pp[r] = n_pp / (now_s() - t0);
        ls_session_truncate(s, 0);
        int32_t tok = ids[0];
        t0 = now_s();
        for (int32_t i = 0; i < n_tg; i++) {
            if (ls_session_eval(s, &tok, 1, 0, logits, err, sizeof err) != LS_OK) goto evalfail;
            tok = ids[1 + i % (n_pp - 1)];
        }
        tg[r] = n_tg / (now_s() - t0);
    }
    /* Verify block vs one-token step, both from the same context (the 128 decoded tokens). */
    double vb[16], st[16];
    int nrep = 15;
    int32_t base = ls_session_pos(s);
    for (int r = 0; r < nrep; r++) {
        double t0 = now_s();
        if (ls_session_eval(s, ids + 1, 1, 0, logits, err, sizeof err) != LS_OK) goto evalfail;
        st[r] = (now_s() - t0) * 1e3;
        ls_session_truncate(s, base);
        t0 = now_s();
        if (ls_session_eval(s, ids + 1, kv, 0, logits, err, sizeof err) != LS_OK) goto evalfail;
        vb[r] = (now_s() - t0) * 1e3;
        ls_session_truncate(s, base);
    }
    qsort(vb, (size_t)nrep, sizeof(double), cmp_d);
    qsort(st, (size_t)nrep, sizeof(double), cmp_d);
    qsort(pp, (size_t)reps, sizeof(double), cmp_d);
    qsort(tg, (size_t)reps, sizeof(double), cmp_d);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    ls_model_info mi;
    ls_model_get_info(m, &mi);
    printf("device=%s backend=%s threads=%d prefill_tokens=%d prefill_tok_s=%.2f decode_tokens=%d "
           "decode_tok_s=%.2f reps=%d peak_rss_mib=%.1f weight_gib=%.3f decode_weight_gb_s=%.1f step_ms=%.3f "
           "verify%d_ms=%.3f verify_over_step=%.2f",
           ls_session_device(s), ls_device_name_of(ls_session_device(s)), ls_session_n_threads(s), n_pp, pp[reps / 2],
           n_tg, tg[reps / 2], reps, ru.ru_maxrss / 1024.0, mi.weight_bytes / 1073741824.0,
           mi.weight_bytes * tg[reps / 2] / 1e9, st[nrep / 2], kv, vb[nrep / 2], vb[nrep / 2] / st[nrep / 2]);
    if (sp.tensor_parallel > 0)
        printf(" tensor_parallel=%d tp_reduce=%s", sp.tensor_parallel, sp.tp_reduce ? "plain" : "exact");
    printf("\n");
    rc = CLI_OK;
    goto done;
evalfail:
    fprintf(stderr, "lockstep: %s\n", err);
done:
    free(ids);
    free(logits);
    free(pp);
    free(tg);
    ls_session_free(s);
    ls_model_close(m);
    return rc;
}
