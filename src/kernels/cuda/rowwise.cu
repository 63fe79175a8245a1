/* Row-wise and element-wise kernels of the CUDA backend (backend.h ops; docs/cuda.md 2).
 *
 * Invariance by construction:
 *  - element-wise ops (fill, add, scale, axpby, gelu_mul, softcap, kv_store, copy_rows,
 *    gather_rows, scatter_add, mul_rows) compute each output element from the same-index
 *    input elements only, with the same instruction sequence for every element: no
 *    reduction at all, so the launch shape cannot matter;
 *  - rmsnorm is one block of a fixed 256 threads per row: thread t sums x[i]^2 for
 *    i = t, t + 256, ... (fmaf, increasing i), then a fixed xor-butterfly per warp, then a
 *    fixed tree over the 8 warp sums. The order depends on n only, never on m;
 *  - rope_pairs is one block per row; its angles come from the row's position alone.
 *
 * Fused ops (backend.h "fused ops"): each is one kernel that must give the bits of its
 * unfused op sequence. They are built from the very code of the kernels they replace: the
 * row sum of squares goes through block_sum_sq (the one reduction tree of every RMSNorm
 * here, k_rmsnorm included), the scale through rms_scale, the RoPE angles through the
 * non-inlined rope_angle (one compiled function for k_rope_pairs and k_norm_rope, so even
 * the double pow / sincos code is shared), and every element expression is the unfused
 * kernel's, operand for operand. A value that the unfused sequence stores to global memory
 * and loads again is kept in a register or in shared memory instead: a float stored and
 * loaded is the same float.
 *
 * Rounding: every product and sum that the CPU backend computes as separate IEEE
 * operations (its C is compiled with -ffp-contract=off) is written here with __fmul_rn /
 * __fadd_rn / __fsub_rn, which nvcc never contracts into an FMA (-fmad=true would
 * otherwise be free to); the fmaf calls are the ones the CPU code makes too. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/kq_format.cuh"
#include "kernels/cuda/quant_act.cuh"

namespace {

constexpr int kThreads = 256;

/* Blocks for a grid-stride loop over n elements (n > 0): enough to fill the GPU. */
inline unsigned elt_blocks(int64_t n) {
    int64_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 8192 ? b : 8192);
}

/* Blocks over y of a 2-D launch (the kernels loop over the rest). */
inline unsigned y_blocks(int64_t rows) {
    return (unsigned)(rows < 65535 ? rows : 65535);
}

/* x-blocks of a 2-D launch over row width d (d > 0). */
inline unsigned x_blocks(int64_t d) {
    int64_t b = (d + kThreads - 1) / kThreads;
    return (unsigned)(b < 64 ? b : 64);
}

#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_fill(float *x, float v, int64_t n) {
    GRID_STRIDE(i, n) x[i] = v;
}

__global__ void k_add(float *x, const float *y, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void k_scale(float *x, float s, int64_t n) {
    ls::pdl::enter();
    GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], s);
}

/* x = (x + y * a) * b, the product and the sum rounded separately (backend.h). */
__global__ void k_axpby(float *x, const float *y, float a, float b, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __fmul_rn(__fadd_rn(x[i], __fmul_rn(y[i], a)), b);
}

/* tanh(x / cap) * cap: CUDA's tanhf (max 2 ulp) differs from glibc's in the last bits,
 * which is allowed across backends; within this backend it is one fixed function. */
__global__ void k_softcap(float *x, float cap, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __fmul_rn(tanhf(__fdiv_rn(x[i], cap)), cap);
}

/* ls_gelu_scalar (kernels/cpu/dot_f32.c) operation for operation: the same constants, the
 * same fmaf calls, every other product / sum / quotient rounded on its own. So the bits
 * equal the CPU backend's (its AVX2 path equals its scalar path). */
__device__ __forceinline__ float gelu_tanh(float x) {
    const float a = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    const float z = __fmul_rn(0.7978845608028654f, __fadd_rn(x, a));
    const float m0 = __fmul_rn(-2.0f, fabsf(z));
    const float m = m0 > -87.0f ? m0 : -87.0f; /* a NaN maps to -87, as on the CPU */
    const float n = __fsub_rn(__fadd_rn(__fmul_rn(m, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    float r = fmaf(n, -0.693359375f, m);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float e = __fadd_rn(fmaf(p, __fmul_rn(r, r), r), 1.0f);
    const float sc = __int_as_float(((int32_t)n + 127) << 23); /* n in [-126, 0] */
    e = m0 < -87.0f ? 0.0f : __fmul_rn(e, sc);
    const float t = __fdiv_rn(2.0f, __fadd_rn(1.0f, e));
    const float opt = z >= 0.0f ? t : __fmul_rn(t, e);
    return __fmul_rn(__fmul_rn(0.5f, x), opt);
}

__global__ void k_gelu_mul(float *g, const float *u, int64_t n) {
    GRID_STRIDE(i, n) g[i] = __fmul_rn(gelu_tanh(g[i]), u[i]);
}

/* gelu_mul and the quantization of its output (n % 32 == 0) for the integer matmul that
 * reads it next: a thread per quad, k_gelu_mul's element expression, then quant_quad. The
 * loop bound is rounded up to whole warps so that every lane of a warp runs the same
 * iterations (the shuffles); a group past the end is not live. */
template <bool IL>
__global__ void __launch_bounds__(kThreads) k_gelu_mul_q(float *g, const float *u, int64_t n, int8_t *xq,
                                                         ls::mmq::Meta *xm) {
    ls::pdl::enter();
    const int64_t nq = n / 4, bound = (nq + 31) / 32 * 32;
    for (int64_t qi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; qi < bound;
         qi += (int64_t)gridDim.x * blockDim.x) {
        const bool live = qi < nq;
        const int64_t qq = live ? qi : nq - 1;
        float e[4];
#pragma unroll
        for (int k = 0; k < 4; k++) e[k] = __fmul_rn(gelu_tanh(g[4 * qq + k]), u[4 * qq + k]);
        __syncwarp();
        if (live) {
#pragma unroll
            for (int k = 0; k < 4; k++) g[4 * qq + k] = e[k];
        }
        ls::mmq::quant_quad<IL>(make_float4(e[0], e[1], e[2], e[3]), (int)(qq % 8), live, xq, xm, qq / 8);
    }
}

/* gelu_mul and the K-quant quantization of its output (kq_format.cuh; n % 256 == 0, the rows
 * a whole number of superblocks, so superblock q of the flat output is (row, superblock)
 * q of the scratch): a warp per superblock, lane L its elements 8 L .. 8 L + 7, k_gelu_mul's
 * element expression. */
__global__ void __launch_bounds__(kThreads) k_gelu_mul_qk(float *g, const float *u, int64_t n, int8_t *codes,
                                                          ls::kq::KMeta *meta) {
    ls::pdl::enter();
    const int lane = threadIdx.x & 31;
    const int64_t nsb = n / ls::kq::SB, nw = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t sb = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; sb < nsb; sb += nw) {
        const int64_t base = ls::kq::SB * sb + 8 * lane;
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = __fmul_rn(gelu_tanh(g[base + e]), u[base + e]);
#pragma unroll
        for (int e = 0; e < 8; e++) g[base + e] = v[e];
        ls::kq::quant_sb(v, true, codes + ls::kq::SB * sb, meta + sb);
    }
}

/* f32 -> f16 round-to-nearest-even (the CPU's ls_f32_to_f16; NaN payloads may differ). */
__global__ void k_store_f16(__half *dst, const float *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = __float2half_rn(src[i]);
}

__global__ void k_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t width,
                            int64_t rows) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < width; i += (int64_t)gridDim.x * blockDim.x)
            dst[r * dst_stride + i] = src[r * src_stride + i];
}

/* x[r][i] = (x[r][i] * w[i]) * s */
__global__ void k_mul_rows(float *x, const float *w, float s, int64_t m, int64_t n) {
    for (int64_t r = blockIdx.y; r < m; r += gridDim.y)
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
            x[r * n + i] = __fmul_rn(__fmul_rn(x[r * n + i], w[i]), s);
}

__global__ void k_gather_rows(float *dst, const float *src, const int32_t *rows, int64_t cnt, int64_t d) {
    for (int64_t j = blockIdx.y; j < cnt; j += gridDim.y) {
        const float *s = src + (int64_t)rows[j] * d;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < d; i += (int64_t)gridDim.x * blockDim.x)
            dst[j * d + i] = s[i];
    }
}

/* acc[rows[j]][i] = acc[rows[j]][i] + y[j][i] * w[j]; rows[j] distinct within a call, so no
 * two threads touch one element (no atomics). */
__global__ void k_scatter_add(float *acc, const float *y, const int32_t *rows, const float *w, int64_t cnt, int64_t d) {
    for (int64_t j = blockIdx.y; j < cnt; j += gridDim.y) {
        float *a = acc + (int64_t)rows[j] * d;
        const float wj = w[j];
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < d; i += (int64_t)gridDim.x * blockDim.x)
            a[i] = __fadd_rn(a[i], __fmul_rn(y[j * d + i], wj));
    }
}

/* The block-wide sum of every thread's partial sum s of a 256-thread block: a fixed xor
 * butterfly per warp, then a fixed tree over the 8 warp sums. Thread t's s is the fmaf sum of
 * x[i]^2 over i = t, t + 256, ... in increasing i (each caller's loop), so the whole order
 * depends on the row length only, never on m. `red` is 8 floats of shared memory owned by
 * this call: a kernel reducing twice passes a second array (no barrier separates the last
 * reads of one reduction from the first writes of the next). Every thread gets the same bits. */
__device__ __forceinline__ float block_sum_sq(float s, float *red) {
    /* xor butterfly: both partners add the same two values (a + b == b + a), so every lane
     * ends with the same bits. */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    static_assert(kThreads / 32 == 8, "the warp tree below is written for 8 warps");
    return __fadd_rn(__fadd_rn(__fadd_rn(red[0], red[1]), __fadd_rn(red[2], red[3])),
                     __fadd_rn(__fadd_rn(red[4], red[5]), __fadd_rn(red[6], red[7])));
}

/* block_sum_sq for a block of TH threads: TH = 256 is block_sum_sq itself; TH = 1024 (32
 * warps) runs the xor butterfly twice, over each warp's lanes and then, in every warp alike,
 * over the 32 warp sums (lane l reads warp l's): a fixed order of the row length alone, every
 * thread ends with the same bits, one barrier. */
template <int TH>
__device__ __forceinline__ float block_sum_sq_t(float s, float *red) {
    if constexpr (TH == kThreads) {
        return block_sum_sq(s, red);
    } else {
        static_assert(TH == 1024, "a block of 256 or 1024 threads");
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
        __syncthreads();
        float v = red[threadIdx.x & 31];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
        return v;
    }
}

/* The CPU's formula: scale = 1 / sqrt(ss / n + eps). */
__device__ __forceinline__ float rms_scale(float ss, int64_t n, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
}

/* One normed element: (x * scale) * w, or x * scale without a weight. */
__device__ __forceinline__ float rms_elt(float x, float scale, const float *w, int64_t i) {
    return w ? __fmul_rn(__fmul_rn(x, scale), w[i]) : __fmul_rn(x, scale);
}

/* One block per row: dst = src / sqrt(mean(src^2) + eps) * w. In place (rmsnorm) when dst ==
 * src: every thread reads all its elements before the barrier inside block_sum_sq_t and then
 * writes only its own. rmsnorm and rmsnorm_to are this one kernel. TH threads: 1024 for a
 * wide_row, else 256, a function of the row length alone, which add_rmsnorm's kernels follow
 * too (backend.h: its bits are those of the rmsnorm / add / scale sequence). */
template <int TH>
__global__ void __launch_bounds__(TH)
    k_rmsnorm(float *dst, const float *src, const float *w, int64_t n, float eps) {
    ls::pdl::enter();
    const float *in = src + (int64_t)blockIdx.x * n;
    float *out = dst + (int64_t)blockIdx.x * n;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += TH) s = fmaf(in[i], in[i], s);
    __shared__ float red[TH / 32];
    const float scale = rms_scale(block_sum_sq_t<TH>(s, red), n, eps);
    for (int64_t i = threadIdx.x; i < n; i += TH) out[i] = rms_elt(in[i], scale, w, i);
}

/* Whether a row's norm takes 1024 threads (here and in add_rmsnorm's kernels) instead of 256:
 * rows wider than 1024 (a 27B / 31B model's 5376: a thread's chain of loads and fmaf a quarter
 * as long; with 256 the one-row add_rmsnorm took 7.4-7.9 us of a 31B layer's ~178, H200,
 * docs/benchmarks.md session 13). A function of the row length alone. */
inline bool wide_row(int64_t n) {
    return n > 4 * kThreads;
}
template <class... A>
cudaError_t launch_rmsnorm(cudaStream_t st, unsigned m, int64_t n, A... a) {
    return wide_row(n) ? ls::pdl::launch(k_rmsnorm<1024>, m, 1024, 0, st, a...)
                    : ls::pdl::launch(k_rmsnorm<kThreads>, m, kThreads, 0, st, a...);
}

/* add_rmsnorm, one block per row: t' = rmsnorm_{w_post}(t) (k_rmsnorm's element), x = x + t'
 * (k_add's), x = x * s when s != 1 (k_scale's), then, with xn, xn = rmsnorm_{w_pre}(x)
 * (k_rmsnorm's again). The second sum of squares is taken while x is written: thread t
 * visits i = t, t + TH, ... in increasing order there, exactly k_rmsnorm's loop over the
 * finished x. t is only read. */
/* Quantization of a finished row of n elements (n % 32 == 0) for the integer matmul that
 * reads it next (quant_act.cuh), by a whole block of TH threads: thread t takes quads t,
 * t + TH, .. of the row, so the 8 quads of a block sit on 8 consecutive lanes. The row
 * was written by this block (a barrier comes first) and is read with ordinary loads. */
template <bool IL, int TH = kThreads>
__device__ __forceinline__ void quant_row(const float *row, int64_t n, int64_t blk0, int8_t *xq, ls::mmq::Meta *xm) {
    __syncthreads();
    const int64_t nq = n / 4;
    for (int64_t base = 0; base < nq; base += TH) {
        const int64_t qi = base + threadIdx.x;
        const bool live = qi < nq;
        const int64_t qq = live ? qi : nq - 1;
        const float4 v = make_float4(row[4 * qq], row[4 * qq + 1], row[4 * qq + 2], row[4 * qq + 3]);
        ls::mmq::quant_quad<IL>(v, (int)(qq % 8), live, xq, xm, blk0 + qq / 8);
    }
}

/* The same for the K-quant format (kq_format.cuh; n % 256 == 0): the block's warps take the
 * row's superblocks in turn, lane L elements 8 L .. 8 L + 7, kq_vec.cu's quantization. */
template <int TH>
__device__ __forceinline__ void quant_row_k(const float *row, int64_t n, int64_t r, int8_t *codes,
                                            ls::kq::KMeta *meta) {
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nsb = n / ls::kq::SB;
    for (int64_t sb = warp; sb < nsb; sb += TH / 32) {
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = row[ls::kq::SB * sb + 8 * lane + e];
        ls::kq::quant_sb(v, true, codes + r * n + ls::kq::SB * sb, meta + r * nsb + sb);
    }
}

/* Q: 0 none, 1 the plain planes, 2 the MLX 4-bit nibble order (quant_act.cuh), 3 the
 * K-quant format (xm then points at its KMeta array). */
template <int Q, int TH>
__global__ void __launch_bounds__(TH)
    k_add_rmsnorm(float *x, const float *t, const float *w_post, float s, float *xn, const float *w_pre, int64_t n,
                  float eps, int8_t *xq, ls::mmq::Meta *xm) {
    ls::pdl::enter();
    const int64_t off = (int64_t)blockIdx.x * n;
    float *xr = x + off;
    const float *tr = t + off;
    __shared__ float red1[TH / 32], red2[TH / 32];
    float a = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += TH) a = fmaf(tr[i], tr[i], a);
    const float sc1 = rms_scale(block_sum_sq_t<TH>(a, red1), n, eps);
    float b = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += TH) {
        float v = __fadd_rn(xr[i], rms_elt(tr[i], sc1, w_post, i));
        if (s != 1.0f) v = __fmul_rn(v, s);
        xr[i] = v;
        b = fmaf(v, v, b);
    }
    if (!xn) return; /* the same for every thread of the block: no barrier is skipped by some only */
    const float sc2 = rms_scale(block_sum_sq_t<TH>(b, red2), n, eps);
    float *o = xn + off;
    for (int64_t i = threadIdx.x; i < n; i += TH) o[i] = rms_elt(xr[i], sc2, w_pre, i); /* own writes */
    if (Q == 3) quant_row_k<TH>(o, n, blockIdx.x, xq, reinterpret_cast<ls::kq::KMeta *>(xm));
    else if (Q) quant_row<Q == 2, TH>(o, n, (int64_t)blockIdx.x * (n / 32), xq, xm);
}

/* k_add_rmsnorm for rows of n <= NPT * TH, latency-shaped: a decode step runs it on one
 * row, one block, so its time is the chain of memory round trips between its phases. Here
 * every input element a thread owns (t, x, both norm weights) is loaded at the start, the
 * finished x is kept in registers instead of re-read, and the normed row goes to shared
 * memory for the quantization. With TH = 256 the arithmetic is k_add_rmsnorm's, element for
 * element and in the same order (thread t visits i = t, t + 256, .. in increasing i). A
 * wide_row takes TH = 1024: the sums of squares then follow block_sum_sq_t's order for 1024
 * threads, k_rmsnorm<1024>'s, the same for every row count. */
template <int Q, int NPT, int TH = kThreads>
__global__ void __launch_bounds__(TH)
    k_add_rmsnorm_r(float *x, const float *t, const float *w_post, float s, float *xn, const float *w_pre, int64_t n,
                    float eps, int8_t *xq, ls::mmq::Meta *xm) {
    /* The norm weights are weights (pdl.cuh: readable before the wait): requested first, so
     * their cold reads overlap the predecessor's tail instead of following it. */
    float tv[NPT], xv[NPT], wa[NPT], wb[NPT];
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * TH;
        wa[k] = i < n && w_post ? __ldg(w_post + i) : 0.0f;
        wb[k] = i < n && xn && w_pre ? __ldg(w_pre + i) : 0.0f;
    }
    ls::pdl::enter();
    extern __shared__ float srow[]; /* the normed row, when Q */
    const int64_t off = (int64_t)blockIdx.x * n;
    float *xr = x + off;
    const float *tr = t + off;
    __shared__ float red1[TH / 32], red2[TH / 32];
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * TH;
        tv[k] = i < n ? tr[i] : 0.0f;
        xv[k] = i < n ? xr[i] : 0.0f;
    }
    float a = 0.0f;
#pragma unroll
    for (int k = 0; k < NPT; k++)
        if (threadIdx.x + (int64_t)k * TH < n) a = fmaf(tv[k], tv[k], a);
    const float sc1 = rms_scale(block_sum_sq_t<TH>(a, red1), n, eps);
    float b = 0.0f;
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * TH;
        if (i >= n) continue;
        const float e = w_post ? __fmul_rn(__fmul_rn(tv[k], sc1), wa[k]) : __fmul_rn(tv[k], sc1);
        float v = __fadd_rn(xv[k], e);
        if (s != 1.0f) v = __fmul_rn(v, s);
        xr[i] = v;
        xv[k] = v;
        b = fmaf(v, v, b);
    }
    if (!xn) return; /* the same for every thread of the block */
    const float sc2 = rms_scale(block_sum_sq_t<TH>(b, red2), n, eps);
    float *o = xn + off;
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * TH;
        if (i >= n) continue;
        const float v = w_pre ? __fmul_rn(__fmul_rn(xv[k], sc2), wb[k]) : __fmul_rn(xv[k], sc2);
        o[i] = v;
        if (Q) srow[i] = v;
    }
    if (Q == 3) quant_row_k<TH>(srow, n, blockIdx.x, xq, reinterpret_cast<ls::kq::KMeta *>(xm));
    else if (Q) quant_row<Q == 2, TH>(srow, n, (int64_t)blockIdx.x * (n / 32), xq, xm);
}

/* The add_rmsnorm launch: the register-resident kernel when a row fits (n <= 6144: every
 * Gemma width this engine runs; 1024 threads above 1024), else the general one. Q as in
 * k_add_rmsnorm. */
template <int Q>
void launch_add_rmsnorm(cudaStream_t st, float *x, const float *t, const float *w_post, float s, float *xn,
                        const float *w_pre, int64_t m, int64_t n, float eps, int8_t *xq, ls::mmq::Meta *xm) {
    const size_t sm = Q ? sizeof(float) * (size_t)n : 0;
    if (!wide_row(n))
        LSC_CHECK(ls::pdl::launch(k_add_rmsnorm_r<Q, 4>, (unsigned)m, kThreads, sm, st, x, t, w_post, s, xn, w_pre, n, eps, xq, xm));
    else if (n <= 6 * 1024)
        LSC_CHECK(ls::pdl::launch(k_add_rmsnorm_r<Q, 6, 1024>, (unsigned)m, 1024, sm, st, x, t, w_post, s, xn, w_pre, n, eps, xq, xm));
    else
        LSC_CHECK(ls::pdl::launch(k_add_rmsnorm<Q, 1024>, (unsigned)m, 1024, 0, st, x, t, w_post, s, xn, w_pre, n, eps, xq, xm));
}

/* One block per row. Angles as kernels/cpu/rope.c builds them: inverse frequency
 * (float)pow((double)theta, -2.0 * j / (double)hd) * freq_scale (f32 product), angle
 * (double)pos * (double)invf in double, cos / sin in double rounded to float. The
 * rotation is two rounded products and a rounded sum / difference, as on the CPU. CUDA's
 * double pow / sincos differ from glibc's by an ulp of a double at most, which almost never
 * shows after rounding to float (accuracy, not exactness, is what holds across backends). */
constexpr int kRopeThreads = 128;

/* cos and sin of pair j's angle at position p. Not inlined on purpose: k_rope_pairs and
 * k_norm_rope call this one compiled function, so their angles cannot differ by how nvcc
 * contracted or scheduled the double pow / sincos inlined into two kernels. */
__device__ __noinline__ float2 rope_angle(double p, int32_t j, int32_t hd, float theta_base, float freq_scale) {
    const float invf = __fmul_rn((float)pow((double)theta_base, -2.0 * j / (double)hd), freq_scale);
    double s, c;
    sincos(p * (double)invf, &s, &c);
    return make_float2((float)c, (float)s);
}

__global__ void __launch_bounds__(kRopeThreads)
    k_rope_pairs(float *x, int32_t n_heads, int32_t hd, int32_t n_pairs, const int32_t *pos, float theta_base,
                 float freq_scale) {
    __shared__ float cs[512], sn[512];
    const int64_t r = blockIdx.x;
    const double p = (double)pos[r];
    for (int32_t j = threadIdx.x; j < n_pairs; j += kRopeThreads) {
        const float2 a = rope_angle(p, j, hd, theta_base, freq_scale);
        cs[j] = a.x;
        sn[j] = a.y;
    }
    __syncthreads();
    const int32_t half = hd / 2;
    float *xr = x + r * n_heads * (int64_t)hd;
    const int64_t total = (int64_t)n_heads * n_pairs;
    for (int64_t t = threadIdx.x; t < total; t += kRopeThreads) {
        const int32_t h = (int32_t)(t / n_pairs), j = (int32_t)(t % n_pairs);
        float *v = xr + (int64_t)h * hd;
        const float a = v[j], b = v[j + half];
        v[j] = __fsub_rn(__fmul_rn(a, cs[j]), __fmul_rn(b, sn[j]));
        v[j + half] = __fadd_rn(__fmul_rn(b, cs[j]), __fmul_rn(a, sn[j]));
    }
}

/* norm_rope, one 256-thread block per (row, head) (blockIdx.x = row * n_heads + head, the
 * row index k_rmsnorm gets for m * n_heads rows of hd): the head is normed as k_rmsnorm does
 * into shared memory, then rotated as k_rope_pairs does. hd <= kMaxHd (ls_cuda_rope_pairs' limit:
 * hd / 2 <= 512, hd even). */
constexpr int kMaxHd = 1024;

/* Two tensors of one step's rows (q and k heads) can share a launch: blocks [0, nb0) are
 * the first's (x, w, n_heads), the next m * n_heads2 the second's (x2, w2, n_heads2); a
 * block's work is the same either way. With x3 (Gemma 4's value norm: rows of hd, no
 * weight, no RoPE) the next m * n_heads3 blocks norm x3's heads, as k_rmsnorm does. With kv
 * (a device slot {dk, dv} of f16 or f32 caches), the launch also does the kv_store2 that
 * follows (k_store2_f16's conversion or the f32 bytes, element for element): the second
 * tensor's blocks store their finished k rows, x3's blocks their normed v rows, and without
 * x3 blocks from nbv on store the nv elements of v. */
struct NormRope {
    float *x;
    const float *w;
    int32_t n_heads;
    int64_t nb0;
    float *x2;
    const float *w2;
    int32_t n_heads2;
    int64_t nbk;
    float *x3;
    int32_t n_heads3;
    int64_t nbv;
    void *const *kv;
    bool f32;
    const float *v;
    int64_t nv;
    int32_t hd;
    float eps;
    int32_t n_pairs;
    const int32_t *pos;
    float theta_base, freq_scale;
};

/* element i of a cache row: f16 (round to nearest even) or the f32 bytes */
__device__ __forceinline__ void kv_put(void *dst, bool f32, int64_t i, float v) {
    if (f32) static_cast<float *>(dst)[i] = v;
    else static_cast<__half *>(dst)[i] = __float2half_rn(v);
}

__global__ void __launch_bounds__(kThreads) k_norm_rope(const NormRope j) {
    ls::pdl::enter();
    __shared__ float red[kThreads / 32];
    __shared__ float v[kMaxHd], cs[kMaxHd / 2], sn[kMaxHd / 2];
    int64_t row = blockIdx.x;
    if (j.kv && row >= j.nbv) { /* a v-store block (uniform over the block) */
        for (int64_t i = (row - j.nbv) * kThreads + threadIdx.x; i < j.nv; i += (gridDim.x - j.nbv) * kThreads)
            kv_put(j.kv[1], j.f32, i, j.v[i]);
        return;
    }
    float *x = j.x;
    const float *w = j.w;
    int32_t n_heads = j.n_heads;
    void *dst = nullptr;
    bool rope = true;
    if (row >= j.nbk) { /* uniform over the block */
        row -= j.nbk;
        x = j.x3;
        w = nullptr;
        n_heads = j.n_heads3;
        rope = false;
        if (j.kv) dst = j.kv[1];
    } else if (row >= j.nb0) {
        row -= j.nb0;
        x = j.x2;
        w = j.w2;
        n_heads = j.n_heads2;
        if (j.kv) dst = j.kv[0];
    }
    const int32_t hd = j.hd, n_pairs = rope ? j.n_pairs : 0;
    float *xr = x + row * (int64_t)hd;
    /* the head's loads first, then the angles: their double pow / sincos chain does not
     * depend on x, so it runs while the loads are in flight (same values, same order) */
    constexpr int NE = kMaxHd / kThreads;
    float xv[NE];
#pragma unroll
    for (int k = 0; k < NE; k++) {
        const int32_t i = threadIdx.x + k * kThreads;
        xv[k] = i < hd ? xr[i] : 0.0f;
    }
    if (rope) {
        const double p = (double)j.pos[row / n_heads];
        for (int32_t k = threadIdx.x; k < n_pairs; k += kThreads) {
            const float2 a = rope_angle(p, k, hd, j.theta_base, j.freq_scale);
            cs[k] = a.x;
            sn[k] = a.y;
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NE; k++)
        if (threadIdx.x + k * kThreads < hd) s = fmaf(xv[k], xv[k], s);
    const float scale = rms_scale(block_sum_sq(s, red), hd, j.eps);
#pragma unroll
    for (int k = 0; k < NE; k++) {
        const int32_t i = threadIdx.x + k * kThreads;
        if (i < hd) v[i] = rms_elt(xv[k], scale, w, i);
    }
    __syncthreads();
    const int32_t half = hd / 2;
    for (int32_t i = threadIdx.x; i < hd; i += kThreads) {
        float o = v[i]; /* pairs k >= n_pairs (and an odd hd's middle element) stay as normed */
        if (i < half) {
            if (i < n_pairs) o = __fsub_rn(__fmul_rn(v[i], cs[i]), __fmul_rn(v[i + half], sn[i]));
        } else {
            const int32_t k = i - half;
            if (k < n_pairs) o = __fadd_rn(__fmul_rn(v[i], cs[k]), __fmul_rn(v[k], sn[k]));
        }
        xr[i] = o;
        if (dst) kv_put(dst, j.f32, row * (int64_t)hd + i, o);
    }
}

/* kv_store2: k_store_f16's conversion for both caches in one grid. */
__global__ void k_store2_f16(void *const *dst, const float *k, const float *v, int64_t n) {
    ls::pdl::enter();
    __half *dk = (__half *)dst[0], *dv = (__half *)dst[1];
    GRID_STRIDE(i, n) {
        dk[i] = __float2half_rn(k[i]);
        dv[i] = __float2half_rn(v[i]);
    }
}

/* kv_store2 into f32 caches: the bytes, as the two cudaMemcpyAsync of kv_store copy them
 * (32-bit words moved through registers, never through a float operation). */
__global__ void k_copy2_u32(void *const *dst, const uint32_t *k, const uint32_t *v, int64_t n) {
    ls::pdl::enter();
    uint32_t *dk = (uint32_t *)dst[0], *dv = (uint32_t *)dst[1];
    GRID_STRIDE(i, n) {
        dk[i] = k[i];
        dv[i] = v[i];
    }
}

} // namespace

void ls_cuda_fill(cudaStream_t st, float *x, float v, int64_t n) {
    if (n <= 0) return;
    k_fill<<<elt_blocks(n), kThreads, 0, st>>>(x, v, n);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_copy_rows(cudaStream_t st, float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t width,
                   int64_t rows) {
    if (rows <= 0 || width <= 0) return;
    k_copy_rows<<<dim3(x_blocks(width), y_blocks(rows)), kThreads, 0, st>>>(dst, dst_stride, src, src_stride, width,
                                                                             rows);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_rmsnorm(cudaStream_t st, float *x, const float *w, int64_t m, int64_t n, float eps) {
    if (m <= 0 || n <= 0) return;
    LSC_REQUIRE(m <= INT32_MAX);
    LSC_CHECK(launch_rmsnorm(st, (unsigned)m, n, x, (const float *)x, w, n, eps));
    LSC_CHECK_LAUNCH();
}

void ls_cuda_rmsnorm_to(cudaStream_t st, float *dst, const float *src, const float *w, int64_t m, int64_t n, float eps) {
    if (m <= 0 || n <= 0) return;
    LSC_REQUIRE(m <= INT32_MAX);
    LSC_CHECK(launch_rmsnorm(st, (unsigned)m, n, dst, src, w, n, eps));
    LSC_CHECK_LAUNCH();
}

void ls_cuda_add_rmsnorm(cudaStream_t st, float *x, const float *t, const float *w_post, float s, float *xn,
                     const float *w_pre, int64_t m, int64_t n, float eps) {
    if (m <= 0 || n <= 0) return;
    LSC_REQUIRE(m <= INT32_MAX);
    launch_add_rmsnorm<0>(st, x, t, w_post, s, xn, w_pre, m, n, eps, nullptr, nullptr);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_add_rmsnorm_q(cudaStream_t st, float *x, const float *t, const float *w_post, float s, float *xn,
                           const float *w_pre, int64_t m, int64_t n, float eps, void *scratch, int layout) {
    if (m <= 0 || n <= 0) return;
    LSC_REQUIRE(m <= INT32_MAX && xn && n % 32 == 0 && layout >= 0 && layout <= 2 && (layout != 2 || n % 256 == 0));
    int8_t *xq = (int8_t *)scratch;
    ls::mmq::Meta *xm = ls::mmq::meta_of(scratch, m * n);
    if (layout == 2)
        launch_add_rmsnorm<3>(st, x, t, w_post, s, xn, w_pre, m, n, eps, xq,
                              reinterpret_cast<ls::mmq::Meta *>(ls::kq::meta_of(scratch, m, n)));
    else if (layout == 1)
        launch_add_rmsnorm<2>(st, x, t, w_post, s, xn, w_pre, m, n, eps, xq, xm);
    else
        launch_add_rmsnorm<1>(st, x, t, w_post, s, xn, w_pre, m, n, eps, xq, xm);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_gelu_mul_q(cudaStream_t st, float *gate, const float *up, int64_t n, void *scratch, int layout) {
    if (n <= 0) return;
    LSC_REQUIRE(n % 32 == 0 && layout >= 0 && layout <= 2 && (layout != 2 || n % 256 == 0));
    int8_t *xq = (int8_t *)scratch;
    ls::mmq::Meta *xm = ls::mmq::meta_of(scratch, n);
    const unsigned blocks = elt_blocks(n / 4);
    if (layout == 2) /* the scratch as one row of n: its superblocks are the rows' in order */
        LSC_CHECK(ls::pdl::launch(k_gelu_mul_qk, elt_blocks(n / 8), kThreads, 0, st, gate, up, n, xq,
                                  ls::kq::meta_of(scratch, 1, n)));
    else if (layout == 1)
        LSC_CHECK(ls::pdl::launch(k_gelu_mul_q<true>, blocks, kThreads, 0, st, gate, up, n, xq, xm));
    else
        LSC_CHECK(ls::pdl::launch(k_gelu_mul_q<false>, blocks, kThreads, 0, st, gate, up, n, xq, xm));
    LSC_CHECK_LAUNCH();
}

void ls_cuda_norm_rope(cudaStream_t st, float *x, const float *w, int64_t m, int32_t n_heads, int32_t hd, float eps,
                   int32_t n_pairs, const int32_t *pos, float theta_base, float freq_scale) {
    if (m <= 0 || n_heads <= 0 || hd <= 0) return;
    /* no rotated pair: the rope op is a no-op, the sequence is the norm alone */
    if (n_pairs <= 0) return ls_cuda_rmsnorm(st, x, w, m * n_heads, hd, eps);
    LSC_REQUIRE(hd % 2 == 0 && hd <= kMaxHd && n_pairs <= hd / 2 && m * n_heads <= INT32_MAX);
    NormRope j{};
    j.x = x, j.w = w, j.n_heads = n_heads;
    j.nb0 = j.nbk = j.nbv = m * n_heads; /* no second tensor, no value norm, no store */
    j.hd = hd, j.eps = eps, j.n_pairs = n_pairs, j.pos = pos, j.theta_base = theta_base, j.freq_scale = freq_scale;
    LSC_CHECK(ls::pdl::launch(k_norm_rope, (unsigned)(m * n_heads), kThreads, 0, st, j));
    LSC_CHECK_LAUNCH();
}

void ls_cuda_norm_rope2(cudaStream_t st, float *x, const float *w, int32_t n_heads, float *x2, const float *w2,
                        int32_t n_heads2, float *x3, int32_t n_heads3, int64_t m, int32_t hd, float eps,
                        int32_t n_pairs, const int32_t *pos, float theta_base, float freq_scale, void *const *kv,
                        bool f32, const float *v, int64_t nv) {
    if (m <= 0 || n_heads <= 0 || n_heads2 <= 0 || hd <= 0) return;
    LSC_REQUIRE(n_pairs > 0 && hd % 2 == 0 && hd <= kMaxHd && n_pairs <= hd / 2 && (!x3 || n_heads3 > 0) &&
                m * ((int64_t)n_heads + n_heads2 + (x3 ? n_heads3 : 0)) <= INT32_MAX / 2);
    LSC_REQUIRE(!(x3 && kv) || (v == x3 && nv == m * n_heads3 * (int64_t)hd));
    const int64_t nbk = m * ((int64_t)n_heads + n_heads2), nbv = nbk + (x3 ? m * n_heads3 : 0);
    const int64_t vb = kv && !x3 && nv > 0 ? std::min<int64_t>((nv + kThreads - 1) / kThreads, 256) : 0;
    NormRope j{};
    j.x = x, j.w = w, j.n_heads = n_heads, j.nb0 = m * n_heads;
    j.x2 = x2, j.w2 = w2, j.n_heads2 = n_heads2, j.nbk = nbk;
    j.x3 = x3, j.n_heads3 = x3 ? n_heads3 : 0, j.nbv = nbv;
    j.kv = vb || x3 ? kv : nullptr, j.f32 = f32, j.v = v, j.nv = nv;
    j.hd = hd, j.eps = eps, j.n_pairs = n_pairs, j.pos = pos, j.theta_base = theta_base, j.freq_scale = freq_scale;
    LSC_CHECK(ls::pdl::launch(k_norm_rope, (unsigned)(nbv + vb), kThreads, 0, st, j));
    LSC_CHECK_LAUNCH();
}

void ls_cuda_rope_pairs(cudaStream_t st, float *x, int64_t m, int32_t n_heads, int32_t hd, int32_t n_pairs,
                    const int32_t *pos, float theta_base, float freq_scale) {
    if (m <= 0 || n_heads <= 0 || n_pairs <= 0) return;
    LSC_REQUIRE(hd > 0 && hd % 2 == 0 && hd / 2 <= 512 && n_pairs <= hd / 2 && m <= INT32_MAX);
    k_rope_pairs<<<(unsigned)m, kRopeThreads, 0, st>>>(x, n_heads, hd, n_pairs, pos, theta_base, freq_scale);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_gelu_mul(cudaStream_t st, float *gate, const float *up, int64_t n) {
    if (n <= 0) return;
    k_gelu_mul<<<elt_blocks(n), kThreads, 0, st>>>(gate, up, n);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_add(cudaStream_t st, float *x, const float *y, int64_t n) {
    if (n <= 0) return;
    k_add<<<elt_blocks(n), kThreads, 0, st>>>(x, y, n);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_scale(cudaStream_t st, float *x, float s, int64_t n) {
    if (n <= 0) return;
    LSC_CHECK(ls::pdl::launch(k_scale, elt_blocks(n), kThreads, 0, st, x, s, n));
    LSC_CHECK_LAUNCH();
}

void ls_cuda_axpby(cudaStream_t st, float *x, const float *y, float a, float b, int64_t n) {
    if (n <= 0) return;
    k_axpby<<<elt_blocks(n), kThreads, 0, st>>>(x, y, a, b, n);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_mul_rows(cudaStream_t st, float *x, const float *w, float s, int64_t m, int64_t n) {
    if (m <= 0 || n <= 0) return;
    k_mul_rows<<<dim3(x_blocks(n), y_blocks(m)), kThreads, 0, st>>>(x, w, s, m, n);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_softcap(cudaStream_t st, float *x, float cap, int64_t n) {
    if (n <= 0) return;
    k_softcap<<<elt_blocks(n), kThreads, 0, st>>>(x, cap, n);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_kv_store(cudaStream_t st, void *dst, bool f32, const float *src, int64_t n) {
    if (n <= 0) return;
    if (f32) {
        LSC_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, st));
        return;
    }
    k_store_f16<<<elt_blocks(n), kThreads, 0, st>>>((__half *)dst, src, n);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_kv_store2(cudaStream_t st, void *const *dst, bool f32, const float *k, const float *v, int64_t n) {
    if (n <= 0) return;
    if (f32)
        LSC_CHECK(ls::pdl::launch(k_copy2_u32, elt_blocks(n), kThreads, 0, st, dst, (const uint32_t *)k, (const uint32_t *)v, n));
    else
        LSC_CHECK(ls::pdl::launch(k_store2_f16, elt_blocks(n), kThreads, 0, st, dst, k, v, n));
    LSC_CHECK_LAUNCH();
}

void ls_cuda_gather_rows(cudaStream_t st, float *dst, const float *src, const int32_t *rows, int64_t cnt, int64_t d) {
    if (cnt <= 0 || d <= 0) return;
    k_gather_rows<<<dim3(x_blocks(d), y_blocks(cnt)), kThreads, 0, st>>>(dst, src, rows, cnt, d);
    LSC_CHECK_LAUNCH();
}

void ls_cuda_scatter_add(cudaStream_t st, float *acc, const float *y, const int32_t *rows, const float *w, int64_t cnt,
                     int64_t d) {
    if (cnt <= 0 || d <= 0) return;
    k_scatter_add<<<dim3(x_blocks(d), y_blocks(cnt)), kThreads, 0, st>>>(acc, y, rows, w, cnt, d);
    LSC_CHECK_LAUNCH();
}
