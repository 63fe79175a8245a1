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
 * cost 8 copy instructions a thread. The first stage is requested before the kernel waits
 * for its predecessor (pdl.cuh): weights are never written by a step.
 *
 * Order (mmq_common.cuh): lanes are taken in ranges of CW (= 4 warps x V chunks);
 * for a range the block walks the rounds j (chunks u0 + j U .. + CW - 1, one stage each),
 * warp w folding the chunks of lanes u0 + w V + v into a fresh f32 per output and lane
 * (fold1: the expressions of mmq.cu's acc_block for one mma tile); after the range's last
 * round the lanes' partials go through shared memory and one thread per output adds them,
 * in lane order, to its running total (the first lane starts the total). */
#include <stdint.h>

#include <atomic>

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
using ls::mmq::spread_nibble;
using ls::mmq::WBlk;
using ls::mmq::XB_BYTES;
using ls::mmq::XFrag;

constexpr int SW = 4;    /* warps per block */
constexpr int ROWS = 16; /* weight rows per block: one m16 tile */
constexpr int COLS = 8;  /* activation rows per block: one n8 tile */

/* ---- loads from a staged row span (generic loads: the span is in shared memory) ---- */
__device__ __forceinline__ uint32_t lw(const uint8_t *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}
__device__ __forceinline__ uint32_t lh(const uint8_t *p) {
    return *reinterpret_cast<const uint16_t *>(p);
}
/* NWD words at a 2-byte aligned address (dequant.cuh's ld_a2 on generic memory) */
template <int NWD>
__device__ __forceinline__ void la2(uint32_t *o, const uint8_t *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint8_t *b = reinterpret_cast<const uint8_t *>(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3u) * 8u;
    uint32_t v[NWD + 1];
#pragma unroll
    for (int j = 0; j < NWD; j++) v[j] = lw(b + 4 * j);
    v[NWD] = lw(b + 4 * (sh ? NWD : NWD - 1));
#pragma unroll
    for (int j = 0; j < NWD; j++) o[j] = __funnelshift_r(v[j], v[j + 1], sh);
}

/* A row's fixed pointers for the loaders: an MLX row's scales and biases (other types:
 * unused). */
struct RowCtx {
    const uint8_t *sc, *bi;
};
__device__ __forceinline__ RowCtx row_ctx(const Ctx &c, int n) {
    const int sbz = c.sb_kind == 0 ? 4 : 2;
    RowCtx r{nullptr, nullptr};
    if (c.sc) r.sc = c.sc + (size_t)n * c.ng * sbz, r.bi = c.bi + (size_t)n * c.ng * sbz;
    return r;
}

/* An MLX row's scale and bias of group g, from global memory (mmq_mma.cu's
 * mlx_scale_bias): storage SBK = 0 f32, 1 f16, 2 bf16 fixed at compile time, 3 = c.sb_kind. */
template <int SBK>
__device__ __forceinline__ void mlx_sb(WBlk &o, const Ctx &c, const RowCtx &rc, int g) {
    const int k = SBK == 3 ? c.sb_kind : SBK;
    const uint32_t s = k == 0 ? ldw(rc.sc + 4 * g) : ldh(rc.sc + 2 * g);
    const uint32_t b = k == 0 ? ldw(rc.bi + 4 * g) : ldh(rc.bi + 2 * g);
    o.a = k == 0 ? __uint_as_float(s) : k == 1 ? f16f(s) : bf16f(s);
    o.b = k == 0 ? __uint_as_float(b) : k == 1 ? f16f(b) : bf16f(b);
}

/* Per-type loaders: XB WBlk of chunk ci for thread t4, from `span` = the staged copy of the
 * row's bytes from the stage's first chunk j0 on (cl = ci - j0; j0 is a multiple of CPS, so
 * a chunk's place in its superblock is cl % CPS). Each mirrors mmq_mma.cu's loader for the
 * type: the same bytes, the same f32 factor expressions. CPS chunks make a superblock of
 * SBB bytes; KIND selects fold1's expressions (mmq_mma.cu's KIND). */
template <int SBK>
struct SMlx4 {
    static constexpr int XB = 1, CPS = 1, SBB = 16, KIND = 0;
    static constexpr bool AU = true;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, const RowCtx &rc, const uint8_t *span, int ci,
                                                int cl, int t4) {
        const uint32_t q = lw(span + 16 * cl + 4 * t4);
        o[0].lo = q & 0x0f0f0f0fu;
        o[0].hi = (q >> 4) & 0x0f0f0f0fu;
        mlx_sb<SBK>(o[0], c, rc, ci >> c.gshift);
    }
};
template <int SBK>
struct SMlx8 {
    static constexpr int XB = 1, CPS = 1, SBB = 32, KIND = 0;
    static constexpr bool AU = true;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, const RowCtx &rc, const uint8_t *span, int ci,
                                                int cl, int t4) {
        const uint8_t *p = span + 32 * cl + 8 * t4;
        if (c.a16) { /* the span keeps the row's alignment: 8-byte words */
            const uint2 q = *reinterpret_cast<const uint2 *>(p);
            o[0].lo = q.x, o[0].hi = q.y;
        } else {
            o[0].lo = lw(p), o[0].hi = lw(p + 4);
        }
        mlx_sb<SBK>(o[0], c, rc, ci >> c.gshift);
    }
};
struct SQ8_0 {
    static constexpr int XB = 1, CPS = 1, SBB = 34, KIND = 1;
    static constexpr bool AU = false;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const RowCtx &, const uint8_t *span, int,
                                                int cl, int t4) {
        const uint8_t *b = span + 34 * cl;
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
    static constexpr bool AU = true;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const RowCtx &, const uint8_t *span, int,
                                                int cl, int t4) {
        const uint8_t *b = span + 144 * (cl >> 2);
        const int g = cl & 3;
        uint32_t h[4], q[2];
        la2<4>(h, b);
        la2<2>(q, b + 16 + 32 * g + 8 * t4);
        const float d = f16f(h[0]), dmin = f16f(h[0] >> 16);
        uint32_t sc, mn;
        k4_pair(h[1], h[2], h[3], g, sc, mn);
        o[0].lo = q[0] & 0x0f0f0f0fu;
        o[0].hi = q[1] & 0x0f0f0f0fu;
        o[1].lo = (q[0] >> 4) & 0x0f0f0f0fu;
        o[1].hi = (q[1] >> 4) & 0x0f0f0f0fu;
        o[0].a = d * (float)(sc & 0xffu);
        o[1].a = d * (float)((sc >> 8) & 0xffu);
        o[0].b = -(dmin * (float)(mn & 0xffu));
        o[1].b = -(dmin * (float)((mn >> 8) & 0xffu));
    }
};
struct SQ6_K {
    static constexpr int XB = 1, CPS = 8, SBB = 210, KIND = 2;
    static constexpr bool AU = true;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const RowCtx &, const uint8_t *span, int,
                                                int cl, int t4) {
        const uint8_t *b = span + 210 * (cl >> 3);
        const int hf = (cl >> 2) & 1, t = cl & 3;
        uint32_t ql[2], qh[2];
        la2<2>(ql, b + 64 * hf + 32 * (t & 1) + 8 * t4);
        la2<2>(qh, b + 128 + 32 * hf + 8 * t4);
        const uint32_t sc = lh(b + 192 + 8 * hf + 2 * t);
        const float d = f16f(lh(b + 208));
        const unsigned hs = 2u * (unsigned)t;
        uint32_t u[2];
#pragma unroll
        for (int w = 0; w < 2; w++) {
            const uint32_t lo = t >= 2 ? (ql[w] >> 4) & 0x0f0f0f0fu : ql[w] & 0x0f0f0f0fu;
            u[w] = lo | (((qh[w] >> hs) & 0x03030303u) << 4);
        }
        o[0].lo = u[0];
        o[0].hi = u[1];
        o[0].a = d * (float)(int8_t)(sc & 0xffu);
        o[0].b = d * (float)(int8_t)((sc >> 8) & 0xffu);
    }
};
template <bool HM, bool HH>
struct SLegacy {
    static constexpr int XB = 1, CPS = 1, KIND = HM ? 0 : 3;
    static constexpr int SBB = 18 + 2 * HM + 4 * HH, QS = 2 + 2 * HM + 4 * HH;
    static constexpr int OFF = HM ? 0 : HH ? 16 : 8;
    static constexpr bool AU = true;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const RowCtx &, const uint8_t *span, int,
                                                int cl, int t4) {
        static_assert(HM == (OFF == 0), "a bias term or an offset, not both");
        const uint8_t *b = span + SBB * cl;
        uint32_t q[2];
        la2<2>(q, b + QS + 8 * (t4 & 1));
        const unsigned sh = t4 >= 2 ? 4u : 0u;
        uint32_t lo = (q[0] >> sh) & 0x0f0f0f0fu, hi = (q[1] >> sh) & 0x0f0f0f0fu;
        if (HH) {
            const uint32_t qh = HM ? lw(b + 4) : lh(b + 2) | lh(b + 4) << 16;
            const uint32_t bits = qh >> (8 * t4);
            lo |= spread_nibble(bits);
            hi |= spread_nibble(bits >> 4);
        }
        o[0].lo = lo;
        o[0].hi = hi;
        o[0].a = f16f(lh(b));
        o[0].b = HM ? f16f(lh(b + 2)) : 0.0f;
    }
};

/* One block of the tile for the thread's two weight rows r0 (row g) and r1 (row g + 8):
 * la[k] is output (row g + 8 (k >> 1), column 2 t4 + (k & 1)), the expressions of
 * mmq_mma.cu's fold_block; columns past nr are not computed. */
template <class T>
__device__ __forceinline__ void fold1(float (&la)[4], const WBlk &r0, const WBlk &r1, const XFrag &xf,
                                      const float (&dx)[2], const float (&xs)[2], const int (&v1)[2], int t4,
                                      int nr) {
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

/* The activation side of block blk: the B fragment of column g (activation block offset
 * ao, clamped to a real row) and the metadata of the thread's columns 2 t4 + e (offsets
 * mo; only columns < nr are read): dx; X, or Q6_K's V0 bits and V1, or V0 + V1. */
template <class T>
__device__ __forceinline__ void load_x1(XFrag &xf, float (&dx)[2], float (&xs)[2], int (&v1)[2],
                                        const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int ao,
                                        const int (&mo)[2], int64_t blk, int t4, int nr) {
    const int8_t *p = xq + (int64_t)(ao + blk) * XB_BYTES + 8 * t4;
    xf.h = __ldg(reinterpret_cast<const uint2 *>(p));
    xf.l = __ldg(reinterpret_cast<const uint2 *>(p + QB));
#pragma unroll
    for (int e = 0; e < 2; e++) {
        dx[e] = 0.0f, xs[e] = 0.0f, v1[e] = 0;
        if (2 * t4 + e >= nr) continue;
        const float *mp = reinterpret_cast<const float *>(xm + mo[e] + blk);
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

/* ---- cp.async (sm_80+): 16 bytes global -> shared, bytes past src_bytes zero-filled ---- */
__device__ __forceinline__ void cp16(void *dst, const void *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Stage geometry of type T: V chunks per warp, CW per stage, SLOT bytes of shared memory
 * per weight row (the span rounded out to 16-byte copies, plus 16 for its misalignment). */
template <class T>
struct Geo {
    static constexpr int V = T::XB == 1 ? 8 : 4;
    static constexpr int CW = SW * V;
    static constexpr int SPAN = CW / T::CPS * T::SBB;
    static constexpr int SLOT = (SPAN + 15) / 16 * 16 + 16;
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

/* Copy stage s of the block's 16 rows into buf (one commit group, empty past the end):
 * thread t copies row t / 8 (row: its start in global memory), 16-byte pieces t % 8,
 * t % 8 + 8, .. of the span rounded out to 16 bytes; bytes past the weight's end (wend)
 * are zero-filled, never read. */
template <class T>
__device__ __forceinline__ void issue(uint8_t *buf, const Ctx &c, const uint8_t *row, const uint8_t *wend,
                                      const Cursor &s, int nu) {
    using G = Geo<T>;
    if (s.u0 < nu) {
        const int cnt = stage_chunks(s, G::CW, nu, c.nch);
        const int64_t b0 = (int64_t)(s.j0 / T::CPS) * T::SBB;
        const int64_t b1 = (int64_t)((s.j0 + cnt + T::CPS - 1) / T::CPS) * T::SBB;
        const int q = threadIdx.x & 7;
        const uint8_t *src =
            reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(row + b0) & ~(uintptr_t)15) + 16 * q;
        uint8_t *dst = buf + (threadIdx.x >> 3) * G::SLOT + 16 * q;
        for (const uint8_t *end = row + b1; src < end; src += 128, dst += 128) {
            const int64_t left = wend - src;
            cp16(dst, src, left < 16 ? (int)left : 16);
        }
    }
    cp_commit();
}

/* One weight's tile: rows n0 .. n0 + 15, activation rows m0 .. m0 + nr - 1 (nr <= 8).
 * smem: two stage buffers of ROWS x SLOT bytes, then CW x ROWS x nr f32 partials. The
 * first stages' copies are issued before ls::pdl::enter() (the kernel's entry). */
template <class T, bool ONE>
__device__ __forceinline__ void small_body(const Ctx &c, const int8_t *__restrict__ xq,
                                           const Meta *__restrict__ xm, float *__restrict__ y, int64_t n0,
                                           int64_t m0, int nr_, uint8_t *smem) {
    const int nr = ONE ? 1 : nr_; /* ONE: a one-row call, compiled without the other columns */
    using G = Geo<T>;
    constexpr int V = G::V, CW = G::CW;
    /* stage buffer i at smem + i ROWS SLOT */
    float *red = reinterpret_cast<float *>(smem + 2 * ROWS * G::SLOT);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int nch = c.nch, U = 32 * c.kw, nu = nch < U ? nch : U;

    static_assert(32 * SW == 8 * ROWS, "issue(): 8 copying threads a row");
    const int64_t nc = n0 + (threadIdx.x >> 3) < c.N ? n0 + (threadIdx.x >> 3) : c.N - 1;
    const uint8_t *crow = c.w + (size_t)nc * c.row_bytes, *wend = c.w + (size_t)c.N * c.row_bytes;
    Cursor ld{0, 0};
    issue<T>(smem, c, crow, wend, ld, nu);
    advance(ld, U, CW, nch);
    issue<T>(smem + ROWS * G::SLOT, c, crow, wend, ld, nu);
    advance(ld, U, CW, nch);
    ls::pdl::enter(); /* activations and y: only after the predecessors are done */

    const int64_t nbk = c.K / QB;
    const int wn0 = (int)(n0 + g < c.N ? n0 + g : c.N - 1), wn1 = (int)(n0 + g + 8 < c.N ? n0 + g + 8 : c.N - 1);
    const int ao = (int)((m0 + (g < nr ? g : nr - 1)) * nbk);
    int mo[2];
#pragma unroll
    for (int e = 0; e < 2; e++) mo[e] = (int)((m0 + (2 * t4 + e < nr ? 2 * t4 + e : nr - 1)) * nbk);
    const RowCtx rc0 = row_ctx(c, wn0), rc1 = row_ctx(c, wn1);
    const uint8_t *g0 = c.w + (size_t)wn0 * c.row_bytes, *g1 = c.w + (size_t)wn1 * c.row_bytes;
    float la[V][4];
    float tot = 0.0f; /* output (row t / nr, column t % nr) for threads t < 16 nr */
    Cursor cs{0, 0};
    for (int s = 0; cs.u0 < nu; s++) {
        cp_wait<1>();
        __syncthreads();
        if (cs.j0 == cs.u0) {
#pragma unroll
            for (int v = 0; v < V; v++)
#pragma unroll
                for (int k = 0; k < 4; k++) la[v][k] = 0.0f;
        }
        const int cnt = stage_chunks(cs, CW, nu, nch);
        const int64_t b0 = (int64_t)(cs.j0 / T::CPS) * T::SBB;
        uint8_t *buf = smem + (s & 1) * ROWS * G::SLOT;
        /* where each row's span starts in its slot: its misalignment in global memory */
        const uint8_t *sp0 = buf + g * G::SLOT + ((uintptr_t)(g0 + b0) & 15u);
        const uint8_t *sp1 = buf + (g + 8) * G::SLOT + ((uintptr_t)(g1 + b0) & 15u);
        /* H chunks at a time: every load first, then the mma and folds (independent
         * chains the scheduler can overlap) */
        constexpr int H = T::XB == 1 ? 4 : 2;
#pragma unroll
        for (int h0 = 0; h0 < V; h0 += H) {
            WBlk w0[H][T::XB], w1[H][T::XB];
            XFrag xf[H][T::XB];
            float dx[H][T::XB][2], xs[H][T::XB][2];
            int v1[H][T::XB][2];
#pragma unroll
            for (int i = 0; i < H; i++) {
                const int cl = warp * V + h0 + i;
                if (cl >= cnt) break; /* uniform */
                const int ci = cs.j0 + cl;
                T::load(w0[i], c, rc0, sp0, ci, cl, t4);
                T::load(w1[i], c, rc1, sp1, ci, cl, t4);
#pragma unroll
                for (int b = 0; b < T::XB; b++)
                    load_x1<T>(xf[i][b], dx[i][b], xs[i][b], v1[i][b], xq, xm, ao, mo, (int64_t)ci * T::XB + b,
                               t4, nr);
            }
#pragma unroll
            for (int i = 0; i < H; i++) {
                if (warp * V + h0 + i >= cnt) break;
#pragma unroll
                for (int b = 0; b < T::XB; b++)
                    fold1<T>(la[h0 + i], w0[i][b], w1[i][b], xf[i][b], dx[i][b], xs[i][b], v1[i][b], t4, nr);
            }
        }
        if (cs.j0 + U >= nch) { /* the range's last round: its lanes join the totals */
#pragma unroll
            for (int v = 0; v < V; v++) {
                const int l = warp * V + v;
                if (cs.u0 + l >= nu) break;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int col = 2 * t4 + (k & 1), row = g + 8 * (k >> 1);
                    if (col < nr) red[(l * ROWS + row) * nr + col] = la[v][k];
                }
            }
            __syncthreads();
            const int t = threadIdx.x;
            if (t < ROWS * nr) {
                const int row = t / nr, col = t % nr;
                const int nl = nu - cs.u0 < CW ? nu - cs.u0 : CW;
                for (int l = 0; l < nl; l++) {
                    const float p = red[(l * ROWS + row) * nr + col];
                    tot = cs.u0 == 0 && l == 0 ? p : tot + p;
                }
            }
        }
        __syncthreads(); /* the buffer (and red) are free again */
        issue<T>(buf, c, crow, wend, ld, nu);
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

template <class T, bool ONE>
__global__ void __launch_bounds__(32 * SW) small_kernel(const SmallGroup sg, const int8_t *__restrict__ xq,
                                                         const Meta *__restrict__ xm, int64_t M) {
    extern __shared__ __align__(16) uint8_t smem[];
    int64_t yb = blockIdx.y;
    Ctx c;
    float *y;
    ls::mmq::group_pick(sg, yb, c, y);
    const int64_t m0 = (int64_t)blockIdx.x * COLS;
    const int nr = (int)(M - m0 < COLS ? M - m0 : COLS);
    small_body<T, ONE>(c, xq, xm, y, yb * ROWS, m0, nr, smem); /* calls ls::pdl::enter() */
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
    const size_t smem = (size_t)2 * ROWS * G::SLOT + (size_t)G::CW * ROWS * nr * sizeof(float);
    /* the shared-memory limit is a per-device attribute: raised once on each device (bit d) */
    static std::atomic<unsigned> raised{0};
    int dev = 0;
    if (smem > 48 * 1024 && cudaGetDevice(&dev) == cudaSuccess &&
        (dev >= 32 || !(raised.load(std::memory_order_relaxed) & (1u << dev)))) {
        const int cap = 2 * ROWS * G::SLOT + G::CW * ROWS * COLS * (int)sizeof(float);
        if (cudaFuncSetAttribute(small_kernel<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, cap) !=
            cudaSuccess)
            return -1;
        if (dev < 32) raised.fetch_or(1u << dev, std::memory_order_relaxed);
    }
    const int64_t gx = (M + COLS - 1) / COLS;
    if (nb > 65535 || gx > 0x7fffffff) return -1;
    const dim3 grid((unsigned)gx, (unsigned)nb);
    const cudaError_t e = M == 1 ? ls::pdl::launch(small_kernel<T, true>, grid, 32 * SW, smem, st, sg, xq, xm, M)
                                 : ls::pdl::launch(small_kernel<T, false>, grid, 32 * SW, smem, st, sg, xq, xm, M);
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
