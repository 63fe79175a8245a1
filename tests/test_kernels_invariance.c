/* Bitwise batch invariance of the CPU kernels (docs/speculative.md sections 1-2).
 *
 * For every weight type, K in two sizes, three random draws and N = 37 (not a multiple of
 * the 8-row groups, so both the eight-row and the single-row kernels are exercised):
 * every row of ls_matmul's output, for M = 1..17, threads 1, 2 and 3, and both ISAs, must
 * be memcmp-equal to that row computed alone (M = 1, one thread, scalar reference). That
 * single comparison proves batch invariance, thread invariance and scalar == AVX2 at once.
 * The float dot products used by attention get the same scalar-vs-AVX2 check for every
 * length 1..300 (all tail lengths). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/f16.h"
#include "core/threads.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/types.h"

enum { N_ROWS = 37, M_MAX = 17, N_DRAWS = 3 };

#include "test_rng.h"

/* Byte offsets of the f16 scale fields of a block, so random-bit blocks keep sane scales
 * (random f16 bits would include NaN/Inf, whose payloads are not part of the contract). */
static int scale_offsets(ls_type t, int off[2]) {
    switch (t) {
    case LS_TYPE_Q4_0:
    case LS_TYPE_Q5_0:
    case LS_TYPE_Q8_0: off[0] = 0; return 1;
    case LS_TYPE_Q4_1:
    case LS_TYPE_Q5_1:
    case LS_TYPE_Q4_K:
    case LS_TYPE_Q5_K:
        off[0] = 0;
        off[1] = 2;
        return 2;
    case LS_TYPE_Q6_K: off[0] = offsetof(ls_block_q6_k, d); return 1;
    default: return 0;
    }
}

/* N rows of random weights of type t, K elements each. Draw 0 and 1: quantized from
 * random floats (row scales vary); draw 2: random block bits (every code, including
 * Q8_0's -128 and Q6_K's -128 scale) with sane f16 scales. */
static uint8_t *make_weights(ls_type t, int64_t K, int draw, uint64_t *rng) {
    const size_t row = ls_row_size(t, K);
    uint8_t *w = malloc(row * N_ROWS);
    float *tmp = malloc(sizeof(float) * (size_t)K);
    assert_non_null(w);
    assert_non_null(tmp);
    int off[2];
    const int nscale = scale_offsets(t, off);
    if (draw == 2 && nscale > 0) {
        const ls_type_traits *tr = ls_type_get(t);
        for (size_t i = 0; i < row * N_ROWS; i++) w[i] = (uint8_t)rng_next(rng);
        for (size_t b = 0; b < row * N_ROWS / tr->type_size; b++)
            for (int s = 0; s < nscale; s++) {
                const uint16_t h = ls_f32_to_f16((rng_uniform(rng) - 0.3f) * 0.05f);
                memcpy(w + b * tr->type_size + off[s], &h, 2);
            }
    } else {
        for (int n = 0; n < N_ROWS; n++) {
            const float scale = 0.01f + 2.0f * rng_uniform(rng);
            const float bias = draw == 1 ? 0.3f * scale : 0.0f; /* exercise the min terms */
            for (int64_t k = 0; k < K; k++) tmp[k] = rng_normal(rng, scale) + bias;
            assert_int_equal(ls_quantize_row_ref(t, tmp, w + row * (size_t)n, K), 0);
        }
    }
    free(tmp);
    return w;
}

/* Runs ls_matmul for rows [m0, m0 + M) of X and checks each against ref. */
static void check_batch(ls_isa isa, ls_pool *pool, ls_type t, const uint8_t *W, int64_t K, const float *X, int64_t xs,
                        int64_t m0, int64_t M, const float *ref, float *Y, int64_t ys, void *scratch) {
    for (int64_t i = 0; i < M * ys; i++) Y[i] = -12345.0f; /* padding must survive */
    ls_matmul_isa(isa, pool, t, W, N_ROWS, K, X + m0 * xs, xs, M, Y, ys, scratch);
    for (int64_t m = 0; m < M; m++) {
        if (memcmp(Y + m * ys, ref + (m0 + m) * N_ROWS, sizeof(float) * N_ROWS) != 0) {
            for (int n = 0; n < N_ROWS; n++)
                if (memcmp(&Y[m * ys + n], &ref[(m0 + m) * N_ROWS + n], sizeof(float)) != 0)
                    print_error("%s K=%lld isa=%d threads=%d M=%lld row %lld col %d: %.9g vs %.9g\n", ls_type_name(t),
                                (long long)K, (int)isa, ls_pool_size(pool), (long long)M, (long long)(m0 + m), n,
                                Y[m * ys + n], ref[(m0 + m) * N_ROWS + n]);
            fail();
        }
        for (int64_t n = N_ROWS; n < ys; n++) assert_true(Y[m * ys + n] == -12345.0f);
    }
}

static void run_type(ls_type t, const int64_t Ks[2]) {
    ls_pool *pools[3] = {ls_pool_create(1), ls_pool_create(2), ls_pool_create(3)};
    for (int i = 0; i < 3; i++) assert_non_null(pools[i]);
    const int avx2 = have_avx2();
    uint64_t rng = 0x1234u + (uint64_t)t * 7919u;
    for (int ki = 0; ki < 2; ki++) {
        const int64_t K = Ks[ki];
        const int64_t xs = K + 3, ys = N_ROWS + 5; /* strides wider than the rows */
        float *X = malloc(sizeof(float) * (size_t)(xs * M_MAX));
        float *ref = malloc(sizeof(float) * N_ROWS * M_MAX);
        float *Y = malloc(sizeof(float) * (size_t)(ys * M_MAX));
        size_t ss = ls_matmul_scratch_size(t, K, M_MAX);
        void *scratch = malloc(ss ? ss : 1);
        assert_true(X && ref && Y && scratch);
        for (int draw = 0; draw < N_DRAWS; draw++) {
            uint8_t *W = make_weights(t, K, draw, &rng);
            for (int64_t m = 0; m < M_MAX; m++) {
                const float scale = m == 5 ? 1e-3f : m == 9 ? 40.0f : 1.0f;
                for (int64_t k = 0; k < xs; k++) X[m * xs + k] = m == 11 ? 0.0f : rng_normal(&rng, scale);
            }
            /* the reference: each row alone, one thread, scalar */
            for (int64_t m = 0; m < M_MAX; m++) {
                float y1[N_ROWS + 5];
                ls_matmul_isa(LS_ISA_SCALAR, NULL, t, W, N_ROWS, K, X + m * xs, xs, 1, y1, N_ROWS + 5, scratch);
                memcpy(ref + m * N_ROWS, y1, sizeof(float) * N_ROWS);
                /* and the single-row kernels directly, scalar vs AVX2 */
                if (avx2) {
                    const ls_type at = ls_type_get(t)->act_type;
                    uint8_t *act = scratch;
                    if (at != LS_TYPE_F32) ls_quantize_act_row(at, X + m * xs, act, K);
                    const void *a = at == LS_TYPE_F32 ? (const void *)(X + m * xs) : act;
                    const ls_vec_dot_fn fs = ls_vec_dot_get(t, LS_ISA_SCALAR), fa = ls_vec_dot_get(t, LS_ISA_AVX2);
                    assert_true(fs != fa);
                    for (int n = 0; n < N_ROWS; n++) {
                        const uint8_t *w = W + ls_row_size(t, K) * (size_t)n;
                        const float vs = fs(K, w, a), va = fa(K, w, a);
                        assert_memory_equal(&vs, &va, sizeof(float));
                        assert_memory_equal(&vs, &ref[m * N_ROWS + n], sizeof(float));
                    }
                }
            }
            for (int isa = 0; isa <= (int)ls_cpu_isa_hw(); isa++)
                for (int p = 0; p < 3; p++)
                    for (int64_t M = 1; M <= M_MAX; M++) {
                        check_batch((ls_isa)isa, pools[p], t, W, K, X, xs, 0, M, ref, Y, ys, scratch);
                        /* the same rows at other positions in the batch, next to other rows */
                        if (M < M_MAX && p == 1)
                            check_batch((ls_isa)isa, pools[p], t, W, K, X, xs, M_MAX - M, M, ref, Y, ys, scratch);
                    }
            free(W);
        }
        free(X);
        free(ref);
        free(Y);
        free(scratch);
    }
    for (int i = 0; i < 3; i++) ls_pool_free(pools[i]);
}

static const int64_t K_FLOAT[2] = {256, 645}; /* 645: a float tail after the 8-lane body */
static const int64_t K_32[2] = {256, 640};
static const int64_t K_K[2] = {256, 768};

static void test_f32(void **st) {
    (void)st;
    run_type(LS_TYPE_F32, K_FLOAT);
}
static void test_f16(void **st) {
    (void)st;
    run_type(LS_TYPE_F16, K_FLOAT);
}
static void test_bf16(void **st) {
    (void)st;
    run_type(LS_TYPE_BF16, K_FLOAT);
}
static void test_q4_0(void **st) {
    (void)st;
    run_type(LS_TYPE_Q4_0, K_32);
}
static void test_q4_1(void **st) {
    (void)st;
    run_type(LS_TYPE_Q4_1, K_32);
}
static void test_q5_0(void **st) {
    (void)st;
    run_type(LS_TYPE_Q5_0, K_32);
}
static void test_q5_1(void **st) {
    (void)st;
    run_type(LS_TYPE_Q5_1, K_32);
}
static void test_q8_0(void **st) {
    (void)st;
    run_type(LS_TYPE_Q8_0, K_32);
}
static void test_q4_k(void **st) {
    (void)st;
    run_type(LS_TYPE_Q4_K, K_K);
}
static void test_q5_k(void **st) {
    (void)st;
    run_type(LS_TYPE_Q5_K, K_K);
}
static void test_q6_k(void **st) {
    (void)st;
    run_type(LS_TYPE_Q6_K, K_K);
}

/* Attention's float dots: scalar emulation == AVX2 for every length 1..300, and the
 * dispatching entry points give the same bits. */
static void test_dot_f32_scalar_vs_avx2(void **st) {
    (void)st;
    enum { LEN = 300 };
    uint64_t rng = 77;
    float a[LEN], b[LEN];
    uint16_t h[LEN], bf[LEN];
    for (int i = 0; i < LEN; i++) {
        a[i] = rng_normal(&rng, 1.0f);
        b[i] = rng_normal(&rng, 3.0f);
        h[i] = ls_f32_to_f16(rng_normal(&rng, 1.0f));
        bf[i] = (uint16_t)(ls_bits_from_f32(rng_normal(&rng, 1.0f)) >> 16);
    }
    const int avx2 = have_avx2();
    for (int n = 1; n <= LEN; n++) {
        const float s1 = ls_dot_f32_scalar(a, b, n), s2 = ls_dot_f16_f32_scalar(h, b, n);
        const float s3 = ls_dot_bf16_f32_scalar(bf, b, n);
        const float d1 = ls_dot_f32(a, b, n), d2 = ls_dot_f16_f32(h, b, n);
        assert_memory_equal(&s1, &d1, sizeof(float));
        assert_memory_equal(&s2, &d2, sizeof(float));
        if (!avx2) continue;
        const float v1 = ls_dot_f32_isa(LS_ISA_AVX2, a, b, n), v2 = ls_dot_f16_f32_isa(LS_ISA_AVX2, h, b, n);
        const float v3 = ls_dot_bf16_f32_avx2(bf, b, n);
        assert_memory_equal(&s1, &v1, sizeof(float));
        assert_memory_equal(&s2, &v2, sizeof(float));
        assert_memory_equal(&s3, &v3, sizeof(float));
        /* and the order really is the documented one: close to a double-precision dot */
        double r = 0.0;
        for (int i = 0; i < n; i++) r += (double)a[i] * b[i];
        assert_true(fabs(r - s1) <= 1e-4 * (1.0 + fabs(r)) + 1e-5 * n);
    }
}

/* GELU-mul: the AVX2 lanes and the scalar twin give identical bits for every element
 * (dense sweep plus specials, every tail length), and stay close to the tanhf formula. */
static void test_gelu_scalar_vs_avx2(void **st) {
    (void)st;
    enum { LEN = 4096 };
    float *x = malloc(sizeof(float) * LEN), *u = malloc(sizeof(float) * LEN);
    float *gs = malloc(sizeof(float) * LEN), *ga = malloc(sizeof(float) * LEN);
    assert_true(x && u && gs && ga);
    uint64_t rng = 99;
    for (int i = 0; i < LEN; i++) {
        x[i] = i < 2048 ? -16.0f + 32.0f * (float)i / 2048.0f : rng_normal(&rng, i % 3 == 0 ? 8.0f : 1.0f);
        u[i] = rng_normal(&rng, 1.0f);
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 1e30f, -1e30f, -43.0f, -44.0f};
    for (int i = 0; i < (int)(sizeof specials / sizeof specials[0]); i++) x[100 + i] = specials[i];
    const int avx2 = have_avx2();
    for (int n = 1; n <= LEN; n = n < 300 ? n + 1 : n == LEN ? LEN + 1 : n * 2 > LEN ? LEN : n * 2) {
        memcpy(gs, x, sizeof(float) * (size_t)n);
        ls_gelu_mul_scalar(gs, u, n);
        memcpy(ga, x, sizeof(float) * (size_t)n);
        ls_gelu_mul(ga, u, n);
        assert_memory_equal(gs, ga, sizeof(float) * (size_t)n);
        if (avx2) {
            memcpy(ga, x, sizeof(float) * (size_t)n);
            ls_gelu_mul_avx2(ga, u, n);
            assert_memory_equal(gs, ga, sizeof(float) * (size_t)n);
        }
    }
    for (int i = 0; i < LEN; i++) {
        if (!isfinite(x[i])) continue;
        const double xd = x[i], z = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
        const double want = 0.5 * xd * (1.0 + tanh(z)) * u[i];
        if (!(fabs(gs[i] - want) <= 2e-7 * (1.0 + fabs(want)) * (1.0 + fabs(u[i]))))
            print_error("gelu x=%.9g u=%.9g got %.9g want %.9g\n", x[i], u[i], gs[i], want);
        assert_true(fabs(gs[i] - want) <= 2e-7 * (1.0 + fabs(want)) * (1.0 + fabs(u[i])));
    }
    free(x);
    free(u);
    free(gs);
    free(ga);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot_f32_scalar_vs_avx2),
        cmocka_unit_test(test_gelu_scalar_vs_avx2),
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_q4_1),
        cmocka_unit_test(test_q5_0),
        cmocka_unit_test(test_q5_1),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q4_k),
        cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_q6_k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
