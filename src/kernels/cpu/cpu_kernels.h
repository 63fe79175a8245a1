/* CPU kernels: activation quantization, batch-invariant dot products and the matmul
 * driver. Every function here gives bit-identical results for a row whatever the batch
 * size M or the thread count (docs/speculative.md sections 1-2), and the AVX2 paths give the
 * same bits as the scalar reference (tests memcmp them).
 *
 * The fixed reduction order for quantized types: per block, exact integer dot products
 * (integer sums are exact in any order); across blocks, float accumulators updated in
 * block order: acc = fmaf(d_w * d_a, (float)isum, acc) (plus the min/offset term where
 * the type has one, in a fixed order documented in the kernel). Q4_0/Q5_0/Q8_0 keep two
 * accumulators (one per half block, added at the end), the others one
 * (vec_dot_scalar.c documents each). */
#ifndef LS_KERNELS_CPU_KERNELS_H
#define LS_KERNELS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/threads.h"
#include "kernels/backend.h"
#include "kernels/types.h"

/* Ordered: each level runs everything of the one below. AVX512: AVX2 plus AVX-512 F/BW/VL
 * and VNNI, used by the Q4_0 / Q5_0 / Q8_0 tiles (tile_avx512.c); the rest stays AVX2. */
typedef enum { LS_ISA_SCALAR = 0, LS_ISA_AVX2 = 1, LS_ISA_AVX512 = 2 } ls_isa;

/* Best ISA this CPU supports (runtime check), or scalar when forced (ls_cpu_isa_set); chosen
 * once per process, at the first call. */
ls_isa ls_cpu_isa(void);
/* What the hardware runs, whatever was forced. */
ls_isa ls_cpu_isa_hw(void);
/* "auto" (or NULL), "avx2" (no AVX-512 kernels) or "scalar" (ls_test_control LS_TESTCTL_ISA). LS_ERR_ARG for another
 * name; LS_ERR when the ISA is already chosen and differs. */
int ls_cpu_isa_set(const char *isa);

/* Quantize (or copy) one activation row of k floats to act_type (LS_TYPE_Q8_0, LS_TYPE_Q8_K
 * or LS_TYPE_F32); dst must hold ls_row_size(act_type, k) bytes. */
void ls_quantize_act_row(ls_type act_type, const float *x, void *dst, int64_t k);
/* The same with the quantizer of a given ISA (the same bytes; for the tests that show it). */
void ls_quantize_act_row_isa(ls_isa isa, ls_type act_type, const float *x, void *dst, int64_t k);

/* dot(weight row of type wt, activation row already in ls_type_get(wt)->act_type), k elements. */
typedef float (*ls_vec_dot_fn)(int64_t k, const void *w_row, const void *act_row);
/* The kernel for (wt, isa); falls back to scalar if isa has none; NULL if wt unsupported. */
ls_vec_dot_fn ls_vec_dot_get(ls_type wt, ls_isa isa);

/* Fixed-order float dot products (8 lanes, fma per lane, fixed horizontal tree), used by
 * attention and float weights. n is any length (tail handled in a fixed order too). */
float ls_dot_f32(const float *a, const float *b, int64_t n);
float ls_dot_f16_f32(const uint16_t *a_f16, const float *b, int64_t n);

/* g[i] = gelu_tanh(g[i]) * u[i], elementwise; each element's bits depend on (g[i], u[i])
 * only (same on both ISAs; accuracy vs 0.5 x (1 + tanhf(z)): see dot_f32.c). */
void ls_gelu_mul(float *g, const float *u, int64_t n);
float ls_gelu_scalar(float x);
void ls_gelu_mul_scalar(float *g, const float *u, int64_t n);
void ls_gelu_mul_avx2(float *g, const float *u, int64_t n);

/* Y[m][n] = dot(W row n, X row m) for m < M, n < N.
 *   W: N rows of K elements of type wt (row stride ls_row_size(wt, K)).
 *   X: M rows of K floats (row stride x_stride floats). Y: row stride y_stride floats.
 *   scratch: at least ls_matmul_scratch_size(wt, K, M) bytes (holds quantized activations).
 * Threads split N (output columns); each Y element is computed by the same dot function
 * with the same inputs regardless of M or thread count. Weight rows are read once per tile
 * of activation rows (weight-stationary), which does not change any row's sums. */
size_t ls_matmul_scratch_size(ls_type wt, int64_t K, int64_t M);
void ls_matmul(ls_pool *pool, ls_type wt, const void *W, int64_t N, int64_t K, const float *X, int64_t x_stride,
               int64_t M, float *Y, int64_t y_stride, void *scratch);

/* Several matmuls on the same activations (q / k / v, gate / up) in one pool round: Y_i =
 * W_i X for i < n (n <= LS_MM_GROUP_MAX), the bits of n ls_matmul calls (the same kernel
 * per output, whichever thread computes it). All weights share K and must read the same
 * activation layout (one quantized copy of X in scratch, sized as for one matmul); returns 0,
 * or -1 (nothing computed) when they do not. */
enum { LS_MM_GROUP_MAX = 3 };
typedef struct {
    ls_type type;
    const void *W;
    int64_t N;
    float *Y;
    int64_t y_stride;
} ls_mm_desc;
int ls_matmul_group(ls_pool *pool, int n, const ls_mm_desc *d, int64_t K, const float *X, int64_t x_stride, int64_t M,
                    void *scratch);

/* Gather rows of a (possibly quantized) table into floats: dst[i] = dequant(table row ids[i]). */
void ls_get_rows(ls_type t, const void *table, int64_t row_elems, const int32_t *ids, int64_t n, float *dst);

/* Scalar RoPE with a rotated-pairs count (rope.c): the reference and the CPU backend's
 * rope_pairs op (backend.h documents the math). Angles come from the absolute position
 * alone, in double, so a row rotates identically in any batch. */
void ls_rope_pairs_ref(float *x, int64_t m, int32_t n_heads, int32_t hd, int32_t n_pairs, const int32_t *pos,
                       float theta_base, float freq_scale);

/* ---- Reference dequantizers (dequant.c), also reachable as ls_type_get(t)->dequantize_row.
 * n must be a multiple of the type's block. Each element is computed with the same float
 * expression as llama.cpp's dequantize_row_* (and the gguf Python package), so results
 * match them bit for bit. */
void ls_dequantize_row_f32(const void *src, float *dst, int64_t n);
void ls_dequantize_row_f16(const void *src, float *dst, int64_t n);
void ls_dequantize_row_bf16(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q4_0(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q4_1(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q5_0(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q5_1(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q8_0(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q4_k(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q5_k(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q6_k(const void *src, float *dst, int64_t n);
void ls_dequantize_row_q8_k(const void *src, float *dst, int64_t n);

/* ---- Reference quantizers (quant_ref.c): float row -> any type in the traits table, plain
 * round-to-nearest (not llama.cpp's error-minimizing K-quant search). For tests and
 * fixtures only. dst holds ls_row_size(t, k) bytes. Returns 0, or -1 if t is unsupported
 * or k is not a block multiple. */
int ls_quantize_row_ref(ls_type t, const float *x, void *dst, int64_t k);

/* ---- Explicit-ISA entry points: the public functions above dispatch on ls_cpu_isa()
 * (cached); these let tests compare the scalar reference with the SIMD path bit for bit. */
float ls_dot_f32_isa(ls_isa isa, const float *a, const float *b, int64_t n);
float ls_dot_f16_f32_isa(ls_isa isa, const uint16_t *a_f16, const float *b, int64_t n);
void ls_matmul_isa(ls_isa isa, ls_pool *pool, ls_type wt, const void *W, int64_t N, int64_t K, const float *X,
                   int64_t x_stride, int64_t M, float *Y, int64_t y_stride, void *scratch);
int ls_matmul_group_isa(ls_isa isa, ls_pool *pool, int n, const ls_mm_desc *d, int64_t K, const float *X,
                        int64_t x_stride, int64_t M, void *scratch);

/* ---- Kernel tables (internal to kernels/cpu; use ls_vec_dot_get / ls_matmul). ---- */
/* Float dot products in the fixed 8-lane order, one per weight element type. */
float ls_dot_f32_scalar(const float *a, const float *b, int64_t n);
float ls_dot_f16_f32_scalar(const uint16_t *a_f16, const float *b, int64_t n);
float ls_dot_bf16_f32_scalar(const uint16_t *a_bf16, const float *b, int64_t n);
float ls_dot_f32_avx2(const float *a, const float *b, int64_t n);
float ls_dot_f16_f32_avx2(const uint16_t *a_f16, const float *b, int64_t n);
float ls_dot_bf16_f32_avx2(const uint16_t *a_bf16, const float *b, int64_t n);
/* Single-row kernels per ISA; NULL where the type has no kernel. */
ls_vec_dot_fn ls_vec_dot_scalar_get(ls_type wt);
ls_vec_dot_fn ls_vec_dot_avx2_get(ls_type wt);
/* Eight weight rows (w + r * w_stride, r < 8) against nact (1..4) activation rows
 * (act + c * act_stride): y[c * y_stride + r] = dot(row r, activation row c). Each output
 * runs exactly the float operations of the single-row kernel (SIMD runs across the eight
 * rows, never across k), so it is bit-identical to ls_vec_dot_get(wt, isa)(k, row r,
 * act row c) for any nact. Several activation rows share each weight block's decoding. */
typedef void (*ls_gemm8_fn)(int64_t k, const void *w, size_t w_stride, const void *act, size_t act_stride, int nact,
                            float *y, int64_t y_stride);
enum { LS_GEMM8_MAX_ACT = 4 };
ls_gemm8_fn ls_gemm8_avx2_get(ls_type wt);
/* The same for Q4_K / Q5_K / Q6_K with AVX-512 BW + VNNI (gemm8_kq_avx512.c, same bits); NULL
 * for other types or when the library was built without AVX-512 support. */
ls_gemm8_fn ls_gemm8_kq_avx512_get(ls_type wt);
/* Tile kernels (weight-stationary, no horizontal sum per block): nrows (any, >= 1) weight
 * rows against nact (any, >= 1) activation rows: y[c * y_stride + r] =
 * dot(row r, activation row c), bit-identical to ls_vec_dot_get(wt, isa) for every
 * (r, c) whatever nrows and nact. NULL where the type has none (it then uses gemm8). */
typedef void (*ls_tile_fn)(int64_t k, const void *w, size_t w_stride, int64_t nrows, const void *act, size_t act_stride,
                           int nact, float *y, int64_t y_stride);
ls_tile_fn ls_tile_avx2_get(ls_type wt);

/* Activation rows for the AVX-512 VNNI tiles (tile_avx512.c): the bytes of
 * ls_quantize_act_row(LS_TYPE_Q8_0) rearranged per 32-element block so that the tile needs
 * no shuffle: q[g] holds in 32-bit lane h * 4 + r the values 16 h + 4 g .. + 3 (the same for
 * every r), neg_sum[h * 4 + r] = -(sum of the block's half h), d = the block scale as float. */
typedef struct {
    int8_t q[4][32];
    int32_t neg_sum[8];
    float d;
    uint8_t pad[28];
} ls_act_q8v_block;
size_t ls_act_q8v_row_size(int64_t k);
void ls_quantize_act_row_q8v(const float *x, void *dst, int64_t k);
void ls_quantize_act_row_q8v_isa(ls_isa isa, const float *x, void *dst, int64_t k);
/* Tiles for Q4_0 / Q5_0 / Q8_0 against ls_act_q8v_block rows; NULL for other types or when
 * the library was built without AVX-512 support. Same contract as ls_tile_fn. */
ls_tile_fn ls_tile_avx512_get(ls_type wt);
/* Tiles for Q4_K / Q5_K / Q6_K against Q8_K rows (tile_kq_avx512.c); NULL otherwise. */
ls_tile_fn ls_tile_kq_avx512_get(ls_type wt);

/* ---- MLX affine-quantized weights (mlx_affine.c, mlx_affine_avx2.c; docs/gemma.md 6.4) ----
 * A weight is an ls_weight of type LS_TYPE_MLX_AFFINE: packed rows (LSB-first bit stream,
 * element c at bits [c * bits, (c + 1) * bits) of its row), per-group scales and biases.
 * Element (r, c) dequantizes to (scale * q) + bias with two roundings (no fma), which is
 * what mlx computes (tests compare with mx.dequantize bit for bit).
 *
 * The dot product of weight row r with activation row x (K = cols, G = group, n = K / G
 * groups) runs in this fixed order, identical on both ISAs and for any M or thread count:
 *   xs[g][j] = x[gG + j] + x[gG + 8 + j] + ... + x[gG + G - 8 + j]  (plain adds, in i order;
 *              once per activation row, reused by every weight row)
 *   for each lane j = 0..7: acc_j = 0; for g = 0..n-1:
 *       e_j = o_j = 0; for i = 0, 2, .., G/8-2 (steps of eight elements, even ones in e, odd in o):
 *           e_j = fmaf((float)q[gG + 8i + j], x[gG + 8i + j], e_j)
 *           o_j = fmaf((float)q[gG + 8i + 8 + j], x[gG + 8i + 8 + j], o_j)
 *       acc_j = fmaf(scale_g, e_j + o_j, acc_j); acc_j = fmaf(bias_g, xs[g][j], acc_j)
 *   y = ((acc_0 + acc_4) + (acc_2 + acc_6)) + ((acc_1 + acc_5) + (acc_3 + acc_7)) (the tree of
 *       ls_dot_f32).
 * Lane j is one AVX2 lane; the scalar code emulates the eight lanes. */

/* (ls_mlx_affine_check, backend.h, validates a weight's layout; matmul, dequantize, get_rows
 * and dot assert it: a bad weight there is a programming error.) */
/* q of element c of a packed row (reference unpacker). */
uint32_t ls_mlx_affine_unpack(const uint8_t *row, int32_t bits, int64_t c);
/* dst[c] = scale * q + bias for row `row` (cols floats). */
void ls_mlx_affine_dequantize_row(const ls_weight *w, int64_t row, float *dst);
/* dst[i][cols] = dequantized row ids[i]: the embedding lookup of a quantized table. */
void ls_mlx_affine_get_rows(const ls_weight *w, const int32_t *ids, int64_t n, float *dst);
/* Scratch for ls_mlx_affine_matmul: the xs sums of M activation rows (8 floats per group). */
size_t ls_mlx_affine_scratch_size(int64_t K, int32_t group, int64_t M);
/* xs[g * 8 + j] as in the order above, for one activation row of K floats. */
void ls_mlx_affine_xsums(const float *x, int64_t K, int32_t group, float *xs);
/* One output, dot(row `row` of w, x) with x's xsums xs: the reference the matmul matches. */
float ls_mlx_affine_dot_isa(ls_isa isa, const ls_weight *w, int64_t row, const float *x, const float *xs);
/* Y[m][n] = dot(W row n, X row m), m < M, n < w->rows; threads split the rows of W.
 * scratch: ls_mlx_affine_scratch_size(w->cols, w->group, M) bytes, float-aligned. */
void ls_mlx_affine_matmul_isa(ls_isa isa, ls_pool *pool, const ls_weight *w, const float *X, int64_t x_stride,
                              int64_t M, float *Y, int64_t y_stride, void *scratch);
void ls_mlx_affine_matmul(ls_pool *pool, const ls_weight *w, const float *X, int64_t x_stride, int64_t M, float *Y,
                          int64_t y_stride, void *scratch);
/* Reference quantizer (quant_ref.c), mlx's affine quantizer step for step: per group,
 * scale = max((max - min) / (2^bits - 1), 1e-7) with the sign that maps the larger-|.| edge
 * to an integer q0, then scale = edge / q0 and bias = edge (bias 0 when q0 == 0);
 * q = clamp(rint((w - bias) / scale), 0, 2^bits - 1). The float scale quantizes; the
 * stored scale/bias are rounded to sb_type. q: rows * cols * bits / 8 bytes; scales and
 * biases: rows * cols / group values of sb_type. Returns 0, or -1 on bad geometry. */
int ls_mlx_affine_quantize_ref(const float *src, int64_t rows, int64_t cols, int32_t bits, int32_t group,
                               ls_type sb_type, uint8_t *q, void *scales, void *biases);
/* AVX2 kernel (internal): rows [n0, n0 + nrows) of w against nact activation rows
 * (X + c * x_stride, xsums XS + c * xs_stride): Y[c * y_stride + r - n0], each output in
 * the order above whatever nrows and nact. */
void ls_mlx_affine_rows_avx2(const ls_weight *w, int64_t n0, int64_t nrows, const float *X, int64_t x_stride,
                             const float *XS, int64_t xs_stride, int nact, float *Y, int64_t y_stride);
float ls_mlx_affine_dot_avx2(const ls_weight *w, int64_t row, const float *x, const float *xs);

#endif
