/* AVX-512 VNNI tile kernels for Q4_0, Q5_0 and Q8_0 weights (256-bit EVEX vectors: VPDPBUSD
 * and the 32 vector registers of AVX-512VL), bit-identical to the scalar reference.
 *
 * The reference (vec_dot_scalar.c) keeps two float accumulators per output, one per half
 * block, updated once per block: acc_h = fmaf(d_w * d_a, (float)isum_h, acc_h), and returns
 * acc_0 + acc_1. Here one register holds four weight rows: lane h * 4 + r is row r's half-h
 * accumulator. The integer half-block sums reach exactly those lanes with no horizontal
 * add: four rows' decoded blocks are transposed (4 x 4 of 32-bit groups per 128-bit half),
 * so vector g holds, in lane (h, r), row r's elements 16 h + 4 g .. + 3, and the activation
 * row comes pre-arranged (ls_quantize_act_row_q8v) so vector g holds, in lane (h, r),
 * elements 16 h + 4 g .. + 3 for every r. Four VPDPBUSD then leave the half-block sums in
 * place. VPDPBUSD multiplies unsigned weights by signed activations, so weights are used
 * biased (Q8_0: w + 128, Q5_0: the raw 5-bit value w + 16, Q4_0: the raw nibble w + 8) and
 * each sum starts from -bias * (half-block sum of the activations), which the activation
 * layout also carries: the int32 result is the same integer as the reference's (exact,
 * no saturation: |sum| < 2^31). One cvt, one mul (d_w * d_a, the reference's product) and
 * one fma per lane then run the reference's float operations per output.
 *
 * Speed: each group of four weight rows is decoded and transposed once into an L1 buffer,
 * then every activation row of the tile runs 4 VPDPBUSD + 4 float ops per block and four
 * rows; the decode is amortized over all of them. A few activation rows (decode, a verify
 * block) against eight weight rows use 512-bit registers holding both groups of four
 * (tv_fused8): the same lanes and operations, half the instructions (on this VM a 512-bit
 * VPDPBUSD issues as fast as a 256-bit one, docs/design.md "Kernels"). */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__AVX2__) &&                   \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#define TV_INLINE static inline __attribute__((always_inline))

enum { TV_Q4_0, TV_Q5_0, TV_Q8_0 };
/* Blocks decoded per pass (the L1 buffer: 160 bytes a block) and activation rows per pass
 * (their accumulators stay in memory between K segments). */
enum { TV_SEG = 96, TV_ACT = 256 };
/* Up to this many activation rows (a verify block) take the unbuffered path. */
enum { TV_FUSED_MAX = 8 };

/* One decoded block of four rows: the four transposed weight vectors and d_w per lane. */
typedef struct {
    __m256i w[4];
    __m256 dw;
} tv_wblock;

TV_INLINE __m256i tv_nibbles(const uint8_t *qs) {
    const __m128i tmp = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp), _mm256_set1_epi8(15));
}

/* 32 bits (little-endian u32 at qh) -> 32 bytes, 0x10 where the bit is set. */
TV_INLINE __m256i tv_fifth_bits(const uint8_t *qh) {
    uint32_t x32;
    memcpy(&x32, qh, sizeof x32);
    const __mmask32 m = (__mmask32)x32;
    return _mm256_maskz_mov_epi8(m, _mm256_set1_epi8(0x10));
}

/* The block's 32 weights as unsigned bytes (w + bias); element j in byte j. */
TV_INLINE __m256i tv_decode(int t, const uint8_t *blk) {
    switch (t) {
    case TV_Q4_0: return tv_nibbles(blk + 2);
    case TV_Q5_0: return _mm256_or_si256(tv_nibbles(blk + 6), tv_fifth_bits(blk + 2));
    default: return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
    }
}

TV_INLINE size_t tv_bsize(int t) {
    return t == TV_Q4_0 ? sizeof(ls_block_q4_0) : t == TV_Q5_0 ? sizeof(ls_block_q5_0) : sizeof(ls_block_q8_0);
}

/* log2 of the bias: Q4_0 8, Q5_0 16, Q8_0 128. */
TV_INLINE int tv_bias_shift(int t) {
    return t == TV_Q4_0 ? 3 : t == TV_Q5_0 ? 4 : 7;
}

TV_INLINE uint16_t tv_ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Decode and transpose blocks [b0, b0 + nb) of rows r[0..3] into buf[0], buf[stride], ... */
TV_INLINE void tv_decode_rows(int t, const uint8_t *const *r, int64_t b0, int nb, tv_wblock *buf, int stride) {
    const size_t bs = tv_bsize(t);
    for (int i = 0; i < nb; i++) {
        const size_t o = (size_t)(b0 + i) * bs;
        const __m256i w0 = tv_decode(t, r[0] + o), w1 = tv_decode(t, r[1] + o);
        const __m256i w2 = tv_decode(t, r[2] + o), w3 = tv_decode(t, r[3] + o);
        const __m256i t0 = _mm256_unpacklo_epi32(w0, w1), t1 = _mm256_unpackhi_epi32(w0, w1);
        const __m256i t2 = _mm256_unpacklo_epi32(w2, w3), t3 = _mm256_unpackhi_epi32(w2, w3);
        buf[i * stride].w[0] = _mm256_unpacklo_epi64(t0, t2);
        buf[i * stride].w[1] = _mm256_unpackhi_epi64(t0, t2);
        buf[i * stride].w[2] = _mm256_unpacklo_epi64(t1, t3);
        buf[i * stride].w[3] = _mm256_unpackhi_epi64(t1, t3);
        const short d0 = (short)tv_ld16(r[0] + o), d1 = (short)tv_ld16(r[1] + o);
        const short d2 = (short)tv_ld16(r[2] + o), d3 = (short)tv_ld16(r[3] + o);
        buf[i * stride].dw = _mm256_cvtph_ps(_mm_setr_epi16(d0, d1, d2, d3, d0, d1, d2, d3));
    }
}

/* C activation rows (1..4) against the decoded segment of NG groups of four rows:
 * acc[c * NG + g] += the segment's blocks. Each activation block is loaded once for the
 * NG groups (the activation rows come from L2; the weights from the L1 buffer). */
TV_INLINE void tv_acts(int t, int NG, int C, const tv_wblock *buf, int nb, const ls_act_q8v_block *const *ab,
                       __m256 *acc, int first) {
    const int sh = tv_bias_shift(t);
    __m256 a[8];
#pragma GCC unroll 8
    for (int i = 0; i < C * NG; i++) a[i] = first ? _mm256_setzero_ps() : acc[i];
    for (int i = 0; i < nb; i++) {
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const ls_act_q8v_block *x = &ab[c][i];
            const __m256i p0 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)x->neg_sum), sh);
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)x->q[0]);
            const __m256i q1 = _mm256_loadu_si256((const __m256i *)x->q[1]);
            const __m256i q2 = _mm256_loadu_si256((const __m256i *)x->q[2]);
            const __m256i q3 = _mm256_loadu_si256((const __m256i *)x->q[3]);
            const __m256 da = _mm256_set1_ps(x->d);
#pragma GCC unroll 2
            for (int g = 0; g < NG; g++) {
                const tv_wblock *wb = &buf[i * NG + g];
                __m256i p = _mm256_dpbusd_epi32(p0, wb->w[0], q0);
                p = _mm256_dpbusd_epi32(p, wb->w[1], q1);
                p = _mm256_dpbusd_epi32(p, wb->w[2], q2);
                p = _mm256_dpbusd_epi32(p, wb->w[3], q3);
                a[c * NG + g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(wb->dw, da), a[c * NG + g]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < C * NG; i++) acc[i] = a[i];
}

/* y[c][4 g + i] = lane i + lane i + 4 of acc[c * NG + g]: the reference's acc_0 + acc_1. */
static void tv_store(const __m256 *acc, int NG, int nact, int nrows, float *y, int64_t ys) {
    for (int c = 0; c < nact; c++)
        for (int g = 0; g < NG; g++) {
            const __m256 v = acc[c * NG + g];
            const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            float *yc = y + (int64_t)c * ys + 4 * g;
            if (4 * g + 4 <= nrows) {
                _mm_storeu_ps(yc, s);
            } else {
                float t[4];
                _mm_storeu_ps(t, s);
                for (int i = 0; 4 * g + i < nrows; i++) yc[i] = t[i];
            }
        }
}

/* Few activation rows (C <= TV_FUSED_MAX, all of their accumulators in registers): decode each block of the NG
 * groups and use it at once, with no buffer; prefetch the weight rows four groups ahead (a
 * group's eight rows are one contiguous region, and with M = 1 the weights stream from
 * memory: rows are too short for the hardware prefetcher to ramp up on its own). The
 * per-output operations are those of tv_acts. */
TV_INLINE void tv_fused(int t, int NG, int C, const uint8_t *const *r, size_t ws, int64_t nb,
                        const ls_act_q8v_block *const *ab, __m256 *acc) {
    const int sh = tv_bias_shift(t);
    const size_t bs = tv_bsize(t);
    const uintptr_t pf = (uintptr_t)r[0] + 4 * 8 * ws; /* integer: may lie past W */
    __m256 a[2 * TV_FUSED_MAX];
#pragma GCC unroll 16
    for (int i = 0; i < C * NG; i++) a[i] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        for (size_t o = 0; o < 8 * bs; o += 64) _mm_prefetch((const char *)(pf + (size_t)i * 8 * bs + o), _MM_HINT_T0);
        tv_wblock wb[2];
#pragma GCC unroll 2
        for (int g = 0; g < NG; g++) tv_decode_rows(t, r + 4 * g, i, 1, &wb[g], 1);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const ls_act_q8v_block *x = &ab[c][i];
            const __m256i p0 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)x->neg_sum), sh);
            const __m256 da = _mm256_set1_ps(x->d);
#pragma GCC unroll 2
            for (int g = 0; g < NG; g++) {
                __m256i p = _mm256_dpbusd_epi32(p0, wb[g].w[0], _mm256_loadu_si256((const __m256i *)x->q[0]));
                p = _mm256_dpbusd_epi32(p, wb[g].w[1], _mm256_loadu_si256((const __m256i *)x->q[1]));
                p = _mm256_dpbusd_epi32(p, wb[g].w[2], _mm256_loadu_si256((const __m256i *)x->q[2]));
                p = _mm256_dpbusd_epi32(p, wb[g].w[3], _mm256_loadu_si256((const __m256i *)x->q[3]));
                a[c * NG + g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(wb[g].dw, da), a[c * NG + g]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < C * NG; i++) acc[i] = a[i];
}

/* Eight rows in one 512-bit register: the lower 256 bits are group 0 (rows 0..3) and the
 * upper 256 bits group 1 (rows 4..7), each in tv_fused's lane layout, so every lane runs the
 * same integer sum and the same cvt, mul and fma as there (same bits). One VPDPBUSD then
 * covers eight rows: a verify block's few activation rows against the LM head otherwise
 * issue twice the 256-bit instructions and fall behind the weight stream. */
TV_INLINE __m512i tv_decode2(int t, const uint8_t *lo, const uint8_t *hi) {
    if (t == TV_Q8_0) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(lo + 2))),
                                             _mm256_loadu_si256((const __m256i *)(hi + 2)), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    const int qo = t == TV_Q4_0 ? 2 : 6;
    /* 128-bit lanes: lo's qs, lo's qs, hi's qs, hi's qs; the second copy of each as high nibbles */
    const __m256i q =
        _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(hi + qo)), _mm_loadu_si128((const __m128i *)(lo + qo)));
    const __m512i z = _mm512_shuffle_i64x2(_mm512_castsi256_si512(q), _mm512_castsi256_si512(q), 0x50);
    __m512i v = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(15));
    if (t == TV_Q5_0) {
        uint32_t a, b;
        memcpy(&a, lo + 2, sizeof a);
        memcpy(&b, hi + 2, sizeof b);
        v = _mm512_or_si512(v, _mm512_maskz_mov_epi8((__mmask64)a | (__mmask64)b << 32, _mm512_set1_epi8(0x10)));
    }
    return v;
}

/* tv_fused for eight rows (NG = 2) and C activation rows, one 512-bit register per
 * activation row: acc[2 c] and acc[2 c + 1] are the two groups, as tv_fused leaves them. */
TV_INLINE void tv_fused8(int t, int C, const uint8_t *const *r, size_t ws, int64_t nb,
                         const ls_act_q8v_block *const *ab, __m256 *acc) {
    const int sh = tv_bias_shift(t);
    const size_t bs = tv_bsize(t);
    const uintptr_t pf = (uintptr_t)r[0] + 4 * 8 * ws; /* integer: may lie past W */
    __m512 a[TV_FUSED_MAX];
#pragma GCC unroll 8
    for (int i = 0; i < C; i++) a[i] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        for (size_t o = 0; o < 8 * bs; o += 64) _mm_prefetch((const char *)(pf + (size_t)i * 8 * bs + o), _MM_HINT_T0);
        const size_t o = (size_t)i * bs;
        const __m512i w0 = tv_decode2(t, r[0] + o, r[4] + o), w1 = tv_decode2(t, r[1] + o, r[5] + o);
        const __m512i w2 = tv_decode2(t, r[2] + o, r[6] + o), w3 = tv_decode2(t, r[3] + o, r[7] + o);
        const __m512i t0 = _mm512_unpacklo_epi32(w0, w1), t1 = _mm512_unpackhi_epi32(w0, w1);
        const __m512i t2 = _mm512_unpacklo_epi32(w2, w3), t3 = _mm512_unpackhi_epi32(w2, w3);
        const __m512i v0 = _mm512_unpacklo_epi64(t0, t2), v1 = _mm512_unpackhi_epi64(t0, t2);
        const __m512i v2 = _mm512_unpacklo_epi64(t1, t3), v3 = _mm512_unpackhi_epi64(t1, t3);
        __m128i d = _mm_cvtsi32_si128(tv_ld16(r[0] + o));
        d = _mm_insert_epi16(d, tv_ld16(r[1] + o), 1);
        d = _mm_insert_epi16(d, tv_ld16(r[2] + o), 2);
        d = _mm_insert_epi16(d, tv_ld16(r[3] + o), 3);
        d = _mm_insert_epi16(d, tv_ld16(r[4] + o), 4);
        d = _mm_insert_epi16(d, tv_ld16(r[5] + o), 5);
        d = _mm_insert_epi16(d, tv_ld16(r[6] + o), 6);
        d = _mm_insert_epi16(d, tv_ld16(r[7] + o), 7);
        /* halves d0..d3 d0..d3 d4..d7 d4..d7: 32-bit pairs 0 1 0 1 2 3 2 3 */
        const __m512 dw = _mm512_cvtph_ps(
            _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(d), _mm256_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3)));
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const ls_act_q8v_block *x = &ab[c][i];
            const __m512i p0 =
                _mm512_slli_epi32(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->neg_sum)), sh);
            __m512i p =
                _mm512_dpbusd_epi32(p0, v0, _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->q[0])));
            p = _mm512_dpbusd_epi32(p, v1, _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->q[1])));
            p = _mm512_dpbusd_epi32(p, v2, _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->q[2])));
            p = _mm512_dpbusd_epi32(p, v3, _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->q[3])));
            a[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, _mm512_set1_ps(x->d)), a[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_storeu_ps((float *)&acc[2 * c], a[c]);
}

/* Rows [0, nrows) (nrows <= 8; missing rows alias the last) x nact activation rows. */
static void tv_group(int t, int64_t k, const uint8_t *w, size_t ws, int nrows, const uint8_t *act, size_t as, int nact,
                     float *y, int64_t ys) {
    const int NG = nrows > 4 ? 2 : 1;
    const uint8_t *r[8];
    for (int i = 0; i < 8; i++) r[i] = w + (size_t)(i < nrows ? i : nrows - 1) * ws;
    const int64_t nb = k / LS_QK8_0;
    if (nact <= TV_FUSED_MAX) {
        const ls_act_q8v_block *ab[TV_FUSED_MAX];
        __m256 acc[2 * TV_FUSED_MAX];
        for (int i = 0; i < nact; i++) ab[i] = (const ls_act_q8v_block *)(act + (size_t)i * as);
            /* constant (NG, C) instantiations: the accumulators stay in registers */
#define TV_CASE(ng, c)                                                                                                 \
    case (ng)*16 + (c):                                                                                                \
        tv_fused(t, ng, c, r, ws, nb, ab, acc);                                                                        \
        break
#define TV_CASE8(c)                                                                                                    \
    case 32 + (c): tv_fused8(t, c, r, ws, nb, ab, acc); break
        switch (NG * 16 + nact) {
            TV_CASE(1, 1);
            TV_CASE(1, 2);
            TV_CASE(1, 3);
            TV_CASE(1, 4);
            TV_CASE(1, 5);
            TV_CASE(1, 6);
            TV_CASE(1, 7);
            TV_CASE(1, 8);
            TV_CASE8(1);
            TV_CASE8(2);
            TV_CASE8(3);
            TV_CASE8(4);
            TV_CASE8(5);
            TV_CASE8(6);
            TV_CASE8(7);
            TV_CASE8(8);
        default: __builtin_unreachable(); /* 1 <= nact <= TV_FUSED_MAX, NG is 1 or 2 */
        }
#undef TV_CASE
#undef TV_CASE8
        tv_store(acc, NG, nact, nrows, y, ys);
        return;
    }
    __attribute__((aligned(32))) tv_wblock buf[TV_SEG * 2];
    __attribute__((aligned(32))) __m256 acc[TV_ACT * 2];
    for (int a0 = 0; a0 < nact; a0 += TV_ACT) {
        const int na = nact - a0 < TV_ACT ? nact - a0 : TV_ACT;
        for (int64_t b0 = 0; b0 < nb; b0 += TV_SEG) {
            const int sn = nb - b0 < TV_SEG ? (int)(nb - b0) : TV_SEG;
            for (int g = 0; g < NG; g++) tv_decode_rows(t, r + 4 * g, b0, sn, buf + g, NG);
            /* this segment's share of the group four groups ahead, as tv_fused does: a few
             * activation rows (a verify block) leave the weights streaming from memory */
            const size_t bs = tv_bsize(t);
            const uintptr_t pf = (uintptr_t)r[0] + 4 * 8 * ws + (size_t)b0 * 8 * bs;
            for (size_t o = 0; o < (size_t)sn * 8 * bs; o += 64) _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
            for (int c = 0; c < na;) {
                const ls_act_q8v_block *ab[4];
                const int C = na - c >= 4 ? 4 : na - c;
                for (int i = 0; i < C; i++) ab[i] = (const ls_act_q8v_block *)(act + (size_t)(a0 + c + i) * as) + b0;
                __m256 *ac = acc + c * NG;
                if (NG == 2) {
                    switch (C) {
                    case 4: tv_acts(t, 2, 4, buf, sn, ab, ac, b0 == 0); break;
                    case 3: tv_acts(t, 2, 3, buf, sn, ab, ac, b0 == 0); break;
                    case 2: tv_acts(t, 2, 2, buf, sn, ab, ac, b0 == 0); break;
                    default: tv_acts(t, 2, 1, buf, sn, ab, ac, b0 == 0); break;
                    }
                } else {
                    switch (C) {
                    case 4: tv_acts(t, 1, 4, buf, sn, ab, ac, b0 == 0); break;
                    case 3: tv_acts(t, 1, 3, buf, sn, ab, ac, b0 == 0); break;
                    case 2: tv_acts(t, 1, 2, buf, sn, ab, ac, b0 == 0); break;
                    default: tv_acts(t, 1, 1, buf, sn, ab, ac, b0 == 0); break;
                    }
                }
                c += C;
            }
        }
        tv_store(acc, NG, na, nrows, y + (int64_t)a0 * ys, ys);
    }
}

TV_INLINE void tv_rows(int t, int64_t k, const void *w, size_t ws, int64_t nrows, const void *act, size_t as, int nact,
                       float *y, int64_t ys) {
    const uint8_t *x = w;
    for (int64_t r = 0; r < nrows; r += 8) {
        tv_group(t, k, x + r * ws, ws, nrows - r < 8 ? (int)(nrows - r) : 8, act, as, nact, y + r, ys);
    }
}

#define TV_ARGS                                                                                                        \
    int64_t k, const void *w, size_t ws, int64_t nrows, const void *a, size_t as, int nact, float *y, int64_t ys
static void tv_q4_0(TV_ARGS) {
    tv_rows(TV_Q4_0, k, w, ws, nrows, a, as, nact, y, ys);
}
static void tv_q5_0(TV_ARGS) {
    tv_rows(TV_Q5_0, k, w, ws, nrows, a, as, nact, y, ys);
}
static void tv_q8_0(TV_ARGS) {
    tv_rows(TV_Q8_0, k, w, ws, nrows, a, as, nact, y, ys);
}

ls_tile_fn ls_tile_avx512_get(ls_type wt) {
    switch (wt) {
    case LS_TYPE_Q4_0: return tv_q4_0;
    case LS_TYPE_Q5_0: return tv_q5_0;
    case LS_TYPE_Q8_0: return tv_q8_0;
    default: return NULL;
    }
}

#else

/* Not built with AVX-512 VNNI flags: never selected (ls_cpu_isa() stops at AVX2). */
ls_tile_fn ls_tile_avx512_get(ls_type wt) {
    (void)wt;
    return NULL;
}

#endif
