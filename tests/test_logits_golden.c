/* Gemma 3 270M logits against llama.cpp, without llama.cpp: tests/data/logits_golden/golden.bin
 * (written by tools/ref_logits.py from llama-cpp-python) holds, for every position of six
 * prompts (English prose, Python code, a chat turn, French, Japanese, and a 720-token document
 * that runs past the 512-token sliding window), the reference argmax, the reference row's L2
 * norm and a 64-bucket count-sketch of the row. We run the same token ids through the public
 * API in 64-row chunks, sketch our rows with the same hash, and estimate the per-row relative
 * error ||ours - ref|| / ||ref|| as ||sketch(ours) - sketch(ref)|| / ||ref|| (an unbiased
 * estimate of the squared error; its median over many rows tracks the exact median to a few
 * percent, see the README next to the golden file).
 *
 * Thresholds. With the Q4_K_M model, llama.cpp and lockstep both quantize every matmul input
 * to int8 (Q8_0 / Q8_K). That rounding is discontinuous, so any difference in float details
 * (llama.cpp's f16 GELU table, f16 Q and softmax probabilities in its attention, RoPE angle
 * recurrence) re-draws the quantization noise: two correct implementations land ~4% apart
 * (median relative L2) and agree on ~93-94% of argmaxes. Measured (tools/ref_logits.py
 * --compare): lockstep vs llama.cpp median 0.037, top-1 93.6%; llama.cpp vs an exact float64
 * numpy forward over the same dequantized weights: median 0.04, top-1 ~94%. With the weights
 * dequantized to F32 (no activation quantization) lockstep and llama.cpp agree to a median
 * of 4e-4 and 100% top-1 over all 720 positions. Real bugs (wrong RoPE base, attention scale,
 * sliding window) give 0.10+ medians, so the limits below sit between the noise and those. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "lockstep.h"

#define N_BUCKETS   64
#define CHUNK       64
#define MAX_PROMPTS 16

/* Limits (see the header comment for where they come from). */
#define MIN_TOP1          0.90 /* argmax agreement over all positions */
#define MAX_MEDIAN_ALL    0.05 /* sketch-estimated median relative L2 over all positions */
#define MAX_MEDIAN_PROMPT 0.06 /* ... per prompt, and over positions past the sliding window */

typedef struct {
    int32_t argmax, second;
    float margin, norm;
    float sketch[N_BUCKETS];
} golden_row;

typedef struct {
    char name[33];
    int32_t n;
    int32_t *tokens;
    golden_row *rows;
} golden_prompt;

typedef struct {
    int n_prompts;
    int32_t n_vocab;
    golden_prompt p[MAX_PROMPTS];
} golden;

static uint32_t rd_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static float rd_f32(const uint8_t *b) {
    uint32_t u = rd_u32(b);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Parses the little-endian golden file (format: tests/data/logits_golden/README.md). */
static int golden_load(const char *path, golden *g) {
    memset(g, 0, sizeof *g);
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)sz);
    if (!buf || fread(buf, 1, (size_t)sz, fp) != (size_t)sz) {
        fclose(fp);
        free(buf);
        return -1;
    }
    fclose(fp);
    int rc = -1;
    size_t off = 20;
    if (sz < 20 || memcmp(buf, "LSLG", 4) != 0 || rd_u32(buf + 4) != 1 || rd_u32(buf + 16) != N_BUCKETS) goto out;
    g->n_prompts = (int)rd_u32(buf + 8);
    g->n_vocab = (int32_t)rd_u32(buf + 12);
    if (g->n_prompts < 1 || g->n_prompts > MAX_PROMPTS) goto out;
    const size_t rec = 16 + 4 * N_BUCKETS;
    for (int i = 0; i < g->n_prompts; i++) {
        golden_prompt *p = &g->p[i];
        if (off + 36 > (size_t)sz) goto out;
        memcpy(p->name, buf + off, 32);
        p->name[32] = '\0';
        p->n = (int32_t)rd_u32(buf + off + 32);
        off += 36;
        if (p->n <= 0 || off + (size_t)p->n * (4 + rec) > (size_t)sz) goto out;
        p->tokens = malloc(sizeof(int32_t) * (size_t)p->n);
        p->rows = malloc(sizeof(golden_row) * (size_t)p->n);
        if (!p->tokens || !p->rows) goto out;
        for (int32_t t = 0; t < p->n; t++) p->tokens[t] = (int32_t)rd_u32(buf + off + 4 * (size_t)t);
        off += 4 * (size_t)p->n;
        for (int32_t t = 0; t < p->n; t++, off += rec) {
            golden_row *r = &p->rows[t];
            r->argmax = (int32_t)rd_u32(buf + off);
            r->second = (int32_t)rd_u32(buf + off + 4);
            r->margin = rd_f32(buf + off + 8);
            r->norm = rd_f32(buf + off + 12);
            for (int b = 0; b < N_BUCKETS; b++) r->sketch[b] = rd_f32(buf + off + 16 + 4 * (size_t)b);
        }
    }
    rc = off == (size_t)sz ? 0 : -1;
out:
    free(buf);
    return rc;
}

static void golden_free(golden *g) {
    for (int i = 0; i < g->n_prompts; i++) {
        free(g->p[i].tokens);
        free(g->p[i].rows);
    }
}

/* The count-sketch hash shared with tools/ref_logits.py: SplitMix64 of the vocab index;
 * bucket = h & 63, sign = -1 if bit 6 is set. Encoded as bucket | (sign bit << 6). */
static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void sketch_row(const uint8_t *code, const float *row, int32_t nv, double out[N_BUCKETS]) {
    double pos[N_BUCKETS] = {0}, neg[N_BUCKETS] = {0};
    for (int32_t j = 0; j < nv; j++) {
        uint8_t c = code[j];
        if (c & 64)
            neg[c & 63] += row[j];
        else
            pos[c & 63] += row[j];
    }
    for (int b = 0; b < N_BUCKETS; b++) out[b] = pos[b] - neg[b];
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median / percentile of v[0..n) (sorts a copy). */
static double quantile(const double *v, int64_t n, double q) {
    if (n <= 0) return NAN;
    double *c = malloc(sizeof(double) * (size_t)n);
    assert_non_null(c);
    memcpy(c, v, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    double pos = q * (double)(n - 1);
    int64_t lo = (int64_t)pos;
    double fr = pos - (double)lo, r = lo + 1 < n ? c[lo] + fr * (c[lo + 1] - c[lo]) : c[lo];
    free(c);
    return r;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_logits_match_llama_cpp(void **st) {
    (void)st;
    const char *mpath = getenv("LOCKSTEP_MODEL");
    FILE *mf = mpath ? fopen(mpath, "rb") : NULL;
    if (!mf) {
        fprintf(stderr, "model not found (LOCKSTEP_MODEL=%s): skipping\n", mpath ? mpath : "(unset)");
        skip();
    }
    fclose(mf);
    const char *dir = getenv("LOCKSTEP_TEST_DATA");
    char gpath[1024];
    snprintf(gpath, sizeof gpath, "%s/logits_golden/golden.bin", dir ? dir : "tests/data");
    golden g;
    if (golden_load(gpath, &g) != 0) {
        fprintf(stderr, "cannot read golden logits %s\n", gpath);
        fail();
    }

    char err[512];
    ls_model *m = NULL;
    if (ls_model_open(mpath, &m, err, sizeof err) != LS_OK) {
        fprintf(stderr, "ls_model_open: %s\n", err);
        fail();
    }
    ls_model_info info;
    ls_model_get_info(m, &info);
    assert_int_equal(info.n_vocab, g.n_vocab);
    const int32_t nv = info.n_vocab;
    int32_t window = info.sliding_window;

    uint8_t *code = malloc((size_t)nv);
    float *logits = malloc(sizeof(float) * (size_t)CHUNK * (size_t)nv);
    int64_t total = 0;
    for (int i = 0; i < g.n_prompts; i++) total += g.p[i].n;
    double *rel_all = malloc(sizeof(double) * (size_t)total);
    double *rel_win = malloc(sizeof(double) * (size_t)total);
    assert_true(code && logits && rel_all && rel_win);
    for (int32_t j = 0; j < nv; j++) {
        uint64_t h = splitmix64((uint64_t)j);
        code[j] = (uint8_t)((h & 63) | (((h >> 6) & 1) << 6));
    }

    int64_t n_all = 0, n_win = 0, agree_all = 0;
    double worst_prompt_median = 0.0;
    const char *worst_prompt = "";
    double t0 = now_s();
    fprintf(stderr, "%-10s %5s %7s %9s %9s %9s\n", "prompt", "rows", "top1%", "med rel", "p90 rel", "max rel");
    for (int i = 0; i < g.n_prompts; i++) {
        const golden_prompt *p = &g.p[i];
        ls_session_params sp = ls_session_default_params();
        sp.n_ctx = p->n;
        sp.n_threads = 2;
        sp.n_batch = CHUNK;
        ls_session *s = NULL;
        if (ls_session_create(m, &sp, &s, err, sizeof err) != LS_OK) {
            fprintf(stderr, "ls_session_create: %s\n", err);
            fail();
        }
        double *rel = rel_all + n_all;
        int64_t agree = 0;
        for (int32_t r0 = 0; r0 < p->n; r0 += CHUNK) {
            int32_t k = p->n - r0 < CHUNK ? p->n - r0 : CHUNK;
            if (ls_session_eval(s, p->tokens + r0, k, 0, logits, err, sizeof err) != LS_OK) {
                fprintf(stderr, "ls_session_eval (%s, rows %d..%d): %s\n", p->name, r0, r0 + k - 1, err);
                fail();
            }
            for (int32_t r = 0; r < k; r++) {
                const float *row = logits + (size_t)r * (size_t)nv;
                const golden_row *gr = &p->rows[r0 + r];
                int32_t am = 0;
                for (int32_t j = 1; j < nv; j++)
                    if (row[j] > row[am]) am = j;
                agree += am == gr->argmax;
                double sk[N_BUCKETS], e2 = 0.0;
                sketch_row(code, row, nv, sk);
                for (int b = 0; b < N_BUCKETS; b++) {
                    double d = sk[b] - (double)gr->sketch[b];
                    e2 += d * d;
                }
                rel[r0 + r] = sqrt(e2) / (double)gr->norm;
                if (window > 0 && r0 + r >= window) rel_win[n_win++] = rel[r0 + r];
            }
        }
        ls_session_free(s);
        double med = quantile(rel, p->n, 0.5);
        fprintf(stderr, "%-10s %5d %7.2f %9.5f %9.5f %9.5f\n", p->name, p->n, 100.0 * (double)agree / p->n, med,
                quantile(rel, p->n, 0.9), quantile(rel, p->n, 1.0));
        if (med > worst_prompt_median) {
            worst_prompt_median = med;
            worst_prompt = p->name;
        }
        n_all += p->n;
        agree_all += agree;
    }
    double top1 = (double)agree_all / (double)n_all, med_all = quantile(rel_all, n_all, 0.5);
    fprintf(stderr, "%-10s %5lld %7.2f %9.5f %9.5f %9.5f   (%.1f s)\n", "overall", (long long)n_all, 100.0 * top1,
            med_all, quantile(rel_all, n_all, 0.9), quantile(rel_all, n_all, 1.0), now_s() - t0);
    double med_win = n_win ? quantile(rel_win, n_win, 0.5) : 0.0;
    if (n_win)
        fprintf(stderr, "positions >= sliding window %d: %lld rows, median rel %.5f\n", window, (long long)n_win,
                med_win);
    fprintf(stderr, "limits: top1 >= %.0f%%, median <= %.3f overall, <= %.3f per prompt and past the window\n",
            100.0 * MIN_TOP1, MAX_MEDIAN_ALL, MAX_MEDIAN_PROMPT);

    free(code);
    free(logits);
    free(rel_all);
    free(rel_win);
    golden_free(&g);
    ls_model_close(m);

    if (worst_prompt_median > MAX_MEDIAN_PROMPT) fprintf(stderr, "worst prompt: %s\n", worst_prompt);
    assert_true(top1 >= MIN_TOP1);
    assert_true(med_all <= MAX_MEDIAN_ALL);
    assert_true(worst_prompt_median <= MAX_MEDIAN_PROMPT);
    assert_true(med_win <= MAX_MEDIAN_PROMPT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_match_llama_cpp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
