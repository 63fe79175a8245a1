/* What the two integer-dot matmul kernels share (mmq.cu: dp4a, any M; mmq_mma.cu: int8
 * tensor-core tiles for M >= MMA_MIN_ROWS): the quantized activation layout and the one
 * reduction order both follow, so that a row's bits never depend on which kernel ran.
 * docs/cuda.md section 2a states the numerics.
 *
 * The order, per output y[m][n] of a weight with nch lane chunks (a chunk is XB activation
 * blocks of 32) and U = 32 kw_of(key, nch) virtual lanes:
 *   p[u] = the f32 accumulator of virtual lane u (u < min(U, nch)), starting at 0 and
 *          folding chunks u, u + U, u + 2U, .. in increasing order, each chunk's blocks in
 *          order, by the type's acc_block steps (fmaf with the block's exact integer sum);
 *   y    = ((p[0] + p[1]) + p[2]) + .. + p[min(U, nch) - 1].
 * Integer sums are exact, so how a kernel forms them (dp4a lanes or mma tiles) is free;
 * everything after them is this sequence. */
#ifndef LS_KERNELS_CUDA_MMQ_COMMON_CUH
#define LS_KERNELS_CUDA_MMQ_COMMON_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/dequant.cuh"

namespace ls::mmq {

constexpr int QB = 32;           /* activation block */
constexpr int XB_BYTES = 2 * QB; /* h plane then l plane of one block */

/* Which kernel serves a call (same bits either way, see above): the tensor-core tiles of
 * 32 x 32 outputs when the call has at least MMA_MIN_ROWS rows and enough tiles to fill
 * the GPU (MMA_MIN_TILES: two per SM of an H200); else the dp4a kernel, whose tiles of
 * 4 x 8 outputs spread a small matrix (a 270M model's 640-row projections, a 32-row
 * batcher step) over more warps. */
constexpr int64_t MMA_MIN_ROWS = 16;
constexpr int64_t MMA_MIN_TILES = 264;
inline bool use_mma(int64_t M, int64_t N) {
    return M >= MMA_MIN_ROWS && ((M + 31) / 32) * ((N + 31) / 32) >= MMA_MIN_TILES;
}
/* Of the calls use_mma gives the tensor cores, the block tiles (mmq_tile.cu: 128 weight rows
 * x 64 activation rows a block, chunks staged through shared memory) take those of the types
 * where they measured faster at 64 and 512 rows on 21504 x 5376 and 5376 x 21504 matrices
 * (H200, docs/benchmarks.md session 12): MLX 4/8-bit 1.1-2.2x, Q4_K rows that are 16-byte
 * aligned (a16: one 16-byte header load) 1.0-1.5x; tile_launch sends aligned Q4_K and Q6_K on
 * to the decoded tiles (mmq_dtile.cu, mmq_dtile6.cu: session 16). Q8_0 and unaligned Q4_K
 * measured 0.8-1.15x and keep the warp tiles. Below TILE_MIN_ROWS most of a block's 64 rows would be
 * padding; below TILE_MIN_BLOCKS blocks (one wave of 132 SMs) the warp tiles spread a small
 * matrix over more of the GPU. */
constexpr int64_t TILE_MIN_ROWS = 48;
constexpr int64_t TILE_MIN_BLOCKS = 132;
inline bool use_tile(int key, bool a16, int64_t M, int64_t N) {
    if (M < TILE_MIN_ROWS) return false;
#ifndef LS_DTILE_OFF /* compile-time switch back to session 12's choice (Q6_K on the warp tiles), for measuring */
    /* Q6_K's decoded tiles are 64 x 64 (mmq_dtile6.cu): counted as what they are, they also
     * take a 27B attn_v (2048 rows: 256 blocks at 512 rows), 1.01x end to end (session 16) */
    if (key == LS_TYPE_Q6_K) return ((M + 63) / 64) * ((N + 63) / 64) >= TILE_MIN_BLOCKS;
#endif
    const bool type = key == 104 || key == 108 || (key == LS_TYPE_Q4_K && a16);
    return type && ((M + 63) / 64) * ((N + 127) / 128) >= TILE_MIN_BLOCKS;
}
/* The small-M tensor-core kernel (mmq_small.cu: tiles of 16 weight rows x 8 activation
 * rows, weights staged through shared memory; up to 4 rows both activation planes in one mma)
 * is nearly flat in M up to 8 rows but streams a one-row call at 1.0-2.3 TB/s against the
 * dp4a kernel's 1.7-3.4 (H200, test_cuda_matmul --bench, docs/benchmarks.md session 8): it
 * serves the calls from the row count where it measured faster on 21504 x 5376 and 5376 x
 * 21504 matrices (session 13, with the paired planes; 2 / 4 rows, us, small vs dp4a): Q4_K
 * from 3 rows (4: 51 / 69 vs 93 / 124), MLX 8-bit (key 108) and Q8_0 from 4 (MLX 8-bit 4: 64
 * / 70 vs 65 / 87, 2: 63 / 66 vs 44 / 40; Q8_0 4: 53 / 67 vs 76 / 68), every other type at 8
 * (MLX 4-bit 4: 58 / 58 vs 51 / 48; Q6_K 4: 95 / 125 vs 90 / 102). 3 rows were not measured
 * for MLX 8-bit / Q8_0: they stay on the dp4a kernel. */
constexpr int64_t SMALL_MAX_ROWS = 8;
inline int64_t small_min_rows(int key) {
#ifdef LS_SMALL_MIN_ROWS /* compile-time override, for measuring */
    (void)key;
    return LS_SMALL_MIN_ROWS;
#endif
    switch (key) {
    case LS_TYPE_Q4_K: return 3;
    case LS_TYPE_Q8_0:
    case 108: return 4;
    default: return 8;
    }
}
inline bool use_small(int key, int64_t M, int64_t N) {
    return M >= small_min_rows(key) && M <= SMALL_MAX_ROWS && !use_mma(M, N);
}
/* The narrow-call kernel (mmq_narrow.cu: MLX 4/8-bit fed by tensor-map copies; 1..4 rows,
 * 16-byte aligned rows, groups of 32 / 64 / 128) takes the calls it serves from NARROW_MIN_ROWS
 * rows on, ahead of the small-M and dp4a kernels (H200, 4 rows, us, against the small-M
 * kernel: MLX 8-bit 21504 x 5376 48.2 vs 64.6, 5376 x 21504 61.7 vs 69.1 in session 17; its
 * tensor-map form of session 21: 39.8 and 37.7, MLX 4-bit 32.9, 33.4, 26.5 and 18.3 us; a 31B
 * verify block of 4 17.0 ms in session 16, 11.5 now). One-row calls stay on the one-row
 * kernels (MLX 4-bit 21504 x 5376: 35.1 vs 24.4; MLX 8-bit 5376 x 21504: 38.8 vs 33.8). */
#ifdef LS_NARROW_MIN_ROWS /* compile-time override, for measuring */
constexpr int64_t NARROW_MIN_ROWS = LS_NARROW_MIN_ROWS;
#else
constexpr int64_t NARROW_MIN_ROWS = 2;
#endif
bool narrow_serves(int key, const ls::q::Ctx &c, int64_t M);

/* The weight of a grouped launch (up to 3 weights' row blocks one after another: mmq.cu
 * Group, mmq_small.cu SmallGroup) that row block yb falls in: c and y become its context and
 * output, yb the block within it. Uniform selects, no dynamic indexing of the parameter
 * space. */
template <class G>
__device__ __forceinline__ void group_pick(const G &g, int64_t &yb, ls::q::Ctx &c, float *&y) {
    c = g.c[0];
    y = g.y[0];
    if (g.n > 1 && yb >= g.nb[0]) {
        yb -= g.nb[0];
        c = g.c[1];
        y = g.y[1];
        if (g.n > 2 && yb >= g.nb[1]) {
            yb -= g.nb[1];
            c = g.c[2];
            y = g.y[2];
        }
    }
}

/* Block metadata, 16 bytes: dx, X (f32), V0, V1 (int32 bits). */
struct Meta {
    float dx, X;
    int v0, v1;
};

/* Bit i of n (i < 4) to bit 4 of byte i: the fifth bits of four Q5_0 / Q5_1 codes. */
__device__ __forceinline__ uint32_t spread_nibble(uint32_t n) {
    return (((n & 0xfu) * 0x00204081u) & 0x01010101u) << 4;
}

/* The order's walk as the block-tile kernels take it, one chunk a step: lane u, chunk
 * ci = u + r U; after a lane's last chunk the next lane's first (mmq_tile.cu, mmq_dtile.cu). */
struct Walk {
    int u, ci;
};
__device__ __forceinline__ void step(Walk &w, int U, int nch) {
    w.ci += U;
    if (w.ci >= nch) {
        w.u++;
        w.ci = w.u;
    }
}

/* k-warps of a weight, a property of its type (key as ls_cuda_mmq_key) and its chunks per
 * row: it fixes U and so the reduction order above. One k-warp up to 1023 chunks: at 168 and
 * 672 chunks (a 31B / 27B MLP's 21504 x 5376 and 5376 x 21504) it streams a one-row call
 * 4-14% faster than two or four (MLX 4-bit 24.6 vs 28.7 us, 22.9 vs 25.8; Q4_K 32.6 vs
 * 37.8; MLX 8-bit 38.7 vs 40.2; H200, docs/benchmarks.md session 10) and tiles of 512 rows
 * alike. Q6_K keeps splitting from 128 chunks: its dp4a tiles of 2..8 rows lose up to a
 * third with one k-warp (5376 x 21504, 4 rows: 133 vs 101 us). */
inline int kw_of(int key, int nch) {
    if (key == LS_TYPE_Q6_K) return nch >= 4 * 64 ? 4 : nch >= 2 * 64 ? 2 : 1;
    return nch >= 2048 ? 4 : nch >= 1024 ? 2 : 1;
}

/* mmq_mma.cu: y[M][N] for activation rows already quantized to xq / xm (c.nch and c.kw
 * set); key as ls_cuda_mmq_key. Returns 0, or -1 when nothing was launched. */
int mma_launch(cudaStream_t st, const ls::q::Ctx &c, int key, const int8_t *xq, const Meta *xm, float *y,
               int64_t M);
/* mmq_tile.cu: the block tiles (128 weight rows x 64 activation rows a block, chunks staged
 * through shared memory) for the same call; the same bits as mma_launch. */
int tile_launch(cudaStream_t st, const ls::q::Ctx &c, int key, const int8_t *xq, const Meta *xm, float *y,
                int64_t M);
/* mmq_dtile.cu: block tiles whose weight chunks are decoded once a block into shared memory,
 * for Q4_K rows that are 16-byte aligned (tile_launch sends them there); the same bits. */
int dtile_launch(cudaStream_t st, const ls::q::Ctx &c, const int8_t *xq, const Meta *xm, float *y, int64_t M);
/* mmq_dtile6.cu: the same for Q6_K weights (four lanes a round). */
int dtile6_launch(cudaStream_t st, const ls::q::Ctx &c, const int8_t *xq, const Meta *xm, float *y, int64_t M);
/* mmq_narrow.cu: the narrow-call kernel for n (1..3) MLX weights of one type and K (c[i].nch,
 * kw set; narrow_serves holds for each) on the same M quantized activation rows; the same bits
 * as the other kernels. Returns 0, or -1 when nothing was launched. */
int narrow_launch(cudaStream_t st, const ls::q::Ctx *c, float *const *y, int n, int key, const int8_t *xq,
                  const Meta *xm, int64_t M);
/* mmq_small.cu: the small-M kernel for n (1..3) weights of one type and K (c[i].nch, kw set)
 * on the same M quantized activation rows, y[i] = W_i x; each weight's rows get the same
 * bits as a launch of their own. Returns 0, or -1 when nothing was launched. */
int small_launch(cudaStream_t st, const ls::q::Ctx *c, float *const *y, int n, int key, const int8_t *xq,
                 const Meta *xm, int64_t M);

} // namespace ls::mmq

#endif
