/* Grouped attention (attn_group.h) with 512-bit registers: the same per-query operations as
 * attn_group_avx2.c, hence the same bits as the one-head path, in half the instructions.
 *  - scores: a register holds two queries' 8-lane accumulators (lanes 0..7 query 2 p, lanes
 *    8..15 query 2 p + 1) against the key's eight halves loaded into both halves; each half
 *    is the ymm chain of ls_dot_f16_f32 (fma(k, q, acc) in steps of 8 from 0) and ends in
 *    the same tree and scale. The queries are interleaved once per call into a small buffer.
 *  - values: sixteen output elements per register; element d's chain is still
 *    fma(p_i, v_i[d], acc) over the query's keys in order, from 0.
 * The key/value chunking, ranges and skipped keys are attn_group_avx2.c's. */
#include "kernels/cpu/attn_group.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#define AZ_INLINE static inline __attribute__((always_inline))

/* Query pairs and the largest head dim of the interleaved buffer (larger ones take the AVX2
 * kernels). */
enum { AZ_PAIRS = LS_ATTN_ENT / 2, AZ_MAX_HD = 512 };

/* Software prefetch of cache rows ahead: the cache of a layer was last read a whole forward
 * ago, so it comes from memory, and the hardware prefetcher alone leaves the arithmetic
 * waiting for it (inside a verify run an E = 8 call took about twice its warm-cache time,
 * measured). Integer addresses: they may lie past the cache (prefetches never fault). */
enum { AZ_PF_KEYS = 16 };
AZ_INLINE void az_prefetch_rows(const uint16_t *row, int64_t kv_stride, int nrows, int32_t hd) {
    for (int j = 0; j < nrows; j++) {
        const uintptr_t p = (uintptr_t)row + (uintptr_t)j * (uintptr_t)kv_stride * sizeof(uint16_t);
        for (size_t o = 0; o < (size_t)hd * sizeof(uint16_t); o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
    }
}

static inline float az_tree8(__m256 v) { /* dot_tree8 of dot_f32.c */
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

/* KB keys against P query pairs; qz[(p * hd / 8 + d / 8) * 16 ..] = pair p's dims d..d+7. */
AZ_INLINE void az_scores_kb(int E, int P, int KB, const uint16_t *k, int64_t kv_stride, const float *qz, int32_t hd,
                            float scale, float *scores, int64_t s_stride) {
    __m512 acc[4][AZ_PAIRS];
#pragma GCC unroll 4
    for (int j = 0; j < KB; j++)
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) acc[j][p] = _mm512_setzero_ps();
    for (int32_t d = 0; d < hd; d += 8) {
#pragma GCC unroll 4
        for (int j = 0; j < KB; j++) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(k + j * kv_stride + d));
            const __m512 w = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(h));
#pragma GCC unroll 4
            for (int p = 0; p < P; p++)
                acc[j][p] = _mm512_fmadd_ps(w, _mm512_loadu_ps(qz + ((int64_t)p * hd + d) * 2), acc[j][p]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < KB; j++)
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            scores[2 * p * s_stride + j] = az_tree8(_mm512_castps512_ps256(acc[j][p])) * scale;
            if (2 * p + 1 < E)
                scores[(2 * p + 1) * s_stride + j] =
                    az_tree8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j][p]), 1))) * scale;
        }
}

AZ_INLINE void az_scores(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q, int32_t hd,
                         float scale, float *scores, int64_t s_stride) {
    const int P = (E + 1) / 2;
    __attribute__((aligned(64))) float qz[AZ_PAIRS * AZ_MAX_HD * 2];
    for (int p = 0; p < P; p++) {
        const float *q0 = q[2 * p], *q1 = q[2 * p + 1 < E ? 2 * p + 1 : 2 * p]; /* an odd E repeats the last */
        for (int32_t d = 0; d < hd; d += 8) {
            memcpy(qz + ((int64_t)p * hd + d) * 2, q0 + d, 8 * sizeof(float));
            memcpy(qz + ((int64_t)p * hd + d) * 2 + 8, q1 + d, 8 * sizeof(float));
        }
    }
    int32_t i = 0;
#define AZ_RUN(kb) az_scores_kb(E, P, kb, k + (int64_t)i * kv_stride, kv_stride, qz, hd, scale, scores + i, s_stride)
    for (; i + 4 <= n; i += 4) {
        az_prefetch_rows(k + (int64_t)(i + AZ_PF_KEYS) * kv_stride, kv_stride, 4, hd);
        AZ_RUN(4);
    }
    for (; i + 2 <= n; i += 2) AZ_RUN(2);
    for (; i < n; i++) AZ_RUN(1);
#undef AZ_RUN
}

/* One key for every query (all == 1) or for those whose range holds it. */
AZ_INLINE void az_key(int E, int NV, int all, const uint16_t *vr, int32_t i, const int32_t *lo, const int32_t *hi,
                      const float *p, int64_t p_stride, __m512 acc[LS_ATTN_ENT][4]) {
    __m512 vv[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) vv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * j)));
#pragma GCC unroll 8
    for (int e = 0; e < E; e++) {
        if (!all && (i < lo[e] || i >= hi[e])) continue;
        const __m512 w = _mm512_set1_ps(p[e * p_stride + i]);
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[e][j] = _mm512_fmadd_ps(w, vv[j], acc[e][j]);
    }
}

/* Keys [i0, i1) for dimensions [d, d + 16 NV); keys in [c_lo, c_hi) belong to every query. */
AZ_INLINE void az_values_nv(int E, int NV, const uint16_t *v, int64_t kv_stride, int32_t i0, int32_t i1,
                            const int32_t *lo, const int32_t *hi, int32_t c_lo, int32_t c_hi, const float *p,
                            int64_t p_stride, int32_t d, float *const *out) {
    __m512 acc[LS_ATTN_ENT][4];
#pragma GCC unroll 8
    for (int e = 0; e < E; e++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[e][j] = _mm512_loadu_ps(out[e] + d + 16 * j);
    const int32_t a = c_lo < i0 ? i0 : c_lo > i1 ? i1 : c_lo;
    const int32_t b = c_hi < a ? a : c_hi > i1 ? i1 : c_hi;
    const uint16_t *vd = v + d;
    int32_t i = i0;
    for (; i < a; i++) az_key(E, NV, 0, vd + (int64_t)i * kv_stride, i, lo, hi, p, p_stride, acc);
    for (; i < b; i++) az_key(E, NV, 1, vd + (int64_t)i * kv_stride, i, lo, hi, p, p_stride, acc);
    for (; i < i1; i++) az_key(E, NV, 0, vd + (int64_t)i * kv_stride, i, lo, hi, p, p_stride, acc);
#pragma GCC unroll 8
    for (int e = 0; e < E; e++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) _mm512_storeu_ps(out[e] + d + 16 * j, acc[e][j]);
}

AZ_INLINE void az_values(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                         const float *p, int64_t p_stride, int32_t hd, float *const *out) {
    int32_t u_lo = INT32_MAX, u_hi = INT32_MIN, c_lo = INT32_MIN, c_hi = INT32_MAX;
    for (int e = 0; e < E; e++) {
        memset(out[e], 0, sizeof(float) * (size_t)hd);
        c_lo = lo[e] > c_lo ? lo[e] : c_lo, c_hi = hi[e] < c_hi ? hi[e] : c_hi;
        if (lo[e] >= hi[e]) continue;
        u_lo = lo[e] < u_lo ? lo[e] : u_lo, u_hi = hi[e] > u_hi ? hi[e] : u_hi;
    }
    const int32_t kc = hd <= 64 ? 192 : 12288 / hd < 16 ? 16 : 12288 / hd; /* attn_group_avx2.c's chunk */
    for (int32_t i0 = u_lo; i0 < u_hi; i0 += kc) {
        const int32_t i1 = u_hi - i0 < kc ? u_hi : i0 + kc;
        /* the next chunk's rows, while this one is worked on */
        if (i1 < u_hi) az_prefetch_rows(v + (int64_t)i1 * kv_stride, kv_stride, u_hi - i1 < kc ? u_hi - i1 : kc, hd);
        int32_t d = 0;
        if (E <= 4)
            for (; d + 64 <= hd; d += 64)
                az_values_nv(E, 4, v, kv_stride, i0, i1, lo, hi, c_lo, c_hi, p, p_stride, d, out);
        for (; d + 32 <= hd; d += 32) az_values_nv(E, 2, v, kv_stride, i0, i1, lo, hi, c_lo, c_hi, p, p_stride, d, out);
        for (; d < hd; d += 16) az_values_nv(E, 1, v, kv_stride, i0, i1, lo, hi, c_lo, c_hi, p, p_stride, d, out);
    }
}

#define AZ_CASES(F, ...)                                                                                               \
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

void ls_attn_group_scores_avx512(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q,
                                 int32_t hd, float scale, float *scores, int64_t s_stride) {
    if (hd > AZ_MAX_HD) {
        ls_attn_group_scores_avx2(E, k, kv_stride, n, q, hd, scale, scores, s_stride);
        return;
    }
    AZ_CASES(az_scores, k, kv_stride, n, q, hd, scale, scores, s_stride)
}

void ls_attn_group_values_avx512(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                                 const float *p, int64_t p_stride, int32_t hd, float *const *out) {
    AZ_CASES(az_values, v, kv_stride, lo, hi, p, p_stride, hd, out)
}

#else

/* Not built with AVX-512 flags: never called (attn_block.c asks ls_cpu_isa() first). */
void ls_attn_group_scores_avx512(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q,
                                 int32_t hd, float scale, float *scores, int64_t s_stride) {
    ls_attn_group_scores_avx2(E, k, kv_stride, n, q, hd, scale, scores, s_stride);
}
void ls_attn_group_values_avx512(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                                 const float *p, int64_t p_stride, int32_t hd, float *const *out) {
    ls_attn_group_values_avx2(E, v, kv_stride, lo, hi, p, p_stride, hd, out);
}

#endif
