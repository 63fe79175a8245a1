/* Activation quantization, one row at a time (docs/speculative.md section 2: per row, same
 * block size, so a row's bytes never depend on the batch it travels in).
 *
 * Semantics follow what llama.cpp's CPU backend runs on an AVX2 machine, because our
 * logits are compared with llama.cpp's:
 *   Q8_0 (x86 quantize_row_q8_0): amax = max|x|; d = amax / 127; id = amax ? 127 / amax : 0;
 *        q = round-half-even(x * id); d stored as f16 (round-to-nearest-even).
 *   Q8_K (quantize_row_q8_K_ref, which x86 uses): max = the signed value of largest
 *        magnitude (first one on ties); iscale = -127 / max; q = min(127, nearest_int(iscale
 *        * x)); d = 1 / iscale (float); bsums[j] = sum of q over each 16 elements.
 * One scalar implementation serves every ISA, so scalar and AVX2 dot paths see identical
 * activation bytes. All values land in [-127, 127], which the AVX2 dot kernels rely on
 * (their sign trick and maddubs never saturate in that range). */
#include <math.h>
#include <string.h>

#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_act_avx2.h"

/* Round to nearest, ties to even, for |v| < 2^22: llama.cpp's nearest_int trick. Adding
 * 1.5 * 2^23 pushes the fraction out of the mantissa with the FPU's default rounding. */
static inline int act_nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static void act_quantize_q8_0(ls_isa isa, const float *x, ls_block_q8_0 *y, int64_t k) {
    if (isa >= LS_ISA_AVX2) { /* the same bytes (quant_act_avx2.c) */
        for (int64_t b = 0; b < k / LS_QK8_0; b++) ls_act_q8_0_block_avx2(x + b * LS_QK8_0, &y[b]);
        return;
    }
    for (int64_t b = 0; b < k / LS_QK8_0; b++, x += LS_QK8_0) {
        float amax = 0.0f;
        /* == fmaxf(amax, fabsf(x[j])) for every input (a NaN x is skipped either way, amax
         * never becomes NaN or -0), but inlined: fmaxf is a libm call at -O2 */
        for (int j = 0; j < LS_QK8_0; j++) {
            const float ax = fabsf(x[j]);
            amax = ax > amax ? ax : amax;
        }
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[b].d = ls_f32_to_f16(d);
        /* |x * id| <= 127 up to one rounding, so q stays within [-127, 127] */
        for (int j = 0; j < LS_QK8_0; j++) y[b].qs[j] = (int8_t)act_nearest_int(x[j] * id);
    }
}

static void act_quantize_q8_k(ls_isa isa, const float *x, ls_block_q8_k *y, int64_t k) {
    if (isa >= LS_ISA_AVX2) {
        ls_act_q8_k_avx2(x, y, k);
        return;
    }
    for (int64_t b = 0; b < k / LS_QK_K; b++, x += LS_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < LS_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            /* llama.cpp leaves bsums untouched here; zero them so the row is deterministic */
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < LS_QK_K; j++) {
            const int v = act_nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < LS_QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].qs[j * 16 + i];
            y[b].bsums[j] = (int16_t)sum;
        }
        y[b].d = 1.0f / iscale;
    }
}

void ls_quantize_act_row_isa(ls_isa isa, ls_type act_type, const float *x, void *dst, int64_t k) {
    if (isa >= LS_ISA_AVX2 && ls_cpu_isa_hw() < LS_ISA_AVX2) isa = LS_ISA_SCALAR; /* never fault */
    switch (act_type) {
    case LS_TYPE_Q8_0: act_quantize_q8_0(isa, x, dst, k); break;
    case LS_TYPE_Q8_K: act_quantize_q8_k(isa, x, dst, k); break;
    case LS_TYPE_F32: memcpy(dst, x, (size_t)k * sizeof(float)); break;
    default: break; /* not an activation format: callers only pass traits' act_type */
    }
}

void ls_quantize_act_row(ls_type act_type, const float *x, void *dst, int64_t k) {
    ls_quantize_act_row_isa(ls_cpu_isa(), act_type, x, dst, k);
}

_Static_assert(sizeof(ls_act_q8v_block) == 192, "q8v block: six 32-byte vectors");

size_t ls_act_q8v_row_size(int64_t k) {
    return (size_t)(k / LS_QK8_0) * sizeof(ls_act_q8v_block);
}

/* Each block is quantized exactly as act_quantize_q8_0 does (blocks are independent), then
 * rearranged (tile_avx512.c explains the layout). */
void ls_quantize_act_row_q8v(const float *x, void *dst, int64_t k) {
    ls_quantize_act_row_q8v_isa(ls_cpu_isa(), x, dst, k);
}

void ls_quantize_act_row_q8v_isa(ls_isa isa, const float *x, void *dst, int64_t k) {
    ls_act_q8v_block *out = dst;
    if (isa >= LS_ISA_AVX2 && ls_cpu_isa_hw() >= LS_ISA_AVX2) {
        for (int64_t b = 0; b < k / LS_QK8_0; b++) ls_act_q8v_block_avx2(x + b * LS_QK8_0, &out[b]);
        return;
    }
    for (int64_t b = 0; b < k / LS_QK8_0; b++) {
        ls_block_q8_0 q;
        act_quantize_q8_0(LS_ISA_SCALAR, x + b * LS_QK8_0, &q, LS_QK8_0);
        ls_act_q8v_block *o = &out[b];
        for (int g = 0; g < 4; g++)
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < 4; r++) memcpy(&o->q[g][(h * 4 + r) * 4], &q.qs[16 * h + 4 * g], 4);
        for (int h = 0; h < 2; h++) {
            int32_t s = 0;
            for (int j = 0; j < 16; j++) s += q.qs[16 * h + j];
            for (int r = 0; r < 4; r++) o->neg_sum[h * 4 + r] = -s;
        }
        o->d = ls_f16_to_f32(q.d);
        memset(o->pad, 0, sizeof o->pad);
    }
}
