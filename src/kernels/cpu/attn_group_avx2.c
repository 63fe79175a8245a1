/* Attention for up to LS_ATTN_ENT queries over one f16 KV head, on AVX2: the heads that share
 * the KV head, of one or several query rows. Each key and value row is loaded once for all of
 * them instead of once per query. Per query, every output runs the operations of the one-head
 * path in backend_cpu.c bit for bit:
 *  - a score is ls_dot_f16_f32's sequence (one 8-lane accumulator, fma(k, q, acc) in
 *    steps of 8, the fixed tree of dot_f32.c; head dims here are multiples of 16, so no
 *    tail), times the scale;
 *  - the output accumulates ls_axpy_f16's out[d] = fma(p_i, v_i[d], out[d]) over the query's
 *    keys in position order, one chain per element from 0. Only the loop nest differs: keys
 *    in chunks that stay in L1, dimension blocks, keys; the accumulators live in registers
 *    within a chunk and in out between chunks (a float store and load change no bit), so a
 *    long cache is streamed from memory once, not once per dimension block. Keys outside a
 *    query's range are skipped for it (never multiplied by 0: 0 x inf would be NaN). */
#include "kernels/cpu/attn_group.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

static inline float ag_tree8(__m256 v) { /* dot_tree8 of dot_f32.c */
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

#define AG_INLINE static inline __attribute__((always_inline))

/* KB keys at a time (independent chains hide the fma latency; each key's chain is still
 * the one-head sequence). */
AG_INLINE void ag_scores_kb(int E, int KB, const uint16_t *k, int64_t kv_stride, const float *const *q, int32_t hd,
                            float scale, float *scores, int64_t s_stride) {
    __m256 acc[4][LS_ATTN_ENT];
#pragma GCC unroll 4
    for (int j = 0; j < KB; j++)
#pragma GCC unroll 8
        for (int e = 0; e < E; e++) acc[j][e] = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d += 8) {
#pragma GCC unroll 4
        for (int j = 0; j < KB; j++) {
            const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + j * kv_stride + d)));
#pragma GCC unroll 8
            for (int e = 0; e < E; e++) acc[j][e] = _mm256_fmadd_ps(w, _mm256_loadu_ps(q[e] + d), acc[j][e]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < KB; j++)
#pragma GCC unroll 8
        for (int e = 0; e < E; e++) scores[e * s_stride + j] = ag_tree8(acc[j][e]) * scale;
}

AG_INLINE void ag_scores(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q, int32_t hd,
                         float scale, float *scores, int64_t s_stride) {
    const int KB = E <= 2 ? 4 : E <= 6 ? 2 : 1; /* KB x E accumulators within the 16 registers */
    int32_t i = 0;
    for (; i + KB <= n; i += KB)
        ag_scores_kb(E, KB, k + (int64_t)i * kv_stride, kv_stride, q, hd, scale, scores + i, s_stride);
    for (; i < n; i++) ag_scores_kb(E, 1, k + (int64_t)i * kv_stride, kv_stride, q, hd, scale, scores + i, s_stride);
}

/* One key for every query (all == 1) or for those whose range holds it. */
AG_INLINE void ag_key(int E, int NV, int all, const uint16_t *vr, int32_t i, const int32_t *lo, const int32_t *hi,
                      const float *p, int64_t p_stride, __m256 acc[LS_ATTN_ENT][4]) {
    __m256 vv[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) vv[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 8 * j)));
#pragma GCC unroll 8
    for (int e = 0; e < E; e++) {
        if (!all && (i < lo[e] || i >= hi[e])) continue;
        const __m256 w = _mm256_broadcast_ss(p + e * p_stride + i);
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[e][j] = _mm256_fmadd_ps(w, vv[j], acc[e][j]);
    }
}

/* Keys [i0, i1) for dimensions [d, d + 8 NV), NV * E accumulator chains (at least eight where
 * E allows, so the fma latency is hidden). Keys in [c_lo, c_hi) belong to every query. */
AG_INLINE void ag_values_nv(int E, int NV, const uint16_t *v, int64_t kv_stride, int32_t i0, int32_t i1,
                            const int32_t *lo, const int32_t *hi, int32_t c_lo, int32_t c_hi, const float *p,
                            int64_t p_stride, int32_t d, float *const *out) {
    __m256 acc[LS_ATTN_ENT][4];
#pragma GCC unroll 8
    for (int e = 0; e < E; e++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[e][j] = _mm256_loadu_ps(out[e] + d + 8 * j);
    const int32_t a = c_lo < i0 ? i0 : c_lo > i1 ? i1 : c_lo;
    const int32_t b = c_hi < a ? a : c_hi > i1 ? i1 : c_hi;
    const uint16_t *vd = v + d;
    int32_t i = i0;
    for (; i < a; i++) ag_key(E, NV, 0, vd + (int64_t)i * kv_stride, i, lo, hi, p, p_stride, acc);
    for (; i < b; i++) ag_key(E, NV, 1, vd + (int64_t)i * kv_stride, i, lo, hi, p, p_stride, acc);
    for (; i < i1; i++) ag_key(E, NV, 0, vd + (int64_t)i * kv_stride, i, lo, hi, p, p_stride, acc);
#pragma GCC unroll 8
    for (int e = 0; e < E; e++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) _mm256_storeu_ps(out[e] + d + 8 * j, acc[e][j]);
}

AG_INLINE void ag_values(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                         const float *p, int64_t p_stride, int32_t hd, float *const *out) {
    /* the keys of any query (union) and of every query (intersection: empty when one
     * query's range is) */
    int32_t u_lo = INT32_MAX, u_hi = INT32_MIN, c_lo = INT32_MIN, c_hi = INT32_MAX;
    for (int e = 0; e < E; e++) {
        memset(out[e], 0, sizeof(float) * (size_t)hd);
        c_lo = lo[e] > c_lo ? lo[e] : c_lo, c_hi = hi[e] < c_hi ? hi[e] : c_hi;
        if (lo[e] >= hi[e]) continue;
        u_lo = lo[e] < u_lo ? lo[e] : u_lo, u_hi = hi[e] > u_hi ? hi[e] : u_hi;
    }
    /* a chunk of value rows (hd halves each) fills about half of a 48 KiB L1 */
    const int32_t kc = hd <= 64 ? 192 : 12288 / hd < 16 ? 16 : 12288 / hd;
    for (int32_t i0 = u_lo; i0 < u_hi; i0 += kc) {
        const int32_t i1 = u_hi - i0 < kc ? u_hi : i0 + kc;
        int32_t d = 0;
        if (E <= 2)
            for (; d + 32 <= hd; d += 32)
                ag_values_nv(E, 4, v, kv_stride, i0, i1, lo, hi, c_lo, c_hi, p, p_stride, d, out);
        if (E <= 6)
            for (; d < hd; d += 16) ag_values_nv(E, 2, v, kv_stride, i0, i1, lo, hi, c_lo, c_hi, p, p_stride, d, out);
        for (; d < hd; d += 8) ag_values_nv(E, 1, v, kv_stride, i0, i1, lo, hi, c_lo, c_hi, p, p_stride, d, out);
    }
}

#define AG_CASES(F, ...)                                                                                               \
    switch (E) {                                                                                                       \
    case 8: F(8, __VA_ARGS__); break;                                                                                  \
    case 7: F(7, __VA_ARGS__); break;                                                                                  \
    case 6: F(6, __VA_ARGS__); break;                                                                                  \
    case 5: F(5, __VA_ARGS__); break;                                                                                  \
    case 4: F(4, __VA_ARGS__); break;                                                                                  \
    case 3: F(3, __VA_ARGS__); break;                                                                                  \
    case 2: F(2, __VA_ARGS__); break;                                                                                  \
    default: F(1, __VA_ARGS__); break;                                                                                 \
    }

void ls_attn_group_scores_avx2(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q,
                               int32_t hd, float scale, float *scores, int64_t s_stride) {
    AG_CASES(ag_scores, k, kv_stride, n, q, hd, scale, scores, s_stride)
}

void ls_attn_group_values_avx2(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                               const float *p, int64_t p_stride, int32_t hd, float *const *out) {
    AG_CASES(ag_values, v, kv_stride, lo, hi, p, p_stride, hd, out)
}

#else

/* Not built with AVX2 flags: never called (backend_cpu.c asks ls_cpu_isa() first). */
void ls_attn_group_scores_avx2(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q,
                               int32_t hd, float scale, float *scores, int64_t s_stride) {
    (void)E, (void)k, (void)kv_stride, (void)n, (void)q, (void)hd, (void)scale, (void)scores, (void)s_stride;
}
void ls_attn_group_values_avx2(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                               const float *p, int64_t p_stride, int32_t hd, float *const *out) {
    (void)E, (void)v, (void)kv_stride, (void)lo, (void)hi, (void)p, (void)p_stride, (void)hd, (void)out;
}

#endif
