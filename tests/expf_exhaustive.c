/* ls_expf and its AVX2 / AVX-512 versions (src/kernels/cpu/expf.h) against the C library's
 * expf on all 2^32 float bit patterns, split over the cores. Prints the mismatch count of
 * each. On glibc (2.28 or later, whose expf is the algorithm ls_expf reproduces) on a CPU
 * with FMA (glibc's ifunc then runs its FMA build, the variant ls_expf follows) any mismatch
 * fails: there ls_expf leaves the engine's bytes as they were with expf. Elsewhere the counts
 * are informational (another libm, or glibc's non-FMA build, rounds a few inputs
 * differently); test_expf's vector == scalar check is what keeps the bytes ISA-independent.
 * Vector lanes are also compared with ls_expf directly. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/expf.h"

enum { N_THREADS_MAX = 64, CHUNK = 1 << 16 };

typedef struct {
    uint64_t lo, hi; /* bit patterns [lo, hi) */
    uint64_t bad_scalar, bad_avx2, bad_avx512, bad_lanes;
    uint32_t first_scalar;
    int have_first;
} range_job;

static ls_isa g_hw;

static void *run_range(void *arg) {
    range_job *j = arg;
    /* bits throughout (a NaN equals itself only as bits); the vector functions read and
     * write them through their may-alias vector types */
    uint32_t *buf = malloc(sizeof(uint32_t) * 5 * CHUNK);
    if (!buf) abort();
    uint32_t *x = buf, *w = buf + CHUNK, *m = buf + 2 * CHUNK, *a = buf + 3 * CHUNK, *b = buf + 4 * CHUNK;
    for (uint64_t base = j->lo; base < j->hi; base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            float xf, e;
            x[i] = (uint32_t)(base + i);
            memcpy(&xf, &x[i], sizeof xf);
            e = expf(xf);
            memcpy(&w[i], &e, sizeof e);
            e = ls_expf(xf);
            memcpy(&m[i], &e, sizeof e);
        }
        if (g_hw >= LS_ISA_AVX2)
            for (uint32_t i = 0; i < CHUNK; i += 8) ls_expf8_avx2((const float *)(x + i), (float *)(a + i));
        if (g_hw >= LS_ISA_AVX512)
            for (uint32_t i = 0; i < CHUNK; i += 16) ls_expf16_avx512((const float *)(x + i), (float *)(b + i));
        uint64_t bad = 0;
        for (uint32_t i = 0; i < CHUNK; i++) bad += w[i] != m[i];
        if (bad && !j->have_first)
            for (uint32_t i = 0; i < CHUNK && !j->have_first; i++)
                if (w[i] != m[i]) j->first_scalar = (uint32_t)(base + i), j->have_first = 1;
        j->bad_scalar += bad;
        if (g_hw >= LS_ISA_AVX2)
            for (uint32_t i = 0; i < CHUNK; i++) j->bad_avx2 += w[i] != a[i], j->bad_lanes += m[i] != a[i];
        if (g_hw >= LS_ISA_AVX512)
            for (uint32_t i = 0; i < CHUNK; i++) j->bad_avx512 += w[i] != b[i], j->bad_lanes += m[i] != b[i];
    }
    free(buf);
    return NULL;
}

/* glibc whose expf is the optimized-routines one, running its FMA build */
static int reference_is_glibc_fma(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 28)) &&                              \
    (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

int main(void) {
    g_hw = ls_cpu_isa_hw();
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    if (nt > N_THREADS_MAX) nt = N_THREADS_MAX;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t th[N_THREADS_MAX];
    range_job jobs[N_THREADS_MAX];
    const uint64_t chunks = (1ull << 32) / CHUNK;
    for (long t = 0; t < nt; t++) {
        memset(&jobs[t], 0, sizeof jobs[t]);
        jobs[t].lo = chunks * (uint64_t)t / (uint64_t)nt * CHUNK;
        jobs[t].hi = chunks * (uint64_t)(t + 1) / (uint64_t)nt * CHUNK;
        if (pthread_create(&th[t], NULL, run_range, &jobs[t]) != 0) return 1;
    }
    uint64_t bad_scalar = 0, bad_avx2 = 0, bad_avx512 = 0, bad_lanes = 0;
    int have_first = 0;
    uint32_t first = 0;
    for (long t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        bad_scalar += jobs[t].bad_scalar, bad_avx2 += jobs[t].bad_avx2, bad_avx512 += jobs[t].bad_avx512;
        bad_lanes += jobs[t].bad_lanes;
        if (jobs[t].have_first && !have_first) first = jobs[t].first_scalar, have_first = 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    const int strict = reference_is_glibc_fma();
    printf("all 2^32 floats, %ld threads, %.1f s; mismatches vs libm expf: ls_expf %llu, avx2 %s%llu, avx512 "
           "%s%llu; vector vs ls_expf %llu\n",
           nt, secs, (unsigned long long)bad_scalar, g_hw >= LS_ISA_AVX2 ? "" : "(not run) ",
           (unsigned long long)bad_avx2, g_hw >= LS_ISA_AVX512 ? "" : "(not run) ", (unsigned long long)bad_avx512,
           (unsigned long long)bad_lanes);
    if (have_first) printf("first ls_expf mismatch: x bits 0x%08x\n", first);
    if (bad_lanes) return 1; /* the engine's ISA levels would differ */
    if (strict && (bad_scalar || bad_avx2 || bad_avx512)) {
        printf("FAIL: glibc's FMA expf is the reference here\n");
        return 1;
    }
    if (!strict) printf("(libm counts informational: not glibc >= 2.28 with FMA)\n");
    return 0;
}
