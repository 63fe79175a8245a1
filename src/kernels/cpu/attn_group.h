/* Attention over one f16 KV head for E (1..LS_ATTN_ENT) queries at once (attn_group_avx2.c):
 * the query heads that share the KV head, of one or several query rows (a verify block's rows
 * read the same keys). Bit-identical per query to the one-head path of backend_cpu.c; hd must
 * be a multiple of 16.
 *   scores: scores[e * s_stride + i] = dot(k row i, q[e]) * scale, i < n
 *   values: out[e][d] = sum over i in [lo[e], hi[e]) in order of p[e * p_stride + i] * v row i [d]
 *           (one fma chain per element from 0; an empty range gives 0; the caller applies
 *           1 / sum). p is read only inside each query's range. */
#ifndef LS_KERNELS_CPU_ATTN_GROUP_H
#define LS_KERNELS_CPU_ATTN_GROUP_H

#include <stdint.h>

#include "kernels/backend.h"

enum { LS_ATTN_ENT = 8 };

/* How one attention call is cut into items (attn_block.c): blocks of `rows` consecutive query
 * rows times runs of `heads` query heads of one KV head, rows * heads <= LS_ATTN_ENT. */
typedef struct {
    int rows, heads;
} ls_attn_plan;

/* The plan that balances nth threads dealt items round-robin, with as few passes over the
 * cache as that allows. */
void ls_attn_plan_make(const ls_attn_args *a, int nth, ls_attn_plan *p);
long ls_attn_plan_items(const ls_attn_args *a, const ls_attn_plan *p);
/* Item t of the plan (f16 cache, hd a multiple of 16, AVX2 CPU); scores: LS_ATTN_ENT rows of
 * s_stride floats of scratch, s_stride >= the keys the block's rows see together. */
void ls_attn_block(const ls_attn_args *a, const ls_attn_plan *p, long t, float *scores, int64_t s_stride);

void ls_attn_group_scores_avx2(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q,
                               int32_t hd, float scale, float *scores, int64_t s_stride);
void ls_attn_group_values_avx2(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                               const float *p, int64_t p_stride, int32_t hd, float *const *out);
/* The same with 512-bit registers (attn_group_avx512.c), same bits; AVX-512 CPUs only. */
void ls_attn_group_scores_avx512(int E, const uint16_t *k, int64_t kv_stride, int32_t n, const float *const *q,
                                 int32_t hd, float scale, float *scores, int64_t s_stride);
void ls_attn_group_values_avx512(int E, const uint16_t *v, int64_t kv_stride, const int32_t *lo, const int32_t *hi,
                                 const float *p, int64_t p_stride, int32_t hd, float *const *out);

#endif
