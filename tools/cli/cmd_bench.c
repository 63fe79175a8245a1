/* lockstep bench: prefill (512 tokens in one batch) and decode (128 single-token steps)
 * throughput, median of 5 repetitions, after -d tokens of context (0 by default, as
 * llama-bench's -d), plus peak RSS; then the cost of a verify block of K
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

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return v[n / 2];
}

/* --ab-cuda-off (docs/settings.md "A/B in one process"): a second session whose CUDA backend
 * leaves off more LS_CUDA_OFF_* bits, timed against the first with their steps alternated, on
 * the same device weights and at the same context. Between processes of one build the decode
 * rate moves by ~1.5% (docs/benchmarks.md, twenty-first run), more than the effects such a
 * switch is there to measure; step by step in one process both sides see the same clocks and
 * the same weight bytes. The switches are read when a step's launches are recorded, so each
 * session keeps its own as long as its steps replay graphs. */
enum { AB_ROUNDS = 31 };
typedef struct {
    double step[2], verify[2], step_ratio, verify_ratio;
} bench_ab;

/* One timed eval of n tokens at the session's position, rolled back: milliseconds, < 0 on error. */
static double timed_eval(ls_session *s, const int32_t *toks, int32_t n, float *logits, char *err, size_t errlen) {
    const int32_t base = ls_session_pos(s);
    const double t0 = now_s();
    if (ls_session_eval(s, toks, n, 0, logits, err, errlen) != LS_OK) return -1.0;
    const double ms = (now_s() - t0) * 1e3;
    if (ls_session_truncate(s, base) != LS_OK) {
        snprintf(err, errlen, "could not roll back %d rows at position %d", (int)n, (int)base);
        return -1.0;
    }
    return ms;
}

/* What a bench session evaluates: the timed prefill ids[0..n_pp), the n_tg decoded tokens (ids[0],
 * then ids[1 + i mod (n_pp - 1)]) and the verify blocks of kv rows, all after `depth` tokens of
 * context (prefix, a BOS then the same pseudo-random ids). */
typedef struct {
    const int32_t *ids, *prefix;
    int32_t n_pp, n_tg, kv, depth;
} bench_work;

/* The depth prefix into s (empty), in batches of at most n_pp rows, no logits. */
static int eval_prefix(ls_session *s, const bench_work *w, char *err, size_t errlen) {
    for (int32_t off = 0; off < w->depth; off += w->n_pp) {
        const int32_t n = w->depth - off < w->n_pp ? w->depth - off : w->n_pp;
        if (ls_session_eval(s, w->prefix + off, n, n, NULL, err, errlen) != LS_OK) return -1;
    }
    return 0;
}

/* Back to the depth prefix: a rollback, or, where a sliding-window cache has already dropped keys
 * the prefix needs (it holds the window plus one batch), the prefix again from an empty cache. */
static int back_to_depth(ls_session *s, const bench_work *w, char *err, size_t errlen) {
    if (ls_session_truncate(s, w->depth) == LS_OK) return 0;
    if (ls_session_truncate(s, 0) != LS_OK) {
        snprintf(err, errlen, "could not roll the session back to an empty context");
        return -1;
    }
    return eval_prefix(s, w, err, errlen);
}

/* The n_tg decoded tokens from the session's position, one step each. */
static int eval_decode(ls_session *s, const bench_work *w, float *logits, char *err, size_t errlen) {
    int32_t tok = w->ids[0];
    for (int32_t i = 0; i < w->n_tg; i++) {
        if (ls_session_eval(s, &tok, 1, 0, logits, err, errlen) != LS_OK) return -1;
        tok = w->ids[w->n_pp > 1 ? 1 + i % (w->n_pp - 1) : 1]; /* -p 1: ids[1] is past the prompt, still an id */
    }
    return 0;
}

/* An A/B side's context, built the same way for both from an empty cache (the prefix, then the
 * n_tg decoded tokens: the same cache layout, so the same launch shapes), then one step and one
 * verify block so that its graphs are recorded now, under its own switches. */
static int ab_prepare(ls_session *s, const bench_work *w, float *logits, char *err, size_t errlen) {
    if (ls_session_truncate(s, 0) != LS_OK) {
        snprintf(err, errlen, "could not roll the session back to an empty context");
        return -1;
    }
    if (eval_prefix(s, w, err, errlen) != 0 || eval_decode(s, w, logits, err, errlen) != 0) return -1;
    if (timed_eval(s, w->ids + 1, 1, logits, err, errlen) < 0) return -1;
    return timed_eval(s, w->ids + 1, w->kv, logits, err, errlen) < 0 ? -1 : 0;
}

/* Session B: A's parameters under A's switches plus `bits`, prepared as A is. */
static ls_session *ab_session(ls_model *m, const ls_session_params *sp, unsigned bits, const bench_work *w,
                              float *logits, char *err, size_t errlen) {
    ls_session *b = NULL;
    ls_test_control(LS_TESTCTL_CUDA_OFF, cli_cfg.cuda_off | bits);
    const int rc = ls_session_create(m, sp, &b, err, errlen);
    ls_test_control(LS_TESTCTL_CUDA_OFF, cli_cfg.cuda_off);
    if (rc != LS_OK) return NULL;
    if (ab_prepare(b, w, logits, err, errlen) != 0) {
        ls_session_free(b);
        return NULL;
    }
    return b;
}

/* AB_ROUNDS rounds, A then B in even rounds and B then A in odd ones (a linear drift falls on
 * both), each side one step and one verify block of kv rows: the medians of each side and of
 * the rounds' B / A ratios. */
static int ab_time(ls_session *ab[2], const int32_t *ids, int32_t kv, float *logits, bench_ab *r, char *err,
                   size_t errlen) {
    double st[2][AB_ROUNDS], vb[2][AB_ROUNDS], sr[AB_ROUNDS], vr[AB_ROUNDS];
    for (int i = 0; i < AB_ROUNDS; i++) {
        for (int k = 0; k < 2; k++) {
            const int side = (i & 1) ? 1 - k : k;
            st[side][i] = timed_eval(ab[side], ids + 1, 1, logits, err, errlen);
            vb[side][i] = timed_eval(ab[side], ids + 1, kv, logits, err, errlen);
            if (st[side][i] < 0 || vb[side][i] < 0) return -1;
        }
        sr[i] = st[1][i] / st[0][i];
        vr[i] = vb[1][i] / vb[0][i];
    }
    for (int side = 0; side < 2; side++) {
        r->step[side] = median(st[side], AB_ROUNDS);
        r->verify[side] = median(vb[side], AB_ROUNDS);
    }
    r->step_ratio = median(sr, AB_ROUNDS);
    r->verify_ratio = median(vr, AB_ROUNDS);
    return 0;
}

/* Why --ab-cuda-off cannot compare on this session, or NULL: on the GPU it needs every step
 * recorded as a graph (the switches are process-wide and read when launches are recorded; MoE
 * routing and tensor-parallel collectives run outside graphs: docs/settings.md). */
static const char *ab_refusal(const ls_model *m, const ls_session_params *sp, ls_session *a) {
    if (strcmp(ls_session_device(a), "cuda") != 0) return NULL;
    ls_model_info mi;
    ls_model_get_info(m, &mi);
    if (!cli_cfg.cuda_graphs) return "--ab-cuda-off needs CUDA graphs (not --no-cuda-graphs)";
    if (sp->tensor_parallel > 0) return "--ab-cuda-off cannot compare tensor-parallel sessions (steps not recorded)";
    if (mi.n_expert > 0) return "--ab-cuda-off cannot compare MoE models (their steps are not recorded as graphs)";
    return NULL;
}

/* The A/B of --ab-cuda-off against session a: its fields, printed on the bench line. A is
 * prepared (and its graphs recorded) before B exists. */
static int ab_run(ls_model *m, const ls_session_params *sp, ls_session *a, unsigned bits, const bench_work *w,
                  float *logits, char *err, size_t errlen) {
    if (ab_prepare(a, w, logits, err, errlen) != 0) return -1;
    ls_session *ab[2] = {a, ab_session(m, sp, bits, w, logits, err, errlen)};
    if (!ab[1]) return -1;
    bench_ab r;
    const int rc = ab_time(ab, w->ids, w->kv, logits, &r, err, errlen);
    if (rc == 0)
        printf(" ab_cuda_off=%u ab_step_ms_a=%.3f ab_step_ms_b=%.3f ab_step_b_over_a=%.4f ab_verify_ms_a=%.3f "
               "ab_verify_ms_b=%.3f ab_verify_b_over_a=%.4f",
               bits, r.step[0], r.step[1], r.step_ratio, r.verify[0], r.verify[1], r.verify_ratio);
    ls_session_free(ab[1]);
    return rc;
}

/* Where a step's time goes on a backend that replays recorded steps (CUDA graphs): n one-token
 * steps, then n verify blocks of kv rows, each at the session's position and rolled back, timed
 * by LS_TESTCTL_STEP_TIMES into *st and *vb (no steps counted on other backends). */
static int step_split(ls_session *s, const int32_t *toks, int32_t kv, int n, float *logits, ls_step_times *st,
                      ls_step_times *vb, char *err, size_t errlen) {
    const int32_t base = ls_session_pos(s);
    ls_test_control(LS_TESTCTL_STEP_TIMES, 1, (ls_step_times *)NULL);
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0; r < n; r++) {
            int bad = ls_session_eval(s, toks, pass ? kv : 1, 0, logits, err, errlen) != LS_OK;
            if (!bad && ls_session_truncate(s, base) != LS_OK) {
                snprintf(err, errlen, "could not roll back to position %d", (int)base);
                bad = 1;
            }
            if (bad) {
                ls_test_control(LS_TESTCTL_STEP_TIMES, 0, (ls_step_times *)NULL);
                return -1;
            }
        }
        ls_test_control(LS_TESTCTL_STEP_TIMES, pass == 0, pass ? vb : st);
    }
    return 0;
}

/* --ab-cuda-off compares settings that give the same bytes: the K-quant bit changes them (lockstep.h). */
static bool ab_bits_ok(const cli_opts *o) {
    if (!o->given[OPT_AB_CUDA_OFF] || !(o->v[OPT_AB_CUDA_OFF].i & LS_CUDA_OFF_KQ)) return true;
    fprintf(stderr, "lockstep: --ab-cuda-off expects BITS without 64 (LS_CUDA_OFF_KQ changes the bytes)\n");
    return false;
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
    if (!ab_bits_ok(&o)) return CLI_USAGE;
    cli_common c = {.model = o.v[OPT_MODEL].s, .n_threads = o.v[OPT_THREADS].i};
    int32_t n_pp = o.v[OPT_N_PROMPT].i, n_tg = o.v[OPT_N_GEN].i, reps = o.v[OPT_REPS].i, kv = o.v[OPT_VERIFY].i;
    const int32_t depth = o.v[OPT_N_DEPTH].i;
    ls_model *m = cli_open_model(c.model);
    if (!m) return CLI_FAIL;
    char err[512];
    ls_session *s = NULL;
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = depth + n_pp + n_tg + 16;
    sp.n_threads = c.n_threads;
    sp.n_batch = n_pp;
    cli_session_tp(&o, &sp);
    int rc = CLI_FAIL;
    /* the prompt, the depth prefix, and 17 more: ids + 1 serves steps and verify blocks of up to 16
     * rows whatever -p is */
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)n_pp + (size_t)depth + 17));
    float *logits = NULL;
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!ids || !pp || !tg || ls_session_create(m, &sp, &s, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: %s\n", s ? "out of memory" : err);
        goto done;
    }
    const char *no_ab = o.given[OPT_AB_CUDA_OFF] ? ab_refusal(m, &sp, s) : NULL;
    if (no_ab) {
        fprintf(stderr, "lockstep: %s\n", no_ab);
        rc = CLI_USAGE;
        goto done;
    }
    int32_t nv = ls_session_n_vocab(s);
    logits = ls_session_logits_buffer(s, kv > 1 ? kv : 1); /* s's: freed with it */
    if (!logits) goto done;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int32_t i = 0; i < n_pp + depth + 17; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* skip the low (control) ids where the vocabulary is large enough to */
        int32_t lo = nv > 2000 ? 1000 : 0;
        ids[i] = (int32_t)(x % (uint64_t)(nv - lo)) + lo;
    }
    ids[0] = ls_token_bos(m);
    const bench_work w = {.ids = ids, .prefix = ids + n_pp, .n_pp = n_pp, .n_tg = n_tg, .kv = kv, .depth = depth};
    if (depth > 0) ids[n_pp] = ls_token_bos(m);
    if (eval_prefix(s, &w, err, sizeof err) != 0) goto evalfail; /* kept: every rep rolls back to it */
    for (int r = 0; r < reps; r++) {
        if (back_to_depth(s, &w, err, sizeof err) != 0) goto evalfail;
        double t0 = now_s();
        if (ls_session_eval(s, ids, n_pp, n_pp - 1, logits, err, sizeof err) != LS_OK) goto evalfail;
        pp[r] = n_pp / (now_s() - t0);
        if (back_to_depth(s, &w, err, sizeof err) != 0) goto evalfail;
        t0 = now_s();
        if (eval_decode(s, &w, logits, err, sizeof err) != 0) goto evalfail;
        tg[r] = n_tg / (now_s() - t0);
    }
    /* Verify block vs one-token step, both from the same context (depth + the decoded tokens). */
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
    ls_step_times tst = {0}, tvb = {0};
    if (step_split(s, ids + 1, kv, nrep, logits, &tst, &tvb, err, sizeof err) != 0) goto evalfail;
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
           "verify%d_ms=%.3f verify_over_step=%.2f depth=%d step_pos=%d",
           ls_session_device(s), ls_device_name_of(ls_session_device(s)), ls_session_n_threads(s), n_pp, pp[reps / 2],
           n_tg, tg[reps / 2], reps, ru.ru_maxrss / 1024.0, mi.weight_bytes / 1073741824.0,
           mi.weight_bytes * tg[reps / 2] / 1e9, st[nrep / 2], kv, vb[nrep / 2], vb[nrep / 2] / st[nrep / 2], depth,
           base);
    if (tst.steps > 0 && tvb.steps > 0)
        printf(" step_host_us=%.1f step_gpu_ms=%.3f verify_host_us=%.1f verify_gpu_ms=%.3f",
               tst.host_ms * 1e3 / (double)tst.steps, tst.device_ms / (double)tst.steps,
               tvb.host_ms * 1e3 / (double)tvb.steps, tvb.device_ms / (double)tvb.steps);
    if (sp.tensor_parallel > 0)
        printf(" tensor_parallel=%d tp_reduce=%s", sp.tensor_parallel, sp.tp_reduce ? "plain" : "exact");
    if (o.given[OPT_AB_CUDA_OFF] &&
        ab_run(m, &sp, s, (unsigned)o.v[OPT_AB_CUDA_OFF].i, &w, logits, err, sizeof err) != 0) {
        printf("\n");
        goto evalfail;
    }
    printf("\n");
    rc = CLI_OK;
    goto done;
evalfail:
    fprintf(stderr, "lockstep: %s\n", err);
done:
    free(ids);
    free(pp);
    free(tg);
    ls_session_free(s);
    ls_model_close(m);
    return rc;
}
