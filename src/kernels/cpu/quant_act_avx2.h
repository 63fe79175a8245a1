/* AVX2 twins of quant_act.c's activation quantizers (quant_act_avx2.c): the same bytes. */
#ifndef LS_KERNELS_CPU_QUANT_ACT_AVX2_H
#define LS_KERNELS_CPU_QUANT_ACT_AVX2_H

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/types.h"

void ls_act_q8_0_block_avx2(const float *x, ls_block_q8_0 *y); /* one 32-element block */
void ls_act_q8_k_avx2(const float *x, ls_block_q8_k *y, int64_t k);
void ls_act_q8v_block_avx2(const float *x, ls_act_q8v_block *o); /* one 32-element block */

#endif
