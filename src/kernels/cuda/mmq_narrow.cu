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

/* One round's loads for this thread: the weight words of its rows g / g + 8 (k = 0 / 1) x LG
 * chunks (8-bit: the two plane words of mmq_frag.cuh, 8 bytes at 8 t4) besides SideRound's.
 * Raw words: a prefetched round costs registers, not stalls. */
template <class T>
struct Round : SideRound<T> {
    static_assert(T::WPC == 2, "the register-fed kernel serves MLX 8-bit only (4-bit: mmq_narrow_staged.cu)");
    uint2 q[2][LG];
};

/* The weight offsets of rows g, g + 8 (clamped to real rows) plus this thread's word, as
 * SideSrc's: 32-bit, from c.w. */
struct Src : SideSrc {
    uint32_t w[2];
};

/* The weight loads of the round at chunk ci0, each row's chunks at immediate offsets from one
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
            r.q[k][v] = __ldg(reinterpret_cast<const uint2 *>(a + v * T::CB));
        }
    }
}

/* Fold round r (chunks ci0 + v, below nch) into the lanes' partials la[v][k]. */
template <class T, int SBK, int GSH, bool FULL>
__device__ __forceinline__ void fold(float (&la)[LG][2], const Round<T> &r, const Ctx &c, int ci0) {
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (!FULL && ci0 + v >= c.nch) break; /* uniform */
        uint32_t lo[2], hi[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            lo[k] = r.q[k][v].x;
            hi[k] = r.q[k][v].y;
        }
        fold_chunk<T, SBK, GSH>(la[v], lo, hi, r, v, c);
    }
}

/* A round's loads: every chunk (a full round) or those before the row's end. */
template <class T>
__device__ __forceinline__ void load_round(Round<T> &r, const Src &src, const Ctx &c, const uint8_t *sbm,
                                           const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int ci0) {
    if (c.nch - ci0 >= LG) {
        load_w<T, true>(r, src, c, ci0);
        load_sb<T, true>(r, src, c, sbm, ci0);
        load_x<T, true>(r, src, c, xq, xm, ci0);
    } else {
        load_w<T, false>(r, src, c, ci0);
        load_sb<T, false>(r, src, c, sbm, ci0);
        load_x<T, false>(r, src, c, xq, xm, ci0);
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
    if (q.u0 < nu) load_round<T>(nxt, src, c, sbm, xq, xm, q.ci0);
    if (c.nch - p.ci0 >= LG) fold<T, SBK, GSH, true>(la, cur, c, p.ci0);
    else fold<T, SBK, GSH, false>(la, cur, c, p.ci0);
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
        src.w[k] = (uint32_t)((uint64_t)n * c.row_bytes) + 4u * T::WPC * (uint32_t)t4;
    }
    /* opaque from here on: kept in 7 registers, not recomputed from the parameters each round */
    asm volatile("" : "+r"(src.w[0]), "+r"(src.w[1]), "+r"(src.sb[0]), "+r"(src.sb[1]), "+r"(src.bo), "+r"(src.xb),
                 "+r"(src.xm));
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
    ls::stage::cp_wait<0>(); /* this thread's scale copies */
    __syncthreads();         /* and every thread's */
    if (p.u0 < nu) {
        if (nch - p.ci0 >= LG) {
            load_sb<T, true>(ra, src, c, sbm, p.ci0);
            load_x<T, true>(ra, src, c, xq, xm, p.ci0);
        } else {
            load_sb<T, false>(ra, src, c, sbm, p.ci0);
            load_x<T, false>(ra, src, c, xq, xm, p.ci0);
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

/* Each warp holds two rounds in registers (112-142 of them): 2-4 blocks an SM. */
template <class T, int SBK, int GSH>
__global__ void __launch_bounds__(32 * NW, 2)
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
    if (key == 104) return ls::narrow::staged_launch(st, g, nb, bf16, xq, xm, nr);
    return launch_for<Launch8>(st, g, nb, bf16, xq, xm, nr);
}

} // namespace ls::mmq
