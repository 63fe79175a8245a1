/* The narrow-call kernel for MLX affine 4-bit weights (mmq_narrow.cu picks it): the weights go
 * through warp-private shared-memory stages by cp.async, NS - 1 rounds in flight while the warp
 * folds one, no block barrier between the scales' copy and the join. Folds, order and bits:
 * mmq_narrow.cuh, the same as the 8-bit register-fed kernel and every other integer kernel.
 * docs/cuda.md section 2a.
 *
 * Why a second kernel: a 4-bit round is half the bytes of an 8-bit one for the same
 * instructions, so the register-fed kernel (one round in flight a warp) left 4-bit calls
 * latency-bound; staged, they were 11-17% faster and a 31B verify block of 4 took 14.0-14.5 ms
 * instead of 14.6-14.8, while 8-bit calls were 7-20% slower staged (H200, session 18,
 * docs/benchmarks.md, fifteenth run). */
#include <stdint.h>

#include <atomic>

#include <cuda_runtime.h>

#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_narrow.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/staging.cuh"

namespace {

using namespace ls::narrow;
using ls::q::Ctx;

/* a warp's weight stages: NS - 1 rounds in flight while it folds one (MLX 4-bit 21504 x 5376, 4
 * rows: 2 stages 38.7 us, 3 stages 37.9, 4 stages 39.2, 6 stages 42.9; a 31B verify block of 4
 * 14.1-14.2 ms with 2 stages, 14.0-14.5 with 3) */
constexpr int NS = 3;

/* Stage layout of a 4-bit round: a row's LG chunks (SPAN bytes) STRIDE bytes apart; 80 puts
 * the 8 rows one fragment load reads (4-byte words of a warp) in distinct banks. */
struct Stage4 {
    static constexpr int CB = 16; /* bytes per chunk and row */
    static constexpr int SPAN = LG * CB, STRIDE = SPAN + 16;
    static constexpr int STAGE = ROWS * STRIDE, WARP = NS * STAGE;
};

/* Copy the round at chunk ci0 of the block's 16 rows into the warp's stage at st (shared
 * address): lane l copies row l / 2's half of the span in 16-byte pieces (cw: that row's
 * offset in c.w); pieces of chunks past the row's end are not copied (never folded). One
 * commit group, empty or not, so the waits count rounds. */
__device__ __forceinline__ void copy_round(uint32_t st, uint32_t cw, const Ctx &c, int ci0, bool live) {
    constexpr int PL = Stage4::SPAN / 16 / 2; /* pieces a lane */
    const int lane = threadIdx.x & 31;
    if (live) {
        const int left = c.nch - ci0;
        const uint8_t *src = c.w + (cw + (uint32_t)ci0 * (uint32_t)Stage4::CB);
        const uint32_t dst = st + (uint32_t)(lane >> 1) * Stage4::STRIDE;
#pragma unroll
        for (int j = 0; j < PL; j++) {
            const int piece = (lane & 1) * PL + j;
            if (16 * piece < left * Stage4::CB) ls::stage::cp16(dst + 16 * piece, src + 16 * piece, 16);
        }
    }
    ls::stage::cp_commit();
}

/* A round's register loads: every chunk (a full round) or those before the row's end. */
template <class T>
__device__ __forceinline__ void load_side(SideRound<T> &r, const SideSrc &src, const Ctx &c, const uint8_t *sbm,
                                          const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int ci0) {
    if (c.nch - ci0 >= LG) {
        load_sb<T, true>(r, src, c, sbm, ci0);
        load_x<T, true>(r, src, c, xq, xm, ci0);
    } else {
        load_sb<T, false>(r, src, c, sbm, ci0);
        load_x<T, false>(r, src, c, xq, xm, ci0);
    }
}

/* Fold the round in stage st (chunks ci0 + v, below nch) into the lanes' partials la[v][k]:
 * thread (g, t4)'s word of rows g and g + 8, its nibbles split into the two planes. */
template <class T, int SBK, int GSH, bool FULL>
__device__ __forceinline__ void fold(float (&la)[LG][2], const SideRound<T> &r, uint32_t st, const Ctx &c, int ci0,
                                     int g, int t4) {
    const uint32_t a0 = st + (uint32_t)g * Stage4::STRIDE + 4u * (uint32_t)t4, a1 = a0 + 8u * Stage4::STRIDE;
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (!FULL && ci0 + v >= c.nch) break; /* uniform */
        uint32_t lo[2], hi[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            uint32_t q;
            asm volatile("ld.shared.u32 %0, [%1];" : "=r"(q) : "r"((k ? a1 : a0) + v * Stage4::CB));
            lo[k] = q & 0x0f0f0f0fu;
            hi[k] = (q >> 4) & 0x0f0f0f0fu;
        }
        fold_chunk<T, SBK, GSH>(la[v], lo, hi, r, v, c);
    }
}

/* Step k of the walk at p (its weights in stage k % NS, its register loads in cur): the round
 * NS - 1 steps ahead (cp) copied into the stage step k - 1 freed, the next round's register
 * loads into nxt, cur folded, a finished group's partials stored. */
template <class T, int SBK, int GSH>
__device__ __forceinline__ void walk_step(Pos &p, Pos &cp, int k, uint32_t ring, uint32_t cw, SideRound<T> &cur,
                                          SideRound<T> &nxt, float (&la)[LG][2], float *red, const SideSrc &src,
                                          const Ctx &c, const uint8_t *sbm, const int8_t *__restrict__ xq,
                                          const Meta *__restrict__ xm, int U, int nu, int nr, int g, int t4) {
    ls::stage::cp_wait<NS - 2>(); /* this lane's copies of step k's stage are done */
    __syncwarp();                 /* and every lane's: visible to the warp; step k - 1's reads are over */
    copy_round(ring + (uint32_t)((k + NS - 1) % NS) * Stage4::STAGE, cw, c, cp.ci0, cp.u0 < nu);
    if (cp.u0 < nu) next(cp, U, c.nch);
    Pos q = p;
    next(q, U, c.nch);
    if (q.u0 < nu) load_side<T>(nxt, src, c, sbm, xq, xm, q.ci0);
    const uint32_t st = ring + (uint32_t)(k % NS) * Stage4::STAGE;
    if (c.nch - p.ci0 >= LG) fold<T, SBK, GSH, true>(la, cur, st, c, p.ci0, g, t4);
    else fold<T, SBK, GSH, false>(la, cur, st, c, p.ci0, g, t4);
    finish_group(la, red, p, q, nu, nr, g, t4);
    p = q;
}

/* Shared memory of a block: the warps' stages, the staged scales and biases, then the lanes'
 * partials (nu x 16 x nr f32). */
constexpr int STAGES_BYTES = NW * Stage4::WARP;

template <class T, int SBK, int GSH>
__device__ __forceinline__ void staged_body(const Ctx &c, const int8_t *__restrict__ xq,
                                            const Meta *__restrict__ xm, float *__restrict__ y, int64_t n0, int nr,
                                            uint8_t *smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int nch = c.nch, U = 32 * c.kw, nu = lanes_of(c);
    const uint8_t *sbm = smem + STAGES_BYTES;
    float *red = reinterpret_cast<float *>(smem + STAGES_BYTES + sb_bytes(sb_row_bytes(c)));
    const uint32_t ring = (uint32_t)__cvta_generic_to_shared(smem) + (uint32_t)warp * Stage4::WARP;
    stage_sb((uint32_t)__cvta_generic_to_shared(sbm), c, n0); /* the first commit group */
    SideSrc src = side_src(c, n0, nr, g, t4);
    const int64_t nc = n0 + (lane >> 1) < c.N ? n0 + (lane >> 1) : c.N - 1; /* the row this lane copies */
    uint32_t cw = (uint32_t)((uint64_t)nc * c.row_bytes);
    /* opaque from here on: kept in registers, not recomputed from the parameters each round */
    asm volatile("" : "+r"(cw), "+r"(src.sb[0]), "+r"(src.sb[1]), "+r"(src.bo), "+r"(src.xb), "+r"(src.xm));
    float la[LG][2];
#pragma unroll
    for (int v = 0; v < LG; v++) la[v][0] = la[v][1] = 0.0f;
    Pos p{LG * warp, LG * warp}, cp = p;
    /* the first NS - 1 rounds' weights: never written by a step, so requested before the wait */
#pragma unroll
    for (int k = 0; k < NS - 1; k++) {
        copy_round(ring + (uint32_t)k * Stage4::STAGE, cw, c, cp.ci0, cp.u0 < nu);
        if (cp.u0 < nu) next(cp, U, nch);
    }
    ls::pdl::enter();
    ls::stage::cp_wait<NS - 1>(); /* this thread's scale copies (the rounds' may be in flight) */
    __syncthreads();              /* and every thread's */
    SideRound<T> ra, rb;
    if (p.u0 < nu) load_side<T>(ra, src, c, sbm, xq, xm, p.ci0);
    /* two steps an iteration, the rounds' registers swapping roles: no copies */
    for (int k = 0; p.u0 < nu; k += 2) {
        walk_step<T, SBK, GSH>(p, cp, k, ring, cw, ra, rb, la, red, src, c, sbm, xq, xm, U, nu, nr, g, t4);
        if (p.u0 >= nu) break;
        walk_step<T, SBK, GSH>(p, cp, k + 1, ring, cw, rb, ra, la, red, src, c, sbm, xq, xm, U, nu, nr, g, t4);
    }
    ls::stage::cp_wait<0>();
    __syncthreads();
    join_lanes(red, c, y, n0, nu, nr);
}

template <class T, int SBK, int GSH>
__global__ void __launch_bounds__(32 * NW, 16 / NW) /* 16 warps an SM as far as registers go */
    staged_kernel(const NarrowGroup ng, const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int nr) {
    extern __shared__ __align__(16) uint8_t smem[];
    Ctx c;
    float *y;
    const int64_t n0 = pick_block(ng, c, y);
    staged_body<T, SBK, GSH>(c, xq, xm, y, n0, nr, smem); /* calls ls::pdl::enter() */
}

template <int SBK, int GSH>
struct Launch4 {
    static int run(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const Meta *xm, int nr) {
        static std::atomic<int> have[32];
        return launch_kernel(staged_kernel<NMlx<4, SBK, GSH>, SBK, GSH>, have, STAGES_BYTES, st, g, nb, xq, xm, nr);
    }
};

} // namespace

namespace ls::narrow {

int staged_launch(cudaStream_t st, const NarrowGroup &g, int64_t nb, bool bf16, const int8_t *xq, const Meta *xm,
                  int nr) {
    return launch_for<Launch4>(st, g, nb, bf16, xq, xm, nr);
}

} // namespace ls::narrow
