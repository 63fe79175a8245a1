/* The order and the shared-memory scales of the narrow-call kernel (mmq_narrow.cu, MLX affine
 * 4/8-bit, 1..4 activation rows; docs/cuda.md section 2a). It folds the same chunks with the
 * same expressions as every other integer kernel (mmq_common.cuh), so a row's bits do not
 * depend on which of them ran.
 *
 * Order (mmq_common.cuh): a block owns R = 16 or 32 weight rows (one or two m16 tiles a warp:
 * mmq_narrow.cu rows_of; the order below is per output, so R never shows in the bits); its NW
 * warps take the virtual lanes in groups of LG consecutive ones (warp w: groups w, w + NW,
 * ..); a group's round r holds the chunks u0 + r U .. u0 + r U + LG - 1 (one per lane,
 * contiguous in the row), each folded into its lane's f32 (starting at 0) in increasing r.
 * After a group's last round its partials go to shared memory; after the block's barrier one
 * thread per output adds the lanes' partials in lane order (the first lane starts the total). */
#pragma once

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_frag.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/staging.cuh"

namespace ls::narrow {

using ls::mmq::Meta;
using ls::q::Ctx;

/* 4 warps a block, each folding two lane groups of a 32-lane row: against 8 warps (one group
 * each) a 31B verify block of 4 took 15.0 ms instead of 16.1-16.6 (H200, session 17) */
constexpr int NW = 4;    /* warps per block */
constexpr int ROWS = 16; /* weight rows of one m16 tile; a block has R = 16 or 32 (R / 16 tiles a warp) */
constexpr int LG = 4;    /* consecutive virtual lanes a warp folds in one round */
constexpr int MAXR = 4;  /* activation rows: both planes of each fill the n8 tile */

/* MLX affine BITS-bit rows (4 or 8), scales and biases stored as SBK (0 f32, 1 f16, 2 bf16;
 * 3: c.sb_kind at run time), group = 32 << GSH elements. A round's LG chunks start at a
 * multiple of LG, so they span NG groups. Which bytes of a chunk a thread holds: mmq_narrow.cu
 * lds_of. */
template <int BITS, int SBK, int GSH>
struct NMlx {
    static constexpr int WPC = BITS / 4;
    static constexpr int CB = 4 * BITS; /* bytes per chunk and row */
    static constexpr int NG = GSH >= 2 ? 1 : LG >> GSH;
    static constexpr int SB = SBK, GS = GSH;
};

/* A block's scales and biases, staged once in shared memory (why: read from global memory, a
 * round's 2-byte scale and bias loads touched 16 rows' lines each, as many L1 wavefronts as the
 * weights themselves for 128 bytes). The 16 rows' whole scale rows (rb bytes each) go to the
 * first region, their biases to the second, in one of two layouts:
 *   - rows sb_stride(rb) apart, copied row by row in 16-byte pieces, when rb is a multiple of
 *     16 and both arrays are 16-byte aligned (the stride an odd number of pieces, so the 8
 *     rows one load reads sit in distinct banks);
 *   - else the rows' one contiguous span, copied in 16-byte pieces (arrays 16-byte aligned) or
 *     4-byte ones from the 4-byte boundary below it (dl: the span's first byte, per array;
 *     the bytes below it share its aligned word and are never read back). Rows rb apart may
 *     share banks here (2-way for rb = 42; more for unaligned arrays with rb a multiple of
 *     128; the 31B's 168-byte rows: distinct): slower, the same values. */
__host__ __device__ inline uint32_t sb_row_bytes(const Ctx &c) {
    return (uint32_t)c.ng * (c.sb_kind == 0 ? 4u : 2u);
}
__host__ __device__ constexpr uint32_t sb_stride(uint32_t rb) {
    return rb % 16 != 0 || (rb / 16) % 2 != 0 ? rb : rb + 16;
}
/* bytes of one region for R rows (either layout: the padded rows, or the span plus its
 * 4-byte rounding) */
template <int R>
__host__ __device__ constexpr uint32_t sb_region(uint32_t rb) {
    return (R * sb_stride(rb) + 16 + 15) & ~15u;
}
template <int R>
__host__ __device__ constexpr uint32_t sb_bytes(uint32_t rb) {
    return 2 * sb_region<R>(rb);
}
/* narrow_serves: at most sb_bytes<16>(4096) bytes staged (16-row blocks always fit the
 * device's shared memory; 32-row blocks of such rows may not, and fall back: narrow_launch) */
constexpr uint32_t SB_ROW_MAX = 4096;

struct SbGeom {
    uint32_t rb, S;   /* row bytes, row stride in the region */
    uint32_t dl[2];   /* where the scale / bias span starts in its region */
    bool rows, a16;   /* row-by-row layout; 16-byte pieces */
};
__device__ __forceinline__ SbGeom sb_geom(const Ctx &c, int64_t n0) {
    SbGeom q;
    q.rb = sb_row_bytes(c);
    const uintptr_t s = reinterpret_cast<uintptr_t>(c.sc) + (uint64_t)n0 * q.rb,
                    b = reinterpret_cast<uintptr_t>(c.bi) + (uint64_t)n0 * q.rb;
    q.a16 = ((s | b) & 15u) == 0;
    q.rows = q.a16 && q.rb % 16 == 0;
    q.S = q.rows ? sb_stride(q.rb) : q.rb;
    q.dl[0] = q.a16 ? 0u : (uint32_t)(s & 3u);
    q.dl[1] = q.a16 ? 0u : (uint32_t)(b & 3u);
    return q;
}

/* Copy the block's scale and bias rows (rows n0 .. n0 + R - 1 below N) to shared address dst
 * by cp.async, one commit group. Never written by a step: the copy may be issued before the
 * grid dependency wait. */
template <int R>
__device__ __forceinline__ void stage_sb(uint32_t dst, const Ctx &c, int64_t n0) {
    const SbGeom q = sb_geom(c, n0);
    const uint32_t nrows = (uint32_t)(c.N - n0 < R ? c.N - n0 : R);
#pragma unroll
    for (int a = 0; a < 2; a++) {
        const uint8_t *src = (a ? c.bi : c.sc) + (uint64_t)n0 * q.rb;
        const uint32_t d = dst + (uint32_t)a * sb_region<R>(q.rb);
        if (q.rows) { /* 16-byte pieces, row by row */
            const uint32_t pr = q.rb / 16;
            for (uint32_t p = threadIdx.x; p < nrows * pr; p += blockDim.x) {
                const uint32_t r = p / pr, o = (p - r * pr) * 16;
                ls::stage::cp16(d + r * q.S + o, src + r * q.rb + o, 16);
            }
        } else if (q.a16) { /* one span, 16-byte pieces, the last one zero-filled past its end */
            const uint32_t tot = nrows * q.rb;
            for (uint32_t o = 16 * threadIdx.x; o < tot; o += 16 * blockDim.x)
                ls::stage::cp16(d + o, src + o, (int)(tot - o < 16u ? tot - o : 16u));
        } else { /* one span from the 4-byte boundary below it, 4-byte pieces */
            const uint8_t *s4 = src - q.dl[a];
            const uint32_t tot = q.dl[a] + nrows * q.rb;
            for (uint32_t o = 4 * threadIdx.x; o < tot; o += 4 * blockDim.x)
                ls::stage::cp4(d + o, s4 + o, (int)(tot - o < 4u ? tot - o : 4u));
        }
    }
    ls::stage::cp_commit();
}

/* Where this thread's scale and bias loads come from: byte offsets into the block's staged
 * scales for its output rows r + 8 k, k < R / 8 (clamped to the block's real rows), and the
 * distance from there to the biases. 32-bit: kept in registers, not a 64-bit pointer each. */
template <int R>
struct SideSrc {
    static constexpr int K = R / 8;
    uint32_t sb[K]; /* the staged scales of rows r + 8 k */
    uint32_t bo;    /* the biases: sb + bo */
};

template <int R>
__device__ __forceinline__ SideSrc<R> side_src(const Ctx &c, int64_t n0, int r) {
    SideSrc<R> s;
    const SbGeom q = sb_geom(c, n0);
    const int last = (int)(c.N - n0 < R ? c.N - n0 : R) - 1;
#pragma unroll
    for (int k = 0; k < R / 8; k++) s.sb[k] = q.dl[0] + (uint32_t)(r + 8 * k <= last ? r + 8 * k : last) * q.S;
    s.bo = sb_region<R>(q.rb) + q.dl[1] - q.dl[0];
    return s;
}

/* The scale and bias loads of the round at chunk ci0 from the staged rows at sbm (shared
 * memory, complete: stage_sb's group waited for and the block synchronized); chunks past the
 * row's end are not loaded. */
template <class T, bool FULL, class R, int RB>
__device__ __forceinline__ void load_sb(R &r, const SideSrc<RB> &p, const Ctx &c, const uint8_t *sbm, int ci0) {
    const int left = FULL ? LG : c.nch - ci0;
    const int kind = T::SB == 3 ? c.sb_kind : T::SB;
    const uint32_t go = (uint32_t)(ci0 >> T::GS) * (kind == 0 ? 4u : 2u);
#pragma unroll
    for (int k = 0; k < RB / 8; k++) {
        const uint8_t *s = sbm + (p.sb[k] + go), *b = s + p.bo;
#pragma unroll
        for (int j = 0; j < T::NG; j++) {
            if ((j << T::GS) >= left) break;
            r.s[k][j] = kind == 0 ? ls::stage::lw(s + 4 * j) : ls::stage::lh(s + 2 * j);
            r.b[k][j] = kind == 0 ? ls::stage::lw(b + 4 * j) : ls::stage::lh(b + 2 * j);
        }
    }
}

template <int SBK>
__device__ __forceinline__ float sb_float(uint32_t v, const Ctx &c) {
    const int k = SBK == 3 ? c.sb_kind : SBK;
    return k == 0 ? __uint_as_float(v) : k == 1 ? ls::q::f16f(v) : ls::q::bf16f(v);
}

/* Fold chunk v of a round, given its exact sums cc (an m16n8k32 C fragment of tile t: hi and
 * lo plane sums of activation row t4 against this thread's two weight rows 16 t + r, 16 t + r
 * + 8), into the lanes' partials la[k] (output row 16 t + r + 8 k, activation row t4):
 * mmq_small.cu fold1's paired-plane expressions for MLX. R: a round's registers (the scale and
 * bias words s, b of rows r + 8 k', k' = 2 t + k, and the activation metadata xm). */
template <int SBK, int GSH, class R>
__device__ __forceinline__ void fold_sums(float (&la)[2], const int (&cc)[4], const R &r, int v, int t, const Ctx &c) {
    const int j = GSH >= 2 ? 0 : v >> GSH;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int S = cc[2 * k] * 256 + cc[2 * k + 1];
        const float a = sb_float<SBK>(r.s[2 * t + k][j], c), b = sb_float<SBK>(r.b[2 * t + k][j], c);
        const float acc = fmaf(a * r.xm[v].x, (float)S, la[k]);
        la[k] = fmaf(b, r.xm[v].y, acc);
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

/* A lane group done (the walk moved from p to q): its partials (output rows 16 t + r + 8 k of
 * the R / 16 tiles) to red[lane][row][column], the registers cleared for the next group. */
template <int R>
__device__ __forceinline__ void finish_group(float (&la)[LG][R / 16][2], float *red, const Pos &p, const Pos &q,
                                             int nu, int nr, int r, int t4) {
    if (q.u0 == p.u0) return;
#pragma unroll
    for (int v = 0; v < LG; v++) {
        const int u = p.u0 + v;
#pragma unroll
        for (int t = 0; t < R / 16; t++) {
            if (u < nu && t4 < nr) {
                red[(u * R + 16 * t + r) * nr + t4] = la[v][t][0];
                red[(u * R + 16 * t + r + 8) * nr + t4] = la[v][t][1];
            }
            la[v][t][0] = la[v][t][1] = 0.0f;
        }
    }
}

/* After the block's barrier: one thread per output adds the nu lanes' partials in lane order
 * (R rows x nr columns: at most 32 x 4 = the block's 128 threads). */
template <int R>
__device__ __forceinline__ void join_lanes(const float *red, const Ctx &c, float *__restrict__ y, int64_t n0, int nu,
                                           int nr) {
    const int t = threadIdx.x;
    if (t < R * nr) {
        const int row = t / nr, col = t % nr;
        float tot = red[row * nr + col];
        for (int u = 1; u < nu; u++) tot = tot + red[(u * R + row) * nr + col];
        const int64_t n = n0 + row;
        if (n < c.N) y[(int64_t)col * c.N + n] = tot;
    }
}

/* Up to GMAX weights of one type and K on the same activation rows: the R-row blocks of
 * weight 0, then of weight 1, .. (a weight's rows get the body of its own launch). */
constexpr int GMAX = 3;
struct NarrowGroup {
    Ctx c[GMAX];
    float *y[GMAX];
    int64_t nb[GMAX];
    int n;
};

/* The staged scale bytes a group's blocks need: the most of its weights' (their scale kinds may
 * differ). */
template <int R>
inline size_t sb_group_bytes(const NarrowGroup &g) {
    uint32_t m = 0;
    for (int i = 0; i < g.n; i++) {
        const uint32_t b = sb_bytes<R>(sb_row_bytes(g.c[i]));
        m = b > m ? b : m;
    }
    return m;
}

/* A block's weight (the index returned) and first row n0: blockIdx.x over the group's R-row
 * blocks. */
template <int R>
__device__ __forceinline__ int pick_block(const NarrowGroup &ng, int64_t &n0) {
    int64_t yb = blockIdx.x;
    int wi = 0;
    if (ng.n > 1 && yb >= ng.nb[0]) {
        yb -= ng.nb[0];
        wi = 1;
        if (ng.n > 2 && yb >= ng.nb[1]) {
            yb -= ng.nb[1];
            wi = 2;
        }
    }
    n0 = yb * R;
    return wi;
}

/* The launch L<SBK, GSH>::run of a group: SBK 2 when every weight has bf16 scales (the
 * checkpoints), else 3 (the kind read at run time); GSH from the group's gshift (0..2,
 * narrow_serves). */
template <template <int, int> class L, int SBK>
int launch_gs(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const Meta *xm, int nr) {
    switch (g.c[0].gshift) {
    case 0: return L<SBK, 0>::run(st, g, nb, xq, xm, nr);
    case 1: return L<SBK, 1>::run(st, g, nb, xq, xm, nr);
    default: return L<SBK, 2>::run(st, g, nb, xq, xm, nr);
    }
}
template <template <int, int> class L>
int launch_for(cudaStream_t st, const NarrowGroup &g, int64_t nb, bool bf16, const int8_t *xq, const Meta *xm,
               int nr) {
    return bf16 ? launch_gs<L, 2>(st, g, nb, xq, xm, nr) : launch_gs<L, 3>(st, g, nb, xq, xm, nr);
}

/* Virtual lanes of a call: 32 kw, at most one per chunk. */
inline __host__ __device__ int lanes_of(const Ctx &c) {
    const int U = 32 * c.kw;
    return c.nch < U ? c.nch : U;
}

} // namespace ls::narrow
