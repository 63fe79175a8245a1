/* The tensor type traits table: one designated-initializer entry per supported ggml type
 * id. Entries carry the block geometry, the reference dequantizer and the
 * activation format the CPU dot products want for that weight type. Backends add their
 * own fast kernels elsewhere; this table is the single source of truth for sizes. */
#include "kernels/types.h"

#include <stdint.h>

#include "kernels/cpu/cpu_kernels.h"

static const ls_type_traits g_traits[LS_TYPE_COUNT] = {
    [LS_TYPE_F32] =
        {.name = "f32", .blck = 1, .type_size = 4, .dequantize_row = ls_dequantize_row_f32, .act_type = LS_TYPE_F32},
    [LS_TYPE_F16] =
        {.name = "f16", .blck = 1, .type_size = 2, .dequantize_row = ls_dequantize_row_f16, .act_type = LS_TYPE_F32},
    [LS_TYPE_BF16] =
        {.name = "bf16", .blck = 1, .type_size = 2, .dequantize_row = ls_dequantize_row_bf16, .act_type = LS_TYPE_F32},
    [LS_TYPE_Q4_0] = {.name = "q4_0",
                      .blck = LS_QK4_0,
                      .type_size = sizeof(ls_block_q4_0),
                      .dequantize_row = ls_dequantize_row_q4_0,
                      .act_type = LS_TYPE_Q8_0},
    /* Q4_1/Q5_1 use plain Q8_0 activations; the kernel adds m * d_a * sum(q_a) itself
     * (llama.cpp uses a Q8_1 row that carries that sum pre-rounded to f16). */
    [LS_TYPE_Q4_1] = {.name = "q4_1",
                      .blck = LS_QK4_0,
                      .type_size = sizeof(ls_block_q4_1),
                      .dequantize_row = ls_dequantize_row_q4_1,
                      .act_type = LS_TYPE_Q8_0},
    [LS_TYPE_Q5_0] = {.name = "q5_0",
                      .blck = LS_QK5_0,
                      .type_size = sizeof(ls_block_q5_0),
                      .dequantize_row = ls_dequantize_row_q5_0,
                      .act_type = LS_TYPE_Q8_0},
    [LS_TYPE_Q5_1] = {.name = "q5_1",
                      .blck = LS_QK5_0,
                      .type_size = sizeof(ls_block_q5_1),
                      .dequantize_row = ls_dequantize_row_q5_1,
                      .act_type = LS_TYPE_Q8_0},
    [LS_TYPE_Q8_0] = {.name = "q8_0",
                      .blck = LS_QK8_0,
                      .type_size = sizeof(ls_block_q8_0),
                      .dequantize_row = ls_dequantize_row_q8_0,
                      .act_type = LS_TYPE_Q8_0},
    [LS_TYPE_Q4_K] = {.name = "q4_K",
                      .blck = LS_QK_K,
                      .type_size = sizeof(ls_block_q4_k),
                      .dequantize_row = ls_dequantize_row_q4_k,
                      .act_type = LS_TYPE_Q8_K},
    [LS_TYPE_Q5_K] = {.name = "q5_K",
                      .blck = LS_QK_K,
                      .type_size = sizeof(ls_block_q5_k),
                      .dequantize_row = ls_dequantize_row_q5_k,
                      .act_type = LS_TYPE_Q8_K},
    [LS_TYPE_Q6_K] = {.name = "q6_K",
                      .blck = LS_QK_K,
                      .type_size = sizeof(ls_block_q6_k),
                      .dequantize_row = ls_dequantize_row_q6_k,
                      .act_type = LS_TYPE_Q8_K},
    /* Q8_K is an activation format only: it has no dot kernel of its own. */
    [LS_TYPE_Q8_K] = {.name = "q8_K",
                      .blck = LS_QK_K,
                      .type_size = sizeof(ls_block_q8_k),
                      .dequantize_row = ls_dequantize_row_q8_k,
                      .act_type = LS_TYPE_Q8_K},
};

const ls_type_traits *ls_type_get(uint32_t type) {
    if (type >= LS_TYPE_COUNT) return NULL;
    const ls_type_traits *t = &g_traits[type];
    return t->name ? t : NULL; /* holes in the id space (removed ggml types) are NULL */
}

const char *ls_type_name(uint32_t type) {
    /* MLX affine has a name but no traits entry: its rows are not self-contained blocks
     * (scales live beside them), so ls_type_get/ls_row_size must keep refusing it. */
    if (type == LS_TYPE_MLX_AFFINE) return "mlx-affine";
    const ls_type_traits *t = ls_type_get(type);
    return t ? t->name : "?";
}

size_t ls_row_size(uint32_t type, int64_t n) {
    const ls_type_traits *t = ls_type_get(type);
    if (!t || n < 0 || n % t->blck != 0) return 0;
    uint64_t blocks = (uint64_t)(n / t->blck);
    /* overflow: blocks * type_size must fit in size_t */
    if (blocks != 0 && t->type_size > SIZE_MAX / blocks) return 0;
    return (size_t)blocks * t->type_size;
}
