/* Attention over one f16 KV head for G (1..LS_ATTN_GROUP) query heads at once
 * (attn_group_avx2.c). Bit-identical per head to the one-head path of backend_cpu.c; hd
 * must be a multiple of 16.
 *   scores: scores[h * s_stride + i] = dot(k row i, q + h * hd) * scale, i < n
 *   values: out[h * hd + d] = sum over i in order of p[h * p_stride + i] * v row i [d]
 *           (one fma chain per element from 0; the caller applies 1 / sum) */
#ifndef LS_KERNELS_CPU_ATTN_GROUP_H
#define LS_KERNELS_CPU_ATTN_GROUP_H

#include <stdint.h>

enum { LS_ATTN_GROUP = 4 };

void ls_attn_group_scores_avx2(int G, const uint16_t *k, int64_t kv_stride, int32_t n, const float *q, int32_t hd,
                               float scale, float *scores, int64_t s_stride);
void ls_attn_group_values_avx2(int G, const uint16_t *v, int64_t kv_stride, int32_t n, const float *p, int64_t p_stride,
                               int32_t hd, float *out);

#endif
