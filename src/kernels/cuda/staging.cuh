/* Shared-memory staging for the integer path's staged kernels (mmq_small.cu: calls of up to 8
 * rows; mmq_tile.cu: block tiles): cp.async copies of 16-byte pieces from global into shared
 * memory, and the loads that read a staged span back (generic pointers into shared memory;
 * a span keeps its global address modulo 16, so 2-byte-aligned fields stay 2-byte aligned).
 * docs/cuda.md section 2a. */
#ifndef LS_KERNELS_CUDA_STAGING_CUH
#define LS_KERNELS_CUDA_STAGING_CUH

#include <stdint.h>

#include <atomic>
#include <mutex>

#include <cuda_runtime.h>

namespace ls::stage {

/* ---- cp.async (sm_80+): 16 bytes global -> shared address dst, bytes past src_bytes zero-filled ---- */
__device__ __forceinline__ void cp16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp16(void *dst, const void *src, int src_bytes) {
    cp16((uint32_t)__cvta_generic_to_shared(dst), src, src_bytes);
}
/* 4 bytes global -> shared address dst (both 4-byte aligned), bytes past src_bytes zero-filled */
__device__ __forceinline__ void cp4(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ const uint8_t *down16(const uint8_t *p) {
    return reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)15);
}

/* Raise kernel k's dynamic shared-memory limit to bytes on the current device, once a device
 * (the limit is a per-device attribute; bit d of `raised` remembers device d). Returns 0 or -1. */
template <class K>
inline int smem_limit(K k, int bytes, std::atomic<unsigned> &raised) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return -1;
    if (dev < 32 && (raised.load(std::memory_order_relaxed) & (1u << dev))) return 0;
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) return -1;
    if (dev < 32) raised.fetch_or(1u << dev, std::memory_order_relaxed);
    return 0;
}

/* Let kernel k launch with `bytes` of dynamic shared memory on the current device: nothing to do
 * up to the default 48 KB; above it the attribute is raised to the largest size asked for so far
 * (have[d]: device d's), under a lock so two threads cannot lower each other's setting. -1, with
 * nothing set, when the device's per-block opt-in maximum is smaller (the caller falls back to
 * another kernel): a call sizes its own need instead of raising every kernel to a worst case
 * that a GPU with less shared memory would refuse outright. */
template <class K>
inline int smem_raise(K k, int bytes, std::atomic<int> (&have)[32]) {
    if (bytes <= 48 * 1024) return 0;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= 32) return -1;
    if (have[dev].load(std::memory_order_acquire) >= bytes) return 0;
    static std::mutex mu;
    std::lock_guard<std::mutex> lk(mu);
    const int cur = have[dev].load(std::memory_order_relaxed);
    if (cur >= bytes) return 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || bytes > optin) {
        (void)cudaGetLastError();
        return -1;
    }
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    have[dev].store(bytes, std::memory_order_release);
    return 0;
}

/* ---- loads from a staged span ---- */
__device__ __forceinline__ uint32_t lw(const uint8_t *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}
__device__ __forceinline__ uint32_t lh(const uint8_t *p) {
    return *reinterpret_cast<const uint16_t *>(p);
}
/* Vector loads at a shared-memory address (kernels that hold shared addresses as 32-bit
 * integers, for ldmatrix, and would otherwise load through generic pointers). */
__device__ __forceinline__ float2 lds_f2(uint32_t a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ uint2 lds_u2(uint32_t a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ int4 lds_i4(uint32_t a) {
    int4 v;
    asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

__device__ __forceinline__ uint32_t lds_u32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}

/* NWD words at a 2-byte aligned address (dequant.cuh's ld_a2 on generic memory); the word
 * after them may be read (a staged span's slot leaves room for it) */
template <int NWD>
__device__ __forceinline__ void la2(uint32_t *o, const uint8_t *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint8_t *b = reinterpret_cast<const uint8_t *>(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3u) * 8u;
    uint32_t v[NWD + 1];
#pragma unroll
    for (int j = 0; j < NWD; j++) v[j] = lw(b + 4 * j);
    v[NWD] = lw(b + 4 * (sh ? NWD : NWD - 1));
#pragma unroll
    for (int j = 0; j < NWD; j++) o[j] = __funnelshift_r(v[j], v[j + 1], sh);
}

} // namespace ls::stage

#endif
