/* The K-quant integer matmul for calls of any row count (kq_format.cuh states the format
 * and the order), its activation quantization, and the host side that picks between it and
 * the tensor-core tiles of kq_tile.cu. docs/cuda.md section 2a ("K-quants").
 *
 * A warp owns VW weight rows and a tile of up to RT activation rows; its lanes form KQ_U = 8
 * groups of 4, group g being the order's virtual lane g: it takes superblocks g, g + 8, ..
 * in increasing order, lane l4 of the group the 64 elements 64 l4 .. 64 l4 + 63 (Q4_K: the
 * 32 code bytes of sub-blocks 2 l4 and 2 l4 + 1; Q6_K: one quarter of a half). The group's
 * four integer partials are added by xor shuffles (exact), every lane of the group folds the
 * superblock into its copy of the lane's f32, and one thread per output adds the 8 lanes'
 * partials in order from shared memory. The first superblock's weights are requested before
 * the grid dependency wait: weights are never written by a step (pdl.cuh). */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/kq_format.cuh"
#include "kernels/cuda/pdl.cuh"

namespace {

using namespace ls::q;
using ls::kq::KMeta;
using ls::kq::KQ_U;
using ls::kq::SB;

constexpr int VWARPS = 4; /* warps per block */


/* Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]} (144 B): lane l4 takes qs[32 l4 .. + 32],
 * sub-block 2 l4 in the low nibbles, 2 l4 + 1 in the high ones. */
struct KQ4 {
    static constexpr int D2 = 32; /* the lane's 64 elements are contiguous */
    static __device__ __forceinline__ int e0(int l4) { return 64 * l4; }
    static constexpr int VW = 4;
    struct Raw {
        uint32_t h[4], q[8];
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &c, const uint8_t *row, int sb, int l4) {
        const uint8_t *b = row + 144 * (size_t)sb;
        ld16(r.h, b, c.a16);
        ldw16(r.q, b + 16 + 32 * l4, c.a16);
        ldw16(r.q + 4, b + 32 + 32 * l4, c.a16);
    }
    /* codes unpacked once per row, the scales and mins of the lane's two sub-blocks */
    struct Prep {
        uint32_t u[16];
        int sc0, sc1, m0, m1;
        float d, dmin;
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, int l4) {
#pragma unroll
        for (int w = 0; w < 8; w++) {
            p.u[w] = r.q[w] & 0x0f0f0f0fu;
            p.u[8 + w] = (r.q[w] >> 4) & 0x0f0f0f0fu;
        }
        uint32_t sc, mn;
        k4_pair(r.h[1], r.h[2], r.h[3], l4, sc, mn);
        p.sc0 = (int)(sc & 0xffu), p.sc1 = (int)((sc >> 8) & 0xffu);
        p.m0 = (int)(mn & 0xffu), p.m1 = (int)((mn >> 8) & 0xffu);
        p.d = f16f(r.h[0]);
        p.dmin = f16f(r.h[0] >> 16);
    }
    static __device__ __forceinline__ void ints(const Prep &p, const uint32_t (&a)[16], const int (&b)[4], int &isc,
                                                int &im) {
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int w = 0; w < 8; w++) {
            s0 = __dp4a((int)p.u[w], (int)a[w], s0);
            s1 = __dp4a((int)p.u[8 + w], (int)a[8 + w], s1);
        }
        isc = p.sc0 * s0 + p.sc1 * s1;
        im = p.m0 * (b[0] + b[1]) + p.m1 * (b[2] + b[3]);
    }
    static __device__ __forceinline__ float fold(float acc, const Prep &p, float da, int isc, int im) {
        return ls::kq::fold_q4k(acc, da, p.d, p.dmin, isc, im);
    }
};

/* Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B, 2-byte aligned): code of
 * element 128 hf + 32 t + l (t < 4, l < 32) = (ql[64 hf + 32 (t & 1) + l] low nibble for t < 2,
 * high for t >= 2) | (qh[32 hf + l] bits 2 t, 2 t + 1) << 4, value d sc (q - 32) with sc =
 * scales[8 hf + 2 t + l / 16]. Lane l4 takes half hf = l4 / 2 and blocks t = o and o + 2
 * (o = l4 & 1): the two nibbles of the same 32 ql bytes. */
struct KQ6 {
    static constexpr int VW = 2; /* its raw words: two rows a warp keep the registers of KQ4's four */
    static constexpr int D2 = 64; /* the lane's second 32 elements start 64 after its first */
    static __device__ __forceinline__ int e0(int l4) { return 128 * (l4 >> 1) + 32 * (l4 & 1); }
    struct Raw {
        uint32_t ql[8], qh[8], sc, d;
    };
    static __device__ __forceinline__ void load(Raw &r, const Ctx &, const uint8_t *row, int sb, int l4) {
        const uint8_t *b = row + 210 * (size_t)sb;
        const int hf = l4 >> 1, o = l4 & 1;
        ld_a2<8>(r.ql, b + 64 * hf + 32 * o);
        ld_a2<8>(r.qh, b + 128 + 32 * hf);
        r.sc = ldh(b + 192 + 8 * hf + 2 * o) | ldh(b + 196 + 8 * hf + 2 * o) << 16;
        r.d = ldh(b + 208);
    }
    struct Prep {
        uint32_t u[16];
        int sc[4];
        float d;
    };
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, int l4) {
        const unsigned sh = 2u * (unsigned)(l4 & 1);
#pragma unroll
        for (int w = 0; w < 8; w++) {
            p.u[w] = (r.ql[w] & 0x0f0f0f0fu) | (((r.qh[w] >> sh) & 0x03030303u) << 4);
            p.u[8 + w] = ((r.ql[w] >> 4) & 0x0f0f0f0fu) | (((r.qh[w] >> (sh + 4)) & 0x03030303u) << 4);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) p.sc[i] = (int)(int8_t)((r.sc >> (8 * i)) & 0xffu);
        p.d = f16f(r.d);
    }
    static __device__ __forceinline__ void ints(const Prep &p, const uint32_t (&a)[16], const int (&b)[4], int &isc,
                                                int &im) {
        isc = 0;
#pragma unroll
        for (int gi = 0; gi < 4; gi++) {
            int s = 0;
#pragma unroll
            for (int w = 0; w < 4; w++) s = __dp4a((int)p.u[4 * gi + w], (int)a[4 * gi + w], s);
            isc += p.sc[gi] * (s - 32 * b[gi]);
        }
        im = 0;
    }
    static __device__ __forceinline__ float fold(float acc, const Prep &p, float da, int isc, int) {
        return ls::kq::fold_q6k(acc, da, p.d, isc);
    }
};

/* The lane's activation codes of superblock sb of row m: 32 at element e0, 32 at e0 + d2;
 * the four 16-element sums of those; d. */
__device__ __forceinline__ float load_act(uint32_t (&a)[16], int (&b)[4], const int8_t *__restrict__ xq,
                                          const KMeta *__restrict__ xm, int64_t K, int64_t m, int sb, int e0, int d2) {
    const int8_t *row = xq + m * K + (int64_t)SB * sb;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint4 *p = reinterpret_cast<const uint4 *>(row + e0 + h * d2);
        const uint4 v0 = __ldg(p), v1 = __ldg(p + 1);
        a[8 * h] = v0.x, a[8 * h + 1] = v0.y, a[8 * h + 2] = v0.z, a[8 * h + 3] = v0.w;
        a[8 * h + 4] = v1.x, a[8 * h + 5] = v1.y, a[8 * h + 6] = v1.z, a[8 * h + 7] = v1.w;
    }
    const KMeta *mt = xm + m * (K / SB) + sb;
    const uint32_t b0 = __ldg(reinterpret_cast<const unsigned int *>(mt->b16 + e0 / 16));
    const uint32_t b1 = __ldg(reinterpret_cast<const unsigned int *>(mt->b16 + (e0 + d2) / 16));
    b[0] = (int)(short)(b0 & 0xffffu), b[1] = (int)(short)(b0 >> 16);
    b[2] = (int)(short)(b1 & 0xffffu), b[3] = (int)(short)(b1 >> 16);
    return __ldg(&mt->d);
}

template <class T, int RT>
__global__ void __launch_bounds__(32 * VWARPS) kq_vec_kernel(const Ctx c, const int8_t *__restrict__ xq,
                                                             const KMeta *__restrict__ xm, float *__restrict__ y,
                                                             int64_t M) {
    constexpr int VW = T::VW;
    constexpr bool DB = RT == 1; /* the next superblock's weights in flight (one-row calls) */
    __shared__ float red[VWARPS][VW * RT][KQ_U];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, l4 = lane & 3;
    const unsigned gmask = 0xfu << (4 * g);
    const int64_t n0 = ((int64_t)blockIdx.y * VWARPS + warp) * VW;
    const int64_t m0 = (int64_t)blockIdx.x * RT;
    const int nr = M - m0 < RT ? (int)(M - m0) : RT;
    const int nsb = (int)(c.K / SB);
    const uint8_t *rowp[VW];
#pragma unroll
    for (int i = 0; i < VW; i++) {
        const int64_t n = n0 + i < c.N ? n0 + i : c.N - 1; /* rows past N: computed, never stored */
        rowp[i] = c.w + (size_t)n * c.row_bytes;
    }
    float p[VW][RT];
#pragma unroll
    for (int i = 0; i < VW; i++)
#pragma unroll
        for (int r = 0; r < RT; r++) p[i][r] = 0.0f;
    typename T::Raw cur[VW], nxt[DB ? VW : 1];
    if (g < nsb) {
#pragma unroll
        for (int i = 0; i < VW; i++) T::load(cur[i], c, rowp[i], g, l4);
    }
    ls::pdl::enter();
    for (int sb = g; sb < nsb; sb += KQ_U) {
        if (DB && sb + KQ_U < nsb) {
#pragma unroll
            for (int i = 0; i < VW; i++) T::load(nxt[DB ? i : 0], c, rowp[i], sb + KQ_U, l4);
        }
#pragma unroll
        for (int i = 0; i < VW; i++) {
            typename T::Prep pr;
            T::prep(pr, cur[i], l4);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                if (RT > 1 && r >= nr) break;
                uint32_t a[16];
                int b[4];
                const float da = load_act(a, b, xq, xm, c.K, m0 + r, sb, T::e0(l4), T::D2);
                int isc, im;
                T::ints(pr, a, b, isc, im);
                /* within the group (its 4 lanes run the loop together; other groups may
                 * have fewer superblocks) */
                isc += __shfl_xor_sync(gmask, isc, 1);
                isc += __shfl_xor_sync(gmask, isc, 2);
                im += __shfl_xor_sync(gmask, im, 1);
                im += __shfl_xor_sync(gmask, im, 2);
                p[i][r] = T::fold(p[i][r], pr, da, isc, im);
            }
        }
        if (DB) {
#pragma unroll
            for (int i = 0; i < VW; i++) cur[i] = nxt[DB ? i : 0];
        } else if (sb + KQ_U < nsb) {
#pragma unroll
            for (int i = 0; i < VW; i++) T::load(cur[i], c, rowp[i], sb + KQ_U, l4);
        }
    }
    /* the order's combine: ((p0 + p1) + p2) + .. over the virtual lanes holding superblocks */
    if (l4 == 0) {
#pragma unroll
        for (int i = 0; i < VW; i++)
#pragma unroll
            for (int r = 0; r < RT; r++) red[warp][i * RT + r][g] = p[i][r];
    }
    __syncwarp();
    const int nu = nsb < KQ_U ? nsb : KQ_U;
    for (int o = lane; o < VW * RT; o += 32) {
        const int i = o / RT, r = o % RT;
        if (r >= nr) continue;
        float v = red[warp][o][0];
        for (int u = 1; u < nu; u++) v = v + red[warp][o][u];
        const int64_t n = n0 + i;
        if (n < c.N) y[(m0 + r) * c.N + n] = v;
    }
}

/* One warp per (row, superblock): lane L quantizes elements 8 L .. 8 L + 7 (kq_format.cuh). */
template <bool X16>
__global__ void __launch_bounds__(256) kq_quant_kernel(const float *__restrict__ x, int64_t K, int64_t nsbt,
                                                       int8_t *__restrict__ codes, KMeta *__restrict__ meta) {
    ls::pdl::enter();
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const bool live = w < nsbt;
    const int64_t wq = live ? w : nsbt - 1;
    const int64_t nsb = K / SB, row = wq / nsb, sb = wq % nsb;
    const float *src = x + row * K + SB * sb + 8 * lane;
    float v[8];
    if (X16) {
        const float4 a = __ldg(reinterpret_cast<const float4 *>(src));
        const float4 b = __ldg(reinterpret_cast<const float4 *>(src) + 1);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = __ldg(src + e);
    }
    ls::kq::quant_sb(v, live, codes + row * K + SB * sb, meta + wq);
}

template <class T>
int vec_launch(cudaStream_t st, const Ctx &c, const int8_t *xq, const KMeta *xm, float *y, int64_t M) {
    const int64_t gy = (c.N + T::VW * VWARPS - 1) / (T::VW * VWARPS);
    if (gy > 65535) return -1;
    const int rt = M == 1 ? 1 : M == 2 ? 2 : M <= 4 ? 4 : 8;
    const dim3 grid((unsigned)((M + rt - 1) / rt), (unsigned)gy);
    cudaError_t e;
    switch (rt) {
    case 1: e = ls::pdl::launch(kq_vec_kernel<T, 1>, grid, 32 * VWARPS, 0, st, c, xq, xm, y, M); break;
    case 2: e = ls::pdl::launch(kq_vec_kernel<T, 2>, grid, 32 * VWARPS, 0, st, c, xq, xm, y, M); break;
    case 4: e = ls::pdl::launch(kq_vec_kernel<T, 4>, grid, 32 * VWARPS, 0, st, c, xq, xm, y, M); break;
    default: e = ls::pdl::launch(kq_vec_kernel<T, 8>, grid, 32 * VWARPS, 0, st, c, xq, xm, y, M); break;
    }
    return e == cudaSuccess ? 0 : -1;
}

} // namespace

namespace ls::mmq {

/* policy as ls_cuda_mmq_policy: 2 and 4 force the tiles (the tests compare them with the
 * vector kernel at every M), 3 the small-M kernels where they serve (up to 16 rows),
 * 1 / 5 the vector kernel, 0 lets the shape decide */
int kq_launch(cudaStream_t st, int key, const Ctx &c, const float *x, int64_t M, float *y, void *scratch,
              size_t scratch_bytes, bool act_ready, int policy) {
    if (c.K <= 0 || c.K % SB != 0 || (key != LS_TYPE_Q4_K && key != LS_TYPE_Q6_K)) return -1;
    const size_t per_row = ls::kq::scratch_bytes(1, c.K);
    const int64_t cap = (int64_t)(scratch_bytes / per_row);
    if (cap < 1) return -1;
    for (int64_t r0 = 0; r0 < M; r0 += cap) {
        const int64_t mr = M - r0 < cap ? M - r0 : cap;
        int8_t *xq = (int8_t *)scratch;
        KMeta *xm = ls::kq::meta_of(scratch, mr, c.K);
        const int64_t nsbt = mr * (c.K / SB), qblocks = (nsbt + 7) / 8;
        if (qblocks > 0x7fffffff) return -1;
        if (!(act_ready && mr == M)) {
            const float *xr = x + r0 * c.K;
            const cudaError_t e =
                (uintptr_t)xr % 16 == 0
                    ? ls::pdl::launch(kq_quant_kernel<true>, (unsigned)qblocks, 256, 0, st, xr, c.K, nsbt, xq, xm)
                    : ls::pdl::launch(kq_quant_kernel<false>, (unsigned)qblocks, 256, 0, st, xr, c.K, nsbt, xq, xm);
            if (e != cudaSuccess) return -1;
        }
        float *yr = y + r0 * c.N;
        const bool tile = policy == 2 || policy == 4 ||
                          (policy == 0 && kq_use_tile(mr, c.N) && mr > 16);
        if (tile) {
            /* refused (a device whose shared memory per block is below the tiles' 111 KB): the
             * vector kernel serves the call, the same bits; a test forcing the tiles fails */
            if (kq_tile_launch(st, key, c, xq, xm, yr, mr) == 0) continue;
            if (policy != 0) return -1;
        }
        /* calls of 2..16 rows: the tensor-core kernels of kq_small.cu (H200, Q4_K 21504 x 5376,
         * 4 rows: 33.1 us against 106.7 here; policy 3 forces it for every call it can serve:
         * the tests compare it with this one at 1..16 rows) */
        if (mr <= 16 && (policy == 3 || (policy == 0 && mr >= 2))) {
            if (kq_small_launch(st, key, c, xq, xm, yr, mr) == 0) continue;
            if (policy == 3) return -1;
        }
        const int rc = key == LS_TYPE_Q4_K ? vec_launch<KQ4>(st, c, xq, xm, yr, mr)
                                           : vec_launch<KQ6>(st, c, xq, xm, yr, mr);
        if (rc != 0) return -1;
    }
    return 0;
}

} // namespace ls::mmq
