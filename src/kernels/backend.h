/* The backend interface between model code and kernels.
 *
 * Model code (src/model) describes a forward pass as a sequence of these ops over
 * row-major float activations [m rows x width]; a backend implements them. Every op must
 * keep the bitwise contract of speculative.md section 1: row i of the output depends only
 * on row i of the inputs (and, for attention, on the cache contents it may see), never on
 * m, on the thread count, or on other rows. Slots are few on purpose (style.md #6); a
 * NULL slot means "not supported". The CPU backend lives in kernels/cpu. */
#ifndef LS_KERNELS_BACKEND_H
#define LS_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/types.h"

/* A weight matrix W [rows x cols] (y = W x), stored row-major in `type` blocks.
 *
 * MLX affine quantization (type LS_TYPE_MLX_AFFINE, ../shared/specs/gemma.md 6.4): `data`
 * holds the packed rows (each row a little-endian bit stream of cols * bits bits, so
 * row_bytes = cols * bits / 8), `scales` and `biases` hold [rows][cols / group] values of
 * type `sb_type` (LS_TYPE_F32, LS_TYPE_F16 or LS_TYPE_BF16); element (r, c) is
 * scales[r][c / group] * q + biases[r][c / group]. The extra fields are unused otherwise. */
typedef struct {
    ls_type type;
    const void *data;
    int64_t rows, cols;
    uint64_t row_bytes;
    const void *scales, *biases;
    ls_type sb_type;
    int32_t bits, group;
} ls_weight;

/* Attention over a chronological KV cache. Keys/values are float16, slot s holding the
 * absolute position first_pos + s; each slot has n_kv heads of hd elements. Query row i
 * (absolute position q_pos[i]) reduces over exactly the keys it may see, in position
 * order: [max(0, q_pos[i] - window + 1), q_pos[i]] (window 0 = all earlier keys), or
 * [.., q_pos[i] - 1] with strictly_before. */
typedef struct {
    const float *q; /* [m][n_head * hd] (already normed and rotated, NOT scaled) */
    float *out;     /* [m][n_head * hd] */
    const void *k;  /* [slots][n_kv * hd] f16 (or f32 when kv_f32) */
    const void *v;  /* [slots][n_kv * hd] f16 (or f32 when kv_f32) */
    bool kv_f32;
    /* Keys strictly before q_pos (window then ends at q_pos - 1): the Gemma 4 assistant's
     * query at the bonus position reads the target's keys of the positions before it. */
    bool strictly_before;
    int64_t m;
    int32_t n_head, n_kv, hd;
    const int32_t *q_pos; /* [m] */
    int32_t first_pos;    /* absolute position of slot 0 */
    int32_t n_slots;      /* filled slots */
    int32_t window;       /* 0 = full attention */
    float scale;          /* applied to q.k */
} ls_attn_args;

typedef struct ls_backend ls_backend;

typedef struct {
    const char *name;
    /* y[m][w->rows] = W x[m][w->cols] */
    void (*matmul)(ls_backend *be, const ls_weight *w, const float *x, int64_t m, float *y);
    /* dst[i][cols] = row ids[i] of the table, dequantized */
    void (*get_rows)(ls_backend *be, const ls_weight *table, const int32_t *ids, int64_t n, float *dst);
    /* In place, each of m rows of n: x = x / sqrt(mean(x^2) + eps) * w (w NULL: no weight). */
    void (*rmsnorm)(ls_backend *be, float *x, const float *w, int64_t m, int64_t n, float eps);
    /* In place NeoX RoPE with a rotated-pairs count (Gemma 3/4, gemma.md 3.4): pairs
     * (j, j + hd/2) for j < hd/2; pair j < n_pairs rotates by the angle
     * pos[i] * (freq_scale * theta_base^(-2j/hd)), pairs j >= n_pairs are left as they are.
     * n_pairs = hd/2 is plain full rotary; n_pairs < hd/2 is Gemma 4's "proportional" RoPE
     * (exponent normalised by the FULL head dim, not by the rotated width); freq_scale = 1/factor
     * is linear position scaling (Gemma 3 global layers). Row-independent. */
    void (*rope_pairs)(ls_backend *be, float *x, int64_t m, int32_t n_heads, int32_t hd, int32_t n_pairs,
                       const int32_t *pos, float theta_base, float freq_scale);
    void (*attention)(ls_backend *be, const ls_attn_args *a);
    /* gate[i] = gelu_tanh(gate[i]) * up[i] for i < n */
    void (*gelu_mul)(ls_backend *be, float *gate, const float *up, int64_t n);
    /* x[i] += y[i] for i < n */
    void (*add)(ls_backend *be, float *x, const float *y, int64_t n);
    void (*free)(ls_backend *be);
} ls_backend_ops;

struct ls_backend {
    const ls_backend_ops *ops;
    void *impl;
};

/* CPU backend: n_threads workers; max_rows/max_cols bound the matmul inputs it will see,
 * max_keys the longest attention reduction (the context length). NULL on failure. */
ls_backend *ls_backend_cpu_create(int n_threads, int64_t max_rows, int64_t max_cols, int64_t max_keys);
const char *ls_backend_cpu_isa_name(void);

#endif
