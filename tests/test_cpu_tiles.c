/* The large-shape corners of the CPU fast paths that test_kernels_invariance's small shapes
 * do not reach, each compared bit for bit with the one-row / one-head reference:
 *  - the AVX-512 VNNI tiles (tile_avx512.c) past one K segment (K = 3200: 100 blocks, the
 *    L1 buffer holds 96) and past one activation pass (M = 260 > 256), for Q4_0, Q5_0, Q8_0,
 *    and the K-quant tiles (tile_kq_avx512.c) likewise for Q4_K, Q5_K, Q6_K, against the
 *    scalar single-row kernel;
 *  - the K-quants' 512-bit eight-row kernels (gemm8_kq_avx512.c) at M = 1..5;
 *  - grouped attention (attn_group_avx2.c), E = 1..8 queries over one f16 KV head, each with
 *    all keys or its own range (moving windows, short and empty rows), head dims 16..512 and
 *    up to 1500 keys (past one L1 chunk of value rows), against ls_dot_f16_f32 / ls_axpy_f16
 *    per query, for the AVX2 and the 512-bit kernels (attn_group_avx512.c).
 * Skipped (77) on a CPU without the ISA. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/f16.h"
#include "kernels/cpu/attn_group.h"
#include "kernels/cpu/axpy.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/types.h"
#include "test_rng.h"

/* ls_matmul (AVX-512 level) of N x K weights of type t and M activation rows vs the scalar
 * single-row kernel, element by element. */
static void check_tiles(ls_type t, int64_t K, int64_t N, int64_t M, uint64_t rng) {
    const size_t row = ls_row_size(t, K);
    uint8_t *W = malloc(row * N);
    float *tmp = malloc(sizeof(float) * K), *X = malloc(sizeof(float) * K * M), *Y = malloc(sizeof(float) * N * M);
    void *scratch = malloc(ls_matmul_scratch_size(t, K, M));
    const ls_type at = ls_type_get(t)->act_type;
    uint8_t *act = malloc(ls_row_size(at, K));
    assert_true(W && tmp && X && Y && scratch && act);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) tmp[k] = rng_normal(&rng, 0.5f + (float)n);
        assert_int_equal(ls_quantize_row_ref(t, tmp, W + row * (size_t)n, K), 0);
    }
    for (int64_t i = 0; i < K * M; i++) X[i] = rng_normal(&rng, 1.0f);
    ls_matmul_isa(LS_ISA_AVX512, NULL, t, W, N, K, X, K, M, Y, N, scratch);
    const ls_vec_dot_fn ref = ls_vec_dot_get(t, LS_ISA_SCALAR);
    for (int64_t m = 0; m < M; m++) {
        ls_quantize_act_row(at, X + m * K, act, K);
        for (int64_t n = 0; n < N; n++) {
            const float r = ref(K, W + row * (size_t)n, act);
            if (memcmp(&r, &Y[m * N + n], sizeof r) != 0)
                fail_msg("%s m=%lld n=%lld: %.9g vs %.9g", ls_type_name(t), (long long)m, (long long)n, Y[m * N + n],
                         r);
        }
    }
    free(W), free(tmp), free(X), free(Y), free(scratch), free(act);
}

static void test_vnni_tiles_large(void **state) {
    (void)state;
    if (ls_cpu_isa_hw() < LS_ISA_AVX512) skip();
    const ls_type types[3] = {LS_TYPE_Q4_0, LS_TYPE_Q5_0, LS_TYPE_Q8_0};
    for (int ti = 0; ti < 3; ti++) check_tiles(types[ti], 3200, 13, 260, 77 + (uint64_t)ti);
}

/* The K-quant tiles (tile_kq_avx512.c): K = 1280 is five blocks (the buffer holds four),
 * M = 260 passes the 256-row activation pass, N = 13 leaves a partial group of eight. */
static void test_kquant_tiles_large(void **state) {
    (void)state;
    if (ls_cpu_isa_hw() < LS_ISA_AVX512) skip();
    const ls_type types[3] = {LS_TYPE_Q4_K, LS_TYPE_Q5_K, LS_TYPE_Q6_K};
    for (int ti = 0; ti < 3; ti++) check_tiles(types[ti], 1280, 13, 260, 91 + (uint64_t)ti);
}

/* The K-quants' 512-bit eight-row kernels (gemm8_kq_avx512.c): M = 1..5 (below the tiles),
 * N = 21 (two groups of eight and five rows of the single-row kernel). */
static void test_kquant_gemm8(void **state) {
    (void)state;
    if (ls_cpu_isa_hw() < LS_ISA_AVX512) skip();
    const ls_type types[3] = {LS_TYPE_Q4_K, LS_TYPE_Q5_K, LS_TYPE_Q6_K};
    for (int ti = 0; ti < 3; ti++)
        for (int64_t m = 1; m <= 5; m++) check_tiles(types[ti], 1280, 21, m, 97 + (uint64_t)(ti * 8 + m));
}

/* Query e's key range for test_attention_groups: all n keys, or (ranges) a window that
 * moves with e like the rows of a verify block, sometimes empty. */
static void group_range(int ranges, int e, int32_t n, int32_t *lo, int32_t *hi) {
    *lo = 0, *hi = n;
    if (!ranges) return;
    *lo = e / 2 < n ? e / 2 : n;                                /* sliding window start */
    *hi = n - (7 - e) > *lo ? n - (7 - e) : *lo + (e % 3 == 0); /* causal end; short rows */
    if (*hi > n) *hi = n;
    if (e == 5) *hi = *lo; /* a row that sees nothing */
}

static void test_attention_groups(void **state) {
    (void)state;
    if (ls_cpu_isa_hw() < LS_ISA_AVX2) skip();
    uint64_t rng = 5;
    const int32_t hds[4] = {16, 64, 256, 512}, ns[5] = {1, 7, 129, 600, 1500};
    for (int hi_ = 0; hi_ < 4; hi_++)
        for (int ni = 0; ni < 5; ni++)
            for (int E = 1; E <= LS_ATTN_ENT; E++)
                for (int ranges = 0; ranges < 2; ranges++) {
                    const int32_t hd = hds[hi_], n = ns[ni];
                    const int64_t kv_stride = 3 * (int64_t)hd; /* the head sits inside wider KV rows */
                    uint16_t *k = malloc(sizeof(uint16_t) * kv_stride * n),
                             *v = malloc(sizeof(uint16_t) * kv_stride * n);
                    float *q = malloc(sizeof(float) * E * 2 * hd), *s = malloc(sizeof(float) * E * n);
                    float *out = malloc(sizeof(float) * E * hd), *ref = malloc(sizeof(float) * hd);
                    float *sc = malloc(sizeof(float) * E * n);
                    assert_true(k && v && q && s && out && ref && sc);
                    for (int64_t i = 0; i < kv_stride * n; i++) {
                        k[i] = ls_f32_to_f16(rng_normal(&rng, 1.0f));
                        v[i] = ls_f32_to_f16(rng_normal(&rng, 1.0f));
                    }
                    for (int64_t i = 0; i < (int64_t)E * 2 * hd; i++) q[i] = rng_normal(&rng, 1.0f);
                    for (int64_t i = 0; i < (int64_t)E * n; i++) s[i] = rng_uniform(&rng);
                    const float *qs[LS_ATTN_ENT];
                    float *outs[LS_ATTN_ENT];
                    int32_t lo[LS_ATTN_ENT], hi[LS_ATTN_ENT];
                    for (int e = 0; e < E; e++) {
                        qs[e] = q + (int64_t)(E - 1 - e) * 2 * hd; /* queries anywhere, any order */
                        outs[e] = out + (int64_t)e * hd;
                        group_range(ranges, e, n, &lo[e], &hi[e]);
                        for (int32_t i = 0; i < n; i++) /* p outside the range is never read */
                            if (i < lo[e] || i >= hi[e]) s[e * n + i] = NAN;
                    }
                    const float scale = 0.0625f;
                    /* the AVX2 kernels, then the 512-bit ones where the CPU has them */
                    for (int z = 0; z < (ls_cpu_isa_hw() >= LS_ISA_AVX512 ? 2 : 1); z++) {
                        memset(sc, 0, sizeof(float) * E * n);
                        (z ? ls_attn_group_scores_avx512 : ls_attn_group_scores_avx2)(E, k + hd, kv_stride, n, qs, hd,
                                                                                      scale, sc, n);
                        (z ? ls_attn_group_values_avx512 : ls_attn_group_values_avx2)(E, v + hd, kv_stride, lo, hi, s,
                                                                                      n, hd, outs);
                        for (int e = 0; e < E; e++) {
                            for (int32_t i = 0; i < n; i++) {
                                const float r = ls_dot_f16_f32(k + hd + i * kv_stride, qs[e], hd) * scale;
                                assert_memory_equal(&r, &sc[e * n + i], sizeof r);
                            }
                            memset(ref, 0, sizeof(float) * hd);
                            for (int32_t i = lo[e]; i < hi[e]; i++)
                                ls_axpy_f16(ref, s[e * n + i], v + hd + i * kv_stride, hd);
                            if (memcmp(ref, outs[e], sizeof(float) * hd) != 0)
                                fail_msg("values differ: hd %d n %d E %d ranges %d query %d [%d, %d) z %d", hd, n, E,
                                         ranges, e, lo[e], hi[e], z);
                        }
                    }
                    free(k), free(v), free(q), free(s), free(out), free(ref), free(sc);
                }
}

/* The AVX2 activation quantizers give the scalar ones' bytes: random rows at several scales,
 * zeros, a row whose largest magnitude appears twice with both signs (Q8_K takes the first),
 * NaN, tiny and huge values. */
static void test_act_quantizers(void **state) {
    (void)state;
    if (ls_cpu_isa_hw() < LS_ISA_AVX2) skip();
    enum { K = 1024 };
    uint64_t rng = 3;
    float *x = malloc(sizeof(float) * K);
    uint8_t *a = malloc(ls_act_q8v_row_size(K)), *b = malloc(ls_act_q8v_row_size(K));
    assert_true(x && a && b);
    for (int draw = 0; draw < 40; draw++) {
        const float scale = draw % 5 == 0 ? 1e-30f : draw % 5 == 1 ? 1e30f : 0.01f + (float)draw;
        for (int i = 0; i < K; i++) x[i] = rng_normal(&rng, scale);
        if (draw == 2) memset(x, 0, sizeof(float) * 300); /* zero blocks */
        if (draw == 3) x[17] = 50.0f, x[40] = -50.0f, x[300] = -50.0f, x[301] = 50.0f;
        if (draw == 4) x[5] = NAN, x[600] = NAN;
        const ls_type types[2] = {LS_TYPE_Q8_0, LS_TYPE_Q8_K};
        for (int t = 0; t < 2; t++) {
            const size_t n = ls_row_size(types[t], K);
            ls_quantize_act_row_isa(LS_ISA_SCALAR, types[t], x, a, K);
            ls_quantize_act_row_isa(LS_ISA_AVX2, types[t], x, b, K);
            assert_memory_equal(a, b, n);
        }
        ls_quantize_act_row_q8v_isa(LS_ISA_SCALAR, x, a, K);
        ls_quantize_act_row_q8v_isa(LS_ISA_AVX2, x, b, K);
        assert_memory_equal(a, b, ls_act_q8v_row_size(K));
    }
    free(x), free(a), free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vnni_tiles_large), cmocka_unit_test(test_kquant_tiles_large),
        cmocka_unit_test(test_kquant_gemm8),     cmocka_unit_test(test_attention_groups),
        cmocka_unit_test(test_act_quantizers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
