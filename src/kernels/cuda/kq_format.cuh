/* The K-quant activation format and reduction order (kq_vec.cu, kq_tile.cu): Q4_K and Q6_K
 * weights meet 8-bit activations in superblocks of 256, and a superblock's integer sums are
 * folded into f32 once, not once per 32-element block. docs/cuda.md section 2a ("K-quants").
 *
 * Why: with the 16-bit two-plane format (mmq_common.cuh) a prefill-sized Q4_K call spends
 * ~58% of its main loop on the per-block f32 fold and twice the tensor-core work of one
 * plane; a 27B Q4_K_M pp512 ran at 0.54x of llama.cpp's CUDA backend (docs/benchmarks.md).
 * Q4_K / Q6_K scales are small integers within a superblock (6-bit sc and m; int8 Q6_K
 * scales), so with one activation scale per superblock the whole superblock reduces to two
 * exact integers: isc = sum_j sc_j S_j and im = sum_j m_j B_j.
 *
 * Activations, per row of K (a multiple of 256) elements, superblock c: exactly the CPU
 * backend's Q8_K (src/kernels/cpu/quant_act.c): max = the signed value of largest magnitude
 * (first on ties), iscale = -127 / max, q = min(127, round-half-even(iscale x)),
 * d = 1 / iscale, b16[j] = sum of q over elements 16 j .. 16 j + 15; an all-zero block
 * stores zeros. Scratch layout: the codes of all rows (row-major, K bytes a row), then one
 * KMeta per (row, superblock).
 *
 * Order, per output y[m][n], superblock c of weight row n with integers isc (and for Q4_K
 * im; both exact in int32: |isc| <= 15 127 32 63 8, |im| <= 63 4064 8), activation da:
 *   Q4_K: p = fmaf(da * d, (float)isc, p); p = fmaf(-(da * dmin), (float)im, p)
 *   Q6_K: p = fmaf(da * d, (float)isc, p)      (isc = sum over 16-element groups of
 *         sc_g sum (q - 32) a)
 * where p is the f32 of virtual lane u = c mod KQ_U, starting at 0, folding its superblocks
 * in increasing c; y = ((p0 + p1) + p2) + .. over the min(KQ_U, K / 256) lanes. How the
 * integers are formed (dp4a, mma, any split) is free; everything after them is this. */
#ifndef LS_KERNELS_CUDA_KQ_FORMAT_CUH
#define LS_KERNELS_CUDA_KQ_FORMAT_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/dequant.cuh"

namespace ls::kq {

constexpr int SB = 256; /* superblock: elements per activation scale */
constexpr int KQ_U = 8; /* virtual lanes of the order */

/* One (row, superblock) of activation metadata, 48 bytes: the 16-element code sums, d. */
struct KMeta {
    short b16[16];
    float d;
    float pad[3];
};
static_assert(sizeof(KMeta) == 48, "KMeta");

__host__ __device__ inline size_t codes_bytes(int64_t rows, int64_t K) {
    return (size_t)rows * (size_t)K;
}
__host__ __device__ inline size_t scratch_bytes(int64_t rows, int64_t K) {
    return codes_bytes(rows, K) + (size_t)rows * (size_t)(K / SB) * sizeof(KMeta);
}
__host__ __device__ inline KMeta *meta_of(void *scratch, int64_t rows, int64_t K) {
    return (KMeta *)((char *)scratch + codes_bytes(rows, K));
}

/* The f32 steps of one superblock (the order above): one definition for every kernel. */
__device__ __forceinline__ float fold_q4k(float p, float da, float d, float dmin, int isc, int im) {
    p = fmaf(da * d, (float)isc, p);
    return fmaf(-(da * dmin), (float)im, p);
}
__device__ __forceinline__ float fold_q6k(float p, float da, float d, int isc) {
    return fmaf(da * d, (float)isc, p);
}

/* Quantize superblock c of a row: a warp, lane L holding elements 8 L .. 8 L + 7 in v[8].
 * Every lane takes part; `live` false writes nothing (a warp past the end). */
__device__ __forceinline__ void quant_sb(const float (&v)[8], bool live, int8_t *__restrict__ codes,
                                         KMeta *__restrict__ meta) {
    const int lane = threadIdx.x & 31;
    /* the first element of largest magnitude: in index order within the lane (strictly
     * greater, as the CPU's scan), then across lanes by (magnitude, lower index) */
    float amax = 0.0f, mx = 0.0f;
    int idx = 0x7fffffff;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float ax = fabsf(v[e]);
        if (ax > amax) {
            amax = ax;
            mx = v[e];
            idx = 8 * lane + e;
        }
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o);
        const float om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) {
            amax = oa;
            mx = om;
            idx = oi;
        }
    }
    uint32_t w[2] = {0u, 0u};
    int s = 0;
    float d = 0.0f;
    if (amax != 0.0f) {
        const float iscale = __fdiv_rn(-127.0f, mx);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            int q = __float2int_rn(__fmul_rn(iscale, v[e]));
            q = q < 127 ? q : 127;
            s += q;
            w[e >> 2] |= (uint32_t)(uint8_t)(int8_t)q << (8 * (e & 3));
        }
        d = __fdiv_rn(1.0f, iscale);
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1); /* lanes 2j, 2j + 1: elements 16 j .. 16 j + 15 */
    if (!live) return;
    *reinterpret_cast<uint2 *>(codes + 8 * lane) = make_uint2(w[0], w[1]);
    if ((lane & 1) == 0) meta->b16[lane >> 1] = (short)s;
    if (lane == 0) {
        meta->d = d;
        meta->pad[0] = meta->pad[1] = meta->pad[2] = 0.0f;
    }
}

} // namespace ls::kq

namespace ls::mmq {
/* kq_vec.cu: y[M][N] = W x for a Q4_K (key LS_TYPE_Q4_K) or Q6_K weight in the K-quant
 * format; quantizes x into scratch unless act_ready. Returns 0, or -1 when nothing was
 * launched. */
int kq_launch(cudaStream_t st, int key, const ls::q::Ctx &c, const float *x, int64_t M, float *y, void *scratch,
              size_t scratch_bytes, bool act_ready, int policy);
/* kq_tile.cu: the prefill-sized calls (tensor-core tiles), activations already quantized */
int kq_tile_launch(cudaStream_t st, int key, const ls::q::Ctx &c, const int8_t *xq, const ls::kq::KMeta *xm,
                   float *y, int64_t M);
bool kq_use_tile(int64_t M, int64_t N);
/* kq_small.cu: Q4_K / Q6_K calls of 1..16 rows by tensor cores (the shape sends 2..16 there) */
int kq_small_launch(cudaStream_t st, int key, const ls::q::Ctx &c, const int8_t *xq, const ls::kq::KMeta *xm,
                    float *y, int64_t M);
} // namespace ls::mmq

#endif
