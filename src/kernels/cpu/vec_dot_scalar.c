/* Scalar reference dot products, one per weight type: the definition of each kernel's
 * reduction order, which the AVX2 kernels (vec_dot_avx2.c) reproduce bit for bit.
 *
 * Q4_0, Q5_0, Q8_0 (signed 32-element blocks): TWO float accumulators, one per half
 * block, each updated in block order; the halves are added once at the end:
 *   s = d_w * d_a; lo = exact sum of elements 0..15, hi = exact sum of elements 16..31;
 *   acc0 = fmaf(s, (float)lo, acc0); acc1 = fmaf(s, (float)hi, acc1); result acc0 + acc1.
 * (The AVX2 tile kernels keep acc0/acc1 in two lanes of a register shared by four
 * (row, activation) pairs, so no horizontal sum is needed per block.)
 * Other quantized types: per block an exact integer dot product (order-free), then ONE
 * float accumulator updated in block order with a fixed sequence of float operations:
 *   Q4_1, Q5_1:        acc = fmaf(d_w * d_a, (float)isum, acc);
 *                      acc = fmaf(m_w * d_a, (float)asum, acc)      asum = sum of q_a
 *   Q4_K, Q5_K:        acc = fmaf(d_w * d_a, (float)isum, acc);     isum = sum_j sc_j * dot_j
 *                      acc = fmaf(-(dmin_w * d_a), (float)imin, acc) imin = sum_j m_j * bsum_j
 *   Q6_K:              acc = fmaf(d_w * d_a, (float)isum, acc);     isum = sum_j sc_j * dot_j
 * d_w/m_w come from f16 (exact in float); d_a is the activation block's scale (f16 for
 * Q8_0, float for Q8_K). Float weight types use the fixed 8-lane order of dot_f32.c. */
#include <math.h>

#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"

/* ---- float weights (act: F32) ---- */

static float vd_f32(int64_t k, const void *w, const void *a) {
    return ls_dot_f32_scalar(w, a, k);
}
static float vd_f16(int64_t k, const void *w, const void *a) {
    return ls_dot_f16_f32_scalar(w, a, k);
}
static float vd_bf16(int64_t k, const void *w, const void *a) {
    return ls_dot_bf16_f32_scalar(w, a, k);
}

/* ---- 32-element blocks (act: Q8_0) ---- */

static float vd_q4_0(int64_t k, const void *w, const void *a) {
    const ls_block_q4_0 *x = w;
    const ls_block_q8_0 *y = a;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; j++) {
            lo += ((x[b].qs[j] & 15) - 8) * y[b].qs[j];
            hi += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
        }
        const float s = ls_f16_to_f32(x[b].d) * ls_f16_to_f32(y[b].d);
        acc0 = fmaf(s, (float)lo, acc0);
        acc1 = fmaf(s, (float)hi, acc1);
    }
    return acc0 + acc1;
}

static float vd_q4_1(int64_t k, const void *w, const void *a) {
    const ls_block_q4_1 *x = w;
    const ls_block_q8_0 *y = a;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        int32_t isum = 0, asum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (x[b].qs[j] & 15) * y[b].qs[j];
            isum += (x[b].qs[j] >> 4) * y[b].qs[j + 16];
        }
        for (int j = 0; j < 32; j++) asum += y[b].qs[j];
        const float da = ls_f16_to_f32(y[b].d);
        acc = fmaf(ls_f16_to_f32(x[b].d) * da, (float)isum, acc);
        acc = fmaf(ls_f16_to_f32(x[b].m) * da, (float)asum, acc);
    }
    return acc;
}

static inline uint32_t vd_qh32(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

static float vd_q5_0(int64_t k, const void *w, const void *a) {
    const ls_block_q5_0 *x = w;
    const ls_block_q8_0 *y = a;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        const uint32_t qh = vd_qh32(x[b].qh);
        int32_t slo = 0, shi = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = ((x[b].qs[j] & 15) | (int)(((qh >> j) & 1) << 4)) - 16;
            const int hi = ((x[b].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            slo += lo * y[b].qs[j];
            shi += hi * y[b].qs[j + 16];
        }
        const float s = ls_f16_to_f32(x[b].d) * ls_f16_to_f32(y[b].d);
        acc0 = fmaf(s, (float)slo, acc0);
        acc1 = fmaf(s, (float)shi, acc1);
    }
    return acc0 + acc1;
}

static float vd_q5_1(int64_t k, const void *w, const void *a) {
    const ls_block_q5_1 *x = w;
    const ls_block_q8_0 *y = a;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        const uint32_t qh = vd_qh32(x[b].qh);
        int32_t isum = 0, asum = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = (x[b].qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (x[b].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            isum += lo * y[b].qs[j] + hi * y[b].qs[j + 16];
        }
        for (int j = 0; j < 32; j++) asum += y[b].qs[j];
        const float da = ls_f16_to_f32(y[b].d);
        acc = fmaf(ls_f16_to_f32(x[b].d) * da, (float)isum, acc);
        acc = fmaf(ls_f16_to_f32(x[b].m) * da, (float)asum, acc);
    }
    return acc;
}

static float vd_q8_0(int64_t k, const void *w, const void *a) {
    const ls_block_q8_0 *x = w;
    const ls_block_q8_0 *y = a;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; j++) {
            lo += x[b].qs[j] * y[b].qs[j];
            hi += x[b].qs[j + 16] * y[b].qs[j + 16];
        }
        const float s = ls_f16_to_f32(x[b].d) * ls_f16_to_f32(y[b].d);
        acc0 = fmaf(s, (float)lo, acc0);
        acc1 = fmaf(s, (float)hi, acc1);
    }
    return acc0 + acc1;
}

/* ---- K-quants (act: Q8_K) ---- */

/* The eight 6-bit scales and mins of a Q4_K/Q5_K block (docs/gguf.md). */
static void vd_k4_scales(const uint8_t *q, int sc[8], int m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 15) | ((q[j] >> 6) << 4);
        m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
}

/* imin = sum over sub-blocks of 32 of m_j * (sum of the activations in it). */
static int32_t vd_k4_imin(const int m[8], const int16_t bsums[16]) {
    int32_t imin = 0;
    for (int j = 0; j < 8; j++) imin += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return imin;
}

static float vd_q4_k(int64_t k, const void *w, const void *a) {
    const ls_block_q4_k *x = w;
    const ls_block_q8_k *y = a;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        int sc[8], m[8];
        vd_k4_scales(x[b].scales, sc, m);
        const uint8_t *q = x[b].qs;
        const int8_t *q8 = y[b].qs;
        int32_t isum = 0;
        for (int g = 0; g < 4; g++, q += 32, q8 += 64) {
            int32_t s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += (q[l] & 15) * q8[l];
                s2 += (q[l] >> 4) * q8[l + 32];
            }
            isum += sc[2 * g] * s1 + sc[2 * g + 1] * s2;
        }
        const int32_t imin = vd_k4_imin(m, y[b].bsums);
        acc = fmaf(ls_f16_to_f32(x[b].d) * y[b].d, (float)isum, acc);
        acc = fmaf(-(ls_f16_to_f32(x[b].dmin) * y[b].d), (float)imin, acc);
    }
    return acc;
}

static float vd_q5_k(int64_t k, const void *w, const void *a) {
    const ls_block_q5_k *x = w;
    const ls_block_q8_k *y = a;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        int sc[8], m[8];
        vd_k4_scales(x[b].scales, sc, m);
        const uint8_t *q = x[b].qs, *qh = x[b].qh;
        const int8_t *q8 = y[b].qs;
        int32_t isum = 0;
        for (int g = 0; g < 4; g++, q += 32, q8 += 64) {
            int32_t s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += ((q[l] & 15) | (((qh[l] >> (2 * g)) & 1) << 4)) * q8[l];
                s2 += ((q[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4)) * q8[l + 32];
            }
            isum += sc[2 * g] * s1 + sc[2 * g + 1] * s2;
        }
        const int32_t imin = vd_k4_imin(m, y[b].bsums);
        acc = fmaf(ls_f16_to_f32(x[b].d) * y[b].d, (float)isum, acc);
        acc = fmaf(-(ls_f16_to_f32(x[b].dmin) * y[b].d), (float)imin, acc);
    }
    return acc;
}

static float vd_q6_k(int64_t k, const void *w, const void *a) {
    const ls_block_q6_k *x = w;
    const ls_block_q8_k *y = a;
    float acc = 0.0f;
    for (int64_t b = 0; b < k / LS_QK_K; b++) {
        /* unpack the 256 six-bit values into element order, unsigned 0..63 */
        uint8_t q[LS_QK_K];
        const uint8_t *ql = x[b].ql, *qh = x[b].qh;
        for (int h = 0; h < 2; h++, ql += 64, qh += 32) {
            uint8_t *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                qq[l] = (uint8_t)((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4));
                qq[l + 32] = (uint8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
                qq[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                qq[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
        }
        /* sixteen sub-blocks of 16 with signed 8-bit scales. The -32 offset is applied
         * through the activation's bsums: sum (q - 32) a = sum q a - 32 * bsum, the same
         * integer as long as bsums match qs (they do: quant_act.c), and the same
         * definition the AVX2 kernel uses, so the two agree on any input. */
        int32_t isum = 0, ioff = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++) s += q[16 * j + l] * y[b].qs[16 * j + l];
            isum += x[b].scales[j] * s;
            ioff += x[b].scales[j] * y[b].bsums[j];
        }
        isum -= 32 * ioff;
        acc = fmaf(ls_f16_to_f32(x[b].d) * y[b].d, (float)isum, acc);
    }
    return acc;
}

ls_vec_dot_fn ls_vec_dot_scalar_get(ls_type wt) {
    switch (wt) {
    case LS_TYPE_F32: return vd_f32;
    case LS_TYPE_F16: return vd_f16;
    case LS_TYPE_BF16: return vd_bf16;
    case LS_TYPE_Q4_0: return vd_q4_0;
    case LS_TYPE_Q4_1: return vd_q4_1;
    case LS_TYPE_Q5_0: return vd_q5_0;
    case LS_TYPE_Q5_1: return vd_q5_1;
    case LS_TYPE_Q8_0: return vd_q8_0;
    case LS_TYPE_Q4_K: return vd_q4_k;
    case LS_TYPE_Q5_K: return vd_q5_k;
    case LS_TYPE_Q6_K: return vd_q6_k;
    default: return NULL;
    }
}
