/* AVX2 dot-product kernels, bit-identical to the scalar reference (vec_dot_scalar.c).
 *
 * How they keep the reference's bits:
 *  - The integer part of each block (weights x int8 activations, scaled by the K-quants'
 *    integer sub-block scales) is exact, so any SIMD grouping of it gives the same int.
 *  - The float part runs the reference's exact sequence per output. The single-row
 *    kernels do it in scalar code after a horizontal integer sum; the eight-row kernels
 *    (ls_gemm8_fn) put eight OUTPUTS in the eight lanes of one register, so each lane
 *    performs the reference's float operations for its own (row, activation) pair: SIMD
 *    across rows, never across k. Lane-wise mul/fmadd are the same IEEE operations as
 *    the scalar ones, and the int32 -> float conversions round the same way.
 *  - Activations are in [-127, 127] (quant_act.c), so the sign trick and maddubs (u8 x i8
 *    pairs into saturating int16) never saturate: |w| <= 128, |a| <= 127 gives at most
 *    2 * 128 * 127 = 32512 per pair.
 * Speed: the eight-row kernels decode each weight block once for up to four activation
 * rows (LS_GEMM8_MAX_ACT), turn eight horizontal sums into one transpose-add, and
 * prefetch the weight rows ahead so an M = 1 matmul streams weights at memory speed.
 * One kernel body per type family is instantiated per activation count, so every count
 * runs the same per-output operations. */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/f16.h"

#define VD_INLINE static inline __attribute__((always_inline))

/* ======================================================================================
 * Shared helpers
 * ==================================================================================== */

VD_INLINE uint16_t vd_ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

VD_INLINE float vd_h2f(uint16_t h) {
    return _cvtsh_ss(h);
} /* exact, like ls_f16_to_f32 */

/* Sum of the eight int32 lanes (exact). */
VD_INLINE int32_t vd_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

VD_INLINE int32_t vd_hsum_i32x4(__m128i s) {
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The f16 at byte offset 0 of p, p + ws, ..., p + 7 ws, as eight floats (exact). */
VD_INLINE __m256 vd_gather_f16x8(const uint8_t *p, size_t ws) {
    const __m128i h = _mm_setr_epi16((short)vd_ld16(p), (short)vd_ld16(p + ws), (short)vd_ld16(p + 2 * ws),
                                     (short)vd_ld16(p + 3 * ws), (short)vd_ld16(p + 4 * ws), (short)vd_ld16(p + 5 * ws),
                                     (short)vd_ld16(p + 6 * ws), (short)vd_ld16(p + 7 * ws));
    return _mm256_cvtph_ps(h);
}

/* Software prefetch for streaming weights. Eight rows of a matrix are one contiguous
 * region of 8 * ws bytes, and with M = 1 the next region is what the next call reads.
 * Each row is short (a few hundred bytes), too short for the hardware stream prefetcher
 * to ramp up across eight interleaved streams, so each block step of the kernel
 * prefetches its share (8 * bytes-per-step) of the region VD_PF_GROUPS groups ahead.
 * Prefetches never fault, so reaching past the end of W is harmless. */
enum { VD_PF_GROUPS = 2 };
VD_INLINE void vd_prefetch_step(const uint8_t *w, size_t ws, int64_t step, size_t step_bytes) {
    /* integer address arithmetic: the target may lie past the end of W */
    const uintptr_t p = (uintptr_t)w + VD_PF_GROUPS * 8 * ws + (size_t)step * 8 * step_bytes;
    for (size_t o = 0; o < 8 * step_bytes; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

/* Unsigned weights (0..31) x int8 activations into int32x8. */
VD_INLINE __m256i vd_dot_u8(__m256i w, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}

/* Eight horizontal sums as one transpose-add: the int32x8 partials of rows 0..7, pushed
 * in row order, become [sum(P_0), ..., sum(P_7)] (three levels of hadd, then the two
 * 128-bit halves added). Done incrementally so only a few vectors stay live while
 * several activation rows are in flight. Result in .prev after row 7. */
typedef struct {
    __m256i prev, h01, h0123, h45;
} vd_red;

VD_INLINE void vd_red_push(vd_red *s, int r, __m256i p) {
    if (!(r & 1)) {
        s->prev = p;
        return;
    }
    const __m256i h = _mm256_hadd_epi32(s->prev, p);
    if (r == 1) {
        s->h01 = h;
    } else if (r == 3) {
        s->h0123 = _mm256_hadd_epi32(s->h01, h);
    } else if (r == 5) {
        s->h45 = h;
    } else {
        const __m256i h4567 = _mm256_hadd_epi32(s->h45, h);
        s->prev = _mm256_add_epi32(_mm256_permute2x128_si256(s->h0123, h4567, 0x20),
                                   _mm256_permute2x128_si256(s->h0123, h4567, 0x31));
    }
}

/* ======================================================================================
 * 32-element block types against Q8_0 activations
 * ==================================================================================== */

enum { Q32_Q4_0, Q32_Q4_1, Q32_Q5_0, Q32_Q5_1, Q32_Q8_0 };

VD_INLINE size_t q32_bsize(int t) {
    switch (t) {
    case Q32_Q4_0: return sizeof(ls_block_q4_0);
    case Q32_Q4_1: return sizeof(ls_block_q4_1);
    case Q32_Q5_0: return sizeof(ls_block_q5_0);
    case Q32_Q5_1: return sizeof(ls_block_q5_1);
    default: return sizeof(ls_block_q8_0);
    }
}

VD_INLINE int q32_has_min(int t) {
    return t == Q32_Q4_1 || t == Q32_Q5_1;
}

/* 16 packed bytes -> 32 nibbles: low nibbles are elements 0..15, high ones 16..31. */
VD_INLINE __m256i q32_nibbles(const uint8_t *qs) {
    const __m128i tmp = _mm_loadu_si128((const __m128i *)qs);
    const __m256i bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    return _mm256_and_si256(bytes, _mm256_set1_epi8(15));
}

/* 32 bits (little-endian u32 at qh) -> 32 bytes of 0xff where the bit is set. */
VD_INLINE __m256i q32_bits_to_bytes(const uint8_t *qh) {
    uint32_t x32;
    memcpy(&x32, qh, sizeof x32);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

/* The block's 32 integer weights: signed for Q4_0/Q5_0/Q8_0, unsigned for Q4_1/Q5_1. */
VD_INLINE __m256i q32_decode(int t, const uint8_t *blk) {
    switch (t) {
    case Q32_Q4_0: return _mm256_sub_epi8(q32_nibbles(blk + 2), _mm256_set1_epi8(8));
    case Q32_Q4_1: return q32_nibbles(blk + 4);
    case Q32_Q5_0: {
        /* nibble | 0xf0 where the fifth bit is clear == nibble - 16 as int8 */
        const __m256i hi = _mm256_andnot_si256(q32_bits_to_bytes(blk + 2), _mm256_set1_epi8((char)0xf0));
        return _mm256_or_si256(q32_nibbles(blk + 6), hi);
    }
    case Q32_Q5_1: {
        const __m256i hi = _mm256_and_si256(q32_bits_to_bytes(blk + 4), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(q32_nibbles(blk + 8), hi);
    }
    default: return _mm256_loadu_si256((const __m256i *)(blk + 2));
    }
}

/* One weight block against C activation blocks: P[c] = int32x8 partials. The decode
 * (and |w| for the sign trick) is shared by the C activation rows. */
VD_INLINE void q32_row(int t, int C, const uint8_t *blk, const __m256i *av, __m256i *P) {
    const __m256i w = q32_decode(t, blk);
    if (q32_has_min(t)) {
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) P[c] = vd_dot_u8(w, av[c]);
    } else {
        const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            P[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(av[c], w)), _mm256_set1_epi16(1));
    }
}

/* Sum of the 32 activation values of a block (for the m_w term). */
VD_INLINE int32_t q32_act_sum(__m256i av) {
    return vd_hsum_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), av), _mm256_set1_epi16(1)));
}

VD_INLINE float q32_dot1(int t, int64_t k, const void *w, const void *act) {
    const uint8_t *x = w;
    const ls_block_q8_0 *y = act;
    const size_t bs = q32_bsize(t);
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        const uint8_t *blk = x + (size_t)b * bs;
        const __m256i av = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256i p;
        q32_row(t, 1, blk, &av, &p);
        const float da = vd_h2f(y[b].d);
        acc = fmaf(vd_h2f(vd_ld16(blk)) * da, (float)vd_hsum_i32(p), acc);
        if (q32_has_min(t)) acc = fmaf(vd_h2f(vd_ld16(blk + 2)) * da, (float)q32_act_sum(av), acc);
    }
    return acc;
}

/* Eight rows x C activation rows; lane r of acc[c] is the accumulator of (row r, act c). */
VD_INLINE void q32_gemm8(int t, int C, int64_t k, const void *w, size_t ws, const void *act, size_t as, float *y,
                         int64_t ys) {
    const uint8_t *x = w, *a = act;
    const size_t bs = q32_bsize(t);
    __m256 acc[LS_GEMM8_MAX_ACT];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        const uint8_t *blk = x + (size_t)b * bs;
        vd_prefetch_step(x, ws, b, bs);
        __m256i av[LS_GEMM8_MAX_ACT];
        float da[LS_GEMM8_MAX_ACT];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const ls_block_q8_0 *yb = (const ls_block_q8_0 *)(a + c * as) + b;
            av[c] = _mm256_loadu_si256((const __m256i *)yb->qs);
            da[c] = vd_h2f(yb->d);
        }
        vd_red red[LS_GEMM8_MAX_ACT];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m256i P[LS_GEMM8_MAX_ACT];
            q32_row(t, C, blk + r * ws, av, P);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) vd_red_push(&red[c], r, P[c]);
        }
        const __m256 dw = vd_gather_f16x8(blk, ws);
        const __m256 mw = q32_has_min(t) ? vd_gather_f16x8(blk + 2, ws) : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256 dav = _mm256_set1_ps(da[c]);
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dav), _mm256_cvtepi32_ps(red[c].prev), acc[c]);
            if (q32_has_min(t))
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dav), _mm256_set1_ps((float)q32_act_sum(av[c])), acc[c]);
        }
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + c * ys, acc[c]);
}

/* ======================================================================================
 * Signed 32-element blocks (Q4_0, Q5_0, Q8_0): two-lane order, tile kernels
 *
 * The reference (vec_dot_scalar.c) keeps two float accumulators per output, one per half
 * block (elements 0..15 and 16..31). Here a register holds FOUR outputs ("slots"): lane
 * q is slot q's low-half accumulator and lane q + 4 its high-half one. Per block, the
 * four slots' int32x8 partials are reduced by two levels of hadd to exactly those eight
 * half-block sums, converted, and one fma with the eight scales d_w * d_a updates all
 * eight accumulators: per output the reference's operations, no horizontal sum per
 * block. The four slots are C activation rows (4, 2 or 1) times 4 / C weight rows; the
 * slot a pair lands in never changes its operations, so any tiling gives the same bits.
 * ==================================================================================== */

/* int32x8 partials of one (weight block, activation block) pair: lanes 0..3 cover
 * elements 0..15, lanes 4..7 elements 16..31 (the decode puts element j in byte j). */
VD_INLINE __m256i q32s_pair(__m256i aw, __m256i w, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1));
}

VD_INLINE float q32s_dot1(int t, int64_t k, const void *w, const void *act) {
    const uint8_t *x = w;
    const ls_block_q8_0 *y = act;
    const size_t bs = q32_bsize(t);
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        const uint8_t *blk = x + (size_t)b * bs;
        const __m256i wv = q32_decode(t, blk);
        const __m256i p = q32s_pair(_mm256_sign_epi8(wv, wv), wv, _mm256_loadu_si256((const __m256i *)y[b].qs));
        const float s = vd_h2f(vd_ld16(blk)) * vd_h2f(y[b].d);
        acc0 = fmaf(s, (float)vd_hsum_i32x4(_mm256_castsi256_si128(p)), acc0);
        acc1 = fmaf(s, (float)vd_hsum_i32x4(_mm256_extracti128_si256(p, 1)), acc1);
    }
    return acc0 + acc1;
}

enum { Q32T_MAXR = 16, Q32T_MAXQ = 8 };

/* One register of four slots for block b: the int sums of slots q (weight row i, activation
 * row c as q32t_tile lays them out), reduced to the eight half-block sums, and one fma. */
VD_INLINE __m256 q32t_quad(int t, int C, int ag, int64_t b, const __m256i *wv, const __m256i *aw,
                           const ls_block_q8_0 *const *ap, __m256 S, __m256 acc) {
    __m256i P[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const int i = C == 4 ? 0 : q / C, c = C == 4 ? 4 * ag + q : C == 2 ? q % 2 : ag;
        const __m256i av = _mm256_loadu_si256((const __m256i *)ap[c][b].qs);
        P[q] = t == Q32_Q8_0 ? q32s_pair(aw[i], wv[i], av) : _mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(av, wv[i]));
    }
    /* Q8_0: int32 partials, two hadd levels. Q4_0/Q5_0 (|w| <= 16): int16 pair sums
     * (|.| <= 4064), two hadd levels give sums of 8 elements (|.| <= 16256, no wrap), one
     * madd the int32 half-block sums: one multiply instead of four. */
    const __m256i H =
        t == Q32_Q8_0
            ? _mm256_hadd_epi32(_mm256_hadd_epi32(P[0], P[1]), _mm256_hadd_epi32(P[2], P[3]))
            : _mm256_madd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(P[0], P[1]), _mm256_hadd_epi16(P[2], P[3])),
                                _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(H), S, acc);
}

/* One tile of NQ registers of four slots each. C (4, 2 or 1) activation rows per slot
 * group: with C = 4, register g holds weight row g / AG against activation rows
 * 4 (g % AG) .. 4 (g % AG) + 3 (AG = 1 or 2 groups of four); with C < 4, register g holds
 * weight rows g * (4 / C) + q / C against activation row q % C (slot q). Rows >= nrows and
 * activations >= nact alias the last valid one (computed, never stored). Each weight
 * block is decoded once per tile for all C * AG activation rows. */
VD_INLINE void q32t_tile(int t, int C, int AG, int NQ, int64_t k, const uint8_t *w, size_t ws, int nrows,
                         const uint8_t *act, size_t as, int nact, float *y, int64_t ys) {
    const int RPQ = C == 4 ? 1 : 4 / C, NR = C == 4 ? NQ / AG : C == 2 ? NQ * 2 : NQ / AG * 4, NA = C * AG;
    const size_t bs = q32_bsize(t);
    const uint8_t *rp[Q32T_MAXR];
    const ls_block_q8_0 *ap[8];
    for (int i = 0; i < NR; i++) rp[i] = w + (size_t)(i < nrows ? i : nrows - 1) * ws;
    for (int c = 0; c < NA; c++) ap[c] = (const ls_block_q8_0 *)(act + (size_t)(c < nact ? c : nact - 1) * as);
    __m256 acc[Q32T_MAXQ];
    for (int g = 0; g < NQ; g++) acc[g] = _mm256_setzero_ps();
    const uintptr_t pf = (uintptr_t)w + 2 * (size_t)NR * ws; /* integer: may lie past W */
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        for (size_t o = 0; o < (size_t)NR * bs; o += 64)
            _mm_prefetch((const char *)(pf + (size_t)b * NR * bs + o), _MM_HINT_T0);
        short dh[8];
#pragma GCC unroll 8
        for (int c = 0; c < NA; c++) dh[c] = (short)ap[c][b].d;
        __m256 DA[2];
        if (C == 4) {
            DA[0] = _mm256_cvtph_ps(_mm_setr_epi16(dh[0], dh[1], dh[2], dh[3], dh[0], dh[1], dh[2], dh[3]));
            if (AG == 2)
                DA[1] = _mm256_cvtph_ps(_mm_setr_epi16(dh[4], dh[5], dh[6], dh[7], dh[4], dh[5], dh[6], dh[7]));
        } else if (C == 2) {
            DA[0] = _mm256_cvtph_ps(_mm_setr_epi16(dh[0], dh[1], dh[0], dh[1], dh[0], dh[1], dh[0], dh[1]));
        } else {
            DA[0] = _mm256_cvtph_ps(_mm_set1_epi16(dh[0]));
            if (AG == 2) DA[1] = _mm256_cvtph_ps(_mm_set1_epi16(dh[1]));
        }
#pragma GCC unroll 8
        for (int g0 = 0; g0 < NQ; g0 += (C == 2 ? 1 : AG)) {
            /* decode the weight rows of this step once */
            const int nr = RPQ, r0 = C == 4 ? g0 / AG : C == 2 ? g0 * 2 : g0 / AG * 4;
            __m256i wv[4], aw[4];
            short wh[4];
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                const uint8_t *blk = rp[r0 + i] + (size_t)b * bs;
                wv[i] = q32_decode(t, blk);
                aw[i] = _mm256_sign_epi8(wv[i], wv[i]);
                wh[i] = (short)vd_ld16(blk);
            }
            __m256 DW;
            if (C == 4)
                DW = _mm256_cvtph_ps(_mm_set1_epi16(wh[0]));
            else if (C == 2)
                DW = _mm256_cvtph_ps(_mm_setr_epi16(wh[0], wh[0], wh[1], wh[1], wh[0], wh[0], wh[1], wh[1]));
            else
                DW = _mm256_cvtph_ps(_mm_setr_epi16(wh[0], wh[1], wh[2], wh[3], wh[0], wh[1], wh[2], wh[3]));
            acc[g0] = q32t_quad(t, C, 0, b, wv, aw, ap, _mm256_mul_ps(DW, DA[0]), acc[g0]);
            if (C != 2 && AG == 2)
                acc[g0 + 1] = q32t_quad(t, C, 1, b, wv, aw, ap, _mm256_mul_ps(DW, DA[1]), acc[g0 + 1]);
        }
    }
    for (int g = 0; g < NQ; g++) {
        float r[4];
        _mm_storeu_ps(r, _mm_add_ps(_mm256_castps256_ps128(acc[g]), _mm256_extractf128_ps(acc[g], 1)));
        for (int q = 0; q < 4; q++) {
            const int row = C == 4 ? g / AG : C == 2 ? g * 2 + q / 2 : g / AG * 4 + q;
            const int c = C == 4 ? 4 * (g % AG) + q : C == 2 ? q % 2 : g % AG;
            if (row < nrows && c < nact) y[c * ys + row] = r[q];
        }
    }
}

/* Any number of weight rows x any number of activation rows: activation groups of 4
 * (or 3), then 2, 1 (eight activation rows per decode, C = 4 with AG = 2, measured
 * slower: the extra live registers spill); within a group, tiles of weight rows (the caller keeps the rows
 * in L1). Each output's operations do not depend on the group or tile it falls in. */
VD_INLINE void q32t_rows(int t, int64_t k, const void *w, size_t ws, int64_t nrows, const void *act, size_t as,
                         int nact, float *y, int64_t ys) {
    const uint8_t *x = w, *a = act;
    for (int a0 = 0; a0 < nact;) {
        const int rem = nact - a0;
        const uint8_t *ag = a + (size_t)a0 * as;
        float *yg = y + (int64_t)a0 * ys;
        if (rem >= 3) {
            const int na = rem < 4 ? rem : 4;
            for (int64_t r = 0; r < nrows; r += 4)
                q32t_tile(t, 4, 1, 4, k, x + r * ws, ws, nrows - r < 4 ? (int)(nrows - r) : 4, ag, as, na, yg + r, ys);
            a0 += na;
        } else if (rem == 2) {
            /* 4 rows x 2 activations per register pair; Q8_0 (cheap decode) likes two pairs */
            if (t == Q32_Q8_0)
                for (int64_t r = 0; r < nrows; r += 8)
                    q32t_tile(t, 1, 2, 4, k, x + r * ws, ws, nrows - r < 8 ? (int)(nrows - r) : 8, ag, as, 2, yg + r,
                              ys);
            else
                for (int64_t r = 0; r < nrows; r += 4)
                    q32t_tile(t, 1, 2, 2, k, x + r * ws, ws, nrows - r < 4 ? (int)(nrows - r) : 4, ag, as, 2, yg + r,
                              ys);
            a0 += 2;
        } else {
            for (int64_t r = 0; r < nrows; r += 8)
                q32t_tile(t, 1, 1, 2, k, x + r * ws, ws, nrows - r < 8 ? (int)(nrows - r) : 8, ag, as, 1, yg + r, ys);
            a0 += 1;
        }
    }
}

#define T_ARGS                                                                                                         \
    int64_t k, const void *w, size_t ws, int64_t nrows, const void *a, size_t as, int nact, float *y, int64_t ys
static void t_q4_0(T_ARGS) {
    q32t_rows(Q32_Q4_0, k, w, ws, nrows, a, as, nact, y, ys);
}
static void t_q5_0(T_ARGS) {
    q32t_rows(Q32_Q5_0, k, w, ws, nrows, a, as, nact, y, ys);
}
static void t_q8_0(T_ARGS) {
    q32t_rows(Q32_Q8_0, k, w, ws, nrows, a, as, nact, y, ys);
}

ls_tile_fn ls_tile_avx2_get(ls_type wt) {
    switch (wt) {
    case LS_TYPE_Q4_0: return t_q4_0;
    case LS_TYPE_Q5_0: return t_q5_0;
    case LS_TYPE_Q8_0: return t_q8_0;
    default: return NULL;
    }
}

/* ======================================================================================
 * K-quants against Q8_K activations
 * ==================================================================================== */

/* int16 shuffle mask broadcasting 16-bit element i of each 128-bit lane. */
VD_INLINE __m256i vd_bcast16(int i) {
    return _mm256_set1_epi16((short)(((2 * i + 1) << 8) | (2 * i)));
}

/* The activation block's eight 32-element sums (int16), shared by all weight rows. */
VD_INLINE __m128i k4_act_sums(const ls_block_q8_k *y) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    return _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
}

/* Unpacked 6-bit scales (low 128 bits) and mins (high 128 bits) as int16, from the 12
 * packed bytes of Q4_K/Q5_K (llama.cpp's utmp shuffle). */
VD_INLINE __m256i k4_scales_mins(const uint8_t *scales) {
    uint32_t u[4];
    memcpy(u, scales, 12);
    const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
    u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4); /* mins 4..7 */
    const uint32_t mins03 = u[1] & km1;
    u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4); /* scales 4..7 */
    u[2] = mins03;
    u[0] &= km1; /* scales 0..3 */
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
}

/* One Q4_K (is5 = 0) or Q5_K (is5 = 1) block against C activation blocks:
 * P[c] = int32x8 partials of sum_j sc_j * dot_j, Mn[c] = int32x4 partials of
 * sum_j m_j * asum_j. Nibbles, fifth bits and scale vectors are decoded once for all C. */
VD_INLINE void k45_row(int is5, int C, const uint8_t *xb, const ls_block_q8_k *const *yb, const __m128i *asums,
                       __m256i *P, __m128i *Mn) {
    const uint8_t *scb = xb + (is5 ? offsetof(ls_block_q5_k, scales) : offsetof(ls_block_q4_k, scales));
    const uint8_t *qs = xb + (is5 ? offsetof(ls_block_q5_k, qs) : offsetof(ls_block_q4_k, qs));
    const __m256i sm = k4_scales_mins(scb);
    const __m128i mins = _mm256_extracti128_si256(sm, 1);
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        Mn[c] = _mm_madd_epi16(mins, asums[c]);
        P[c] = _mm256_setzero_si256();
    }
    const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i hb = is5 ? _mm256_loadu_si256((const __m256i *)(xb + offsetof(ls_block_q5_k, qh))) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
        __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if (is5) {
            /* fifth bits: bit 2g of qh[l] for the low nibbles, 2g + 1 for the high ones;
             * (hb & 1) << 4 stays inside each byte (16-bit shifts of 0/1 bytes) */
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hb = _mm256_srli_epi16(hb, 1);
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hb = _mm256_srli_epi16(hb, 1);
        }
        const __m256i sl = _mm256_shuffle_epi8(scales, vd_bcast16(2 * g));
        const __m256i sh = _mm256_shuffle_epi8(scales, vd_bcast16(2 * g + 1));
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const int8_t *q8 = yb[c]->qs + 64 * g;
            const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
            const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            P[c] = _mm256_add_epi32(P[c], _mm256_add_epi32(_mm256_madd_epi16(sl, pl), _mm256_madd_epi16(sh, ph)));
        }
    }
}

/* One Q6_K block against C activation blocks: P[c] = int32x8 partials of
 * sum_j sc_j * sum (q - 32) a over sixteen sub-blocks of 16, computed as
 * sum_j sc_j * sum q a (q unsigned 0..63) minus 32 * sum_j sc_j * bsum_j (the same integer;
 * the scalar reference uses the same definition). */
VD_INLINE void q6k_row(int C, const ls_block_q6_k *x, const ls_block_q8_k *const *yb, __m256i *P) {
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales); /* [16] int8 */
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) P[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)ql);
        const __m256i b2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
        const __m256i bh = _mm256_loadu_si256((const __m256i *)qh);
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(b2, m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            /* scales of sub-blocks s and s + 1 (elements 0..15 and 16..31 of this chunk) */
            const int s = 8 * h + 2 * k;
            const __m128i shuf = _mm_set_epi64x((long long)(0x0101010101010101ull * (uint64_t)(s + 1)),
                                                (long long)(0x0101010101010101ull * (uint64_t)s));
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, shuf));
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m256i a8 = _mm256_loadu_si256((const __m256i *)(yb[c]->qs + 128 * h + 32 * k));
                P[c] = _mm256_add_epi32(P[c], _mm256_madd_epi16(sc16, _mm256_maddubs_epi16(q[k], a8)));
            }
        }
    }
    const __m256i sc16all = _mm256_cvtepi8_epi16(sc8);
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const __m256i offs = _mm256_madd_epi16(sc16all, _mm256_loadu_si256((const __m256i *)yb[c]->bsums));
        P[c] = _mm256_sub_epi32(P[c], _mm256_slli_epi32(offs, 5));
    }
}

static float vd_q4_k(int64_t k, const void *w, const void *act) {
    const ls_block_q4_k *x = w;
    const ls_block_q8_k *y = act;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        const ls_block_q8_k *yb = &y[b];
        const __m128i asums = k4_act_sums(yb);
        __m256i isum;
        __m128i imin;
        k45_row(0, 1, (const uint8_t *)&x[b], &yb, &asums, &isum, &imin);
        acc = fmaf(vd_h2f(x[b].d) * yb->d, (float)vd_hsum_i32(isum), acc);
        acc = fmaf(-(vd_h2f(x[b].dmin) * yb->d), (float)vd_hsum_i32x4(imin), acc);
    }
    return acc;
}

static float vd_q5_k(int64_t k, const void *w, const void *act) {
    const ls_block_q5_k *x = w;
    const ls_block_q8_k *y = act;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        const ls_block_q8_k *yb = &y[b];
        const __m128i asums = k4_act_sums(yb);
        __m256i isum;
        __m128i imin;
        k45_row(1, 1, (const uint8_t *)&x[b], &yb, &asums, &isum, &imin);
        acc = fmaf(vd_h2f(x[b].d) * yb->d, (float)vd_hsum_i32(isum), acc);
        acc = fmaf(-(vd_h2f(x[b].dmin) * yb->d), (float)vd_hsum_i32x4(imin), acc);
    }
    return acc;
}

static float vd_q6_k(int64_t k, const void *w, const void *act) {
    const ls_block_q6_k *x = w;
    const ls_block_q8_k *y = act;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        const ls_block_q8_k *yb = &y[b];
        __m256i isum;
        q6k_row(1, &x[b], &yb, &isum);
        acc = fmaf(vd_h2f(x[b].d) * yb->d, (float)vd_hsum_i32(isum), acc);
    }
    return acc;
}

/* Eight rows of Q4_K/Q5_K/Q6_K (kt: 4, 5 or 6) x C activation rows. */
VD_INLINE void k_gemm8(int kt, int C, int64_t k, const void *w, size_t ws, const void *act, size_t as, float *y,
                       int64_t ys) {
    const uint8_t *x = w, *a = act;
    const size_t bs = kt == 4 ? sizeof(ls_block_q4_k) : kt == 5 ? sizeof(ls_block_q5_k) : sizeof(ls_block_q6_k);
    __m256 acc[LS_GEMM8_MAX_ACT];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        const uint8_t *blk = x + (size_t)b * bs;
        vd_prefetch_step(x, ws, b, bs);
        const ls_block_q8_k *yb[LS_GEMM8_MAX_ACT];
        __m128i asums[LS_GEMM8_MAX_ACT];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            yb[c] = (const ls_block_q8_k *)(a + c * as) + b;
            if (kt != 6) asums[c] = k4_act_sums(yb[c]);
        }
        /* Rows in pairs (a K-quant block is too much work per row to unroll all eight
         * without spilling): hv[c][pair] = hadd(P_2p, P_2p+1) and mv[c][pair] = the two
         * rows' int32x4 min partials side by side; after the loop, the rest of the
         * transpose-add (as vd_red) turns them into one int per row. */
        __m256i hv[LS_GEMM8_MAX_ACT][4], mv[LS_GEMM8_MAX_ACT][4];
#pragma GCC unroll 1
        for (int rp = 0; rp < 4; rp++) {
            __m256i P0[LS_GEMM8_MAX_ACT], P1[LS_GEMM8_MAX_ACT];
            __m128i M0[LS_GEMM8_MAX_ACT], M1[LS_GEMM8_MAX_ACT];
            const uint8_t *r0 = blk + (size_t)(2 * rp) * ws, *r1 = r0 + ws;
            if (kt == 6) {
                q6k_row(C, (const ls_block_q6_k *)r0, yb, P0);
                q6k_row(C, (const ls_block_q6_k *)r1, yb, P1);
            } else {
                k45_row(kt == 5, C, r0, yb, asums, P0, M0);
                k45_row(kt == 5, C, r1, yb, asums, P1, M1);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) mv[c][rp] = _mm256_set_m128i(M1[c], M0[c]);
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) hv[c][rp] = _mm256_hadd_epi32(P0[c], P1[c]);
        }
        __m256i isum[LS_GEMM8_MAX_ACT], imin[LS_GEMM8_MAX_ACT];
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
            const __m256 dw = vd_gather_f16x8(blk + offsetof(ls_block_q6_k, d), ws);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                acc[c] =
                    _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(yb[c]->d)), _mm256_cvtepi32_ps(isum[c]), acc[c]);
        } else {
            /* d and dmin are the first two f16 of both Q4_K and Q5_K blocks */
            const __m256 dw = vd_gather_f16x8(blk, ws), dmin = vd_gather_f16x8(blk + 2, ws);
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

/* ======================================================================================
 * Float weights against F32 activations (order of dot_f32.c, one register per row)
 * ==================================================================================== */

enum { FW_F32, FW_F16, FW_BF16 };

/* Eight weights starting at element i of a row, as floats (exact conversions). */
VD_INLINE __m256 fw_load8(int t, const uint8_t *row, int64_t i) {
    if (t == FW_F32) return _mm256_loadu_ps((const float *)row + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (t == FW_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

VD_INLINE float fw_load1(int t, const uint8_t *row, int64_t i) {
    if (t == FW_F32) return ((const float *)row)[i];
    const uint16_t h = ((const uint16_t *)row)[i];
    return t == FW_F16 ? vd_h2f(h) : ls_bf16_to_f32(h);
}

VD_INLINE float fw_tree8(__m256 v) {
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

/* Eight rows, one activation row: eight independent accumulator chains sharing each x
 * load; each row's chain is exactly ls_dot_*_avx2's. Float weights are rare in matmuls
 * (norms are vectors), so activation rows are simply taken one at a time. */
VD_INLINE void fw_gemm8(int t, int64_t k, const void *w, size_t ws, const void *act, size_t as, int nact, float *y,
                        int64_t ys) {
    const uint8_t *rows = w;
    for (int c = 0; c < nact; c++) {
        const float *x = (const float *)((const uint8_t *)act + c * as);
        __m256 acc[8];
        for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= k; i += 8) {
            const __m256 xv = _mm256_loadu_ps(x + i);
            vd_prefetch_step(rows, ws, i / 8, t == FW_F32 ? 32 : 16);
            for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(fw_load8(t, rows + r * ws, i), xv, acc[r]);
        }
        for (int r = 0; r < 8; r++) {
            float s = fw_tree8(acc[r]);
            for (int64_t j = i; j < k; j++) s = fmaf(fw_load1(t, rows + r * ws, j), x[j], s);
            y[c * ys + r] = s;
        }
    }
}

/* ======================================================================================
 * Kernel tables
 * ==================================================================================== */

static float vd_f32(int64_t k, const void *w, const void *a) {
    return ls_dot_f32_avx2(w, a, k);
}
static float vd_f16(int64_t k, const void *w, const void *a) {
    return ls_dot_f16_f32_avx2(w, a, k);
}
static float vd_bf16(int64_t k, const void *w, const void *a) {
    return ls_dot_bf16_f32_avx2(w, a, k);
}
static float vd_q4_0(int64_t k, const void *w, const void *a) {
    return q32s_dot1(Q32_Q4_0, k, w, a);
}
static float vd_q4_1(int64_t k, const void *w, const void *a) {
    return q32_dot1(Q32_Q4_1, k, w, a);
}
static float vd_q5_0(int64_t k, const void *w, const void *a) {
    return q32s_dot1(Q32_Q5_0, k, w, a);
}
static float vd_q5_1(int64_t k, const void *w, const void *a) {
    return q32_dot1(Q32_Q5_1, k, w, a);
}
static float vd_q8_0(int64_t k, const void *w, const void *a) {
    return q32s_dot1(Q32_Q8_0, k, w, a);
}

#define G8_ARGS int64_t k, const void *w, size_t ws, const void *a, size_t as, int nact, float *y, int64_t ys
/* One entry point per type; nact is made a compile-time constant so the activation
 * loops unroll into registers. */
#define G8_DISPATCH(call)                                                                                              \
    switch (nact) {                                                                                                    \
    case 1: call(1); break;                                                                                            \
    case 2: call(2); break;                                                                                            \
    case 3: call(3); break;                                                                                            \
    default: call(4); break;                                                                                           \
    }

#define G8_Q32(T, C) q32_gemm8(T, C, k, w, ws, a, as, y, ys)
#define G8_Q4_0(C)   G8_Q32(Q32_Q4_0, C)
#define G8_Q4_1(C)   G8_Q32(Q32_Q4_1, C)
#define G8_Q5_0(C)   G8_Q32(Q32_Q5_0, C)
#define G8_Q5_1(C)   G8_Q32(Q32_Q5_1, C)
#define G8_Q8_0(C)   G8_Q32(Q32_Q8_0, C)
#define G8_Q4_K(C)   k_gemm8(4, C, k, w, ws, a, as, y, ys)
#define G8_Q5_K(C)   k_gemm8(5, C, k, w, ws, a, as, y, ys)
#define G8_Q6_K(C)   k_gemm8(6, C, k, w, ws, a, as, y, ys)

static void g8_q4_1(G8_ARGS) {
    G8_DISPATCH(G8_Q4_1)
}
static void g8_q5_1(G8_ARGS) {
    G8_DISPATCH(G8_Q5_1)
}
static void g8_q4_k(G8_ARGS) {
    G8_DISPATCH(G8_Q4_K)
}
static void g8_q5_k(G8_ARGS) {
    G8_DISPATCH(G8_Q5_K)
}
static void g8_q6_k(G8_ARGS) {
    G8_DISPATCH(G8_Q6_K)
}
static void g8_f32(G8_ARGS) {
    fw_gemm8(FW_F32, k, w, ws, a, as, nact, y, ys);
}
static void g8_f16(G8_ARGS) {
    fw_gemm8(FW_F16, k, w, ws, a, as, nact, y, ys);
}
static void g8_bf16(G8_ARGS) {
    fw_gemm8(FW_BF16, k, w, ws, a, as, nact, y, ys);
}

ls_vec_dot_fn ls_vec_dot_avx2_get(ls_type wt) {
    switch (wt) {
    case LS_TYPE_F32: return vd_f32;
    case LS_TYPE_F16: return vd_f16;
    case LS_TYPE_BF16: return vd_bf16;
    case LS_TYPE_Q4_0: return vd_q4_0;
    case LS_TYPE_Q4_1: return vd_q4_1;
    case LS_TYPE_Q5_0: return vd_q5_0;
    case LS_TYPE_Q5_1: return vd_q5_1;
    case LS_TYPE_Q8_0: return vd_q8_0;
    case LS_TYPE_Q4_K: return vd_q4_k;
    case LS_TYPE_Q5_K: return vd_q5_k;
    case LS_TYPE_Q6_K: return vd_q6_k;
    default: return NULL;
    }
}

ls_gemm8_fn ls_gemm8_avx2_get(ls_type wt) {
    switch (wt) {
    case LS_TYPE_F32: return g8_f32;
    case LS_TYPE_F16: return g8_f16;
    case LS_TYPE_BF16: return g8_bf16;
    case LS_TYPE_Q4_1: return g8_q4_1;
    case LS_TYPE_Q5_1: return g8_q5_1;
    case LS_TYPE_Q4_K: return g8_q4_k;
    case LS_TYPE_Q5_K: return g8_q5_k;
    case LS_TYPE_Q6_K: return g8_q6_k;
    default: return NULL;
    }
}

#else
/* Not an x86 build with AVX2 flags: no SIMD kernels; ls_cpu_isa() reports scalar. */
ls_vec_dot_fn ls_vec_dot_avx2_get(ls_type wt) {
    (void)wt;
    return NULL;
}
ls_gemm8_fn ls_gemm8_avx2_get(ls_type wt) {
    (void)wt;
    return NULL;
}
ls_tile_fn ls_tile_avx2_get(ls_type wt) {
    (void)wt;
    return NULL;
}
#endif
