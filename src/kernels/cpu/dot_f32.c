/* Fixed-order float dot products (attention scores, RMSNorm sums, float weights).
 *
 * The order, for n elements: eight lanes l0..l7; lane j accumulates
 * fmaf(a[i + j], b[i + j], l_j) for i = 0, 8, 16, ... while i + 8 <= n; then the fixed
 * tree (l0+l4, l1+l5, l2+l6, l3+l7) -> (a0+a2, a1+a3) -> b0+b1; then the tail elements
 * added one by one with fmaf, in order. This is exactly what one AVX2 register of eight
 * lanes does (dot_f32_avx2.c), so the scalar code here is a bit-exact emulation of it.
 * The public ls_dot_* dispatch once on ls_cpu_isa(). */
#include <math.h>
#include <stdatomic.h>

#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"

/* The fixed horizontal tree over the eight lanes. */
static inline float dot_tree8(const float l[8]) {
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    const float b0 = a0 + a2, b1 = a1 + a3;
    return b0 + b1;
}

float ls_dot_f32_scalar(const float *a, const float *b, int64_t n) {
    float l[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] = fmaf(a[i + j], b[i + j], l[j]);
    float s = dot_tree8(l);
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

float ls_dot_f16_f32_scalar(const uint16_t *a_f16, const float *b, int64_t n) {
    float l[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] = fmaf(ls_f16_to_f32(a_f16[i + j]), b[i + j], l[j]);
    float s = dot_tree8(l);
    for (; i < n; i++) s = fmaf(ls_f16_to_f32(a_f16[i]), b[i], s);
    return s;
}

float ls_dot_bf16_f32_scalar(const uint16_t *a_bf16, const float *b, int64_t n) {
    float l[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] = fmaf(ls_bf16_to_f32(a_bf16[i + j]), b[i + j], l[j]);
    float s = dot_tree8(l);
    for (; i < n; i++) s = fmaf(ls_bf16_to_f32(a_bf16[i]), b[i], s);
    return s;
}

float ls_dot_f32_isa(ls_isa isa, const float *a, const float *b, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
    if (isa == LS_ISA_AVX2) return ls_dot_f32_avx2(a, b, n);
#endif
    (void)isa;
    return ls_dot_f32_scalar(a, b, n);
}

float ls_dot_f16_f32_isa(ls_isa isa, const uint16_t *a_f16, const float *b, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
    if (isa == LS_ISA_AVX2) return ls_dot_f16_f32_avx2(a_f16, b, n);
#endif
    (void)isa;
    return ls_dot_f16_f32_scalar(a_f16, b, n);
}

/* Resolved once: attention calls these per key, so no getenv/cpuid per call.
 * -1 = not yet resolved; a benign race resolves it twice to the same value. */
static atomic_int g_dot_isa = -1;

static inline ls_isa dot_isa(void) {
    int v = atomic_load_explicit(&g_dot_isa, memory_order_relaxed);
    if (v < 0) {
        v = (int)ls_cpu_isa();
        atomic_store_explicit(&g_dot_isa, v, memory_order_relaxed);
    }
    return (ls_isa)v;
}

float ls_dot_f32(const float *a, const float *b, int64_t n) { return ls_dot_f32_isa(dot_isa(), a, b, n); }

float ls_dot_f16_f32(const uint16_t *a_f16, const float *b, int64_t n) {
    return ls_dot_f16_f32_isa(dot_isa(), a_f16, b, n);
}
