/* The narrow-call kernels of the integer-dot matmul for MLX affine 4/8-bit weights: calls of 2
 * to 4 activation rows (a verify block of K = 4; tests also force them on one row), int8 tensor
 * cores fed straight from memory. This file: which of the two serves a call, and the MLX 8-bit
 * one, whose weights go from global memory into registers one round ahead of the fold (MLX
 * 4-bit weights go through shared-memory stages: mmq_narrow_staged.cu; both read their scales
 * and biases from a copy in shared memory, mmq_narrow.cuh stage_sb). The same activation
 * blocks, exact integer sums and f32 sequence per output as mmq.cu's dp4a kernel and the mma
 * kernels (mmq_common.cuh), so a row's bits do not depend on which of them ran. docs/cuda.md
 * section 2a; the order of a block's folds: mmq_narrow.cuh.
 *
 * Why: a 31B verify block of 4 cost 1.67x a one-token step (docs/benchmarks.md, sessions
 * 13-15) because its MLX matmuls cost 1.6-2.2x a one-row call: the dp4a kernel pays every
 * (weight row, activation row) pair with its own products, and the small-M kernel
 * (mmq_small.cu) stages its rows through shared memory with a barrier a stage. Here one
 * m16n8k32 product forms a 32-element block of 16 weight rows against both planes of up to 4
 * activation rows (fold1's paired planes: column n = activation row n / 2, plane n % 2), so
 * the instructions per weight byte do not grow with the rows; a warp keeps one round of its
 * weights, scales and activation blocks in registers while it folds the previous one, and
 * nothing waits on a barrier between the scales' copy and the join of the lanes' partials. */
#include <stdint.h>

#include <atomic>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_narrow.cuh"
#include "kernels/cuda/pdl.cuh"

namespace {

using namespace ls::narrow;
using ls::q::Ctx;

/* One round's loads for this thread, in pairs: the round's LG chunks as LG / 2 pairs of
 * consecutive chunks, of which thread (g, t4) holds 16 bytes at byte 16 t4 of each 64-byte
 * pair (chunk 2 p + t4 / 2 of the round, bytes 16 (t4 % 2) .. + 15): of weight rows g and
 * g + 8 (q) and of its B column's plane (xp). Why: a warp's load then reads 64 contiguous
 * bytes of each of 8 rows (4 activation rows' two planes: 128), twice the bytes per L1
 * wavefront of one-chunk fragments (8 bytes a thread; ncu: L1/TEX 80% busy at 45% of DRAM,
 * docs/benchmarks.md sixteenth run). fold() splits each pair over four half-masked products.
 * Besides: the scale and bias words of rows g / g + 8 and activation row t4's dx and X a chunk
 * (s, b, xm: the fields SideRound has, read by load_sb and fold_sums). */
template <class T>
struct Round {
    static_assert(T::WPC == 2, "the register-fed kernel serves MLX 8-bit only (4-bit: mmq_narrow_staged.cu)");
    uint32_t s[2][T::NG], b[2][T::NG];
    float2 xm[LG];
    uint4 xp[LG / 2];
    uint4 q[2][LG / 2];
};

/* The weight offsets of rows g, g + 8 (clamped to real rows) plus this thread's 16 bytes of a
 * pair, as SideSrc's: 32-bit, from c.w (xb: the pair piece of its B column, narrow_body). */
struct Src : SideSrc {
    uint32_t w[2];
};

/* 16 weight bytes that bypass L1 (streamed once), so L1 keeps the activation blocks that the
 * SM's other blocks re-read (31B verify block of 4: 12.8 ms, 13.0-13.1 through L1; H200,
 * session 20) */
__device__ __forceinline__ uint4 ldw(const uint8_t *p) {
    uint4 o;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(o.x), "=r"(o.y), "=r"(o.z), "=r"(o.w)
                 : "l"(p));
    return o;
}

/* The weight and activation-plane loads of the round at chunk ci0 (th = t4 / 2: which chunk of
 * a pair this thread holds). Pieces of chunks past the row's end (only in a lane group's last
 * round) are zero, never loaded; a pair wholly past it is skipped (uniform). */
template <class T, bool FULL>
__device__ __forceinline__ void load_w(Round<T> &r, const Src &p, const Ctx &c, int ci0, int th) {
    const int left = FULL ? LG : c.nch - ci0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const uint8_t *a = c.w + (p.w[k] + (uint32_t)ci0 * (uint32_t)T::CB);
#pragma unroll
        for (int q = 0; q < LG / 2; q++) {
            if (2 * q >= left) break;
            r.q[k][q] = FULL || 2 * q + th < left ? ldw(a + 2 * q * T::CB) : make_uint4(0, 0, 0, 0);
        }
    }
}
template <class T, bool FULL>
__device__ __forceinline__ void load_xp(Round<T> &r, const Src &p, const Ctx &c, const int8_t *__restrict__ xq,
                                        const Meta *__restrict__ xm, int ci0, int th) {
    const int left = FULL ? LG : c.nch - ci0;
    const int8_t *xb = xq + (p.xb + (uint32_t)ci0 * (uint32_t)ls::mmq::XB_BYTES);
    const uint8_t *mb = reinterpret_cast<const uint8_t *>(xm) + (p.xm + (uint32_t)ci0 * (uint32_t)sizeof(Meta));
#pragma unroll
    for (int q = 0; q < LG / 2; q++) {
        if (2 * q >= left) break;
        r.xp[q] = FULL || 2 * q + th < left ? __ldg(reinterpret_cast<const uint4 *>(xb + 2 * q * ls::mmq::XB_BYTES))
                                            : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (v >= left) break;
        r.xm[v] = __ldg(reinterpret_cast<const float2 *>(mb + v * sizeof(Meta)));
    }
}

/* Fold round r (chunks ci0 + v, below nch) into the lanes' partials la[v][k]. A pair's chunk
 * 2 q + h is the sum over the threads with t4 / 2 == h: mh (all ones when t4 / 2 == 0, else
 * zero) masks the others' B words, and the two products over a thread's 16 bytes (its words
 * 0, 1 as k-slices 4 t4 and 16 + 4 t4, then words 2, 3) add exactly in int32. */
template <class T, int SBK, int GSH, bool FULL>
__device__ __forceinline__ void fold(float (&la)[LG][2], const Round<T> &r, const Ctx &c, int ci0, uint32_t mh) {
#pragma unroll
    for (int q = 0; q < LG / 2; q++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int v = 2 * q + h;
            if (!FULL && ci0 + v >= c.nch) break; /* uniform */
            const uint32_t m = h ? ~mh : mh;
            const uint4 &w0 = r.q[0][q], &w8 = r.q[1][q], &x = r.xp[q];
            int cc[4];
            ls::mmq::mma_k32<true>(cc, w0.x, w8.x, w0.y, w8.y, x.x & m, x.y & m);
            ls::mmq::mma_k32u_acc(cc, w0.z, w8.z, w0.w, w8.w, x.z & m, x.w & m);
            fold_sums<SBK, GSH>(la[v], cc, r, v, c);
        }
    }
}

/* A round's loads: every chunk (a full round) or those before the row's end. */
template <class T>
__device__ __forceinline__ void load_round(Round<T> &r, const Src &src, const Ctx &c, const uint8_t *sbm,
                                           const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int ci0,
                                           int th) {
    if (c.nch - ci0 >= LG) {
        load_w<T, true>(r, src, c, ci0, th);
        load_sb<T, true>(r, src, c, sbm, ci0);
        load_xp<T, true>(r, src, c, xq, xm, ci0, th);
    } else {
        load_w<T, false>(r, src, c, ci0, th);
        load_sb<T, false>(r, src, c, sbm, ci0);
        load_xp<T, false>(r, src, c, xq, xm, ci0, th);
    }
}

/* One step of the walk at p with round cur loaded: the next round into nxt, then cur folded
 * (the load in flight meanwhile), a finished group's partials stored. */
template <class T, int SBK, int GSH>
__device__ __forceinline__ void walk_step(Pos &p, Round<T> &cur, Round<T> &nxt, float (&la)[LG][2], float *red,
                                          const Src &src, const Ctx &c, const uint8_t *sbm,
                                          const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int U, int nu,
                                          int nr, int g, int t4) {
    Pos q = p;
    next(q, U, c.nch);
    const int th = t4 >> 1;
    const uint32_t mh = th ? 0u : ~0u;
    if (q.u0 < nu) load_round<T>(nxt, src, c, sbm, xq, xm, q.ci0, th);
    if (c.nch - p.ci0 >= LG) fold<T, SBK, GSH, true>(la, cur, c, p.ci0, mh);
    else fold<T, SBK, GSH, false>(la, cur, c, p.ci0, mh);
    finish_group(la, red, p, q, nu, nr, g, t4);
    p = q;
}

template <class T, int SBK, int GSH>
__device__ __forceinline__ void narrow_body(const Ctx &c, const int8_t *__restrict__ xq,
                                            const Meta *__restrict__ xm, float *__restrict__ y, int64_t n0, int nr,
                                            uint8_t *smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int nch = c.nch, U = 32 * c.kw, nu = lanes_of(c);
    const uint8_t *sbm = smem; /* the staged scales and biases, then the lanes' partials */
    float *red = reinterpret_cast<float *>(smem + sb_bytes(sb_row_bytes(c)));
    stage_sb((uint32_t)__cvta_generic_to_shared(smem), c, n0);
    Src src;
    static_cast<SideSrc &>(src) = side_src(c, n0, nr, g, t4);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int64_t n = n0 + g + 8 * k < c.N ? n0 + g + 8 * k : c.N - 1;
        src.w[k] = (uint32_t)((uint64_t)n * c.row_bytes) + 16u * (uint32_t)t4;
    }
    /* the B column's pair piece: chunk t4 / 2 of the pair, bytes 16 (t4 % 2) of its plane */
    src.xb += (uint32_t)((t4 >> 1) * ls::mmq::XB_BYTES + 16 * (t4 & 1) - 8 * t4);
    /* opaque from here on: kept in 7 registers, not recomputed from the parameters each round */
    asm volatile("" : "+r"(src.w[0]), "+r"(src.w[1]), "+r"(src.sb[0]), "+r"(src.sb[1]), "+r"(src.bo), "+r"(src.xb),
                 "+r"(src.xm));
    float la[LG][2];
#pragma unroll
    for (int v = 0; v < LG; v++) la[v][0] = la[v][1] = 0.0f;
    Round<T> ra, rb;
    Pos p{LG * warp, LG * warp};
    if (p.u0 < nu) { /* weights are never written by a step: before the wait */
        if (nch - p.ci0 >= LG) load_w<T, true>(ra, src, c, p.ci0, t4 >> 1);
        else load_w<T, false>(ra, src, c, p.ci0, t4 >> 1);
    }
    ls::pdl::enter();
    ls::stage::cp_wait<0>(); /* this thread's scale copies */
    __syncthreads();         /* and every thread's */
    if (p.u0 < nu) {
        if (nch - p.ci0 >= LG) {
            load_sb<T, true>(ra, src, c, sbm, p.ci0);
            load_xp<T, true>(ra, src, c, xq, xm, p.ci0, t4 >> 1);
        } else {
            load_sb<T, false>(ra, src, c, sbm, p.ci0);
            load_xp<T, false>(ra, src, c, xq, xm, p.ci0, t4 >> 1);
        }
    }
    /* two steps an iteration, the rounds' registers swapping roles: no copies */
    while (p.u0 < nu) {
        walk_step<T, SBK, GSH>(p, ra, rb, la, red, src, c, sbm, xq, xm, U, nu, nr, g, t4);
        if (p.u0 >= nu) break;
        walk_step<T, SBK, GSH>(p, rb, ra, la, red, src, c, sbm, xq, xm, U, nu, nr, g, t4);
    }
    __syncthreads();
    join_lanes(red, c, y, n0, nu, nr);
}

/* Each warp holds two rounds in registers: 4 blocks an SM at <= 128 registers for groups of
 * 64 or more (116-127, no spills; a 31B verify block of 4: 13.3-13.5 ms at 3 blocks an SM with
 * 139 registers, 13.0-13.1 at 4, H200 session 20); groups of 32 keep 2 (they spill at 128). */
template <class T, int SBK, int GSH>
__global__ void __launch_bounds__(32 * NW, GSH >= 1 ? 4 : 2)
    narrow_kernel(const NarrowGroup ng, const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int nr) {
    extern __shared__ __align__(16) uint8_t smem[];
    Ctx c;
    float *y;
    const int64_t n0 = pick_block(ng, c, y);
    narrow_body<T, SBK, GSH>(c, xq, xm, y, n0, nr, smem); /* calls ls::pdl::enter() */
}

template <int SBK, int GSH>
struct Launch8 {
    static int run(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const Meta *xm, int nr) {
        static std::atomic<int> have[32];
        return launch_kernel(narrow_kernel<NMlx<8, SBK, GSH>, SBK, GSH>, have, 0, st, g, nb, xq, xm, nr);
    }
};

} // namespace

namespace ls::mmq {

bool narrow_serves(int key, const Ctx &c, int64_t M) {
    /* the 32-bit offsets (SideSrc, Src, the staged kernel's copies): weight arrays below 4 GiB;
     * stage_sb: scale rows of at most SB_ROW_MAX bytes, 2-byte aligned (f32: 4-byte) */
    const uint64_t wb = (uint64_t)c.N * c.row_bytes;
    const uint32_t sbz = c.sb_kind == 0 ? 4u : 2u;
    const bool sb_ok = c.ng >= 1 && (uint64_t)c.ng * sbz <= ls::narrow::SB_ROW_MAX &&
                       ((reinterpret_cast<uintptr_t>(c.sc) | reinterpret_cast<uintptr_t>(c.bi)) & (sbz - 1)) == 0;
    return (key == 104 || key == 108) && M >= 1 && M <= MAXR && c.a16 && c.gshift >= 0 && c.gshift <= 2 &&
           c.kw >= 1 && c.kw <= 4 && wb < (1ull << 32) && sb_ok;
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
#ifndef LS_NARROW_LEGACY /* compile-time switch back to session 20's kernels, for measuring */
    if (ls::narrow::bulk_launch(st, g, nb, key == 108 ? 8 : 4, bf16, xq, xm, nr) == 0) return 0;
#endif
    if (key == 104) return ls::narrow::staged_launch(st, g, nb, bf16, xq, xm, nr);
    return launch_for<Launch8>(st, g, nb, bf16, xq, xm, nr);
}

} // namespace ls::mmq
