/* Decoded block tiles for Q6_K weights: the integer-dot matmul's prefill-sized calls, with
 * the same activation blocks, exact integer sums and f32 sequence per output as the other
 * integer kernels (mmq_common.cuh). docs/cuda.md section 2a.
 *
 * Why its own kernel: a Q6_K chunk is one 32-element block (kw_of gives 64 or 128 lanes),
 * and its bits lie in three interleaved places of the 210-byte superblock (low nibbles, high
 * bit pairs, scales), so a tile that stages one chunk a round copies ~128 bytes a row for 26
 * bytes of weights (mmq_tile.cu's Q6_K tiles measured slower than the warp tiles, session
 * 12). Here a round takes four lanes at once: lanes 4 q .. 4 q + 3 fold chunks 4 q + r U ..
 * + 3, which are blocks 0..3 of one half superblock (U is a multiple of 32 and K of 256), so
 * a round stages that half's 64 low-nibble bytes, 32 high-bit bytes and its scales: ~160
 * bytes a row for 128 weights. The block's threads decode them once into 6-bit codes and
 * f32 half-block factors in shared memory; warps read fragments with ldmatrix.
 *
 * Order (mmq_common.cuh): each of the four lanes keeps its own f32 partial per output (la[i]),
 * folding its chunks in increasing order, the two half-block steps of mmq_frag.cuh
 * fold_block's Q6_K branch; after the group's last round the four partials join the running
 * total in lane order (the first lane of all starts it). The half-block integer sums come
 * from m16n8k16 products (k order: ldmatrix's, the same for both sides); the l-plane product
 * starts at -32 V, so that S = 256 h + (l - 32 V) is the exact sum the order defines. */
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
using ls::mmq::ldsm_x4;
using ls::mmq::Meta;
using ls::mmq::mma_k16u;
using ls::mmq::QB;
using ls::mmq::XB_BYTES;

constexpr int EW = 4;        /* warps along the weight rows, 16 rows each */
constexpr int EA = 2;        /* warps along the activation rows, 32 rows each */
constexpr int ENT = 32 * EW * EA;
constexpr int EN = 16 * EW;  /* weight rows per block */
constexpr int EM = 32 * EA;  /* activation rows per block */
constexpr int ES = 3;        /* stages in flight */
constexpr int LG = 4;        /* lanes a round */
constexpr int XR = 80;       /* staged activation row of one block: h 32, l 32, Meta 16 */
/* A staged weight row of one round: the half's low-nibble bytes (64, 2-byte aligned: 5
 * pieces), its high-bit bytes (32: 3 pieces), its 8 scales and d (192 + 8 hf .. 209: 2). */
constexpr int NPC = 10;
constexpr int RW = 16 * NPC;
/* A decoded weight row: the four blocks' 32 codes, then their f32 factors (d sc_lo, d sc_hi),
 * 16 bytes of padding: 176 bytes (44 words), rows of an ldmatrix read in distinct banks. */
constexpr int DR = 176;
constexpr int WBYTES = EN * RW;
constexpr int STAGE = WBYTES + LG * EM * XR;
constexpr int DEC = EN * DR;
/* The round's activation metadata as the fold reads it, per block b and output column pair
 * p (columns 2 p, 2 p + 1): C0 / C1 = the m16n8k16 accumulator starts -32 V0 / -32 V1 of
 * the pair, each twice (rows g and g + 8), and DX = the pair's dx. */
constexpr int CM_C0 = DEC, CM_C1 = CM_C0 + LG * (EM / 2) * 16, CM_DX = CM_C1 + LG * (EM / 2) * 16;
constexpr int DECALL = CM_DX + LG * (EM / 2) * 8;
constexpr int SMEM = ES * STAGE + DECALL;
static_assert(ENT == LG * EM, "one (block, activation row) of metadata a thread");
static_assert(ENT == 4 * EN, "four threads a weight row");

__host__ __device__ constexpr int span_of(int p) { return p < 5 ? 0 : p < 8 ? 1 : 2; }
__host__ __device__ constexpr int span_first(int s) { return s == 0 ? 0 : s == 1 ? 5 : 8; }
/* span s of half hf, from the superblock's first byte */
__device__ __forceinline__ int span_off(int s, int hf) {
    return s == 0 ? 64 * hf : s == 1 ? 128 + 32 * hf : 192 + 8 * hf;
}

/* The round whose first chunk is c0 (lanes' chunks c0 .. c0 + 3) into the stage at shared
 * address sa (one commit group; empty past the walk). Thread t copies, of weight row t / 4
 * (rows past N read row N - 1; the last row's pieces stop at the array's end), pieces t % 4,
 * + 4, + 8 (of NPC); and of activation row a = t % EM, block b = t / EM (rows past M read row
 * M - 1; xrow = that row's first block index + b), the 4 plane pieces and the Meta. */
__device__ __forceinline__ void issue(uint32_t sa, const Ctx &c, int64_t n0, int64_t xrow, const int8_t *xq,
                                      const Meta *xm, int c0, bool live) {
    if (live) {
        const int t = threadIdx.x, r = t >> 2;
        const int64_t n = n0 + r < c.N ? n0 + r : c.N - 1;
        const uint8_t *row = c.w + (size_t)n * c.row_bytes + 210 * (size_t)(c0 >> 3);
        const uint8_t *end = c.w + (size_t)c.N * c.row_bytes;
        const int hf = (c0 >> 2) & 1;
#pragma unroll
        for (int k = 0; k < 3; k++) {
            const int p = (t & 3) + 4 * k;
            if (k == 2 && p >= NPC) continue;
            const int s = span_of(p);
            const uint8_t *src = down16(row + span_off(s, hf)) + 16 * (p - span_first(s));
            int bytes = 16;
            if (n == c.N - 1) {
                const int64_t left = end - src;
                bytes = left <= 0 ? 0 : left < 16 ? (int)left : 16;
            }
            cp16(sa + (uint32_t)(r * RW + 16 * p), src, bytes);
        }
        const int ab = t; /* b EM + a */
        const int8_t *xp = xq + (xrow + c0) * XB_BYTES;
#pragma unroll
        for (int p = 0; p < 4; p++) cp16(sa + (uint32_t)(WBYTES + ab * XR + 16 * p), xp + 16 * p, 16);
        cp16(sa + (uint32_t)(WBYTES + ab * XR + 64), xm + xrow + c0, 16);
    }
    cp_commit();
}

/* Row r = t / 4, block i = t % 4 of the staged round (half hf of a superblock at sbo in the
 * row): the block's 32 codes (low nibble, or high for blocks 2 and 3, of low-nibble bytes
 * 32 (i % 2) ..; bits 2 i of the high-bit bytes) and its factors d sc[2 i], d sc[2 i + 1]
 * (mmq_frag.cuh q6k_block's expressions). The spans sit at their global address modulo 16. */
__device__ __forceinline__ void decode_q6k(uint8_t *dec, const uint8_t *raw, const Ctx &c, int64_t n0, int64_t sbo,
                                           int hf) {
    const int r = threadIdx.x >> 2, i = threadIdx.x & 3;
    const int64_t n = n0 + r < c.N ? n0 + r : c.N - 1;
    const unsigned rm = (unsigned)(reinterpret_cast<uintptr_t>(c.w + (size_t)n * c.row_bytes) + (uintptr_t)sbo);
    const uint8_t *s = raw + r * RW;
    const uint8_t *ql = s + ((rm + 64u * hf) & 15u) + 32 * (i & 1);
    const uint8_t *qh = s + 80 + ((rm + 128u + 32u * hf) & 15u);
    const uint8_t *sc = s + 128 + ((rm + 192u + 8u * hf) & 15u);
    uint32_t l[8], h[8];
    la2<8>(l, ql);
    la2<8>(h, qh);
    const unsigned ls = i >= 2 ? 4u : 0u, hs = 2u * (unsigned)i;
    uint32_t u[8];
#pragma unroll
    for (int w = 0; w < 8; w++) u[w] = ((l[w] >> ls) & 0x0f0f0f0fu) | (((h[w] >> hs) & 0x03030303u) << 4);
    uint8_t *d = dec + r * DR;
    *reinterpret_cast<uint4 *>(d + 32 * i) = make_uint4(u[0], u[1], u[2], u[3]);
    *reinterpret_cast<uint4 *>(d + 32 * i + 16) = make_uint4(u[4], u[5], u[6], u[7]);
    const uint32_t sv = lh(sc + 2 * i);
    const float dd = f16f(lh(sc + 16 - 8 * hf));
    *reinterpret_cast<float2 *>(d + 128 + 8 * i) =
        make_float2(dd * (float)(int8_t)(sv & 0xffu), dd * (float)(int8_t)((sv >> 8) & 0xffu));
}

/* Thread t's (block b = t / EM, activation row a = t % EM) Meta of the staged round into the
 * fold's layout (CM_C0, CM_C1, CM_DX above). */
__device__ __forceinline__ void decode_meta(uint8_t *cm, const uint8_t *raw) {
    const int t = threadIdx.x, b = t / EM, a = t % EM, p = b * (EM / 2) + (a >> 1), e = a & 1;
    const float4 m = *reinterpret_cast<const float4 *>(raw + WBYTES + t * XR + 64);
    const int o0 = -32 * __float_as_int(m.z), o1 = -32 * __float_as_int(m.w);
    int *c0 = reinterpret_cast<int *>(cm + CM_C0 - DEC + 16 * p), *c1 = reinterpret_cast<int *>(cm + CM_C1 - DEC + 16 * p);
    c0[e] = o0;
    c0[e + 2] = o0;
    c1[e] = o1;
    c1[e + 2] = o1;
    reinterpret_cast<float *>(cm + CM_DX - DEC + 8 * p)[e] = m.x;
}

/* One round (four lanes, one block each) of the warp's 16 x 32 tile into la[lane]: weight
 * fragments and factors from the warp's decoded rows at dec_sa, activation fragments from
 * the stage's rows at act_sa, metadata from the converted copy at cm_sa, the warp's column
 * pairs from pb on (shared addresses). */
__device__ __forceinline__ void fold_round(float (&la)[LG][4][4], uint32_t dec_sa, uint32_t act_sa, uint32_t cm_sa,
                                           int pb, int lane) {
    const int g = lane >> 2;
#pragma unroll
    for (int b = 0; b < LG; b++) {
        uint32_t A[4]; /* rows 0-7 / 8-15, k 0-15; rows 0-7 / 8-15, k 16-31 */
        ldsm_x4(A, dec_sa + (lane & 15) * DR + 32 * b + 16 * (lane >> 4));
        const float2 f0 = lds_f2(dec_sa + g * DR + 128 + 8 * b);
        const float2 f1 = lds_f2(dec_sa + (g + 8) * DR + 128 + 8 * b);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t B[4]; /* h plane k 0..15, 16..31; l plane k 0..15, 16..31 */
            ldsm_x4(B, act_sa + (b * EM + 8 * j + (lane & 7)) * XR + 16 * (lane >> 3));
            const int p = b * (EM / 2) + pb + 4 * j + (lane & 3); /* the warp's pairs start at pb */
            const int4 o0 = lds_i4(cm_sa + (CM_C0 - DEC) + 16 * p), o1 = lds_i4(cm_sa + (CM_C1 - DEC) + 16 * p);
            const float2 dx = lds_f2(cm_sa + (CM_DX - DEC) + 8 * p);
            const int4 z = make_int4(0, 0, 0, 0);
            int s0h[4], s0l[4], s1h[4], s1l[4];
            mma_k16u(s0h, A[0], A[1], B[0], z);
            mma_k16u(s0l, A[0], A[1], B[2], o0);
            mma_k16u(s1h, A[2], A[3], B[1], z);
            mma_k16u(s1l, A[2], A[3], B[3], o1);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 r = k < 2 ? f0 : f1;
                const float d = k & 1 ? dx.y : dx.x;
                const int S0 = s0h[k] * 256 + s0l[k], S1 = s1h[k] * 256 + s1l[k];
                const float acc = fmaf(r.x * d, (float)S0, la[b][j][k]);
                la[b][j][k] = fmaf(r.y * d, (float)S1, acc);
            }
        }
    }
}

__global__ void __launch_bounds__(ENT, 2) dtile_q6k_kernel(const Ctx c, const int8_t *__restrict__ xq,
                                                           const Meta *__restrict__ xm, float *__restrict__ y,
                                                           int64_t M) {
    extern __shared__ __align__(16) uint8_t smem[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wn = warp % EW, wa = warp / EW;
    const int64_t n0 = (int64_t)blockIdx.y * EN, m0 = (int64_t)blockIdx.x * EM;
    const int64_t nbk = c.K / QB;
    const int nch = c.nch, U = 32 * c.kw, nu = nch < U ? nch : U; /* nch and U: multiples of 8 */

    const int a = threadIdx.x % EM, b = threadIdx.x / EM;
    const int64_t xrow = (m0 + a < M ? m0 + a : M - 1) * nbk + b;
    /* the load walk: group lq (lanes 4 lq ..), its round's first chunk lc */
    int lq = 0, lc = 0;
#pragma unroll
    for (int s = 0; s < ES - 1; s++) {
        issue(sbase + s * STAGE, c, n0, xrow, xq, xm, lc, LG * lq < nu);
        lc += U;
        if (lc >= nch) lc = LG * ++lq;
    }
    uint8_t *dec = smem + ES * STAGE;
    const uint32_t dec_sa = sbase + ES * STAGE + 16 * wn * DR;
    const uint32_t cm_sa = sbase + ES * STAGE + DEC;

    float tot[4][4], la[LG][4][4];
    int st = 0;
    for (int q = 0; LG * q < nu; q++) {
#pragma unroll
        for (int i = 0; i < LG; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int k = 0; k < 4; k++) la[i][j][k] = 0.0f;
        for (int c0 = LG * q; c0 < nch; c0 += U, st++) {
            cp_wait<ES - 2>();
            __syncthreads(); /* stage st landed for every thread; the decoded rows of st - 1 are read */
            issue(sbase + ((st + ES - 1) % ES) * STAGE, c, n0, xrow, xq, xm, lc, LG * lq < nu);
            lc += U;
            if (lc >= nch) lc = LG * ++lq;
            const int so = (st % ES) * STAGE;
            decode_q6k(dec, smem + so, c, n0, 210 * (int64_t)(c0 >> 3), (c0 >> 2) & 1);
            decode_meta(dec + DEC, smem + so);
            __syncthreads(); /* the decoded rows are written */
            fold_round(la, dec_sa, sbase + so + WBYTES + 32 * wa * XR, cm_sa, 16 * wa, lane);
        }
        /* the group's lanes join the totals in lane order (the first lane of all starts them) */
#pragma unroll
        for (int i = 0; i < LG; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int k = 0; k < 4; k++) tot[j][k] = (q == 0 && i == 0) ? la[i][j][k] : tot[j][k] + la[i][j][k];
    }
    cp_wait<0>();
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int64_t n = n0 + 16 * wn + g + 8 * (k >> 1), m = m0 + 32 * wa + 8 * j + 2 * t4 + (k & 1);
            if (n < c.N && m < M) y[m * c.N + n] = tot[j][k];
        }
}

} // namespace

namespace ls::mmq {

int dtile6_launch(cudaStream_t st, const Ctx &c, const int8_t *xq, const Meta *xm, float *y, int64_t M) {
    if (c.K % 256 != 0 || c.nch % 8 != 0 || (32 * c.kw) % 8 != 0) return -1;
    const int64_t gy = (c.N + EN - 1) / EN, gx = (M + EM - 1) / EM;
    if (gy > 65535 || gx > 0x7fffffff) return -1;
    static std::atomic<unsigned> raised{0}; /* devices whose limit is raised */
    if (smem_limit(dtile_q6k_kernel, SMEM, raised) != 0) return -1;
    dtile_q6k_kernel<<<dim3((unsigned)gx, (unsigned)gy), ENT, SMEM, st>>>(c, xq, xm, y, M);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

} // namespace ls::mmq
