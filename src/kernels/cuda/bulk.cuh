/* Tensor-map copies from global into shared memory through the copy engine (sm_90: TMA,
 * cp.async.bulk.tensor), completed on an mbarrier that counts the bytes. One instruction moves
 * a whole 2-D box (e.g. 16 weight rows x 128 bytes), so a warp can keep several rounds of a
 * matmul's weights and activations in flight without registers or per-16-byte instructions
 * (mmq_narrow.cu, docs/cuda.md section 2a). Compiled for sm_90 and later only; callers check
 * the device (ls::bulk::device_ok) before launching a kernel that uses them. */
#ifndef LS_KERNELS_CUDA_BULK_CUH
#define LS_KERNELS_CUDA_BULK_CUH

#include <stdint.h>

#include <cuda_runtime.h>

namespace ls::bulk {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LS_BULK_DEVICE 1
#endif

/* mbarrier at shared address bar expecting `count` arrivals a phase */
__device__ __forceinline__ void bar_init(uint32_t bar, uint32_t count) {
#ifdef LS_BULK_DEVICE
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
/* makes initialized barriers visible to the copy engine (the async proxy) */
__device__ __forceinline__ void fence_init() {
#ifdef LS_BULK_DEVICE
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
/* this thread's earlier shared-memory reads are ordered before later bulk writes to them */
__device__ __forceinline__ void fence_reads() {
#ifdef LS_BULK_DEVICE
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
/* one arrival on bar, announcing `bytes` to come by bulk copies in this phase */
__device__ __forceinline__ void expect(uint32_t bar, uint32_t bytes) {
#ifdef LS_BULK_DEVICE
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
/* A 2-D box of tensor map tm (a __grid_constant__ kernel parameter) at element coordinates
 * (x, y) to shared address dst, completing on bar with the box's full byte count (elements
 * outside the tensor arrive as zeros). */
__device__ __forceinline__ void copy2d(uint32_t dst, const void *tm, int x, int y, uint32_t bar) {
#ifdef LS_BULK_DEVICE
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(tm)), "r"(x), "r"(y), "r"(bar)
                 : "memory");
#else
    (void)dst, (void)tm, (void)x, (void)y, (void)bar;
    __trap();
#endif
}
/* until bar's phase of the given parity has completed (its bytes are visible to this thread) */
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
#ifdef LS_BULK_DEVICE
    asm volatile("{\n\t.reg .pred p;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra WAIT_%=;\n}" ::"r"(bar),
                 "r"(parity)
                 : "memory");
#endif
}

/* The current device runs bulk copies (compute capability 9.0 or later). */
inline bool device_ok() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return major >= 9;
}

} // namespace ls::bulk

#endif
