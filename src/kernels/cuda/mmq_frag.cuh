/* The int8 tensor-core pieces shared by the integer path's three mma kernels (mmq_mma.cu:
 * warp tiles for large calls; mmq_tile.cu: block tiles for prefill-sized calls;
 * mmq_small.cu: calls of up to 8 rows): one m16n8k32 product, the per-thread fragments of
 * a weight block and an activation block, and the 32 x 32 tile's fold of one block
 * (fold_block: the two tile kernels run this one definition). The K order inside
 * a 32-element block: thread t4 = lane & 3 holds the block's plane words 2 t4 and 2 t4 + 1
 * (8 consecutive plane bytes) as its k-slices 4 t4 and 16 + 4 t4, for the weight codes (A)
 * and the activation planes (B) alike; any common permutation gives the same exact sum.
 * docs/cuda.md section 2a. */
#ifndef LS_KERNELS_CUDA_MMQ_FRAG_CUH
#define LS_KERNELS_CUDA_MMQ_FRAG_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"

namespace ls::mmq {

/* C = A B over one m16n8k32 tile, C starting at 0; A unsigned or signed bytes. Not volatile:
 * a pure function of its operands, which the scheduler may move among the loads. */
template <bool AU>
__device__ __forceinline__ void mma_k32(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    if (AU) {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %10, %10, %10};"
                     : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
    } else {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %10, %10, %10};"
                     : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
    }
}

/* C = A B + C0 over one m16n8k16 tile (A unsigned bytes, B signed): the decoded tiles'
 * half-block sums, started at an exact integer offset (mmq_dtile6.cu). */
__device__ __forceinline__ void mma_k16u(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0, const int4 &c0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(c0.x), "r"(c0.y), "r"(c0.z), "r"(c0.w));
}

/* C = A B over one m16n8k16 tile of signed bytes, C starting at 0 (the K-quant kernels:
 * Q6_K's 16-element scale groups, the Q4_K mins term). */
__device__ __forceinline__ void mma_k16s(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

/* Four 8 x 8 matrices of 16-bit elements (8 rows of 16 bytes each) from shared memory: lanes
 * 8 i .. 8 i + 7 give the row addresses of matrix i; the thread gets, of each, row lane / 4,
 * bytes 4 (lane % 4) .. + 3: an m16n8k32 A fragment (rows 0-15 from lanes 0-15, bytes 16 ..
 * 31 from lanes 16-31) or two B fragments, for int8 as for f16. */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* One weight row's share of one 32-element block for thread t4: code words lo (plane word
 * 2 t4) and hi (2 t4 + 1), and the block's two f32 factors (per type: scale and bias,
 * scale and min, or the two Q6_K half scales). */
struct WBlk {
    uint32_t lo, hi;
    float a, b;
};

/* One activation row's share of one block for thread t4: plane words 2 t4, 2 t4 + 1 of h
 * and of l (B operands, this thread's column g), and the metadata of the two output
 * columns the thread accumulates. */
struct XFrag {
    uint2 h, l;
};

/* ---- the weight side of one chunk from its words, shared by the three mma kernels' loaders
 * (they differ only in where the words come from: global or shared memory, aligned or not).
 * Each is mmq.cu's prep for the type: the same f32 factor expressions on the same bits. */

/* Q4_K chunk g (sub-blocks 2g, 2g + 1) of a superblock: h = its 16 header bytes (d, dmin,
 * 12 scale bytes), q = this thread's 8 code bytes of the chunk. */
__device__ __forceinline__ void q4k_chunk(WBlk *o, const uint32_t (&h)[4], const uint32_t (&q)[2], int g) {
    const float d = ls::q::f16f(h[0]), dmin = ls::q::f16f(h[0] >> 16);
    uint32_t sc, mn;
    ls::q::k4_pair(h[1], h[2], h[3], g, sc, mn);
    o[0].lo = q[0] & 0x0f0f0f0fu;
    o[0].hi = q[1] & 0x0f0f0f0fu;
    o[1].lo = (q[0] >> 4) & 0x0f0f0f0fu;
    o[1].hi = (q[1] >> 4) & 0x0f0f0f0fu;
    o[0].a = d * (float)(sc & 0xffu);
    o[1].a = d * (float)((sc >> 8) & 0xffu);
    o[0].b = -(dmin * (float)(mn & 0xffu));
    o[1].b = -(dmin * (float)((mn >> 8) & 0xffu));
}

/* Q6_K block t (0..3) of half hf of a superblock: ql / qh = this thread's 8 low-bit and
 * high-bit bytes, sc = the two 8-bit scales of the block's halves, dh = d's f16 bits. */
__device__ __forceinline__ void q6k_block(WBlk &o, const uint32_t (&ql)[2], const uint32_t (&qh)[2], uint32_t sc,
                                          uint32_t dh, int t) {
    const float d = ls::q::f16f(dh);
    const unsigned hs = 2u * (unsigned)t;
    uint32_t u[2];
#pragma unroll
    for (int w = 0; w < 2; w++) {
        const uint32_t lo = t >= 2 ? (ql[w] >> 4) & 0x0f0f0f0fu : ql[w] & 0x0f0f0f0fu;
        u[w] = lo | (((qh[w] >> hs) & 0x03030303u) << 4);
    }
    o.lo = u[0];
    o.hi = u[1];
    o.a = d * (float)(int8_t)(sc & 0xffu);
    o.b = d * (float)(int8_t)((sc >> 8) & 0xffu);
}

/* Q4_0 / Q4_1 / Q5_0 / Q5_1 block for thread t4 (elements 8 t4 .. 8 t4 + 7: the low (t4 < 2)
 * or high nibbles of the code words q), qh = the fifth bits (HH), dh / mh = d's and m's f16
 * bits (m only with HM). */
template <bool HM, bool HH>
__device__ __forceinline__ void legacy_block(WBlk &o, const uint32_t (&q)[2], uint32_t qh, uint32_t dh, uint32_t mh,
                                             int t4) {
    const unsigned sh = t4 >= 2 ? 4u : 0u;
    uint32_t lo = (q[0] >> sh) & 0x0f0f0f0fu, hi = (q[1] >> sh) & 0x0f0f0f0fu;
    if (HH) {
        const uint32_t bits = qh >> (8 * t4);
        lo |= spread_nibble(bits);
        hi |= spread_nibble(bits >> 4);
    }
    o.lo = lo;
    o.hi = hi;
    o.a = ls::q::f16f(dh);
    o.b = HM ? ls::q::f16f(mh) : 0.0f;
}

/* The activation side of block blk for this thread: B fragments of the 4 activation row
 * tiles and the metadata of its 8 output columns (dx; X, or Q6_K's V0 bits and V1, or
 * V0 + V1 for KIND 3). */
struct XSide {
    XFrag xf[4];
    float dx[4][2], xs[4][2];
    int v1[4][2];
};
/* Metadata of output column e of activation row tile j at mp (a Meta: dx, X, V0, V1), as the
 * fold of the type's KIND uses it: dx; X, or Q6_K's V0 bits and V1, or V0 + V1 (KIND 3).
 * LDG: read through the read-only cache (global memory), else a plain load (shared). */
template <int KIND, bool LDG>
__device__ __forceinline__ void meta_load(XSide &x, int j, int e, const float *mp) {
    if (KIND == 0) {
        const float2 v = LDG ? __ldg(reinterpret_cast<const float2 *>(mp)) : *reinterpret_cast<const float2 *>(mp);
        x.dx[j][e] = v.x, x.xs[j][e] = v.y;
    } else if (KIND == 1) {
        x.dx[j][e] = LDG ? __ldg(mp) : *mp;
    } else {
        const float4 v = LDG ? __ldg(reinterpret_cast<const float4 *>(mp)) : *reinterpret_cast<const float4 *>(mp);
        x.dx[j][e] = v.x;
        if (KIND == 2) x.xs[j][e] = v.z, x.v1[j][e] = __float_as_int(v.w);
        else x.v1[j][e] = __float_as_int(v.z) + __float_as_int(v.w);
    }
}

/* The 32 x 32 tile's per-lane partials la and running totals tot (mmq_common.cuh's order):
 * a lane starts at 0, then joins the total (the first lane starts it). */
__device__ __forceinline__ void tile_zero(float (&la)[2][4][4]) {
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) la[a][j][k] = 0.0f;
}
__device__ __forceinline__ void tile_join(float (&tot)[2][4][4], const float (&la)[2][4][4], bool first) {
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) tot[a][j][k] = first ? la[a][j][k] : tot[a][j][k] + la[a][j][k];
}
/* y[m][n] for the tile at weight row n0, activation row m0 (C fragment: k = 0, 1 row g,
 * columns 2 t4 + k; k = 2, 3 row g + 8), rows past N or M not stored */
__device__ __forceinline__ void tile_store(float *y, const float (&tot)[2][4][4], int64_t n0, int64_t m0, int64_t N,
                                           int64_t M, int g, int t4) {
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int64_t n = n0 + 16 * a + g + 8 * (k >> 1);
                const int64_t m = m0 + 8 * j + 2 * t4 + (k & 1);
                if (n < N && m < M) y[m * N + n] = tot[a][j][k];
            }
}

/* One block of the 32 x 32 tile: its exact integer sums by mma, then the per-output f32
 * steps of mmq.cu's acc_block for the type, folded into la. */
template <class T>
__device__ __forceinline__ void fold_block(float (&la)[2][4][4], const WBlk *const (&wr)[4], const XSide &x,
                                           int t4) {
#pragma unroll
    for (int a = 0; a < 2; a++) {
        const WBlk &r0 = *wr[2 * a], &r1 = *wr[2 * a + 1];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (T::KIND != 2) {
                int sh[4], sl[4];
                mma_k32<T::AU>(sh, r0.lo, r1.lo, r0.hi, r1.hi, x.xf[j].h.x, x.xf[j].h.y);
                mma_k32<T::AU>(sl, r0.lo, r1.lo, r0.hi, r1.hi, x.xf[j].l.x, x.xf[j].l.y);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const WBlk &r = k < 2 ? r0 : r1;
                    int S = sh[k] * 256 + sl[k];
                    if constexpr (T::KIND == 3) S -= T::OFF * x.v1[j][k & 1];
                    float acc = fmaf(r.a * x.dx[j][k & 1], (float)S, la[a][j][k]);
                    if (T::KIND == 0) acc = fmaf(r.b, x.xs[j][k & 1], acc);
                    la[a][j][k] = acc;
                }
            } else {
                /* Q6_K: the halves' sums separately; threads t4 < 2 hold half 0 */
                const bool h0 = t4 < 2;
                const uint32_t z = 0;
                int s0h[4], s0l[4], s1h[4], s1l[4];
                mma_k32<true>(s0h, h0 ? r0.lo : z, h0 ? r1.lo : z, h0 ? r0.hi : z, h0 ? r1.hi : z, x.xf[j].h.x,
                              x.xf[j].h.y);
                mma_k32<true>(s0l, h0 ? r0.lo : z, h0 ? r1.lo : z, h0 ? r0.hi : z, h0 ? r1.hi : z, x.xf[j].l.x,
                              x.xf[j].l.y);
                mma_k32<true>(s1h, h0 ? z : r0.lo, h0 ? z : r1.lo, h0 ? z : r0.hi, h0 ? z : r1.hi, x.xf[j].h.x,
                              x.xf[j].h.y);
                mma_k32<true>(s1l, h0 ? z : r0.lo, h0 ? z : r1.lo, h0 ? z : r0.hi, h0 ? z : r1.hi, x.xf[j].l.x,
                              x.xf[j].l.y);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const WBlk &r = k < 2 ? r0 : r1;
                    const float d = x.dx[j][k & 1];
                    const int S0 = (s0h[k] * 256 + s0l[k]) - 32 * __float_as_int(x.xs[j][k & 1]);
                    const int S1 = (s1h[k] * 256 + s1l[k]) - 32 * x.v1[j][k & 1];
                    const float acc = fmaf(r.a * d, (float)S0, la[a][j][k]);
                    la[a][j][k] = fmaf(r.b * d, (float)S1, acc);
                }
            }
        }
    }
}

} // namespace ls::mmq

#endif
