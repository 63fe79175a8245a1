/* Reference quantizers, float -> every weight type, used by tests to make random weight
 * rows of each type (and by fixtures). The 32-element types follow llama.cpp's
 * quantize_row_*_ref (and the gguf Python package) exactly; the K-quants use plain
 * round-to-nearest for values and 6/8-bit scales instead of llama.cpp's error-minimizing
 * search: any valid block is fine for testing the kernels, which only read blocks. */
#include <math.h>
#include <string.h>

#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"

static inline int qr_clamp(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* float -> bfloat16, round to nearest even, NaN kept quiet (ggml_compute_fp32_to_bf16). */
static uint16_t qr_f32_to_bf16(float f) {
    uint32_t u = ls_bits_from_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

/* The signed value of largest magnitude (first on ties) and that magnitude. */
static float qr_absmax_signed(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    *amax_out = amax;
    return max;
}

/* ---- 32-element blocks: llama.cpp reference semantics ---- */

static void qr_q4_0(const float *x, ls_block_q4_0 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float amax;
        const float max = qr_absmax_signed(x, 32, &amax);
        const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = ls_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const int q0 = qr_clamp((int)(x[j] * id + 8.5f), 0, 15);
            const int q1 = qr_clamp((int)(x[j + 16] * id + 8.5f), 0, 15);
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void qr_q4_1(const float *x, ls_block_q4_1 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < 32; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
        }
        const float d = (mx - mn) / 15, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = ls_f32_to_f16(d);
        y[b].m = ls_f32_to_f16(mn);
        for (int j = 0; j < 16; j++) {
            const int q0 = qr_clamp((int)((x[j] - mn) * id + 0.5f), 0, 15);
            const int q1 = qr_clamp((int)((x[j + 16] - mn) * id + 0.5f), 0, 15);
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Pack 32 five-bit values: low nibbles in qs (element j and j + 16 share byte j), fifth
 * bits in the little-endian u32 qh (bit j for element j). */
static void qr_pack5(const int q[32], uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(h >> (8 * i));
}

static void qr_q5_0(const float *x, ls_block_q5_0 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float amax;
        const float max = qr_absmax_signed(x, 32, &amax);
        const float d = max / -16, id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = qr_clamp((int)(x[j] * id + 16.5f), 0, 31);
        y[b].d = ls_f32_to_f16(d);
        qr_pack5(q, y[b].qs, y[b].qh);
    }
}

static void qr_q5_1(const float *x, ls_block_q5_1 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < 32; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
        }
        const float d = (mx - mn) / 31, id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = qr_clamp((int)((x[j] - mn) * id + 0.5f), 0, 31);
        y[b].d = ls_f32_to_f16(d);
        y[b].m = ls_f32_to_f16(mn);
        qr_pack5(q, y[b].qs, y[b].qh);
    }
}

static void qr_q8_0(const float *x, ls_block_q8_0 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float amax;
        qr_absmax_signed(x, 32, &amax);
        const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = ls_f32_to_f16(d);
        for (int j = 0; j < 32; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* ---- K-quants: round-to-nearest ---- */

/* Pack eight 6-bit scales and mins into the 12 bytes Q4_K/Q5_K share (inverse of the
 * unpacking in docs/gguf.md). */
static void qr_pack_k4_scales(const int sc[8], const int m[8], uint8_t q[12]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* Shared Q4_K/Q5_K quantization of one 256-block to nmax+1 levels per element:
 * x ~ d * sc_j * q - dmin * m_j with q in [0, nmax]. Writes q[256] and the header. */
static void qr_k4_block(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t scales[12], int q[256]) {
    float scale[8], minv[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float mn = 0.0f, mx = 0.0f; /* min clamped to <= 0 so m_j >= 0 */
        for (int l = 0; l < 32; l++) {
            mn = fminf(mn, x[32 * j + l]);
            mx = fmaxf(mx, x[32 * j + l]);
        }
        scale[j] = (mx - mn) / (float)nmax;
        minv[j] = -mn;
        smax = fmaxf(smax, scale[j]);
        mmax = fmaxf(mmax, minv[j]);
    }
    const float d = smax / 63, dmin = mmax / 63;
    *d_out = ls_f32_to_f16(d);
    *dmin_out = ls_f32_to_f16(dmin);
    const float dq = ls_f16_to_f32(*d_out), dminq = ls_f16_to_f32(*dmin_out);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = dq > 0.0f ? qr_clamp((int)lrintf(scale[j] / dq), 0, 63) : 0;
        m[j] = dminq > 0.0f ? qr_clamp((int)lrintf(minv[j] / dminq), 0, 63) : 0;
        const float ds = dq * (float)sc[j], dm = dminq * (float)m[j];
        for (int l = 0; l < 32; l++)
            q[32 * j + l] = ds > 0.0f ? qr_clamp((int)lrintf((x[32 * j + l] + dm) / ds), 0, nmax) : 0;
    }
    qr_pack_k4_scales(sc, m, scales);
}

static void qr_q4_k(const float *x, ls_block_q4_k *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += LS_QK_K) {
        int q[256];
        qr_k4_block(x, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
        /* group g: byte 32g + l holds element 64g + l (low) and 64g + 32 + l (high) */
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) y[b].qs[32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
}

static void qr_q5_k(const float *x, ls_block_q5_k *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += LS_QK_K) {
        int q[256];
        qr_k4_block(x, 31, &y[b].d, &y[b].dmin, y[b].scales, q);
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) {
                const int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
                y[b].qs[32 * g + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                y[b].qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
            }
        }
    }
}

static void qr_q6_k(const float *x, ls_block_q6_k *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += LS_QK_K) {
        /* sixteen sub-blocks of 16, each with a signed 8-bit scale; q in [-32, 31] */
        float s[16], smax = 0.0f;
        for (int j = 0; j < 16; j++) {
            float amax;
            qr_absmax_signed(x + 16 * j, 16, &amax);
            s[j] = amax / 31;
            smax = fmaxf(smax, s[j]);
        }
        y[b].d = ls_f32_to_f16(smax / 127);
        const float dq = ls_f16_to_f32(y[b].d);
        int q[256];
        for (int j = 0; j < 16; j++) {
            const int sc = dq > 0.0f ? qr_clamp((int)lrintf(s[j] / dq), -128, 127) : 0;
            y[b].scales[j] = (int8_t)sc;
            const float ds = dq * (float)sc;
            for (int l = 0; l < 16; l++)
                q[16 * j + l] = (ds != 0.0f ? qr_clamp((int)lrintf(x[16 * j + l] / ds), -32, 31) : 0) + 32;
        }
        /* halves of 128: ql[l] low/high nibbles hold elements l / l + 64, ql[l + 32] hold
         * l + 32 / l + 96; qh[l] holds their top two bits at shifts 0, 2, 4, 6 */
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[b].ql + 64 * h, *qh = y[b].qh + 32 * h;
            const int *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
                ql[l + 32] = (uint8_t)((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
                qh[l] = (uint8_t)((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                                  ((qq[l + 96] >> 4) << 6));
            }
        }
    }
}

int ls_quantize_row_ref(ls_type t, const float *x, void *dst, int64_t k) {
    const ls_type_traits *tr = ls_type_get(t);
    if (!tr || k < 0 || k % tr->blck != 0) return -1;
    const int64_t nb = k / tr->blck;
    switch (t) {
    case LS_TYPE_F32: memcpy(dst, x, (size_t)k * sizeof(float)); return 0;
    case LS_TYPE_F16:
        for (int64_t i = 0; i < k; i++) ((uint16_t *)dst)[i] = ls_f32_to_f16(x[i]);
        return 0;
    case LS_TYPE_BF16:
        for (int64_t i = 0; i < k; i++) ((uint16_t *)dst)[i] = qr_f32_to_bf16(x[i]);
        return 0;
    case LS_TYPE_Q4_0: qr_q4_0(x, dst, nb); return 0;
    case LS_TYPE_Q4_1: qr_q4_1(x, dst, nb); return 0;
    case LS_TYPE_Q5_0: qr_q5_0(x, dst, nb); return 0;
    case LS_TYPE_Q5_1: qr_q5_1(x, dst, nb); return 0;
    case LS_TYPE_Q8_0: qr_q8_0(x, dst, nb); return 0;
    case LS_TYPE_Q4_K: qr_q4_k(x, dst, nb); return 0;
    case LS_TYPE_Q5_K: qr_q5_k(x, dst, nb); return 0;
    case LS_TYPE_Q6_K: qr_q6_k(x, dst, nb); return 0;
    case LS_TYPE_Q8_K: ls_quantize_act_row(LS_TYPE_Q8_K, x, dst, k); return 0;
    default: return -1;
    }
}

/* ---- MLX affine (docs/gemma.md 6.4): mlx's CPU quantizer (backend/cpu/quantized.cpp) step for
 * step in float, so for float inputs the codes, scales and biases equal mx.quantize's
 * (tests check that against tools/gen_mlx_quant_golden.py's output). */
int ls_mlx_affine_quantize_ref(const float *src, int64_t rows, int64_t cols, int32_t bits, int32_t group,
                               ls_type sb_type, uint8_t *q, void *scales, void *biases) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8) return -1;
    if (group != 32 && group != 64 && group != 128) return -1;
    if (sb_type != LS_TYPE_F32 && sb_type != LS_TYPE_F16 && sb_type != LS_TYPE_BF16) return -1;
    if (rows < 0 || cols <= 0 || cols % group != 0) return -1;
    const float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    const size_t row_bytes = (size_t)(cols * bits / 8);
    const int64_t ng = cols / group;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *qr = q + (size_t)r * row_bytes;
        memset(qr, 0, row_bytes);
        for (int64_t g = 0; g < ng; g++) {
            const float *w = src + r * cols + g * group;
            float w_min = INFINITY, w_max = -INFINITY;
            for (int j = 0; j < group; j++) {
                w_max = w_max < w[j] ? w[j] : w_max; /* std::max / std::min argument order */
                w_min = w[j] < w_min ? w[j] : w_min;
            }
            const int mask = fabsf(w_min) > fabsf(w_max);
            const float range = (w_max - w_min) / n_bins;
            float scale = range < eps ? eps : range;
            scale = mask ? scale : -scale;
            const float edge = mask ? w_min : w_max;
            const float q0 = rintf(edge / scale);
            float bias = 0.0f;
            if (q0 != 0.0f) {
                scale = edge / q0;
                bias = edge;
            }
            for (int j = 0; j < group; j++) {
                float v = rintf((w[j] - bias) / scale);
                v = v < 0.0f ? 0.0f : v;
                v = n_bins < v ? n_bins : v;
                const uint64_t pos = (uint64_t)(g * group + j) * (uint64_t)bits;
                const uint32_t code = (uint32_t)v << (pos & 7); /* at most 15 bits */
                qr[pos >> 3] |= (uint8_t)code;
                if ((pos & 7) + (uint64_t)bits > 8) qr[(pos >> 3) + 1] |= (uint8_t)(code >> 8);
            }
            const int64_t i = r * ng + g;
            if (sb_type == LS_TYPE_F32) {
                memcpy((uint8_t *)scales + 4 * i, &scale, 4);
                memcpy((uint8_t *)biases + 4 * i, &bias, 4);
            } else {
                const uint16_t hs = sb_type == LS_TYPE_F16 ? ls_f32_to_f16(scale) : qr_f32_to_bf16(scale);
                const uint16_t hb = sb_type == LS_TYPE_F16 ? ls_f32_to_f16(bias) : qr_f32_to_bf16(bias);
                memcpy((uint8_t *)scales + 2 * i, &hs, 2);
                memcpy((uint8_t *)biases + 2 * i, &hb, 2);
            }
        }
    }
    return 0;
}
