/* Scalar reference and dispatch for axpy.h. */
#include "kernels/cpu/axpy.h"

#include <math.h>

#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"

void ls_axpy_f16_scalar(float *out, float w, const uint16_t *v, int64_t n) {
    for (int64_t d = 0; d < n; d++) out[d] = fmaf(w, ls_f16_to_f32(v[d]), out[d]);
}

void ls_axpy_f16(float *out, float w, const uint16_t *v, int64_t n) {
    if (ls_cpu_isa() >= LS_ISA_AVX2)
        ls_axpy_f16_avx2(out, w, v, n);
    else
        ls_axpy_f16_scalar(out, w, v, n);
}
