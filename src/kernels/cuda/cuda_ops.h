/* Private interface between the CUDA backend's translation units (backend_cuda.cu,
 * rowwise.cu, attention.cu): error checking and the kernel launchers. Not part of the
 * engine's C interface (backend.h is); C++ linkage, CUDA sources only.
 *
 * Every launcher enqueues on the given stream and returns at once (no synchronization),
 * so each may run inside a stream capture (backend_cuda.cu's step_begin / step_end).
 * Pointers are device memory, including norm / scale vectors (already translated from
 * their mapped host address by the caller). Every kernel here is batch-invariant: a row's
 * output bits depend on that row's inputs alone (docs/cuda.md section 2). */
#ifndef LS_KERNELS_CUDA_CUDA_OPS_H
#define LS_KERNELS_CUDA_CUDA_OPS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Aborts with the CUDA error's name and text, the failing expression and its place, after
 * logging them (core/log.h). Never returns when e != cudaSuccess. */
void ls_cuda_check(cudaError_t e, const char *expr, const char *file, int line);
#define LSC_CHECK(call)    ls_cuda_check((call), #call, __FILE__, __LINE__)
/* After a kernel launch: a bad configuration shows up here (not sticky, so it is ours). */
#define LSC_CHECK_LAUNCH() ls_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
/* Logs "cuda: <msg>" and aborts: programming errors (contract violations) only. */
[[noreturn]] void ls_cuda_fatal(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define LSC_FATAL(...) ls_cuda_fatal(__FILE__, __LINE__, __VA_ARGS__)
#define LSC_REQUIRE(cond)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) ls_cuda_fatal(__FILE__, __LINE__, "requirement failed: %s", #cond);                               \
    } while (0)

/* ---- rowwise.cu (semantics: backend.h, bit-compatible formulas: backend_cpu.c) ---- */
void ls_cuda_fill(cudaStream_t st, float *x, float v, int64_t n);
void ls_cuda_copy_rows(cudaStream_t st, float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                       int64_t width, int64_t rows);
void ls_cuda_rmsnorm(cudaStream_t st, float *x, const float *w, int64_t m, int64_t n, float eps);
void ls_cuda_rope_pairs(cudaStream_t st, float *x, int64_t m, int32_t n_heads, int32_t hd, int32_t n_pairs,
                        const int32_t *pos, float theta_base, float freq_scale);
/* Fused ops (backend.h): bit-identical to their unfused sequences of the launchers here. */
void ls_cuda_rmsnorm_to(cudaStream_t st, float *dst, const float *src, const float *w, int64_t m, int64_t n, float eps);
void ls_cuda_add_rmsnorm(cudaStream_t st, float *x, const float *t, const float *w_post, float s, float *xn,
                         const float *w_pre, int64_t m, int64_t n, float eps);
void ls_cuda_norm_rope(cudaStream_t st, float *x, const float *w, int64_t m, int32_t n_heads, int32_t hd, float eps,
                       int32_t n_pairs, const int32_t *pos, float theta_base, float freq_scale);
/* Two norm_rope calls on the same rows and positions (q heads: x, w, n_heads; k heads: x2,
 * w2, n_heads2) in one launch, the bits of the two calls; n_pairs > 0. With x3, also the
 * ls_cuda_rmsnorm(x3, NULL, m n_heads3, hd, eps) that follows (Gemma 4's value norm). With kv
 * (device slot {dk, dv} of f16 or f32 caches, read when the kernel runs, as
 * ls_cuda_kv_store2's dst) it also does the ls_cuda_kv_store2(kv, f32, x2, v, nv) that follows
 * (nv = m n_heads2 hd; with x3, v == x3). */
void ls_cuda_norm_rope2(cudaStream_t st, float *x, const float *w, int32_t n_heads, float *x2, const float *w2,
                        int32_t n_heads2, float *x3, int32_t n_heads3, int64_t m, int32_t hd, float eps,
                        int32_t n_pairs, const int32_t *pos, float theta_base, float freq_scale, void *const *kv,
                        bool f32, const float *v, int64_t nv);
/* dst (device) holds the two destination addresses {dk, dv} when the kernel runs (a step
 * parameter: the cache slot moves every step, the replayed graph does not). */
void ls_cuda_kv_store2(cudaStream_t st, void *const *dst, bool f32, const float *k, const float *v, int64_t n);
void ls_cuda_gelu_mul(cudaStream_t st, float *gate, const float *up, int64_t n);
/* add_rmsnorm (xn required) and gelu_mul that also leave their output (m * n, or n,
 * elements, a multiple of 32) quantized in an integer-matmul scratch for activation layout
 * `layout` (ls_cuda_mmq_act_key), byte for byte what that matmul's own quantization writes:
 * the backend calls these when the next op is such a matmul of that output. */
void ls_cuda_add_rmsnorm_q(cudaStream_t st, float *x, const float *t, const float *w_post, float s, float *xn,
                           const float *w_pre, int64_t m, int64_t n, float eps, void *scratch, int layout);
void ls_cuda_gelu_mul_q(cudaStream_t st, float *gate, const float *up, int64_t n, void *scratch, int layout);
void ls_cuda_add(cudaStream_t st, float *x, const float *y, int64_t n);
void ls_cuda_scale(cudaStream_t st, float *x, float s, int64_t n);
void ls_cuda_axpby(cudaStream_t st, float *x, const float *y, float a, float b, int64_t n);
void ls_cuda_mul_rows(cudaStream_t st, float *x, const float *w, float s, int64_t m, int64_t n);
void ls_cuda_softcap(cudaStream_t st, float *x, float cap, int64_t n);
void ls_cuda_kv_store(cudaStream_t st, void *dst, bool f32, const float *src, int64_t n);
void ls_cuda_gather_rows(cudaStream_t st, float *dst, const float *src, const int32_t *rows, int64_t cnt, int64_t d);
void ls_cuda_scatter_add(cudaStream_t st, float *acc, const float *y, const int32_t *rows, const float *w, int64_t cnt,
                         int64_t d);

/* ---- attention.cu ---- */
/* Once per process, before any capture: raises the attention kernel's shared-memory limit and
 * reads the device's SM count (the split choice, attention.cu split_pays). */
/* Process-wide A/B switches (LS_CUDA_OFF_ATTN_FINISH / _SPLIT): the one-chunk finish in the
 * partial kernel, one query vector a block for small calls while the grid is small
 * (split_pays); both on by default, same bits. */
void ls_cuda_attention_set_switches(bool finish, bool split);
void ls_cuda_attention_init(void);
/* Scratch (bytes) that lets one call handle at least one row of any attention whose query
 * width n_head * hd <= max_cols and whose filled slots <= max_keys; more rows per launch
 * when there is room (rows are processed in groups; a row's bits never depend on it). */
size_t ls_cuda_attention_scratch_bytes(int64_t max_rows, int64_t max_cols, int64_t max_keys);
/* The cache extent of a call, {first_pos, n_slots, c_first, nch}: what ls_cuda_attention's
 * `dyn` must hold (the launch shape depends on nch, the arithmetic on none of it). */
void ls_cuda_attention_extent(const ls_attn_args *a, int32_t out[4]);
/* a's pointers are device memory; scratch holds scratch_bytes (device); dyn (device) holds
 * ls_cuda_attention_extent(a) when the kernels run: they read the extent from there, so a
 * replayed graph attends over the cache as it is at replay time. qlayout >= 0 (hd >= 32): the
 * output is also left quantized in qscratch for the integer matmul that reads it next
 * (ls_cuda_add_rmsnorm_q's contract); -1 (qscratch may be NULL): not. */
void ls_cuda_attention(cudaStream_t st, const ls_attn_args *a, const int32_t *dyn, float *scratch, size_t scratch_bytes,
                       void *qscratch, int qlayout);

/* ---- backend_cuda.cu: step segments ---- */
/* How many recorded steps were submitted in two segments since the process started (docs/cuda.md
 * 2b): lets tests check that the steps they compare were really split. */
int64_t ls_cuda_step_segments(void);

/* ---- backend_cuda.cu: collectives ---- */
/* Runs fn(stream, ud) under the queue lock on the stream the ops of `be` run on (outside any
 * step): fn enqueues a collective (NCCL) in order with those ops. */
void ls_cuda_on_queue(ls_backend *be, void (*fn)(cudaStream_t st, void *ud), void *ud);

#endif
