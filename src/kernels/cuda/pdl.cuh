/* Programmatic dependent launch for the kernels of a decode step (docs/cuda.md 2b).
 *
 * Why: a decode step of a small model is ~200 short kernels, and between two dependent
 * kernels of a graph the GPU idles ~1.7 us (H200, ncu vs the step time) while the next
 * grid is launched. A kernel launched with ls::pdl::launch may be scheduled while its
 * predecessor still runs; it calls ls::pdl::enter() before anything else, which waits
 * until every earlier kernel of the stream has completed and its memory is visible
 * (griddepcontrol.wait), then lets the next kernel launch early (launch_dependents). So
 * nothing is read or written before the predecessors are done: the results, and the bits,
 * are those of ordinary launches. One exception, which changes nothing either: weights
 * (uploaded once at load, before any step is launched, and never written by a kernel) may
 * be read before enter(); mmq.cu, mmq_small.cu and mmq_narrow.cu request their first
 * weights there, rowwise.cu's one-row add_rmsnorm its norm weights. The rule: a kernel
 * launched through ls::pdl::launch must call enter() before it touches anything but
 * weights (such a kernel may also be launched normally: the wait is then a no-op).
 * ls_cuda_pdl_on 0 (LS_CUDA_OFF_PDL, set by the backend at creation) launches normally
 * (A/B runs). */
#ifndef LS_KERNELS_CUDA_PDL_CUH
#define LS_KERNELS_CUDA_PDL_CUH

#include <utility>

#include <cuda_runtime.h>

/* backend_cuda.cu: nonzero (the default) launches with the attribute */
extern "C" int ls_cuda_pdl_on;

namespace ls::pdl {
namespace { /* internal linkage: each kernel file has its own copies, no exported symbol */

__device__ __forceinline__ void enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, st>>>(args...), allowed to start before its predecessor ends. */
template <typename... K, typename... A>
cudaError_t launch(void (*kernel)(K...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = ls_cuda_pdl_on ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

} // namespace
} // namespace ls::pdl

#endif
