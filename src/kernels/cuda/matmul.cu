/* Batch-invariant CUDA matmul y[m][n] = sum_k W[n][k] x[m][k] for every weight type, and
 * the embedding gather (cuda_matmul.h documents the contract; dequant.cuh the decoding).
 *
 * One kernel per weight type, for every M:
 *   block   = 256 threads = 8 warps = 4 row-warps x 2 k-warps; a block computes
 *             BN = 16 weight rows x R = 8 activation rows (grid.x = M tiles, fastest, so the
 *             tiles of one weight slice run together and re-read it from L2; grid.y = N / 16).
 *   warp    = 4 row slots x 8 k-lanes; a lane holds one weight row (NW = 1) and its R x 2
 *             accumulators; a warp covers 4 weight rows.
 *   K split = 16 k-slots (8 lanes x 2 k-warps). A row is a sequence of nch chunks of E
 *             elements (the type's natural piece: a Q4_K group of 64, half a Q5_K group, a
 *             quarter of a Q6_K block, a 32-element block, 32 MLX elements, 16 bytes of
 *             floats); slot s handles chunks s, s + 16, s + 32, ... in increasing order. That
 *             assignment depends on K and the type only.
 *   order   = per slot two chains, even and odd quad groups of each chunk: a = fmaf(w, x, a)
 *             over its chunks in order, each chunk's elements in the type's fixed order; then
 *             chain0 + chain1, a xor butterfly over the 8 k-lanes (1, 2, 4), then
 *             partial(k-warp 0) + partial(k-warp 1). Identical for every M.
 *   x       = staged through shared memory in K tiles of 16 * CPT chunks (1024 elements;
 *             256-512 for float weights), double-buffered with cp.async, 4 tiles per barrier
 *             when one row is staged (2 for two rows); the layout [row][quad q][chunk c][4]
 *             makes the 8 k-lanes' 16-byte reads consecutive (no bank conflicts) and the 4
 *             row slots of a warp read the same addresses (broadcast).
 *   weights = each lane loads its chunk's bytes straight into registers (16-byte loads
 *             where the layout allows, aligned words + funnel shifts for 2-byte aligned
 *             blocks), one chunk ahead, dequantizes 2 quads at a time (dequant.cuh) and uses
 *             each value for every real activation row of the tile.
 *   padding = activation rows m0 + r >= M are skipped (a uniform branch). The main loop is
 *             instantiated for nr == 1 (branch-free decode) and nr > 1, and for 16-byte
 *             aligned or not weights; all four run the same fmaf sequence per output, so the
 *             variant never shows in the bits (tests/cuda/test_cuda_matmul.cu checks M = 1
 *             against every other M bit for bit).
 */
#include <stdint.h>

#include <atomic>
#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/dequant.cuh"

namespace {

using namespace ls::q;

#ifndef LS_MM_MINB
#define LS_MM_MINB 3
#endif
constexpr int KL = 8;                  /* k-lanes per row slot */
constexpr int RL = 4;                  /* row slots per warp */
constexpr int KW = 2;                  /* k-warps */
constexpr int RWG = 4;                 /* row-warps */
constexpr int NW = 1;                  /* weight rows per lane */
constexpr int THREADS = 32 * KW * RWG; /* 256 */
constexpr int R = 8;                   /* activation rows per tile */
constexpr int KS = KL * KW;            /* k-slots: 16 */
constexpr int BN = RWG * RL * NW;      /* weight rows per block: 16 */
static_assert(KL * RL == 32, "lane layout");

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
    static constexpr int CT = KS * T::CPT; /* chunks per K tile */
    static constexpr int TQ = T::QPC * CT; /* quads per activation row per tile */
    static constexpr int KT = T::E * CT;   /* elements per tile */
    static_assert(TQ == 64 || TQ == 128 || TQ == 256, "tile quads");
};

/* K tiles staged per barrier: several when few activation rows are staged, so that decode
 * (one row) pays a barrier every 4 tiles, not every tile. Only the staging granularity:
 * no output's arithmetic depends on it. */
__host__ __device__ constexpr int tiles_per_stage(int nr) {
    return nr == 1 ? 4 : nr == 2 ? 2 : 1;
}
/* Shared memory of a launch: x [2][TM][nr][TQ] float4. */
template <class T>
__host__ __device__ constexpr size_t smem_bytes(int nr) {
    return (size_t)2 * tiles_per_stage(nr) * nr * Tile<T>::TQ * 16;
}

/* The chunk arithmetic of one lane: prep, then for each quad group dequantize NW rows and
 * accumulate them into the NRT activation rows of the tile. With NRT == 1 the whole chunk
 * is one branch-free block (decode); with NRT == R rows past nr are skipped by a uniform
 * branch. Either way accumulator acc[i][r] receives exactly the same fmaf operations on the
 * same operands in the same order (the dependence chain fixes the order; nothing is
 * contracted or reassociated), so row r's bits do not depend on NRT or nr. */
template <class T, int NRT>
__device__ __forceinline__ void chunk_fma(float (&acc)[NW][R][2], const typename T::Raw (&cur)[NW], const Ctx &c, int ci,
                                          const float4 *xr, int rstride, int nr) {
    constexpr int CT = Tile<T>::CT;
    typename T::Prep P[NW];
#pragma unroll
    for (int i = 0; i < NW; i++) T::prep(P[i], cur[i], c, ci);
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
                const float4 xv = xr[r * rstride + T::qidx(G, u) * CT];
#pragma unroll
                for (int i = 0; i < NW; i++) {
                    float &a = acc[i][r][G & 1];
                    a = fmaf(wv[i][4 * u + 0], xv.x, a);
                    a = fmaf(wv[i][4 * u + 1], xv.y, a);
                    a = fmaf(wv[i][4 * u + 2], xv.z, a);
                    a = fmaf(wv[i][4 * u + 3], xv.w, a);
                }
            }
        }
    }
}

/* Blocks per SM the register allocation must allow (80 registers at 3): the Q5_K and Q6_K
 * chunk decode needs more, so they run 2 blocks (16 warps) per SM rather than spill. */
template <class T>
struct MinBlocks {
    static constexpr int v = LS_MM_MINB;
};
template <>
struct MinBlocks<TQ5_K> {
    static constexpr int v = 2;
};
template <>
struct MinBlocks<TQ6_K> {
    static constexpr int v = 2;
};

/* The weight rows n .. n + NW - 1 of a lane (rows past N read a copy of the last row, never
 * stored) and their MLX scale / bias rows. */
__device__ __forceinline__ void lane_rows(const Ctx &c, int64_t n, const uint8_t *(&rowp)[NW],
                                          const uint8_t *(&sbp)[NW], const uint8_t *(&bbp)[NW]) {
#pragma unroll
    for (int i = 0; i < NW; i++) {
        const int64_t nrow = n + i < c.N ? n + i : c.N - 1;
        rowp[i] = c.w + (size_t)nrow * c.row_bytes;
        const int sbz = c.sb_kind == 0 ? 4 : 2; /* MLX scales / biases of the row */
        sbp[i] = c.sc ? c.sc + (size_t)nrow * c.ng * sbz : nullptr;
        bbp[i] = c.bi ? c.bi + (size_t)nrow * c.ng * sbz : nullptr;
    }
}

/* The fixed combine: the two chains of each output, an xor butterfly over the 8 k-lanes,
 * then k-warp 0 + k-warp 1; stores the block's outputs. */
__device__ __forceinline__ void combine_store(const float (&acc)[NW][R][2], float (&red)[KW][R][BN], int nr, int kw,
                                              int kl, int rl0, const Ctx &c, int64_t m0, int64_t n0, float *y) {
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= nr) break;
#pragma unroll
        for (int i = 0; i < NW; i++) {
            float v = acc[i][r][0] + acc[i][r][1];
            v = v + __shfl_xor_sync(0xffffffffu, v, 1);
            v = v + __shfl_xor_sync(0xffffffffu, v, 2);
            v = v + __shfl_xor_sync(0xffffffffu, v, 4);
            if (kl == 0) red[kw][r][rl0 + i] = v;
        }
    }
    __syncthreads();
    const int tid = threadIdx.x;
    if (tid < nr * BN) {
        const int r = tid / BN, nl = tid % BN;
        const int64_t n = n0 + nl;
        if (n < c.N) y[(m0 + r) * c.N + n] = red[0][r][nl] + red[1][r][nl];
    }
}

template <class T>
__global__ void __launch_bounds__(THREADS, MinBlocks<T>::v)
    mm_kernel(const Ctx c, const float *__restrict__ x, float *__restrict__ y, int64_t M, int x16) {
    constexpr int CT = Tile<T>::CT, TQ = Tile<T>::TQ, KT = Tile<T>::KT, CPT = T::CPT;
    extern __shared__ float4 xs[]; /* [2][TM][nr][QPC][CT] */
    __shared__ float red[KW][R][BN];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kw = warp % KW, rw = warp / KW, rs = lane / KL, kl = lane % KL;
    const int s = kw * KL + kl; /* k-slot */
    const int64_t m0 = (int64_t)blockIdx.x * R;
    const int nr = (int)(M - m0 < R ? M - m0 : R);
    const int TM = tiles_per_stage(nr);
    const int64_t n0 = (int64_t)blockIdx.y * BN;
    const int rl0 = (rw * RL + rs) * NW; /* first of this lane's rows, in the block */
    const int nch = c.nch;
    const int nstage = (nch + CT * TM - 1) / (CT * TM); /* uniform over the block */
    const float *xb = x + m0 * c.K;

    /* ---- staging of activations: thread slots u = tid % SU + SU * j of rows tid / SU + RS * k
     * (layout per tile [r][q][c]: quad (q, c) = x[t * KT + kpos(c, q) .. + 4]) ---- */
    constexpr int SU = TQ < THREADS ? TQ : THREADS, SJ = TQ / SU, RS = THREADS / SU;
    int koff[SJ], cst[SJ];
#pragma unroll
    for (int j = 0; j < SJ; j++) {
        const int u = tid % SU + SU * j;
        cst[j] = u % CT;
        koff[j] = T::kpos(u % CT, u / CT);
    }
    auto stage = [&](int st) { /* tiles st * TM .. + TM into buffer st & 1 */
        float4 *dst0 = xs + (size_t)(st & 1) * TM * nr * TQ + tid % SU;
        for (int tm = 0; tm < TM; tm++) {
            const int t = st * TM + tm;
            const float *src = xb + (int64_t)t * KT;
            float4 *dst = dst0 + (size_t)tm * nr * TQ;
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
        }
    };

    /* this lane's weight rows */
    const uint8_t *rowp[NW], *sbp[NW], *bbp[NW];
    lane_rows(c, n0 + rl0, rowp, sbp, bbp);

    float acc[NW][R][2]; /* two chains per output: even and odd quad groups */
#pragma unroll
    for (int i = 0; i < NW; i++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[i][r][0] = acc[i][r][1] = 0.0f;

    stage(0);
    cp_async_commit();

    /* The main loop, specialized on the weights' 16-byte alignment (a property of the weight)
     * and on nr == 1 (decode: branch-free chunk code): every variant runs the same arithmetic
     * on the same values, so which one runs never shows in the bits. */
    auto main_loop = [&](auto a16c, auto nr1c) {
        constexpr int A16 = decltype(a16c)::value;
        constexpr bool NR1 = decltype(nr1c)::value;
        typename T::Raw cur[NW], nxt[NW] = {};
        if (s < nch) {
#pragma unroll
            for (int i = 0; i < NW; i++) T::load(cur[i], rowp[i], s, A16, sbp[i], bbp[i], c);
        }
        /* this lane's j-th chunk is ci = s + 16 j: stage j / (TM CPT), its tile j / CPT */
        int ci = s;
        for (int st = 0; st < nstage; st++) {
            if (st + 1 < nstage) stage(st + 1);
            cp_async_commit();
            cp_async_wait1();
            __syncthreads();
            const float4 *xst = xs + (size_t)(st & 1) * TM * nr * TQ + s;
            for (int tm = 0; tm < TM; tm++) {
                const float4 *xt = xst + (size_t)tm * nr * TQ;
#pragma unroll
                for (int jj = 0; jj < CPT; jj++, ci += KS) {
                    const int cn = ci + KS;
                    if (cn < nch) {
#pragma unroll
                        for (int i = 0; i < NW; i++) T::load(nxt[i], rowp[i], cn, A16, sbp[i], bbp[i], c);
                    }
                    if (ci < nch) {
                        if constexpr (NR1)
                            chunk_fma<T, 1>(acc, cur, c, ci, xt + KS * jj, TQ, 1);
                        else
                            chunk_fma<T, R>(acc, cur, c, ci, xt + KS * jj, TQ, nr);
                    }
#pragma unroll
                    for (int i = 0; i < NW; i++) cur[i] = nxt[i];
                }
            }
            __syncthreads();
        }
    };
    using I1 = std::integral_constant<int, 1>;
    using I0 = std::integral_constant<int, 0>;
    if (c.a16) {
        if (nr == 1) main_loop(I1{}, std::true_type{});
        else main_loop(I1{}, std::false_type{});
    } else {
        if (nr == 1) main_loop(I0{}, std::true_type{});
        else main_loop(I0{}, std::false_type{});
    }

    combine_store(acc, red, nr, kw, kl, rl0, c, m0, n0, y);
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
    static std::atomic<bool> attr_set{false}; /* racing threads set the same value */
    if (!attr_set.load(std::memory_order_relaxed)) {
        if (cudaFuncSetAttribute(mm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes<T>(R)) !=
            cudaSuccess)
            return -1;
        attr_set.store(true, std::memory_order_relaxed);
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

} // namespace

/* Validates w and fills c; returns the dispatch key (type, or 100 + bits for MLX), -1 if
 * unsupported. */
int ls::q::mm_prepare(const ls_weight *w, Ctx &c) {
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

extern "C" int ls_cuda_matmul_supported(const ls_weight *w) {
    Ctx c;
    return ls::q::mm_prepare(w, c) >= 0;
}

extern "C" int ls_cuda_matmul(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y, void *scratch,
                              size_t scratch_bytes) {
    return ls_cuda_matmul_ex(st, w, x, m, y, scratch, scratch_bytes, 0);
}

extern "C" int ls_cuda_matmul_ex(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y,
                                 void *scratch, size_t scratch_bytes, int act_ready) {
    if (ls_cuda_mmq_key(w) >= 0) return ls_cuda_mmq_ex(st, w, x, m, y, scratch, scratch_bytes, act_ready);
    Ctx c;
    const int key = ls::q::mm_prepare(w, c);
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
    const int key = ls::q::mm_prepare(w, c);
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
