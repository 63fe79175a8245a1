/* ls_expf on 8 lanes (AVX2 + FMA) and the softmax numerators on it: every lane runs the
 * operations of ls_expf (expf.c) in double, 4 lanes per register, so each result has its bits.
 * The special inputs take the formula too (no traps; garbage lanes) and are then replaced by
 * their fixed results. */
#include "kernels/cpu/expf.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>

#define EX_INLINE static inline __attribute__((always_inline))

EX_INLINE __m256d ex_formula4(__m256d xd) {
    const __m256d shift = _mm256_set1_pd(LS_EXPF_SHIFT), inv = _mm256_set1_pd(LS_EXPF_INVLN2N);
    const __m256d kd_shifted = _mm256_fmadd_pd(inv, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd_shifted);
    const __m256d r = _mm256_fmsub_pd(inv, xd, _mm256_sub_pd(kd_shifted, shift)); /* inv * x - kd */
    const __m256i t =
        _mm256_i64gather_epi64((const long long *)ls_expf_tab, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    const __m256i e = _mm256_slli_epi64(_mm256_andnot_si256(_mm256_set1_epi64x(31), ki), 47);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, e));
    const __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(LS_EXPF_C0), r, _mm256_set1_pd(LS_EXPF_C1));
    const __m256d q = _mm256_fmadd_pd(_mm256_set1_pd(LS_EXPF_C2), r, _mm256_set1_pd(1.0));
    return _mm256_mul_pd(_mm256_fmadd_pd(p, _mm256_mul_pd(r, r), q), s);
}

EX_INLINE __m256 ex_expf8(__m256 x) {
    const __m128 lo = _mm256_cvtpd_ps(ex_formula4(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
    const __m128 hi = _mm256_cvtpd_ps(ex_formula4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
    /* -inf and x < UFLOW -> +0; x > OFLOW (+inf included) -> +inf; NaN -> x + x */
    y = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(LS_EXPF_UFLOW), _CMP_LT_OQ), y);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(LS_EXPF_OFLOW), _CMP_GT_OQ));
    return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

void ls_expf8_avx2(const float *x, float *y) {
    _mm256_storeu_ps(y, ex_expf8(_mm256_loadu_ps(x)));
}

/* G (1..4) rows: the exps of one block of 8 per row, then the rows' sums advance through the
 * block lane by lane, G independent chains (a float add's latency per element, not G). */
EX_INLINE void ex_rows(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    float acc[4];
    __m256 m[4];
#pragma GCC unroll 4
    for (int h = 0; h < G; h++) acc[h] = 0.0f, m[h] = _mm256_set1_ps(mx[h]);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            float *p = s + h * stride + i;
            _mm256_storeu_ps(p, ex_expf8(_mm256_sub_ps(_mm256_loadu_ps(p), m[h])));
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) acc[h] += s[h * stride + i + j];
    }
    if (i < n) { /* the last n - i < 8: masked lanes are neither loaded nor stored */
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            float *p = s + h * stride + i;
            _mm256_maskstore_ps(p, live, ex_expf8(_mm256_sub_ps(_mm256_maskload_ps(p, live), m[h])));
        }
        for (int32_t j = i; j < n; j++)
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) acc[h] += s[h * stride + j];
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; h++) sum[h] = acc[h];
}

void ls_softmax_exp_avx2(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    for (; G >= 4; G -= 4, s += 4 * stride, mx += 4, sum += 4) ex_rows(4, s, stride, n, mx, sum);
    switch (G) {
    case 3: ex_rows(3, s, stride, n, mx, sum); break;
    case 2: ex_rows(2, s, stride, n, mx, sum); break;
    case 1: ex_rows(1, s, stride, n, mx, sum); break;
    default: break;
    }
}

#else

/* Not built with AVX2 flags: never called (ls_softmax_exp asks ls_cpu_isa_hw() first). */
void ls_expf8_avx2(const float *x, float *y) {
    for (int i = 0; i < 8; i++) y[i] = ls_expf(x[i]);
}
void ls_softmax_exp_avx2(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    ls_softmax_exp(LS_ISA_SCALAR, G, s, stride, n, mx, sum);
}

#endif
