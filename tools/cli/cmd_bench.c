/* lockstep bench: prefill (512 tokens in one batch) and decode (128 single-token steps)
 * throughput, median of 5 repetitions, plus peak RSS. Token ids are a fixed pseudo-random
 * sequence, as llama-bench does, so runs are comparable. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
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
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"threads", required_argument, 0, 't'},
                                         {"n-prompt", required_argument, 0, 'p'},
                                         {"n-gen", required_argument, 0, 'n'},
                                         {"reps", required_argument, 0, 'r'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_common c = {0};
    int32_t n_pp = 512, n_tg = 128, reps = 5;
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "m:t:p:n:r:h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'm': c.model = optarg; break;
        case 't': ok = cli_parse_i32("-t", optarg, 1, 512, &c.n_threads); break;
        case 'p': ok = cli_parse_i32("-p", optarg, 1, 16384, &n_pp); break;
        case 'n': ok = cli_parse_i32("-n", optarg, 1, 16384, &n_tg); break;
        case 'r': ok = cli_parse_i32("-r", optarg, 1, 100, &reps); break;
        case 'h': printf("usage: lockstep bench [-m MODEL] [-t N] [-p 512] [-n 128] [-r 5]\n"); return CLI_OK;
        default:
            fprintf(stderr, "usage: lockstep bench [-m MODEL] [-t N] [-p 512] [-n 128] [-r 5]\n");
            return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    if (optind < argc) {
        fprintf(stderr, "lockstep: unexpected argument '%s'\n", argv[optind]);
        return CLI_USAGE;
    }
    ls_model *m = cli_open_model(c.model);
    if (!m) return CLI_FAIL;
    char err[512];
    ls_session *s = NULL;
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = n_pp + n_tg + 16;
    sp.n_threads = c.n_threads;
    sp.n_batch = n_pp;
    int rc = CLI_FAIL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_pp);
    float *logits = NULL;
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!ids || !pp || !tg || ls_session_create(m, &sp, &s, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: %s\n", s ? "out of memory" : err);
        goto done;
    }
    int32_t nv = ls_session_n_vocab(s);
    logits = malloc(sizeof(float) * (size_t)nv);
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
    qsort(pp, (size_t)reps, sizeof(double), cmp_d);
    qsort(tg, (size_t)reps, sizeof(double), cmp_d);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("device=%s backend=%s threads=%d prefill_tokens=%d prefill_tok_s=%.2f decode_tokens=%d "
           "decode_tok_s=%.2f reps=%d peak_rss_mib=%.1f\n",
           ls_session_device(s), ls_device_name_of(ls_session_device(s)), ls_session_n_threads(s), n_pp, pp[reps / 2], n_tg, tg[reps / 2], reps,
           ru.ru_maxrss / 1024.0);
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
