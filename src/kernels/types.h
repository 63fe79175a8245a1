/* Tensor element types: ids equal ggml's (the GGUF type ids), block layouts pinned with
 * _Static_assert, and one traits table (name, block size, block bytes, reference
 * dequantizer, activation format used by dot products). Shared by every backend. */
#ifndef LS_KERNELS_TYPES_H
#define LS_KERNELS_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
/* Included by the CUDA sources (compiled as C++). */
#define _Static_assert static_assert
extern "C" {
#endif

typedef enum {
    LS_TYPE_F32 = 0,
    LS_TYPE_F16 = 1,
    LS_TYPE_Q4_0 = 2,
    LS_TYPE_Q4_1 = 3,
    LS_TYPE_Q5_0 = 6,
    LS_TYPE_Q5_1 = 7,
    LS_TYPE_Q8_0 = 8,
    LS_TYPE_Q4_K = 12,
    LS_TYPE_Q5_K = 13,
    LS_TYPE_Q6_K = 14,
    LS_TYPE_Q8_K = 15,
    LS_TYPE_BF16 = 30,
    /* Not a ggml id: MLX affine-quantized weights (bits/group/scales/biases live in
     * ls_weight, backend.h); outside ggml's id range (ggml 39 is MXFP4). Rows are not
     * self-contained, so it has no row size here. */
    LS_TYPE_MLX_AFFINE = 63,
    LS_TYPE_COUNT = 64,
} ls_type;

#define LS_QK4_0 32
#define LS_QK5_0 32
#define LS_QK8_0 32
#define LS_QK_K  256

typedef struct {
    uint16_t d;
    uint8_t qs[LS_QK4_0 / 2];
} ls_block_q4_0;
typedef struct {
    uint16_t d, m;
    uint8_t qs[LS_QK4_0 / 2];
} ls_block_q4_1;
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[LS_QK5_0 / 2];
} ls_block_q5_0;
typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[LS_QK5_0 / 2];
} ls_block_q5_1;
typedef struct {
    uint16_t d;
    int8_t qs[LS_QK8_0];
} ls_block_q8_0;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[LS_QK_K / 2];
} ls_block_q4_k;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[LS_QK_K / 8];
    uint8_t qs[LS_QK_K / 2];
} ls_block_q5_k;
typedef struct {
    uint8_t ql[LS_QK_K / 2];
    uint8_t qh[LS_QK_K / 4];
    int8_t scales[LS_QK_K / 16];
    uint16_t d;
} ls_block_q6_k;
typedef struct {
    float d;
    int8_t qs[LS_QK_K];
    int16_t bsums[LS_QK_K / 16];
} ls_block_q8_k;

_Static_assert(sizeof(ls_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(ls_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(ls_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(ls_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(ls_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(ls_block_q4_k) == 144, "q4_k block");
_Static_assert(sizeof(ls_block_q5_k) == 176, "q5_k block");
_Static_assert(sizeof(ls_block_q6_k) == 210, "q6_k block");
_Static_assert(sizeof(ls_block_q8_k) == 292, "q8_k block");

typedef struct {
    const char *name;
    int64_t blck;     /* elements per block */
    size_t type_size; /* bytes per block */
    /* Reference dequantizer: n must be a multiple of blck. */
    void (*dequantize_row)(const void *src, float *dst, int64_t n);
    /* Format activations are converted to for dot products with this weight type
     * (LS_TYPE_F32 for float weights, Q8_0 for 32-blocks, Q8_K for K-quants). */
    ls_type act_type;
} ls_type_traits;

/* NULL for unknown or unsupported ids. */
const ls_type_traits *ls_type_get(uint32_t type);
const char *ls_type_name(uint32_t type); /* "?" if unknown */
/* Bytes for a row of n elements; 0 if n is not a multiple of the block or overflows. */
size_t ls_row_size(uint32_t type, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
