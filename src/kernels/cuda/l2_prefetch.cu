/* Weights pulled into the L2 cache ahead of the matmul that reads them (docs/cuda.md 2c).
 *
 * Why: between two matmuls of a decode step run a layer's short serial kernels (norms,
 * rope, attention, gelu), and while they run the GPU's memory bus idles: a 31B-geometry
 * step streams its weights at ~68% of the copy rate, and with those kernels skipped at
 * ~79% (docs/benchmarks.md). A recorded step can use that time: when a matmul finishes, a
 * small grid on a side branch of the step's graph asks the memory system to pull the head
 * of the next matmul's weights into L2 (Hopper's bulk prefetch: one instruction a chunk, no
 * data brought into the SM), so the next matmul's first blocks read from L2 while the rest
 * streams from memory.
 *
 * A prefetch is a hint: it reads only weights (constant for the model's lifetime), writes
 * nothing, and no kernel waits for it, so no result and no bit depends on it. */
#include <cuda_runtime.h>

#include <atomic>

#include "kernels/cuda/cuda_ops.h"

namespace {

std::atomic<long> g_launches{0}, g_nodes{0}, g_deps{0}, g_ranges{0}; /* ls_cuda_l2_prefetch_stats */

constexpr uint32_t kChunk = 16 * 1024; /* bytes one bulk prefetch asks for */
constexpr int kThreads = 32;
constexpr int kMaxBlocks = 264; /* two an SM on an H200: the requests spread over the SMs */

struct Ranges {
    const char *p[LS_CUDA_PF_MAX_RANGES];
    uint32_t bytes[LS_CUDA_PF_MAX_RANGES];     /* multiples of 16, p 16-byte aligned */
    uint32_t first[LS_CUDA_PF_MAX_RANGES + 1]; /* the chunk index each range starts at; first[n] = all */
    int n;
};

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(Ranges r) {
    const uint32_t stride = gridDim.x * kThreads;
    int k = 0;
    for (uint32_t j = blockIdx.x * kThreads + threadIdx.x; j < r.first[r.n]; j += stride) {
        while (j >= r.first[k + 1]) k++; /* j only grows: the range index too */
        const uint32_t off = (j - r.first[k]) * kChunk;
        const uint32_t len = r.bytes[k] - off < kChunk ? r.bytes[k] - off : kChunk;
        const size_t a = __cvta_generic_to_global(r.p[k] + off);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(len) : "memory");
#else
        for (uint32_t o = 0; o < len; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + o));
#endif
    }
}

/* The kernel's arguments and grid for the ranges; false when there is nothing to ask for. */
bool plan(const ls_cuda_pf_range *ranges, int n, Ranges *r, unsigned *blocks) {
    *r = {};
    uint32_t chunks = 0;
    for (int i = 0; i < n && r->n < LS_CUDA_PF_MAX_RANGES; i++) {
        /* whole 16-byte units inside the range (the instruction's alignment rule) */
        const uintptr_t b = ((uintptr_t)ranges[i].p + 15) & ~(uintptr_t)15;
        const uintptr_t e = ((uintptr_t)ranges[i].p + ranges[i].bytes) & ~(uintptr_t)15;
        if (!ranges[i].p || e <= b || e - b > 0xffff0000u) continue;
        r->p[r->n] = (const char *)b;
        r->bytes[r->n] = (uint32_t)(e - b);
        r->first[r->n] = chunks;
        chunks += (r->bytes[r->n] + kChunk - 1) / kChunk;
        r->n++;
    }
    r->first[r->n] = chunks;
    const uint32_t want = (chunks + kThreads - 1) / kThreads;
    *blocks = want < kMaxBlocks ? want : kMaxBlocks;
    return chunks > 0;
}

} // namespace

void ls_cuda_l2_prefetch(cudaStream_t st, const ls_cuda_pf_range *ranges, int n) {
    Ranges r;
    unsigned blocks;
    if (!plan(ranges, n, &r, &blocks)) return;
    l2_prefetch_kernel<<<blocks, kThreads, 0, st>>>(r);
    LSC_CHECK_LAUNCH();
    g_launches.fetch_add(1, std::memory_order_relaxed);
}

bool ls_cuda_l2_prefetch_node(cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps, const ls_cuda_pf_range *ranges,
                              int n) {
    Ranges r;
    unsigned blocks;
    if (!plan(ranges, n, &r, &blocks)) return true;
    void *args[] = {&r};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)l2_prefetch_kernel;
    kp.gridDim = dim3(blocks);
    kp.blockDim = dim3(kThreads);
    kp.kernelParams = args;
    cudaGraphNode_t node;
    if (cudaGraphAddKernelNode(&node, g, deps, ndeps, &kp) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    g_nodes.fetch_add(1, std::memory_order_relaxed);
    g_deps.fetch_add((long)ndeps, std::memory_order_relaxed);
    g_ranges.fetch_add(r.n, std::memory_order_relaxed);
    return true;
}

ls_cuda_pf_stats ls_cuda_l2_prefetch_stats(void) {
    ls_cuda_pf_stats s;
    s.launches = g_launches.load(std::memory_order_relaxed);
    s.nodes = g_nodes.load(std::memory_order_relaxed);
    s.deps = g_deps.load(std::memory_order_relaxed);
    s.ranges = g_ranges.load(std::memory_order_relaxed);
    return s;
}
