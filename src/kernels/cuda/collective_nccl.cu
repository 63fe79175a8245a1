/* The NCCL collective (kernels/collective.h) over CUDA backend instances.
 *
 * NCCL is loaded at run time with dlopen("libnccl.so.2") and the handful of entry points
 * below: the engine builds wherever nvcc is (CI), links no NCCL, and a machine without it
 * fails only when tensor parallelism is asked for, with a message saying what to install.
 * The declarations come from nccl.h when the toolkit has it (then the pointer types are
 * checked against it at compile time); otherwise from the stable NCCL 2 ABI spelled here.
 *
 * Exact all-reduce (docs/design.md, "Tensor parallelism"): ncclAllGather of the
 * rank's [m][d] partial into gather [n][m][d], then rank_sum adds each element over ranks
 * in rank order 0..n-1, starting from rank 0's value; every rank computes the same bits.
 * Both are enqueued on the stream the rank's ops run on (ls_cuda_on_queue), in order. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <mutex>
#include <new>
#include <type_traits>

#if !defined(LS_NCCL_NO_HEADER) && __has_include(<nccl.h>)
#include <nccl.h>
#define LS_NCCL_HEADER 1
#else
typedef struct ncclComm *ncclComm_t;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclFloat32 = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
#endif

/* core/log.h is C11 (_Noreturn); spell it the C++ way for this include (as backend_cuda.cu). */
#define _Noreturn [[noreturn]]
extern "C" {
#include "core/log.h"
}
#undef _Noreturn

#include "kernels/collective.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

typedef ncclResult_t (*CommInitAllFn)(ncclComm_t *, int, const int *);
typedef ncclResult_t (*CommDestroyFn)(ncclComm_t);
typedef ncclResult_t (*AllGatherFn)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*AllReduceFn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                    cudaStream_t);
typedef const char *(*ErrorStringFn)(ncclResult_t);
typedef ncclResult_t (*GetVersionFn)(int *);

#ifdef LS_NCCL_HEADER
static_assert(std::is_same<decltype(&ncclCommInitAll), CommInitAllFn>::value, "ncclCommInitAll");
static_assert(std::is_same<decltype(&ncclCommDestroy), CommDestroyFn>::value, "ncclCommDestroy");
static_assert(std::is_same<decltype(&ncclAllGather), AllGatherFn>::value, "ncclAllGather");
static_assert(std::is_same<decltype(&ncclAllReduce), AllReduceFn>::value, "ncclAllReduce");
static_assert(std::is_same<decltype(&ncclGetErrorString), ErrorStringFn>::value, "ncclGetErrorString");
static_assert(std::is_same<decltype(&ncclGetVersion), GetVersionFn>::value, "ncclGetVersion");
#endif

struct Nccl {
    void *lib;
    CommInitAllFn comm_init_all;
    CommDestroyFn comm_destroy;
    AllGatherFn all_gather;
    AllReduceFn all_reduce;
    ErrorStringFn error_string;
    GetVersionFn get_version;
    char err[512];
};

Nccl g_nccl;
std::once_flag g_nccl_once;

/* Loads libnccl.so.2 once per process; NULL with the reason in g_nccl.err when it cannot. */
const Nccl *nccl_load(void) {
    std::call_once(g_nccl_once, [] {
        g_nccl.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!g_nccl.lib) {
            snprintf(g_nccl.err, sizeof g_nccl.err,
                     "NCCL is not installed here (dlopen libnccl.so.2: %s); install it (Debian: libnccl2; pip: "
                     "nvidia-nccl-cu13) and put its lib/ folder on LD_LIBRARY_PATH",
                     dlerror());
            return;
        }
        g_nccl.comm_init_all = (CommInitAllFn)dlsym(g_nccl.lib, "ncclCommInitAll");
        g_nccl.comm_destroy = (CommDestroyFn)dlsym(g_nccl.lib, "ncclCommDestroy");
        g_nccl.all_gather = (AllGatherFn)dlsym(g_nccl.lib, "ncclAllGather");
        g_nccl.all_reduce = (AllReduceFn)dlsym(g_nccl.lib, "ncclAllReduce");
        g_nccl.error_string = (ErrorStringFn)dlsym(g_nccl.lib, "ncclGetErrorString");
        g_nccl.get_version = (GetVersionFn)dlsym(g_nccl.lib, "ncclGetVersion");
        if (!g_nccl.comm_init_all || !g_nccl.comm_destroy || !g_nccl.all_gather || !g_nccl.all_reduce ||
            !g_nccl.error_string || !g_nccl.get_version) {
            snprintf(g_nccl.err, sizeof g_nccl.err, "libnccl.so.2 lacks an NCCL 2 entry point");
            dlclose(g_nccl.lib);
            g_nccl.lib = nullptr;
        }
    });
    return g_nccl.lib ? &g_nccl : nullptr;
}

struct NcclColl {
    ls_collective base;
    const Nccl *nccl;
    ls_backend *be[LS_MAX_RANKS];
    ncclComm_t comm[LS_MAX_RANKS];
    float *gather[LS_MAX_RANKS]; /* per rank, its backend memory: [n][max_elems] */
};

/* out[i] = g[0][i] + g[1][i] + ... + g[n-1][i], left to right (rank order). */
__global__ void rank_sum(float *out, const float *g, int n, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float acc = g[i];
        for (int r = 1; r < n; r++) acc = __fadd_rn(acc, g[(int64_t)r * count + i]);
        out[i] = acc;
    }
}

struct Call {
    NcclColl *h;
    int rank;
    float *buf;
    int64_t count;
};

void check_nccl(const Nccl *l, ncclResult_t r, const char *what) {
    if (r != ncclSuccess) LSC_FATAL("nccl: %s: %s", what, l->error_string(r));
}

void enqueue(cudaStream_t st, void *ud) {
    const Call *c = (const Call *)ud;
    NcclColl *h = c->h;
    const Nccl *l = h->nccl;
    ncclComm_t comm = h->comm[c->rank];
    if (h->base.mode == LS_REDUCE_PLAIN) {
        check_nccl(l, l->all_reduce(c->buf, c->buf, (size_t)c->count, ncclFloat32, ncclSum, comm, st), "all-reduce");
        return;
    }
    float *g = h->gather[c->rank];
    check_nccl(l, l->all_gather(c->buf, g, (size_t)c->count, ncclFloat32, comm, st), "all-gather");
    const int threads = 256;
    int64_t blocks = (c->count + threads - 1) / threads;
    if (blocks > 4096) blocks = 4096;
    rank_sum<<<(unsigned)blocks, threads, 0, st>>>(c->buf, g, h->base.n_ranks, c->count);
    LSC_CHECK_LAUNCH();
}

void nccl_all_reduce(ls_collective *base, int rank, float *buf, int64_t m, int64_t d) {
    NcclColl *h = (NcclColl *)base;
    const int64_t count = m * d;
    LSC_REQUIRE(rank >= 0 && rank < base->n_ranks && count >= 0 && count <= base->max_elems);
    if (count == 0) return;
    Call c = {h, rank, buf, count};
    ls_cuda_on_queue(h->be[rank], enqueue, &c);
}

void nccl_free(ls_collective *base) {
    NcclColl *h = (NcclColl *)base;
    if (!h) return;
    for (int r = 0; r < base->n_ranks; r++) {
        if (h->gather[r]) h->be[r]->ops->release(h->be[r], h->gather[r]);
        if (h->comm[r]) h->nccl->comm_destroy(h->comm[r]);
    }
    delete h;
}

} // namespace

extern "C" ls_collective *ls_collective_nccl_create(int n_ranks, ls_backend **be, int64_t max_elems,
                                                    ls_reduce_mode mode, char *err, size_t errlen) {
    if (n_ranks < 1 || n_ranks > LS_MAX_RANKS || max_elems < 1) {
        snprintf(err, errlen, "nccl: %d ranks (1..%d)", n_ranks, (int)LS_MAX_RANKS);
        return nullptr;
    }
    const Nccl *l = nccl_load();
    if (!l) {
        snprintf(err, errlen, "%s", g_nccl.err);
        return nullptr;
    }
    NcclColl *h = new (std::nothrow) NcclColl();
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return nullptr;
    }
    h->base = ls_collective{"nccl", n_ranks, mode, max_elems, nccl_all_reduce, nccl_free};
    h->nccl = l;
    int devs[LS_MAX_RANKS];
    for (int r = 0; r < n_ranks; r++) h->be[r] = be[r], devs[r] = r;
    ncclResult_t rc = l->comm_init_all(h->comm, n_ranks, devs);
    if (rc != ncclSuccess) {
        snprintf(err, errlen, "nccl: ncclCommInitAll over %d device(s): %s", n_ranks, l->error_string(rc));
        for (int r = 0; r < n_ranks; r++) h->comm[r] = nullptr;
        nccl_free(&h->base);
        return nullptr;
    }
    for (int r = 0; r < n_ranks; r++) {
        if (mode == LS_REDUCE_EXACT)
            h->gather[r] = (float *)be[r]->ops->alloc(be[r], sizeof(float) * (size_t)n_ranks * (size_t)max_elems);
        if (mode == LS_REDUCE_EXACT && !h->gather[r]) {
            snprintf(err, errlen, "nccl: out of device memory for the all-gather buffer (%d x %lld floats)", n_ranks,
                     (long long)max_elems);
            nccl_free(&h->base);
            return nullptr;
        }
    }
    int v = 0;
    l->get_version(&v); /* e.g. 22703 = 2.27.3 */
    LS_INFO("tensor parallel: %d rank(s) over NCCL %d.%d.%d, %s all-reduce", n_ranks, v / 10000, v / 100 % 100, v % 100,
            mode == LS_REDUCE_EXACT ? "exact (all-gather + rank-order sum)" : "plain (ncclAllReduce)");
    return &h->base;
}
