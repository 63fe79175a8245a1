/* The backend interface between model code and kernels (docs/cuda.md section 3).
 *
 * Model code (src/model) describes a forward pass as a sequence of these ops over
 * row-major float activations [m rows x width]; a backend implements them. Every op must
 * keep the bitwise contract of docs/speculative.md section 1: row i of the output depends
 * only on row i of the inputs (and, for attention, on the cache contents it may see),
 * never on m, on the thread count, or on other rows.
 *
 * Memory belongs to the backend. Activations, KV caches, index arrays and logits rows are
 * buffers from `alloc`: host memory on the CPU backend, device memory on CUDA. Model code
 * never dereferences them; it moves bytes in and out only with upload / download, and every
 * pointer argument of an op is backend memory unless its name ends in _host.
 *
 * Weights are different: a model's weights are constant host memory (the mmapped file,
 * norm vectors converted at load). A device kind maps each such range once per process
 * (ls_device_kind.map_const: the CUDA backend uploads it), and ops receive the host
 * addresses in ls_weight / norm pointers; the backend translates them to its copy. So one
 * ls_model serves every session and both device kinds, and model code stays unchanged
 * whether the weights live in RAM or in HBM.
 *
 * Ops are asynchronous on devices with a queue (CUDA): they are ordered among themselves
 * on one queue per process, and `download` waits for everything queued before it. */
#ifndef LS_KERNELS_BACKEND_H
#define LS_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix W [rows x cols] (y = W x), stored row-major in `type` blocks; `data`,
 * `scales`, `biases` are host addresses inside a mapped constant range.
 *
 * MLX affine quantization (type LS_TYPE_MLX_AFFINE, docs/gemma.md 6.4): `data` holds the
 * packed rows (each row a little-endian bit stream of cols * bits bits, so row_bytes =
 * cols * bits / 8), `scales` and `biases` hold [rows][cols / group] values of type
 * `sb_type` (LS_TYPE_F32, LS_TYPE_F16 or LS_TYPE_BF16); element (r, c) is
 * scales[r][c / group] * q + biases[r][c / group]. The extra fields are unused otherwise. */
typedef struct {
    ls_type type;
    const void *data;
    int64_t rows, cols;
    uint64_t row_bytes;
    const void *scales, *biases;
    ls_type sb_type;
    int32_t bits, group;
    /* data is a backend buffer made at run time (the assistant's gathered candidate rows),
     * not a mapped constant: used as it is. */
    bool in_backend;
} ls_weight;

/* 0 when an LS_TYPE_MLX_AFFINE weight has a supported layout (bits 2-6 or 8, group 32/64/128,
 * f32/f16/bf16 scales, cols a multiple of the group, row_bytes = cols * bits / 8), else -1. */
int ls_mlx_affine_check(const ls_weight *w);

/* Attention over a chronological KV cache. Keys/values are float16 (or f32 when kv_f32),
 * slot s holding the absolute position first_pos + s; each slot has n_kv heads of hd
 * elements. Query row i (absolute position q_pos[i]) reduces over exactly the keys it may
 * see, in position order: [max(0, q_pos[i] - window + 1), q_pos[i]] (window 0 = all
 * earlier keys), or [.., q_pos[i] - 1] with strictly_before. A query that sees no key gets
 * a zero row. q, out, k, v and q_pos are backend memory. */
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
    /* Buffers are plain host memory (the CPU backend): a caller may let an op write
     * straight into a host buffer of its own instead of downloading. */
    bool host_memory;

    /* ---- memory ---- */
    /* A buffer of `bytes` (64-byte aligned, contents undefined); NULL when out of memory. */
    void *(*alloc)(ls_backend *be, size_t bytes);
    void (*release)(ls_backend *be, void *buf);
    /* Page-locked host memory of `bytes` (page aligned) for what download fills often (logits
     * rows): a device backend's copies into it skip the driver's staging through pageable
     * memory (docs/cuda.md 3). NULL when out of memory. Both NULL on a backend without such
     * memory (plain malloc serves). host_free takes no backend: the buffer may outlive it. */
    void *(*host_alloc)(ls_backend *be, size_t bytes);
    void (*host_free)(void *p);
    void (*upload)(ls_backend *be, void *dst, const void *src_host, size_t bytes);
    /* Waits for every op queued before it, then copies. */
    void (*download)(ls_backend *be, void *dst_host, const void *src, size_t bytes);
    /* memmove semantics: the ranges may overlap (KV compaction moves rows down). */
    void (*copy)(ls_backend *be, void *dst, const void *src, size_t bytes);
    /* rows x width floats: dst row r at dst + r * dst_stride, src row r at src + r * src_stride. */
    void (*copy_rows)(ls_backend *be, float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                      int64_t width, int64_t rows);
    /* x[i] = v for i < n */
    void (*fill)(ls_backend *be, float *x, float v, int64_t n);
    /* Waits for every op queued on this backend (another backend instance is about to use
     * what they wrote: e.g. a session's KV compaction before a batcher step). */
    void (*sync)(ls_backend *be);

    /* ---- compute ---- */
    /* y[m][w->rows] = W x[m][w->cols] */
    void (*matmul)(ls_backend *be, const ls_weight *w, const float *x, int64_t m, float *y);
    /* Optional (NULL: the caller makes n matmul calls): y[i] = W_i x for i < n (n <= 3, the
     * weights share cols), the bits of n matmul calls in order; a backend may run them in
     * one pass (q / k / v, gate / up). Use ls_backend_matmul_n. */
    void (*matmul_n)(ls_backend *be, int n, const ls_weight *const *w, const float *x, int64_t m, float *const *y);
    /* dst[i][cols] = row ids[i] of the table, dequantized */
    void (*get_rows)(ls_backend *be, const ls_weight *table, const int32_t *ids, int64_t n, float *dst);
    /* In place, each of m rows of n: x = x / sqrt(mean(x^2) + eps) * w (w NULL: no weight;
     * w is a mapped constant host address, like weights). */
    void (*rmsnorm)(ls_backend *be, float *x, const float *w, int64_t m, int64_t n, float eps);
    /* In place NeoX RoPE with a rotated-pairs count (Gemma 3/4, docs/gemma.md 3.4): pairs
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
    /* x[i] = x[i] * s for i < n */
    void (*scale)(ls_backend *be, float *x, float s, int64_t n);
    /* x[i] = (x[i] + y[i] * a) * b for i < n, each product and sum rounded to f32 in that
     * order (b = 1 multiplies exactly). */
    void (*axpby)(ls_backend *be, float *x, const float *y, float a, float b, int64_t n);
    /* x[r][i] = (x[r][i] * w[i]) * s over m rows of n (w: mapped constant host address). */
    void (*mul_rows)(ls_backend *be, float *x, const float *w, float s, int64_t m, int64_t n);
    /* x[i] = tanh(x[i] / cap) * cap */
    void (*softcap)(ls_backend *be, float *x, float cap, int64_t n);
    /* n floats into a KV cache row range: rounded to f16 (IEEE round-to-nearest-even) or
     * copied when f32. */
    void (*kv_store)(ls_backend *be, void *dst, bool f32, const float *src, int64_t n);
    /* dst[j][0..d) = src[rows[j]][0..d) for j < cnt */
    void (*gather_rows)(ls_backend *be, float *dst, const float *src, const int32_t *rows, int64_t cnt, int64_t d);
    /* acc[rows[j]][i] = acc[rows[j]][i] + y[j][i] * w[j] for j < cnt, i < d; the rows[j] of
     * one call are distinct (a row's several contributions come in separate calls, in the
     * order they are made). */
    void (*scatter_add)(ls_backend *be, float *acc, const float *y, const int32_t *rows, const float *w, int64_t cnt,
                        int64_t d);

    /* ---- fused ops ----
     * Each computes exactly the bits of the unfused op sequence written next to it, on every
     * backend (tests/test_backend_ops.c compares them with memcmp), so model code may use
     * either form. They exist because a decode step of a small model is bound by the number
     * of kernel launches, not by bandwidth (docs/cuda.md 4): on CUDA each is one kernel where
     * the sequence is two to five. Norm vectors w* are mapped constants (or NULL: no weight),
     * as for rmsnorm. */
    /* copy(dst, src, m * n floats) then rmsnorm(dst, w, m, n, eps). dst == src is allowed (then
     * it is rmsnorm); otherwise the two must not overlap, and src is left as it is. */
    void (*rmsnorm_to)(ls_backend *be, float *dst, const float *src, const float *w, int64_t m, int64_t n, float eps);
    /* A residual step over m rows of n (a block's output norm, the residual add, the layer
     * scalar, the next block's input norm):
     *   rmsnorm(t, w_post, m, n, eps); add(x, t, m * n); if (s != 1) scale(x, s, m * n);
     *   if (xn) rmsnorm_to(xn, x, w_pre, m, n, eps);
     * t is scratch: its contents afterwards are unspecified (the CPU leaves it normed, CUDA as
     * it was). x, t and xn must not overlap. Skipping the scale when s == 1 gives the same bits
     * as applying it: x * 1 == x for every value an add produces (no backend flushes
     * subnormals; an add never yields a signalling NaN). */
    void (*add_rmsnorm)(ls_backend *be, float *x, float *t, const float *w_post, float s, float *xn, const float *w_pre,
                        int64_t m, int64_t n, float eps);
    /* rmsnorm(x, w, m * n_heads, hd, eps) then rope_pairs(x, m, n_heads, hd, n_pairs, pos,
     * theta_base, freq_scale): the per-head q / k norm and RoPE (docs/gemma.md 3.4). */
    void (*norm_rope)(ls_backend *be, float *x, const float *w, int64_t m, int32_t n_heads, int32_t hd, float eps,
                      int32_t n_pairs, const int32_t *pos, float theta_base, float freq_scale);
    /* kv_store(dk, f32, k, n) then kv_store(dv, f32, v, n): a step's K and V rows into a cache. */
    void (*kv_store2)(ls_backend *be, void *dk, void *dv, bool f32, const float *k, const float *v, int64_t n);

    /* ---- step capture (optional: NULL on backends without it) ----
     * step_begin(key) .. step_end() brackets the ops of one forward step with no download
     * between them; the CUDA backend records them into a graph keyed on `key` (the row
     * count) and replays it, which must give the same bits as direct launches. */
    void (*step_begin)(ls_backend *be, int64_t key);
    void (*step_end)(ls_backend *be);

    void (*free)(ls_backend *be);
} ls_backend_ops;

struct ls_backend {
    const ls_backend_ops *ops;
    void *impl;
};

/* What sizes a backend must be ready for (scratch is allocated at creation: the decode
 * path allocates nothing). */
typedef struct {
    int n_threads;    /* CPU workers (ignored by CUDA) */
    int64_t max_rows; /* rows of one op */
    int64_t max_cols; /* widest matmul input */
    int64_t max_keys; /* longest attention reduction (the context length) */
} ls_backend_params;

/* A device kind: one per process per name ("cpu", "cuda"). map_const makes a constant host
 * range (weights, norm vectors) readable by this kind's ops, once however many sessions
 * use it (reference counted; the CPU maps nothing). create makes a backend instance; every
 * instance of one kind shares the mapped constants and one op queue. */
typedef struct {
    const char *name;
    /* Whether this kind can run here (the CUDA kind: built with CUDA and a GPU present). */
    bool (*available)(void);
    /* Device name for logs and memo keys, e.g. "NVIDIA H200" or "cpu-avx2". */
    const char *(*device_name)(void);
    int (*map_const)(const void *host, size_t bytes, char *err, size_t errlen);
    void (*unmap_const)(const void *host);
    ls_backend *(*create)(const ls_backend_params *p);
} ls_device_kind;

/* The kind called `name` ("cpu", "cuda"), or NULL when this build has no such kind. */
const ls_device_kind *ls_device_kind_find(const char *name);
/* "cuda" when this build has CUDA and a GPU is present, else "cpu". */
const char *ls_device_default(void);

/* Debug switch of the device kinds that capture forward steps as graphs (CUDA): on by
 * default; read when an instance is created (ls_test_control LS_TESTCTL_CUDA_GRAPHS). */
void ls_backend_set_graphs(bool on);
bool ls_backend_graphs(void);
/* The LS_CUDA_OFF_* bits (lockstep.h, LS_TESTCTL_CUDA_OFF): which launch-merging steps
 * CUDA backend instances created from now on leave off; 0 by default. */
void ls_backend_set_cuda_off(unsigned bits);
unsigned ls_backend_cuda_off(void);
/* Step timing (ls_test_control LS_TESTCTL_STEP_TIMES): whether backends that replay recorded
 * steps time them; each replayed step adds its host and device nanoseconds; take reads the
 * totals and zeroes them. */
void ls_backend_set_step_timing(bool on);
bool ls_backend_step_timing(void);
void ls_backend_step_times_add(int64_t host_ns, int64_t device_ns);
void ls_backend_step_times_take(int64_t *steps, int64_t *host_ns, int64_t *device_ns);

/* y[i] = W_i x for i < n through ops->matmul_n where the backend has it, else n matmul calls. */
static inline void ls_backend_matmul_n(ls_backend *be, int n, const ls_weight *const *w, const float *x, int64_t m,
                                       float *const *y) {
    if (be->ops->matmul_n) {
        be->ops->matmul_n(be, n, w, x, m, y);
        return;
    }
    for (int i = 0; i < n; i++) be->ops->matmul(be, w[i], x, m, y[i]);
}

/* CPU backend (kernels/cpu/backend_cpu.c) and its kind. */
ls_backend *ls_backend_cpu_create(int n_threads, int64_t max_rows, int64_t max_cols, int64_t max_keys);
const char *ls_backend_cpu_isa_name(void);
extern const ls_device_kind ls_device_cpu;
/* CUDA kind (kernels/cuda/backend_cuda.cu), only in builds with LOCKSTEP_CUDA. */
extern const ls_device_kind ls_device_cuda;

#ifdef __cplusplus
}
#endif

#endif
