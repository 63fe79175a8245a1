/* AVX2+FMA+F16C axpy; bit-identical to ls_axpy_f16_scalar (one fused op per element). */
#include <immintrin.h>
#include <math.h>

#include "core/f16.h"
#include "kernels/cpu/axpy.h"

void ls_axpy_f16_avx2(float *out, float w, const uint16_t *v, int64_t n) {
    __m256 vw = _mm256_set1_ps(w);
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d)));
        _mm256_storeu_ps(out + d, _mm256_fmadd_ps(vw, vv, _mm256_loadu_ps(out + d)));
    }
    for (; d < n; d++) out[d] = fmaf(w, ls_f16_to_f32(v[d]), out[d]);
}
