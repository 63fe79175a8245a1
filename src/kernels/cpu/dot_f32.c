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
#include <string.h>

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
    if (isa >= LS_ISA_AVX2) return ls_dot_f32_avx2(a, b, n);
#endif
    (void)isa;
    return ls_dot_f32_scalar(a, b, n);
}

float ls_dot_f16_f32_isa(ls_isa isa, const uint16_t *a_f16, const float *b, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= LS_ISA_AVX2) return ls_dot_f16_f32_avx2(a_f16, b, n);
#endif
    (void)isa;
    return ls_dot_f16_f32_scalar(a_f16, b, n);
}

/* Resolved once: attention calls these per key, so no cpuid per call.
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

float ls_dot_f32(const float *a, const float *b, int64_t n) {
    return ls_dot_f32_isa(dot_isa(), a, b, n);
}

float ls_dot_f16_f32(const uint16_t *a_f16, const float *b, int64_t n) {
    return ls_dot_f16_f32_isa(dot_isa(), a_f16, b, n);
}

/* ---- GELU (tanh form) times a gate: g[i] = gelu(g[i]) * u[i] ----
 * gelu(x) = 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3). 1 + tanh(z) is computed
 * without cancellation as 2 / (1 + e) for z >= 0 and 2 e / (1 + e) for z < 0, with
 * e = exp(-2|z|) from a fixed Cephes-style polynomial (explicit fmaf; |x| clamp keeps 2^n
 * normal). Every step is one IEEE operation that the AVX2 version (dot_f32_avx2.c)
 * performs lane-wise in the same order, so the two give identical bits per element,
 * whatever the element's position, the row count or the thread count. */
float ls_gelu_scalar(float x) {
    const float a = ((0.044715f * x) * x) * x;
    const float z = 0.7978845608028654f * (x + a);
    const float m0 = -2.0f * fabsf(z);
    const float m = m0 > -87.0f ? m0 : -87.0f; /* also maps a NaN to -87 (as max_ps does) */
    const float n = (m * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = fmaf(n, -0.693359375f, m);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float e = fmaf(p, r * r, r) + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* n in [-126, 0] */
    float sc;
    memcpy(&sc, &bits, sizeof sc);
    e = m0 < -87.0f ? 0.0f : e * sc; /* exp(-2|z|) below 2^-125: flush (1 + tanh(z) = 0 or 2) */
    const float t = 2.0f / (1.0f + e);
    const float opt = z >= 0.0f ? t : t * e;
    return (0.5f * x) * opt;
}

void ls_gelu_mul_scalar(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = ls_gelu_scalar(g[i]) * u[i];
}

void ls_gelu_mul(float *g, const float *u, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
    if (dot_isa() >= LS_ISA_AVX2) {
        ls_gelu_mul_avx2(g, u, n);
        return;
    }
#endif
    ls_gelu_mul_scalar(g, u, n);
}
