/* ls_expf on 16 lanes (AVX-512 F) and the softmax numerators on it: the operations of
 * ls_expf (expf.c) in double, 8 lanes per register, so each result has its bits. The
 * 32-entry table lives in four registers (two-source permutes pick within 16 entries, bit 4
 * of k picks the half) instead of a gather. Special inputs as in expf_avx2.c. */
#include "kernels/cpu/expf.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>

#define EX_INLINE static inline __attribute__((always_inline))

typedef struct {
    __m512i t[4]; /* ls_expf_tab[0..7], [8..15], [16..23], [24..31] */
} ex_table;

EX_INLINE ex_table ex_table_load(void) {
    ex_table tb;
    for (int j = 0; j < 4; j++) tb.t[j] = _mm512_loadu_si512((const void *)(ls_expf_tab + 8 * j));
    return tb;
}

EX_INLINE __m512d ex_formula8(const ex_table *tb, __m512d xd) {
    const __m512d shift = _mm512_set1_pd(LS_EXPF_SHIFT), inv = _mm512_set1_pd(LS_EXPF_INVLN2N);
    const __m512d kd_shifted = _mm512_fmadd_pd(inv, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd_shifted);
    const __m512d r = _mm512_fmsub_pd(inv, xd, _mm512_sub_pd(kd_shifted, shift)); /* inv * x - kd */
    const __m512i lo = _mm512_permutex2var_epi64(tb->t[0], ki, tb->t[1]);         /* bits 0-3 of ki */
    const __m512i hi = _mm512_permutex2var_epi64(tb->t[2], ki, tb->t[3]);
    const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    const __m512i e = _mm512_slli_epi64(_mm512_andnot_si512(_mm512_set1_epi64(31), ki), 47);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, e));
    const __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(LS_EXPF_C0), r, _mm512_set1_pd(LS_EXPF_C1));
    const __m512d q = _mm512_fmadd_pd(_mm512_set1_pd(LS_EXPF_C2), r, _mm512_set1_pd(1.0));
    return _mm512_mul_pd(_mm512_fmadd_pd(p, _mm512_mul_pd(r, r), q), s);
}

EX_INLINE __m512 ex_expf16(const ex_table *tb, __m512 x) {
    const __m256 lo = _mm512_cvtpd_ps(ex_formula8(tb, _mm512_cvtps_pd(_mm512_castps512_ps256(x))));
    const __m256 hi = _mm512_cvtpd_ps(
        ex_formula8(tb, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
    __m512 y =
        _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    /* -inf and x < UFLOW -> +0; x > OFLOW (+inf included) -> +inf; NaN -> x + x */
    y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(LS_EXPF_UFLOW), _CMP_NLT_UQ), y);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(LS_EXPF_OFLOW), _CMP_GT_OQ),
                           _mm512_set1_ps(INFINITY));
    return _mm512_mask_add_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
}

void ls_expf16_avx512(const float *x, float *y) {
    const ex_table tb = ex_table_load();
    _mm512_storeu_ps(y, ex_expf16(&tb, _mm512_loadu_ps(x)));
}

/* G (1..4) rows, blocks of 16: as ex_rows of expf_avx2.c, the rows' sums are G independent
 * chains through each block in index order. */
EX_INLINE void ex_rows(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    const ex_table tb = ex_table_load();
    float acc[4];
    __m512 m[4];
#pragma GCC unroll 4
    for (int h = 0; h < G; h++) acc[h] = 0.0f, m[h] = _mm512_set1_ps(mx[h]);
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            float *p = s + h * stride + i;
            _mm512_storeu_ps(p, ex_expf16(&tb, _mm512_sub_ps(_mm512_loadu_ps(p), m[h])));
        }
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) acc[h] += s[h * stride + i + j];
    }
    if (i < n) { /* the last n - i < 16: masked lanes are neither loaded nor stored */
        const __mmask16 live = (__mmask16)((1u << (n - i)) - 1);
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            float *p = s + h * stride + i;
            _mm512_mask_storeu_ps(p, live, ex_expf16(&tb, _mm512_sub_ps(_mm512_maskz_loadu_ps(live, p), m[h])));
        }
        for (int32_t j = i; j < n; j++)
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) acc[h] += s[h * stride + j];
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; h++) sum[h] = acc[h];
}

void ls_softmax_exp_avx512(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    for (; G >= 4; G -= 4, s += 4 * stride, mx += 4, sum += 4) ex_rows(4, s, stride, n, mx, sum);
    switch (G) {
    case 3: ex_rows(3, s, stride, n, mx, sum); break;
    case 2: ex_rows(2, s, stride, n, mx, sum); break;
    case 1: ex_rows(1, s, stride, n, mx, sum); break;
    default: break;
    }
}

#else

/* Not built with AVX-512 flags: never called (ls_cpu_isa_hw() stops at AVX2). */
void ls_expf16_avx512(const float *x, float *y) {
    for (int i = 0; i < 16; i++) y[i] = ls_expf(x[i]);
}
void ls_softmax_exp_avx512(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    ls_softmax_exp(LS_ISA_AVX2, G, s, stride, n, mx, sum);
}

#endif
