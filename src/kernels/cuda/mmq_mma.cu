/* Integer tensor-core tiles for the integer-dot matmul when a call has many rows (prefill
 * chunks, large verify blocks): the same activation blocks, the same exact integer sums and
 * the same f32 sequence per output as mmq.cu's dp4a kernel (mmq_common.cuh), so a row's
 * bits do not depend on which of the two ran. docs/cuda.md section 2a.
 *
 * Why: the dp4a kernel re-reads every weight chunk for each tile of 8 activation rows and
 * spends ~3.5 instructions per weight element per row; a 512-row prefill of a 27B model
 * then runs at a tenth of llama.cpp's speed. Here a warp holds a 32 x 32 tile (32 weight
 * rows x 32 activation rows) and forms each block's integer sums with int8 mma
 * (m16n8k32, two per tile and plane: h and l), so a weight chunk is loaded once per 32
 * activation rows and the integer work is 1/16 of an instruction per product.
 *
 * Order: virtual lane u (0 .. min(U, nch) - 1, U = 32 kw) accumulates its chunks u, u + U,
 * .. in a fresh f32 per output, then joins the running total (tot = tot + p[u]); the
 * per-block steps are the same fmaf expressions on the same operands as mmq.cu's acc_block.
 *
 * K order inside a block: thread t4 = lane & 3 of an mma holds the block's plane words
 * 2 t4 and 2 t4 + 1 (8 consecutive plane bytes) as its k-slices 4 t4 and 16 + 4 t4, for the
 * weight codes (A) and for the activation planes (B) alike; any common permutation gives
 * the same exact sum. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_frag.cuh"

namespace {

using namespace ls::q;
using ls::mmq::Meta;
using ls::mmq::QB;
using ls::mmq::XB_BYTES;
using ls::mmq::mma_k32;
using ls::mmq::WBlk;
using ls::mmq::XFrag;
using ls::mmq::XSide;
using ls::mmq::fold_block;
using ls::mmq::tile_join;
using ls::mmq::tile_store;
using ls::mmq::tile_zero;

constexpr int TW = 32; /* weight rows per warp */
constexpr int TA = 32; /* activation rows per warp */
constexpr int BW = 1;  /* warps along the weight rows of a block */
constexpr int BA = 1;  /* warps along the activation rows */

/* An MLX row's scale and bias of group g (f32, f16 or bf16 storage): the block's factors. */
__device__ __forceinline__ void mlx_scale_bias(WBlk &o, const Ctx &c, int n, int g) {
    const int sbz = c.sb_kind == 0 ? 4 : 2;
    const uint8_t *sc = c.sc + (size_t)n * c.ng * sbz, *bi = c.bi + (size_t)n * c.ng * sbz;
    const uint32_t s = c.sb_kind == 0 ? ldw(sc + 4 * g) : ldh(sc + 2 * g);
    const uint32_t b = c.sb_kind == 0 ? ldw(bi + 4 * g) : ldh(bi + 2 * g);
    o.a = c.sb_kind == 0 ? __uint_as_float(s) : c.sb_kind == 1 ? f16f(s) : bf16f(s);
    o.b = c.sb_kind == 0 ? __uint_as_float(b) : c.sb_kind == 1 ? f16f(b) : bf16f(b);
}

/* Per-type loaders: fill XB WBlk for chunk ci of a row. Each mirrors mmq.cu's load + prep
 * for the same type (the f32 factors are the same expressions on the same bytes). */
struct MMlx4 {
    static constexpr int XB = 1;
    static constexpr bool AU = true;
    static constexpr int KIND = 0; /* fmaf(a dx, S, acc); fmaf(b, X, acc) */
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, int n, int ci, int t4) {
        const uint8_t *row = c.w + (size_t)n * c.row_bytes;
        const uint32_t q = ldw(row + 16 * ci + 4 * t4);
        o[0].lo = q & 0x0f0f0f0fu;
        o[0].hi = (q >> 4) & 0x0f0f0f0fu;
        mlx_scale_bias(o[0], c, n, ci >> c.gshift);
    }
};

struct MMlx8 {
    static constexpr int XB = 1;
    static constexpr bool AU = true;
    static constexpr int KIND = 0;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, int n, int ci, int t4) {
        const uint8_t *row = c.w + (size_t)n * c.row_bytes;
        o[0].lo = ldw(row + 32 * ci + 8 * t4);
        o[0].hi = ldw(row + 32 * ci + 8 * t4 + 4);
        mlx_scale_bias(o[0], c, n, ci >> c.gshift);
    }
};

struct MQ8_0 {
    static constexpr int XB = 1;
    static constexpr bool AU = false;
    static constexpr int KIND = 1; /* fmaf(a dx, S, acc) */
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, int n, int ci, int t4) {
        const uint8_t *b = c.w + (size_t)n * c.row_bytes + 34 * (size_t)ci;
        uint32_t q[2];
        ld_a2<2>(q, b + 2 + 8 * t4);
        o[0].lo = q[0];
        o[0].hi = q[1];
        o[0].a = f16f(ldh(b));
        o[0].b = 0.0f;
    }
};

struct MQ4_K {
    static constexpr int XB = 2;
    static constexpr bool AU = true;
    static constexpr int KIND = 0;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, int n, int ci, int t4) {
        const uint8_t *b = c.w + (size_t)n * c.row_bytes + 144 * (size_t)(ci >> 2);
        const int g = ci & 3;
        uint32_t h[4], q[2];
        ld16(h, b, c.a16);
        ld_a2<2>(q, b + 16 + 32 * g + 8 * t4);
        ls::mmq::q4k_chunk(o, h, q, g);
    }
};

struct MQ6_K {
    static constexpr int XB = 1;
    static constexpr bool AU = true;
    static constexpr int KIND = 2; /* two half sums: fmaf(a dx, S0, acc); fmaf(b dx, S1, acc) */
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, int n, int ci, int t4) {
        const uint8_t *b = c.w + (size_t)n * c.row_bytes + 210 * (size_t)(ci >> 3);
        const int hf = (ci >> 2) & 1, t = ci & 3;
        uint32_t ql[2], qh[2];
        ld_a2<2>(ql, b + 64 * hf + 32 * (t & 1) + 8 * t4);
        ld_a2<2>(qh, b + 128 + 32 * hf + 8 * t4);
        ls::mmq::q6k_block(o[0], ql, qh, ldh(b + 192 + 8 * hf + 2 * t), ldh(b + 208), t);
    }
};

/* Legacy blocks of 32 (mmq.cu's QLegacy): thread t4 takes elements 8 t4 .. 8 t4 + 7, the
 * low (t4 < 2) or high (t4 >= 2) nibbles of qs[8 (t4 & 1) ..], fifth bits from qh. */
template <bool HM, bool HH>
struct MLegacy {
    static constexpr int XB = 1;
    static constexpr bool AU = true;
    static constexpr int KIND = HM ? 0 : 3; /* 3: fmaf(a dx, S - OFF (V0 + V1), acc) */
    static constexpr int BYTES = 18 + 2 * HM + 4 * HH, QS = 2 + 2 * HM + 4 * HH;
    static constexpr int OFF = HM ? 0 : HH ? 16 : 8;
    static __device__ __forceinline__ void load(WBlk *o, const Ctx &c, int n, int ci, int t4) {
        static_assert(HM == (OFF == 0), "a bias term or an offset, not both");
        const uint8_t *b = c.w + (size_t)n * c.row_bytes + (size_t)BYTES * ci;
        uint32_t q[2];
        ld_a2<2>(q, b + QS + 8 * (t4 & 1));
        const uint32_t qh = !HH ? 0u : HM ? ldw(b + 4) : ldh(b + 2) | ldh(b + 4) << 16;
        ls::mmq::legacy_block<HM, HH>(o[0], q, qh, ldh(b), HM ? ldh(b + 2) : 0u, t4);
    }
};

template <class T>
__device__ __forceinline__ void load_xside(XSide &o, const int8_t *__restrict__ xq, const Meta *__restrict__ xm,
                                           const int (&ao)[4], const int (&mo)[4][2], int64_t blk, int t4) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int8_t *p = xq + (int64_t)(ao[j] + blk) * XB_BYTES + 8 * t4;
        o.xf[j].h = __ldg(reinterpret_cast<const uint2 *>(p));
        o.xf[j].l = __ldg(reinterpret_cast<const uint2 *>(p + QB));
#pragma unroll
        for (int e = 0; e < 2; e++) {
            ls::mmq::meta_load<T::KIND, true>(o, j, e, reinterpret_cast<const float *>(xm + mo[j][e] + blk));
        }
    }
}

template <class T>
__global__ void __launch_bounds__(32 * BW * BA, 12 / (BW * BA)) mma_kernel(const Ctx c, const int8_t *__restrict__ xq,
                                                           const Meta *__restrict__ xm, float *__restrict__ y,
                                                           int64_t M) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int64_t n0 = ((int64_t)blockIdx.y * BW + (warp % BW)) * TW;
    const int64_t m0 = ((int64_t)blockIdx.x * BA + (warp / BW)) * TA;
    const int64_t nbk = c.K / QB;
    const int nch = c.nch, U = 32 * c.kw, nu = nch < U ? nch : U;

    /* rows this thread loads: weight rows n0 + 8 i + g (i = 0..3: tile i / 2, half i % 2),
     * activation rows m0 + 8 j + g (B operand) and output columns m0 + 8 j + 2 t4 + e;
     * past the ends they repeat the last row (computed, never stored). Block offsets fit
     * in 32 bits: rows x K / 32 is bounded by the scratch of one pass. */
    int wn[4], ao[4], mo[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t n = n0 + 8 * i + g;
        wn[i] = (int)(n < c.N ? n : c.N - 1);
        const int64_t m = m0 + 8 * i + g;
        ao[i] = (int)((m < M ? m : M - 1) * nbk);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t mc = m0 + 8 * i + 2 * t4 + e;
            mo[i][e] = (int)((mc < M ? mc : M - 1) * nbk);
        }
    }

    float tot[2][4][4], la[2][4][4];
    for (int u = 0; u < nu; u++) {
        tile_zero(la);
        for (int ci = u; ci < nch; ci += U) {
            WBlk wb[4][T::XB];
#pragma unroll
            for (int i = 0; i < 4; i++) T::load(wb[i], c, wn[i], ci, t4);
#pragma unroll
            for (int b = 0; b < T::XB; b++) {
                XSide x;
                load_xside<T>(x, xq, xm, ao, mo, (int64_t)ci * T::XB + b, t4);
                const WBlk *const wr[4] = {&wb[0][b], &wb[1][b], &wb[2][b], &wb[3][b]};
                fold_block<T>(la, wr, x, t4);
            }
        }
        tile_join(tot, la, u == 0);
    }
    tile_store(y, tot, n0, m0, c.N, M, g, t4);
}

template <class T>
int launch_t(cudaStream_t st, const Ctx &c, const int8_t *xq, const Meta *xm, float *y, int64_t M) {
    const int64_t gy = (c.N + TW * BW - 1) / (TW * BW), gx = (M + TA * BA - 1) / (TA * BA);
    if (gy > 65535 || gx > 0x7fffffff) return -1;
    mma_kernel<T><<<dim3((unsigned)gx, (unsigned)gy), 32 * BW * BA, 0, st>>>(c, xq, xm, y, M);
    return 0;
}

} // namespace

namespace ls::mmq {

int mma_launch(cudaStream_t st, const Ctx &c, int key, const int8_t *xq, const Meta *xm, float *y, int64_t M) {
    switch (key) {
    case 104: return launch_t<MMlx4>(st, c, xq, xm, y, M);
    case 108: return launch_t<MMlx8>(st, c, xq, xm, y, M);
    case LS_TYPE_Q4_0: return launch_t<MLegacy<false, false>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q4_1: return launch_t<MLegacy<true, false>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q5_0: return launch_t<MLegacy<false, true>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q5_1: return launch_t<MLegacy<true, true>>(st, c, xq, xm, y, M);
    case LS_TYPE_Q8_0: return launch_t<MQ8_0>(st, c, xq, xm, y, M);
    case LS_TYPE_Q4_K: return launch_t<MQ4_K>(st, c, xq, xm, y, M);
    case LS_TYPE_Q6_K: return launch_t<MQ6_K>(st, c, xq, xm, y, M);
    default: return -1;
    }
}

} // namespace ls::mmq
