/* The integer matmul's activation quantization of one quad (4 consecutive elements) of a
 * 32-element block (mmq.cu states the format: dx, the two int8 planes, X, V0, V1). One
 * definition for every kernel that writes the format: mmq.cu's own quantization launch and
 * the row-wise ops that quantize the activations they produce (rowwise.cu: add_rmsnorm and
 * gelu_mul, when the backend knows an integer matmul reads their output next). The bytes
 * written depend on the block's 32 values only, so a fused producer and the separate
 * launch leave the scratch byte for byte the same.
 *
 * Calling convention: the 8 quads of a block are held by 8 consecutive lanes of a warp,
 * lane j (= lane & 7) holding quad j, and every lane of the warp calls this together (the
 * xor shuffles span the 8-lane group: fixed order, every lane ends with the same bits).
 * `live` false: the lane's group is past the end (all 8 lanes alike); it takes part in the
 * shuffles and writes nothing. */
#ifndef LS_KERNELS_CUDA_QUANT_ACT_CUH
#define LS_KERNELS_CUDA_QUANT_ACT_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/mmq_common.cuh"

namespace ls::mmq {

constexpr float QMAX = 32639.0f; /* |v| <= 32639 keeps h = (v + 128) >> 8 in [-127, 127] */

/* Position of block element e (0..31) in its planes. IL: the MLX 4-bit nibble order. */
template <bool IL> __device__ __forceinline__ int plane_pos(int e) {
    if (!IL) return e;
    const int g = e >> 3, i = e & 7;
    return 8 * g + (i & 1) * 4 + (i >> 1);
}

/* Quad j of block `blk`: v its four values, ob / xm the scratch planes and metadata. */
template <bool IL>
__device__ __forceinline__ void quant_quad(float4 v, int j, bool live, int8_t *__restrict__ xq, Meta *__restrict__ xm,
                                           int64_t blk) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    float s = ((v.x + v.y) + v.z) + v.w;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        s = s + __shfl_xor_sync(0xffffffffu, s, o);
    }
    /* A non-finite block makes its outputs NaN (dx = NaN, codes 0), as f32 math would. */
    const bool fin = isfinite(amax);
    const float inv = (fin && amax > 0.0f) ? QMAX / amax : 0.0f;
    const float dx = fin ? amax / QMAX : __int_as_float(0x7fc00000);
    const float e4[4] = {v.x, v.y, v.z, v.w};
    int isum = 0;
    int8_t h[4], l[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        int q = __float2int_rn(e4[e] * inv);
        q = q > 32639 ? 32639 : q < -32639 ? -32639 : q;
        const int hh = (q + 128) >> 8;
        h[e] = (int8_t)hh;
        l[e] = (int8_t)(q - 256 * hh);
        isum += q;
    }
    isum += __shfl_xor_sync(0xffffffffu, isum, 1);
    isum += __shfl_xor_sync(0xffffffffu, isum, 2);
    const int other = __shfl_xor_sync(0xffffffffu, isum, 4); /* the other half's sum */
    if (!live) return;
    int8_t *ob = xq + blk * XB_BYTES;
    if (!IL) {
        uint32_t hw = 0, lw = 0;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            hw |= (uint32_t)(uint8_t)h[e] << (8 * e);
            lw |= (uint32_t)(uint8_t)l[e] << (8 * e);
        }
        *reinterpret_cast<uint32_t *>(ob + 4 * j) = hw;
        *reinterpret_cast<uint32_t *>(ob + QB + 4 * j) = lw;
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int p = plane_pos<true>(4 * j + e);
            ob[p] = h[e];
            ob[QB + p] = l[e];
        }
    }
    if (j == 0) xm[blk] = Meta{dx, s, isum, other};
}

/* Where the metadata of `total` quantized elements starts in a scratch (mmq.cu's layout:
 * all planes, then all metadata). */
__host__ __device__ inline Meta *meta_of(void *scratch, int64_t total) {
    return (Meta *)((char *)scratch + (size_t)(total / QB) * XB_BYTES);
}

} // namespace ls::mmq

#endif
