/* Tensor-core tiles of the K-quant integer matmul (Q4_K, Q6_K) for prefill-sized calls: the
 * format and order of kq_format.cuh, so a row's bits are those of kq_vec.cu's kernel.
 * docs/cuda.md section 2a ("K-quants").
 *
 * A block of 8 warps owns 128 weight rows x 64 activation rows (a warp 32 x 32) and walks
 * the order: virtual lane u = 0 .. nu - 1, its superblocks u, u + 8, .. in increasing order,
 * each as two chunks of 128 elements, one step a chunk. Weights go global -> registers (Q4_K
 * one chunk ahead; Q6_K when decoded, after an L2 prefetch one chunk ahead: PF below) ->
 * decoded into shared memory by the block (a thread half a row: codes as
 * bytes, Q6_K as signed q - 32, the chunk's integer scales, the superblock's mins and f32
 * d / dmin); activation chunks (codes, the superblock's 16-element sums and d) arrive by
 * cp.async three stages deep. A warp's fragments come by ldmatrix (row strides of 176
 * bytes: the 8 rows of each 8 x 16-byte matrix in distinct banks); each 32-element block
 * is one m16n8k32 product (Q4_K) or two m16n8k16 (Q6_K, one per 16-element scale), scaled
 * into an exact int32 per output; at a superblock's end the mins (Q4_K: one m16n8k16 product
 * pair against the 16-element sums, fold_sb) and the f32 steps of kq_format.cuh fold it into the lane's f32, and a
 * lane's f32 joins the running total (kept in shared memory: it changes 8 times a call). */
#include <stdint.h>

#include <atomic>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/kq_format.cuh"
#include "kernels/cuda/mmq_frag.cuh"
#include "kernels/cuda/staging.cuh"

namespace {

using namespace ls::q;
using namespace ls::stage;
using ls::kq::KMeta;
using ls::kq::KQ_U;
using ls::kq::SB;
using ls::mmq::ldsm_x4;
using ls::mmq::mma_k16s;
using ls::mmq::mma_k32;

constexpr int DW = 4, DA = 2;    /* warps along weight rows, activation rows */
constexpr int NT = 32 * DW * DA; /* threads */
constexpr int BN = 32 * DW;      /* weight rows a block */
constexpr int BM = 32 * DA;      /* activation rows a block */
constexpr int DS = 3;            /* activation stages */
constexpr int CH = 128;          /* elements a chunk */
/* A staged activation row: 128 codes, the superblock's b16[16], its d (KMeta bytes 32..47). */
constexpr int XS = 176;
/* A decoded weight row: 128 codes; [128, 136) the chunk's scales (Q4_K: 4 unsigned of 32
 * elements; Q6_K: 8 signed of 16); [136] d, [140] dmin (f32); [144, 160) Q4_K's 8 mins,
 * each twice (dp2a pairs). */
constexpr int DR = 176;
constexpr int ASTAGE = BM * XS;
constexpr int DEC = BN * DR;
constexpr int TOT = NT * 32 * 4;
constexpr int SMEM = DS * ASTAGE + 2 * DEC + TOT;
constexpr int APIECES = BM * 11; /* a row: 8 code pieces, 2 of b16, 1 with d */

/* The walk: virtual lane u, superblock c, chunk h; live while u < nu. */
struct Walk {
    int u, c, h;
};
__device__ __forceinline__ void wstep(Walk &w, int nsb) {
    if (w.h == 0) {
        w.h = 1;
        return;
    }
    w.h = 0;
    w.c += KQ_U;
    if (w.c >= nsb) {
        w.u++;
        w.c = w.u;
    }
}

/* Q4_K: thread half hh of a row decodes group g = 2 h + hh (qs[32 g .. + 32]: sub-blocks
 * 2 g low nibbles, 2 g + 1 high) into the chunk's sub-blocks 2 hh, 2 hh + 1. */
struct TQ4 {
    static constexpr bool Q6 = false;
    /* raw words loaded one step ahead into registers (with Q6_K's scheme below: 867 / 1,236 us
     * against 751 / 866 on 21504 x 5376 / 5376 x 21504, 512 rows, H200) */
    static constexpr bool PF = false;
    struct Raw {
        uint32_t h[4], q[8];
    };
    static __device__ __forceinline__ void load(Raw &r, int a16, const uint8_t *row, const Walk &w, int hh) {
        const uint8_t *b = row + 144 * (size_t)w.c;
        const int g = 2 * w.h + hh;
        ld16(r.h, b, a16);
        ld16(r.q, b + 16 + 32 * g, a16);
        ld16(r.q + 4, b + 32 + 32 * g, a16);
    }
    static __device__ __forceinline__ void decode(uint8_t *d, const Raw &r, int h, int hh) {
        uint4 *o = reinterpret_cast<uint4 *>(d + 64 * hh);
        o[0] = make_uint4(r.q[0] & 0x0f0f0f0fu, r.q[1] & 0x0f0f0f0fu, r.q[2] & 0x0f0f0f0fu, r.q[3] & 0x0f0f0f0fu);
        o[1] = make_uint4(r.q[4] & 0x0f0f0f0fu, r.q[5] & 0x0f0f0f0fu, r.q[6] & 0x0f0f0f0fu, r.q[7] & 0x0f0f0f0fu);
        o[2] = make_uint4((r.q[0] >> 4) & 0x0f0f0f0fu, (r.q[1] >> 4) & 0x0f0f0f0fu, (r.q[2] >> 4) & 0x0f0f0f0fu,
                          (r.q[3] >> 4) & 0x0f0f0f0fu);
        o[3] = make_uint4((r.q[4] >> 4) & 0x0f0f0f0fu, (r.q[5] >> 4) & 0x0f0f0f0fu, (r.q[6] >> 4) & 0x0f0f0f0fu,
                          (r.q[7] >> 4) & 0x0f0f0f0fu);
        uint32_t sc, mn;
        k4_pair(r.h[1], r.h[2], r.h[3], 2 * h + hh, sc, mn);
        *reinterpret_cast<unsigned short *>(d + 128 + 2 * hh) = (unsigned short)(sc & 0xffffu);
#pragma unroll
        for (int i = 0; i < 2; i++) { /* mins of sub-blocks 2 gi, 2 gi + 1, gi = 2 hh + i */
            k4_pair(r.h[1], r.h[2], r.h[3], 2 * hh + i, sc, mn);
            const uint32_t m0 = mn & 0xffu, m1 = (mn >> 8) & 0xffu;
            *reinterpret_cast<uint32_t *>(d + 144 + 4 * (2 * hh + i)) = m0 | m0 << 8 | m1 << 16 | m1 << 24;
        }
        if (hh == 0)
            *reinterpret_cast<float2 *>(d + 136) = make_float2(f16f(r.h[0]), f16f(r.h[0] >> 16));
    }
};

/* Q6_K: chunk h is half h of the superblock; thread hh decodes its blocks t = hh and hh + 2
 * (the low and high nibbles of ql[64 h + 32 hh .. + 32]; kq_vec.cu KQ6 states the layout). */
struct TQ6 {
    static constexpr bool Q6 = true;
    /* raw words loaded when decoded, after an L2 prefetch one step ahead: held across the fold
     * (18 registers) they cost Q6_K half its blocks (208 registers, or 368 bytes of spills at
     * two blocks an SM) */
    static constexpr bool PF = true;
    static __device__ __forceinline__ void prefetch(const uint8_t *row, const Walk &w, int hh) {
        const uint8_t *b = row + 210 * (size_t)w.c;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(b + 64 * w.h + 32 * hh));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(b + 128 + 32 * w.h));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(b + 192 + 8 * w.h));
    }
    struct Raw {
        uint32_t ql[8], qh[8], sc, d;
    };
    static __device__ __forceinline__ void load(Raw &r, int, const uint8_t *row, const Walk &w, int hh) {
        const uint8_t *b = row + 210 * (size_t)w.c;
        ld_a2<8>(r.ql, b + 64 * w.h + 32 * hh);
        ld_a2<8>(r.qh, b + 128 + 32 * w.h);
        r.sc = ldh(b + 192 + 8 * w.h + 2 * hh) | ldh(b + 196 + 8 * w.h + 2 * hh) << 16;
        r.d = ldh(b + 208);
    }
    static __device__ __forceinline__ void decode(uint8_t *d, const Raw &r, int, int hh) {
        const unsigned sh = 2u * (unsigned)hh;
#pragma unroll
        for (int tt = 0; tt < 2; tt++) { /* t = hh + 2 tt: elements 32 t .. of the chunk */
            uint32_t o[8];
#pragma unroll
            for (int w = 0; w < 8; w++) {
                const uint32_t lo = tt ? (r.ql[w] >> 4) & 0x0f0f0f0fu : r.ql[w] & 0x0f0f0f0fu;
                const uint32_t v = lo | (((r.qh[w] >> (sh + 4 * tt)) & 0x03030303u) << 4);
                o[w] = ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u; /* bytewise q - 32 */
            }
            uint4 *dst = reinterpret_cast<uint4 *>(d + 32 * (hh + 2 * tt));
            dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
            dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
            /* the scales of 16-element groups 2 t, 2 t + 1 */
            *reinterpret_cast<unsigned short *>(d + 128 + 2 * (hh + 2 * tt)) =
                (unsigned short)((r.sc >> (16 * tt)) & 0xffffu);
        }
        if (hh == 0) *reinterpret_cast<float2 *>(d + 136) = make_float2(f16f(r.d), 0.0f);
    }
};

__device__ __forceinline__ void issue_act(uint32_t sa, const int8_t *xq, const KMeta *xm, int64_t K, int nsb,
                                          int64_t m0, int64_t M, const Walk &w, bool live) {
    if (live) {
        for (int q = threadIdx.x; q < APIECES; q += NT) {
            const int a = q / 11, p = q % 11;
            const int64_t m = m0 + a < M ? m0 + a : M - 1; /* rows past M: any valid bytes */
            const uint8_t *src = p < 8 ? reinterpret_cast<const uint8_t *>(xq + m * K + SB * w.c + CH * w.h + 16 * p)
                                       : reinterpret_cast<const uint8_t *>(xm + m * nsb + w.c) + 16 * (p - 8);
            cp16(sa + a * XS + 16 * p, src, 16);
        }
    }
    cp_commit();
}

/* One chunk of the warp's 32 x 32 tile into the exact integers isc. */
template <class T>
__device__ __forceinline__ void fold_chunk(int (&isc)[2][4][4], uint32_t dec_sa, const uint8_t *dec, uint32_t act_sa,
                                           int lane) {
    const int g = lane >> 2;
#pragma unroll
    for (int sbl = 0; sbl < 4; sbl++) { /* the chunk's 32-element blocks */
        uint32_t A[2][4];
        uint32_t sw[2][2]; /* [a][row g or g + 8]: the block's scale bytes (Q4_K byte 0; Q6_K bytes 0, 1) */
#pragma unroll
        for (int a = 0; a < 2; a++) {
            ldsm_x4(A[a], dec_sa + (16 * a + (lane & 15)) * DR + 32 * sbl + 16 * (lane >> 4));
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const uint8_t *sp = dec + (16 * a + 8 * r + g) * DR + 128;
                sw[a][r] = T::Q6 ? *reinterpret_cast<const unsigned short *>(sp + 2 * sbl) : sp[sbl];
            }
        }
#pragma unroll
        for (int jj = 0; jj < 2; jj++) {
            uint32_t B[4]; /* activation rows 8 (2 jj) .. and 8 (2 jj + 1) ..: b0, b1 each */
            ldsm_x4(B, act_sa + (16 * jj + (lane & 7) + 8 * (lane >> 4)) * XS + 32 * sbl + 16 * ((lane >> 3) & 1));
#pragma unroll
            for (int j2 = 0; j2 < 2; j2++) {
                const int j = 2 * jj + j2;
#pragma unroll
                for (int a = 0; a < 2; a++) {
                    if (!T::Q6) {
                        int C[4];
                        mma_k32<true>(C, A[a][0], A[a][1], A[a][2], A[a][3], B[2 * j2], B[2 * j2 + 1]);
#pragma unroll
                        for (int k = 0; k < 4; k++) isc[a][j][k] += (int)sw[a][k >> 1] * C[k];
                    } else {
                        int C0[4], C1[4];
                        mma_k16s(C0, A[a][0], A[a][1], B[2 * j2]);
                        mma_k16s(C1, A[a][2], A[a][3], B[2 * j2 + 1]);
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            const uint32_t wd = sw[a][k >> 1];
                            isc[a][j][k] += (int)(int8_t)(wd & 0xffu) * C0[k] + (int)(int8_t)(wd >> 8) * C1[k];
                        }
                    }
                }
            }
        }
    }
}

/* The superblock's f32 steps (kq_format.cuh) for the warp's outputs; isc back to 0. Q4_K's
 * im = sum_i mins2_i b16_i (i < 16: each min twice, against the 16-element sums) is one more
 * integer product: m16n8k16 with b16 = 128 hi + lo (hi = b16 >> 7 in [-16, 15], lo = b16 & 127),
 * im = 128 (A hi) + (A lo), exact. */
template <class T>
__device__ __forceinline__ void fold_sb(float (&p)[2][4][4], int (&isc)[2][4][4], const uint8_t *dec,
                                        const uint8_t *act, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
    float2 f[2][2];   /* [a][row g or g + 8]: d, dmin */
    uint32_t am[2][2]; /* [a][row]: the doubled mins at k 4 t4 .. 4 t4 + 3 (Q4_K) */
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint8_t *row = dec + (16 * a + 8 * r + g) * DR;
            f[a][r] = *reinterpret_cast<const float2 *>(row + 136);
            am[a][r] = T::Q6 ? 0u : *reinterpret_cast<const uint32_t *>(row + 144 + 4 * t4);
        }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t hi = 0u, lo = 0u;
        if (!T::Q6) { /* B fragment: b16[4 t4 .. 4 t4 + 3] of activation row 8 j + g */
            const uint2 bv = *reinterpret_cast<const uint2 *>(act + (8 * j + g) * XS + 128 + 8 * t4);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int v = (int)(short)(((e < 2 ? bv.x : bv.y) >> (16 * (e & 1))) & 0xffffu);
                hi |= (uint32_t)((v >> 7) & 0xff) << (8 * e);
                lo |= (uint32_t)(v & 0x7f) << (8 * e);
            }
        }
        float da[2];
#pragma unroll
        for (int e = 0; e < 2; e++) da[e] = *reinterpret_cast<const float *>(act + (8 * j + 2 * t4 + e) * XS + 160);
#pragma unroll
        for (int a = 0; a < 2; a++) {
            int ch[4] = {0, 0, 0, 0}, cl[4] = {0, 0, 0, 0};
            if (!T::Q6) {
                mma_k16s(ch, am[a][0], am[a][1], hi);
                mma_k16s(cl, am[a][0], am[a][1], lo);
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 fr = f[a][k >> 1];
                if (!T::Q6)
                    p[a][j][k] = ls::kq::fold_q4k(p[a][j][k], da[k & 1], fr.x, fr.y, isc[a][j][k], ch[k] * 128 + cl[k]);
                else
                    p[a][j][k] = ls::kq::fold_q6k(p[a][j][k], da[k & 1], fr.x, isc[a][j][k]);
                isc[a][j][k] = 0;
            }
        }
    }
}

/* The weights of the chunk the walk lr names next: prefetched (T::PF) or loaded into raw. */
template <class T>
__device__ __forceinline__ void next_raw(typename T::Raw &raw, int a16, const uint8_t *rowp, const Walk &lr, int hh) {
    if constexpr (T::PF)
        T::prefetch(rowp, lr, hh);
    else
        T::load(raw, a16, rowp, lr, hh);
}

template <class T>
__global__ void __launch_bounds__(NT, 2) kq_tile_kernel(const Ctx c, const int8_t *__restrict__ xq,
                                                        const KMeta *__restrict__ xm, float *__restrict__ y,
                                                        int64_t M) {
    extern __shared__ __align__(16) uint8_t smem[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wn = warp % DW, wa = warp / DW;
    const int64_t n0 = (int64_t)blockIdx.y * BN, m0 = (int64_t)blockIdx.x * BM;
    const int nsb = (int)(c.K / SB), nu = nsb < KQ_U ? nsb : KQ_U, nsteps = 2 * nsb;
    uint8_t *dec = smem + DS * ASTAGE;
    float *tot = reinterpret_cast<float *>(smem + DS * ASTAGE + 2 * DEC) + threadIdx.x;

    /* this thread's decoding share: row dr, half hh */
    const int dr = threadIdx.x >> 1, hh = threadIdx.x & 1;
    const int64_t nrow = n0 + dr < c.N ? n0 + dr : c.N - 1; /* rows past N: any valid bytes */
    const uint8_t *rowp = c.w + (size_t)nrow * c.row_bytes;

    Walk la{0, 0, 0}, lr{0, 0, 0}, lf{0, 0, 0};
    typename T::Raw raw;
    T::load(raw, c.a16, rowp, lr, hh);
#pragma unroll
    for (int s = 0; s < DS - 1; s++) {
        issue_act(sbase + s * ASTAGE, xq, xm, c.K, nsb, m0, M, la, la.u < nu);
        wstep(la, nsb);
    }
    T::decode(dec + dr * DR, raw, lr.h, hh);
    wstep(lr, nsb);
    if (lr.u < nu) next_raw<T>(raw, c.a16, rowp, lr, hh);

    int isc[2][4][4];
    float p[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) isc[a][j][k] = 0, p[a][j][k] = 0.0f;
    const uint32_t wdec = 32 * wn * DR, wact = 32 * wa * XS;
    for (int st = 0; st < nsteps; st++) {
        cp_wait<DS - 2>();
        __syncthreads(); /* stage st landed; chunk st decoded; step st - 1's fold done */
        issue_act(sbase + ((st + DS - 1) % DS) * ASTAGE, xq, xm, c.K, nsb, m0, M, la, la.u < nu);
        wstep(la, nsb);
        if (st + 1 < nsteps) {
            if constexpr (T::PF) T::load(raw, c.a16, rowp, lr, hh);
            T::decode(dec + ((st + 1) & 1) * DEC + dr * DR, raw, lr.h, hh);
            wstep(lr, nsb);
            if (lr.u < nu) next_raw<T>(raw, c.a16, rowp, lr, hh);
        }
        const uint32_t dsa = sbase + DS * ASTAGE + (st & 1) * DEC + wdec;
        const uint32_t asa = sbase + (st % DS) * ASTAGE + wact;
        fold_chunk<T>(isc, dsa, dec + (st & 1) * DEC + wdec, asa, lane);
        if (lf.h == 1) {
            fold_sb<T>(p, isc, dec + (st & 1) * DEC + wdec, smem + (st % DS) * ASTAGE + wact, lane);
            if (lf.c + KQ_U >= nsb) { /* the lane's last superblock: its f32 joins the total */
#pragma unroll
                for (int a = 0; a < 2; a++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            float &t = tot[(16 * a + 4 * j + k) * NT];
                            t = lf.u == 0 ? p[a][j][k] : t + p[a][j][k];
                            p[a][j][k] = 0.0f;
                        }
            }
        }
        wstep(lf, nsb);
    }
    cp_wait<0>();
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int64_t n = n0 + 32 * wn + 16 * a + g + 8 * (k >> 1);
                const int64_t m = m0 + 32 * wa + 8 * j + 2 * t4 + (k & 1);
                if (n < c.N && m < M) y[m * c.N + n] = tot[(16 * a + 4 * j + k) * NT];
            }
}

template <class T>
int tile_launch_t(cudaStream_t st, const Ctx &c, const int8_t *xq, const KMeta *xm, float *y, int64_t M) {
    const int64_t gy = (c.N + BN - 1) / BN, gx = (M + BM - 1) / BM;
    if (gy > 65535 || gx > 0x7fffffff) return -1;
    static std::atomic<unsigned> raised{0}; /* devices whose limit is raised */
    if (smem_limit(kq_tile_kernel<T>, SMEM, raised) != 0) return -1;
    kq_tile_kernel<T><<<dim3((unsigned)gx, (unsigned)gy), NT, SMEM, st>>>(c, xq, xm, y, M);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

} // namespace

namespace ls::mmq {

/* From 16 rows, when the call has at least 16 blocks: the vector kernel re-reads the weights
 * for every 8 activation rows and is bound by its instructions (H200: a 2048 x 5376 27B k / v
 * projection of 512 rows there cost ~1.3 ms, a 27B pp512 1,506 tok/s), but it spreads a small
 * matrix (a 270M model's 640 rows in a 32-stream server step: 5 blocks of tiles) wider. */
bool kq_use_tile(int64_t M, int64_t N) {
    return M >= 16 && ((M + BM - 1) / BM) * ((N + BN - 1) / BN) >= 16;
}

int kq_tile_launch(cudaStream_t st, int key, const Ctx &c, const int8_t *xq, const KMeta *xm, float *y, int64_t M) {
    if (c.K % SB != 0) return -1;
    if (key == LS_TYPE_Q4_K) return tile_launch_t<TQ4>(st, c, xq, xm, y, M);
    if (key == LS_TYPE_Q6_K) return tile_launch_t<TQ6>(st, c, xq, xm, y, M);
    return -1;
}

} // namespace ls::mmq
