/* Element-wise multiply-add kernels for attention's value accumulation:
 * out[d] = fmaf(w, v[d], out[d]). Each element is one fused op, so there is no reduction
 * order to keep and the AVX2 version is bit-identical to the scalar one. */
#ifndef LS_KERNELS_CPU_AXPY_H
#define LS_KERNELS_CPU_AXPY_H

#include <stdint.h>

void ls_axpy_f16(float *out, float w, const uint16_t *v, int64_t n);
void ls_axpy_f16_scalar(float *out, float w, const uint16_t *v, int64_t n);
void ls_axpy_f16_avx2(float *out, float w, const uint16_t *v, int64_t n);

#endif
