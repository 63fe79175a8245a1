/* ls_expf, the scalar reference of the exact exp (expf.h documents the algorithm and where its
 * bits come from), and the dispatch of the softmax numerators. The fused steps are explicit
 * fma() calls; -ffp-contract=off (CMakeLists.txt) keeps the compiler from fusing the others. */
#include "kernels/cpu/expf.h"

#include <math.h>
#include <string.h>

/* 2^(i/32) rounded to nearest (checked against a 200-bit evaluation). */
const uint64_t ls_expf_tab[32] = {
    0x3ff0000000000000, 0x3ff059b0d3158574, 0x3ff0b5586cf9890f, 0x3ff11301d0125b51, 0x3ff172b83c7d517b,
    0x3ff1d4873168b9aa, 0x3ff2387a6e756238, 0x3ff29e9df51fdee1, 0x3ff306fe0a31b715, 0x3ff371a7373aa9cb,
    0x3ff3dea64c123422, 0x3ff44e086061892d, 0x3ff4bfdad5362a27, 0x3ff5342b569d4f82, 0x3ff5ab07dd485429,
    0x3ff6247eb03a5585, 0x3ff6a09e667f3bcd, 0x3ff71f75e8ec5f74, 0x3ff7a11473eb0187, 0x3ff82589994cce13,
    0x3ff8ace5422aa0db, 0x3ff93737b0cdc5e5, 0x3ff9c49182a3f090, 0x3ffa5503b23e255d, 0x3ffae89f995ad3ad,
    0x3ffb7f76f2fb5e47, 0x3ffc199bdd85529c, 0x3ffcb720dcef9069, 0x3ffd5818dcfba487, 0x3ffdfc97337b9b5f,
    0x3ffea4afa2a490da, 0x3fff50765b6e4540,
};

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline uint64_t f64_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double f64_from(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float ls_expf(float x) {
    /* |x| >= 88 (the exponent field and top mantissa bits of 88.0f) or NaN / inf */
    if (((f32_bits(x) >> 20) & 0x7ff) >= (0x42b00000u >> 20)) {
        if (f32_bits(x) == 0xff800000u) return 0.0f; /* -inf */
        if (((f32_bits(x) >> 20) & 0x7ff) >= 0x7f8) return x + x;
        if (x > LS_EXPF_OFLOW) return INFINITY;
        if (x < LS_EXPF_UFLOW) return 0.0f;
    }
    const double xd = (double)x;
    const double kd_shifted = fma(LS_EXPF_INVLN2N, xd, LS_EXPF_SHIFT);
    const uint64_t ki = f64_bits(kd_shifted);
    const double kd = kd_shifted - LS_EXPF_SHIFT;
    const double r = fma(LS_EXPF_INVLN2N, xd, -kd);
    const double s = f64_from(ls_expf_tab[ki & 31] + ((ki & ~(uint64_t)31) << 47));
    const double y = fma(fma(LS_EXPF_C0, r, LS_EXPF_C1), r * r, fma(LS_EXPF_C2, r, 1.0));
    return (float)(y * s);
}

static void softmax_exp_scalar(int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    for (int h = 0; h < G; h++) {
        float *p = s + h * stride, acc = 0.0f;
        for (int32_t i = 0; i < n; i++) {
            p[i] = ls_expf(p[i] - mx[h]);
            acc += p[i];
        }
        sum[h] = acc;
    }
}

void ls_softmax_exp(ls_isa isa, int G, float *s, int64_t stride, int32_t n, const float *mx, float *sum) {
    const ls_isa hw = ls_cpu_isa_hw();
    if (isa > hw) isa = hw;
    if (isa >= LS_ISA_AVX512)
        ls_softmax_exp_avx512(G, s, stride, n, mx, sum);
    else if (isa >= LS_ISA_AVX2)
        ls_softmax_exp_avx2(G, s, stride, n, mx, sum);
    else
        softmax_exp_scalar(G, s, stride, n, mx, sum);
}
