/* The narrow-call kernel of the integer-dot matmul for MLX affine 4/8-bit weights: calls of 2
 * to 4 activation rows (a verify block of K = 4; tests also force it on one row), int8 tensor
 * cores fed straight from global memory into registers. The same activation blocks, exact
 * integer sums and f32 sequence per output as mmq.cu's dp4a kernel and the mma kernels
 * (mmq_common.cuh), so a row's bits do not depend on which of them ran. docs/cuda.md section 2a.
 *
 * Why: a 31B verify block of 4 cost 1.67x a one-token step (docs/benchmarks.md, sessions
 * 13-15) because its MLX matmuls cost 1.6-2.2x a one-row call: the dp4a kernel pays every
 * (weight row, activation row) pair with its own products, and the small-M kernel
 * (mmq_small.cu) stages its rows through shared memory with a barrier a stage. Here one
 * m16n8k32 product forms a 32-element block of 16 weight rows against both planes of up to 4
 * activation rows (fold1's paired planes: column n = activation row n / 2, plane n % 2), so
 * the instructions per weight byte do not grow with the rows; a warp keeps one round of its
 * weights, scales and activation blocks in registers while it folds the previous one, and
 * nothing waits on a barrier until the lanes' partials are joined.
 *
 * Order (mmq_common.cuh): a block owns 16 weight rows; its NW warps take the virtual lanes
 * in groups of LG consecutive ones (warp w: groups w, w + NW, ..); a group's round r holds the
 * chunks u0 + r U .. u0 + r U + LG - 1 (one per lane, contiguous in the row), each folded into
 * its lane's f32 (starting at 0) in increasing r. After a group's last round its partials go
 * to shared memory; after the block's barrier one thread per output adds the lanes' partials
 * in lane order (the first lane starts the total). */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_frag.cuh"
#include "kernels/cuda/pdl.cuh"

namespace {

using namespace ls::q;
using ls::mmq::Meta;
using ls::mmq::mma_k32;
using ls::mmq::QB;
using ls::mmq::XB_BYTES;

#ifdef LS_NARROW_NW /* compile-time override, for measuring */
constexpr int NW = LS_NARROW_NW;
#else
/* 4 warps a block, each folding two lane groups of a 32-lane row: against 8 warps (one group
 * each) a 31B verify block of 4 took 15.0 ms instead of 16.1-16.6 (H200, session 17) */
constexpr int NW = 4; /* warps per block */
#endif
constexpr int ROWS = 16; /* weight rows per block: one m16 tile */
constexpr int LG = 4;    /* consecutive virtual lanes a warp folds in one round */
constexpr int MAXR = 4;  /* activation rows: both planes of each fill the n8 tile */

/* MLX affine BITS-bit rows (4 or 8), scales and biases stored as SBK (0 f32, 1 f16, 2 bf16;
 * 3: c.sb_kind at run time), group = 32 << GSH elements. A thread's share of a chunk (32
 * codes of one row): WPC words at byte 4 WPC t4, the plane words 2 t4, 2 t4 + 1 of mmq_frag.cuh
 * (MLX 4-bit: nibbles of elements 8 t4 .. 8 t4 + 7, which the activations store in that
 * order: QMlx4::IL). A round's LG chunks start at a multiple of LG, so they span NG groups. */
template <int BITS, int SBK, int GSH>
struct NMlx {
    static constexpr int WPC = BITS / 4;
    static constexpr int CB = 4 * BITS; /* bytes per chunk and row */
    static constexpr int NG = GSH >= 2 ? 1 : LG >> GSH;
    static constexpr int SB = SBK, GS = GSH;
};

/* One round's loads for this thread: its rows g / g + 8 (k = 0 / 1) x LG chunks, their scale
 * and bias bits, and the activation side of each chunk (B fragment of column g; dx and X of
 * activation row t4). Raw words only: the decoding waits for the fold, so a prefetched round
 * costs registers, not stalls. */
template <class T>
struct Round {
    uint32_t q[2][LG][T::WPC];
    uint32_t s[2][T::NG], b[2][T::NG];
    uint2 xb[LG];
    float2 xm[LG];
};

/* Where this thread's loads come from, as 32-bit byte offsets from the call's arrays (c.w,
 * c.sc and c.bi, xq, xm: kernel parameters, uniform): a 64-bit pointer a stream would cost two
 * registers each, which the compiler rematerialized every round at 2 blocks an SM.
 * narrow_serves keeps every offset below 2^32. */
struct Src {
    uint32_t w[2];  /* weight rows g, g + 8 (clamped to real rows), plus this thread's word */
    uint32_t sb[2]; /* their scales (and biases: the same layout) */
    uint32_t xb;    /* its B column's plane words of block 0 */
    uint32_t xm;    /* activation row t4's (clamped) metadata of block 0, bytes */
};

/* The loads of the round at chunk ci0, each stream's chunks at immediate offsets from one
 * address; chunks past the row's end (ci0 + v >= nch, only in a lane group's last round) are
 * not loaded and never folded. */
template <class T, bool FULL>
__device__ __forceinline__ void load_w(Round<T> &r, const Src &p, const Ctx &c, int ci0) {
    const int left = FULL ? LG : c.nch - ci0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const uint8_t *a = c.w + (p.w[k] + (uint32_t)ci0 * (uint32_t)T::CB);
#pragma unroll
        for (int v = 0; v < LG; v++) {
            if (v >= left) break;
            if (T::WPC == 2) {
                const uint2 u = __ldg(reinterpret_cast<const uint2 *>(a + v * T::CB));
                r.q[k][v][0] = u.x;
                r.q[k][v][T::WPC - 1] = u.y;
            } else {
                r.q[k][v][0] = ldw(a + v * T::CB);
            }
        }
    }
    const int kind = T::SB == 3 ? c.sb_kind : T::SB;
    const uint32_t go = (uint32_t)(ci0 >> T::GS) * (kind == 0 ? 4u : 2u);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const uint8_t *s = c.sc + (p.sb[k] + go), *b = c.bi + (p.sb[k] + go);
#pragma unroll
        for (int j = 0; j < T::NG; j++) {
            if ((j << T::GS) >= left) break;
            r.s[k][j] = kind == 0 ? ldw(s + 4 * j) : ldh(s + 2 * j);
            r.b[k][j] = kind == 0 ? ldw(b + 4 * j) : ldh(b + 2 * j);
        }
    }
}
template <class T, bool FULL>
__device__ __forceinline__ void load_x(Round<T> &r, const Src &p, const Ctx &c, const int8_t *__restrict__ xq,
                                       const Meta *__restrict__ xm, int ci0) {
    const int left = FULL ? LG : c.nch - ci0;
    const int8_t *xb = xq + (p.xb + (uint32_t)ci0 * (uint32_t)XB_BYTES);
    const uint8_t *mb = reinterpret_cast<const uint8_t *>(xm) + (p.xm + (uint32_t)ci0 * (uint32_t)sizeof(Meta));
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (v >= left) break;
        r.xb[v] = __ldg(reinterpret_cast<const uint2 *>(xb + v * XB_BYTES));
        r.xm[v] = __ldg(reinterpret_cast<const float2 *>(mb + v * sizeof(Meta)));
    }
}

template <int SBK>
__device__ __forceinline__ float sb_float(uint32_t v, const Ctx &c) {
    const int k = SBK == 3 ? c.sb_kind : SBK;
    return k == 0 ? __uint_as_float(v) : k == 1 ? f16f(v) : bf16f(v);
}

/* Fold round r (chunks ci0 + v, below nch) into the lanes' partials la[v][k] (output row
 * g + 8 k, activation row t4): mmq_small.cu fold1's paired-plane expressions for MLX. */
template <class T, int SBK, int GSH, bool FULL>
__device__ __forceinline__ void fold(float (&la)[LG][2], const Round<T> &r, const Ctx &c, int ci0) {
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (!FULL && ci0 + v >= c.nch) break; /* uniform */
        uint32_t lo[2], hi[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            if (T::WPC == 2) {
                lo[k] = r.q[k][v][0];
                hi[k] = r.q[k][v][T::WPC - 1];
            } else {
                lo[k] = r.q[k][v][0] & 0x0f0f0f0fu;
                hi[k] = (r.q[k][v][0] >> 4) & 0x0f0f0f0fu;
            }
        }
        int cc[4];
        mma_k32<true>(cc, lo[0], lo[1], hi[0], hi[1], r.xb[v].x, r.xb[v].y);
        const int j = GSH >= 2 ? 0 : v >> GSH;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int S = cc[2 * k] * 256 + cc[2 * k + 1];
            const float a = sb_float<SBK>(r.s[k][j], c), b = sb_float<SBK>(r.b[k][j], c);
            const float acc = fmaf(a * r.xm[v].x, (float)S, la[v][k]);
            la[v][k] = fmaf(b, r.xm[v].y, acc);
        }
    }
}

/* A warp's walk: lane group u0 (its first lane), round chunk ci0 = u0 + r U. */
struct Pos {
    int u0, ci0;
};
__device__ __forceinline__ void next(Pos &p, int U, int nch) {
    p.ci0 += U;
    if (p.ci0 >= nch) {
        p.u0 += LG * NW;
        p.ci0 = p.u0;
    }
}

/* A round's loads: every chunk (a full round) or those before the row's end. */
template <class T>
__device__ __forceinline__ void load_round(Round<T> &r, const Src &src, const Ctx &c, const int8_t *__restrict__ xq,
                                           const Meta *__restrict__ xm, int ci0) {
    if (c.nch - ci0 >= LG) {
        load_w<T, true>(r, src, c, ci0);
        load_x<T, true>(r, src, c, xq, xm, ci0);
    } else {
        load_w<T, false>(r, src, c, ci0);
        load_x<T, false>(r, src, c, xq, xm, ci0);
    }
}

/* One step of the walk at p with round cur loaded: the next round into nxt, then cur folded
 * (the load in flight meanwhile), a finished group's partials stored to red[lane][row][column]. */
template <class T, int SBK, int GSH>
__device__ __forceinline__ void walk_step(Pos &p, Round<T> &cur, Round<T> &nxt, float (&la)[LG][2], float *red,
                                          const Src &src, const Ctx &c, const int8_t *__restrict__ xq,
                                          const Meta *__restrict__ xm, int U, int nu, int nr, int g, int t4) {
    Pos q = p;
    next(q, U, c.nch);
    if (q.u0 < nu) load_round<T>(nxt, src, c, xq, xm, q.ci0);
    if (c.nch - p.ci0 >= LG) fold<T, SBK, GSH, true>(la, cur, c, p.ci0);
    else fold<T, SBK, GSH, false>(la, cur, c, p.ci0);
    if (q.u0 != p.u0) {
#pragma unroll
        for (int v = 0; v < LG; v++) {
            const int u = p.u0 + v;
            if (u < nu && t4 < nr) {
                red[(u * ROWS + g) * nr + t4] = la[v][0];
                red[(u * ROWS + g + 8) * nr + t4] = la[v][1];
            }
            la[v][0] = la[v][1] = 0.0f;
        }
    }
    p = q;
}

template <class T, int SBK, int GSH>
__device__ __forceinline__ void narrow_body(const Ctx &c, const int8_t *__restrict__ xq,
                                            const Meta *__restrict__ xm, float *__restrict__ y, int64_t n0, int nr,
                                            float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int nch = c.nch, U = 32 * c.kw, nu = nch < U ? nch : U;
    const int64_t nbk = c.K / QB;
    Src src;
    {
        const uint32_t sbz = c.sb_kind == 0 ? 4u : 2u;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int64_t n = n0 + g + 8 * k < c.N ? n0 + g + 8 * k : c.N - 1;
            src.w[k] = (uint32_t)((uint64_t)n * c.row_bytes) + 4u * T::WPC * (uint32_t)t4;
            src.sb[k] = (uint32_t)n * (uint32_t)c.ng * sbz;
        }
        const int gr = (g >> 1) < nr ? g >> 1 : nr - 1; /* B column g: activation row g / 2, plane g % 2 */
        const int mr = t4 < nr ? t4 : nr - 1;
        src.xb = (uint32_t)(gr * nbk) * XB_BYTES + (g & 1) * QB + 8 * t4;
        src.xm = (uint32_t)(mr * nbk) * (uint32_t)sizeof(Meta);
        /* opaque from here on: kept in 6 registers, not recomputed from the parameters each round */
        asm volatile("" : "+r"(src.w[0]), "+r"(src.w[1]), "+r"(src.sb[0]), "+r"(src.sb[1]), "+r"(src.xb), "+r"(src.xm));
    }
    float la[LG][2];
#pragma unroll
    for (int v = 0; v < LG; v++) la[v][0] = la[v][1] = 0.0f;
    Round<T> ra, rb;
    Pos p{LG * warp, LG * warp};
    if (p.u0 < nu) { /* weights are never written by a step: before the wait */
        if (nch - p.ci0 >= LG) load_w<T, true>(ra, src, c, p.ci0);
        else load_w<T, false>(ra, src, c, p.ci0);
    }
    ls::pdl::enter();
    if (p.u0 < nu) {
        if (nch - p.ci0 >= LG) load_x<T, true>(ra, src, c, xq, xm, p.ci0);
        else load_x<T, false>(ra, src, c, xq, xm, p.ci0);
    }
    /* two steps an iteration, the rounds' registers swapping roles: no copies */
    while (p.u0 < nu) {
        walk_step<T, SBK, GSH>(p, ra, rb, la, red, src, c, xq, xm, U, nu, nr, g, t4);
        if (p.u0 >= nu) break;
        walk_step<T, SBK, GSH>(p, rb, ra, la, red, src, c, xq, xm, U, nu, nr, g, t4);
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < ROWS * nr) {
        const int row = t / nr, col = t % nr;
        float tot = red[row * nr + col];
        for (int u = 1; u < nu; u++) tot = tot + red[(u * ROWS + row) * nr + col];
        const int64_t n = n0 + row;
        if (n < c.N) y[(int64_t)col * c.N + n] = tot;
    }
}

/* Up to GMAX weights of one type and K on the same activation rows: the 16-row blocks of
 * weight 0, then of weight 1, .. (a weight's rows get the body of its own launch). */
constexpr int GMAX = 3;
struct NarrowGroup {
    Ctx c[GMAX];
    float *y[GMAX];
    int64_t nb[GMAX];
    int n;
};

/* Each warp holds two rounds in registers (113-125 of them): 2 blocks an SM. */
template <class T, int SBK, int GSH>
__global__ void __launch_bounds__(32 * NW, 2)
    narrow_kernel(const NarrowGroup ng, const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int nr) {
    extern __shared__ __align__(16) float red[];
    int64_t yb = blockIdx.x;
    Ctx c;
    float *y;
    ls::mmq::group_pick(ng, yb, c, y);
    narrow_body<T, SBK, GSH>(c, xq, xm, y, yb * ROWS, nr, red); /* calls ls::pdl::enter() */
}

template <int BITS, int SBK, int GSH>
int narrow_t(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const Meta *xm, int nr) {
    using T = NMlx<BITS, SBK, GSH>;
    const int U = 32 * g.c[0].kw, nu = g.c[0].nch < U ? g.c[0].nch : U;
    const size_t smem = (size_t)nu * ROWS * nr * sizeof(float);
    const cudaError_t e =
        ls::pdl::launch(narrow_kernel<T, SBK, GSH>, dim3((unsigned)nb), 32 * NW, smem, st, g, xq, xm, nr);
    return e == cudaSuccess ? 0 : -1;
}

template <int BITS, int SBK>
int narrow_g(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const Meta *xm, int nr) {
    switch (g.c[0].gshift) {
    case 0: return narrow_t<BITS, SBK, 0>(st, g, nb, xq, xm, nr);
    case 1: return narrow_t<BITS, SBK, 1>(st, g, nb, xq, xm, nr);
    default: return narrow_t<BITS, SBK, 2>(st, g, nb, xq, xm, nr);
    }
}

} // namespace

namespace ls::mmq {

bool narrow_serves(int key, const Ctx &c, int64_t M) {
    /* Src's 32-bit offsets: the weight and scale arrays below 4 GiB */
    const uint64_t wb = (uint64_t)c.N * c.row_bytes, sb = (uint64_t)c.N * (uint64_t)c.ng * 4u;
    return (key == 104 || key == 108) && M >= 1 && M <= MAXR && c.a16 && c.gshift >= 0 && c.gshift <= 2 &&
           c.kw >= 1 && c.kw <= 4 && wb < (1ull << 32) && sb < (1ull << 32);
}

int narrow_launch(cudaStream_t st, const Ctx *c, float *const *y, int n, int key, const int8_t *xq, const Meta *xm,
                  int64_t M) {
    if (n < 1 || n > GMAX) return -1;
    NarrowGroup g{};
    g.n = n;
    int64_t nb = 0;
    bool bf16 = true;
    for (int i = 0; i < n; i++) {
        if (!narrow_serves(key, c[i], M) || c[i].gshift != c[0].gshift || c[i].nch != c[0].nch ||
            c[i].kw != c[0].kw)
            return -1;
        g.c[i] = c[i];
        g.y[i] = y[i];
        g.nb[i] = (c[i].N + ROWS - 1) / ROWS;
        nb += g.nb[i];
        bf16 = bf16 && c[i].sb_kind == 2;
    }
    if (nb > 0x7fffffff) return -1;
    const int nr = (int)M;
    if (key == 104)
        return bf16 ? narrow_g<4, 2>(st, g, nb, xq, xm, nr) : narrow_g<4, 3>(st, g, nb, xq, xm, nr);
    return bf16 ? narrow_g<8, 2>(st, g, nb, xq, xm, nr) : narrow_g<8, 3>(st, g, nb, xq, xm, nr);
}

} // namespace ls::mmq
