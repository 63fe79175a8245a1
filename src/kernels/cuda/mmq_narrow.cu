/* The narrow-call kernel of the integer-dot matmul for MLX affine 4/8-bit weights: calls of 1
 * to 4 activation rows (a verify block of K = 4 takes it from NARROW_MIN_ROWS rows; tests also
 * force it on one row), int8 tensor cores fed by tensor-map copies (TMA, sm_90). The same
 * activation blocks, exact integer sums and f32 sequence per output as mmq.cu's dp4a kernel and
 * the mma kernels (mmq_common.cuh), so a row's bits do not depend on which of them ran.
 * docs/cuda.md section 2a; the order of a block's folds and its staged scales: mmq_narrow.cuh.
 *
 * A block owns 16 weight rows (MLX 4-bit calls with enough rows: 32, two m16 tiles a warp that
 * share each activation fragment, rows_of); each of its 4 warps keeps a private ring of NS
 * shared-memory stages, each holding one round (its lane group's 4 chunks of the rows, the activation
 * blocks of those chunks and their Meta) as three 2-D tensor-map boxes that lane 0 requests
 * with one instruction each, completed on the stage's mbarrier. The warp folds one round while
 * NS - 1 are in flight, with no block barrier between the scales' copy and the join.
 *
 * Why (docs/benchmarks.md, eighteenth run): the kernels before it loaded a round into registers
 * (8-bit) or by 16-byte cp.async (4-bit) and kept one or two rounds in flight; ncu found the
 * one-wave 5376 x 21504 down projection latency-bound at 10 warps an SM, with the activation
 * blocks (215 KB for 4 rows of a 21504-wide row, past L1) a second round trip a round. A tensor
 * map moves 16 rows x 128 bytes in one request and no registers. One 1-D bulk copy per row span
 * instead (40 requests a round) was twice as slow: the copy engine takes a request every 9-12
 * SM cycles whatever its size. */
#include <stdint.h>

#include <atomic>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/bulk.cuh"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_narrow.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/staging.cuh"

namespace {

using namespace ls::narrow;

using ls::q::Ctx;

#ifndef LS_NARROW_NS
#define LS_NARROW_NS 3
#endif
constexpr int NS = LS_NARROW_NS; /* stages a warp: NS - 1 rounds in flight while it folds one */

/* A stage holds one round, as three tensor-map boxes: the weights (R rows x the round's LG
 * chunks, WB bytes a row, swizzled by the copy engine: 128-byte rows for 8-bit, 64-byte for
 * 4-bit), the activation blocks (MAXR rows x LG blocks of 64 bytes) and their Meta (MAXR rows
 * x LG x 16 bytes). Rows past N or nr and chunks past the row's end arrive as zeros. */
template <int BITS, int R>
struct BStage {
    static constexpr int CB = 4 * BITS; /* bytes per chunk and row */
    static constexpr int WB = LG * CB;  /* weight box row: 128 (8-bit) or 64 (4-bit) */
    static constexpr int W = R * WB, X = MAXR * LG * 64, M = MAXR * LG * 16;
    static constexpr uint32_t BYTES = W + X + M;
};
/* Shared memory of a block, from a 1024-byte aligned base (the 128-byte swizzle's period):
 * the warps' weight stages, activation stages, Meta stages, barriers (NS a warp); then the
 * staged scales and biases and the lanes' partials. */
template <int BITS, int R>
__host__ __device__ constexpr int rings_bytes() {
    using S = BStage<BITS, R>;
    return NW * NS * (S::W + S::X + S::M) + ((NW * NS * 8 + 15) & ~15);
}
constexpr int ALIGN_SLACK = 1024;

/* The kernel's tensor maps: each weight of the group, the activation blocks, their Meta. */
struct TMaps { /* CUtensorMap: 64-byte aligned itself */
    CUtensorMap w[GMAX], x, m;
};

/* Fragment row g (0..7) of the m16 tile reads stage row sr(g) (and sr(g) + 8): the weight
 * row n0 + sr(g). 8-bit: with 128-byte rows swizzled by row % 8, the four rows a half warp's
 * 8-byte loads read (g = 4i .. 4i + 3, both 16-byte pieces of one chunk each) must differ in
 * bits 1-2 to land in distinct banks: rows 0, 2, 4, 6, then 1, 3, 5, 7; 4-bit (64-byte rows,
 * 4-byte loads of 8 rows) needs no permutation. */
template <int BITS>
__device__ __forceinline__ int sr_of(int g) {
    return BITS == 8 ? ((g & 3) << 1) | (g >> 2) : g;
}

/* Thread (g, t4)'s offsets within its warp's stages. aw: of stage row sr's chunk 0, 8-bit its
 * 8 bytes at 8 t4 (chunk v: aw ^ 32 v), 4-bit its word at 4 t4 (chunk v: aw ^ 16 v); row
 * sr + 8: + 8 WB. ax: its B column's 8 bytes at 8 t4 of chunk 0 (activation row g / 2, plane
 * g % 2; chunk v: + 64 v). am: activation row t4's Meta of chunk 0. */
struct Lds {
    uint32_t aw, ax, am;
};
template <int BITS>
__device__ __forceinline__ Lds lds_of(int nr, int g, int t4) {
    Lds o;
    const int sr = sr_of<BITS>(g), gr = (g >> 1) < nr ? g >> 1 : nr - 1, mr = t4 < nr ? t4 : nr - 1;
    if (BITS == 8) { /* 128-byte swizzle: 16-byte piece c of row r at slot c ^ (r % 8) */
        /* bytes 8 t4 of chunk v: piece 2 v + t4 / 2, at slot (2 v + t4 / 2) ^ sr */
        o.aw = (uint32_t)(sr * 128 + 8 * (t4 & 1) + 16 * ((t4 >> 1) ^ (sr & 1)) + 32 * (sr >> 1));
    } else { /* 64-byte swizzle: piece c of row r at slot c ^ ((r / 2) % 4) */
        o.aw = (uint32_t)(sr * 64 + 16 * ((sr >> 1) & 3) + 4 * t4);
    }
    o.ax = (uint32_t)(gr * LG * 64 + (g & 1) * 32 + 8 * t4);
    o.am = (uint32_t)(mr * LG * 16);
    return o;
}

/* A round in registers, read from its stage: for each chunk, thread (g, t4)'s share of its two
 * weight rows in mmq_frag.cuh's k order (8-bit: its 8 codes at byte 8 t4; 4-bit: its word at
 * byte 4 t4, the nibbles of elements 8 t4 .. 8 t4 + 7, which the activations store in that
 * order: QMlx4::IL) and its B column's 8 plane bytes at 8 t4; the scale and bias words of its
 * rows (load_sb) and activation row t4's dx and X (fold_sums). */
template <class T, int R>
struct BRound {
    static constexpr int K = R / 8; /* stage rows sr + 8 k: tile k / 2, fragment row g + 8 (k % 2) */
    uint32_t s[K][T::NG], b[K][T::NG];
    float2 xm[LG];
    uint2 w8[K][LG];    /* 8-bit: 8 bytes of each chunk of rows sr + 8 k */
    uint32_t w4[K][LG]; /* 4-bit: words of rows sr + 8 k */
    uint2 xb[LG];       /* B words (8 bytes of the plane) of each chunk */
};

/* Where a warp's stage s lives (shared addresses). */
struct Ring {
    uint32_t w, x, m, bar;
};
template <int BITS, int R>
__device__ __forceinline__ Ring ring_of(uint32_t base, int warp, int s) {
    using S = BStage<BITS, R>;
    const int i = warp * NS + s;
    Ring r;
    r.w = base + (uint32_t)(i * S::W);
    r.x = base + (uint32_t)(NW * NS * S::W + i * S::X);
    r.m = base + (uint32_t)(NW * NS * (S::W + S::X) + i * S::M);
    r.bar = base + (uint32_t)(NW * NS * (S::W + S::X + S::M) + 8 * i);
    return r;
}

/* The round at chunk ci0 into stage r, by lane 0: its bytes announced, then the weight box
 * (rows n0.., never written by a step: may run before the grid dependency wait) and / or the
 * activation boxes (after it). */
template <int BITS, int R>
__device__ __forceinline__ void issue(const Ring &r, const TMaps &tm, int wi, int64_t n0, int ci0, bool w, bool x) {
    using S = BStage<BITS, R>;
    if (w) {
        ls::bulk::expect(r.bar, S::BYTES);
        ls::bulk::copy2d(r.w, &tm.w[wi], ci0 * S::CB, (int)n0, r.bar);
    }
    if (x) {
        ls::bulk::copy2d(r.x, &tm.x, ci0 * ls::mmq::XB_BYTES, 0, r.bar);
        ls::bulk::copy2d(r.m, &tm.m, ci0 * 16, 0, r.bar);
    }
}

template <class T, bool FULL, int R>
__device__ __forceinline__ void read_stage(BRound<T, R> &r, const Ring &st, const Lds &o, const Ctx &c, int ci0) {
    const int left = FULL ? LG : c.nch - ci0;
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (v >= left) break;
#pragma unroll
        for (int k = 0; k < R / 8; k++) {
            if constexpr (T::WPC == 2)
                r.w8[k][v] = ls::stage::lds_u2(st.w + ((o.aw ^ (uint32_t)(32 * v)) + (uint32_t)(k * 8 * 128)));
            else
                r.w4[k][v] = ls::stage::lds_u32(st.w + ((o.aw ^ (uint32_t)(16 * v)) + (uint32_t)(k * 8 * 64)));
        }
        r.xb[v] = ls::stage::lds_u2(st.x + o.ax + (uint32_t)(64 * v));
    }
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (v >= left) break;
        const uint2 m = ls::stage::lds_u2(st.m + o.am + (uint32_t)(16 * v));
        r.xm[v] = make_float2(__uint_as_float(m.x), __uint_as_float(m.y));
    }
}

/* Fold a round (chunks ci0 + v, below nch) into the lanes' partials la[v][k]: one product a
 * chunk (4-bit: the nibbles split into the two planes first); chunks past the row's end arrive
 * as zeros and are never folded. */
template <class T, int SBK, int GSH, bool FULL, int R>
__device__ __forceinline__ void fold(float (&la)[LG][R / 16][2], const BRound<T, R> &r, const Ctx &c, int ci0) {
#pragma unroll
    for (int v = 0; v < LG; v++) {
        if (!FULL && ci0 + v >= c.nch) break; /* uniform */
#pragma unroll
        for (int t = 0; t < R / 16; t++) { /* the tiles share the chunk's B fragment */
            int cc[4];
            if constexpr (T::WPC == 2) {
                ls::mmq::mma_k32<true>(cc, r.w8[2 * t][v].x, r.w8[2 * t + 1][v].x, r.w8[2 * t][v].y,
                                       r.w8[2 * t + 1][v].y, r.xb[v].x, r.xb[v].y);
            } else {
                uint32_t lo[2], hi[2];
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    lo[k] = r.w4[2 * t + k][v] & 0x0f0f0f0fu;
                    hi[k] = (r.w4[2 * t + k][v] >> 4) & 0x0f0f0f0fu;
                }
                ls::mmq::mma_k32<true>(cc, lo[0], lo[1], hi[0], hi[1], r.xb[v].x, r.xb[v].y);
            }
            fold_sums<SBK, GSH>(la[v][t], cc, r, v, t, c);
        }
    }
}

template <class T, int SBK, int GSH, int R>
__device__ __forceinline__ void narrow_body(const TMaps &tm, int wi, const Ctx &c, float *__restrict__ y, int64_t n0,
                                          int nr, uint8_t *smem_raw) {
    constexpr int BITS = T::WPC * 4;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3, sr = sr_of<BITS>(g);
    const int nch = c.nch, U = 32 * c.kw, nu = lanes_of(c);
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + (ALIGN_SLACK - 1)) & ~(uint32_t)(ALIGN_SLACK - 1);
    uint8_t *smem = smem_raw + (base - raw);
    const uint8_t *sbm = smem + rings_bytes<BITS, R>();
    float *red = reinterpret_cast<float *>(smem + rings_bytes<BITS, R>() + sb_bytes<R>(sb_row_bytes(c)));
    stage_sb<R>(base + (uint32_t)rings_bytes<BITS, R>(), c, n0);
    if (lane == 0) {
#pragma unroll
        for (int s = 0; s < NS; s++) ls::bulk::bar_init(ring_of<BITS, R>(base, warp, s).bar, 1);
        ls::bulk::fence_init();
    }
    __syncwarp();
    const SideSrc<R> src = side_src<R>(c, n0, sr);
    const Lds o = lds_of<BITS>(nr, g, t4);
    float la[LG][R / 16][2];
#pragma unroll
    for (int v = 0; v < LG; v++)
#pragma unroll
        for (int t = 0; t < R / 16; t++) la[v][t][0] = la[v][t][1] = 0.0f;
    Pos p{LG * warp, LG * warp}, cp = p;
    /* the first NS rounds' weights before the wait, their activations after it */
    if (lane == 0) {
#pragma unroll
        for (int s = 0; s < NS; s++) {
            if (cp.u0 < nu) issue<BITS, R>(ring_of<BITS, R>(base, warp, s), tm, wi, n0, cp.ci0, true, false);
            if (cp.u0 < nu) next(cp, U, nch);
        }
    }
    ls::pdl::enter();
    if (lane == 0) {
        Pos ap = p;
#pragma unroll
        for (int s = 0; s < NS; s++) {
            if (ap.u0 < nu) issue<BITS, R>(ring_of<BITS, R>(base, warp, s), tm, wi, n0, ap.ci0, false, true);
            if (ap.u0 < nu) next(ap, U, nch);
        }
    }
    cp = p;
#pragma unroll
    for (int s = 0; s < NS; s++)
        if (cp.u0 < nu) next(cp, U, nch);
    ls::stage::cp_wait<0>(); /* this thread's scale copies */
    __syncthreads();         /* and every thread's */
    int s = 0;
    uint32_t ph = 0;
    while (p.u0 < nu) {
        const Ring st = ring_of<BITS, R>(base, warp, s);
        ls::bulk::wait(st.bar, ph);
        BRound<T, R> r;
        const bool full = nch - p.ci0 >= LG;
        if (full) {
            read_stage<T, true, R>(r, st, o, c, p.ci0);
            load_sb<T, true>(r, src, c, sbm, p.ci0);
        } else {
            read_stage<T, false, R>(r, st, o, c, p.ci0);
            load_sb<T, false>(r, src, c, sbm, p.ci0);
        }
        /* the stage is free once every lane's reads are done: refill it NS rounds ahead */
        ls::bulk::fence_reads();
        __syncwarp();
        if (cp.u0 < nu) {
            if (lane == 0) issue<BITS, R>(st, tm, wi, n0, cp.ci0, true, true);
            next(cp, U, nch);
        }
        if (full) fold<T, SBK, GSH, true, R>(la, r, c, p.ci0);
        else fold<T, SBK, GSH, false, R>(la, r, c, p.ci0);
        Pos q = p;
        next(q, U, nch);
        finish_group<R>(la, red, p, q, nu, nr, sr, t4);
        p = q;
        if (++s == NS) {
            s = 0;
            ph ^= 1u;
        }
    }
    __syncthreads();
    join_lanes<R>(red, c, y, n0, nu, nr);
}

template <class T, int SBK, int GSH, int R>
__global__ void __launch_bounds__(32 * NW, 4)
    narrow_kernel(const __grid_constant__ TMaps tm, const NarrowGroup ng, int nr) {
    extern __shared__ __align__(16) uint8_t smem[];
    int64_t n0;
    const int wi = pick_block<R>(ng, n0);
    narrow_body<T, SBK, GSH, R>(tm, wi, ng.c[wi], ng.y[wi], n0, nr, smem); /* calls ls::pdl::enter() */
}

/* cuTensorMapEncodeTiled from the driver, looked up once (no link against libcuda). */
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
    static std::atomic<PFN_cuTensorMapEncodeTiled_v12000> fn{nullptr};
    static std::atomic<int> tried{0};
    PFN_cuTensorMapEncodeTiled_v12000 f = fn.load(std::memory_order_acquire);
    if (f || tried.load(std::memory_order_acquire)) return f;
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        p = nullptr;
        (void)cudaGetLastError();
    }
    f = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    fn.store(f, std::memory_order_release);
    tried.store(1, std::memory_order_release);
    return f;
}

/* A 2-D byte tensor of `rows` rows of `cols` bytes, `stride` apart, read in boxes of bx x by. */
bool encode(CUtensorMap *m, const void *p, uint64_t cols, uint64_t rows, uint64_t stride, uint32_t bx, uint32_t by,
            CUtensorMapSwizzle sw) {
    const PFN_cuTensorMapEncodeTiled_v12000 f = encoder();
    if (!f) return false;
    const cuuint64_t dim[2] = {cols, rows}, str[1] = {stride};
    const cuuint32_t box[2] = {bx, by}, es[2] = {1, 1};
    return f(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void *>(p), dim, str, box, es,
             CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int BITS, int R>
bool maps_of(TMaps &tm, const NarrowGroup &g, const int8_t *xq, const ls::mmq::Meta *xm, int nr) {
    using S = BStage<BITS, R>;
    const CUtensorMapSwizzle sw = BITS == 8 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    for (int i = 0; i < g.n; i++)
        if (!encode(&tm.w[i], g.c[i].w, g.c[i].row_bytes, (uint64_t)g.c[i].N, g.c[i].row_bytes, S::WB, R, sw))
            return false;
    const uint64_t nbk = (uint64_t)(g.c[0].K / ls::mmq::QB);
    return encode(&tm.x, xq, nbk * ls::mmq::XB_BYTES, (uint64_t)nr, nbk * ls::mmq::XB_BYTES, LG * ls::mmq::XB_BYTES,
                  MAXR, CU_TENSOR_MAP_SWIZZLE_NONE) &&
           encode(&tm.m, xm, nbk * 16, (uint64_t)nr, nbk * 16, LG * 16, MAXR, CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <int BITS, int SBK, int GSH, int R>
int run_bits(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const ls::mmq::Meta *xm, int nr) {
    static std::atomic<int> have[32];
    TMaps tm;
    if (!maps_of<BITS, R>(tm, g, xq, xm, nr)) return -1;
    const auto k = narrow_kernel<NMlx<BITS, SBK, GSH>, SBK, GSH, R>;
    /* the kernel's machine code must be sm_90's: compiled for an older architecture (a
     * CMAKE_CUDA_ARCHITECTURES override) its copies are traps (bulk.cuh); asked once */
    static std::atomic<int> arch{0}; /* 0 unknown, 1 sm_90 or later, 2 older */
    if (arch.load(std::memory_order_relaxed) == 0) {
        cudaFuncAttributes fa;
        const bool ok = cudaFuncGetAttributes(&fa, k) == cudaSuccess && fa.binaryVersion >= 90;
        if (!ok) (void)cudaGetLastError();
        arch.store(ok ? 1 : 2, std::memory_order_relaxed);
    }
    if (arch.load(std::memory_order_relaxed) != 1) return -1;
    const size_t smem = ALIGN_SLACK + rings_bytes<BITS, R>() + sb_group_bytes<R>(g) +
                        (size_t)lanes_of(g.c[0]) * R * nr * sizeof(float);
    if (ls::stage::smem_raise(k, (int)smem, have) != 0) return -1;
    const cudaError_t e = ls::pdl::launch(k, dim3((unsigned)nb), 32 * NW, smem, st, tm, g, nr);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess ? 0 : -1;
}
template <int SBK, int GSH>
struct Launch8 {
    static int run(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const ls::mmq::Meta *xm,
                   int nr) {
        return run_bits<8, SBK, GSH, ROWS>(st, g, nb, xq, xm, nr);
    }
};
template <int SBK, int GSH>
struct Launch4 {
    static int run(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const ls::mmq::Meta *xm,
                   int nr) {
        return run_bits<4, SBK, GSH, ROWS>(st, g, nb, xq, xm, nr);
    }
};
template <int SBK, int GSH>
struct Launch4R32 {
    static int run(cudaStream_t st, const NarrowGroup &g, int64_t nb, const int8_t *xq, const ls::mmq::Meta *xm,
                   int nr) {
        return run_bits<4, SBK, GSH, 2 * ROWS>(st, g, nb, xq, xm, nr);
    }
};

/* Whether device d runs tensor-map copies (sm_90 and later), asked once a device (0 unknown,
 * 1 yes, 2 no); where not, narrow_launch declines and the caller takes the small-M kernel. */
std::atomic<int> tma_dev[32];

bool tma_ok() {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= 32) {
        (void)cudaGetLastError();
        return false;
    }
    int v = tma_dev[dev].load(std::memory_order_relaxed);
    if (v == 0) {
        v = ls::bulk::device_ok() ? 1 : 2;
        tma_dev[dev].store(v, std::memory_order_relaxed);
    }
    return v == 1;
}

/* Rows a block of a group's call (the same bits either way: a row's chunks, sums and f32
 * steps do not depend on its block). MLX 4-bit calls take two m16 tiles a warp (each
 * activation box then serves twice the weight bytes: for 4-bit weights a 16-row box is as
 * large as the activation box it is multiplied with) when their 32-row blocks still number at
 * least R32_MIN_BLOCKS (two an SM of a 132-SM H200: the 31B's q / k / v, its LM head) or,
 * for rows at most R32_MAX_K wide, R32_MIN_SHORT. Measured (H200, 4 rows, docs/benchmarks.md
 * twentieth run): the 31B's o (168 blocks), 5376 x 8192 (sliding layers) 18.4 -> 16.1 us and
 * 5376 x 16384 (global) 31.1 -> 27.6 with 32 rows, but 5376 x 21504 33.1 -> 34.5: a long
 * row's 32-row block stages twice the scales (43 KB), and 168 such blocks leave most SMs one
 * block of 4 warps. Fewer blocks than the o's were not measured and keep 16 rows. */
#ifndef LS_NARROW_R32
#define LS_NARROW_R32 1
#endif
constexpr int64_t R32_MIN_BLOCKS = 256, R32_MIN_SHORT = 168, R32_MAX_K = 16384;
std::atomic<int> g_rows{0}; /* ls_cuda_mmq_narrow_rows: 0 = the rule below, else 16 or 32 */
bool rows_forced() {
    return g_rows.load(std::memory_order_relaxed) != 0;
}
/* The group's blocks of R rows, each weight's count set in g.nb. */
int64_t blocks_of(NarrowGroup &g, int R) {
    int64_t nb = 0;
    for (int i = 0; i < g.n; i++) {
        g.nb[i] = (g.c[i].N + R - 1) / R;
        nb += g.nb[i];
    }
    return nb;
}
int rows_of(int key, const Ctx *c, int n) {
    if (key != 104) return ROWS;
    const int f = g_rows.load(std::memory_order_relaxed);
    if (f) return f;
    if (!LS_NARROW_R32) return ROWS;
    int64_t nb = 0;
    for (int i = 0; i < n; i++) nb += (c[i].N + 2 * ROWS - 1) / (2 * ROWS);
    const bool short_rows = c[0].K <= R32_MAX_K; /* a group shares K */
    return nb >= R32_MIN_BLOCKS || (short_rows && nb >= R32_MIN_SHORT) ? 2 * ROWS : ROWS;
}

} // namespace

namespace ls::mmq {

bool narrow_serves(int key, const Ctx &c, int64_t M) {
    /* 32-bit offsets (SideSrc) and tensor-map sizes: weight arrays below 4 GiB; stage_sb: scale
     * rows of at most SB_ROW_MAX bytes, 2-byte aligned (f32: 4-byte) */
    const uint64_t wb = (uint64_t)c.N * c.row_bytes;
    const uint32_t sbz = c.sb_kind == 0 ? 4u : 2u;
    const bool sb_ok = c.ng >= 1 && (uint64_t)c.ng * sbz <= ls::narrow::SB_ROW_MAX &&
                       ((reinterpret_cast<uintptr_t>(c.sc) | reinterpret_cast<uintptr_t>(c.bi)) & (sbz - 1)) == 0;
    /* the copies' coordinates are int32: rows and row bytes below 2^31 */
    return (key == 104 || key == 108) && M >= 1 && M <= MAXR && c.a16 && c.gshift >= 0 && c.gshift <= 2 &&
           c.kw >= 1 && c.kw <= 4 && wb < (1ull << 32) && c.row_bytes < (1ull << 31) && c.N < (1ll << 31) && sb_ok;
}

int narrow_launch(cudaStream_t st, const Ctx *c, float *const *y, int n, int key, const int8_t *xq, const Meta *xm,
                  int64_t M) {
    if (n < 1 || n > GMAX) return -1;
    NarrowGroup g{};
    g.n = n;
    bool bf16 = true;
    for (int i = 0; i < n; i++) {
        if (!narrow_serves(key, c[i], M) || c[i].gshift != c[0].gshift || c[i].nch != c[0].nch ||
            c[i].kw != c[0].kw)
            return -1;
        g.c[i] = c[i];
        g.y[i] = y[i];
        bf16 = bf16 && c[i].sb_kind == 2;
    }
    const int nr = (int)M;
    /* tensor maps need 16-byte aligned bases and row strides: the weights (narrow_serves: a16)
     * and the activation blocks and their Meta (the scratch's layout; checked, not assumed) */
    if (((reinterpret_cast<uintptr_t>(xq) | reinterpret_cast<uintptr_t>(xm)) & 15u) != 0 || !tma_ok()) return -1;
    const int R = rows_of(key, c, n);
    const int64_t nb = blocks_of(g, R);
    if (nb > 0x7fffffff) return -1;
    if (key == 108) return launch_for<Launch8>(st, g, nb, bf16, xq, xm, nr);
    if (R == ROWS) return launch_for<Launch4>(st, g, nb, bf16, xq, xm, nr);
    if (launch_for<Launch4R32>(st, g, nb, bf16, xq, xm, nr) == 0) return 0;
    /* 32-row blocks refused (their shared memory past the device's limit: scale rows near
     * SB_ROW_MAX, wide rows of four k-warps): 16-row blocks, unless a test forced 32 */
    if (rows_forced()) return -1;
    return launch_for<Launch4>(st, g, blocks_of(g, ROWS), bf16, xq, xm, nr);
}

} // namespace ls::mmq

extern "C" int ls_cuda_mmq_narrow_rows(int rows) {
    if (rows != 0 && rows != ROWS && rows != 2 * ROWS) return -1;
    return g_rows.exchange(rows);
}
