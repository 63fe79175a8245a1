/* Decoded block tiles: the block-tiled tensor-core kernel of the integer-dot matmul for
 * prefill-sized calls on Q4_K weights whose rows are 16-byte aligned. Same activation
 * blocks, exact integer sums and f32 sequence per output as the other integer kernels
 * (mmq_common.cuh), so a row's bits do not depend on which one ran. docs/cuda.md section 2a.
 *
 * Why a second block-tile kernel: in mmq_tile.cu every warp decodes its own 32 weight rows'
 * scales and nibbles from the staged raw bytes, and a weight row is decoded by each of the
 * two warps that share it; SASS of its Q4_K main loop (session 15): 777 instructions a
 * thread per 64-element chunk, 39% of them scale / nibble decoding and addressing. Here the
 * block's 256 threads decode a chunk's 128 weight rows once, into shared memory (one row
 * half a thread: 16 code bytes to 32 codes, one block's f32 scale and min), and the warps
 * read their fragments with ldmatrix: the weight side drops to a few percent of the loop,
 * which is then the per-output f32 fold the order fixes, the mma and the loads.
 *
 * Order (mmq_common.cuh), as mmq_tile.cu: the block walks the chunks lane by lane, u = 0 ..
 * nu - 1, a lane's chunks u, u + U, .. in increasing order, one stage each; each chunk's two
 * blocks fold into a fresh f32 per output for the lane (the expressions of fold_block) and
 * the lane's partial joins the running total after its last chunk (the first lane starts
 * it). The k order inside a block is ldmatrix's (thread t4 holds bytes 4 t4 .. 4 t4 + 3 and
 * 16 + 4 t4 ..), the same permutation for weights and activations: the same exact sums. */
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
using ls::mmq::Meta;
using ls::mmq::step;
using ls::mmq::Walk;
using ls::mmq::ldsm_x4;
using ls::mmq::mma_k32;
using ls::mmq::QB;
using ls::mmq::tile_join;
using ls::mmq::tile_store;
using ls::mmq::tile_zero;
using ls::mmq::XB_BYTES;

constexpr int DW = 4;         /* warps along the weight rows */
constexpr int DA = 2;         /* warps along the activation rows */
constexpr int DNT = 32 * DW * DA;
constexpr int DN = 32 * DW;   /* weight rows per block */
constexpr int DM = 32 * DA;   /* activation rows per block */
constexpr int DS = 4;         /* stages in flight */
/* A staged activation row of one block: h plane 32 bytes, l plane 32, its 16-byte Meta. 80
 * bytes (20 words): the 8 rows of an ldmatrix read start in distinct bank quarters. */
constexpr int XR = 80;
/* A staged Q4_K row of one chunk: its superblock's 16-byte header, the chunk's 32 code bytes. */
constexpr int RW = 48;
/* A decoded weight row: block 0's 32 codes, block 1's 32, then f32 a0, b0, a1, b1 (80 bytes,
 * the same bank argument as XR). */
constexpr int DR = 80;
constexpr int WBYTES = DN * RW;
constexpr int STAGE = WBYTES + 2 * DM * XR;
constexpr int DEC = DN * DR;
constexpr int SMEM = DS * STAGE + 2 * DEC; /* two decoded chunks: the next decodes while one folds */
constexpr int PIECES = DN * 3 + 2 * DM * 5; /* weight: 3 a row; activation: 4 plane + 1 meta a row and block */
constexpr int COPY = PIECES / DNT;
static_assert(PIECES % DNT == 0, "whole pieces a thread");

/* A thread's share of a stage's copies, fixed for the kernel (held in registers: measured
 * faster than recomputing them each chunk): piece k of chunk ci comes from
 * src + sb (ci >> 2) + cb (ci & 3): for weights the superblock step 144 and the chunk's code
 * offset 32, for activations the chunk's two blocks. */
struct Copy {
    const uint8_t *src[COPY];
    uint32_t dst[COPY];
    uint16_t sb[COPY];
    uint16_t cb[COPY];
};

__device__ __forceinline__ void copy_init(Copy &cp, const Ctx &c, int64_t n0, int64_t m0, int64_t M,
                                          int64_t nbk, const int8_t *xq, const Meta *xm) {
#pragma unroll
    for (int k = 0; k < COPY; k++) {
        const int q = threadIdx.x + k * DNT;
        if (q < DN * 3) {
            const int r = q / 3, p = q % 3;
            const int64_t n = n0 + r < c.N ? n0 + r : c.N - 1; /* rows past N: any valid bytes */
            cp.src[k] = c.w + (size_t)n * c.row_bytes + 16 * p;
            cp.dst[k] = (uint32_t)(r * RW + 16 * p);
            cp.sb[k] = 144;
            cp.cb[k] = p == 0 ? 0 : 32;
        } else {
            const int q2 = q - DN * 3;
            const bool plane = q2 < 2 * DM * 4;
            const int ab = plane ? q2 / 4 : q2 - 2 * DM * 4, p = plane ? q2 % 4 : 0; /* ab = b DM + a */
            const int a = ab % DM, b = ab / DM;
            const int64_t blk = (m0 + a < M ? m0 + a : M - 1) * nbk + b;
            cp.src[k] = plane ? reinterpret_cast<const uint8_t *>(xq + blk * XB_BYTES + 16 * p)
                              : reinterpret_cast<const uint8_t *>(xm + blk);
            cp.dst[k] = (uint32_t)(WBYTES + ab * XR + (plane ? 16 * p : 64));
            const int step = plane ? 2 * XB_BYTES : 2 * (int)sizeof(Meta);
            cp.sb[k] = (uint16_t)(4 * step);
            cp.cb[k] = (uint16_t)step;
        }
    }
}

/* Chunk ci's pieces into the stage at shared address sa (one commit group; empty past the walk). */
__device__ __forceinline__ void issue(uint32_t sa, const Copy &cp, int ci, bool live) {
    if (live) {
#pragma unroll
        for (int k = 0; k < COPY; k++)
            cp16(sa + cp.dst[k], cp.src[k] + (size_t)cp.sb[k] * (size_t)(ci >> 2) + cp.cb[k] * (ci & 3), 16);
    }
    cp_commit();
}

/* Row r = t / 2 of the staged chunk ci, half h = t % 2 of its code bytes: the low nibbles
 * are block 0's codes, the high nibbles block 1's (sub-blocks 2 g and 2 g + 1 of the
 * superblock); thread h also writes block h's f32 factors, mmq_frag.cuh q4k_chunk's
 * expressions on the same header bits. */
__device__ __forceinline__ void decode_q4k(uint8_t *dec, const uint8_t *raw, int ci) {
    const int r = threadIdx.x >> 1, h = threadIdx.x & 1;
    const uint8_t *s = raw + r * RW;
    const uint4 hv = *reinterpret_cast<const uint4 *>(s);
    const uint4 qv = *reinterpret_cast<const uint4 *>(s + 16 + 16 * h);
    uint8_t *d = dec + r * DR;
    *reinterpret_cast<uint4 *>(d + 16 * h) =
        make_uint4(qv.x & 0x0f0f0f0fu, qv.y & 0x0f0f0f0fu, qv.z & 0x0f0f0f0fu, qv.w & 0x0f0f0f0fu);
    *reinterpret_cast<uint4 *>(d + 32 + 16 * h) = make_uint4((qv.x >> 4) & 0x0f0f0f0fu, (qv.y >> 4) & 0x0f0f0f0fu,
                                                             (qv.z >> 4) & 0x0f0f0f0fu, (qv.w >> 4) & 0x0f0f0f0fu);
    uint32_t sc, mn;
    k4_pair(hv.y, hv.z, hv.w, ci & 3, sc, mn);
    const unsigned sh = 8u * (unsigned)h;
    const float a = f16f(hv.x) * (float)((sc >> sh) & 0xffu);
    const float b = -(f16f(hv.x >> 16) * (float)((mn >> sh) & 0xffu));
    *reinterpret_cast<float2 *>(d + 64 + 8 * h) = make_float2(a, b);
}

/* One chunk (two blocks) of the warp's 32 x 32 tile into la: weight fragments and factors
 * from the decoded rows at dec, activation fragments and metadata from the stage's rows at
 * act (shared addresses for ldmatrix, generic pointers for the factors). */
__device__ __forceinline__ void fold_chunk(float (&la)[2][4][4], uint32_t dec_sa, const uint8_t *dec,
                                           uint32_t act_sa, const uint8_t *act, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int b = 0; b < 2; b++) {
        uint32_t A[2][4];
        float2 f[2][2]; /* [a][row g or g + 8]: (scale, -min) */
#pragma unroll
        for (int a = 0; a < 2; a++) {
            ldsm_x4(A[a], dec_sa + (16 * a + (lane & 15)) * DR + 32 * b + 16 * (lane >> 4));
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
                f[a][hh] = *reinterpret_cast<const float2 *>(dec + (16 * a + 8 * hh + g) * DR + 64 + 8 * b);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t B[4]; /* h plane k 0..15, 16..31; l plane k 0..15, 16..31 */
            ldsm_x4(B, act_sa + (b * DM + 8 * j + (lane & 7)) * XR + 16 * (lane >> 3));
            float2 m[2]; /* (dx, X) of output columns 2 t4, 2 t4 + 1 */
#pragma unroll
            for (int e = 0; e < 2; e++)
                m[e] = *reinterpret_cast<const float2 *>(act + (b * DM + 8 * j + 2 * t4 + e) * XR + 64);
#pragma unroll
            for (int a = 0; a < 2; a++) {
                int sh[4], sl[4];
                mma_k32<true>(sh, A[a][0], A[a][1], A[a][2], A[a][3], B[0], B[1]);
                mma_k32<true>(sl, A[a][0], A[a][1], A[a][2], A[a][3], B[2], B[3]);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float2 r = f[a][k >> 1], x = m[k & 1];
                    const int S = sh[k] * 256 + sl[k];
                    const float acc = fmaf(r.x * x.x, (float)S, la[a][j][k]);
                    la[a][j][k] = fmaf(r.y, x.y, acc);
                }
            }
        }
    }
}

__global__ void __launch_bounds__(DNT, 2) dtile_q4k_kernel(const Ctx c, const int8_t *__restrict__ xq,
                                                           const Meta *__restrict__ xm, float *__restrict__ y,
                                                           int64_t M) {
    extern __shared__ __align__(16) uint8_t smem[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wn = warp % DW, wa = warp / DW;
    const int64_t n0 = (int64_t)blockIdx.y * DN, m0 = (int64_t)blockIdx.x * DM;
    const int64_t nbk = c.K / QB;
    const int nch = c.nch, U = 32 * c.kw, nu = nch < U ? nch : U;

    Copy cp;
    copy_init(cp, c, n0, m0, M, nbk, xq, xm);
    Walk ld{0, 0};
#pragma unroll
    for (int s = 0; s < DS - 1; s++) {
        issue(sbase + s * STAGE, cp, ld.ci, ld.u < nu);
        step(ld, U, nch);
    }
    uint8_t *dec = smem + DS * STAGE;
    const uint32_t dec_sa = sbase + DS * STAGE + 32 * wn * DR;

    float tot[2][4][4], la[2][4][4];
    /* One barrier a chunk: step st folds chunk st of the walk from decoded buffer st % 2 while
     * the block decodes chunk st + 1 into the other; the barrier at step st + 1 orders both
     * (buffer st % 2 is free again, buffer (st + 1) % 2 written, stage st + 2 landed). */
    Walk dw{0, 0};
    cp_wait<DS - 2>();
    __syncthreads(); /* stage 0 landed */
    decode_q4k(dec, smem, dw.ci);
    step(dw, U, nch);
    int st = 0;
    for (int u = 0; u < nu; u++) {
        tile_zero(la);
        for (int ci = u; ci < nch; ci += U, st++) {
            cp_wait<DS - 3>();
            __syncthreads(); /* stage st + 1 landed; decoded chunk st written; step st - 1 done */
            issue(sbase + ((st + DS - 1) % DS) * STAGE, cp, ld.ci, ld.u < nu);
            step(ld, U, nch);
            if (dw.u < nu) {
                decode_q4k(dec + ((st + 1) & 1) * DEC, smem + ((st + 1) % DS) * STAGE, dw.ci);
                step(dw, U, nch);
            }
            const int ao = (st % DS) * STAGE + WBYTES + 32 * wa * XR;
            fold_chunk(la, dec_sa + (st & 1) * DEC, dec + (st & 1) * DEC + 32 * wn * DR, sbase + ao, smem + ao,
                       lane);
        }
        tile_join(tot, la, u == 0); /* the lane's partials join the totals */
    }
    cp_wait<0>();
    tile_store(y, tot, n0 + 32 * wn, m0 + 32 * wa, c.N, M, lane >> 2, lane & 3);
}

} // namespace

namespace ls::mmq {

int dtile_launch(cudaStream_t st, const Ctx &c, const int8_t *xq, const Meta *xm, float *y, int64_t M) {
    if (!c.a16 || c.K % 256 != 0) return -1;
    const int64_t gy = (c.N + DN - 1) / DN, gx = (M + DM - 1) / DM;
    if (gy > 65535 || gx > 0x7fffffff) return -1;
    static std::atomic<unsigned> raised{0}; /* devices whose limit is raised */
    if (smem_limit(dtile_q4k_kernel, SMEM, raised) != 0) return -1;
    dtile_q4k_kernel<<<dim3((unsigned)gx, (unsigned)gy), DNT, SMEM, st>>>(c, xq, xm, y, M);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

} // namespace ls::mmq
