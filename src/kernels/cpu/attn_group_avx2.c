/* Attention for the query heads that share one f16 KV head, on AVX2: each key and value row
 * is loaded once for up to LS_ATTN_GROUP heads instead of once per head. Per head, every
 * output runs the operations of the one-head path in backend_cpu.c bit for bit:
 *  - a score is ls_dot_f16_f32's sequence (one 8-lane accumulator, fma(k, q, acc) in
 *    steps of 8, the fixed tree of dot_f32.c; head dims here are multiples of 16, so no
 *    tail), times the scale;
 *  - the output accumulates ls_axpy_f16's out[d] = fma(p_i, v_i[d], out[d]) over the keys
 *    in position order, one chain per element; only the loop nest differs (dimension
 *    blocks outer, keys inner), so the accumulators stay in registers. */
#include "kernels/cpu/attn_group.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline float ag_tree8(__m256 v) { /* dot_tree8 of dot_f32.c */
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

#define AG_INLINE static inline __attribute__((always_inline))

AG_INLINE void ag_scores(int G, const uint16_t *k, int64_t kv_stride, int32_t n, const float *q, int32_t hd,
                         float scale, float *scores, int64_t s_stride) {
    for (int32_t i = 0; i < n; i++) {
        const uint16_t *kr = k + (int64_t)i * kv_stride;
        __m256 acc[LS_ATTN_GROUP];
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) acc[h] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 8) {
            const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + d)));
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) acc[h] = _mm256_fmadd_ps(w, _mm256_loadu_ps(q + (int64_t)h * hd + d), acc[h]);
        }
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) scores[h * s_stride + i] = ag_tree8(acc[h]) * scale;
    }
}

AG_INLINE void ag_values(int G, const uint16_t *v, int64_t kv_stride, int32_t n, const float *p, int64_t p_stride,
                         int32_t hd, float *out) {
    for (int32_t d = 0; d < hd; d += 16) {
        __m256 lo[LS_ATTN_GROUP], hi[LS_ATTN_GROUP];
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) lo[h] = hi[h] = _mm256_setzero_ps();
        for (int32_t i = 0; i < n; i++) {
            const uint16_t *vr = v + (int64_t)i * kv_stride + d;
            const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)vr));
            const __m256 v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 8)));
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) {
                const __m256 w = _mm256_broadcast_ss(p + h * p_stride + i);
                lo[h] = _mm256_fmadd_ps(w, v0, lo[h]);
                hi[h] = _mm256_fmadd_ps(w, v1, hi[h]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            _mm256_storeu_ps(out + (int64_t)h * hd + d, lo[h]);
            _mm256_storeu_ps(out + (int64_t)h * hd + d + 8, hi[h]);
        }
    }
}

void ls_attn_group_scores_avx2(int G, const uint16_t *k, int64_t kv_stride, int32_t n, const float *q, int32_t hd,
                               float scale, float *scores, int64_t s_stride) {
    switch (G) {
    case 4: ag_scores(4, k, kv_stride, n, q, hd, scale, scores, s_stride); break;
    case 3: ag_scores(3, k, kv_stride, n, q, hd, scale, scores, s_stride); break;
    case 2: ag_scores(2, k, kv_stride, n, q, hd, scale, scores, s_stride); break;
    default: ag_scores(1, k, kv_stride, n, q, hd, scale, scores, s_stride); break;
    }
}

void ls_attn_group_values_avx2(int G, const uint16_t *v, int64_t kv_stride, int32_t n, const float *p, int64_t p_stride,
                               int32_t hd, float *out) {
    switch (G) {
    case 4: ag_values(4, v, kv_stride, n, p, p_stride, hd, out); break;
    case 3: ag_values(3, v, kv_stride, n, p, p_stride, hd, out); break;
    case 2: ag_values(2, v, kv_stride, n, p, p_stride, hd, out); break;
    default: ag_values(1, v, kv_stride, n, p, p_stride, hd, out); break;
    }
}

#else

/* Not built with AVX2 flags: never called (backend_cpu.c asks ls_cpu_isa() first). */
void ls_attn_group_scores_avx2(int G, const uint16_t *k, int64_t kv_stride, int32_t n, const float *q, int32_t hd,
                               float scale, float *scores, int64_t s_stride) {
    (void)G, (void)k, (void)kv_stride, (void)n, (void)q, (void)hd, (void)scale, (void)scores, (void)s_stride;
}
void ls_attn_group_values_avx2(int G, const uint16_t *v, int64_t kv_stride, int32_t n, const float *p, int64_t p_stride,
                               int32_t hd, float *out) {
    (void)G, (void)v, (void)kv_stride, (void)n, (void)p, (void)p_stride, (void)hd, (void)out;
}

#endif
