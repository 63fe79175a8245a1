/* The block-tiled tensor-core kernel of the integer-dot matmul for calls of many rows
 * (prefill chunks, large batcher steps): the same activation blocks, exact integer sums and
 * f32 sequence per output as the other three integer kernels (mmq_common.cuh), so a row's
 * bits do not depend on which one ran. docs/cuda.md section 2a.
 *
 * Why: mmq_mma.cu's warp tiles (one warp, 32 x 32 outputs) load their weight and
 * activation fragments straight from global memory. ncu of a 512-row call (H200, session
 * 12): 4.5 of every 8 cycles a warp waits on those loads (long scoreboard), 12 warps an SM
 * (168 registers), L1 wavefronts 65-92% busy with 8-byte gathers, issue slots 36-56%
 * busy: 40-80 TFLOP/s, against llama.cpp's ~2.4x on a 27B prefill. Here a block of 8 warps
 * owns 128 weight rows x 64 activation rows; each chunk's weight bytes and activation
 * blocks are copied into shared memory once for the block with cp.async, TNS stages ahead,
 * and every warp reads its 32 x 32 tile's fragments from there (a weight chunk serves 2
 * warps, an activation block 4).
 *
 * Order (mmq_common.cuh): the block walks the chunks lane by lane, u = 0 .. nu - 1, and a
 * lane's chunks u, u + U, .. in increasing order (one stage each); a warp folds each chunk
 * into a fresh f32 per output for the lane (fold_block, the expressions of mmq.cu's
 * acc_block, shared with mmq_mma.cu) and adds the lane's partial to its running total
 * after the lane's last chunk (the first lane starts the total). */
#include <stdint.h>

#include <atomic>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_frag.cuh"
#include "kernels/cuda/staging.cuh"

namespace {

using namespace ls::q;
using namespace ls::stage;
using ls::mmq::fold_block;
using ls::mmq::tile_join;
using ls::mmq::tile_store;
using ls::mmq::tile_zero;
using ls::mmq::Meta;
using ls::mmq::step;
using ls::mmq::Walk;
using ls::mmq::QB;
using ls::mmq::WBlk;
using ls::mmq::XB_BYTES;
using ls::mmq::XFrag;
using ls::mmq::XSide;

constexpr int TBW = 4;         /* warps along the weight rows */
constexpr int TBA = 2;         /* warps along the activation rows */
constexpr int TNT = 32 * TBW * TBA;
constexpr int TN = 32 * TBW;   /* weight rows per block */
constexpr int TM = 32 * TBA;   /* activation rows per block */
constexpr int TNS = 4;         /* stages in flight */
/* One activation row's block in a stage: 64 plane bytes, its 16-byte Meta, 16 bytes of
 * padding: a 96-byte stride puts the 8-byte B-fragment loads of a half-warp (rows g = 0..3
 * or 4..7, k-slices t4) in distinct banks. */
constexpr int XROW = 96;

/* ---- per-type spans and loaders ----
 * A weight row's bytes for one chunk are NSP spans (in the weight array, or for MLX rows in
 * the scale and bias arrays); span s is copied as P(s) 16-byte pieces from the piece that
 * holds its first byte, into section SEC(s) of the row's slot, so that its bytes keep their
 * offset modulo 16 (mis(s) below). `base(c, s, n)` is row n's first byte in span s's array,
 * `off(c, s, ci)` the span's offset in the row for chunk ci. The loaders read the spans
 * from shared memory with the expressions of mmq_mma.cu's loaders for the type (same bytes,
 * same f32 factors). */

template <int BITS, int SBK>
struct BMlx {
    static constexpr int XB = 1, KIND = 0, NSP = 3;
    static constexpr bool AU = true;
    __host__ __device__ static constexpr int P(int s) { return s == 0 ? (BITS == 4 ? 2 : 3) : 1; }
    static __device__ __forceinline__ const uint8_t *base(const Ctx &c, int s, int64_t n) {
        constexpr int sbz = SBK == 0 ? 4 : 2;
        return s == 0 ? c.w + (size_t)n * c.row_bytes : (s == 1 ? c.sc : c.bi) + (size_t)n * c.ng * sbz;
    }
    static __device__ __forceinline__ const uint8_t *end(const Ctx &c, int s) {
        constexpr int sbz = SBK == 0 ? 4 : 2;
        return s == 0 ? c.w + (size_t)c.N * c.row_bytes : (s == 1 ? c.sc : c.bi) + (size_t)c.N * c.ng * sbz;
    }
    static __device__ __forceinline__ int64_t off(const Ctx &c, int s, int ci) {
        constexpr int sbz = SBK == 0 ? 4 : 2;
        return s == 0 ? (int64_t)(4 * BITS) * ci : (int64_t)(ci >> c.gshift) * sbz;
    }
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const uint8_t *const *p, int, int t4) {
        if (BITS == 4) {
            const uint32_t q = lw(p[0] + 4 * t4);
            o[0].lo = q & 0x0f0f0f0fu;
            o[0].hi = (q >> 4) & 0x0f0f0f0fu;
        } else {
            o[0].lo = lw(p[0] + 8 * t4);
            o[0].hi = lw(p[0] + 8 * t4 + 4);
        }
        const uint32_t s = SBK == 0 ? lw(p[1]) : lh(p[1]);
        const uint32_t b = SBK == 0 ? lw(p[2]) : lh(p[2]);
        o[0].a = SBK == 0 ? __uint_as_float(s) : SBK == 1 ? f16f(s) : bf16f(s);
        o[0].b = SBK == 0 ? __uint_as_float(b) : SBK == 1 ? f16f(b) : bf16f(b);
    }
};

struct BQ8_0 {
    static constexpr int XB = 1, KIND = 1, NSP = 1;
    static constexpr bool AU = false;
    __host__ __device__ static constexpr int P(int) { return 4; } /* 34 bytes from a 2-byte offset need 3; 4: untuned */
    static __device__ __forceinline__ const uint8_t *base(const Ctx &c, int, int64_t n) {
        return c.w + (size_t)n * c.row_bytes;
    }
    static __device__ __forceinline__ const uint8_t *end(const Ctx &c, int) {
        return c.w + (size_t)c.N * c.row_bytes;
    }
    static __device__ __forceinline__ int64_t off(const Ctx &, int, int ci) { return 34 * (int64_t)ci; }
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const uint8_t *const *p, int, int t4) {
        uint32_t q[2];
        la2<2>(q, p[0] + 2 + 8 * t4);
        o[0].lo = q[0];
        o[0].hi = q[1];
        o[0].a = f16f(lh(p[0]));
        o[0].b = 0.0f;
    }
};

struct BQ4_K {
    static constexpr int XB = 2, KIND = 0, NSP = 2;
    static constexpr bool AU = true;
    __host__ __device__ static constexpr int P(int s) { return s == 0 ? 2 : 3; } /* header 16 bytes, codes 32 */
    static __device__ __forceinline__ const uint8_t *base(const Ctx &c, int, int64_t n) {
        return c.w + (size_t)n * c.row_bytes;
    }
    static __device__ __forceinline__ const uint8_t *end(const Ctx &c, int) {
        return c.w + (size_t)c.N * c.row_bytes;
    }
    static __device__ __forceinline__ int64_t off(const Ctx &, int s, int ci) {
        return 144 * (int64_t)(ci >> 2) + (s == 0 ? 0 : 16 + 32 * (ci & 3));
    }
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const uint8_t *const *p, int ci, int t4) {
        const int g = ci & 3;
        uint32_t h[4], q[2];
        la2<4>(h, p[0]);
        la2<2>(q, p[1] + 8 * t4);
        ls::mmq::q4k_chunk(o, h, q, g);
    }
};

/* Q4_K rows that are 16-byte aligned (c.a16: the array and the row length): every span
 * starts a piece (superblocks of 9 pieces, codes at 16 + 32 g), so the header is one 16-byte
 * load and the codes one 8-byte load each, not the 2-byte-aligned word gathers. */
struct BQ4_KA : BQ4_K {
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const uint8_t *const *p, int ci, int t4) {
        const int g = ci & 3;
        const uint4 hv = *reinterpret_cast<const uint4 *>(p[0]);
        const uint2 qv = *reinterpret_cast<const uint2 *>(p[1] + 8 * t4);
        const uint32_t h[4] = {hv.x, hv.y, hv.z, hv.w}, q[2] = {qv.x, qv.y};
        ls::mmq::q4k_chunk(o, h, q, g);
    }
};

struct BQ6_K {
    static constexpr int XB = 1, KIND = 2, NSP = 3;
    static constexpr bool AU = true;
    __host__ __device__ static constexpr int P(int) { return 3; } /* low bits 32, high bits 32, scales + d 18 */
    static __device__ __forceinline__ const uint8_t *base(const Ctx &c, int, int64_t n) {
        return c.w + (size_t)n * c.row_bytes;
    }
    static __device__ __forceinline__ const uint8_t *end(const Ctx &c, int) {
        return c.w + (size_t)c.N * c.row_bytes;
    }
    static __device__ __forceinline__ int64_t off(const Ctx &, int s, int ci) {
        const int hf = (ci >> 2) & 1, t = ci & 3;
        return 210 * (int64_t)(ci >> 3) + (s == 0 ? 64 * hf + 32 * (t & 1) : s == 1 ? 128 + 32 * hf : 192);
    }
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const uint8_t *const *p, int ci, int t4) {
        const int hf = (ci >> 2) & 1, t = ci & 3;
        uint32_t ql[2], qh[2];
        la2<2>(ql, p[0] + 8 * t4);
        la2<2>(qh, p[1] + 8 * t4);
        ls::mmq::q6k_block(o[0], ql, qh, lh(p[2] + 8 * hf + 2 * t), lh(p[2] + 16), t);
    }
};

template <bool HM, bool HH>
struct BLegacy {
    static constexpr int XB = 1, KIND = HM ? 0 : 3, NSP = 1;
    static constexpr int BYTES = 18 + 2 * HM + 4 * HH, QS = 2 + 2 * HM + 4 * HH;
    static constexpr int OFF = HM ? 0 : HH ? 16 : 8;
    static constexpr bool AU = true;
    __host__ __device__ static constexpr int P(int) { return 3; }
    static __device__ __forceinline__ const uint8_t *base(const Ctx &c, int, int64_t n) {
        return c.w + (size_t)n * c.row_bytes;
    }
    static __device__ __forceinline__ const uint8_t *end(const Ctx &c, int) {
        return c.w + (size_t)c.N * c.row_bytes;
    }
    static __device__ __forceinline__ int64_t off(const Ctx &, int, int ci) { return (int64_t)BYTES * ci; }
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &, const uint8_t *const *p, int, int t4) {
        static_assert(HM == (OFF == 0), "a bias term or an offset, not both");
        const uint8_t *b = p[0];
        uint32_t q[2];
        la2<2>(q, b + QS + 8 * (t4 & 1));
        const uint32_t qh = !HH ? 0u : HM ? lw(b + 4) : lh(b + 2) | lh(b + 4) << 16;
        ls::mmq::legacy_block<HM, HH>(o[0], q, qh, lh(b), HM ? lh(b + 2) : 0u, t4);
    }
};

/* Stage geometry of type T: a weight row's slot holds its spans' pieces (NPC in all, at
 * sections SEC(s)), rounded to an odd number of pieces so that the rows g = 0..7 of a
 * fragment load start in distinct bank quarters; then the activation rows' blocks. */
template <class T>
struct TGeo {
    __host__ __device__ static constexpr int npc() {
        int n = 0;
        for (int s = 0; s < T::NSP; s++) n += T::P(s);
        static_assert(T::NSP <= 3, "SEC() knows three spans");
        return n;
    }
    static constexpr int NPC = npc();
    /* not recursive: a loop index that unrolling makes constant must fold to a constant */
    __host__ __device__ static constexpr int SEC(int s) {
        return s == 0 ? 0 : s == 1 ? 16 * T::P(0) : 16 * (T::P(0) + T::P(1));
    }
    static constexpr int SLOT = 16 * (NPC | 1);
    static constexpr int WBYTES = TN * SLOT;
    static constexpr int STAGE = WBYTES + T::XB * TM * XROW;
    static constexpr int SMEM = TNS * STAGE + 16; /* + 16: la2's last word may look past the end */
    static constexpr int WCOPY = (TN * NPC + TNT - 1) / TNT;                   /* weight pieces a thread */
    static constexpr int XCOPY = (T::XB * TM * 5 + TNT - 1) / TNT; /* 4 plane pieces + 1 meta */ /* activation pieces a thread */
};

/* A thread's share of the copies, fixed for the whole kernel. Weight piece q = t + k TNT is,
 * row-major (adjacent threads copy adjacent pieces), piece p of span s of block row r, its
 * global row clamped to N - 1; activation pieces are the 4 plane pieces of each (block b,
 * row a), then the metadata piece of each (row clamped to M - 1). */
template <class T>
struct Copies {
    using G = TGeo<T>;
    const uint8_t *wb[G::WCOPY]; /* the row's first byte in span s's array, + 16 p */
    const uint8_t *we[G::WCOPY]; /* the array's end when the row is its last, else null: only
                                  * the last row's pieces can pass the end (zero-filled there) */
    uint32_t wd[G::WCOPY];       /* destination offset in a stage: slot + section + 16 p */
    uint8_t ws[G::WCOPY];
    const uint8_t *xs[G::XCOPY]; /* plane piece: xq + block (a nbk + b) + 16 p; meta: xm + that block */
    uint32_t xd[G::XCOPY];
};

template <class T>
__device__ __forceinline__ void copies_init(Copies<T> &cp, const Ctx &c, int64_t n0, int64_t m0, int64_t M,
                                            int64_t nbk, const int8_t *xq, const Meta *xm) {
    using G = TGeo<T>;
    const int t = threadIdx.x;
#pragma unroll
    for (int k = 0; k < G::WCOPY; k++) {
        const int q = t + k * TNT;
        cp.wb[k] = cp.we[k] = nullptr;
        cp.wd[k] = 0;
        cp.ws[k] = 0;
        if (q >= TN * G::NPC) continue;
        const int r = q / G::NPC;
        int rem = q % G::NPC, s = 0;
#pragma unroll
        for (int i = 0; i < T::NSP; i++)
            if (s == i && rem >= T::P(i)) rem -= T::P(i), s = i + 1;
        const int64_t n = n0 + r < c.N ? n0 + r : c.N - 1;
        cp.wb[k] = T::base(c, s, n) + 16 * rem;
        cp.we[k] = n == c.N - 1 ? T::end(c, s) : nullptr;
        cp.ws[k] = (uint8_t)s;
        cp.wd[k] = (uint32_t)(r * G::SLOT + G::SEC(s) + 16 * rem);
    }
#pragma unroll
    for (int k = 0; k < G::XCOPY; k++) {
        const int q = t + k * TNT;
        cp.xs[k] = nullptr;
        cp.xd[k] = 0;
        const bool plane = q < T::XB * TM * 4;
        const int ab = plane ? q / 4 : q - T::XB * TM * 4, p = q % 4; /* ab = b TM + a */
        if (ab >= T::XB * TM) continue;
        const int a = ab % TM, b = ab / TM;
        const int64_t blk = (m0 + a < M ? m0 + a : M - 1) * nbk + b;
        cp.xs[k] = plane ? reinterpret_cast<const uint8_t *>(xq + blk * XB_BYTES + 16 * p)
                         : reinterpret_cast<const uint8_t *>(xm + blk);
        cp.xd[k] = (uint32_t)(G::WBYTES + ab * XROW + (plane ? 16 * p : 64));
    }
}

/* Copy chunk ci's weight spans and activation blocks into the stage at shared address sa
 * (one commit group, empty when the walk is done). */
template <class T>
__device__ __forceinline__ void issue(uint32_t sa, const Ctx &c, const Copies<T> &cp, const Walk &w, int nu) {
    using G = TGeo<T>;
    if (w.u < nu) {
#pragma unroll
        for (int k = 0; k < G::WCOPY; k++) {
            if ((k + 1) * TNT > TN * G::NPC && threadIdx.x + k * TNT >= TN * G::NPC) continue;
            const uint8_t *src = down16(cp.wb[k] + T::off(c, cp.ws[k], w.ci));
            int bytes = 16;
            if (cp.we[k]) {
                const int64_t left = cp.we[k] - src;
                bytes = left <= 0 ? 0 : left < 16 ? (int)left : 16;
            }
            cp16(sa + cp.wd[k], src, bytes);
        }
#pragma unroll
        for (int k = 0; k < G::XCOPY; k++) {
            const int q = threadIdx.x + k * TNT;
            if ((k + 1) * TNT > T::XB * TM * 5 && q >= T::XB * TM * 5) continue;
            /* a chunk is XB blocks further: 64 plane bytes or one Meta each */
            const bool plane = (k + 1) * TNT <= T::XB * TM * 4 || q < T::XB * TM * 4;
            const int64_t step = plane ? (int64_t)T::XB * XB_BYTES : (int64_t)T::XB * (int64_t)sizeof(Meta);
            cp16(sa + cp.xd[k], cp.xs[k] + step * w.ci, 16);
        }
    }
    cp_commit();
}

template <class T>
__global__ void __launch_bounds__(TNT, 1) tile_kernel(const Ctx c, const int8_t *__restrict__ xq,
                                                      const Meta *__restrict__ xm, float *__restrict__ y, int64_t M) {
    using G = TGeo<T>;
    extern __shared__ __align__(16) uint8_t smem[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wn = warp % TBW, wa = warp / TBW;
    const int64_t n0 = (int64_t)blockIdx.y * TN, m0 = (int64_t)blockIdx.x * TM;
    const int64_t nbk = c.K / QB;
    const int nch = c.nch, U = 32 * c.kw, nu = nch < U ? nch : U;

    Copies<T> cp;
    copies_init<T>(cp, c, n0, m0, M, nbk, xq, xm);
    Walk ld{0, 0};
#pragma unroll
    for (int s = 0; s < TNS - 1; s++) {
        issue<T>(sbase + s * G::STAGE, c, cp, ld, nu);
        step(ld, U, nch);
    }

    /* the fragments' places: weight rows 32 wn + 8 i + g (where their spans start modulo
     * 16), activation rows 32 wa + 8 j + g (B) and output columns 32 wa + 8 j + 2 t4 + e */
    unsigned wmis[4][T::NSP];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t n = n0 + 32 * wn + 8 * i + g;
#pragma unroll
        for (int s = 0; s < T::NSP; s++)
            wmis[i][s] = (unsigned)(reinterpret_cast<uintptr_t>(T::base(c, s, n < c.N ? n : c.N - 1)) & 15u);
    }

    float tot[2][4][4], la[2][4][4];
    /* lane by lane (mmq_common.cuh's order); one stage per chunk, st counts them */
    int st = 0;
    for (int u = 0; u < nu; u++) {
        tile_zero(la);
        for (int ci = u; ci < nch; ci += U, st++) {
            cp_wait<TNS - 2>();
            __syncthreads(); /* stage st landed for every thread; stage st - 1 is read by all */
            issue<T>(sbase + ((st + TNS - 1) % TNS) * G::STAGE, c, cp, ld, nu);
            step(ld, U, nch);
            const uint8_t *sw = smem + (st % TNS) * G::STAGE;
            WBlk wb[4][T::XB];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint8_t *p[T::NSP];
#pragma unroll
                for (int s = 0; s < T::NSP; s++) {
                    const unsigned mis = (wmis[i][s] + (unsigned)T::off(c, s, ci)) & 15u;
                    p[s] = sw + (32 * wn + 8 * i + g) * G::SLOT + G::SEC(s) + mis;
                }
                T::load(wb[i], c, p, ci, t4);
            }
#pragma unroll
            for (int b = 0; b < T::XB; b++) {
                const uint8_t *xa = sw + G::WBYTES + (b * TM + 32 * wa) * XROW;
                XSide x;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint8_t *pr = xa + (8 * j + g) * XROW + 8 * t4;
                    x.xf[j].h = *reinterpret_cast<const uint2 *>(pr);
                    x.xf[j].l = *reinterpret_cast<const uint2 *>(pr + QB);
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        ls::mmq::meta_load<T::KIND, false>(
                            x, j, e, reinterpret_cast<const float *>(xa + (8 * j + 2 * t4 + e) * XROW + 64));
                    }
                }
                const WBlk *const wr[4] = {&wb[0][b], &wb[1][b], &wb[2][b], &wb[3][b]};
                fold_block<T>(la, wr, x, t4);
            }
        }
        tile_join(tot, la, u == 0); /* the lane's partials join the totals */
    }
    cp_wait<0>();
    tile_store(y, tot, n0 + 32 * wn, m0 + 32 * wa, c.N, M, g, t4);
}

template <class T>
int tile_t(cudaStream_t st, const Ctx &c, const int8_t *xq, const Meta *xm, float *y, int64_t M) {
    using G = TGeo<T>;
    const int64_t gy = (c.N + TN - 1) / TN, gx = (M + TM - 1) / TM;
    if (gy > 65535 || gx > 0x7fffffff) return -1;
    static std::atomic<unsigned> raised{0}; /* devices whose limit is raised */
    if (smem_limit(tile_kernel<T>, G::SMEM, raised) != 0) return -1;
    tile_kernel<T><<<dim3((unsigned)gx, (unsigned)gy), TNT, G::SMEM, st>>>(c, xq, xm, y, M);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

} // namespace

namespace ls::mmq {

int tile_launch(cudaStream_t st, const Ctx &c, int key, const int8_t *xq, const Meta *xm, float *y, int64_t M) {
    switch (key) {
    case 104:
    case 108: { /* the scales' storage (0 f32, 1 f16, 2 bf16) as a compile-time constant */
        const bool m4 = key == 104;
        switch (c.sb_kind) {
        case 0: return m4 ? tile_t<BMlx<4, 0>>(st, c, xq, xm, y, M) : tile_t<BMlx<8, 0>>(st, c, xq, xm, y, M);
        case 1: return m4 ? tile_t<BMlx<4, 1>>(st, c, xq, xm, y, M) : tile_t<BMlx<8, 1>>(st, c, xq, xm, y, M);
        default: return m4 ? tile_t<BMlx<4, 2>>(st, c, xq, xm, y, M) : tile_t<BMlx<8, 2>>(st, c, xq, xm, y, M);
        }
    }
    case LS_TYPE_Q4_0: return tile_t<BLegacy<false, false>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q4_1: return tile_t<BLegacy<true, false>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q5_0: return tile_t<BLegacy<false, true>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q5_1: return tile_t<BLegacy<true, true>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q8_0: return tile_t<BQ8_0>(st, c, xq, xm, y, M);
    case LS_TYPE_Q4_K:
#ifndef LS_DTILE_OFF /* compile-time switch back to this file's tiles, for measuring */
        if (c.a16) return dtile_launch(st, c, xq, xm, y, M);
#endif
        return c.a16 ? tile_t<BQ4_KA>(st, c, xq, xm, y, M) : tile_t<BQ4_K>(st, c, xq, xm, y, M);
    case LS_TYPE_Q6_K:
#ifndef LS_DTILE_OFF
        return dtile6_launch(st, c, xq, xm, y, M);
#endif
        return tile_t<BQ6_K>(st, c, xq, xm, y, M);
    default: return -1;
    }
}

} // namespace ls::mmq
