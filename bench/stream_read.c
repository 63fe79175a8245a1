/* Stream-read bandwidth of this machine: the decode roofline's denominator (docs/benchmarks.md).
 * Each of T threads reads its share of a 1 GiB buffer (touched first, so pages are resident;
 * huge pages where the kernel gives them, as for the weights: src/core/hugemap.h)
 * with 32-byte AVX2 loads where the CPU has them; the best of 8 passes is reported in GB/s.
 *
 *   lockstep-stream-read [THREADS...]      (default: 1 and 2)
 * prints one line per thread count: threads=T read_gb_s=X */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { PASSES = 8 };
static const size_t BUF_BYTES = (size_t)1 << 30;

typedef struct {
    const uint8_t *p;
    size_t n;
    uint64_t sink;
} share;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
/* four independent loads a step; the xor keeps them from being optimized away */
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0);
}
#endif

static uint64_t read_plain(const uint8_t *p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        uint64_t v[4];
        memcpy(v, p + i, sizeof v);
        a ^= v[0], b ^= v[1], c ^= v[2], d ^= v[3];
    }
    return a ^ b ^ c ^ d;
}

static void *reader(void *arg) {
    share *s = arg;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        s->sink = read_avx2(s->p, s->n);
        return NULL;
    }
#endif
    s->sink = read_plain(s->p, s->n);
    return NULL;
}

static double measure(const uint8_t *buf, int nth) {
    pthread_t th[64];
    share sh[64];
    double best = 1e30;
    const size_t per = BUF_BYTES / (size_t)nth / 128 * 128;
    for (int pass = 0; pass < PASSES; pass++) {
        const double t0 = now_s();
        for (int i = 0; i < nth; i++) {
            sh[i] = (share){.p = buf + (size_t)i * per, .n = per};
            if (pthread_create(&th[i], NULL, reader, &sh[i]) != 0) return -1.0;
        }
        for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return (double)(per * (size_t)nth) / best / 1e9;
}

int main(int argc, char **argv) {
    int counts[16] = {1, 2}, nc = 2;
    if (argc > 1) {
        nc = 0;
        for (int i = 1; i < argc && nc < 16; i++) {
            const int t = atoi(argv[i]);
            if (t < 1 || t > 64) {
                fprintf(stderr, "lockstep-stream-read: thread counts are 1..64, got '%s'\n", argv[i]);
                return 2;
            }
            counts[nc++] = t;
        }
    }
    /* the same kind of memory the weights stream from (src/core/hugemap.h: anonymous,
     * advised for 2 MiB pages), so the roofline compares like with like */
    void *m = mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "lockstep-stream-read: cannot allocate 1 GiB\n");
        return 1;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(m, BUF_BYTES, MADV_HUGEPAGE);
#endif
    uint8_t *buf = m;
    memset(buf, 1, BUF_BYTES);
    for (int i = 0; i < nc; i++) {
        const double gbs = measure(buf, counts[i]);
        if (gbs < 0) {
            fprintf(stderr, "lockstep-stream-read: cannot start threads\n");
            return 1;
        }
        printf("threads=%d read_gb_s=%.2f\n", counts[i], gbs);
    }
    munmap(m, BUF_BYTES);
    return 0;
}
