/* Exact single-precision exp and the softmax numerators built on it (docs/design.md
 * "Kernels (`src/kernels/cpu`)").
 *
 * ls_expf(x) returns the bits glibc's expf returns on x86-64 with FMA (glibc >= 2.28, whose
 * expf is the ARM optimized-routines algorithm; the ifunc picks the FMA-compiled variant on
 * FMA machines) for every float x. The vector versions return the bits of ls_expf lane by
 * lane, so replacing a loop of expf calls by them changes nothing. The algorithm, in double:
 *   k = round(x * 32 / ln 2), r = x * 32 / ln 2 - k   (|r| <= 1/2)
 *   exp(x) = 2^(k/32) * 2^(r/32) ~= s * (C0 r^3 + C1 r^2 + C2 r + 1), s = 2^(k/32)
 * where s is a table entry 2^((k mod 32)/32) with k div 32 added to its exponent, and the
 * product is rounded to float once. The fused steps (fma) are exactly those of glibc's FMA
 * build, read from its disassembly and confirmed over all 2^32 inputs (expf_exhaustive):
 *   kd = fma(InvLn2N, x, SHIFT)  (round to integer by the 1.5 * 2^52 shift; ki = its bits)
 *   r  = fma(InvLn2N, x, -(kd - SHIFT))
 *   y  = fma(fma(C0, r, C1), r * r, fma(C2, r, 1)), result = (float)(y * s)
 * Special inputs (|x| >= 88 or NaN): -inf -> +0, NaN / +inf -> x + x, x > 0x1.62e42ep6
 * (log of 2^128) -> +inf, x < -0x1.9fe368p6 (log of 2^-150) -> +0; every other x takes the
 * formula (results below 2^-126 are rounded once, as subnormals). */
#ifndef LS_KERNELS_CPU_EXPF_H
#define LS_KERNELS_CPU_EXPF_H

#include <stdint.h>

#include "kernels/cpu/cpu_kernels.h"

/* The constants of glibc's e_exp2f_data.c (N = 32), with the 1/N^k scalings folded into
 * the exponents (exact: powers of two). The polynomial coefficients are its minimax fit of
 * 2^(r/32) on |r| <= 1/2. */
#define LS_EXPF_INVLN2N 0x1.71547652b82fep+5 /* 32 / ln 2, rounded */
#define LS_EXPF_SHIFT   0x1.8p+52
#define LS_EXPF_C0      0x1.c6af84b912394p-20
#define LS_EXPF_C1      0x1.ebfce50fac4f3p-13
#define LS_EXPF_C2      0x1.62e42ff0c52d6p-6
#define LS_EXPF_OFLOW   0x1.62e42ep6f    /* above: +inf */
#define LS_EXPF_UFLOW   (-0x1.9fe368p6f) /* below: +0 */

/* ls_expf_tab[i]: the bits of 2^(i/32) rounded to nearest double. 2^(k/32) for an integer k
 * (|k| < 150 * 32) is the double with bits ls_expf_tab[k & 31] + ((k & ~31) << 47): k div 32
 * added to the exponent field (bit 52); with ki = bits of k + SHIFT the same expression in
 * ki works, the shift's own bits leaving the 64-bit word. */
extern const uint64_t ls_expf_tab[32];

float ls_expf(float x);

/* y[i] = ls_expf(x[i]) for 8 (16) lanes; call only when ls_cpu_isa_hw() reaches the level. */
void ls_expf8_avx2(const float *x, float *y);
void ls_expf16_avx512(const float *x, float *y);

/* Softmax numerators of G rows of n scores (row h at s + h * stride, its max mx[h]):
 * s[h * stride + i] = ls_expf(s[h * stride + i] - mx[h]) for i < n, and sum[h] = those values
 * added one at a time from 0.0f in index order (the order the bits of a float sum depend on;
 * the rows' sums run as independent chains). The same bits at every ISA level; isa is capped
 * at what the hardware runs. */
void ls_softmax_exp(ls_isa isa, int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum);
void ls_softmax_exp_avx2(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum);
void ls_softmax_exp_avx512(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum);

#endif
