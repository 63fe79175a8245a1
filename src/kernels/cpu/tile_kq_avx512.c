/* AVX-512 VNNI tile kernels for Q4_K, Q5_K and Q6_K weights against Q8_K activations
 * (256-bit EVEX vectors), bit-identical to the scalar reference, for prefill and verify
 * blocks (the matmul uses them from six activation rows up; fewer rows stream through the
 * AVX2 eight-row kernels, which give the same bits).
 *
 * The reference (vec_dot_scalar.c) keeps one float accumulator per output, updated once per
 * 256-element block from two exact integers:
 *   Q4_K / Q5_K: isum = sum_j sc_j * dot_j (eight sub-blocks of 32), imin = sum_j m_j *
 *                bsum_j; acc = fmaf(d * d_a, isum, acc); acc = fmaf(-(dmin * d_a), imin, acc)
 *   Q6_K:        isum = sum_s sc_s * dot_s (sixteen sub-blocks of 16, q unsigned 0..63) -
 *                32 * sum_s sc_s * bsum_s; acc = fmaf(d * d_a, isum, acc)
 * Here lane r of a register is weight row r of a group of eight: the decoded weights of the
 * eight rows are transposed once per group into an L1 buffer (vector i of a sub-block holds,
 * in lane r, row r's elements 4 i .. 4 i + 3), so each VPDPBUSD takes one activation dword
 * broadcast from memory and adds four products to every row's dot at once; no horizontal
 * sum anywhere. Sub-block scales multiply the exact int32 dots (VPMULLD), the min / offset
 * terms come from the activation's 16-element sums by VPDPWSSD on (scale, scale) or
 * (scale_2p, scale_2p+1) int16 pairs. All integers are the reference's (|isum| < 2^31); the
 * float operations per lane are the reference's. */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__AVX2__) &&                   \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "core/f16.h"

#define KQ_INLINE static inline __attribute__((always_inline))

enum { KQ_Q4, KQ_Q5, KQ_Q6 };
/* Blocks decoded per pass (about 2.8 KB each) and activation rows per pass. */
enum { KQ_SEG = 4, KQ_ACT = 256 };

/* One 256-element block of eight rows, decoded and transposed. */
typedef struct {
    __m256i w[8][8]; /* [32-element vector v][dword i]: lane r = row r, elements 32 v + 4 i .. + 3 */
    __m256i sc[16];  /* Q4/Q5: [j < 8] scale of sub-block j; Q6: [s] scale of sub-block s (int32) */
    __m256i mn[8];   /* Q4/Q5: (m_j, m_j) int16 pairs; Q6: (sc_2p, sc_2p+1) int16 pairs */
    __m256 d, dmin;
} kq_block;

KQ_INLINE size_t kq_bsize(int t) {
    return t == KQ_Q4 ? sizeof(ls_block_q4_k) : t == KQ_Q5 ? sizeof(ls_block_q5_k) : sizeof(ls_block_q6_k);
}

/* Transpose eight rows of eight dwords: out[i] lane r = in[r] dword i. */
KQ_INLINE void kq_transpose8(const __m256i in[8], __m256i out[8]) {
    __m256i t[8], u[8];
    for (int p = 0; p < 4; p++) {
        t[2 * p] = _mm256_unpacklo_epi32(in[2 * p], in[2 * p + 1]);
        t[2 * p + 1] = _mm256_unpackhi_epi32(in[2 * p], in[2 * p + 1]);
    }
    for (int p = 0; p < 2; p++) {
        u[4 * p + 0] = _mm256_unpacklo_epi64(t[4 * p], t[4 * p + 2]);
        u[4 * p + 1] = _mm256_unpackhi_epi64(t[4 * p], t[4 * p + 2]);
        u[4 * p + 2] = _mm256_unpacklo_epi64(t[4 * p + 1], t[4 * p + 3]);
        u[4 * p + 3] = _mm256_unpackhi_epi64(t[4 * p + 1], t[4 * p + 3]);
    }
    for (int i = 0; i < 4; i++) {
        out[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
        out[i + 4] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
    }
}

/* The 8 scales (low 64 bits) and 8 mins (high 64 bits) of a Q4_K / Q5_K block as bytes, from
 * its 12 packed bytes (llama.cpp's layout: 6-bit values, the top two bits of the last four
 * stored in the high bits of the first eight bytes). */
KQ_INLINE __m128i kq_scales_mins(const uint8_t *packed) {
    uint32_t u[3];
    memcpy(u, packed, 12);
    const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
    const uint32_t sc03 = u[0] & km1, mn03 = u[1] & km1;
    const uint32_t sc47 = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
    const uint32_t mn47 = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
    return _mm_setr_epi32((int)sc03, (int)sc47, (int)mn03, (int)mn47);
}

/* The f16 at byte offset off of the eight rows' block, as floats (exact). */
KQ_INLINE __m256 kq_gather_f16(const uint8_t *const r[8], size_t off) {
    uint16_t h[8];
    for (int q = 0; q < 8; q++) memcpy(&h[q], r[q] + off, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* Q4_K / Q5_K block of eight rows at byte offset off: the raw quant bytes are transposed
 * once per 32-byte chunk (two sub-blocks share one, low and high nibbles), then split. */
KQ_INLINE void kq_decode_k45(int t, const uint8_t *const r[8], size_t off, kq_block *o) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const size_t qs_off = t == KQ_Q4 ? offsetof(ls_block_q4_k, qs) : offsetof(ls_block_q5_k, qs);
    __m256i in[8], qh[8];
    if (t == KQ_Q5) { /* fifth bit of element l of sub-block v: bit v of qh[l] */
        for (int q = 0; q < 8; q++)
            in[q] = _mm256_loadu_si256((const __m256i *)(r[q] + off + offsetof(ls_block_q5_k, qh)));
        kq_transpose8(in, qh);
    }
    for (int p = 0; p < 4; p++) {
        __m256i raw[8];
        for (int q = 0; q < 8; q++) in[q] = _mm256_loadu_si256((const __m256i *)(r[q] + off + qs_off + 32 * p));
        kq_transpose8(in, raw);
        for (int i = 0; i < 8; i++) {
            __m256i lo = _mm256_and_si256(raw[i], m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw[i], 4), m4);
            if (t == KQ_Q5) {
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[i], 2 * p), one), 4));
                hi = _mm256_or_si256(hi,
                                     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[i], 2 * p + 1), one), 4));
            }
            o->w[2 * p][i] = lo;
            o->w[2 * p + 1][i] = hi;
        }
    }
    __m256i sc[8], mn[8];
    for (int q = 0; q < 8; q++) {
        const __m128i sm = kq_scales_mins(r[q] + off + 4); /* after d and dmin */
        sc[q] = _mm256_cvtepu8_epi32(sm);
        mn[q] = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)), _mm256_set1_epi32(0x10001));
    }
    kq_transpose8(sc, o->sc);
    kq_transpose8(mn, o->mn);
    o->d = kq_gather_f16(r, off);
    o->dmin = kq_gather_f16(r, off + 2);
}

/* Q6_K block of eight rows at byte offset off. Vector v = 4 h + k holds elements
 * 128 h + 32 k .. + 31: low four bits from ql[64 h + 32 (k & 1) + l] (low nibble for k < 2,
 * high for k >= 2), top two bits from bits 2 k, 2 k + 1 of qh[32 h + l]. */
KQ_INLINE void kq_decode_q6(const uint8_t *const r[8], size_t off, kq_block *o) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    __m256i in[8];
    for (int h = 0; h < 2; h++) {
        __m256i ql[2][8], qh[8];
        for (int c = 0; c < 2; c++) {
            for (int q = 0; q < 8; q++)
                in[q] =
                    _mm256_loadu_si256((const __m256i *)(r[q] + off + offsetof(ls_block_q6_k, ql) + 64 * h + 32 * c));
            kq_transpose8(in, ql[c]);
        }
        for (int q = 0; q < 8; q++)
            in[q] = _mm256_loadu_si256((const __m256i *)(r[q] + off + offsetof(ls_block_q6_k, qh) + 32 * h));
        kq_transpose8(in, qh);
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 8; i++) {
                const __m256i src = ql[k & 1][i];
                const __m256i lo = k < 2 ? _mm256_and_si256(src, m4) : _mm256_and_si256(_mm256_srli_epi16(src, 4), m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh[i], 2 * k), m2);
                o->w[4 * h + k][i] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
            }
    }
    __m256i s0[8], s1[8], sp[8];
    for (int q = 0; q < 8; q++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(r[q] + off + offsetof(ls_block_q6_k, scales)));
        s0[q] = _mm256_cvtepi8_epi32(sc8);
        s1[q] = _mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8));
        sp[q] = _mm256_cvtepi8_epi16(sc8); /* (sc_2p, sc_2p+1) int16 pairs */
    }
    kq_transpose8(s0, o->sc);
    kq_transpose8(s1, o->sc + 8);
    kq_transpose8(sp, o->mn);
    o->d = kq_gather_f16(r, off + offsetof(ls_block_q6_k, d));
    o->dmin = _mm256_setzero_ps();
}

/* Blocks [b0, b0 + nb) of the eight rows r[] into buf. */
KQ_INLINE void kq_decode(int t, const uint8_t *const r[8], int64_t b0, int nb, kq_block *buf) {
    const size_t bs = kq_bsize(t);
    for (int i = 0; i < nb; i++) {
        const size_t off = (size_t)(b0 + i) * bs;
        if (t == KQ_Q6)
            kq_decode_q6(r, off, &buf[i]);
        else
            kq_decode_k45(t, r, off, &buf[i]);
    }
}

KQ_INLINE __m256i kq_b32(const void *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* C activation rows (1..4) against the decoded segment: acc[c] += its blocks. */
KQ_INLINE void kq_acts(int t, int C, const kq_block *buf, int nb, const ls_block_q8_k *const *ab, __m256 *acc,
                       int first) {
    __m256 a[4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) a[c] = first ? _mm256_setzero_ps() : acc[c];
    for (int i = 0; i < nb; i++) {
        const kq_block *o = &buf[i];
        __m256i isum[4], imin[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) isum[c] = imin[c] = _mm256_setzero_si256();
        for (int v = 0; v < 8; v++) {
            __m256i P[2][4];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) P[0][c] = P[1][c] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const int half = t == KQ_Q6 ? g / 4 : 0; /* Q6_K: sub-blocks of 16 */
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    P[half][c] = _mm256_dpbusd_epi32(P[half][c], o->w[v][g], kq_b32(ab[c][i].qs + 32 * v + 4 * g));
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                if (t == KQ_Q6) {
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(P[0][c], o->sc[2 * v]));
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(P[1][c], o->sc[2 * v + 1]));
                } else {
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(P[0][c], o->sc[v]));
                }
            }
        }
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                imin[c] = _mm256_dpwssd_epi32(imin[c], o->mn[p], kq_b32(ab[c][i].bsums + 2 * p));
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256 da = _mm256_set1_ps(ab[c][i].d);
            if (t == KQ_Q6) {
                const __m256i is = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(imin[c], 5));
                a[c] = _mm256_fmadd_ps(_mm256_mul_ps(o->d, da), _mm256_cvtepi32_ps(is), a[c]);
            } else {
                a[c] = _mm256_fmadd_ps(_mm256_mul_ps(o->d, da), _mm256_cvtepi32_ps(isum[c]), a[c]);
                a[c] = _mm256_fnmadd_ps(_mm256_mul_ps(o->dmin, da), _mm256_cvtepi32_ps(imin[c]), a[c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) acc[c] = a[c];
}

/* Rows [0, nrows) (nrows <= 8; missing rows alias the last) x nact activation rows. */
static void kq_group(int t, int64_t k, const uint8_t *w, size_t ws, int nrows, const uint8_t *act, size_t as, int nact,
                     float *y, int64_t ys) {
    const uint8_t *r[8];
    for (int i = 0; i < 8; i++) r[i] = w + (size_t)(i < nrows ? i : nrows - 1) * ws;
    const int64_t nb = k / LS_QK_K;
    __attribute__((aligned(32))) kq_block buf[KQ_SEG];
    __attribute__((aligned(32))) __m256 acc[KQ_ACT];
    for (int a0 = 0; a0 < nact; a0 += KQ_ACT) {
        const int na = nact - a0 < KQ_ACT ? nact - a0 : KQ_ACT;
        for (int64_t b0 = 0; b0 < nb; b0 += KQ_SEG) {
            const int sn = nb - b0 < KQ_SEG ? (int)(nb - b0) : KQ_SEG;
            kq_decode(t, r, b0, sn, buf);
            for (int c = 0; c < na;) {
                const int C = na - c >= 4 ? 4 : na - c;
                const ls_block_q8_k *ab[4];
                for (int i = 0; i < C; i++) ab[i] = (const ls_block_q8_k *)(act + (size_t)(a0 + c + i) * as) + b0;
                switch (C) {
                case 4: kq_acts(t, 4, buf, sn, ab, acc + c, b0 == 0); break;
                case 3: kq_acts(t, 3, buf, sn, ab, acc + c, b0 == 0); break;
                case 2: kq_acts(t, 2, buf, sn, ab, acc + c, b0 == 0); break;
                default: kq_acts(t, 1, buf, sn, ab, acc + c, b0 == 0); break;
                }
                c += C;
            }
        }
        for (int c = 0; c < na; c++) {
            float *yc = y + (int64_t)(a0 + c) * ys;
            if (nrows == 8) {
                _mm256_storeu_ps(yc, acc[c]);
            } else { /* a partial group: only its rows (the rest of y belongs to others) */
                float v[8];
                _mm256_storeu_ps(v, acc[c]);
                for (int i = 0; i < nrows; i++) yc[i] = v[i];
            }
        }
    }
}

KQ_INLINE void kq_rows(int t, int64_t k, const void *w, size_t ws, int64_t nrows, const void *act, size_t as, int nact,
                       float *y, int64_t ys) {
    const uint8_t *x = w;
    for (int64_t r = 0; r < nrows; r += 8)
        kq_group(t, k, x + r * ws, ws, nrows - r < 8 ? (int)(nrows - r) : 8, act, as, nact, y + r, ys);
}

#define KQ_ARGS                                                                                                        \
    int64_t k, const void *w, size_t ws, int64_t nrows, const void *a, size_t as, int nact, float *y, int64_t ys
static void kq_q4_k(KQ_ARGS) {
    kq_rows(KQ_Q4, k, w, ws, nrows, a, as, nact, y, ys);
}
static void kq_q5_k(KQ_ARGS) {
    kq_rows(KQ_Q5, k, w, ws, nrows, a, as, nact, y, ys);
}
static void kq_q6_k(KQ_ARGS) {
    kq_rows(KQ_Q6, k, w, ws, nrows, a, as, nact, y, ys);
}

ls_tile_fn ls_tile_kq_avx512_get(ls_type wt) {
    switch (wt) {
    case LS_TYPE_Q4_K: return kq_q4_k;
    case LS_TYPE_Q5_K: return kq_q5_k;
    case LS_TYPE_Q6_K: return kq_q6_k;
    default: return NULL;
    }
}

#else

/* Not built with AVX-512 VNNI flags: never selected. */
ls_tile_fn ls_tile_kq_avx512_get(ls_type wt) {
    (void)wt;
    return NULL;
}

#endif
