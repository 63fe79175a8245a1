/* Shared by the kernel tests: deterministic random numbers (splitmix64) and the runtime AVX2
 * check that decides whether the scalar-vs-AVX2 comparisons can run. Header-only: each
 * tests/test_*.c is its own executable. */
#ifndef LS_TESTS_TEST_RNG_H
#define LS_TESTS_TEST_RNG_H

#include <stdint.h>

static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* [0, 1) */
static inline float rng_uniform(uint64_t *s) {
    return (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f);
}

/* Roughly normal (sum of four uniforms), scaled. */
static inline float rng_normal(uint64_t *s, float scale) {
    float v = 0.0f;
    for (int i = 0; i < 4; i++) v += rng_uniform(s);
    return (v - 2.0f) * 1.7f * scale;
}

static inline int have_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

#endif
