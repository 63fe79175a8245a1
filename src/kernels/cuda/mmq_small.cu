/* The small-M kernel of the integer-dot matmul (decode steps, verify blocks, small batcher
 * steps: up to 8 activation rows): int8 tensor cores on weights staged through shared
 * memory, the same activation blocks, exact integer sums and f32 sequence per output as
 * mmq.cu's dp4a kernel and mmq_mma.cu's tiles (mmq_common.cuh), so a row's bits do not
 * depend on which of the three ran. docs/cuda.md section 2a.
 *
 * Why: the dp4a kernel pays every (weight row, activation row) pair with its own dp4a
 * products, so a 5-row verify block costs ~1.7-2x a one-row step; a tensor-core tile forms
 * 16 weight rows x 8 activation rows of block sums in two mma, so rows 2..8 of a call are
 * nearly free. Fed from registers straight out of global memory the mma spend ~20
 * instructions per 512 weight bytes and stall on every load (measured: 0.5-1 TB/s), so a
 * block (16 weight rows) copies spans of its rows into shared memory with cp.async, two
 * stages deep: the copies run while the previous stage is multiplied, and a stage's 16 KB
 * cost 8 copy instructions a thread. An MLX row's scales and biases are staged with it (they
 * were global loads in every fold's dependency chain: 4-10% of a 5-row call, session 11). The first stage is requested before the kernel waits
 * for its predecessor (pdl.cuh): weights are never written by a step.
 *
 * Order (mmq_common.cuh): lanes are taken in ranges of CW (= 4 warps x V chunks);
 * for a range the block walks the rounds j (chunks u0 + j U .. + CW - 1, one stage each),
 * warp w folding the chunks of lanes u0 + w V + v into a fresh f32 per output and lane
 * (fold1: the expressions of mmq.cu's acc_block for one mma tile); after the range's last
 * round the lanes' partials go through shared memory (the stage buffer just read) and one
 * thread per output adds them, in lane order, to its running total (the first lane starts
 * the total). */
#include <stdint.h>

#include <atomic>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_frag.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/staging.cuh"

namespace {

using namespace ls::q;
using namespace ls::stage;
using ls::mmq::Meta;
using ls::mmq::mma_k32;
using ls::mmq::QB;
using ls::mmq::WBlk;
using ls::mmq::XB_BYTES;
using ls::mmq::XFrag;

constexpr int SW = 4;    /* warps per block */
constexpr int ROWS = 16; /* weight rows per block: one m16 tile */
constexpr int COLS = 8;  /* activation rows per block: one n8 tile */

/* A weight row's spans in the current stage, for the loaders: w = its bytes from the stage's
 * first chunk j0 on; for MLX rows also sc / bi = its scales and biases from group ga =
 * j0 >> gshift on (staged with the weights, so the fold never waits on a global load). */
struct SRow {
    const uint8_t *w, *sc, *bi;
    int ga;
};

/* An MLX row's scale and bias of group g = ci >> gshift, from the staged spans (mmq_mma.cu's
 * mlx_scale_bias on the same bytes): storage SBK = 0 f32, 1 f16, 2 bf16 fixed at compile
 * time, 3 = c.sb_kind. */
template <int SBK>
__device__ __forceinline__ void mlx_sb(WBlk &o, const Ctx &c, const SRow &r, int ci) {
    const int k = SBK == 3 ? c.sb_kind : SBK;
    const int gl = (ci >> c.gshift) - r.ga;
    const uint32_t s = k == 0 ? lw(r.sc + 4 * gl) : lh(r.sc + 2 * gl);
    const uint32_t b = k == 0 ? lw(r.bi + 4 * gl) : lh(r.bi + 2 * gl);
    o.a = k == 0 ? __uint_as_float(s) : k == 1 ? f16f(s) : bf16f(s);
    o.b = k == 0 ? __uint_as_float(b) : k == 1 ? f16f(b) : bf16f(b);
}

/* Per-type loaders: XB WBlk of chunk ci for thread t4, from the row's staged spans r (r.w =
 * its bytes from the stage's first chunk j0 on: cl = ci - j0; j0 is a multiple of CPS, so a
 * chunk's place in its superblock is cl % CPS). Each mirrors mmq_mma.cu's loader for the
 * type: the same bytes, the same f32 factor expressions. CPS chunks make a superblock of
 * SBB bytes; KIND selects fold1's expressions (mmq_mma.cu's KIND); MLX: scales and biases
 * are staged too; ALN: the loader has an 8-byte-word form for 16-byte aligned rows, chosen
 * by AL (c.a16, one uniform branch per stage instead of a select per load). */
template <int SBK>
struct SMlx4 {
    static constexpr int XB = 1, CPS = 1, SBB = 16, KIND = 0;
    static constexpr bool AU = true, MLX = true, ALN = false;
    template <bool AL>
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, const SRow &r, int ci, int cl, int t4) {
        const uint32_t q = lw(r.w + 16 * cl + 4 * t4);
        o[0].lo = q & 0x0f0f0f0fu;
        o[0].hi = (q >> 4) & 0x0f0f0f0fu;
        mlx_sb<SBK>(o[0], c, r, ci);
    }
};
template <int SBK>
struct SMlx8 {
    static constexpr int XB = 1, CPS = 1, SBB = 32, KIND = 0;
    static constexpr bool AU = true, MLX = true, ALN = true;
    template <bool AL>
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, const SRow &r, int ci, int cl, int t4) {
        const uint8_t *p = r.w + 32 * cl + 8 * t4;
        if (AL) { /* the span keeps the row's alignment: 8-byte words */
            const uint2 q = *reinterpret_cast<const uint2 *>(p);
            o[0].lo = q.x, o[0].hi = q.y;
        } else {
            o[0].lo = lw(p), o[0].hi = lw(p + 4);
        }
        mlx_sb<SBK>(o[0], c, r, ci);
    }
};
struct SQ8_0 {
    static constexpr int XB = 1, CPS = 1, SBB = 34, KIND = 1;
    static constexpr bool AU = false, MLX = false, ALN = false;
    template <bool AL>
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const SRow &r, int, int cl, int t4) {
        const uint8_t *b = r.w + 34 * cl;
        uint32_t q[2];
        la2<2>(q, b + 2 + 8 * t4);
        o[0].lo = q[0];
        o[0].hi = q[1];
        o[0].a = f16f(lh(b));
        o[0].b = 0.0f;
    }
};
struct SQ4_K {
    static constexpr int XB = 2, CPS = 4, SBB = 144, KIND = 0;
    static constexpr bool AU = true, MLX = false, ALN = false;
    template <bool AL>
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const SRow &r, int, int cl, int t4) {
        const uint8_t *b = r.w + 144 * (cl >> 2);
        const int g = cl & 3;
        uint32_t h[4], q[2];
        la2<4>(h, b);
        la2<2>(q, b + 16 + 32 * g + 8 * t4);
        ls::mmq::q4k_chunk(o, h, q, g);
    }
};
struct SQ6_K {
    static constexpr int XB = 1, CPS = 8, SBB = 210, KIND = 2;
    static constexpr bool AU = true, MLX = false, ALN = false;
    template <bool AL>
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const SRow &r, int, int cl, int t4) {
        const uint8_t *b = r.w + 210 * (cl >> 3);
        const int hf = (cl >> 2) & 1, t = cl & 3;
        uint32_t ql[2], qh[2];
        la2<2>(ql, b + 64 * hf + 32 * (t & 1) + 8 * t4);
        la2<2>(qh, b + 128 + 32 * hf + 8 * t4);
        ls::mmq::q6k_block(o[0], ql, qh, lh(b + 192 + 8 * hf + 2 * t), lh(b + 208), t);
    }
};
template <bool HM, bool HH>
struct SLegacy {
    static constexpr int XB = 1, CPS = 1, KIND = HM ? 0 : 3;
    static constexpr int SBB = 18 + 2 * HM + 4 * HH, QS = 2 + 2 * HM + 4 * HH;
    static constexpr int OFF = HM ? 0 : HH ? 16 : 8;
    static constexpr bool AU = true, MLX = false, ALN = false;
    template <bool AL>
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const SRow &r, int, int cl, int t4) {
        static_assert(HM == (OFF == 0), "a bias term or an offset, not both");
        const uint8_t *b = r.w + SBB * cl;
        uint32_t q[2];
        la2<2>(q, b + QS + 8 * (t4 & 1));
        const uint32_t qh = !HH ? 0u : HM ? lw(b + 4) : lh(b + 2) | lh(b + 4) << 16;
        ls::mmq::legacy_block<HM, HH>(o[0], q, qh, lh(b), HM ? lh(b + 2) : 0u, t4);
    }
};

/* One block of the tile for the thread's two weight rows r0 (row g) and r1 (row g + 8), the
 * expressions of mmq_mma.cu's fold_block; columns past nr are not computed.
 * PP false (5..8 activation rows): the B operand's 8 columns are activation rows and the two
 * planes take one mma each; la[k] is output (row g + 8 (k >> 1), column 2 t4 + (k & 1)).
 * PP true (up to 4 rows, a verify block of 4): the 8 columns are (activation row n >> 1, plane
 * n & 1), so one mma forms both planes of 4 rows and thread t4 holds the hi / lo sums of
 * activation row t4 side by side (C columns 2 t4, 2 t4 + 1): half the mma and half the folds
 * of a tile whose columns 4..7 would be padding; la[k] is output (row g + 8 k, column t4).
 * The exact integer S and the f32 steps per output are the same either way. */
template <class T, bool PP>
__device__ __forceinline__ void fold1(float (&la)[PP ? 2 : 4], const WBlk &r0, const WBlk &r1, const XFrag &xf,
                                      const float (&dx)[PP ? 1 : 2], const float (&xs)[PP ? 1 : 2],
                                      const int (&v1)[PP ? 1 : 2], int t4, int nr) {
    if constexpr (PP) {
        if (T::KIND != 2) {
            int c[4];
            mma_k32<T::AU>(c, r0.lo, r1.lo, r0.hi, r1.hi, xf.h.x, xf.h.y);
            if (t4 >= nr) return;
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const WBlk &r = k ? r1 : r0;
                int S = c[2 * k] * 256 + c[2 * k + 1];
                if constexpr (T::KIND == 3) S -= T::OFF * v1[0];
                float acc = fmaf(r.a * dx[0], (float)S, la[k]);
                if (T::KIND == 0) acc = fmaf(r.b, xs[0], acc);
                la[k] = acc;
            }
        } else {
            /* Q6_K: the halves' sums separately; threads t4 < 2 hold half 0 */
            const bool h0 = t4 < 2;
            const uint32_t z = 0;
            int s0[4], s1[4];
            mma_k32<true>(s0, h0 ? r0.lo : z, h0 ? r1.lo : z, h0 ? r0.hi : z, h0 ? r1.hi : z, xf.h.x, xf.h.y);
            mma_k32<true>(s1, h0 ? z : r0.lo, h0 ? z : r1.lo, h0 ? z : r0.hi, h0 ? z : r1.hi, xf.h.x, xf.h.y);
            if (t4 >= nr) return;
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const WBlk &r = k ? r1 : r0;
                const float d = dx[0];
                const int S0 = (s0[2 * k] * 256 + s0[2 * k + 1]) - 32 * __float_as_int(xs[0]);
                const int S1 = (s1[2 * k] * 256 + s1[2 * k + 1]) - 32 * v1[0];
                const float acc = fmaf(r.a * d, (float)S0, la[k]);
                la[k] = fmaf(r.b * d, (float)S1, acc);
            }
        }
    } else {
        if (T::KIND != 2) {
            int sh[4], sl[4];
            mma_k32<T::AU>(sh, r0.lo, r1.lo, r0.hi, r1.hi, xf.h.x, xf.h.y);
            mma_k32<T::AU>(sl, r0.lo, r1.lo, r0.hi, r1.hi, xf.l.x, xf.l.y);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (2 * t4 + (k & 1) >= nr) continue;
                const WBlk &r = k < 2 ? r0 : r1;
                int S = sh[k] * 256 + sl[k];
                if constexpr (T::KIND == 3) S -= T::OFF * v1[k & 1];
                float acc = fmaf(r.a * dx[k & 1], (float)S, la[k]);
                if (T::KIND == 0) acc = fmaf(r.b, xs[k & 1], acc);
                la[k] = acc;
            }
        } else {
            /* Q6_K: the halves' sums separately; threads t4 < 2 hold half 0 */
            const bool h0 = t4 < 2;
            const uint32_t z = 0;
            int s0h[4], s0l[4], s1h[4], s1l[4];
            mma_k32<true>(s0h, h0 ? r0.lo : z, h0 ? r1.lo : z, h0 ? r0.hi : z, h0 ? r1.hi : z, xf.h.x, xf.h.y);
            mma_k32<true>(s0l, h0 ? r0.lo : z, h0 ? r1.lo : z, h0 ? r0.hi : z, h0 ? r1.hi : z, xf.l.x, xf.l.y);
            mma_k32<true>(s1h, h0 ? z : r0.lo, h0 ? z : r1.lo, h0 ? z : r0.hi, h0 ? z : r1.hi, xf.h.x, xf.h.y);
            mma_k32<true>(s1l, h0 ? z : r0.lo, h0 ? z : r1.lo, h0 ? z : r0.hi, h0 ? z : r1.hi, xf.l.x, xf.l.y);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (2 * t4 + (k & 1) >= nr) continue;
                const WBlk &r = k < 2 ? r0 : r1;
                const float d = dx[k & 1];
                const int S0 = (s0h[k] * 256 + s0l[k]) - 32 * __float_as_int(xs[k & 1]);
                const int S1 = (s1h[k] * 256 + s1l[k]) - 32 * v1[k & 1];
                const float acc = fmaf(r.a * d, (float)S0, la[k]);
                la[k] = fmaf(r.b * d, (float)S1, acc);
            }
        }
    }
}

/* The activation side of one block: the B fragment at p (this thread's column g and
 * k-slice t4, a real row) and the metadata m0 / m1 of the thread's columns 2 t4 + e, or with
 * PP m0 of activation row t4 (only rows < nr are read): dx; X, or Q6_K's V0 bits and V1, or
 * V0 + V1. */
template <class T, bool PP>
__device__ __forceinline__ void load_x1(XFrag &xf, float (&dx)[PP ? 1 : 2], float (&xs)[PP ? 1 : 2],
                                        int (&v1)[PP ? 1 : 2], const int8_t *__restrict__ p,
                                        const Meta *__restrict__ m0, const Meta *__restrict__ m1, int t4, int nr) {
    xf.h = __ldg(reinterpret_cast<const uint2 *>(p)); /* PP: the plane of column g, already in p */
    if (!PP) xf.l = __ldg(reinterpret_cast<const uint2 *>(p + QB));
#pragma unroll
    for (int e = 0; e < (PP ? 1 : 2); e++) {
        dx[e] = 0.0f, xs[e] = 0.0f, v1[e] = 0;
        if ((PP ? t4 : 2 * t4 + e) >= nr) continue;
        const float *mp = reinterpret_cast<const float *>(e == 0 ? m0 : m1);
        if (T::KIND == 0) {
            const float2 v = __ldg(reinterpret_cast<const float2 *>(mp));
            dx[e] = v.x, xs[e] = v.y;
        } else if (T::KIND == 1) {
            dx[e] = __ldg(mp);
        } else if (T::KIND == 2) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(mp));
            dx[e] = v.x, xs[e] = v.z, v1[e] = __float_as_int(v.w);
        } else {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(mp));
            dx[e] = v.x, v1[e] = __float_as_int(v.z) + __float_as_int(v.w);
        }
    }
}

/* Stage geometry of type T: V chunks per warp, CW per stage; per weight row SLOT bytes of
 * shared memory (the span rounded out to 16-byte copies, plus 16 for its misalignment) and,
 * for MLX rows, SSLOT for its scales and again for its biases (CW groups of up to 4 bytes,
 * plus 16). The 16- and 32-byte MLX chunks' slots also sit SBB bytes past a multiple of 128,
 * so that the rows one mma fragment load reads (lanes g = 0..7 at 4 bytes, or a half-warp's
 * g = 0..3 at 8) fall in distinct banks: 1 or 2 wavefronts, not 2 or 4. A stage buffer
 * holds the spans or, after a range's last round, the lanes' partials (stage_bytes). */
template <class T>
struct Geo {
    static constexpr int V = T::XB == 1 ? 8 : 4;
    static constexpr int CW = SW * V;
    static constexpr int SPAN = CW / T::CPS * T::SBB;
    static constexpr int SLOT0 = (SPAN + 15) / 16 * 16 + 16;
    static constexpr int SKEW = T::MLX ? T::SBB : 0;
    static constexpr int SLOT = SKEW ? (SLOT0 - SKEW + 127) / 128 * 128 + SKEW : SLOT0;
    static constexpr int SSLOT = T::MLX ? 4 * CW + 16 : 0;
    static constexpr int SPANS = ROWS * (SLOT + 2 * SSLOT);
};
/* Bytes of one stage buffer for a tile of nr activation rows: the spans, or the CW x ROWS x
 * nr f32 partials when they are larger (16-byte multiple). */
template <class T>
__host__ __device__ inline int stage_bytes(int nr) {
    using G = Geo<T>;
    const int red = G::CW * ROWS * nr * (int)sizeof(float);
    return ((G::SPANS > red ? G::SPANS : red) + 15) / 16 * 16;
}

/* Loads in flight against resident warps: H chunks' loads are issued before their mma and
 * folds, and MINB blocks (of 4 warps) must fit an SM. H = 4 with 3 blocks (12 warps, 147-168
 * registers) measured fastest on an H200 (test_cuda_matmul --bench, policy 3, 21504 x 5376 /
 * 5376 x 21504, M = 5, us): MLX 8-bit 72.1 / 81.5, against 82.1 / 88.3 at H = 2 with 4 blocks
 * (128 registers), 104 / 122 at H = 1 with 5 (96) and 80.5 / 84.9 before the scales were
 * staged (docs/benchmarks.md, session 11): more resident warps do not make up for fewer
 * loads in flight per warp. LS_SMALL_MINB / LS_SMALL_H override both (compile-time, for
 * measuring). */
template <class T>
struct Occ {
#ifdef LS_SMALL_MINB
    static constexpr int MINB = LS_SMALL_MINB;
#else
    static constexpr int MINB = 3;
#endif
#ifdef LS_SMALL_H
    static constexpr int H = T::XB == 1 ? LS_SMALL_H : 2;
#else
    static constexpr int H = T::XB == 1 ? 4 : 2;
#endif
};

/* The stage sequence: lane range u0 (step CW, below nu), round j0 = u0, u0 + U, .. (below
 * nch). Chunks of a stage: j0 .. j0 + cnt - 1. */
struct Cursor {
    int u0, j0;
};
__device__ __forceinline__ void advance(Cursor &s, int U, int CW, int nch) {
    s.j0 += U;
    if (s.j0 >= nch) {
        s.u0 += CW;
        s.j0 = s.u0;
    }
}
__device__ __forceinline__ int stage_chunks(const Cursor &s, int CW, int nu, int nch) {
    const int a = nch - s.j0, b = nu - s.u0;
    const int m = a < b ? a : b;
    return m < CW ? m : CW;
}

/* The global bytes [p0, p1) of one row, rounded out to 16-byte pieces, into its slot: the
 * calling thread copies pieces q, q + 8, .. (q = t % 8); bytes at or past `end` (the end of
 * the array) are zero-filled, never read. */
__device__ __forceinline__ void copy_span(uint8_t *slot, const uint8_t *p0, const uint8_t *p1, const uint8_t *end) {
    const int q = threadIdx.x & 7;
    const uint8_t *src = down16(p0) + 16 * q;
    uint8_t *dst = slot + 16 * q;
    for (; src < p1; src += 128, dst += 128) {
        const int64_t left = end - src;
        cp16(dst, src, left < 16 ? (int)left : 16);
    }
}

/* Where a thread's copies come from: weight row t / 8 (clamped to a real row) and, for MLX,
 * its scales and biases; the ends of the three arrays. */
struct CopyRow {
    const uint8_t *w, *wend, *sc, *bi, *send, *bend;
};

/* Copy stage s of the block's 16 rows into buf (one commit group, empty past the end):
 * thread t copies row t / 8's span, then its scales' and biases' spans. */
template <class T>
__device__ __forceinline__ void issue(uint8_t *buf, const Ctx &c, const CopyRow &r, const Cursor &s, int nu) {
    using G = Geo<T>;
    if (s.u0 < nu) {
        const int cnt = stage_chunks(s, G::CW, nu, c.nch);
        const int64_t b0 = (int64_t)(s.j0 / T::CPS) * T::SBB;
        const int64_t b1 = (int64_t)((s.j0 + cnt + T::CPS - 1) / T::CPS) * T::SBB;
        const int row = threadIdx.x >> 3;
        copy_span(buf + row * G::SLOT, r.w + b0, r.w + b1, r.wend);
        if constexpr (T::MLX) {
            const int sbz = c.sb_kind == 0 ? 4 : 2;
            const int64_t g0 = (int64_t)(s.j0 >> c.gshift) * sbz, g1 = (int64_t)(((s.j0 + cnt - 1) >> c.gshift) + 1) * sbz;
            uint8_t *sb = buf + ROWS * G::SLOT + row * G::SSLOT;
            copy_span(sb, r.sc + g0, r.sc + g1, r.send);
            copy_span(sb + ROWS * G::SSLOT, r.bi + g0, r.bi + g1, r.bend);
        }
    }
    cp_commit();
}

/* The activation side of one stage for a warp: byte offset x of its first chunk's B
 * fragment (this thread's column g and k-slice t4) in xq, and block offsets m0 / m1 of the
 * metadata of columns 2 t4 + e in xm; chunk i of the warp's V, block b, is o = i XB + b
 * blocks further. 32-bit offsets (a pass's scratch is below 2^31 bytes): three registers
 * instead of three pointers, which the 128-register MLX kernels would recompute per chunk. */
struct XStage {
    const int8_t *xq;
    const Meta *xm;
    uint32_t x, m0, m1;
};

/* The stage's chunks cl = warp V + h0 + i (i < H, below cnt) for this thread's rows r0 / r1:
 * every load first, then the mma and folds (independent chains the scheduler can overlap). */
template <class T, bool AL, bool PP>
__device__ __forceinline__ void stage_compute(float (&la)[Geo<T>::V][PP ? 2 : 4], const Ctx &c, const SRow &r0,
                                              const SRow &r1, const XStage &xs_, int j0, int cnt, int warp, int t4,
                                              int nr) {
    using G = Geo<T>;
    constexpr int V = G::V;
    constexpr int H = Occ<T>::H;
    constexpr int NC = PP ? 1 : 2; /* activation rows whose metadata a thread folds with */
#pragma unroll
    for (int h0 = 0; h0 < V; h0 += H) {
        WBlk w0[H][T::XB], w1[H][T::XB];
        XFrag xf[H][T::XB];
        float dx[H][T::XB][NC], xs[H][T::XB][NC];
        int v1[H][T::XB][NC];
#pragma unroll
        for (int i = 0; i < H; i++) {
            const int cl = warp * V + h0 + i;
            if (cl >= cnt) break; /* uniform */
            const int ci = j0 + cl;
            T::template load<AL>(w0[i], c, r0, ci, cl, t4);
            T::template load<AL>(w1[i], c, r1, ci, cl, t4);
#pragma unroll
            for (int b = 0; b < T::XB; b++) {
                const int o = (h0 + i) * T::XB + b;
                load_x1<T, PP>(xf[i][b], dx[i][b], xs[i][b], v1[i][b], xs_.xq + (xs_.x + (uint32_t)o * XB_BYTES),
                           xs_.xm + (xs_.m0 + (uint32_t)o), xs_.xm + (xs_.m1 + (uint32_t)o), t4, nr);
            }
        }
#pragma unroll
        for (int i = 0; i < H; i++) {
            if (warp * V + h0 + i >= cnt) break;
#pragma unroll
            for (int b = 0; b < T::XB; b++)
                fold1<T, PP>(la[h0 + i], w0[i][b], w1[i][b], xf[i][b], dx[i][b], xs[i][b], v1[i][b], t4, nr);
        }
    }
}

/* After a lane range's last round (lanes u0 .. u0 + CW - 1, below nu): each lane's partials la
 * go through red (the stage buffer just read) and thread t < 16 nr adds those of output (row
 * t / nr, column t % nr) to its running total tot in lane order (the first lane starts it). */
template <class T, bool PP>
__device__ __forceinline__ void join_lanes(float &tot, const float (&la)[Geo<T>::V][PP ? 2 : 4], float *red, int u0,
                                           int nu, int nr, int warp, int g, int t4) {
    constexpr int V = Geo<T>::V, CW = Geo<T>::CW;
    __syncthreads();
#pragma unroll
    for (int v = 0; v < V; v++) {
        const int l = warp * V + v;
        if (u0 + l >= nu) break;
#pragma unroll
        for (int k = 0; k < (PP ? 2 : 4); k++) {
            const int col = PP ? t4 : 2 * t4 + (k & 1), row = PP ? g + 8 * k : g + 8 * (k >> 1);
            if (col < nr) red[(l * ROWS + row) * nr + col] = la[v][k];
        }
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < ROWS * nr) {
        const int row = t / nr, col = t % nr;
        const int nl = nu - u0 < CW ? nu - u0 : CW;
        for (int l = 0; l < nl; l++) {
            const float p = red[(l * ROWS + row) * nr + col];
            tot = u0 == 0 && l == 0 ? p : tot + p;
        }
    }
}

/* One weight's tile: rows n0 .. n0 + 15, activation rows m0 .. m0 + nr - 1 (nr <= 8).
 * smem: two stage buffers of stage_bytes(nr). The first stages' copies are issued before
 * ls::pdl::enter() (the kernel's entry). */
template <class T, bool ONE, bool PP>
__device__ __forceinline__ void small_body(const Ctx &c, const int8_t *__restrict__ xq,
                                           const Meta *__restrict__ xm, float *__restrict__ y, int64_t n0,
                                           int64_t m0, int nr_, uint8_t *smem) {
    const int nr = ONE ? 1 : nr_; /* ONE: a one-row call, compiled without the other columns */
    using G = Geo<T>;
    constexpr int V = G::V, CW = G::CW;
    const int SB = stage_bytes<T>(nr); /* stage buffer i at smem + i SB */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int nch = c.nch, U = 32 * c.kw, nu = nch < U ? nch : U;
    const int sbz = c.sb_kind == 0 ? 4 : 2;

    static_assert(32 * SW == 8 * ROWS, "issue(): 8 copying threads a row");
    CopyRow cr;
    {
        const int64_t nc = n0 + (threadIdx.x >> 3) < c.N ? n0 + (threadIdx.x >> 3) : c.N - 1;
        cr.w = c.w + (size_t)nc * c.row_bytes;
        cr.wend = c.w + (size_t)c.N * c.row_bytes;
        cr.sc = cr.bi = cr.send = cr.bend = nullptr;
        if (T::MLX) {
            const size_t rs = (size_t)c.ng * sbz;
            cr.sc = c.sc + (size_t)nc * rs, cr.bi = c.bi + (size_t)nc * rs;
            cr.send = c.sc + (size_t)c.N * rs, cr.bend = c.bi + (size_t)c.N * rs;
        }
    }
    Cursor ld{0, 0};
    issue<T>(smem, c, cr, ld, nu);
    advance(ld, U, CW, nch);
    issue<T>(smem + SB, c, cr, ld, nu);
    advance(ld, U, CW, nch);
    ls::pdl::enter(); /* activations and y: only after the predecessors are done */

    const int64_t nbk = c.K / QB;
    const int wn0 = (int)(n0 + g < c.N ? n0 + g : c.N - 1), wn1 = (int)(n0 + g + 8 < c.N ? n0 + g + 8 : c.N - 1);
    /* the thread's B column: activation row g, or with PP row g >> 1's plane g & 1; the rows of
     * its metadata: 2 t4 + e, or with PP t4 (clamped to real rows) */
    const int gr = PP ? g >> 1 : g;
    const int ao = (int)((m0 + (gr < nr ? gr : nr - 1)) * nbk);
    const uint32_t plane = PP ? (uint32_t)(g & 1) * QB : 0u;
    int mo[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int r = PP ? t4 : 2 * t4 + e;
        mo[e] = (int)((m0 + (r < nr ? r : nr - 1)) * nbk);
    }
    const uint8_t *g0 = c.w + (size_t)wn0 * c.row_bytes, *g1 = c.w + (size_t)wn1 * c.row_bytes;
    const uint8_t *s0 = nullptr, *s1 = nullptr, *q0 = nullptr, *q1 = nullptr; /* MLX scale / bias rows */
    if (T::MLX) {
        const size_t rs = (size_t)c.ng * sbz;
        s0 = c.sc + (size_t)wn0 * rs, s1 = c.sc + (size_t)wn1 * rs;
        q0 = c.bi + (size_t)wn0 * rs, q1 = c.bi + (size_t)wn1 * rs;
    }
    constexpr int NO = PP ? 2 : 4; /* outputs a thread folds per chunk */
    float la[V][NO];
    float tot = 0.0f; /* output (row t / nr, column t % nr) for threads t < 16 nr */
    Cursor cs{0, 0};
    for (int s = 0; cs.u0 < nu; s++) {
        cp_wait<1>();
        __syncthreads();
        if (cs.j0 == cs.u0) {
#pragma unroll
            for (int v = 0; v < V; v++)
#pragma unroll
                for (int k = 0; k < NO; k++) la[v][k] = 0.0f;
        }
        const int cnt = stage_chunks(cs, CW, nu, nch);
        const int64_t b0 = (int64_t)(cs.j0 / T::CPS) * T::SBB;
        uint8_t *buf = smem + (s & 1) * SB;
        /* where each row's spans start in their slots: their misalignment in global memory */
        SRow r0{buf + g * G::SLOT + ((uintptr_t)(g0 + b0) & 15u), nullptr, nullptr, 0};
        SRow r1{buf + (g + 8) * G::SLOT + ((uintptr_t)(g1 + b0) & 15u), nullptr, nullptr, 0};
        if (T::MLX) {
            const int ga = cs.j0 >> c.gshift;
            const int64_t go = (int64_t)ga * sbz;
            const uint8_t *sb = buf + ROWS * G::SLOT, *bb = sb + ROWS * G::SSLOT;
            r0.sc = sb + g * G::SSLOT + ((uintptr_t)(s0 + go) & 15u);
            r1.sc = sb + (g + 8) * G::SSLOT + ((uintptr_t)(s1 + go) & 15u);
            r0.bi = bb + g * G::SSLOT + ((uintptr_t)(q0 + go) & 15u);
            r1.bi = bb + (g + 8) * G::SSLOT + ((uintptr_t)(q1 + go) & 15u);
            r0.ga = r1.ga = ga;
        }
        const uint32_t blk0 = (uint32_t)((cs.j0 + warp * V) * T::XB); /* the warp's first block */
        const XStage xst{xq, xm, ((uint32_t)ao + blk0) * XB_BYTES + plane + 8 * t4, (uint32_t)mo[0] + blk0,
                         (uint32_t)mo[1] + blk0};
        if constexpr (T::ALN) {
            if (c.a16) stage_compute<T, true, PP>(la, c, r0, r1, xst, cs.j0, cnt, warp, t4, nr);
            else stage_compute<T, false, PP>(la, c, r0, r1, xst, cs.j0, cnt, warp, t4, nr);
        } else {
            stage_compute<T, false, PP>(la, c, r0, r1, xst, cs.j0, cnt, warp, t4, nr);
        }
        if (cs.j0 + U >= nch) /* the range's last round: its lanes join the totals */
            join_lanes<T, PP>(tot, la, reinterpret_cast<float *>(buf), cs.u0, nu, nr, warp, g, t4);
        __syncthreads(); /* the buffer is free again */
        issue<T>(buf, c, cr, ld, nu);
        advance(ld, U, CW, nch);
        advance(cs, U, CW, nch);
    }
    cp_wait<0>();
    const int t = threadIdx.x;
    if (t < ROWS * nr) {
        const int row = t / nr, col = t % nr;
        const int64_t n = n0 + row;
        if (n < c.N) y[(m0 + col) * c.N + n] = tot;
    }
}

/* Up to GMAX weights of one type and K on the same activation rows: the 16-row tiles of
 * weight 0, then of weight 1, ... (a weight's rows get the body of its own launch). */
constexpr int GMAX = 3;
struct SmallGroup {
    Ctx c[GMAX];
    float *y[GMAX];
    int64_t nb[GMAX];
    int n;
};

template <class T, bool ONE, bool PP>
__global__ void __launch_bounds__(32 * SW, Occ<T>::MINB) small_kernel(const SmallGroup sg, const int8_t *__restrict__ xq,
                                                         const Meta *__restrict__ xm, int64_t M) {
    extern __shared__ __align__(16) uint8_t smem[];
    int64_t yb = blockIdx.y;
    Ctx c;
    float *y;
    ls::mmq::group_pick(sg, yb, c, y);
    const int64_t m0 = (int64_t)blockIdx.x * COLS;
    const int nr = (int)(M - m0 < COLS ? M - m0 : COLS);
    small_body<T, ONE, PP>(c, xq, xm, y, yb * ROWS, m0, nr, smem); /* calls ls::pdl::enter() */
}

template <class T>
int small_t(cudaStream_t st, const Ctx *c, float *const *y, int n, const int8_t *xq, const Meta *xm, int64_t M) {
    using G = Geo<T>;
    SmallGroup sg{};
    sg.n = n;
    int64_t nb = 0;
    for (int i = 0; i < n; i++) {
        sg.c[i] = c[i];
        sg.y[i] = y[i];
        sg.nb[i] = (c[i].N + ROWS - 1) / ROWS;
        nb += sg.nb[i];
    }
    const int nr = (int)(M < COLS ? M : COLS);
    const size_t smem = (size_t)2 * stage_bytes<T>(nr);
    /* the shared-memory limit is a per-device attribute: raised once on each device (bit d) */
    static std::atomic<unsigned> raised{0};
    int dev = 0;
    if (smem > 48 * 1024 && cudaGetDevice(&dev) == cudaSuccess &&
        (dev >= 32 || !(raised.load(std::memory_order_relaxed) & (1u << dev)))) {
        const int cap = 2 * stage_bytes<T>(COLS);
        if (cudaFuncSetAttribute(small_kernel<T, false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, cap) !=
                cudaSuccess ||
            cudaFuncSetAttribute(small_kernel<T, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, cap) !=
                cudaSuccess ||
            cudaFuncSetAttribute(small_kernel<T, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, cap) !=
                cudaSuccess)
            return -1;
        if (dev < 32) raised.fetch_or(1u << dev, std::memory_order_relaxed);
    }
    const int64_t gx = (M + COLS - 1) / COLS;
    if (nb > 65535 || gx > 0x7fffffff) return -1;
    const dim3 grid((unsigned)gx, (unsigned)nb);
    /* up to 4 rows: both planes in one mma (fold1's PP) */
    const cudaError_t e =
        M == 1  ? ls::pdl::launch(small_kernel<T, true, true>, grid, 32 * SW, smem, st, sg, xq, xm, M)
        : M <= 4 ? ls::pdl::launch(small_kernel<T, false, true>, grid, 32 * SW, smem, st, sg, xq, xm, M)
                 : ls::pdl::launch(small_kernel<T, false, false>, grid, 32 * SW, smem, st, sg, xq, xm, M);
    return e == cudaSuccess ? 0 : -1;
}

} // namespace

namespace ls::mmq {

int small_launch(cudaStream_t st, const Ctx *c, float *const *y, int n, int key, const int8_t *xq, const Meta *xm,
                 int64_t M) {
    if (n < 1 || n > GMAX || M < 1) return -1;
    switch (key) {
    case 104:
    case 108: {
        /* the scales' storage as a compile-time constant when the group agrees on it */
        int k = c[0].sb_kind;
        for (int i = 1; i < n; i++)
            if (c[i].sb_kind != k) k = 3;
        const bool m4 = key == 104;
        switch (k) {
        case 0: return m4 ? small_t<SMlx4<0>>(st, c, y, n, xq, xm, M) : small_t<SMlx8<0>>(st, c, y, n, xq, xm, M);
        case 1: return m4 ? small_t<SMlx4<1>>(st, c, y, n, xq, xm, M) : small_t<SMlx8<1>>(st, c, y, n, xq, xm, M);
        case 2: return m4 ? small_t<SMlx4<2>>(st, c, y, n, xq, xm, M) : small_t<SMlx8<2>>(st, c, y, n, xq, xm, M);
        default: return m4 ? small_t<SMlx4<3>>(st, c, y, n, xq, xm, M) : small_t<SMlx8<3>>(st, c, y, n, xq, xm, M);
        }
    }
    case LS_TYPE_Q4_0: return small_t<SLegacy<false, false>>(st, c, y, n, xq, xm, M);
    case LS_TYPE_Q4_1: return small_t<SLegacy<true, false>>(st, c, y, n, xq, xm, M);
    case LS_TYPE_Q5_0: return small_t<SLegacy<false, true>>(st, c, y, n, xq, xm, M);
    case LS_TYPE_Q5_1: return small_t<SLegacy<true, true>>(st, c, y, n, xq, xm, M);
    case LS_TYPE_Q8_0: return small_t<SQ8_0>(st, c, y, n, xq, xm, M);
    case LS_TYPE_Q4_K: return small_t<SQ4_K>(st, c, y, n, xq, xm, M);
    case LS_TYPE_Q6_K: return small_t<SQ6_K>(st, c, y, n, xq, xm, M);
    default: return -1;
    }
}

} // namespace ls::mmq
