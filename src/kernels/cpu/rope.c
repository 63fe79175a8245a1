/* RoPE with a rotated-pairs count (backend.h rope_pairs; docs/gemma.md 3.4). Scalar on purpose:
 * it is a tiny share of the work, and one code path means one set of bits on every ISA. */
#include <math.h>

#include "core/log.h"
#include "kernels/cpu/cpu_kernels.h"

void ls_rope_pairs_ref(float *x, int64_t m, int32_t n_heads, int32_t hd, int32_t n_pairs, const int32_t *pos,
                       float theta_base, float freq_scale) {
    int32_t half = hd / 2;
    float cs[512], sn[512], invf[512];
    LS_ASSERT(half <= 512 && n_pairs >= 0 && n_pairs <= half);
    /* Inverse frequencies as the references build them in float32: theta^(-2j/hd), then
     * scaled (HF linear scaling divides inv_freq by the factor). Depend on j only. */
    for (int32_t j = 0; j < n_pairs; j++) invf[j] = (float)pow((double)theta_base, -2.0 * j / (double)hd) * freq_scale;
    for (int64_t r = 0; r < m; r++) {
        for (int32_t j = 0; j < n_pairs; j++) {
            double ang = (double)pos[r] * (double)invf[j];
            cs[j] = (float)cos(ang);
            sn[j] = (float)sin(ang);
        }
        for (int32_t h = 0; h < n_heads; h++) {
            float *v = x + (r * n_heads + h) * (int64_t)hd;
            for (int32_t j = 0; j < n_pairs; j++) {
                float a = v[j], b = v[j + half];
                v[j] = a * cs[j] - b * sn[j];
                v[j + half] = b * cs[j] + a * sn[j];
            }
        }
    }
}
