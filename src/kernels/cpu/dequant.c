/* Reference dequantizers: one block layout each (docs/gguf.md "Dequantization"), written to
 * compute every element with the same float expression, in the same order, as llama.cpp's
 * dequantize_row_* and the gguf Python package. With -ffp-contract=off nothing is fused,
 * so the golden test (tests/test_kernels_reference.c) can compare them bit for bit.
 * These are not on the matmul hot path (dot products never dequantize); get_rows and the
 * tests use them. */
#include <string.h>

#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"

/* ---- float types ---- */

void ls_dequantize_row_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void ls_dequantize_row_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src; /* [n] */
    for (int64_t i = 0; i < n; i++) dst[i] = ls_f16_to_f32(h[i]);
}

void ls_dequantize_row_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *b = src; /* [n] */
    for (int64_t i = 0; i < n; i++) dst[i] = ls_bf16_to_f32(b[i]);
}

/* ---- 32-element blocks ---- */

void ls_dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    const ls_block_q4_0 *x = src; /* [n / 32] */
    for (int64_t i = 0; i < n / LS_QK4_0; i++, dst += LS_QK4_0) {
        const float d = ls_f16_to_f32(x[i].d);
        /* byte j holds element j (low nibble) and element j + 16 (high nibble) */
        for (int j = 0; j < LS_QK4_0 / 2; j++) {
            dst[j] = (float)((x[i].qs[j] & 15) - 8) * d;
            dst[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void ls_dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    const ls_block_q4_1 *x = src; /* [n / 32] */
    for (int64_t i = 0; i < n / LS_QK4_0; i++, dst += LS_QK4_0) {
        const float d = ls_f16_to_f32(x[i].d), m = ls_f16_to_f32(x[i].m);
        for (int j = 0; j < LS_QK4_0 / 2; j++) {
            dst[j] = (float)(x[i].qs[j] & 15) * d + m;
            dst[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The fifth bit of element j is bit j of the little-endian u32 qh. */
static inline uint32_t q5_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

void ls_dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    const ls_block_q5_0 *x = src; /* [n / 32] */
    for (int64_t i = 0; i < n / LS_QK5_0; i++, dst += LS_QK5_0) {
        const float d = ls_f16_to_f32(x[i].d);
        const uint32_t qh = q5_qh(x[i].qh);
        for (int j = 0; j < LS_QK5_0 / 2; j++) {
            int lo = (x[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int hi = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

void ls_dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    const ls_block_q5_1 *x = src; /* [n / 32] */
    for (int64_t i = 0; i < n / LS_QK5_0; i++, dst += LS_QK5_0) {
        const float d = ls_f16_to_f32(x[i].d), m = ls_f16_to_f32(x[i].m);
        const uint32_t qh = q5_qh(x[i].qh);
        for (int j = 0; j < LS_QK5_0 / 2; j++) {
            int lo = (x[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int hi = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)lo * d + m;
            dst[j + 16] = (float)hi * d + m;
        }
    }
}

void ls_dequantize_row_q8_0(const void *src, float *dst, int64_t n) {
    const ls_block_q8_0 *x = src; /* [n / 32] */
    for (int64_t i = 0; i < n / LS_QK8_0; i++, dst += LS_QK8_0) {
        const float d = ls_f16_to_f32(x[i].d);
        for (int j = 0; j < LS_QK8_0; j++) dst[j] = (float)x[i].qs[j] * d;
    }
}

/* ---- 256-element K-quant blocks ---- */

/* 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes shared by Q4_K/Q5_K. */
static inline void k4_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void ls_dequantize_row_q4_k(const void *src, float *dst, int64_t n) {
    const ls_block_q4_k *x = src; /* [n / 256] */
    for (int64_t i = 0; i < n / LS_QK_K; i++) {
        const float d = ls_f16_to_f32(x[i].d), dmin = ls_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        /* four groups of 64: low nibbles use sub-block 2g, high nibbles 2g + 1 */
        for (int g = 0; g < 4; g++, q += 32) {
            int sc, m;
            k4_scale_min(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            k4_scale_min(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 15) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void ls_dequantize_row_q5_k(const void *src, float *dst, int64_t n) {
    const ls_block_q5_k *x = src; /* [n / 256] */
    for (int64_t i = 0; i < n / LS_QK_K; i++) {
        const float d = ls_f16_to_f32(x[i].d), dmin = ls_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        for (int g = 0; g < 4; g++, q += 32) {
            int sc, m;
            k4_scale_min(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            k4_scale_min(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            /* fifth bits: qh[l] bit 2g for the low nibble, bit 2g + 1 for the high one */
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)((q[l] & 15) + (((qh[l] >> (2 * g)) & 1) << 4)) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)((q[l] >> 4) + (((qh[l] >> (2 * g + 1)) & 1) << 4)) - m2;
        }
    }
}

void ls_dequantize_row_q6_k(const void *src, float *dst, int64_t n) {
    const ls_block_q6_k *x = src; /* [n / 256] */
    for (int64_t i = 0; i < n / LS_QK_K; i++) {
        const float d = ls_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        /* two halves of 128: ql advances 64 bytes, qh 32, scales 8 per half */
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, dst += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * (float)sc[is] * (float)q1;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void ls_dequantize_row_q8_k(const void *src, float *dst, int64_t n) {
    const ls_block_q8_k *x = src; /* [n / 256] */
    for (int64_t i = 0; i < n / LS_QK_K; i++, dst += LS_QK_K) {
        for (int j = 0; j < LS_QK_K; j++) dst[j] = x[i].d * (float)x[i].qs[j];
    }
}
