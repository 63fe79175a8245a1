/* Tensor-core kernels of the K-quant integer matmul for calls of 2..16 rows on Q4_K and Q6_K weights (a
 * verify block, a small batch): the format and order of kq_format.cuh, so a row's bits are
 * those of kq_vec.cu's and kq_tile.cu's kernels. docs/cuda.md section 2a ("K-quants").
 *
 * Why: the vector kernel forms every (weight row, activation row) integer with dp4a and folds
 * it on its own; at 4 rows it costs ~3.6x its one-row time (H200: 21504 x 5376 106.7 us
 * against 29.5), where one m16n8k32 product covers 16 weight rows x 8 activation rows.
 *
 * A block of 8 warps owns 16 weight rows; warp u is the order's virtual lane u and takes
 * superblocks u, u + 8, .. in increasing order, for one or two tiles of 8 activation rows. Its operands come straight from global
 * memory in a k order of our choosing (any order common to both operands gives the same
 * exact sum): thread t4 holds elements 8 t4 .. 8 t4 + 7 of each 32-element block as its
 * k-slices 4 t4 .. + 3 and 16 + 4 t4 .. + 3, so it reads 8 contiguous bytes a block of each
 * operand (Q4_K: the two blocks of a 32-byte code group from one 8-byte load, low and high
 * nibbles). The mins term is one m16n8k16 product pair as in kq_tile.cu; the 8 lanes'
 * partials are added in order through shared memory. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/kq_format.cuh"
#include "kernels/cuda/mmq_frag.cuh"
#include "kernels/cuda/pdl.cuh"

namespace {

using namespace ls::q;
using ls::kq::KMeta;
using ls::kq::KQ_U;
using ls::kq::SB;
using ls::mmq::mma_k16s;
using ls::mmq::mma_k32;

constexpr int NT = 32 * KQ_U; /* a warp per virtual lane */

/* 8 bytes at p (8-byte aligned when a16 rows, else 2-byte: ld_a2) */
__device__ __forceinline__ uint2 ld8(const uint8_t *p, int a16) {
    if (a16) return __ldg(reinterpret_cast<const uint2 *>(p));
    uint32_t o[2];
    ld_a2<2>(o, p);
    return make_uint2(o[0], o[1]);
}

/* The order's combine: warp u's partials (its C fragment layout: rows g, g + 8, columns
 * 8 ct + 2 t4, + 1) through shared memory, ((p0 + p1) + p2) + .. over the lanes holding
 * superblocks, then y[col][n0 + row] for rows < N and columns < M. */
template <int NC>
__device__ __forceinline__ void combine_store(const float (&p)[NC][4], int64_t N, int64_t M, int64_t n0, int nsb,
                                              float *__restrict__ y) {
    __shared__ float red[KQ_U][16][8 * NC];
    const int lane = threadIdx.x & 31, u = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int ct = 0; ct < NC; ct++)
#pragma unroll
        for (int k = 0; k < 4; k++) red[u][g + 8 * (k >> 1)][8 * ct + 2 * t4 + (k & 1)] = p[ct][k];
    __syncthreads();
    const int nu = nsb < KQ_U ? nsb : KQ_U;
    for (int o = threadIdx.x; o < 16 * 8 * NC; o += NT) {
        const int row = o / (8 * NC), col = o % (8 * NC);
        float v = red[0][row][col];
        for (int w = 1; w < nu; w++) v = v + red[w][row][col];
        const int64_t n = n0 + row;
        if (n < N && col < M) y[(int64_t)col * N + n] = v;
    }
}

/* NC column tiles of 8 activation rows (1: up to 8 rows, 2: up to 16) */
template <int NC>
__global__ void __launch_bounds__(NT) kq_small_q4k(const Ctx c, const int8_t *__restrict__ xq,
                                                   const KMeta *__restrict__ xm, float *__restrict__ y, int64_t M) {
    const int lane = threadIdx.x & 31, u = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int64_t n0 = (int64_t)blockIdx.x * 16;
    const int nsb = (int)(c.K / SB);
    const uint8_t *rowp[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t n = n0 + g + 8 * r < c.N ? n0 + g + 8 * r : c.N - 1; /* rows past N: never stored */
        rowp[r] = c.w + (size_t)n * c.row_bytes;
    }
    bool live[NC]; /* this thread's B columns: activation rows g + 8 ct */
    const int8_t *arow[NC];
    const KMeta *mrow[NC];
    float p[NC][4];
#pragma unroll
    for (int ct = 0; ct < NC; ct++) {
        live[ct] = g + 8 * ct < M;
        arow[ct] = xq + (int64_t)(live[ct] ? g + 8 * ct : 0) * c.K;
        mrow[ct] = xm + (int64_t)(live[ct] ? g + 8 * ct : 0) * nsb;
        p[ct][0] = p[ct][1] = p[ct][2] = p[ct][3] = 0.0f;
    }
    ls::pdl::enter();
    for (int sb = u; sb < nsb; sb += KQ_U) {
        uint32_t h[2][4];
        uint2 q[2][4];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint8_t *b = rowp[r] + 144 * (size_t)sb;
            ld16(h[r], b, c.a16);
#pragma unroll
            for (int gg = 0; gg < 4; gg++) q[r][gg] = ld8(b + 16 + 32 * gg + 8 * t4, c.a16);
        }
        uint2 x[NC][8];
#pragma unroll
        for (int ct = 0; ct < NC; ct++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                x[ct][j] = live[ct] ? __ldg(reinterpret_cast<const uint2 *>(arow[ct] + (int64_t)SB * sb + 32 * j + 8 * t4))
                                    : make_uint2(0u, 0u);
        int isc[NC][4];
#pragma unroll
        for (int ct = 0; ct < NC; ct++) isc[ct][0] = isc[ct][1] = isc[ct][2] = isc[ct][3] = 0;
        uint32_t mins[2]; /* doubled mins at k 4 t4 .. 4 t4 + 3: sub-blocks 2 t4, 2 t4 + 1 */
#pragma unroll
        for (int gg = 0; gg < 4; gg++) {
            uint32_t sc[2], mn[2];
#pragma unroll
            for (int r = 0; r < 2; r++) k4_pair(h[r][1], h[r][2], h[r][3], gg, sc[r], mn[r]);
#pragma unroll
            for (int r = 0; r < 2; r++)
                if (gg == t4) {
                    const uint32_t m0 = mn[r] & 0xffu, m1 = (mn[r] >> 8) & 0xffu;
                    mins[r] = m0 | m0 << 8 | m1 << 16 | m1 << 24;
                }
#pragma unroll
            for (int nib = 0; nib < 2; nib++) { /* sub-block 2 gg + nib */
                const int j = 2 * gg + nib;
                uint32_t a[2][2];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    a[r][0] = (nib ? q[r][gg].x >> 4 : q[r][gg].x) & 0x0f0f0f0fu;
                    a[r][1] = (nib ? q[r][gg].y >> 4 : q[r][gg].y) & 0x0f0f0f0fu;
                }
#pragma unroll
                for (int ct = 0; ct < NC; ct++) {
                    int C[4];
                    mma_k32<true>(C, a[0][0], a[1][0], a[0][1], a[1][1], x[ct][j].x, x[ct][j].y);
#pragma unroll
                    for (int k = 0; k < 4; k++) isc[ct][k] += (int)((sc[k >> 1] >> (8 * nib)) & 0xffu) * C[k];
                }
            }
        }
#pragma unroll
        for (int ct = 0; ct < NC; ct++) {
            /* im: the doubled mins against b16 = 128 hi + lo of activation row g + 8 ct */
            uint32_t hi = 0u, lo = 0u;
            if (live[ct]) {
                const uint2 bv = __ldg(reinterpret_cast<const uint2 *>(mrow[ct][sb].b16 + 4 * t4));
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int v = (int)(short)(((e < 2 ? bv.x : bv.y) >> (16 * (e & 1))) & 0xffffu);
                    hi |= (uint32_t)((v >> 7) & 0xff) << (8 * e);
                    lo |= (uint32_t)(v & 0x7f) << (8 * e);
                }
            }
            int ch[4], cl[4];
            mma_k16s(ch, mins[0], mins[1], hi);
            mma_k16s(cl, mins[0], mins[1], lo);
            float da[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int m = 8 * ct + 2 * t4 + e;
                da[e] = m < M ? __ldg(&xm[(int64_t)m * nsb + sb].d) : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t hw = h[k >> 1][0];
                p[ct][k] =
                    ls::kq::fold_q4k(p[ct][k], da[k & 1], f16f(hw), f16f(hw >> 16), isc[ct][k], ch[k] * 128 + cl[k]);
            }
        }
    }
    combine_store<NC>(p, c.N, M, n0, nsb, y);
}

/* Q6_K (kq_vec.cu KQ6 states the layout): each 32-element block t of half hf is two
 * m16n8k16 products, one per 16-element scale group, so here thread t4 holds the natural
 * k slices: elements 4 t4 .. + 3 (group 0) and 16 + 4 t4 .. + 3 (group 1), 4-byte loads (the
 * 210-byte blocks are 2-byte aligned); codes as signed q - 32. */
template <int NC>
__global__ void __launch_bounds__(NT) kq_small_q6k(const Ctx c, const int8_t *__restrict__ xq,
                                                   const KMeta *__restrict__ xm, float *__restrict__ y, int64_t M) {
    const int lane = threadIdx.x & 31, u = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int64_t n0 = (int64_t)blockIdx.x * 16;
    const int nsb = (int)(c.K / SB);
    const uint8_t *rowp[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t n = n0 + g + 8 * r < c.N ? n0 + g + 8 * r : c.N - 1; /* rows past N: never stored */
        rowp[r] = c.w + (size_t)n * c.row_bytes;
    }
    bool live[NC];
    const int8_t *arow[NC];
    float p[NC][4];
#pragma unroll
    for (int ct = 0; ct < NC; ct++) {
        live[ct] = g + 8 * ct < M;
        arow[ct] = xq + (int64_t)(live[ct] ? g + 8 * ct : 0) * c.K;
        p[ct][0] = p[ct][1] = p[ct][2] = p[ct][3] = 0.0f;
    }
    ls::pdl::enter();
    for (int sb = u; sb < nsb; sb += KQ_U) {
        int isc[NC][4];
#pragma unroll
        for (int ct = 0; ct < NC; ct++) isc[ct][0] = isc[ct][1] = isc[ct][2] = isc[ct][3] = 0;
        uint32_t scw[2][4];
        float d[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint8_t *b = rowp[r] + 210 * (size_t)sb;
            ld_a2<4>(scw[r], b + 192);
            d[r] = f16f(ldh(b + 208));
        }
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int tb = 0; tb < 2; tb++) {
                uint32_t ql[2][2], qh[2][2]; /* [row][slice]: slice 0 elements 4 t4 .., 1: 16 + 4 t4 .. */
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const uint8_t *b = rowp[r] + 210 * (size_t)sb;
#pragma unroll
                    for (int sl = 0; sl < 2; sl++) {
                        ql[r][sl] = ldh(b + 64 * hf + 32 * tb + 16 * sl + 4 * t4) |
                                    ldh(b + 64 * hf + 32 * tb + 16 * sl + 4 * t4 + 2) << 16;
                        qh[r][sl] = ldh(b + 128 + 32 * hf + 16 * sl + 4 * t4) |
                                    ldh(b + 128 + 32 * hf + 16 * sl + 4 * t4 + 2) << 16;
                    }
                }
#pragma unroll
                for (int nb = 0; nb < 2; nb++) { /* block t = tb + 2 nb: ql's low (nb 0) or high nibbles */
                    const int t = tb + 2 * nb, j = 4 * hf + t;
                    uint32_t a[2][2];
#pragma unroll
                    for (int r = 0; r < 2; r++)
#pragma unroll
                        for (int sl = 0; sl < 2; sl++) {
                            const uint32_t lo = (ql[r][sl] >> (4 * nb)) & 0x0f0f0f0fu;
                            const uint32_t v = lo | (((qh[r][sl] >> (2 * t)) & 0x03030303u) << 4);
                            a[r][sl] = ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u; /* bytewise q - 32 */
                        }
#pragma unroll
                    for (int ct = 0; ct < NC; ct++) {
                        const int8_t *ap = arow[ct] + (int64_t)SB * sb + 32 * j + 4 * t4;
                        const uint32_t b0 = live[ct] ? __ldg(reinterpret_cast<const unsigned int *>(ap)) : 0u;
                        const uint32_t b1 = live[ct] ? __ldg(reinterpret_cast<const unsigned int *>(ap + 16)) : 0u;
                        int C0[4], C1[4];
                        mma_k16s(C0, a[0][0], a[1][0], b0);
                        mma_k16s(C1, a[0][1], a[1][1], b1);
#pragma unroll
                        for (int k = 0; k < 4; k++) { /* scales[2 j], [2 j + 1] of row g or g + 8 */
                            const uint32_t w = scw[k >> 1][j >> 1] >> (16 * (j & 1));
                            isc[ct][k] += (int)(int8_t)(w & 0xffu) * C0[k] + (int)(int8_t)((w >> 8) & 0xffu) * C1[k];
                        }
                    }
                }
            }
#pragma unroll
        for (int ct = 0; ct < NC; ct++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int m = 8 * ct + 2 * t4 + (k & 1);
                const float da = m < M ? __ldg(&xm[(int64_t)m * nsb + sb].d) : 0.0f;
                p[ct][k] = ls::kq::fold_q6k(p[ct][k], da, d[k >> 1], isc[ct][k]);
            }
    }
    combine_store<NC>(p, c.N, M, n0, nsb, y);
}

} // namespace

namespace ls::mmq {

/* Q4_K and Q6_K calls of 1..16 rows (kq_vec.cu sends it 2..16); -1 when it cannot serve the call. */
int kq_small_launch(cudaStream_t st, int key, const Ctx &c, const int8_t *xq, const KMeta *xm, float *y, int64_t M) {
    if ((key != LS_TYPE_Q4_K && key != LS_TYPE_Q6_K) || M < 1 || M > 16 || c.K <= 0 || c.K % SB != 0) return -1;
    const int64_t gx = (c.N + 15) / 16;
    if (gx > 0x7fffffff) return -1;
    const dim3 grid((unsigned)gx);
    cudaError_t e;
    if (key == LS_TYPE_Q4_K)
        e = M <= 8 ? ls::pdl::launch(kq_small_q4k<1>, grid, NT, 0, st, c, xq, xm, y, M)
                   : ls::pdl::launch(kq_small_q4k<2>, grid, NT, 0, st, c, xq, xm, y, M);
    else
        e = M <= 8 ? ls::pdl::launch(kq_small_q6k<1>, grid, NT, 0, st, c, xq, xm, y, M)
                   : ls::pdl::launch(kq_small_q6k<2>, grid, NT, 0, st, c, xq, xm, y, M);
    return e == cudaSuccess ? 0 : -1;
}

} // namespace ls::mmq
