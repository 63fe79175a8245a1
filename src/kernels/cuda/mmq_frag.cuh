/* The int8 tensor-core pieces shared by the integer path's two mma kernels (mmq_mma.cu:
 * tiles for large calls; mmq_small.cu: calls of up to 8 rows): one m16n8k32 product and
 * the per-thread fragments of a weight block and an activation block. The K order inside
 * a 32-element block: thread t4 = lane & 3 holds the block's plane words 2 t4 and 2 t4 + 1
 * (8 consecutive plane bytes) as its k-slices 4 t4 and 16 + 4 t4, for the weight codes (A)
 * and the activation planes (B) alike; any common permutation gives the same exact sum.
 * docs/cuda.md section 2a. */
#ifndef LS_KERNELS_CUDA_MMQ_FRAG_CUH
#define LS_KERNELS_CUDA_MMQ_FRAG_CUH

#include <stdint.h>

#include <cuda_runtime.h>

namespace ls::mmq {

/* C = A B over one m16n8k32 tile, C starting at 0; A unsigned or signed bytes. Not volatile:
 * a pure function of its operands, which the scheduler may move among the loads. */
template <bool AU>
__device__ __forceinline__ void mma_k32(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    if (AU) {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %10, %10, %10};"
                     : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
    } else {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %10, %10, %10};"
                     : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
    }
}

/* One weight row's share of one 32-element block for thread t4: code words lo (plane word
 * 2 t4) and hi (2 t4 + 1), and the block's two f32 factors (per type: scale and bias,
 * scale and min, or the two Q6_K half scales). */
struct WBlk {
    uint32_t lo, hi;
    float a, b;
};

/* One activation row's share of one block for thread t4: plane words 2 t4, 2 t4 + 1 of h
 * and of l (B operands, this thread's column g), and the metadata of the two output
 * columns the thread accumulates. */
struct XFrag {
    uint2 h, l;
};

} // namespace ls::mmq

#endif
