/* AVX-512 eight-row kernels for Q4_K, Q5_K and Q6_K against Q8_K activations, for few
 * activation rows (decode and verify blocks; from six rows the transposed tiles of
 * tile_kq_avx512.c take over). Same contract and same bits as the AVX2 eight-row kernels
 * of vec_dot_avx2.c (ls_gemm8_fn), whose structure they keep: rows in pairs, the int32x8
 * partials of each row reduced by one transpose-add, then the reference's float sequence
 * per lane (acc = fmaf(d * d_a, isum, acc), and for Q4_K / Q5_K acc = fmaf(-(dmin * d_a),
 * imin, acc)).
 *
 * The difference is the integer part, which is exact in any grouping: one 512-bit register
 * holds 64 consecutive weights of a row (two sub-blocks of 32 for Q4_K / Q5_K, four of 16
 * for Q6_K), VPMADDUBSW pairs them with the 64 activation bytes (no saturation: weights are
 * at most 63, activations in [-127, 127]) and VPDPWSSD multiplies the int16 pair sums by
 * the sub-block scales and accumulates them as int32, one instruction where the AVX2
 * kernel needs a multiply, a pair sum and an add per 32 weights. The two 256-bit halves
 * are added before the transpose-add (the same integer). */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) &&               \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define GK_INLINE static inline __attribute__((always_inline))

enum { GK_MAX_ACT = LS_GEMM8_MAX_ACT };

GK_INLINE uint16_t gk_ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The f16 at p, p + ws, ..., p + 7 ws as eight floats (exact). */
GK_INLINE __m256 gk_gather_f16x8(const uint8_t *p, size_t ws) {
    const __m128i h = _mm_setr_epi16((short)gk_ld16(p), (short)gk_ld16(p + ws), (short)gk_ld16(p + 2 * ws),
                                     (short)gk_ld16(p + 3 * ws), (short)gk_ld16(p + 4 * ws), (short)gk_ld16(p + 5 * ws),
                                     (short)gk_ld16(p + 6 * ws), (short)gk_ld16(p + 7 * ws));
    return _mm256_cvtph_ps(h);
}

/* The activation block's eight 32-element sums (int16). */
GK_INLINE __m128i gk_act_sums(const ls_block_q8_k *y) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    return _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
}

/* Scales (low 128 bits) and mins (high 128 bits) of a Q4_K / Q5_K block as int16, from its
 * 12 packed bytes (llama.cpp's layout, as vec_dot_avx2.c unpacks it). */
GK_INLINE __m256i gk_scales_mins(const uint8_t *scales) {
    uint32_t u[4];
    memcpy(u, scales, 12);
    const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
    u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
    const uint32_t mins03 = u[1] & km1;
    u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
    u[2] = mins03;
    u[0] &= km1;
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
}

/* int16 index vector: words 0..15 select a, words 16..31 select b (vpermw). */
GK_INLINE __m512i gk_idx2(int a, int b) {
    return _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)a), _mm512_set1_epi16((short)b));
}

/* int16 index vector: words 8 q .. 8 q + 7 select s + q. */
GK_INLINE __m512i gk_idx4(int s) {
    return _mm512_set_epi64(
        (long long)(0x0001000100010001ull * (uint64_t)(s + 3)), (long long)(0x0001000100010001ull * (uint64_t)(s + 3)),
        (long long)(0x0001000100010001ull * (uint64_t)(s + 2)), (long long)(0x0001000100010001ull * (uint64_t)(s + 2)),
        (long long)(0x0001000100010001ull * (uint64_t)(s + 1)), (long long)(0x0001000100010001ull * (uint64_t)(s + 1)),
        (long long)(0x0001000100010001ull * (uint64_t)s), (long long)(0x0001000100010001ull * (uint64_t)s));
}

GK_INLINE __m256i gk_fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* One Q4_K (is5 = 0) or Q5_K (is5 = 1) block against C activation blocks: P[c] = int32x8
 * partials of sum_j sc_j * dot_j, Mn[c] = int32x4 partials of sum_j m_j * asum_j. */
GK_INLINE void gk_k45_row(int is5, int C, const uint8_t *xb, const ls_block_q8_k *const *yb, const __m128i *asums,
                          __m256i *P, __m128i *Mn) {
    const uint8_t *scb = xb + (is5 ? offsetof(ls_block_q5_k, scales) : offsetof(ls_block_q4_k, scales));
    const uint8_t *qs = xb + (is5 ? offsetof(ls_block_q5_k, qs) : offsetof(ls_block_q4_k, qs));
    const __m256i sm = gk_scales_mins(scb);
    const __m128i mins = _mm256_extracti128_si256(sm, 1);
    __m512i acc[GK_MAX_ACT];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        Mn[c] = _mm_madd_epi16(mins, asums[c]);
        acc[c] = _mm512_setzero_si512();
    }
    const __m512i scz = _mm512_castsi256_si512(sm);
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m256i one = _mm256_set1_epi8(1);
    __m256i hb = is5 ? _mm256_loadu_si256((const __m256i *)(xb + offsetof(ls_block_q5_k, qh))) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        /* elements 64 g .. 64 g + 31 (low nibbles, sub-block 2 g), then + 32 .. + 63 (high) */
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
        __m512i w =
            _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(bits), _mm256_srli_epi16(bits, 4), 1), m4);
        if (is5) { /* fifth bits: bit 2 g of qh[l] for the low nibbles, 2 g + 1 for the high */
            const __m256i lo = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
            hb = _mm256_srli_epi16(hb, 1);
            const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
            hb = _mm256_srli_epi16(hb, 1);
            w = _mm512_or_si512(w, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
        }
        const __m512i sc = _mm512_permutexvar_epi16(gk_idx2(2 * g, 2 * g + 1), scz);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m512i a = _mm512_loadu_si512((const void *)(yb[c]->qs + 64 * g));
            acc[c] = _mm512_dpwssd_epi32(acc[c], sc, _mm512_maddubs_epi16(w, a));
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) P[c] = gk_fold(acc[c]);
}

/* One Q6_K block against C activation blocks: P[c] = int32x8 partials of
 * sum_s sc_s * sum q a (q unsigned 0..63) - 32 * sum_s sc_s * bsum_s (the reference's integer). */
GK_INLINE void gk_q6k_row(int C, const ls_block_q6_k *x, const ls_block_q8_k *const *yb, __m256i *P) {
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m512i scz = _mm512_castsi256_si512(sc16);
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    __m512i acc[GK_MAX_ACT];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        const __m256i bh = _mm256_loadu_si256((const __m256i *)qh);
        const __m512i B = _mm512_loadu_si512((const void *)ql);
        const __m512i BH = _mm512_inserti64x4(_mm512_castsi256_si512(bh), _mm256_srli_epi16(bh, 2), 1);
        /* elements 128 h + 0 .. 63: low nibbles of ql[0..63], top bits 0-1 / 2-3 of qh;
         * elements 128 h + 64 .. 127: high nibbles, top bits 4-5 / 6-7 */
        const __m512i q01 = _mm512_or_si512(_mm512_and_si512(B, m4), _mm512_slli_epi16(_mm512_and_si512(BH, m2), 4));
        const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(B, 4), m4),
                                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(BH, 4), m2), 4));
        const __m512i s01 = _mm512_permutexvar_epi16(gk_idx4(8 * h), scz);
        const __m512i s23 = _mm512_permutexvar_epi16(gk_idx4(8 * h + 4), scz);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const int8_t *a = yb[c]->qs + 128 * h;
            acc[c] = _mm512_dpwssd_epi32(acc[c], s01, _mm512_maddubs_epi16(q01, _mm512_loadu_si512((const void *)a)));
            acc[c] =
                _mm512_dpwssd_epi32(acc[c], s23, _mm512_maddubs_epi16(q23, _mm512_loadu_si512((const void *)(a + 64))));
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const __m256i offs = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)yb[c]->bsums));
        P[c] = _mm256_sub_epi32(gk_fold(acc[c]), _mm256_slli_epi32(offs, 5));
    }
}

/* Software prefetch, as vec_dot_avx2.c does it: eight rows are one contiguous region, and
 * each block step prefetches its share of the region two groups ahead. */
enum { GK_PF_GROUPS = 2 };
GK_INLINE void gk_prefetch_step(const uint8_t *w, size_t ws, int64_t step, size_t step_bytes) {
    const uintptr_t p = (uintptr_t)w + GK_PF_GROUPS * 8 * ws + (size_t)step * 8 * step_bytes; /* may lie past W */
    for (size_t o = 0; o < 8 * step_bytes; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

/* Eight rows of Q4_K/Q5_K/Q6_K (kt: 4, 5 or 6) x C activation rows: vec_dot_avx2.c's
 * k_gemm8 with the rows above. */
GK_INLINE void gk_gemm8(int kt, int C, int64_t k, const void *w, size_t ws, const void *act, size_t as, float *y,
                        int64_t ys) {
    const uint8_t *x = w, *a = act;
    const size_t bs = kt == 4 ? sizeof(ls_block_q4_k) : kt == 5 ? sizeof(ls_block_q5_k) : sizeof(ls_block_q6_k);
    __m256 acc[GK_MAX_ACT];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        const uint8_t *blk = x + (size_t)b * bs;
        gk_prefetch_step(x, ws, b, bs);
        const ls_block_q8_k *yb[GK_MAX_ACT];
        __m128i asums[GK_MAX_ACT];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            yb[c] = (const ls_block_q8_k *)(a + c * as) + b;
            if (kt != 6) asums[c] = gk_act_sums(yb[c]);
        }
        /* hv[c][pair] = hadd(P_2p, P_2p+1), mv[c][pair] = the two rows' min partials; after
         * the loop the rest of the transpose-add turns them into one int per row */
        __m256i hv[GK_MAX_ACT][4], mv[GK_MAX_ACT][4];
#pragma GCC unroll 1
        for (int rp = 0; rp < 4; rp++) {
            __m256i P0[GK_MAX_ACT], P1[GK_MAX_ACT];
            __m128i M0[GK_MAX_ACT], M1[GK_MAX_ACT];
            const uint8_t *r0 = blk + (size_t)(2 * rp) * ws, *r1 = r0 + ws;
            if (kt == 6) {
                gk_q6k_row(C, (const ls_block_q6_k *)r0, yb, P0);
                gk_q6k_row(C, (const ls_block_q6_k *)r1, yb, P1);
            } else {
                gk_k45_row(kt == 5, C, r0, yb, asums, P0, M0);
                gk_k45_row(kt == 5, C, r1, yb, asums, P1, M1);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) mv[c][rp] = _mm256_set_m128i(M1[c], M0[c]);
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) hv[c][rp] = _mm256_hadd_epi32(P0[c], P1[c]);
        }
        __m256i isum[GK_MAX_ACT], imin[GK_MAX_ACT];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256i h0123 = _mm256_hadd_epi32(hv[c][0], hv[c][1]), h4567 = _mm256_hadd_epi32(hv[c][2], hv[c][3]);
            isum[c] = _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                                       _mm256_permute2x128_si256(h0123, h4567, 0x31));
            if (kt != 6) {
                const __m256i h =
                    _mm256_hadd_epi32(_mm256_hadd_epi32(mv[c][0], mv[c][1]), _mm256_hadd_epi32(mv[c][2], mv[c][3]));
                imin[c] = _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            }
        }
        if (kt == 6) {
            const __m256 dw = gk_gather_f16x8(blk + offsetof(ls_block_q6_k, d), ws);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                acc[c] =
                    _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(yb[c]->d)), _mm256_cvtepi32_ps(isum[c]), acc[c]);
        } else {
            /* d and dmin are the first two f16 of both Q4_K and Q5_K blocks */
            const __m256 dw = gk_gather_f16x8(blk, ws), dmin = gk_gather_f16x8(blk + 2, ws);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m256 da = _mm256_set1_ps(yb[c]->d);
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum[c]), acc[c]);
                acc[c] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(imin[c]), acc[c]);
            }
        }
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + c * ys, acc[c]);
}

#define GK_ARGS int64_t k, const void *w, size_t ws, const void *a, size_t as, int nact, float *y, int64_t ys
#define GK_DISPATCH(kt)                                                                                                \
    switch (nact) {                                                                                                    \
    case 1: gk_gemm8(kt, 1, k, w, ws, a, as, y, ys); break;                                                            \
    case 2: gk_gemm8(kt, 2, k, w, ws, a, as, y, ys); break;                                                            \
    case 3: gk_gemm8(kt, 3, k, w, ws, a, as, y, ys); break;                                                            \
    default: gk_gemm8(kt, 4, k, w, ws, a, as, y, ys); break;                                                           \
    }

static void gk_q4_k(GK_ARGS) {
    GK_DISPATCH(4)
}
static void gk_q5_k(GK_ARGS) {
    GK_DISPATCH(5)
}
static void gk_q6_k(GK_ARGS){GK_DISPATCH(6)}

ls_gemm8_fn ls_gemm8_kq_avx512_get(ls_type wt) {
    switch (wt) {
    case LS_TYPE_Q4_K: return gk_q4_k;
    case LS_TYPE_Q5_K: return gk_q5_k;
    case LS_TYPE_Q6_K: return gk_q6_k;
    default: return NULL;
    }
}

#else

/* Not built with AVX-512 flags: never selected. */
ls_gemm8_fn ls_gemm8_kq_avx512_get(ls_type wt) {
    (void)wt;
    return NULL;
}

#endif
