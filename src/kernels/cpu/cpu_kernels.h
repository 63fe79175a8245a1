/* CPU kernels: activation quantization, batch-invariant dot products and the matmul
 * driver. Every function here gives bit-identical results for a row whatever the batch
 * size M or the thread count (speculative.md sections 1-2), and the AVX2 paths give the
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
#include "kernels/types.h"

typedef enum { LS_ISA_SCALAR = 0, LS_ISA_AVX2 = 1 } ls_isa;

/* Best ISA this CPU supports (runtime check), clamped by LOCKSTEP_ISA=scalar if set. */
ls_isa ls_cpu_isa(void);

/* Quantize (or copy) one activation row of k floats to act_type (LS_TYPE_Q8_0, LS_TYPE_Q8_K
 * or LS_TYPE_F32); dst must hold ls_row_size(act_type, k) bytes. */
void ls_quantize_act_row(ls_type act_type, const float *x, void *dst, int64_t k);

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

/* Gather rows of a (possibly quantized) table into floats: dst[i] = dequant(table row ids[i]). */
void ls_get_rows(ls_type t, const void *table, int64_t row_elems, const int32_t *ids, int64_t n, float *dst);

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
/* Tile kernels (weight-stationary, no horizontal sum per block): nrows (any, >= 1) weight
 * rows against nact (any, >= 1) activation rows: y[c * y_stride + r] =
 * dot(row r, activation row c), bit-identical to ls_vec_dot_get(wt, isa) for every
 * (r, c) whatever nrows and nact. NULL where the type has none (it then uses gemm8). */
typedef void (*ls_tile_fn)(int64_t k, const void *w, size_t w_stride, int64_t nrows, const void *act, size_t act_stride,
                           int nact, float *y, int64_t y_stride);
ls_tile_fn ls_tile_avx2_get(ls_type wt);

#endif
