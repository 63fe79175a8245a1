/* Batch-invariant CUDA matmul y[m][n] = sum_k W[n][k] x[m][k] for every weight type, and
 * the embedding gather (cuda_matmul.h documents the contract; dequant.cuh the decoding).
 *
 * One kernel per weight type, for every M:
 *   block   = 128 threads = 4 warps = 2 row-warps x 2 k-warps; a block computes
 *             BN = 16 weight rows x R = 8 activation rows (grid.x = M tiles, fastest, so the
 *             tiles of one weight slice run together and re-read it from L2; grid.y = N / 16).
 *   warp    = 4 row slots x 8 k-lanes; each lane holds NW = 2 weight rows (register tile
 *             2 x 8 accumulators), so the warp covers 8 weight rows.
 *   K split = 16 k-slots (8 lanes x 2 k-warps). A row is a sequence of nch chunks of E
 *             elements (the type's natural 16..32-byte piece: a Q4_K group of 64, a
 *             32-element block, 32 MLX elements, 16 bytes of floats); slot s handles chunks
 *             s, s + 16, s + 32, ... in increasing order. That assignment depends on K and
 *             the type only.
 *   order   = per slot, acc = fmaf(w_e, x_e, acc) over its chunks in order, each chunk's
 *             elements in the type's fixed order; then a xor butterfly over the 8 k-lanes
 *             (1, 2, 4); then partial(k-warp 0) + partial(k-warp 1). Identical for every M.
 *   x       = staged through shared memory in K tiles of 16 * CPT chunks (~1024 elements),
 *             double-buffered with cp.async; the layout [row][quad q][chunk c][4 floats]
 *             makes the 8 k-lanes' 16-byte reads consecutive (no bank conflicts), and the 4
 *             row slots of a warp read the same addresses (broadcast).
 *   weights = each lane loads its chunks' bytes (16-byte loads where the layout allows),
 *             one chunk ahead (register double buffer), dequantizes a group of 2 quads for
 *             its 2 rows and uses it for every real activation row of the tile.
 *   padding = activation rows m0 + r >= M are skipped (a uniform branch): row r's
 *             instruction sequence is the same whatever nr is.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/dequant.cuh"

namespace {

using namespace lsq;

#ifndef LS_MM_NW
#define LS_MM_NW 2
#endif
#ifndef LS_MM_MINB
#define LS_MM_MINB 4
#endif
constexpr int KL = 8;                  /* k-lanes per row slot */
constexpr int RL = 4;                  /* row slots per warp */
constexpr int KW = 2;                  /* k-warps */
constexpr int NW = LS_MM_NW;           /* weight rows per lane */
constexpr int RWG = 4 / NW;            /* row-warps */
constexpr int THREADS = 32 * KW * RWG; /* 128 (NW 2) or 256 (NW 1) */
constexpr int R = 8;                   /* activation rows per tile */
constexpr int KS = KL * KW;       /* k-slots: 16 */
constexpr int BN = RWG * RL * NW; /* weight rows per block: 16 */
static_assert(KL * RL == 32 && KW * RWG * 32 == THREADS, "lane layout");

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait1() {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

template <class T>
struct Tile {
    static constexpr int CT = KS * T::CPT;          /* chunks per K tile */
    static constexpr int TQ = T::QPC * CT;          /* quads per activation row per tile */
    static constexpr int KT = T::E * CT;            /* elements per tile */
    static constexpr int PPR = (T::TB + 15) / 16 + 1; /* 16-byte pieces of a weight tile row (+ misalignment) */
    /* bytes of a weight tile row in shared memory: >= PPR * 16 and 16 mod 128, so that rows
     * read together start in different banks */
    static constexpr int RB = (PPR * 16 + 111) / 128 * 128 + 16;
    static constexpr int SBB = 144;                 /* MLX: scales (or biases) of a tile row, + slack */
    static_assert(TQ == 64 || TQ == 128 || TQ == 256, "tile quads");
};

template <class T>
struct IsMlx {
    static constexpr bool v = false;
};
template <int B>
struct IsMlx<TMlx<B>> {
    static constexpr bool v = true;
};

/* Shared memory of a launch: x [2][nr][TQ] float4, weights [2][BN][RB] bytes, MLX scales
 * and biases [2][BN][2][SBB] bytes. */
template <class T>
__host__ __device__ constexpr size_t smem_bytes(int nr) {
    return (size_t)2 * nr * Tile<T>::TQ * 16 + (size_t)2 * BN * Tile<T>::RB +
           (IsMlx<T>::v ? (size_t)2 * BN * 2 * Tile<T>::SBB : 0);
}

__device__ __forceinline__ const uint8_t *floor16(const uint8_t *p) {
    return reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)15);
}
__device__ __forceinline__ const uint8_t *floor4(const uint8_t *p) {
    return reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)3);
}

/* The chunk arithmetic of one lane: prep, then for each quad group dequantize NW rows and
 * accumulate them into the NRT activation rows of the tile. With NRT == 1 the whole chunk
 * is one branch-free block (decode); with NRT == R rows past nr are skipped by a uniform
 * branch. Either way accumulator acc[i][r] receives exactly the same fmaf operations on the
 * same operands in the same order (the dependence chain fixes the order; nothing is
 * contracted or reassociated), so row r's bits do not depend on NRT or nr. */
template <class T, int NRT>
__device__ __forceinline__ void chunk_fma(float (&acc)[NW][R], const typename T::Raw (&cur)[NW], const Ctx &c, int cl,
                                          const float4 *xr, int nr) {
    constexpr int CT = Tile<T>::CT, TQ = Tile<T>::TQ;
    typename T::Prep P[NW];
#pragma unroll
    for (int i = 0; i < NW; i++) T::prep(P[i], cur[i], c, cl);
#pragma unroll
    for (int G = 0; G < T::NG; G++) {
        float wv[NW][T::GS * 4];
#pragma unroll
        for (int i = 0; i < NW; i++) T::dq(wv[i], G, cur[i], P[i]);
#pragma unroll
        for (int r = 0; r < NRT; r++) {
            if (NRT > 1 && r >= nr) break;
#pragma unroll
            for (int u = 0; u < T::GS; u++) {
                const float4 xv = xr[r * TQ + T::qidx(G, u) * CT];
#pragma unroll
                for (int i = 0; i < NW; i++) {
                    acc[i][r] = fmaf(wv[i][4 * u + 0], xv.x, acc[i][r]);
                    acc[i][r] = fmaf(wv[i][4 * u + 1], xv.y, acc[i][r]);
                    acc[i][r] = fmaf(wv[i][4 * u + 2], xv.z, acc[i][r]);
                    acc[i][r] = fmaf(wv[i][4 * u + 3], xv.w, acc[i][r]);
                }
            }
        }
    }
}

template <class T>
__global__ void __launch_bounds__(THREADS, LS_MM_MINB)
    mm_kernel(const Ctx c, const float *__restrict__ x, float *__restrict__ y, int64_t M, int x16) {
    constexpr int CT = Tile<T>::CT, TQ = Tile<T>::TQ, KT = Tile<T>::KT, CPT = T::CPT, TB = T::TB;
    constexpr int RB = Tile<T>::RB, SBB = Tile<T>::SBB;
    constexpr bool SB = IsMlx<T>::v;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[KW][R][BN];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kw = warp % KW, rw = warp / KW, rs = lane / KL, kl = lane % KL;
    const int s = kw * KL + kl; /* k-slot */
    const int64_t m0 = (int64_t)blockIdx.x * R;
    const int nr = (int)(M - m0 < R ? M - m0 : R);
    const int64_t n0 = (int64_t)blockIdx.y * BN;
    const int rl0 = (rw * RL + rs) * NW; /* first of this lane's rows, in the block */
    const int nch = c.nch;
    const int ntile = (nch + CT - 1) / CT;
    const float *xb = x + m0 * c.K;
    float4 *xs = reinterpret_cast<float4 *>(smem);          /* [2][nr][TQ] */
    uint8_t *ws = smem + (size_t)2 * nr * TQ * 16;           /* [2][BN][RB] */
    uint8_t *sbm = ws + 2 * BN * RB;                         /* [2][BN][2][SBB] (MLX) */
    const int sbz = c.sb_kind == 0 ? 4 : 2;                  /* MLX scale / bias bytes */
    const int GT = KT >> (5 + c.gshift);                     /* MLX groups per tile */

    /* ---- staging of activations: thread slots u = tid % SU + SU * j of rows tid / SU + RS * k
     * (layout [r][q][c]: quad (q, c) = x[t * KT + kpos(c, q) .. + 4]) ---- */
    constexpr int SU = TQ < THREADS ? TQ : THREADS, SJ = TQ / SU, RS = THREADS / SU;
    int koff[SJ], cst[SJ];
#pragma unroll
    for (int j = 0; j < SJ; j++) {
        const int u = tid % SU + SU * j;
        cst[j] = u % CT;
        koff[j] = T::kpos(u % CT, u / CT);
    }
    auto stage_x = [&](int t) {
        float4 *dst = xs + (size_t)(t & 1) * nr * TQ + tid % SU;
        const float *src = xb + (int64_t)t * KT;
        for (int r = tid / SU; r < nr; r += RS) {
#pragma unroll
            for (int j = 0; j < SJ; j++) {
                if (t * CT + cst[j] >= nch) continue;
                const float *sp = src + (int64_t)r * c.K + koff[j];
                float4 *dp = dst + (size_t)r * TQ + SU * j;
                if (x16) {
                    cp_async16(dp, sp);
                } else {
                    float *d = reinterpret_cast<float *>(dp);
#pragma unroll
                    for (int e = 0; e < 4; e++) cp_async4(d + e, sp + e);
                }
            }
        }
    };

    /* ---- staging of weights: 8 threads per row of the block copy the tile's bytes of that row
     * (16-byte pieces from the 16-aligned address below the tile's start, so every byte keeps
     * its address modulo 16; 4-byte words when the weights are not 16-byte aligned) ---- */
    static_assert(THREADS == 8 * BN, "8 copy threads per weight row");
    const int crow = tid >> 3, cpart = tid & 7;
    const int64_t cn = n0 + crow < c.N ? n0 + crow : c.N - 1;
    const uint8_t *cbase = c.w + (size_t)cn * c.row_bytes, *cend = cbase + c.row_bytes;
    const uint8_t *wend = c.w + (size_t)c.N * c.row_bytes;
    auto stage_w = [&](int t) {
        uint8_t *dst = ws + (size_t)((t & 1) * BN + crow) * RB;
        const uint8_t *gs = cbase + (size_t)t * TB;
        const uint8_t *ge = cend < gs + TB ? cend : gs + TB;
        const uint8_t *a16p = floor16(gs);
        if (c.a16) {
            const int np = (int)((ge - a16p + 15) >> 4);
            for (int k = cpart; k < np; k += 8) {
                const uint8_t *src = a16p + 16 * k;
                if (src + 16 <= wend) {
                    cp_async16(dst + 16 * k, src);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (src + 4 * e < wend) cp_async4(dst + 16 * k + 4 * e, src + 4 * e);
                }
            }
        } else {
            const uint8_t *a4 = floor4(gs);
            const int nw = (int)((ge - a4 + 3) >> 2), off = (int)(a4 - a16p);
            for (int k = cpart; k < nw; k += 8) cp_async4(dst + off + 4 * k, a4 + 4 * k);
        }
        if constexpr (SB) {
            const int64_t g0 = cn * c.ng + (int64_t)t * GT;
            const int cnt = (int)(c.ng - (int64_t)t * GT < GT ? c.ng - (int64_t)t * GT : GT);
#pragma unroll
            for (int which = 0; which < 2; which++) {
                const uint8_t *s0 = (which ? c.bi : c.sc) + g0 * sbz;
                const uint8_t *a4 = floor4(s0);
                const int nw = (int)((s0 + cnt * sbz - a4 + 3) >> 2);
                uint8_t *d = sbm + (size_t)(((t & 1) * BN + crow) * 2 + which) * SBB;
                for (int k = cpart; k < nw; k += 8) cp_async4(d + 4 * k, a4 + 4 * k);
            }
        }
    };

    /* this lane's weight rows */
    const uint8_t *rowp[NW];
    int64_t nrow[NW];
#pragma unroll
    for (int i = 0; i < NW; i++) {
        const int64_t n = n0 + rl0 + i;
        nrow[i] = n < c.N ? n : c.N - 1; /* rows past N compute a copy of the last row, not stored */
        rowp[i] = c.w + (size_t)nrow[i] * c.row_bytes;
    }

    float acc[NW][R];
#pragma unroll
    for (int i = 0; i < NW; i++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[i][r] = 0.0f;

    stage_x(0);
    stage_w(0);
    cp_async_commit();
    for (int t = 0; t < ntile; t++) {
        if (t + 1 < ntile) {
            stage_x(t + 1);
            stage_w(t + 1);
        }
        cp_async_commit();
        cp_async_wait1();
        __syncthreads();
        const uint8_t *tb[NW], *sp[NW], *bp[NW];
#pragma unroll
        for (int i = 0; i < NW; i++) {
            const uint8_t *gs = rowp[i] + (size_t)t * TB;
            tb[i] = ws + (size_t)((t & 1) * BN + rl0 + i) * RB + (reinterpret_cast<uintptr_t>(gs) & 15);
            sp[i] = bp[i] = nullptr;
            if constexpr (SB) {
                const int64_t g0 = nrow[i] * c.ng + (int64_t)t * GT;
                uint8_t *d = sbm + (size_t)(((t & 1) * BN + rl0 + i) * 2) * SBB;
                sp[i] = d + (reinterpret_cast<uintptr_t>(c.sc + g0 * sbz) & 3);
                bp[i] = d + SBB + (reinterpret_cast<uintptr_t>(c.bi + g0 * sbz) & 3);
            }
        }
        const float4 *xr = xs + (size_t)(t & 1) * nr * TQ;
#pragma unroll
        for (int jj = 0; jj < CPT; jj++) {
            const int cl = s + KS * jj; /* chunk within the tile */
            if (t * CT + cl < nch) {
                typename T::Raw raw[NW];
#pragma unroll
                for (int i = 0; i < NW; i++) T::load(raw[i], tb[i], cl, c.a16, sp[i], bp[i]);
                if (nr == 1)
                    chunk_fma<T, 1>(acc, raw, c, cl, xr + cl, 1);
                else
                    chunk_fma<T, R>(acc, raw, c, cl, xr + cl, nr);
            }
        }
        __syncthreads();
    }

    /* fixed combine: xor butterfly over the 8 k-lanes, then k-warp 0 + k-warp 1 */
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= nr) break;
#pragma unroll
        for (int i = 0; i < NW; i++) {
            float v = acc[i][r];
            v = v + __shfl_xor_sync(0xffffffffu, v, 1);
            v = v + __shfl_xor_sync(0xffffffffu, v, 2);
            v = v + __shfl_xor_sync(0xffffffffu, v, 4);
            if (kl == 0) red[kw][r][rl0 + i] = v;
        }
    }
    __syncthreads();
    if (tid < nr * BN) {
        const int r = tid / BN, nl = tid % BN;
        const int64_t n = n0 + nl;
        if (n < c.N) y[(m0 + r) * c.N + n] = red[0][r][nl] + red[1][r][nl];
    }
}

/* get_rows: one thread per 32-element group of a row, the reference's expressions. */
template <class T>
__global__ void __launch_bounds__(128) gr_kernel(const Ctx c, const int32_t *__restrict__ ids, int64_t n,
                                                 float *__restrict__ dst) {
    const int64_t g = (int64_t)blockIdx.x * 128 + threadIdx.x;
    if (g >= (c.K + 31) / 32) return;
    for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
        float *o = dst + i * c.K + 32 * g;
        const int32_t id = ids[i];
        if (id < 0 || id >= c.N) {
            for (int e = 0; e < 32; e++)
                if (32 * g + e < c.K) o[e] = 0.0f;
            continue;
        }
        T::ref32(o, c, c.w + (size_t)id * c.row_bytes, id, g);
    }
}

/* ---- host side ---- */

template <class T>
int launch_mm(cudaStream_t st, Ctx c, const float *x, int64_t M, float *y) {
    c.nch = (int)(c.K / T::E);
    const int64_t mt = (M + R - 1) / R, nb = (c.N + BN - 1) / BN;
    if (nb > 65535 || mt > 0x7fffffff) return -1;
    const int nr = (int)(M < R ? M : R);
    static bool attr_set = false; /* racing threads set the same value */
    if (!attr_set) {
        if (cudaFuncSetAttribute(mm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes<T>(R)) !=
            cudaSuccess)
            return -1;
        attr_set = true;
    }
    const int x16 = ((uintptr_t)x % 16) == 0;
    mm_kernel<T><<<dim3((unsigned)mt, (unsigned)nb), THREADS, smem_bytes<T>(nr), st>>>(c, x, y, M, x16);
    return 0;
}

template <class T>
int launch_gr(cudaStream_t st, const Ctx &c, const int32_t *ids, int64_t n, float *dst) {
    const int64_t ng32 = (c.K + 31) / 32;
    const int64_t bx = (ng32 + 127) / 128;
    if (bx > 0x7fffffff) return -1;
    gr_kernel<T><<<dim3((unsigned)bx, (unsigned)(n < 65535 ? n : 65535)), 128, 0, st>>>(c, ids, n, dst);
    return 0;
}

/* Validates w and fills c; returns the dispatch key (type, or 100 + bits for MLX), -1 if
 * unsupported. */
int prepare(const ls_weight *w, Ctx &c) {
    if (!w || !w->data || w->rows <= 0 || w->cols <= 0 || w->cols > 0x3fffffff) return -1;
    const uintptr_t d = (uintptr_t)w->data;
    c = Ctx{};
    c.w = (const uint8_t *)w->data;
    c.row_bytes = w->row_bytes;
    c.N = w->rows;
    c.K = w->cols;
    c.a16 = (d % 16 == 0) && (w->row_bytes % 16 == 0);
    if (w->type == LS_TYPE_MLX_AFFINE) {
        const int bits = w->bits, group = w->group;
        if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8) return -1;
        if (group != 32 && group != 64 && group != 128) return -1;
        if (w->cols % group != 0 || !w->scales || !w->biases) return -1;
        if (w->row_bytes != (uint64_t)(w->cols * bits / 8) || d % 4 != 0) return -1;
        size_t sbs;
        switch (w->sb_type) {
        case LS_TYPE_F32: c.sb_kind = 0, sbs = 4; break;
        case LS_TYPE_F16: c.sb_kind = 1, sbs = 2; break;
        case LS_TYPE_BF16: c.sb_kind = 2, sbs = 2; break;
        default: return -1;
        }
        if ((uintptr_t)w->scales % sbs != 0 || (uintptr_t)w->biases % sbs != 0) return -1;
        c.sc = (const uint8_t *)w->scales;
        c.bi = (const uint8_t *)w->biases;
        c.gshift = group == 32 ? 0 : group == 64 ? 1 : 2;
        c.ng = w->cols / group;
        return 100 + bits;
    }
    if (w->row_bytes != ls_row_size(w->type, w->cols) || d % 2 != 0) return -1;
    switch (w->type) {
    case LS_TYPE_F32: return (w->cols % 4 == 0 && d % 4 == 0) ? (int)w->type : -1;
    case LS_TYPE_F16:
    case LS_TYPE_BF16: return w->cols % 8 == 0 ? (int)w->type : -1;
    case LS_TYPE_Q4_1:
    case LS_TYPE_Q5_1: return d % 4 == 0 ? (int)w->type : -1;
    case LS_TYPE_Q4_0:
    case LS_TYPE_Q5_0:
    case LS_TYPE_Q8_0:
    case LS_TYPE_Q4_K:
    case LS_TYPE_Q5_K:
    case LS_TYPE_Q6_K: return (int)w->type;
    default: return -1;
    }
}

} // namespace

extern "C" int ls_cuda_matmul_supported(const ls_weight *w) {
    Ctx c;
    return prepare(w, c) >= 0;
}

extern "C" int ls_cuda_matmul(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y) {
    Ctx c;
    const int key = prepare(w, c);
    if (key < 0 || m < 0 || (m > 0 && (!x || !y)) || ((uintptr_t)x % 4) != 0) return -1;
    if (m == 0) return 0;
    switch (key) {
    case LS_TYPE_F32: return launch_mm<TF32>(st, c, x, m, y);
    case LS_TYPE_F16: return launch_mm<THalf<false>>(st, c, x, m, y);
    case LS_TYPE_BF16: return launch_mm<THalf<true>>(st, c, x, m, y);
    case LS_TYPE_Q4_0: return launch_mm<TQ4_0>(st, c, x, m, y);
    case LS_TYPE_Q4_1: return launch_mm<TQ4_1>(st, c, x, m, y);
    case LS_TYPE_Q5_0: return launch_mm<TQ5_0>(st, c, x, m, y);
    case LS_TYPE_Q5_1: return launch_mm<TQ5_1>(st, c, x, m, y);
    case LS_TYPE_Q8_0: return launch_mm<TQ8_0>(st, c, x, m, y);
    case LS_TYPE_Q4_K: return launch_mm<TQ4_K>(st, c, x, m, y);
    case LS_TYPE_Q5_K: return launch_mm<TQ5_K>(st, c, x, m, y);
    case LS_TYPE_Q6_K: return launch_mm<TQ6_K>(st, c, x, m, y);
    case 102: return launch_mm<TMlx<2>>(st, c, x, m, y);
    case 103: return launch_mm<TMlx<3>>(st, c, x, m, y);
    case 104: return launch_mm<TMlx<4>>(st, c, x, m, y);
    case 105: return launch_mm<TMlx<5>>(st, c, x, m, y);
    case 106: return launch_mm<TMlx<6>>(st, c, x, m, y);
    case 108: return launch_mm<TMlx<8>>(st, c, x, m, y);
    default: return -1;
    }
}

extern "C" int ls_cuda_get_rows(cudaStream_t st, const ls_weight *w, const int32_t *ids, int64_t n, float *dst) {
    Ctx c;
    const int key = prepare(w, c);
    if (key < 0 || n < 0 || (n > 0 && (!ids || !dst))) return -1;
    if (n == 0) return 0;
    switch (key) {
    case LS_TYPE_F32: return launch_gr<TF32>(st, c, ids, n, dst);
    case LS_TYPE_F16: return launch_gr<THalf<false>>(st, c, ids, n, dst);
    case LS_TYPE_BF16: return launch_gr<THalf<true>>(st, c, ids, n, dst);
    case LS_TYPE_Q4_0: return launch_gr<TQ4_0>(st, c, ids, n, dst);
    case LS_TYPE_Q4_1: return launch_gr<TQ4_1>(st, c, ids, n, dst);
    case LS_TYPE_Q5_0: return launch_gr<TQ5_0>(st, c, ids, n, dst);
    case LS_TYPE_Q5_1: return launch_gr<TQ5_1>(st, c, ids, n, dst);
    case LS_TYPE_Q8_0: return launch_gr<TQ8_0>(st, c, ids, n, dst);
    case LS_TYPE_Q4_K: return launch_gr<TQ4_K>(st, c, ids, n, dst);
    case LS_TYPE_Q5_K: return launch_gr<TQ5_K>(st, c, ids, n, dst);
    case LS_TYPE_Q6_K: return launch_gr<TQ6_K>(st, c, ids, n, dst);
    case 102: return launch_gr<TMlx<2>>(st, c, ids, n, dst);
    case 103: return launch_gr<TMlx<3>>(st, c, ids, n, dst);
    case 104: return launch_gr<TMlx<4>>(st, c, ids, n, dst);
    case 105: return launch_gr<TMlx<5>>(st, c, ids, n, dst);
    case 106: return launch_gr<TMlx<6>>(st, c, ids, n, dst);
    case 108: return launch_gr<TMlx<8>>(st, c, ids, n, dst);
    default: return -1;
    }
}
