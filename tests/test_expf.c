/* The exact exp (src/kernels/cpu/expf.h): the AVX2 (8 lanes) and AVX-512 (16 lanes) versions
 * give the bits of the scalar ls_expf on a structured and random sample of floats (every
 * exponent with edge and random mantissas, subnormals, zeros, infinities, NaN payloads, a few
 * thousand floats around each threshold, a dense sweep of [-88, 0] where softmax lives, random
 * bits), and the softmax numerators (ls_softmax_exp) give the bits and sums of the plain loop
 * at every ISA level. This is what keeps the engine's bytes the same whatever the ISA; the
 * comparison with the C library's expf over all 2^32 floats is expf_exhaustive. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/expf.h"
#include "test_rng.h"

typedef struct {
    uint32_t *v;
    size_t n, cap;
} bits_list;

static void add(bits_list *l, uint32_t u) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1 << 16;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        assert_non_null(l->v);
    }
    l->v[l->n++] = u;
}

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* every float within 2048 representable steps of x (both signs of step around zero) */
static void add_around(bits_list *l, float x) {
    const uint32_t u = bits_of(x);
    for (uint32_t d = 0; d <= 2048; d++) {
        add(l, u + d);
        add(l, u - d);
    }
}

static bits_list sample(void) {
    bits_list l = {0};
    uint64_t rng = 20240611;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t e = 0; e < 256; e++) {
            const uint32_t base = sign << 31 | e << 23;
            const uint32_t edge[6] = {0, 1, 2, 0x400000, 0x7ffffe, 0x7fffff};
            for (int j = 0; j < 6; j++) add(&l, base | edge[j]);
            for (int j = 0; j < 64; j++) add(&l, base | (uint32_t)(rng_next(&rng) & 0x7fffff));
        }
    /* thresholds: 88 (the special-case test), the overflow and underflow cut-offs, log 2^-149,
     * the subnormal boundary log 2^-126, 0, +-1, +-2^-25 (exp rounds to 1) */
    const float edges[] = {88.0f,         -88.0f,  LS_EXPF_OFLOW, LS_EXPF_UFLOW, -0x1.9d1d9ep6f, -0x1.5d589ep6f,
                           0x1.5d589ep6f, 0.0f,    -0.0f,         1.0f,          -1.0f,          0x1p-25f,
                           -0x1p-25f,     FLT_MAX, -FLT_MAX,      FLT_MIN,       -FLT_MIN};
    for (size_t j = 0; j < sizeof edges / sizeof edges[0]; j++) add_around(&l, edges[j]);
    add_around(&l, float_of(0x7f800000u)); /* +inf and the NaNs above it, the floats below */
    add_around(&l, float_of(0xff800000u));
    add_around(&l, float_of(0x7fc00000u)); /* quiet NaNs with payloads, signalling below */
    add_around(&l, float_of(0xffc00000u));
    for (uint32_t u = 0x80000000u; u <= 0xc2b00000u; u += 257) add(&l, u); /* [-88, -0] */
    for (int j = 0; j < 1 << 20; j++) add(&l, (uint32_t)rng_next(&rng));
    for (int j = 0; j < 1 << 20; j++) add(&l, bits_of(-104.0f + 193.0f * rng_uniform(&rng)));
    return l;
}

static void check_lanes(const bits_list *l, int lanes) {
    float x[16], y[16];
    size_t bad = 0;
    for (size_t i = 0; i < l->n; i += (size_t)lanes) {
        for (int j = 0; j < lanes; j++) x[j] = float_of(l->v[(i + (size_t)j) % l->n]);
        if (lanes == 8)
            ls_expf8_avx2(x, y);
        else
            ls_expf16_avx512(x, y);
        for (int j = 0; j < lanes; j++) {
            const float want = ls_expf(x[j]);
            if (memcmp(&want, &y[j], sizeof want) != 0 && bad++ < 5)
                print_error("%d lanes: x=%a (0x%08x): 0x%08x, scalar 0x%08x\n", lanes, (double)x[j], bits_of(x[j]),
                            bits_of(y[j]), bits_of(want));
        }
    }
    if (bad) fail_msg("%zu of %zu inputs differ at %d lanes", bad, l->n, lanes);
}

static void test_vector_equals_scalar(void **state) {
    (void)state;
    if (ls_cpu_isa_hw() < LS_ISA_AVX2) skip();
    bits_list l = sample();
    check_lanes(&l, 8);
    if (ls_cpu_isa_hw() >= LS_ISA_AVX512) check_lanes(&l, 16);
    free(l.v);
}

/* ls_softmax_exp at each ISA vs the plain loop: G rows (1..9, chunks of four and the rest),
 * lengths around the 8- and 16-lane blocks; scores include -inf and values far below the
 * max (subnormal and zero results). Guard floats after each row's n must stay untouched. */
static void test_softmax_exp(void **state) {
    (void)state;
    const int32_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 100, 257, 1000};
    uint64_t rng = 7;
    for (int isa = LS_ISA_SCALAR; isa <= (int)ls_cpu_isa_hw(); isa++)
        for (int G = 1; G <= 9; G++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const int32_t n = lens[li];
                const int64_t stride = n + 5;
                float *s = malloc(sizeof(float) * (size_t)(stride * G)),
                      *ref = malloc(sizeof(float) * (size_t)(stride * G));
                float mx[9], sum[9], want[9];
                assert_true(s && ref);
                for (int h = 0; h < G; h++) {
                    mx[h] = -INFINITY;
                    for (int64_t i = 0; i < stride; i++) {
                        float v = rng_normal(&rng, 8.0f);
                        if (rng_next(&rng) % 29 == 0) v = -INFINITY;
                        if (rng_next(&rng) % 31 == 0) v -= 95.0f;
                        s[h * stride + i] = v;
                        if (i < n && v > mx[h]) mx[h] = v;
                    }
                }
                memcpy(ref, s, sizeof(float) * (size_t)(stride * G));
                for (int h = 0; h < G; h++) {
                    want[h] = 0.0f;
                    for (int32_t i = 0; i < n; i++) {
                        ref[h * stride + i] = ls_expf(ref[h * stride + i] - mx[h]);
                        want[h] += ref[h * stride + i];
                    }
                }
                ls_softmax_exp((ls_isa)isa, G, s, stride, n, mx, sum);
                if (memcmp(s, ref, sizeof(float) * (size_t)(stride * G)) != 0)
                    fail_msg("isa %d G %d n %d: values differ", isa, G, n);
                if (memcmp(sum, want, sizeof(float) * (size_t)G) != 0)
                    fail_msg("isa %d G %d n %d: sums differ", isa, G, n);
                free(s), free(ref);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector_equals_scalar),
        cmocka_unit_test(test_softmax_exp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
