/* CUDA matmul and embedding gather for every weight type (matmul.cu, dequant.cuh; the
 * integer-dot path for the main quantized types in mmq.cu, described there).
 *
 * Batch invariance of the f32 kernel (docs/cuda.md section 2): there is ONE kernel per weight type and it
 * serves every M. Each output y[m][n] is reduced over K in one fixed order that depends
 * only on the weight's type and shape: k-slot s (0..15) accumulates the chunks
 * ci = s, s + 16, s + 32, .. of row n in increasing order with fmaf into two chains (even
 * and odd quad groups of each chunk, added at the end), the 8 k-slots of a warp are
 * combined by a fixed xor butterfly (1, 2, 4) and the two warps' partials are added in slot
 * order. M only decides how many 8-row activation tiles are launched; a tile's padding rows
 * are skipped, never computed with different arithmetic, so row m gives the same bits
 * whether 1 or 512 rows are in the call. Weights are dequantized to f32 in registers with
 * the CPU reference's formula and roundings (dequant.c, mlx_affine.c); activations stay f32.
 *
 * Weight memory: w->data should be 16-byte aligned for the fastest loads; any 4-byte (MLX,
 * F32) or 2-byte (F16, BF16, ggml blocks) alignment works through a slower load path of
 * the same kernel (a property of the weight, never of M, and the arithmetic is the same).
 */
#ifndef LS_KERNELS_CUDA_CUDA_MATMUL_H
#define LS_KERNELS_CUDA_CUDA_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[m][w->rows] = W x[m][w->cols], all f32 row-major. w->data (and for LS_TYPE_MLX_AFFINE
 * w->scales, w->biases) are DEVICE pointers; x, y device pointers; launched on stream st,
 * no synchronization, no allocation. Weights with an integer path (ls_cuda_mmq_key >= 0:
 * MLX 4/8-bit, Q8_0, Q4_K, Q6_K with K a multiple of 32) go to mmq.cu, which needs `scratch`
 * (device memory, 16-byte aligned, ls_cuda_mmq_scratch_bytes(rows, cols) for `rows` rows
 * per pass; more rows run in several passes); the others to the f32 kernel of matmul.cu,
 * which ignores it. Returns 0, or -1 if the weight type/shape is unsupported or the
 * scratch cannot hold one row (nothing launched). m == 0 launches nothing and returns 0. */
int ls_cuda_matmul(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y, void *scratch,
                   size_t scratch_bytes);
/* The same with act_ready: for an integer-path weight whose call fits in one pass
 * (ls_cuda_mmq_single_pass), nonzero means the scratch already holds exactly these m rows
 * of x quantized for this weight's layout (ls_cuda_mmq_act_key) by the previous call on the
 * stream, and x has not changed since: the quantization launch is skipped. Ignored for
 * other weights. A backend tracks this for consecutive matmuls on one input (q / k / v,
 * gate / up); the bits are the same either way. */
int ls_cuda_matmul_ex(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y, void *scratch,
                      size_t scratch_bytes, int act_ready);

/* The integer-dot matmul (mmq.cu): its dispatch key for w, -1 when w takes the f32 kernel;
 * the scratch it needs for `rows` activation rows of `cols` elements; the call itself. */
int ls_cuda_mmq_key(const ls_weight *w);
size_t ls_cuda_mmq_scratch_bytes(int64_t rows, int64_t cols);
int ls_cuda_mmq(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y, void *scratch,
                size_t scratch_bytes);
int ls_cuda_mmq_ex(cudaStream_t st, const ls_weight *w, const float *x, int64_t m, float *y, void *scratch,
                   size_t scratch_bytes, int act_ready);
/* Which quantized-activation layout w's integer path reads (0, 1 or 2; weights with the same
 * value read the same scratch bytes for the same x), -1 when w takes the f32 kernel; and
 * whether `rows` rows of `cols` fit in one pass of the scratch. */
int ls_cuda_mmq_act_key(const ls_weight *w);
int ls_cuda_mmq_single_pass(int64_t rows, int64_t cols, size_t scratch_bytes);
/* Several integer matmuls on the same activation rows in one launch (q / k / v, gate / up):
 * y[i] = W_i x for i < n (n <= 3), the bits of n separate ls_cuda_mmq_ex calls. groupable
 * says whether b can join a group led by a for m rows (same integer type and width, one
 * pass of the scratch, the dp4a kernel for both); group returns -1 (nothing launched) when
 * some weight cannot. act_ready as in ls_cuda_matmul_ex. */
int ls_cuda_mmq_groupable(const ls_weight *a, const ls_weight *b, int64_t m, size_t scratch_bytes);
int ls_cuda_mmq_group(cudaStream_t st, int n, const ls_weight *const *w, const float *x, int64_t m, float *const *y,
                      void *scratch, size_t scratch_bytes, int act_ready);
/* Tests only: which of the integer path's four kernels (same bits by construction) serves
 * a call: 0 = by shape (the default), 1 = the dp4a kernel always, 2 = the warp tiles
 * (mmq_mma.cu) always, 3 = the small-M tensor-core kernel always, 4 = the block tiles
 * (mmq_tile.cu) always, 5 = the narrow-call kernel (mmq_narrow.cu) for every call it serves
 * (ls_cuda_mmq_narrow_serves), the shape's choice for the rest. Returns the previous policy,
 * -1 for a bad value. Process-wide. */
int ls_cuda_mmq_policy(int policy);
/* Whether the narrow-call kernel can serve an m-row call on w (MLX 4/8-bit, 16-byte aligned,
 * m <= 4), for the tests. */
int ls_cuda_mmq_narrow_serves(const ls_weight *w, int64_t m);
/* A/B runs: 0 keeps the shape's choice (policy 0) off the narrow-call kernel, 1 (the default)
 * lets it take MLX calls of 2..4 rows; the same bits. Returns the previous value. */
int ls_cuda_mmq_narrow(int on);
/* A/B runs and tests: 1 (the default) gives Q4_K and Q6_K weights the K-quant format and
 * order (kq_format.cuh: 8-bit activations in superblocks of 256, src/kernels/cuda/kq_vec.cu,
 * kq_tile.cu), 0 the 16-bit two-plane format of the other types. The two give different
 * bits: set it before a model runs, never while one does. Returns the previous value. */
int ls_cuda_mmq_kq(int on);
/* Tests and A/B runs: rows a block of the narrow-call kernel takes for MLX 4-bit calls (16: one
 * m16 tile a warp, 32: two), 0 = the call's shape decides (mmq_narrow.cu rows_of); the same
 * bits by construction. Returns the previous value, -1 for a bad one. Process-wide. */
int ls_cuda_mmq_narrow_rows(int rows);
/* Tests, benchmarks and A/B runs only: which compilation of the dp4a kernel's one-row path
 * serves M = 1 calls (mmq.cu: 0 = the general body, 1 = gemv_kernel, 4 weight rows
 * per warp, -1 = each type's default; the same bits by construction).
 * Returns the previous value, -2 for a bad one. Process-wide. */
int ls_cuda_mmq_gemv_variant(int v);
/* Tests and A/B runs: warps per block (1, the default, or 4) of the one-row MLX 8-bit kernels whose rows
 * take one k-warp (mmq.cu row1_nw); the same bits by construction. Returns the previous value,
 * -1 for a bad one. Process-wide. */
int ls_cuda_mmq_row1_warps(int nw);
/* Benchmarks only: every integer-path weight split over kw k-warps (1, 2, 4; 0 = the
 * shape's own, kw_of). kw fixes the reduction order (docs/cuda.md 2a), so a different kw
 * gives different bits: never set while a model runs. Returns the previous value, -1 for a
 * bad one. */
int ls_cuda_mmq_kw_override(int kw);

/* dst[i][w->cols] = dequantized row ids[i] of the table w (ids: device int32 array of n),
 * bit-identical to the CPU reference dequantizer. Same rules as ls_cuda_matmul; ids out of
 * range give zero rows. */
int ls_cuda_get_rows(cudaStream_t st, const ls_weight *w, const int32_t *ids, int64_t n, float *dst);

/* Whether ls_cuda_matmul supports this weight (same checks, nothing launched). */
int ls_cuda_matmul_supported(const ls_weight *w);

#ifdef __cplusplus
}
#endif

#endif
