/* AVX2 fixed-order float dot products: one register of eight lanes, one fma per lane
 * per step of 8, the fixed tree, then the tail with scalar fma in order: bit-identical to
 * the scalar emulation in dot_f32.c (which documents the order). A single accumulator is
 * latency-bound, but these serve attention rows (head_dim elements) and RMSNorm, and
 * splitting into several accumulators would change the order the contract pins. */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>

#include "core/f16.h"

/* (l0+l4, l1+l5, l2+l6, l3+l7) -> (a0+a2, a1+a3) -> b0+b1, as dot_tree8 in dot_f32.c. */
static inline float dot_tree8_avx2(__m256 v) {
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

float ls_dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = dot_tree8_avx2(acc);
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

float ls_dot_f16_f32_avx2(const uint16_t *a_f16, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a_f16 + i)));
        acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(b + i), acc);
    }
    float s = dot_tree8_avx2(acc);
    for (; i < n; i++) s = fmaf(ls_f16_to_f32(a_f16[i]), b[i], s);
    return s;
}

float ls_dot_bf16_f32_avx2(const uint16_t *a_bf16, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        /* bf16 -> f32 is a 16-bit shift: exact */
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a_bf16 + i)));
        const __m256 w = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
        acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(b + i), acc);
    }
    float s = dot_tree8_avx2(acc);
    for (; i < n; i++) s = fmaf(ls_bf16_to_f32(a_bf16[i]), b[i], s);
    return s;
}

/* ls_gelu_scalar (dot_f32.c) on eight lanes: the same IEEE operations in the same order;
 * the tail runs the scalar twin itself. */
void ls_gelu_mul_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 a = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), x), x);
        const __m256 z = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, a));
        const __m256 az = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z);
        /* max_ps(m, c) = m > c ? m : c, the scalar twin's select (NaN -> c) */
        const __m256 m0 = _mm256_mul_ps(_mm256_set1_ps(-2.0f), az);
        const __m256 m = _mm256_max_ps(m0, _mm256_set1_ps(-87.0f));
        const __m256 nn = _mm256_sub_ps(
            _mm256_add_ps(_mm256_mul_ps(m, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(12582912.0f)),
            _mm256_set1_ps(12582912.0f));
        __m256 r = _mm256_fmadd_ps(nn, _mm256_set1_ps(-0.693359375f), m);
        r = _mm256_fmadd_ps(nn, _mm256_set1_ps(2.12194440e-4f), r);
        __m256 p = _mm256_set1_ps(1.9875691500e-4f);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
        __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
        const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nn), _mm256_set1_epi32(127)), 23);
        e = _mm256_andnot_ps(_mm256_cmp_ps(m0, _mm256_set1_ps(-87.0f), _CMP_LT_OQ),
                             _mm256_mul_ps(e, _mm256_castsi256_ps(bits)));
        const __m256 t = _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        const __m256 ge = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ);
        const __m256 opt = _mm256_blendv_ps(_mm256_mul_ps(t, e), t, ge);
        const __m256 gx = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), opt);
        _mm256_storeu_ps(g + i, _mm256_mul_ps(gx, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = ls_gelu_scalar(g[i]) * u[i];
}

#else
/* Not an x86 build with AVX2 flags: never selected (ls_cpu_isa() reports scalar). */
void ls_gelu_mul_avx2(float *g, const float *u, int64_t n) {
    ls_gelu_mul_scalar(g, u, n);
}
float ls_dot_f32_avx2(const float *a, const float *b, int64_t n) {
    return ls_dot_f32_scalar(a, b, n);
}
float ls_dot_f16_f32_avx2(const uint16_t *a, const float *b, int64_t n) {
    return ls_dot_f16_f32_scalar(a, b, n);
}
float ls_dot_bf16_f32_avx2(const uint16_t *a, const float *b, int64_t n) {
    return ls_dot_bf16_f32_scalar(a, b, n);
}
#endif
