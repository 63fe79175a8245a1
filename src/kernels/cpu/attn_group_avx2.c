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

/* KB keys at a time (independent chains hide the fma latency; each key's chain is still
 * the one-head sequence). */
AG_INLINE void ag_scores_kb(int G, int KB, const uint16_t *k, int64_t kv_stride, const float *q, int32_t hd,
                            float scale, float *scores, int64_t s_stride) {
    __m256 acc[4][LS_ATTN_GROUP];
#pragma GCC unroll 4
    for (int j = 0; j < KB; j++)
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) acc[j][h] = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d += 8) {
#pragma GCC unroll 4
        for (int j = 0; j < KB; j++) {
            const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + j * kv_stride + d)));
#pragma GCC unroll 4
            for (int h = 0; h < G; h++)
                acc[j][h] = _mm256_fmadd_ps(w, _mm256_loadu_ps(q + (int64_t)h * hd + d), acc[j][h]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < KB; j++)
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) scores[h * s_stride + j] = ag_tree8(acc[j][h]) * scale;
}

AG_INLINE void ag_scores(int G, const uint16_t *k, int64_t kv_stride, int32_t n, const float *q, int32_t hd,
                         float scale, float *scores, int64_t s_stride) {
    const int KB = G <= 2 ? 4 : 2; /* KB x G accumulators within the 16 registers */
    int32_t i = 0;
    for (; i + KB <= n; i += KB)
        ag_scores_kb(G, KB, k + (int64_t)i * kv_stride, kv_stride, q, hd, scale, scores + i, s_stride);
    for (; i < n; i++) ag_scores_kb(G, 1, k + (int64_t)i * kv_stride, kv_stride, q, hd, scale, scores + i, s_stride);
}

/* Dimension blocks of 8 * NV floats per head (NV * G accumulator chains, at least eight so
 * the fma latency is hidden), keys inner. */
AG_INLINE void ag_values_nv(int G, int NV, const uint16_t *v, int64_t kv_stride, int32_t n, const float *p,
                            int64_t p_stride, int32_t d, int32_t hd, float *out) {
    __m256 acc[LS_ATTN_GROUP][4];
#pragma GCC unroll 4
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[h][j] = _mm256_setzero_ps();
    for (int32_t i = 0; i < n; i++) {
        const uint16_t *vr = v + (int64_t)i * kv_stride + d;
        __m256 vv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) vv[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 8 * j)));
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            const __m256 w = _mm256_broadcast_ss(p + h * p_stride + i);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) acc[h][j] = _mm256_fmadd_ps(w, vv[j], acc[h][j]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) _mm256_storeu_ps(out + (int64_t)h * hd + d + 8 * j, acc[h][j]);
}

AG_INLINE void ag_values(int G, const uint16_t *v, int64_t kv_stride, int32_t n, const float *p, int64_t p_stride,
                         int32_t hd, float *out) {
    int32_t d = 0;
    if (G <= 2)
        for (; d + 32 <= hd; d += 32) ag_values_nv(G, 4, v, kv_stride, n, p, p_stride, d, hd, out);
    for (; d < hd; d += 16) ag_values_nv(G, 2, v, kv_stride, n, p, p_stride, d, hd, out);
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
