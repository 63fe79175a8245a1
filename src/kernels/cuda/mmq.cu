/* Integer-dot matmul for the weight types that carry most of the bytes of the models this
 * engine is for (MLX affine 4/8-bit: Gemma 4 31B QAT; Q8_0, Q4_K, Q6_K: GGUF LM heads,
 * attention and MLP). cuda_matmul.h states the contract; docs/cuda.md section 2a explains
 * the numerics. Q4_K and Q6_K go to the K-quant format and kernels (kq_format.cuh,
 * kq_vec.cu) unless ls_cuda_mmq_kq(0) gives them this file's format back (A/B runs).
 *
 * Why: the f32 kernel (matmul.cu) dequantizes every weight exactly and spends ~8
 * instructions per weight element, which caps decode at 22-46% of HBM bandwidth and makes a
 * 4-row verify block cost ~1.7 one-row steps. Here the activations are converted once per
 * call to a 16-bit fixed-point form and the weights' integers meet them in dp4a dot
 * products: ~1.3 instructions per weight element at M = 1, ~3.5 at M = 4.
 *
 * Activations (quant_x_kernel): each row is cut into blocks of 32 elements; a block stores
 *   dx = amax / 32639 (amax = max |x| of the block), v_e = round(x_e / dx) in [-32639, 32639]
 *   split as v = 256 h + l with h in [-127, 127] and l in [-128, 127] (two int8 planes),
 *   X = sum of the block's f32 x (fixed butterfly order) and V0, V1 = sum of v over each half.
 * x_e is thus represented to within dx / 2 = amax / 65278: ~2e-5 relative rms per row,
 * far finer than the CPU backend's 8-bit activations for GGUF types and well inside the
 * 1e-2 the goldens allow. The planes are stored in the order the weight's integers unpack
 * (MLX 4-bit: even elements of each 8 then odd ones, the nibble order of a 32-bit word).
 *
 * Dot products: for a 32-element block b of weight row n with integer codes q_e and
 * dequantized value A q_e + B (per type: MLX s q + b; Q8_0 d q; Q4_K d sc q - dmin m;
 * Q6_K d sc (q - 32), per 16-element half; Q4_0 / Q5_0 d (q - 8) / d (q - 16); Q4_1 /
 * Q5_1 d q + m), the exact integer S = 256 sum(q h) + sum(q l) (dp4a, int32, no
 * overflow: |S| < 2^31 for every type here) gives
 *   acc = fmaf(A * dx, (float)S, acc); acc = fmaf(B, X, acc)
 * (Q6_K: S - 32 V per half, Q4_0 / Q5_0: S - 8 / 16 (V0 + V1); no bias term). Integer sums are exact, so their order is
 * irrelevant; the float steps happen per block in increasing block order.
 *
 * Batch invariance (docs/cuda.md section 2): ONE reduction order per weight type for every M.
 * A warp computes 4 weight rows; with KW k-warps (1, 2 or 4, a function of the weight's
 * shape) lane L of k-warp kw takes the lane chunks kw 32 + L + 32 KW j (a chunk is one or
 * two 32-element blocks) and accumulates them in increasing order into one f32 per (weight
 * row, activation row); these 32 KW partials are then added in the order of u = kw 32 + L
 * (mmq_common.cuh). M decides only how many activation tiles run and which
 * compilation of the body serves them (tiles of up to 1, 2, 4 or 8 rows: the same
 * arithmetic per row), padding rows are skipped (a uniform branch, never different
 * arithmetic), and a row's quantized activations depend on that row alone. Large calls
 * (use_mma) run mmq_mma.cu's tensor-core tiles, which follow the same order
 * (mmq_common.cuh) and give the same bits. So row m's bits
 * are the same whether the call has 1 or 512 rows (test_backend_ops and
 * tests/cuda/test_cuda_matmul.cu check every M bit for bit). Which kernel serves a weight
 * (this one or matmul.cu's) is decided by the weight alone (type, K, alignment). */
#include <stdint.h>

#include <atomic>
#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/kq_format.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/quant_act.cuh"

namespace {

using namespace ls::q;
using ls::mmq::kw_of;
using ls::mmq::Meta;
using ls::mmq::spread_nibble;
using ls::mmq::QB;
using ls::mmq::XB_BYTES;

constexpr int WR = 4;              /* weight rows per warp */
constexpr int WARPS = 4;           /* warps per block */
constexpr int R = 8;               /* activation rows per tile */

/* ---------------------------------------------------------------------------------------
 * Activation quantization: 8 threads per block of 32 (a float4 each), fixed reductions. */

template <bool IL, bool X16>
__global__ void __launch_bounds__(256) quant_x_kernel(const float *__restrict__ x, int64_t K, int64_t quads,
                                                      int8_t *__restrict__ xq, Meta *__restrict__ xm) {
    ls::pdl::enter();
    const int64_t t = (int64_t)blockIdx.x * 256 + threadIdx.x;
    const bool live = t < quads; /* quads is a multiple of 8: 8-lane groups are all live or all not */
    const int64_t tq = live ? t : quads - 1;
    const int64_t kq = K / 4;
    const int64_t row = tq / kq, qi = tq % kq;
    const int64_t blk = row * (K / QB) + qi / 8; /* block index over all rows */
    /* the same four values whether read as one float4 or one by one */
    float4 v;
    if (X16) {
        v = __ldg(reinterpret_cast<const float4 *>(x + row * K) + qi);
    } else {
        const float *p = x + row * K + 4 * qi;
        v = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
    }
    ls::mmq::quant_quad<IL>(v, (int)(qi % 8), live, xq, xm, blk);
}

/* ---------------------------------------------------------------------------------------
 * Weight traits: a lane chunk of XB activation blocks (E = 32 XB elements). load() reads
 * the chunk's raw bytes, prep() its scales, then for each block b the dot product with the
 * block's planes is folded into the accumulator by acc_block(). */

__device__ __forceinline__ int dp4a_ss(uint32_t a, uint32_t b, int c) {
    return __dp4a((int)a, (int)b, c);
}
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* The planes of one activation block: h[8], l[8] words, and its metadata. */
struct XBlk {
    uint32_t h[8], l[8];
    Meta m;
};
__device__ __forceinline__ void load_xblk(XBlk &o, const int8_t *xq, const Meta *xm, int64_t blk) {
    const uint4 *p = reinterpret_cast<const uint4 *>(xq + blk * XB_BYTES);
    const uint4 a = __ldg(p), b = __ldg(p + 1), c = __ldg(p + 2), d = __ldg(p + 3);
    o.h[0] = a.x, o.h[1] = a.y, o.h[2] = a.z, o.h[3] = a.w;
    o.h[4] = b.x, o.h[5] = b.y, o.h[6] = b.z, o.h[7] = b.w;
    o.l[0] = c.x, o.l[1] = c.y, o.l[2] = c.z, o.l[3] = c.w;
    o.l[4] = d.x, o.l[5] = d.y, o.l[6] = d.z, o.l[7] = d.w;
    const float4 m = __ldg(reinterpret_cast<const float4 *>(xm + blk));
    o.m = Meta{m.x, m.y, __float_as_int(m.z), __float_as_int(m.w)};
}

/* S = 256 sum(q h) + sum(q l) over words [w0, w0 + n) of u (signed or unsigned bytes). */
template <bool U, int N>
__device__ __forceinline__ int dot_words(const uint32_t *u, const XBlk &x, int w0) {
    int sh = 0, sl = 0;
#pragma unroll
    for (int w = 0; w < N; w++) {
        if (U) {
            sh = dp4a_us(u[w], x.h[w0 + w], sh);
            sl = dp4a_us(u[w], x.l[w0 + w], sl);
        } else {
            sh = dp4a_ss(u[w], x.h[w0 + w], sh);
            sl = dp4a_ss(u[w], x.l[w0 + w], sl);
        }
    }
    return sh * 256 + sl;
}

/* MLX affine 4-bit: chunk = 32 elements = 16 bytes; value s q + b (s, b per group). The
 * low nibbles of a word are elements 0, 2, 4, 6 of its 8, the high ones 1, 3, 5, 7: the
 * planes are stored in that order (plane_pos<true>). */
struct QMlx4 {
    static constexpr int XB = 1;
    static constexpr bool IL = true;
    struct Raw {
        uint32_t q[4], s, b;
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &c, const uint8_t *row, const uint8_t *sc,
                                                const uint8_t *bi, int ci) {
        ldw16(r.q, row + 16 * ci, c.a16);
        const int g = ci >> c.gshift;
        r.s = c.sb_kind == 0 ? ldw(sc + 4 * g) : ldh(sc + 2 * g);
        r.b = c.sb_kind == 0 ? ldw(bi + 4 * g) : ldh(bi + 2 * g);
    }
    struct Prep {
        uint32_t u[8];
        float s, b;
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &c) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
            p.u[w] = r.q[w] & 0x0f0f0f0fu;            /* elements 8w + 0, 2, 4, 6 */
            p.u[4 + w] = (r.q[w] >> 4) & 0x0f0f0f0fu; /* elements 8w + 1, 3, 5, 7 */
        }
        p.s = c.sb_kind == 0 ? __uint_as_float(r.s) : c.sb_kind == 1 ? f16f(r.s) : bf16f(r.s);
        p.b = c.sb_kind == 0 ? __uint_as_float(r.b) : c.sb_kind == 1 ? f16f(r.b) : bf16f(r.b);
    }
    /* plane word 2w = quad (8w + 0, 2, 4, 6), 2w + 1 = (8w + 1, 3, 5, 7) */
    static __device__ __forceinline__ float acc_block(float acc, const Prep &p, int, const XBlk &x) {
        int sh = 0, sl = 0;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            sh = dp4a_ss(p.u[w], x.h[2 * w], sh);
            sl = dp4a_ss(p.u[w], x.l[2 * w], sl);
            sh = dp4a_ss(p.u[4 + w], x.h[2 * w + 1], sh);
            sl = dp4a_ss(p.u[4 + w], x.l[2 * w + 1], sl);
        }
        const int S = sh * 256 + sl;
        acc = fmaf(p.s * x.m.dx, (float)S, acc);
        return fmaf(p.b, x.m.X, acc);
    }
};

/* MLX affine 8-bit: chunk = 32 elements = 32 bytes of unsigned codes. */
struct QMlx8 {
    static constexpr int XB = 1;
    static constexpr bool IL = false;
    struct Raw {
        uint32_t q[8], s, b;
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &c, const uint8_t *row, const uint8_t *sc,
                                                const uint8_t *bi, int ci) {
        ldw16(r.q, row + 32 * ci, c.a16);
        ldw16(r.q + 4, row + 32 * ci + 16, c.a16);
        load_sb(r, c, sc, bi, ci);
    }
    /* chunk ci's scale and bias words */
    static __device__ __forceinline__ void load_sb(Raw &r, const Ctx &c, const uint8_t *sc, const uint8_t *bi,
                                                   int ci) {
        const int g = ci >> c.gshift;
        r.s = c.sb_kind == 0 ? ldw(sc + 4 * g) : ldh(sc + 2 * g);
        r.b = c.sb_kind == 0 ? ldw(bi + 4 * g) : ldh(bi + 2 * g);
    }
    struct Prep {
        uint32_t u[8];
        float s, b;
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &c) {
#pragma unroll
        for (int w = 0; w < 8; w++) p.u[w] = r.q[w];
        p.s = c.sb_kind == 0 ? __uint_as_float(r.s) : c.sb_kind == 1 ? f16f(r.s) : bf16f(r.s);
        p.b = c.sb_kind == 0 ? __uint_as_float(r.b) : c.sb_kind == 1 ? f16f(r.b) : bf16f(r.b);
    }
    static __device__ __forceinline__ float acc_block(float acc, const Prep &p, int, const XBlk &x) {
        const int S = dot_words<true, 8>(p.u, x, 0);
        acc = fmaf(p.s * x.m.dx, (float)S, acc);
        return fmaf(p.b, x.m.X, acc);
    }
};

/* MLX 8-bit one-row rounds with coalesced weight loads (gemv_body, SPLIT). A round of a row
 * is 32 chunks of 32 bytes, one per lane; loaded as one chunk a lane, each 16-byte load
 * instruction of the warp touches 32 sectors and uses half of each, so the L2 -> SM path
 * carries every weight byte twice. Here lane L loads the 16-byte pieces L and 32 + L of the
 * round's 1 KB (halves L & 1 of chunks L / 2 and 16 + L / 2), forms the exact integer dot of
 * each piece with the same activation half, and the pair sums reach the lane that owns the
 * chunk (lane c: chunk c of the round) through shuffles. S is the same exact integer as
 * acc_block's, and the lane folds it with its own chunk's scale, bias and Meta: the same f32
 * steps on the same operands, so the same bits. Full rounds only (all 32 lanes). */
struct Split8 {
    static __device__ __forceinline__ void load(QMlx8::Raw &r, const Ctx &c, const uint8_t *row, const uint8_t *sc,
                                                const uint8_t *bi, int ci, int lane) {
        const uint8_t *p = row + 32 * ci - 16 * lane;
        ldw16(r.q, p, 1);
        ldw16(r.q + 4, p + 512, 1);
        QMlx8::load_sb(r, c, sc, bi, ci);
    }
    /* activation halves of chunks rb + L / 2 and rb + 16 + L / 2 (half L & 1), and the Meta of
     * the lane's own chunk ci */
    struct X {
        uint4 ha, la, hb, lb;
        Meta m;
    };
    static __device__ __forceinline__ void load_x(X &x, const int8_t *xq, const Meta *xm, int ci, int lane) {
        const int rb = ci - lane, h = lane & 1;
        const uint4 *a = reinterpret_cast<const uint4 *>(xq + (int64_t)(rb + (lane >> 1)) * XB_BYTES);
        const uint4 *b = reinterpret_cast<const uint4 *>(xq + (int64_t)(rb + 16 + (lane >> 1)) * XB_BYTES);
        x.ha = __ldg(a + h), x.la = __ldg(a + 2 + h);
        x.hb = __ldg(b + h), x.lb = __ldg(b + 2 + h);
        const float4 m = __ldg(reinterpret_cast<const float4 *>(xm + ci));
        x.m = Meta{m.x, m.y, __float_as_int(m.z), __float_as_int(m.w)};
    }
    static __device__ __forceinline__ int piece(const uint32_t *u, uint4 h, uint4 l) {
        int sh = dp4a_us(u[0], h.x, 0), sl = dp4a_us(u[0], l.x, 0);
        sh = dp4a_us(u[1], h.y, sh), sl = dp4a_us(u[1], l.y, sl);
        sh = dp4a_us(u[2], h.z, sh), sl = dp4a_us(u[2], l.z, sl);
        sh = dp4a_us(u[3], h.w, sh), sl = dp4a_us(u[3], l.w, sl);
        return sh * 256 + sl;
    }
    static __device__ __forceinline__ float acc(float acc, const QMlx8::Raw &r, const Ctx &c, const X &x, int lane) {
        const int pa = piece(r.q, x.ha, x.la), pb = piece(r.q + 4, x.hb, x.lb);
        const int t1 = pa + __shfl_xor_sync(0xffffffffu, pa, 1);
        const int t2 = pb + __shfl_xor_sync(0xffffffffu, pb, 1);
        const int S = __shfl_sync(0xffffffffu, (lane & 1) ? t2 : t1, ((2 * lane) & 31) | (lane >> 4));
        /* QMlx8::prep's conversions and acc_block's two steps, written out (shared helpers
         * moved the kernels' scheduling: not what was measured) */
        const float s = c.sb_kind == 0 ? __uint_as_float(r.s) : c.sb_kind == 1 ? f16f(r.s) : bf16f(r.s);
        const float b = c.sb_kind == 0 ? __uint_as_float(r.b) : c.sb_kind == 1 ? f16f(r.b) : bf16f(r.b);
        acc = fmaf(s * x.m.dx, (float)S, acc);
        return fmaf(b, x.m.X, acc);
    }
};

/* Q8_0: chunk = one block {f16 d; i8 q[32]} (34 bytes, 2-byte aligned); value d q. */
struct QQ8_0 {
    static constexpr int XB = 1;
    static constexpr bool IL = false;
    struct Raw {
        uint32_t q[8], d;
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &, const uint8_t *row, const uint8_t *,
                                                const uint8_t *, int ci) {
        const uint8_t *b = row + 34 * ci;
        r.d = ldh(b);
        ld_a2<8>(r.q, b + 2);
    }
    struct Prep {
        uint32_t u[8];
        float d;
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &) {
#pragma unroll
        for (int w = 0; w < 8; w++) p.u[w] = r.q[w];
        p.d = f16f(r.d);
    }
    static __device__ __forceinline__ float acc_block(float acc, const Prep &p, int, const XBlk &x) {
        const int S = dot_words<false, 8>(p.u, x, 0);
        return fmaf(p.d * x.m.dx, (float)S, acc);
    }
};

/* Q4_K: chunk = group g of a 256-block (64 elements: sub-blocks 2g (low nibbles of
 * qs[32g..32g+32)) and 2g + 1 (high nibbles)), value d sc q - dmin m per sub-block. */
struct QQ4_K {
    static constexpr int XB = 2;
    static constexpr bool IL = false;
    struct Raw {
        uint32_t h[4], q[8];
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &c, const uint8_t *row, const uint8_t *,
                                                const uint8_t *, int ci) {
        const uint8_t *b = row + 144 * (ci >> 2);
        const int g = ci & 3;
        ld16(r.h, b, c.a16);
        ldw16(r.q, b + 16 + 32 * g, c.a16);
        ldw16(r.q + 4, b + 32 + 32 * g, c.a16);
    }
    struct Prep {
        uint32_t u[16];
        float a[2], m[2];
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int ci) {
        const float d = f16f(r.h[0]), dmin = f16f(r.h[0] >> 16);
        uint32_t sc, mn;
        k4_pair(r.h[1], r.h[2], r.h[3], ci & 3, sc, mn);
        p.a[0] = d * (float)(sc & 0xffu);
        p.a[1] = d * (float)((sc >> 8) & 0xffu);
        p.m[0] = -(dmin * (float)(mn & 0xffu));
        p.m[1] = -(dmin * (float)((mn >> 8) & 0xffu));
#pragma unroll
        for (int w = 0; w < 8; w++) {
            p.u[w] = r.q[w] & 0x0f0f0f0fu;
            p.u[8 + w] = (r.q[w] >> 4) & 0x0f0f0f0fu;
        }
    }
    static __device__ __forceinline__ float acc_block(float acc, const Prep &p, int b, const XBlk &x) {
        const int S = dot_words<false, 8>(p.u + 8 * b, x, 0);
        acc = fmaf(p.a[b] * x.m.dx, (float)S, acc);
        return fmaf(p.m[b], x.m.X, acc);
    }
};

/* Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B, 2-byte aligned). Chunk ci =
 * block ci / 8, half hf = (ci >> 2) & 1, t = ci & 3: elements 128 hf + 32 t + l, l < 32,
 * q = (nibble t >= 2 ? high : low of ql[64 hf + 32 (t & 1) + l]) | bits 2t of qh[32 hf + l]
 * << 4, value d sc (q - 32) with sc = scales[8 hf + 2 t + l / 16]. */
struct QQ6_K {
    static constexpr int XB = 1;
    static constexpr bool IL = false;
    struct Raw {
        uint32_t ql[8], qh[8], sc, d;
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &, const uint8_t *row, const uint8_t *,
                                                const uint8_t *, int ci) {
        const uint8_t *b = row + 210 * (ci >> 3);
        const int hf = (ci >> 2) & 1, t = ci & 3;
        ld_a2<8>(r.ql, b + 64 * hf + 32 * (t & 1));
        ld_a2<8>(r.qh, b + 128 + 32 * hf);
        r.sc = ldh(b + 192 + 8 * hf + 2 * t);
        r.d = ldh(b + 208);
    }
    struct Prep {
        uint32_t u[8];
        float a[2];
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int ci) {
        const int t = ci & 3;
        const float d = f16f(r.d);
        p.a[0] = d * (float)(int8_t)(r.sc & 0xffu);
        p.a[1] = d * (float)(int8_t)((r.sc >> 8) & 0xffu);
        const unsigned hs = 2u * (unsigned)t;
#pragma unroll
        for (int w = 0; w < 8; w++) {
            const uint32_t lo = t >= 2 ? (r.ql[w] >> 4) & 0x0f0f0f0fu : r.ql[w] & 0x0f0f0f0fu;
            p.u[w] = lo | (((r.qh[w] >> hs) & 0x03030303u) << 4);
        }
    }
    static __device__ __forceinline__ float acc_block(float acc, const Prep &p, int, const XBlk &x) {
        const int S0 = dot_words<false, 4>(p.u, x, 0) - 32 * x.m.v0;
        const int S1 = dot_words<false, 4>(p.u + 4, x, 4) - 32 * x.m.v1;
        acc = fmaf(p.a[0] * x.m.dx, (float)S0, acc);
        return fmaf(p.a[1] * x.m.dx, (float)S1, acc);
    }
};

/* The legacy GGUF blocks of 32 (Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; qs}, Q5_0 {f16 d;
 * u8 qh[4]; qs}, Q5_1 {f16 d, m; qh; qs}): element j < 16 is the low nibble of qs[j],
 * element j + 16 the high one, the fifth bit (Q5) bit j of qh. Value d (q - 8) / d (q - 16)
 * (no bias term: S - off (V0 + V1), an exact integer) or d q + m (bias m X). Small Gemma
 * GGUFs keep these types where a row is not a multiple of 256 (the 270M model's 640-wide
 * projections are Q5_0). */
template <bool HM, bool HH>
struct QLegacy {
    static constexpr int XB = 1;
    static constexpr bool IL = false;
    static constexpr int BYTES = 18 + 2 * HM + 4 * HH, QS = 2 + 2 * HM + 4 * HH;
    static constexpr int OFF = HM ? 0 : HH ? 16 : 8;
    struct Raw {
        uint32_t q[4], dm, qh;
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &, const uint8_t *row, const uint8_t *,
                                                const uint8_t *, int ci) {
        const uint8_t *b = row + (size_t)BYTES * ci;
        r.dm = HM ? ldw(b) : ldh(b); /* Q4_1 / Q5_1 blocks are 4-byte aligned (mm_prepare) */
        r.qh = HH ? (HM ? ldw(b + 4) : ldh(b + 2) | ldh(b + 4) << 16) : 0u;
        ld_a2<4>(r.q, b + QS);
    }
    struct Prep {
        uint32_t u[8];
        float d, m;
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
            p.u[w] = r.q[w] & 0x0f0f0f0fu;
            p.u[4 + w] = (r.q[w] >> 4) & 0x0f0f0f0fu;
            if (HH) {
                p.u[w] |= spread_nibble(r.qh >> (4 * w));
                p.u[4 + w] |= spread_nibble(r.qh >> (16 + 4 * w));
            }
        }
        p.d = f16f(r.dm);
        p.m = HM ? f16f(r.dm >> 16) : 0.0f;
    }
    static __device__ __forceinline__ float acc_block(float acc, const Prep &p, int, const XBlk &x) {
        int S = dot_words<false, 8>(p.u, x, 0);
        if (!HM) S -= OFF * (x.m.v0 + x.m.v1);
        acc = fmaf(p.d * x.m.dx, (float)S, acc);
        return HM ? fmaf(p.m, x.m.X, acc) : acc;
    }
};
using QQ4_0 = QLegacy<false, false>;
using QQ4_1 = QLegacy<true, false>;
using QQ5_0 = QLegacy<false, true>;
using QQ5_1 = QLegacy<true, true>;

/* prep() with or without the chunk index (only the K-quants need it) */
template <class T>
__device__ __forceinline__ void prep_of(typename T::Prep &p, const typename T::Raw &r, const Ctx &c, int ci) {
    if constexpr (std::is_same<T, QQ4_K>::value || std::is_same<T, QQ6_K>::value)
        T::prep(p, r, c, ci);
    else
        T::prep(p, r, c);
}

/* Weight rows n0 .. n0 + W - 1: their codes, scales and biases (MLX; else null). Rows past
 * N alias the last one: computed, never stored. */
template <int W>
__device__ __forceinline__ void row_ptrs(const Ctx &c, int64_t n0, const uint8_t **rowp, const uint8_t **scp,
                                         const uint8_t **bip) {
#pragma unroll
    for (int i = 0; i < W; i++) {
        const int64_t n = n0 + i < c.N ? n0 + i : c.N - 1;
        rowp[i] = c.w + (size_t)n * c.row_bytes;
        const int sbz = c.sb_kind == 0 ? 4 : 2;
        scp[i] = c.sc ? c.sc + (size_t)n * c.ng * sbz : nullptr;
        bip[i] = c.bi ? c.bi + (size_t)n * c.ng * sbz : nullptr;
    }
}

/* ---------------------------------------------------------------------------------------
 * The kernel: 4 warps = KW k-warps x (4 / KW) row-warps of WR weight rows each, one tile
 * of up to RT activation rows. KW (1, 2 or 4) is a function of the weight's type and
 * shape alone (kw_of): very long rows (Q6_K: from 128 chunks) are split over more warps.
 * k-warp kw takes lane chunks kw * 32 + lane + 32 KW j; the 32 KW partials are added in
 * order by one thread per output (mmq_common.cuh). */
template <class T, int RT, int NW = WARPS>
__device__ __forceinline__ void mmq_body(const Ctx &c, const int8_t *__restrict__ xq, const Meta *__restrict__ xm,
                                         float *__restrict__ y, int64_t m0, int nr, int KW, int64_t yb) {
    __shared__ float red[NW][WR][RT][33];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kw = warp % KW, rw = warp / KW;
    const int64_t nbase = yb * (WR * (NW / KW)) + rw * WR;
    const int64_t nbk = c.K / QB; /* activation blocks per row */
    const int nch = c.nch, step = 32 * KW, c0 = kw * 32 + lane;
    const uint8_t *rowp[WR], *scp[WR], *bip[WR];
    row_ptrs<WR>(c, nbase, rowp, scp, bip);
    float acc[WR][RT];
#pragma unroll
    for (int i = 0; i < WR; i++)
#pragma unroll
        for (int r = 0; r < RT; r++) acc[i][r] = 0.0f;

    typename T::Raw cur[WR], nxt[WR];
    if (c0 < nch) {
#pragma unroll
        for (int i = 0; i < WR; i++) T::load(cur[i], c, rowp[i], scp[i], bip[i], c0);
    }
    /* the first chunk's weights are requested before the grid dependency wait: weights are
     * never written by a step (pdl.cuh); activations and outputs only after it (H200, one-row
     * MLX 4-bit 3-6% faster: 5376 x 8192 11.5 -> 10.9 us, docs/benchmarks.md twentieth run) */
    ls::pdl::enter();
    for (int ci = c0; ci < nch; ci += step) {
        if (ci + step < nch) {
#pragma unroll
            for (int i = 0; i < WR; i++) T::load(nxt[i], c, rowp[i], scp[i], bip[i], ci + step);
        }
        typename T::Prep p[WR];
#pragma unroll
        for (int i = 0; i < WR; i++) prep_of<T>(p[i], cur[i], c, ci);
#pragma unroll
        for (int b = 0; b < T::XB; b++) {
            const int64_t blk = (int64_t)ci * T::XB + b;
#pragma unroll
            for (int r = 0; r < RT; r++) {
                if (RT > 1 && r >= nr) break;
                XBlk xb;
                load_xblk(xb, xq, xm, (m0 + r) * nbk + blk);
#pragma unroll
                for (int i = 0; i < WR; i++) acc[i][r] = T::acc_block(acc[i][r], p[i], b, xb);
            }
        }
#pragma unroll
        for (int i = 0; i < WR; i++) cur[i] = nxt[i];
    }
    /* fixed combine (mmq_common.cuh): the virtual lanes u = kw 32 + lane in increasing
     * order, one thread per output; the row is padded to 33 against bank conflicts */
#pragma unroll
    for (int r = 0; r < RT; r++) {
        if (RT > 1 && r >= nr) break;
#pragma unroll
        for (int i = 0; i < WR; i++) red[warp][i][r][lane] = acc[i][r];
    }
    __syncthreads();
    const int t = threadIdx.x, rows = (NW / KW) * WR;
    const int nu = nch < 32 * KW ? nch : 32 * KW;
    if (t < rows * nr) {
        const int r = t / rows, q = t % rows, w0 = (q / WR) * KW, i = q % WR;
        float v = red[w0][i][r][0];
        for (int u = 1; u < nu; u++) v = v + red[w0 + (u >> 5)][i][r][u & 31];
        const int64_t n = yb * rows + q;
        if (n < c.N) y[(m0 + r) * c.N + n] = v;
    }
}

/* Whether gemv_body deals the tail chunks of rows of nch chunks (XB blocks each, W rows a
 * warp) one to a lane, its main loop stopping at the last full round (gemv_body explains
 * when). One definition for the kernel and for the host's choice of Split8 below.
 * Compiled for the types of one block a chunk only: a Q4_K row's preloaded tail chunk took
 * its kernels from 167 to 255 registers. */
__host__ __device__ __forceinline__ bool gemv_tail(int nch, int W, int XB) {
    const int full = nch & ~31, e = nch - full;
    return XB == 1 && full > 0 && e > 0 && (W * e + 31) / 32 < W;
}
/* Whether that main loop runs only full rounds of 32 chunks (its end a nonzero multiple of
 * 32): the condition of the coalesced MLX 8-bit rounds (Split8). */
__host__ __device__ __forceinline__ bool split_rounds(int nch, int W) {
    const int lim = gemv_tail(nch, W, 1) ? nch & ~31 : nch;
    return lim >= 32 && lim % 32 == 0;
}

/* gemv_body's tail: row i of the warp's rows from n0 (clamped as row_ptrs does),
 * chunk ci, into r. */
template <class T>
__device__ __forceinline__ void gemv_tail_load(typename T::Raw &r, const Ctx &c, int64_t n0, int i, int ci) {
    const uint8_t *rowp[1], *scp[1], *bip[1];
    row_ptrs<1>(c, n0 + i, rowp, scp, bip);
    T::load(r, c, rowp[0], scp[0], bip[0], ci);
}

/* ---------------------------------------------------------------------------------------
 * The one-row path (M = 1: every decode step's matmuls, the calls that stream the whole
 * model once per token). mmq_body splits a row's chunks over KW warps of a block, so a
 * thread folds only nch / (32 KW) chunks (2-3 for a 5376-wide MLX 4-bit row) and then
 * waits at the block barrier for the serial combine: the prologue, barrier and combine
 * were most of the issued instructions (ncu: issue slots 58% busy at 45% of DRAM
 * bandwidth, docs/benchmarks.md session 9). Here one warp owns W whole rows: lane L holds
 * the KW virtual lanes u = L + 32 k (k < KW) of each row in registers, so it folds chunks
 * L, L + 32, L + 64, .. (chunk ci belongs to virtual lane ci mod 32 KW, in increasing
 * order: exactly mmq_body's per-lane sequence), and the combine is the same serial sum
 * over u, done by one lane per row from the warp's own shared memory after __syncwarp:
 * no block barrier, warps finish independently. The same bits as mmq_body (the tests
 * compare them), fewer instructions per byte. The first chunk is requested before the PDL
 * wait: weights are never written by a step (pdl.cuh). */
template <class T, int W, int KW, bool SPLIT = false, int NW = WARPS>
__device__ __forceinline__ void gemv_body(const Ctx &c, const int8_t *__restrict__ xq, const Meta *__restrict__ xm,
                                          float *__restrict__ y, int64_t yb) {
    constexpr int U = 32 * KW, L = KW < 2 ? 2 : KW; /* L: unroll, a multiple of KW and of 2 buffers */
    __shared__ __align__(16) float red[NW][W][U];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t n0 = (yb * NW + warp) * W;
    const int nch = c.nch;
    const uint8_t *rowp[W], *scp[W], *bip[W];
    row_ptrs<W>(c, n0, rowp, scp, bip);
    /* The last, partial round (e = nch mod 32 chunks: 8 of a 5376-wide MLX 8-bit row's 168)
     * would keep the warp issuing W rows' work for e busy lanes. When the rows' W e tail
     * chunks take fewer rounds dealt one to a lane, the main loop stops at the last full round
     * and lane t folds tail chunk (row t / e, chunk full + t mod e) into that virtual lane's
     * partial, read from and written back to `red` (the `if (tail)` block after the loop):
     * the same chunk sequence per virtual lane, so the same bits. */
    const int full = nch & ~31, e = nch - full;
    const bool tail = gemv_tail(nch, W, T::XB); /* uniform */
    const int lim = tail ? full : nch;
    typename T::Raw buf[2][W], pre;
    if (lane < nch) {
#pragma unroll
        for (int i = 0; i < W; i++) {
            if constexpr (SPLIT)
                Split8::load(buf[0][i], c, rowp[i], scp[i], bip[i], lane, lane);
            else
                T::load(buf[0][i], c, rowp[i], scp[i], bip[i], lane);
        }
    }
    if (tail && lane < W * e) gemv_tail_load<T>(pre, c, n0, lane / e, full + lane % e); /* in flight all along */
    ls::pdl::enter();
    float acc[W][KW];
#pragma unroll
    for (int i = 0; i < W; i++)
#pragma unroll
        for (int k = 0; k < KW; k++) acc[i][k] = 0.0f;
    for (int base = lane; base < lim; base += 32 * L) {
#pragma unroll
        for (int s = 0; s < L; s++) {
            const int ci = base + 32 * s;
            if (ci >= lim) break;
            if (ci + 32 < lim) {
#pragma unroll
                for (int i = 0; i < W; i++) {
                    if constexpr (SPLIT)
                        Split8::load(buf[(s + 1) & 1][i], c, rowp[i], scp[i], bip[i], ci + 32, lane);
                    else
                        T::load(buf[(s + 1) & 1][i], c, rowp[i], scp[i], bip[i], ci + 32);
                }
            }
            if constexpr (SPLIT) {
                Split8::X xs;
                Split8::load_x(xs, xq, xm, ci, lane);
#pragma unroll
                for (int i = 0; i < W; i++) acc[i][s % KW] = Split8::acc(acc[i][s % KW], buf[s & 1][i], c, xs, lane);
            } else {
                XBlk xb[T::XB];
#pragma unroll
                for (int b = 0; b < T::XB; b++) load_xblk(xb[b], xq, xm, (int64_t)ci * T::XB + b);
#pragma unroll
                for (int i = 0; i < W; i++) {
                    typename T::Prep p;
                    prep_of<T>(p, buf[s & 1][i], c, ci);
#pragma unroll
                    for (int b = 0; b < T::XB; b++) acc[i][s % KW] = T::acc_block(acc[i][s % KW], p, b, xb[b]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < W; i++)
#pragma unroll
        for (int k = 0; k < KW; k++) red[warp][i][32 * k + lane] = acc[i][k];
    __syncwarp();
    if (tail) {
        /* the tail chunks belong to virtual lanes 32 ((full / 32) mod KW) + u, u < e */
        float *vl = &red[warp][0][32 * ((full >> 5) % KW)];
        for (int t = lane; t < W * e; t += 32) {
            const int i = t / e, u = t - i * e, ci = full + u;
            if (t != lane) gemv_tail_load<T>(pre, c, n0, i, ci);
            XBlk xb[T::XB];
#pragma unroll
            for (int b = 0; b < T::XB; b++) load_xblk(xb[b], xq, xm, (int64_t)ci * T::XB + b);
            typename T::Prep p;
            prep_of<T>(p, pre, c, ci);
            float a = vl[i * U + u];
#pragma unroll
            for (int b = 0; b < T::XB; b++) a = T::acc_block(a, p, b, xb[b]);
            vl[i * U + u] = a;
        }
        __syncwarp();
    }
    if (lane < W) {
        /* ((p[0] + p[1]) + p[2]) + .. over the nu virtual lanes that hold chunks */
        const int nu = nch < U ? nch : U;
        const float *r = red[warp][lane];
        float v = r[0];
        int u = 1;
        for (; u < 4 && u < nu; u++) v = v + r[u];
        for (; u + 4 <= nu; u += 4) {
            const float4 q = *reinterpret_cast<const float4 *>(r + u);
            v = v + q.x;
            v = v + q.y;
            v = v + q.z;
            v = v + q.w;
        }
        for (; u < nu; u++) v = v + r[u];
        const int64_t n = n0 + lane;
        if (n < c.N) y[n] = v;
    }
}

/* The MLX types, whose loads are 16-byte ldw16 calls: their kernels compile a copy of the
 * body with a16 a constant 1, so the 2-byte-aligned fallback is not issued predicated off
 * beside every load (H200, session 9: MLX 8-bit one-row 41.0 -> 40.0 and 35.5 -> 34.2 us,
 * 31B decode 85 -> 89 tok/s). The other types keep one body: the same split measured
 * slower there (Q4_K one-row 33.3 -> 36.6 us, Q6_K 48.3 -> 54.4: the doubled code, not
 * their loads; Q6_K / Q8_0 never take the 16-byte path). */
template <class T>
constexpr bool const_a16 = std::is_same<T, QMlx4>::value || std::is_same<T, QMlx8>::value;

/* Four compilations of the same body, for tiles of up to RT = 1, 2, 4, 8 rows: the small
 * ones (decode, verify blocks) keep their registers low for occupancy. A row gets the same
 * fmaf sequence on the same operands from any of them (the arithmetic is written out with
 * explicit fmaf and nothing is contracted across it), so which one ran never shows in the
 * bits: M = 1 against every other M is exactly what the tests compare. */
template <int RT>
struct MinBlocks {
    static constexpr int v = RT <= 2 ? 3 : RT == 4 ? 2 : 1;
};
/* mmq_body with the weights' 16-byte alignment a constant where the type has that copy */
template <class T, int RT, int NW = WARPS>
__device__ __forceinline__ void mmq_body_a16(const Ctx &c, const int8_t *__restrict__ xq, const Meta *__restrict__ xm,
                                             float *__restrict__ y, int64_t m0, int nr, int KW, int64_t yb) {
    if (const_a16<T> && c.a16) { /* const_a16 */
        Ctx a = c;
        a.a16 = 1;
        mmq_body<T, RT, NW>(a, xq, xm, y, m0, nr, KW, yb);
    } else {
        mmq_body<T, RT, NW>(c, xq, xm, y, m0, nr, KW, yb);
    }
}
template <class T, int RT>
__global__ void __launch_bounds__(32 * WARPS, MinBlocks<RT>::v)
    mmq_kernel(const Ctx c, const int8_t *__restrict__ xq, const Meta *__restrict__ xm, float *__restrict__ y,
               int64_t M) {
    const int64_t m0 = (int64_t)blockIdx.x * RT;
    const int nr = (int)(M - m0 < RT ? M - m0 : RT);
    mmq_body_a16<T, RT>(c, xq, xm, y, m0, nr, c.kw, blockIdx.y);
}

/* Up to GMAX weights of one type and width on the same activation rows (q / k / v, gate /
 * up) in one launch: the row blocks of weight 0, then of weight 1, ... A weight's rows get
 * exactly the body (and bits) of their own launch; only the launch count changes. */
constexpr int GMAX = 3;
struct Group {
    Ctx c[GMAX];
    float *y[GMAX];
    int64_t nb[GMAX]; /* row blocks of each weight */
    int n;
};
template <class T, int RT>
__global__ void __launch_bounds__(32 * WARPS, MinBlocks<RT>::v)
    mmq_group_kernel(const Group g, const int8_t *__restrict__ xq, const Meta *__restrict__ xm, int64_t M) {
    int64_t yb = blockIdx.y;
    Ctx c;
    float *y;
    ls::mmq::group_pick(g, yb, c, y);
    const int64_t m0 = (int64_t)blockIdx.x * RT;
    const int nr = (int)(M - m0 < RT ? M - m0 : RT);
    mmq_body_a16<T, RT>(c, xq, xm, y, m0, nr, c.kw, yb);
}

/* The one-row kernels (gemv_body): variant 1 = 4 rows per warp, 0 = mmq_body's RT = 1
 * compilation (ls_cuda_mmq_gemv_variant A/B-tests them; both give the same bits), KW the
 * weight's k-warps (kw_of) as a compile-time count. */
template <class T, int W, int KW, bool SPLIT = false, int NW = WARPS>
__global__ void __launch_bounds__(32 * NW) gemv_kernel(const Ctx c, const int8_t *__restrict__ xq,
                                                       const Meta *__restrict__ xm, float *__restrict__ y) {
    /* a16 is uniform (const_a16); SPLIT kernels are launched for a16 weights only */
    if (const_a16<T> && c.a16) {
        Ctx a = c;
        a.a16 = 1;
        gemv_body<T, W, KW, SPLIT, NW>(a, xq, xm, y, blockIdx.y);
    } else {
        gemv_body<T, W, KW, false, NW>(c, xq, xm, y, blockIdx.y);
    }
}
template <class T, int W, int KW, bool SPLIT = false, int NW = WARPS>
__global__ void __launch_bounds__(32 * NW) gemv_group_kernel(const Group g, const int8_t *__restrict__ xq,
                                                             const Meta *__restrict__ xm) {
    int64_t yb = blockIdx.y;
    Ctx c;
    float *y;
    ls::mmq::group_pick(g, yb, c, y);
    if (const_a16<T> && c.a16) { /* const_a16 */
        Ctx a = c;
        a.a16 = 1;
        gemv_body<T, W, KW, SPLIT, NW>(a, xq, xm, y, yb);
    } else {
        gemv_body<T, W, KW, false, NW>(c, xq, xm, y, yb);
    }
}
/* mmq_body's one-row compilation (variant 0) in blocks of NW warps of one k-warp each (rows of
 * one k-warp only): the register limit of mmq_kernel<T, 1> (3 blocks of 4 warps an SM) */
template <class T, int NW>
__global__ void __launch_bounds__(32 * NW, MinBlocks<1>::v * WARPS / NW)
    mmq_row1_kernel(const Ctx c, const int8_t *__restrict__ xq, const Meta *__restrict__ xm, float *__restrict__ y) {
    mmq_body_a16<T, 1, NW>(c, xq, xm, y, 0, 1, 1, blockIdx.y); /* rows of one k-warp (row1_nw) */
}
template <class T, int NW>
__global__ void __launch_bounds__(32 * NW, MinBlocks<1>::v * WARPS / NW)
    mmq_row1_group_kernel(const Group g, const int8_t *__restrict__ xq, const Meta *__restrict__ xm) {
    int64_t yb = blockIdx.y;
    Ctx c;
    float *y;
    ls::mmq::group_pick(g, yb, c, y);
    mmq_body_a16<T, 1, NW>(c, xq, xm, y, 0, 1, 1, yb);
}
constexpr int GEMV_VARIANTS = 2;
/* -1: the measured choice (gemv_default); 0, 1: that variant for every call */
std::atomic<int> g_gemv{-1};
/* Which one-row kernel streams a weight faster, by type and k-warps (H200, test_cuda_matmul
 * --bench, docs/benchmarks.md session 9): the warp-per-rows kernel for MLX 8-bit (35.5 vs
 * 42.1 us at 5376 x 21504, 41.0 vs 43.2 at 21504 x 5376), Q8_0 rows of four k-warps (38.6
 * vs 41.1) and Q4_K rows of one (33.3 vs 35.0); mmq_body elsewhere (its 4-row warps with
 * KW = 2, 4 keep fewer registers: Q4_K / Q6_K / MLX 4-bit measured 10-50% slower here).
 * Since session 10 (kw_of: one k-warp up to 1023 chunks) those matrices are rows of one
 * k-warp but for Q6_K: MLX 8-bit 38.7 / 33.5 vs 39.3 / 33.5 us, Q4_K 33.4 / 32.6 vs 35.0 /
 * 34.4, MLX 4-bit 28.5 / 28.2 vs 24.6 / 22.9 (mmq_body), so the choices stand; Q8_0 rows of
 * one k-warp measured 3-4% faster in this kernel (37.5 vs 39.1) but stay on mmq_body: the
 * default model's Q8_0 rows, whose speed is set by launches, were not re-measured. */
int gemv_default(int key, int kw) {
    switch (key) {
    case 108: return 1;
    case LS_TYPE_Q8_0: return kw == 4 ? 1 : 0;
    case LS_TYPE_Q4_K: return kw == 1 ? 1 : 0;
    default: return 0;
    }
}
int gemv_pick(int key, int kw) {
    const int v = g_gemv.load(std::memory_order_relaxed);
    return v >= 0 ? v : gemv_default(key, kw);
}

/* weight rows per block of the one-row path under variant v (kw k-warps), blocks of nw warps */
int64_t gemv_rows(int v, int kw, int nw) {
    return v == 1 ? 4 * nw : (int64_t)WR * (nw / kw);
}

/* ls_cuda_mmq_row1_warps: warps per block of the one-row MLX 8-bit kernels whose rows take one
 * k-warp (1, the default, or WARPS). A block's warps never share a row, so the count decides
 * only how many rows a block holds, and the block scheduler places single warps where blocks of
 * four left gaps. Measured (H200, session 35, docs/benchmarks.md thirtieth run): MLX 8-bit
 * 21504 x 5376 36.1 -> 35.3 us, 5376 x 21504 32.8 -> 32.7; MLX 4-bit 0.5-5% slower in one-warp
 * blocks (16384 x 5376 18.2 -> 19.1 us), so it keeps blocks of four. The same bits by
 * construction (test_cuda_matmul compares both). */
std::atomic<int> g_row1_nw{1};
/* The warps per block for a one-row call of n_blocks4 four-warp blocks: one where allowed and
 * the grid of one-warp blocks fits the launch limit. */
int row1_nw(int key, int kw, int64_t n_blocks4) {
    return g_row1_nw.load(std::memory_order_relaxed) == 1 && key == 108 && kw == 1 && n_blocks4 * WARPS <= 65535
               ? 1
               : WARPS;
}

/* The coalesced MLX 8-bit rounds (Split8) for weight c: 16-byte-aligned rows of one k-warp
 * whose main loop runs full rounds only (H200, session 22: 21504 x 5376 39.0 -> 36.6 us,
 * 5376 x 21504 34.0 -> 32.9; rows of 2 or 4 k-warps were not measured and keep the per-chunk
 * loads). LS_SPLIT8_OFF: per-chunk loads everywhere (A/B runs, the same bits). */
bool use_split(const Ctx &c, int W) {
#ifdef LS_SPLIT8_OFF
    return false && split_rounds(c.nch, W); /* (referenced: no unused-function error) */
#else
    return c.a16 && c.kw == 1 && split_rounds(c.nch, W);
#endif
}

template <class T, int W>
void gemv_launch_w(cudaStream_t st, dim3 grid, const Ctx &c, const int8_t *xq, const Meta *xm, float *y) {
    if constexpr (std::is_same<T, QMlx8>::value) {
        if (use_split(c, W)) {
            ls::pdl::launch(gemv_kernel<T, W, 1, true>, grid, 32 * WARPS, 0, st, c, xq, xm, y);
            return;
        }
    }
    switch (c.kw) {
    case 1: ls::pdl::launch(gemv_kernel<T, W, 1>, grid, 32 * WARPS, 0, st, c, xq, xm, y); break;
    case 2: ls::pdl::launch(gemv_kernel<T, W, 2>, grid, 32 * WARPS, 0, st, c, xq, xm, y); break;
    default: ls::pdl::launch(gemv_kernel<T, W, 4>, grid, 32 * WARPS, 0, st, c, xq, xm, y); break;
    }
}
/* The one-warp blocks of row1_nw (MLX 8-bit, rows of one k-warp): variant v's kernel */
template <class T>
void gemv_launch_1w(int v, cudaStream_t st, dim3 grid, const Ctx &c, const int8_t *xq, const Meta *xm, float *y) {
    if constexpr (std::is_same<T, QMlx8>::value) {
        if (v != 1) {
            ls::pdl::launch(mmq_row1_kernel<T, 1>, grid, 32, 0, st, c, xq, xm, y);
            return;
        }
        if (use_split(c, 4))
            ls::pdl::launch(gemv_kernel<T, 4, 1, true, 1>, grid, 32, 0, st, c, xq, xm, y);
        else
            ls::pdl::launch(gemv_kernel<T, 4, 1, false, 1>, grid, 32, 0, st, c, xq, xm, y);
    }
}
template <class T>
void gemv_launch(int v, int nw, cudaStream_t st, dim3 grid, const Ctx &c, const int8_t *xq, const Meta *xm, float *y) {
    if (nw == 1) {
        gemv_launch_1w<T>(v, st, grid, c, xq, xm, y);
        return;
    }
    switch (v) {
    case 1: gemv_launch_w<T, 4>(st, grid, c, xq, xm, y); break;
    default: ls::pdl::launch(mmq_kernel<T, 1>, grid, 32 * WARPS, 0, st, c, xq, xm, y, (int64_t)1); break;
    }
}
template <class T, int W>
void gemv_group_launch_w(cudaStream_t st, dim3 grid, const Group &g, const int8_t *xq, const Meta *xm) {
    if constexpr (std::is_same<T, QMlx8>::value) {
        bool split = true;
        for (int i = 0; i < g.n; i++) split = split && use_split(g.c[i], W);
        if (split) {
            ls::pdl::launch(gemv_group_kernel<T, W, 1, true>, grid, 32 * WARPS, 0, st, g, xq, xm);
            return;
        }
    }
    switch (g.c[0].kw) { /* a group shares K, so kw */
    case 1: ls::pdl::launch(gemv_group_kernel<T, W, 1>, grid, 32 * WARPS, 0, st, g, xq, xm); break;
    case 2: ls::pdl::launch(gemv_group_kernel<T, W, 2>, grid, 32 * WARPS, 0, st, g, xq, xm); break;
    default: ls::pdl::launch(gemv_group_kernel<T, W, 4>, grid, 32 * WARPS, 0, st, g, xq, xm); break;
    }
}
template <class T>
void gemv_group_launch_1w(int v, cudaStream_t st, dim3 grid, const Group &g, const int8_t *xq, const Meta *xm) {
    if constexpr (std::is_same<T, QMlx8>::value) {
        if (v != 1) {
            ls::pdl::launch(mmq_row1_group_kernel<T, 1>, grid, 32, 0, st, g, xq, xm);
            return;
        }
        bool split = true;
        for (int i = 0; i < g.n; i++) split = split && use_split(g.c[i], 4);
        if (split)
            ls::pdl::launch(gemv_group_kernel<T, 4, 1, true, 1>, grid, 32, 0, st, g, xq, xm);
        else
            ls::pdl::launch(gemv_group_kernel<T, 4, 1, false, 1>, grid, 32, 0, st, g, xq, xm);
    }
}
template <class T>
void gemv_group_launch(int v, int nw, cudaStream_t st, dim3 grid, const Group &g, const int8_t *xq, const Meta *xm) {
    if (nw == 1) {
        gemv_group_launch_1w<T>(v, st, grid, g, xq, xm);
        return;
    }
    switch (v) {
    case 1: gemv_group_launch_w<T, 4>(st, grid, g, xq, xm); break;
    default: ls::pdl::launch(mmq_group_kernel<T, 1>, grid, 32 * WARPS, 0, st, g, xq, xm, (int64_t)1); break;
    }
}

/* ---- host side ---- */

/* ls_cuda_mmq_policy: 0 = the shape decides (use_mma, use_tile, use_small), 1 = dp4a only,
 * 2 = mmq_mma.cu's warp tiles for every call, 3 = the small-M kernel for every call, 4 =
 * mmq_tile.cu's block tiles for every call (tests compare the kernels on small matrices with
 * them; benchmarks A/B them). */
std::atomic<int> g_policy{0};
/* ls_cuda_mmq_narrow: 0 leaves the narrow-call kernel (mmq_narrow.cu) to the tests' policy 5
 * (LS_CUDA_OFF_NARROW: A/B runs; the same bits) */
std::atomic<int> g_narrow{1};

/* Whether a call of M rows on weight c (nch, kw set) takes the narrow-call kernel: policy 5
 * sends every call it serves there, policy 0 those of NARROW_MIN_ROWS rows or more. */
bool narrow_pick(int key, const Ctx &c, int64_t M) {
    const int pol = g_policy.load(std::memory_order_relaxed);
    const bool want = pol == 5 || (pol == 0 && M >= ls::mmq::NARROW_MIN_ROWS && g_narrow.load(std::memory_order_relaxed));
    return want && ls::mmq::narrow_serves(key, c, M);
}

/* ls_cuda_mmq_kq: 1 (the default) gives Q4_K and Q6_K weights the K-quant format and order
 * (kq_format.cuh: 8-bit activations in superblocks of 256), 0 the 16-bit two-plane format of
 * the other types; different bits, so it is set before a model runs (A/B runs). */
std::atomic<int> g_kq{1};
bool kq_key(int key) {
    return (key == LS_TYPE_Q4_K || key == LS_TYPE_Q6_K) && g_kq.load(std::memory_order_relaxed);
}

/* ls_cuda_mmq_kw_override: 0 = kw_of (the shape decides), else that k-warp count for every
 * weight. Benchmarks only: kw sets the reduction order, so it changes the bits. */
std::atomic<int> g_kw{0};
int kw_pick(int key, int nch) {
    const int k = g_kw.load(std::memory_order_relaxed);
    return k ? k : kw_of(key, nch);
}

size_t rows_bytes(int64_t rows, int64_t K) {
    return (size_t)rows * (size_t)(K / QB) * (XB_BYTES + sizeof(Meta));
}

template <class T>
int launch(cudaStream_t st, int key, Ctx c, const float *x, int64_t M, float *y, void *scratch, size_t scratch_bytes,
           bool act_ready) {
    c.nch = (int)(c.K / (QB * T::XB));
    c.kw = kw_pick(key, c.nch);
    const int64_t bn = WR * (WARPS / c.kw); /* weight rows per block */
    const int64_t nb = (c.N + bn - 1) / bn;
    const size_t per_row = rows_bytes(1, c.K);
    const int64_t cap = (int64_t)(scratch_bytes / per_row);
    if (nb > 65535 || cap < 1) return -1;
    for (int64_t r0 = 0; r0 < M; r0 += cap) {
        const int64_t mr = M - r0 < cap ? M - r0 : cap;
        int8_t *xq = (int8_t *)scratch;
        Meta *xm = (Meta *)((char *)scratch + (size_t)mr * (size_t)(c.K / QB) * XB_BYTES);
        const int64_t quads = mr * c.K / 4;
        const int64_t qblocks = (quads + 255) / 256;
        if (qblocks > 0x7fffffff) return -1;
        if (act_ready && mr == M) {
            /* the scratch already holds these rows, quantized for this layout (the caller's
             * promise, ls_cuda_mmq_act_key) */
        } else if ((uintptr_t)x % 16 == 0)
            ls::pdl::launch(quant_x_kernel<T::IL, true>, (unsigned)qblocks, 256, 0, st, x + r0 * c.K, c.K, quads, xq, xm);
        else
            ls::pdl::launch(quant_x_kernel<T::IL, false>, (unsigned)qblocks, 256, 0, st, x + r0 * c.K, c.K, quads, xq, xm);
        const int pol = g_policy.load(std::memory_order_relaxed);
        if (narrow_pick(key, c, mr)) {
            /* a refused narrow launch (shared memory past the device's limit) falls back to the
             * kernels below (the same bits), except when a test forces it (policy 5) */
            float *yr = y + r0 * c.N;
            if (ls::mmq::narrow_launch(st, &c, &yr, 1, key, xq, xm, mr) == 0) continue;
            if (pol == 5) return -1;
        }
        if (pol == 4 || (pol == 0 && ls::mmq::use_mma(mr, c.N) && ls::mmq::use_tile(key, c.a16 != 0, mr, c.N))) {
            /* a refused block-tile launch (shared-memory attribute, grid) falls back to the warp
             * tiles (the same bits), except when a test forces the block tiles (policy 4): there
             * a refusal must fail the call, not pass unnoticed */
            if (ls::mmq::tile_launch(st, c, key, xq, xm, y + r0 * c.N, mr) != 0 &&
                (pol == 4 || ls::mmq::mma_launch(st, c, key, xq, xm, y + r0 * c.N, mr) != 0))
                return -1;
            continue;
        }
        if (pol == 2 || (pol == 0 && ls::mmq::use_mma(mr, c.N))) {
            if (ls::mmq::mma_launch(st, c, key, xq, xm, y + r0 * c.N, mr) != 0) return -1;
            continue;
        }
        if (pol == 3 || (pol == 0 && ls::mmq::use_small(key, mr, c.N))) {
            float *yr = y + r0 * c.N;
            if (ls::mmq::small_launch(st, &c, &yr, 1, key, xq, xm, mr) != 0) return -1;
            continue;
        }
        float *yr = y + r0 * c.N;
        if (mr == 1) {
            const int v = gemv_pick(key, c.kw);
            const int nw = row1_nw(key, c.kw, (c.N + gemv_rows(v, c.kw, WARPS) - 1) / gemv_rows(v, c.kw, WARPS));
            const int64_t gb = (c.N + gemv_rows(v, c.kw, nw) - 1) / gemv_rows(v, c.kw, nw);
            if (gb > 65535) return -1;
            gemv_launch<T>(v, nw, st, dim3(1, (unsigned)gb), c, xq, xm, yr);
            continue;
        }
        const int rt = mr == 2 ? 2 : mr <= 4 ? 4 : R;
        const dim3 grid((unsigned)((mr + rt - 1) / rt), (unsigned)nb);
        switch (rt) {
        case 2: ls::pdl::launch(mmq_kernel<T, 2>, grid, 32 * WARPS, 0, st, c, xq, xm, yr, mr); break;
        case 4: ls::pdl::launch(mmq_kernel<T, 4>, grid, 32 * WARPS, 0, st, c, xq, xm, yr, mr); break;
        default: ls::pdl::launch(mmq_kernel<T, R>, grid, 32 * WARPS, 0, st, c, xq, xm, yr, mr); break;
        }
    }
    return 0;
}


/* The grouped launch of ls_cuda_mmq_group: every weight already checked to share T, K and
 * the dp4a path for M rows in one pass. */
template <class T>
int launch_group(cudaStream_t st, int key, Group g, const float *x, int64_t M, void *scratch, bool act_ready) {
    int64_t nb = 0;
    for (int i = 0; i < g.n; i++) {
        Ctx &c = g.c[i];
        c.nch = (int)(c.K / (QB * T::XB));
        c.kw = kw_pick(key, c.nch);
        const int64_t bn = WR * (WARPS / c.kw);
        g.nb[i] = (c.N + bn - 1) / bn;
        nb += g.nb[i];
    }
    const int64_t K = g.c[0].K;
    if (nb > 65535) return -1;
    int8_t *xq = (int8_t *)scratch;
    Meta *xm = ls::mmq::meta_of(scratch, M * K);
    if (!act_ready) {
        const int64_t quads = M * K / 4, qblocks = (quads + 255) / 256;
        if ((uintptr_t)x % 16 == 0)
            ls::pdl::launch(quant_x_kernel<T::IL, true>, (unsigned)qblocks, 256, 0, st, x, K, quads, xq, xm);
        else
            ls::pdl::launch(quant_x_kernel<T::IL, false>, (unsigned)qblocks, 256, 0, st, x, K, quads, xq, xm);
    }
    const int pol = g_policy.load(std::memory_order_relaxed);
    if (narrow_pick(key, g.c[0], M)) { /* and for every weight of the group (ls_cuda_mmq_groupable) */
        /* refused: the kernels below, as for one weight */
        const int rc = ls::mmq::narrow_launch(st, g.c, g.y, g.n, key, xq, xm, M);
        if (rc == 0 || pol == 5) return rc;
    }
    if (pol == 3 || (pol == 0 && ls::mmq::use_small(key, M, g.c[0].N))) {
        /* use_small holds for every weight of the group (ls_cuda_mmq_groupable) */
        return ls::mmq::small_launch(st, g.c, g.y, g.n, key, xq, xm, M);
    }
    if (M == 1) {
        const int v = gemv_pick(key, g.c[0].kw);
        int64_t gb4 = 0; /* a group shares K, so kw */
        for (int i = 0; i < g.n; i++) gb4 += (g.c[i].N + gemv_rows(v, g.c[i].kw, WARPS) - 1) / gemv_rows(v, g.c[i].kw, WARPS);
        const int nw = row1_nw(key, g.c[0].kw, gb4);
        int64_t gb = 0;
        for (int i = 0; i < g.n; i++) {
            g.nb[i] = (g.c[i].N + gemv_rows(v, g.c[i].kw, nw) - 1) / gemv_rows(v, g.c[i].kw, nw);
            gb += g.nb[i];
        }
        if (gb > 65535) return -1;
        gemv_group_launch<T>(v, nw, st, dim3(1, (unsigned)gb), g, xq, xm);
        return 0;
    }
    const int rt = M == 2 ? 2 : M <= 4 ? 4 : R;
    const dim3 grid((unsigned)((M + rt - 1) / rt), (unsigned)nb);
    switch (rt) {
    case 2: ls::pdl::launch(mmq_group_kernel<T, 2>, grid, 32 * WARPS, 0, st, g, xq, xm, M); break;
    case 4: ls::pdl::launch(mmq_group_kernel<T, 4>, grid, 32 * WARPS, 0, st, g, xq, xm, M); break;
    default: ls::pdl::launch(mmq_group_kernel<T, R>, grid, 32 * WARPS, 0, st, g, xq, xm, M); break;
    }
    return 0;
}

} // namespace

/* Which kernel serves w: this one when its type has an integer path, K is a whole number
 * of 32-element blocks and the layout allows the loads; a property of the weight alone. */
extern "C" int ls_cuda_mmq_key(const ls_weight *w) {
    Ctx c;
    const int key = ls::q::mm_prepare(w, c);
    if (key < 0 || w->cols % QB != 0) return -1;
    switch (key) {
    case 104:
    case 108: return w->group >= QB ? key : -1;
    case LS_TYPE_Q4_0:
    case LS_TYPE_Q4_1:
    case LS_TYPE_Q5_0:
    case LS_TYPE_Q5_1:
    case LS_TYPE_Q8_0:
    case LS_TYPE_Q4_K:
    case LS_TYPE_Q6_K: return key;
    default: return -1;
    }
}

extern "C" int ls_cuda_mmq_policy(int policy) {
    if (policy < 0 || policy > 5) return -1;
    return g_policy.exchange(policy);
}

extern "C" int ls_cuda_mmq_kq(int on) {
    return g_kq.exchange(on ? 1 : 0);
}

extern "C" int ls_cuda_mmq_narrow(int on) {
    return g_narrow.exchange(on ? 1 : 0);
}

/* The Ctx of w as launch() sets it up (nch, kw), for the dispatch questions below. */
static int prepared(const ls_weight *w, Ctx &c) {
    const int key = ls_cuda_mmq_key(w);
    if (key < 0 || ls::q::mm_prepare(w, c) < 0) return -1;
    c.nch = (int)(c.K / (QB * (key == LS_TYPE_Q4_K ? 2 : 1)));
    c.kw = kw_pick(key, c.nch);
    return key;
}

extern "C" int ls_cuda_mmq_narrow_serves(const ls_weight *w, int64_t m) {
    Ctx c;
    const int key = prepared(w, c);
    return key >= 0 && ls::mmq::narrow_serves(key, c, m);
}

extern "C" int ls_cuda_mmq_kw_override(int kw) {
    if (kw != 0 && kw != 1 && kw != 2 && kw != 4) return -1;
    return g_kw.exchange(kw);
}

extern "C" int ls_cuda_mmq_gemv_variant(int v) {
    if (v < -1 || v >= GEMV_VARIANTS) return -2;
    return g_gemv.exchange(v);
}

extern "C" int ls_cuda_mmq_row1_warps(int nw) {
    if (nw != 1 && nw != WARPS) return -1;
    return g_row1_nw.exchange(nw);
}

extern "C" size_t ls_cuda_mmq_scratch_bytes(int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return 0;
    return rows_bytes(rows, (cols + QB - 1) / QB * QB);
}

extern "C" int ls_cuda_mmq_act_key(const ls_weight *w) {
    switch (ls_cuda_mmq_key(w)) {
    case -1: return -1;
    case 104: return 1; /* QMlx4::IL: the planes in nibble order */
    case LS_TYPE_Q4_K:
    case LS_TYPE_Q6_K: return g_kq.load(std::memory_order_relaxed) ? 2 : 0; /* kq_format.cuh */
    default: return 0;
    }
}

extern "C" int ls_cuda_mmq_single_pass(int64_t rows, int64_t cols, size_t scratch_bytes) {
    return rows > 0 && cols % QB == 0 && rows_bytes(rows, cols) <= scratch_bytes;
}

extern "C" int ls_cuda_mmq(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y, void *scratch,
                           size_t scratch_bytes) {
    return ls_cuda_mmq_ex(st, w, x, m, y, scratch, scratch_bytes, 0);
}

extern "C" int ls_cuda_mmq_ex(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y, void *scratch,
                              size_t scratch_bytes, int act_ready) {
    Ctx c;
    const int key = ls_cuda_mmq_key(w);
    if (key < 0 || ls::q::mm_prepare(w, c) < 0 || m < 0 || (m > 0 && (!x || !y)) || ((uintptr_t)x % 4) != 0)
        return -1;
    if (m == 0) return 0;
    if (!scratch || (uintptr_t)scratch % 16 != 0) return -1;
    if (kq_key(key))
        return ls::mmq::kq_launch(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0,
                                  g_policy.load(std::memory_order_relaxed));
    switch (key) {
    case 104: return launch<QMlx4>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case 108: return launch<QMlx8>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case LS_TYPE_Q4_0: return launch<QQ4_0>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case LS_TYPE_Q4_1: return launch<QQ4_1>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case LS_TYPE_Q5_0: return launch<QQ5_0>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case LS_TYPE_Q5_1: return launch<QQ5_1>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case LS_TYPE_Q8_0: return launch<QQ8_0>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case LS_TYPE_Q4_K: return launch<QQ4_K>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    case LS_TYPE_Q6_K: return launch<QQ6_K>(st, key, c, x, m, y, scratch, scratch_bytes, act_ready != 0);
    default: return -1;
    }
}

extern "C" int ls_cuda_mmq_groupable(const ls_weight *a, const ls_weight *b, int64_t m, size_t scratch_bytes) {
    const int key = ls_cuda_mmq_key(a);
    if (key < 0 || ls_cuda_mmq_key(b) != key || a->cols != b->cols || m <= 0) return 0;
    if (kq_key(key)) /* the K-quant kernels take one weight a launch: a group runs them in turn */
        return ls_cuda_mmq_single_pass(m, a->cols, scratch_bytes);
    if (!ls_cuda_mmq_single_pass(m, a->cols, scratch_bytes)) return 0;
    /* one kernel for the whole group: the dp4a kernel, the small-M or the narrow-call one for all */
    if (ls::mmq::use_mma(m, a->rows) || ls::mmq::use_mma(m, b->rows)) return 0;
    Ctx ca, cb;
    if (prepared(a, ca) < 0 || prepared(b, cb) < 0) return 0;
    /* k-warps follow the shape (kw_pick): one-row variant 1 compiles one count for the group */
    if (ca.kw != cb.kw) return 0;
    const bool na = narrow_pick(key, ca, m), nb = narrow_pick(key, cb, m);
    if (na != nb || (na && ca.gshift != cb.gshift)) return 0;
    if (na) return 1;
    return ls::mmq::use_small(key, m, a->rows) == ls::mmq::use_small(key, m, b->rows);
}

extern "C" int ls_cuda_mmq_group(cudaStream_t st, int n, const ls_weight *const *w, const float *x, int64_t m,
                                 float *const *y, void *scratch, size_t scratch_bytes, int act_ready) {
    if (n < 1 || n > GMAX || m <= 0 || !x || !scratch || (uintptr_t)scratch % 16 != 0 || (uintptr_t)x % 4 != 0)
        return -1;
    Group g{};
    g.n = n;
    const int key = ls_cuda_mmq_key(w[0]);
    for (int i = 0; i < n; i++) {
        if (!y[i] || (i > 0 && !ls_cuda_mmq_groupable(w[0], w[i], m, scratch_bytes))) return -1;
        if (ls_cuda_mmq_key(w[i]) != key || ls::q::mm_prepare(w[i], g.c[i]) < 0) return -1;
        g.y[i] = y[i];
    }
    if (!ls_cuda_mmq_single_pass(m, w[0]->cols, scratch_bytes)) return -1;
    if (kq_key(key)) { /* one launch a weight on the activations quantized once: the bits of separate calls */
        for (int i = 0; i < n; i++)
            if (ls::mmq::kq_launch(st, key, g.c[i], x, m, y[i], scratch, scratch_bytes, act_ready != 0 || i > 0,
                                   g_policy.load(std::memory_order_relaxed)) != 0)
                return -1;
        return 0;
    }
    if (ls::mmq::use_mma(m, w[0]->rows)) return -1;
    switch (key) {
    case 104: return launch_group<QMlx4>(st, key, g, x, m, scratch, act_ready != 0);
    case 108: return launch_group<QMlx8>(st, key, g, x, m, scratch, act_ready != 0);
    case LS_TYPE_Q4_0: return launch_group<QQ4_0>(st, key, g, x, m, scratch, act_ready != 0);
    case LS_TYPE_Q4_1: return launch_group<QQ4_1>(st, key, g, x, m, scratch, act_ready != 0);
    case LS_TYPE_Q5_0: return launch_group<QQ5_0>(st, key, g, x, m, scratch, act_ready != 0);
    case LS_TYPE_Q5_1: return launch_group<QQ5_1>(st, key, g, x, m, scratch, act_ready != 0);
    case LS_TYPE_Q8_0: return launch_group<QQ8_0>(st, key, g, x, m, scratch, act_ready != 0);
    case LS_TYPE_Q4_K: return launch_group<QQ4_K>(st, key, g, x, m, scratch, act_ready != 0);
    case LS_TYPE_Q6_K: return launch_group<QQ6_K>(st, key, g, x, m, scratch, act_ready != 0);
    default: return -1;
    }
}
