/* The CUDA device kind and backend (backend.h; docs/cuda.md sections 2-3).
 *
 * Constants. map_const uploads a constant host range (weights, norm vectors) once per
 * process into its own cudaMalloc'd copy, reference counted by host base address; ops
 * receive host addresses (ls_weight data / scales / biases, rmsnorm / mul_rows `w`) and
 * translate them with dev_ptr(): any address inside a mapped range maps to its copy at the
 * same offset, NULL stays NULL, anything else is a caller bug and aborts.
 *
 * The queue. backend.h: every instance of the kind shares one op queue, ops are ordered
 * among themselves in call order, and `download` waits for everything queued before it
 * (the assistant drafter's backend reads the KV cache a session's backend wrote). So there
 * is ONE process-wide non-blocking stream, created with the first instance and destroyed
 * with the last. Launches are serialized by a mutex (a launch is microseconds), and while
 * one thread captures a step (step_begin .. step_end) other threads' calls wait for the end
 * of that capture, so their work never lands in its graph.
 *
 * Step graphs. Between step_begin(key) and step_end() the compute ops are not launched:
 * each is recorded (a closure holding its launch, with device addresses already
 * translated) and folded into a signature of everything its kernels receive as arguments
 * and launch shapes. The values that move from one decode step to the next although the
 * step is otherwise the same (the KV cache slot a step writes, the cache extent attention
 * reads) are not kernel arguments: ops write them into this instance's parameter arena
 * (pinned host memory mirrored in device memory) and the kernels read them from there.
 * step_end() looks the signature up among the instance's executable graphs (LRU of 32):
 * found, it uploads the arena and launches that graph as it is (no capture, no update: the
 * host cost of a decode step is the op calls themselves); not found, it captures the
 * recorded launches into a new graph first. The graph holds exactly the kernels the ops
 * would have launched, with the same arguments and the same parameter values, so replay
 * gives the same bits as direct launches (test-cuda.sh compares them over 700 chained
 * steps). A step is submitted in two segments (docs/cuda.md 2b): once kSegmentOps launches
 * are recorded, the next add_rmsnorm (where no recorded launch can still be merged with a
 * later op) first submits the ones before it as a graph of their own, so the GPU runs the
 * first layers while the host records the rest (a 31B decode step's ops take ~100 us of
 * host time, during which the GPU idled). With graphs off (ls_backend_graphs, read when an
 * instance is created; the CLI's --no-cuda-graphs or LOCKSTEP_CUDA_GRAPHS=0) ops are
 * launched directly.
 * Between step_begin and step_end no alloc, release, upload, download, sync, map or unmap
 * may happen (each aborts if tried).
 *
 * Errors. Every CUDA call is checked; a failure logs the CUDA error and the call and
 * aborts, except where backend.h defines a failure result (alloc -> NULL, create -> NULL,
 * map_const -> -1 when device memory runs out). */
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

/* core/log.h is C11 (_Noreturn); spell it the C++ way for this include. */
#define _Noreturn [[noreturn]]
extern "C" {
#include "core/log.h"
}
#undef _Noreturn

#include "kernels/backend.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/launch_list.h"
#include "lockstep.h"
#include "kernels/cuda/cuda_ops.h"

/* ---- errors -------------------------------------------------------------------------- */

static void vlog_error(const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    ls_log(LS_LOG_ERROR, "%s", msg);
    /* The message must not vanish with the process when logging is turned off. */
    if (ls_log_get_level() > LS_LOG_ERROR) fprintf(stderr, "%s\n", msg);
}

void ls_cuda_fatal(const char *file, int line, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_log(LS_LOG_ERROR, "cuda: %s (%s:%d)", msg, file, line);
    if (ls_log_get_level() > LS_LOG_ERROR) fprintf(stderr, "cuda: %s (%s:%d)\n", msg, file, line);
    abort();
}

/* pdl.cuh: programmatic dependent launch on (set from LS_CUDA_OFF_PDL at backend creation) */
extern "C" {
int ls_cuda_pdl_on = 1;
}

void ls_cuda_check(cudaError_t e, const char *expr, const char *file, int line) {
    if (e == cudaSuccess) return;
    ls_cuda_fatal(file, line, "%s failed: %s (%s)", expr, cudaGetErrorName(e), cudaGetErrorString(e));
}

namespace {

void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog_error(fmt, ap);
    va_end(ap);
}

/* ---- device presence ------------------------------------------------------------------ */

bool g_available = false;
std::once_flag g_available_once;

bool cu_available(void) {
    std::call_once(g_available_once, [] {
        int n = 0;
        const cudaError_t e = cudaGetDeviceCount(&n); /* no driver / no GPU: an error, not a crash */
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* clear it: later calls must not see it */
            g_available = false;
        } else {
            g_available = n > 0;
        }
    });
    return g_available;
}

char g_device_name[256] = "cuda (no device)";
std::once_flag g_device_name_once;

const char *cu_device_name(void) {
    std::call_once(g_device_name_once, [] {
        if (!cu_available()) return;
        cudaDeviceProp prop;
        LSC_CHECK(cudaGetDeviceProperties(&prop, 0));
        snprintf(g_device_name, sizeof g_device_name, "%s", prop.name);
    });
    return g_device_name;
}

std::once_flag g_init_once;

/* Process-wide device setup (before any instance, outside any capture). */
void cu_init(void) {
    std::call_once(g_init_once, [] {
        LSC_CHECK(cudaSetDevice(0));
        ls_cuda_attention_init();
    });
}

/* ---- the queue: one stream for the process ------------------------------------------- */

std::mutex g_q_mu;
std::condition_variable g_q_cv;
cudaStream_t g_stream = nullptr;
int g_stream_users = 0;
bool g_capturing = false; /* a step capture is open on g_stream */
std::thread::id g_capture_owner;

/* Held while enqueueing. Waits while another thread has a capture open, so after the
 * constructor `g_capturing` means "this thread is capturing". */
struct QueueLock {
    std::unique_lock<std::mutex> lk;
    QueueLock() : lk(g_q_mu) {
        const std::thread::id me = std::this_thread::get_id();
        g_q_cv.wait(lk, [me] { return !g_capturing || g_capture_owner == me; });
    }
    /* For calls that must not be captured (memory management, host copies). */
    void forbid_capture(const char *what) const {
        if (g_capturing) LSC_FATAL("%s between step_begin and step_end (not allowed: backend.h)", what);
    }
};

/* ---- constant ranges ------------------------------------------------------------------ */

struct ConstRange {
    uintptr_t host;
    size_t bytes;
    char *dev;
    int refs;
};

std::mutex g_reg_mu;
std::vector<ConstRange> g_ranges; /* sorted by host, pairwise disjoint */
cudaStream_t g_map_stream = nullptr;

/* The range that starts at or before h, last such (g_reg_mu held); end() if none. */
std::vector<ConstRange>::iterator range_at_or_before(uintptr_t h) {
    auto it = std::upper_bound(g_ranges.begin(), g_ranges.end(), h,
                               [](uintptr_t v, const ConstRange &r) { return v < r.host; });
    if (it == g_ranges.begin()) return g_ranges.end();
    return it - 1;
}

inline size_t span(size_t bytes) {
    return bytes ? bytes : 1;
}

/* Device address of a mapped constant host address. */
const void *dev_ptr(const void *host) {
    if (!host) return nullptr;
    const uintptr_t h = (uintptr_t)host;
    std::lock_guard<std::mutex> lk(g_reg_mu);
    auto it = range_at_or_before(h);
    if (it != g_ranges.end() && h - it->host < span(it->bytes)) return it->dev + (h - it->host);
    LSC_FATAL("host address %p is not inside any constant range mapped with map_const (%zu mapped): weights and "
              "norm vectors must be mapped before ops use them",
              host, g_ranges.size());
}

/* Existing state for [h, h + bytes) (g_reg_mu held): 1 = same base already mapped (its
 * count incremented), 0 = free to insert, -1 = conflict (err written). */
int range_claim(uintptr_t h, size_t bytes, char *err, size_t errlen) {
    auto it = range_at_or_before(h);
    if (it != g_ranges.end() && it->host == h) {
        if (it->bytes != bytes) {
            if (err) snprintf(err, errlen, "cuda map_const: %p already mapped with %zu bytes, now %zu", (void *)h,
                              it->bytes, bytes);
            return -1;
        }
        it->refs++;
        return 1;
    }
    if (it != g_ranges.end() && h - it->host < span(it->bytes)) {
        if (err) snprintf(err, errlen, "cuda map_const: [%p, +%zu) overlaps the mapped range [%p, +%zu)", (void *)h,
                          bytes, (void *)it->host, it->bytes);
        return -1;
    }
    auto next = std::upper_bound(g_ranges.begin(), g_ranges.end(), h,
                                 [](uintptr_t v, const ConstRange &r) { return v < r.host; });
    if (next != g_ranges.end() && next->host - h < span(bytes)) {
        if (err) snprintf(err, errlen, "cuda map_const: [%p, +%zu) overlaps the mapped range [%p, +%zu)", (void *)h,
                          bytes, (void *)next->host, next->bytes);
        return -1;
    }
    return 0;
}

int cu_map_const(const void *host, size_t bytes, char *err, size_t errlen) {
    if (!host) {
        if (err) snprintf(err, errlen, "cuda map_const: NULL address");
        return -1;
    }
    if (!cu_available()) {
        if (err) snprintf(err, errlen, "cuda map_const: no CUDA device");
        return -1;
    }
    cu_init();
    const uintptr_t h = (uintptr_t)host;
    {
        std::lock_guard<std::mutex> lk(g_reg_mu);
        const int c = range_claim(h, bytes, err, errlen);
        if (c != 0) return c > 0 ? 0 : -1;
        if (!g_map_stream) LSC_CHECK(cudaStreamCreateWithFlags(&g_map_stream, cudaStreamNonBlocking));
    }
    /* Upload outside the locks (gigabytes of weights must not stall other sessions), on a
     * stream of its own, complete before the range becomes visible to dev_ptr. */
    void *dev = nullptr;
    const cudaError_t e = cudaMalloc(&dev, span(bytes));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (err) snprintf(err, errlen, "cuda map_const: cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
        return -1;
    }
    if (bytes) LSC_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, g_map_stream));
    LSC_CHECK(cudaStreamSynchronize(g_map_stream));

    QueueLock q; /* cudaFree below, if another thread mapped the same range meanwhile */
    q.forbid_capture("map_const");
    std::lock_guard<std::mutex> lk(g_reg_mu);
    const int c = range_claim(h, bytes, err, errlen);
    if (c != 0) {
        LSC_CHECK(cudaFree(dev));
        return c > 0 ? 0 : -1;
    }
    ConstRange r = {h, bytes, (char *)dev, 1};
    g_ranges.insert(std::upper_bound(g_ranges.begin(), g_ranges.end(), h,
                                     [](uintptr_t v, const ConstRange &x) { return v < x.host; }),
                    r);
    return 0;
}

void cu_unmap_const(const void *host) {
    if (!host) return;
    QueueLock q;
    q.forbid_capture("unmap_const");
    char *dev = nullptr;
    {
        std::lock_guard<std::mutex> lk(g_reg_mu);
        auto it = range_at_or_before((uintptr_t)host);
        if (it == g_ranges.end() || it->host != (uintptr_t)host) {
            /* a no-op (model_device.c unmaps every range after a partial map failure) */
            LS_DEBUG("cuda: unmap_const(%p): not a mapped base, nothing to do", host);
            return;
        }
        if (--it->refs > 0) return;
        dev = it->dev;
        g_ranges.erase(it);
    }
    LSC_CHECK(cudaFree(dev)); /* waits for the device: queued ops that read it have finished */
}

/* ---- backend instances ---------------------------------------------------------------- */

std::atomic<int64_t> g_segmented_steps{0}; /* ls_cuda_step_segments */

constexpr size_t kStagingBytes = (size_t)8 << 20; /* overlapping copies, in pieces of this */
constexpr int kGraphCache = 32; /* 16 step shapes of two segments */
/* Launches recorded before a step's first segment may be submitted (see the top): enough GPU
 * work (a layer and a half of a Gemma model) to cover the host's recording of the rest. */
constexpr size_t kSegmentOps = 16;
constexpr int64_t QB_MIN = 32; /* scratch for at least one 32-element block */

struct GraphEntry {
    uint64_t sig; /* signature of the recorded step (key included) */
    cudaGraphExec_t exec;
    uint64_t last_used;
};

/* Step parameters (see the top): 16-byte slots, written on the host while ops are called,
 * uploaded in one copy before the step's graph runs. A step takes two slots per layer and
 * segment (KV slot, attention extent): 1 MiB holds 65536, e.g. 256 batched segments of a
 * 128-layer model; only the bytes used are uploaded. */
constexpr size_t kArenaBytes = (size_t)1 << 20;

struct CudaBackend {
    ls_backend base;
    cudaEvent_t done; /* upload / download completion */
    char *staging;
    float *attn_scratch;
    size_t attn_bytes;
    void *mm_scratch; /* quantized activations of the integer matmul (mmq.cu) */
    size_t mm_bytes;
    /* Activation reuse (cu_matmul): op_seq counts every operation that may touch device
     * memory; mm_last is the input the scratch holds after the last integer matmul, valid
     * while no other operation came after it. */
    uint64_t op_seq;
    struct {
        const float *x;
        int64_t m, k;
        int layout;
        uint64_t seq;
    } mm_last;
    /* Launch merging while a step is recorded (cu_matmul; same bits, fewer launches):
     * fuse: the last op that can quantize its own output for the integer matmul that reads
     * it next (add_rmsnorm with xn, gelu_mul, attention), with the cell its recorded launch reads at
     * replay time (-1: plain; else the activation layout to write into mm_scratch);
     * grp: the last recorded integer matmul, which consecutive matmuls on the same input
     * join (one grouped launch). Both are valid while seq == op_seq (nothing came after). */
    struct {
        uint64_t seq;
        const float *out;
        int64_t total;
        std::shared_ptr<int> layout;
        bool kq; /* the producer can write the K-quant format too (layout 2: add_rmsnorm, gelu_mul) */
    } fuse;
    struct MmGroup {
        ls_weight d[3];
        float *y[3];
        int n;
    };
    std::shared_ptr<MmGroup> grp;
    uint64_t grp_seq;
    /* norm_rope of q then of k (cu_norm_rope): the second joins the first's launch, then the
     * value norm of v (cu_rmsnorm without weight, rows of hd) and the kv_store2 of the k heads
     * and v (cu_kv_store2) that follow, each when nothing came between */
    struct RopePair {
        float *x2 = nullptr;
        const float *w2 = nullptr;
        int32_t nh2 = 0;
        int n = 1;
        float *x3 = nullptr; /* the normed v, or NULL */
        int32_t nh3 = 0;
        void *const *kv = nullptr; /* the kv_store2, or NULL */
        bool f32 = false;
        const float *v = nullptr;
        int64_t nv = 0;
    };
    struct {
        uint64_t seq;
        std::shared_ptr<RopePair> g;
        int64_t m;
        int32_t hd;
        float eps;
        int32_t n_pairs;
        const int32_t *pos;
        float theta, fs;
    } nrope;
    bool merge;   /* the launch merging above; LS_CUDA_OFF_MERGE turns it off (A/B runs) */
    bool segment; /* steps submitted in two segments; LS_CUDA_OFF_SEGMENT turns it off (A/B runs) */
    bool graphs;  /* ls_backend_graphs() at creation */
    bool in_step; /* between step_begin and step_end */
    int64_t step_key;
    /* the step being recorded (graphs on) */
    bool recording;
    ls::cuda::LaunchList rec;
    uint64_t sig;
    /* parameter arena: host (pinned) and device copies, bytes used */
    uint8_t *h_arena, *d_arena;
    size_t arena_used;
    /* segments of the step being recorded: submitted so far, the arena offset where the open
     * one's parameters start, and whether every submitted one replayed a graph (timing) */
    int seg_n;
    size_t seg_arena;
    bool seg_replays;
    GraphEntry cache[kGraphCache];
    int n_cache;
    uint64_t tick;
    /* step timing (ls_backend_step_timing, read once a step at step_begin: t_on): events around
     * the last replayed step's upload and graph, its host nanoseconds, and whether it awaits
     * step_times_harvest */
    cudaEvent_t t0, t1;
    bool t_on;
    std::chrono::steady_clock::time_point t_begin;
    int64_t t_host_ns;
    bool t_pending;
};

CudaBackend *impl_of(ls_backend *be) {
    return (CudaBackend *)be->impl;
}

void step_times_harvest(CudaBackend *c); /* step graphs, below */
void maybe_submit_segment(CudaBackend *c);

void no_step(CudaBackend *c, const char *what) {
    if (c->in_step) LSC_FATAL("%s between step_begin and step_end (not allowed: backend.h)", what);
}

/* ---- recording and step parameters ---- */

/* One field into a signature: its bytes as one word, multiplied in and folded down (a
 * decode step mixes ~700 ops of ~12 fields before its graph may launch, while the GPU
 * waits: byte-wise FNV-1a over that many fields took ~60 us on the project machine's CPU,
 * this ~6). */
uint64_t mix_word(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 31);
}
template <class T>
uint64_t mix_v(uint64_t h, const T &v) {
    static_assert(sizeof v <= 8, "a signature field is a scalar or a pointer");
    uint64_t w = 0;
    memcpy(&w, &v, sizeof v);
    return mix_word(h, w);
}

/* Signatures mix fields one by one (never a whole struct: its padding bytes are not values). */
uint64_t mix_weight(uint64_t h, const ls_weight &w) {
    h = mix_v(mix_v(mix_v(mix_v(h, (int)w.type), w.data), w.rows), w.cols);
    h = mix_v(mix_v(mix_v(mix_v(h, w.row_bytes), w.scales), w.biases), (int)w.sb_type);
    return mix_v(mix_v(mix_v(h, w.bits), w.group), w.in_backend);
}
uint64_t mix_attn(uint64_t h, const ls_attn_args &a) { /* all but the cache extent */
    h = mix_v(mix_v(mix_v(mix_v(h, a.q), a.out), a.k), a.v);
    h = mix_v(mix_v(mix_v(mix_v(mix_v(h, a.kv_f32), a.strictly_before), a.m), a.n_head), a.n_kv);
    return mix_v(mix_v(mix_v(mix_v(h, a.hd), a.q_pos), a.window), a.scale);
}

/* A 16-byte-aligned slot of `bytes` for values kernels read at run time; `host` is filled by
 * the caller. While recording, slots accumulate and are uploaded at step_end. Outside a
 * step the caller uploads right away (upload_slot); the arena then wraps after a sync. */
struct Slot {
    void *host;
    void *dev;
    size_t bytes;
};
Slot param_slot(CudaBackend *c, size_t bytes) {
    const size_t b = (bytes + 15) & ~(size_t)15;
    if (c->arena_used + b > kArenaBytes) {
        if (c->recording) LSC_FATAL("step parameters: more than %zu bytes in one step", kArenaBytes);
        QueueLock q; /* no capture is open while it is held */
        LSC_CHECK(cudaStreamSynchronize(g_stream)); /* earlier uploads from the host slots are done */
        c->arena_used = 0;
    }
    Slot s = {c->h_arena + c->arena_used, c->d_arena + c->arena_used, bytes};
    c->arena_used += b;
    return s;
}
/* Outside a recorded step: the slot's bytes go to the device before the launch that reads
 * them (stream order). */
void upload_slot(const Slot &s) {
    LSC_CHECK(cudaMemcpyAsync(s.dev, s.host, s.bytes, cudaMemcpyHostToDevice, g_stream));
}

/* Runs an op's launch now, or records it (and its signature) while a step is recorded. */
template <class F>
void run_op(CudaBackend *c, uint64_t op_sig, F &&launch) {
    c->op_seq++;
    if (c->recording) {
        c->sig = mix_v(c->sig, op_sig);
        c->rec.push(std::forward<F>(launch));
        return;
    }
    QueueLock q;
    launch();
}

/* ---- memory ---- */

void *cu_alloc(ls_backend *be, size_t bytes) {
    no_step(impl_of(be), "alloc");
    QueueLock q;
    q.forbid_capture("alloc");
    void *p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1); /* 256-byte aligned */
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        log_error("cuda: alloc of %zu bytes: out of device memory", bytes);
        return nullptr;
    }
    LSC_CHECK(e);
    return p;
}

void cu_release(ls_backend *be, void *buf) {
    if (!buf) return;
    no_step(impl_of(be), "release");
    QueueLock q;
    q.forbid_capture("release");
    LSC_CHECK(cudaFree(buf)); /* implicitly waits for queued work */
}

/* backend.h host_alloc: portable, so every device's copies (tensor-parallel ranks) may use
 * it. A failed allocation's error is cleared: it is an answer (NULL), not a fault. */
void *cu_host_alloc(ls_backend *be, size_t bytes) {
    no_step(impl_of(be), "host_alloc");
    QueueLock q;
    q.forbid_capture("host_alloc");
    void *p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return p;
}

void cu_host_free(void *p) {
    if (!p) return;
    QueueLock q;
    q.forbid_capture("host_free");
    LSC_CHECK(cudaFreeHost(p)); /* implicitly waits for queued work */
}

void cu_upload(ls_backend *be, void *dst, const void *src_host, size_t bytes) {
    CudaBackend *c = impl_of(be);
    no_step(c, "upload");
    c->op_seq++;
    if (!bytes) return;
    {
        QueueLock q;
        q.forbid_capture("upload");
        LSC_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, g_stream));
        LSC_CHECK(cudaEventRecord(c->done, g_stream));
    }
    LSC_CHECK(cudaEventSynchronize(c->done)); /* the caller may reuse src_host at once */
}

void cu_download(ls_backend *be, void *dst_host, const void *src, size_t bytes) {
    CudaBackend *c = impl_of(be);
    no_step(c, "download");
    if (!bytes) return;
    {
        QueueLock q;
        q.forbid_capture("download");
        LSC_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, g_stream));
        LSC_CHECK(cudaEventRecord(c->done, g_stream));
    }
    LSC_CHECK(cudaEventSynchronize(c->done));
    step_times_harvest(c);
}

/* memmove on the device. Disjoint: one copy. Overlapping with distance g = |dst - src|:
 * pieces ordered away from the overlap (ascending when dst < src, descending otherwise),
 * each read before anything writes over it: directly in pieces of g bytes (a piece's source
 * and destination are then disjoint) when that takes few copies, else through the staging
 * buffer in pieces of kStagingBytes. */
void cu_copy(ls_backend *be, void *dst, const void *src, size_t bytes) {
    CudaBackend *c = impl_of(be);
    if (!bytes || dst == src) return;
    uint64_t h = mix_v(0x636f7079ull, dst); /* "copy" */
    h = mix_v(mix_v(h, src), bytes);
    run_op(c, h, [c, dst, src, bytes] {
        char *d = (char *)dst;
        const char *s = (const char *)src;
        auto mc = [](void *to, const void *from, size_t n) {
            LSC_CHECK(cudaMemcpyAsync(to, from, n, cudaMemcpyDeviceToDevice, g_stream));
        };
        if (d + bytes <= s || s + bytes <= d) {
            mc(d, s, bytes);
            return;
        }
        const size_t gap = d < s ? (size_t)(s - d) : (size_t)(d - s); /* 0 < gap < bytes */
        const size_t piece = gap >= kStagingBytes || bytes / gap <= 16 ? gap : kStagingBytes;
        const bool staged = piece != gap;
        if (d < s) {
            for (size_t off = 0; off < bytes; off += piece) {
                const size_t n = std::min(piece, bytes - off);
                if (staged) {
                    mc(c->staging, s + off, n);
                    mc(d + off, c->staging, n);
                } else {
                    mc(d + off, s + off, n);
                }
            }
        } else {
            for (size_t end = bytes; end > 0;) {
                const size_t n = std::min(piece, end);
                end -= n;
                if (staged) {
                    mc(c->staging, s + end, n);
                    mc(d + end, c->staging, n);
                } else {
                    mc(d + end, s + end, n);
                }
            }
        }
    });
}

/* Waits for everything queued before it (one queue for the process, so this is also every
 * other instance's earlier work; ordering between instances needs no sync here). */
void cu_sync(ls_backend *be) {
    CudaBackend *c = impl_of(be);
    no_step(c, "sync");
    {
        QueueLock q;
        q.forbid_capture("sync");
        LSC_CHECK(cudaEventRecord(c->done, g_stream));
    }
    LSC_CHECK(cudaEventSynchronize(c->done));
    step_times_harvest(c); /* a forward without logits rows ends here */
}

void cu_copy_rows(ls_backend *be, float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t width,
                  int64_t rows) {
    uint64_t h = mix_v(0x63726f77ull, dst); /* "crow" */
    h = mix_v(mix_v(mix_v(mix_v(mix_v(h, dst_stride), src), src_stride), width), rows);
    run_op(impl_of(be), h, [=] { ls_cuda_copy_rows(g_stream, dst, dst_stride, src, src_stride, width, rows); });
}

void cu_fill(ls_backend *be, float *x, float v, int64_t n) {
    const uint64_t h = mix_v(mix_v(mix_v(0x66696c6cull, x), v), n); /* "fill" */
    run_op(impl_of(be), h, [=] { ls_cuda_fill(g_stream, x, v, n); });
}

/* ---- compute ---- */

/* The device address of a mapped constant, or the pointer itself when it lies in no
 * mapped range (then it must be backend memory: only for in_backend weights). */
const void *dev_ptr_or_self(const void *p) {
    if (!p) return nullptr;
    const uintptr_t h = (uintptr_t)p;
    std::lock_guard<std::mutex> lk(g_reg_mu);
    auto it = range_at_or_before(h);
    if (it != g_ranges.end() && h - it->host < span(it->bytes)) return it->dev + (h - it->host);
    return p;
}

/* The weight with device addresses: mapped constants translated; an in_backend weight's
 * data (a backend buffer made at run time) used as it is, its scales / biases translated
 * when they are mapped constants and used as they are otherwise. */
ls_weight translate(const ls_weight *w) {
    ls_weight d = *w;
    if (w->in_backend) {
        d.scales = dev_ptr_or_self(w->scales);
        d.biases = dev_ptr_or_self(w->biases);
    } else {
        d.data = dev_ptr(w->data);
        d.scales = dev_ptr(w->scales);
        d.biases = dev_ptr(w->biases);
    }
    return d;
}

/* Consecutive integer matmuls on the same input (q / k / v, gate / up) quantize it once:
 * the second and third find the scratch holding it (nothing ran in between) and skip the
 * quantization launch (cuda_matmul.h, ls_cuda_matmul_ex). Decided while the step is
 * recorded, in op order, so replaying the step's graph makes the same choice. */
void cu_matmul(ls_backend *be, const ls_weight *w, const float *x, int64_t m, float *y) {
    if (m <= 0) return;
    CudaBackend *c = impl_of(be);
    const ls_weight d = translate(w);
    const int layout = ls_cuda_mmq_act_key(&d);
    const bool one_pass = layout >= 0 && ls_cuda_mmq_single_pass(m, d.cols, c->mm_bytes);
    int ready = one_pass && c->mm_last.seq == c->op_seq && c->mm_last.x == x && c->mm_last.m == m &&
                c->mm_last.k == d.cols && c->mm_last.layout == layout;
    /* recorded steps only (the producer has not run yet): the op before produced x and can
     * quantize it for us in its own launch */
    /* (the attention output not yet in the K-quant format, layout 2: that matmul quantizes) */
    if (!ready && one_pass && (layout != 2 || c->fuse.kq) && c->recording && c->fuse.seq == c->op_seq && c->fuse.out == x &&
        c->fuse.total == m * d.cols) {
        *c->fuse.layout = layout;
        ready = 1;
    }
    uint64_t h = mix_weight(0x6d6d756cull, d); /* "mmul" */
    h = mix_v(mix_v(mix_v(mix_v(h, x), m), y), ready);
    /* a matmul on the input of the one just recorded joins its launch */
    if (ready && c->recording && c->grp && c->grp_seq == c->op_seq && c->grp->n < 3 &&
        ls_cuda_mmq_groupable(&c->grp->d[0], &d, m, c->mm_bytes)) {
        c->grp->d[c->grp->n] = d;
        c->grp->y[c->grp->n] = y;
        c->grp->n++;
        c->op_seq++;
        c->sig = mix_v(c->sig, mix_v(h, 0x67727570ull)); /* "grup" */
        c->mm_last = {x, m, d.cols, layout, c->op_seq};
        c->grp_seq = c->op_seq;
        return;
    }
    std::shared_ptr<CudaBackend::MmGroup> grp(new CudaBackend::MmGroup());
    grp->d[0] = d;
    grp->y[0] = y;
    grp->n = 1;
    run_op(c, h, [c, grp, x, m, w, ready] {
        int rc;
        if (grp->n == 1) {
            rc = ls_cuda_matmul_ex(g_stream, &grp->d[0], x, m, grp->y[0], c->mm_scratch, c->mm_bytes, ready);
        } else {
            const ls_weight *ws[3] = {&grp->d[0], &grp->d[1], &grp->d[2]};
            rc = ls_cuda_mmq_group(g_stream, grp->n, ws, x, m, grp->y, c->mm_scratch, c->mm_bytes, ready);
        }
        if (rc != 0)
            LSC_FATAL("matmul: weight type %s (%d), %lld x %lld, unsupported by the CUDA matmul",
                      ls_type_name(w->type), (int)w->type, (long long)w->rows, (long long)w->cols);
    });
    if (one_pass) {
        c->mm_last = {x, m, d.cols, layout, c->op_seq};
        if (c->recording && c->merge) {
            c->grp = grp;
            c->grp_seq = c->op_seq;
        }
    } else {
        c->mm_last.seq = 0; /* op_seq is >= 1 after any op: never matches */
    }
}

void cu_get_rows(ls_backend *be, const ls_weight *table, const int32_t *ids, int64_t n, float *dst) {
    if (n <= 0) return;
    const ls_weight d = translate(table);
    uint64_t h = mix_weight(0x67726f77ull, d); /* "grow" */
    h = mix_v(mix_v(mix_v(h, ids), n), dst);
    const ls_type ty = table->type;
    const int64_t rows = table->rows, cols = table->cols;
    run_op(impl_of(be), h, [d, ids, n, dst, ty, rows, cols] {
        if (ls_cuda_get_rows(g_stream, &d, ids, n, dst) != 0)
            LSC_FATAL("get_rows: table type %s (%d), %lld x %lld, unsupported by the CUDA get_rows", ls_type_name(ty),
                      (int)ty, (long long)rows, (long long)cols);
    });
}

void cu_rmsnorm(ls_backend *be, float *x, const float *w, int64_t m, int64_t n, float eps) {
    const float *dw = (const float *)dev_ptr(w);
    const uint64_t h = mix_v(mix_v(mix_v(mix_v(mix_v(0x726d736eull, x), dw), m), n), eps); /* "rmsn" */
    CudaBackend *c = impl_of(be);
    /* the value norm right after the q / k norm_rope pair of the same rows joins its launch:
     * its blocks norm v's heads as this kernel would (hd <= 1024: the same block order) */
    auto &nr = c->nrope;
    if (c->recording && !w && nr.g && nr.seq == c->op_seq && nr.g->n == 2 && !nr.g->x3 && n == nr.hd &&
        eps == nr.eps && m > 0 && m % nr.m == 0 && m / nr.m <= INT32_MAX && x != nr.g->x2) {
        nr.g->x3 = x;
        nr.g->nh3 = (int32_t)(m / nr.m);
        c->op_seq++;
        c->sig = mix_v(c->sig, mix_v(h, 0x766e726dull)); /* "vnrm" */
        nr.seq = c->op_seq; /* the kv_store2 may join next */
        return;
    }
    run_op(c, h, [=] { ls_cuda_rmsnorm(g_stream, x, dw, m, n, eps); });
}

void cu_rope_pairs(ls_backend *be, float *x, int64_t m, int32_t n_heads, int32_t hd, int32_t n_pairs,
                   const int32_t *pos, float theta_base, float freq_scale) {
    uint64_t h = mix_v(mix_v(mix_v(0x726f7065ull, x), m), n_heads); /* "rope" */
    h = mix_v(mix_v(mix_v(mix_v(mix_v(h, hd), n_pairs), pos), theta_base), freq_scale);
    run_op(impl_of(be), h,
           [=] { ls_cuda_rope_pairs(g_stream, x, m, n_heads, hd, n_pairs, pos, theta_base, freq_scale); });
}

/* The cache extent (first_pos, n_slots, and the chunk range derived from them) is a step
 * parameter; the signature takes the chunk count, which decides the launch shape. */
void cu_attention(ls_backend *be, const ls_attn_args *a) {
    CudaBackend *c = impl_of(be);
    int32_t ext[4];
    ls_cuda_attention_extent(a, ext);
    const uint64_t h = mix_v(mix_attn(0x6174746eull, *a), ext[3]); /* "attn" */
    const Slot sl = param_slot(c, sizeof ext);
    memcpy(sl.host, ext, sizeof ext);
    const ls_attn_args args = *a;
    float *scratch = c->attn_scratch;
    const size_t sbytes = c->attn_bytes;
    const bool rec = c->recording;
    std::shared_ptr<int> q(new int(-1)); /* set by a matmul of the output recorded next (cu_matmul) */
    run_op(c, h, [c, args, sl, scratch, sbytes, rec, q] {
        if (!rec) upload_slot(sl);
        ls_cuda_attention(g_stream, &args, (const int32_t *)sl.dev, scratch, sbytes, c->mm_scratch, *q);
    });
    if (rec && c->merge && a->hd >= 32 && a->hd % 32 == 0) c->fuse = {c->op_seq, a->out, a->m * a->n_head * (int64_t)a->hd, q, false};
}

void cu_gelu_mul(ls_backend *be, float *gate, const float *up, int64_t n) {
    const uint64_t h = mix_v(mix_v(mix_v(0x67656c75ull, gate), up), n); /* "gelu" */
    CudaBackend *c = impl_of(be);
    std::shared_ptr<int> q(new int(-1)); /* set by a matmul of gate recorded next (cu_matmul) */
    run_op(c, h, [c, q, gate, up, n] {
        if (*q >= 0)
            ls_cuda_gelu_mul_q(g_stream, gate, up, n, c->mm_scratch, *q);
        else
            ls_cuda_gelu_mul(g_stream, gate, up, n);
    });
    if (c->recording && c->merge && n % 32 == 0) c->fuse = {c->op_seq, gate, n, q, true};
}

void cu_add(ls_backend *be, float *x, const float *y, int64_t n) {
    const uint64_t h = mix_v(mix_v(mix_v(0x61646420ull, x), y), n); /* "add " */
    run_op(impl_of(be), h, [=] { ls_cuda_add(g_stream, x, y, n); });
}

void cu_scale(ls_backend *be, float *x, float s, int64_t n) {
    const uint64_t h = mix_v(mix_v(mix_v(0x7363616cull, x), s), n); /* "scal" */
    run_op(impl_of(be), h, [=] { ls_cuda_scale(g_stream, x, s, n); });
}

void cu_axpby(ls_backend *be, float *x, const float *y, float a, float b, int64_t n) {
    const uint64_t h = mix_v(mix_v(mix_v(mix_v(mix_v(0x61787062ull, x), y), a), b), n); /* "axpb" */
    run_op(impl_of(be), h, [=] { ls_cuda_axpby(g_stream, x, y, a, b, n); });
}

void cu_mul_rows(ls_backend *be, float *x, const float *w, float s, int64_t m, int64_t n) {
    if (!w) LSC_FATAL("mul_rows: NULL weight vector");
    const float *dw = (const float *)dev_ptr(w);
    const uint64_t h = mix_v(mix_v(mix_v(mix_v(mix_v(0x6d726f77ull, x), dw), s), m), n); /* "mrow" */
    run_op(impl_of(be), h, [=] { ls_cuda_mul_rows(g_stream, x, dw, s, m, n); });
}

void cu_softcap(ls_backend *be, float *x, float cap, int64_t n) {
    const uint64_t h = mix_v(mix_v(mix_v(0x73636170ull, x), cap), n); /* "scap" */
    run_op(impl_of(be), h, [=] { ls_cuda_softcap(g_stream, x, cap, n); });
}

void cu_kv_store(ls_backend *be, void *dst, bool f32, const float *src, int64_t n) {
    const uint64_t h = mix_v(mix_v(mix_v(mix_v(0x6b763120ull, dst), f32), src), n); /* "kv1 " */
    run_op(impl_of(be), h, [=] { ls_cuda_kv_store(g_stream, dst, f32, src, n); });
}

void cu_gather_rows(ls_backend *be, float *dst, const float *src, const int32_t *rows, int64_t cnt, int64_t d) {
    const uint64_t h = mix_v(mix_v(mix_v(mix_v(mix_v(0x67617468ull, dst), src), rows), cnt), d); /* "gath" */
    run_op(impl_of(be), h, [=] { ls_cuda_gather_rows(g_stream, dst, src, rows, cnt, d); });
}

void cu_scatter_add(ls_backend *be, float *acc, const float *y, const int32_t *rows, const float *w, int64_t cnt,
                    int64_t d) {
    uint64_t h = mix_v(mix_v(mix_v(mix_v(0x73636174ull, acc), y), rows), w); /* "scat" */
    h = mix_v(mix_v(h, cnt), d);
    run_op(impl_of(be), h, [=] { ls_cuda_scatter_add(g_stream, acc, y, rows, w, cnt, d); });
}

/* ---- fused ops (backend.h; kernels in rowwise.cu) ---- */

void cu_rmsnorm_to(ls_backend *be, float *dst, const float *src, const float *w, int64_t m, int64_t n, float eps) {
    const float *dw = (const float *)dev_ptr(w);
    uint64_t h = mix_v(mix_v(mix_v(0x726d7374ull, dst), src), dw); /* "rmst" */
    h = mix_v(mix_v(mix_v(h, m), n), eps);
    run_op(impl_of(be), h, [=] { ls_cuda_rmsnorm_to(g_stream, dst, src, dw, m, n, eps); });
}

void cu_add_rmsnorm(ls_backend *be, float *x, float *t, const float *w_post, float s, float *xn, const float *w_pre,
                    int64_t m, int64_t n, float eps) {
    const float *dpost = (const float *)dev_ptr(w_post), *dpre = (const float *)dev_ptr(w_pre);
    uint64_t h = mix_v(mix_v(mix_v(mix_v(mix_v(0x61726d73ull, x), t), dpost), s), xn); /* "arms" */
    h = mix_v(mix_v(mix_v(mix_v(h, dpre), m), n), eps);
    CudaBackend *c = impl_of(be);
    maybe_submit_segment(c);
    std::shared_ptr<int> q(new int(-1)); /* set by a matmul of xn recorded next (cu_matmul) */
    run_op(c, h, [=] {
        if (*q >= 0)
            ls_cuda_add_rmsnorm_q(g_stream, x, t, dpost, s, xn, dpre, m, n, eps, c->mm_scratch, *q);
        else
            ls_cuda_add_rmsnorm(g_stream, x, t, dpost, s, xn, dpre, m, n, eps);
    });
    if (c->recording && c->merge && xn && n % 32 == 0) c->fuse = {c->op_seq, xn, m * n, q, true};
}

void cu_norm_rope(ls_backend *be, float *x, const float *w, int64_t m, int32_t n_heads, int32_t hd, float eps,
                  int32_t n_pairs, const int32_t *pos, float theta_base, float freq_scale) {
    const float *dw = (const float *)dev_ptr(w);
    uint64_t h = mix_v(mix_v(mix_v(mix_v(mix_v(0x6e726f70ull, x), dw), m), n_heads), hd); /* "nrop" */
    h = mix_v(mix_v(mix_v(mix_v(mix_v(h, eps), n_pairs), pos), theta_base), freq_scale);
    CudaBackend *c = impl_of(be);
    auto &nr = c->nrope;
    /* the k heads right after the q heads of the same rows join the q launch */
    if (c->recording && nr.g && nr.seq == c->op_seq && nr.g->n == 1 && n_pairs > 0 && nr.m == m && nr.hd == hd &&
        nr.eps == eps && nr.n_pairs == n_pairs && nr.pos == pos && nr.theta == theta_base && nr.fs == freq_scale) {
        nr.g->x2 = x;
        nr.g->w2 = dw;
        nr.g->nh2 = n_heads;
        nr.g->n = 2;
        c->op_seq++;
        c->sig = mix_v(c->sig, mix_v(h, 0x70616972ull)); /* "pair" */
        nr.seq = c->op_seq; /* a kv_store2 of these k heads may join next */
        return;
    }
    std::shared_ptr<CudaBackend::RopePair> g(new CudaBackend::RopePair());
    run_op(c, h, [=] {
        if (g->n == 2)
            ls_cuda_norm_rope2(g_stream, x, dw, n_heads, g->x2, g->w2, g->nh2, g->x3, g->nh3, m, hd, eps, n_pairs, pos,
                               theta_base, freq_scale, g->kv, g->f32, g->v, g->nv);
        else
            ls_cuda_norm_rope(g_stream, x, dw, m, n_heads, hd, eps, n_pairs, pos, theta_base, freq_scale);
    });
    if (c->recording && c->merge && n_pairs > 0) nr = {c->op_seq, g, m, hd, eps, n_pairs, pos, theta_base, freq_scale};
}

/* The destination slots move every step: they are step parameters, not in the signature. */
void cu_kv_store2(ls_backend *be, void *dk, void *dv, bool f32, const float *k, const float *v, int64_t n) {
    CudaBackend *c = impl_of(be);
    const uint64_t h = mix_v(mix_v(mix_v(mix_v(0x6b763220ull, f32), k), v), n); /* "kv2 " */
    void *dst[2] = {dk, dv};
    const Slot sl = param_slot(c, sizeof dst);
    memcpy(sl.host, dst, sizeof dst);
    const bool rec = c->recording;
    /* right after the q / k norm_rope pair of these k heads (and the value norm of this v):
     * that launch stores them */
    auto &nr = c->nrope;
    if (rec && nr.g && nr.seq == c->op_seq && nr.g->n == 2 && !nr.g->kv && nr.g->x2 == k &&
        n == nr.m * nr.g->nh2 * nr.hd && (!nr.g->x3 || (nr.g->x3 == v && n == nr.m * nr.g->nh3 * nr.hd))) {
        nr.g->kv = (void *const *)sl.dev;
        nr.g->f32 = f32;
        nr.g->v = v;
        nr.g->nv = n;
        c->op_seq++;
        c->sig = mix_v(c->sig, mix_v(h, 0x6b766a6eull)); /* "kvjn" */
        nr.seq = 0;
        return;
    }
    run_op(c, h, [sl, f32, k, v, n, rec] {
        if (!rec) upload_slot(sl);
        ls_cuda_kv_store2(g_stream, (void *const *)sl.dev, f32, k, v, n);
    });
}

/* ---- step graphs ---- */

/* Adds the last timed step to the totals once its events have completed (callers have just
 * synchronized the queue, so this does not wait). */
void step_times_harvest(CudaBackend *c) {
    if (!c->t_pending) return;
    c->t_pending = false;
    LSC_CHECK(cudaEventSynchronize(c->t1));
    float ms = 0.0f;
    LSC_CHECK(cudaEventElapsedTime(&ms, c->t0, c->t1));
    ls_backend_step_times_add(c->t_host_ns, (int64_t)((double)ms * 1e6));
}

void cu_step_begin(ls_backend *be, int64_t key) {
    CudaBackend *c = impl_of(be);
    no_step(c, "step_begin");
    c->in_step = true;
    c->op_seq++; /* a step's matmuls decide activation reuse from its own ops only */
    c->step_key = key;
    if (!c->graphs) return;
    {
        /* the previous step's parameter upload has run (every forward syncs after its step;
         * this makes reusing the host slots safe regardless) */
        QueueLock q;
        LSC_CHECK(cudaStreamSynchronize(g_stream));
    }
    step_times_harvest(c);
    c->t_on = ls_backend_step_timing();
    if (c->t_on) c->t_begin = std::chrono::steady_clock::now();
    c->recording = true;
    c->rec.clear();
    c->sig = mix_v(0xcbf29ce484222325ull, key);
    c->arena_used = 0;
    c->seg_n = 0;
    c->seg_arena = 0;
    c->seg_replays = true;
}

/* The cached executable graph for signature `sig`, or NULL. */
GraphEntry *graph_find(CudaBackend *c, uint64_t sig) {
    for (int i = 0; i < c->n_cache; i++)
        if (c->cache[i].sig == sig) return &c->cache[i];
    return nullptr;
}

/* A new entry for `sig` instantiated from g (evicting the least recently used of kGraphCache). */
GraphEntry *graph_add(CudaBackend *c, uint64_t sig, cudaGraph_t g) {
    GraphEntry *e;
    if (c->n_cache < kGraphCache) {
        e = &c->cache[c->n_cache++];
    } else {
        e = &c->cache[0];
        for (int i = 1; i < c->n_cache; i++)
            if (c->cache[i].last_used < e->last_used) e = &c->cache[i];
        LSC_CHECK(cudaGraphExecDestroy(e->exec));
    }
    e->sig = sig;
    LSC_CHECK(cudaGraphInstantiate(&e->exec, g, 0));
    return e;
}

/* Submits the launches recorded since the open segment began as one graph: the cached one
 * for signature `sig`, or a new one captured from them; their parameters go up first. `last`:
 * the step's final segment. */
void submit_segment(CudaBackend *c, uint64_t sig, bool last) {
    QueueLock q;
    GraphEntry *e = graph_find(c, sig);
    c->seg_replays = c->seg_replays && e != nullptr;
    if (!e) {
        if (g_capturing) LSC_FATAL("step_end: a capture is already open");
        /* legal while the step's earlier segment still runs on the stream: the capture only
         * records, and the graph launches after that segment in stream order */
        LSC_CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
        g_capturing = true;
        g_capture_owner = std::this_thread::get_id();
        c->rec.run_all();
        cudaGraph_t g = nullptr;
        const cudaError_t err = cudaStreamEndCapture(g_stream, &g);
        g_capturing = false;
        g_q_cv.notify_all();
        LSC_CHECK(err);
        e = graph_add(c, sig, g);
        LSC_CHECK(cudaGraphDestroy(g));
    }
    e->last_used = ++c->tick;
    /* host time: up to the step's first submission; GPU time: from there (t0 completes at
     * once, the queue is idle since step_begin) to the last segment's last kernel. The two
     * add up to the step. Steps with a newly captured segment are not timed. */
    if (c->seg_n == 0 && c->t_on) {
        c->t_host_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                            c->t_begin).count();
        LSC_CHECK(cudaEventRecord(c->t0, g_stream));
    }
    if (c->arena_used > c->seg_arena)
        LSC_CHECK(cudaMemcpyAsync(c->d_arena + c->seg_arena, c->h_arena + c->seg_arena, c->arena_used - c->seg_arena,
                                  cudaMemcpyHostToDevice, g_stream));
    LSC_CHECK(cudaGraphLaunch(e->exec, g_stream));
    c->seg_n++;
    c->seg_arena = c->arena_used;
    if (last && c->t_on && c->seg_replays) {
        LSC_CHECK(cudaEventRecord(c->t1, g_stream));
        c->t_pending = true;
    }
    c->rec.clear();
}

/* The first segment of a recorded step, submitted at the entry of an op before which no
 * recorded launch can still change (cu_add_rmsnorm: the matmuls and producers before it have
 * met their consumers) once enough launches are recorded. */
void maybe_submit_segment(CudaBackend *c) {
    if (!c->recording || !c->segment || c->seg_n > 0 || c->rec.size() < kSegmentOps) return;
    g_segmented_steps.fetch_add(1, std::memory_order_relaxed);
    submit_segment(c, mix_v(c->sig, 0x7365676dull) /* "segm": a segment's key, never a step's */, false);
}

void cu_step_end(ls_backend *be) {
    CudaBackend *c = impl_of(be);
    if (!c->in_step) LSC_FATAL("step_end without step_begin");
    c->in_step = false;
    c->op_seq++;
    if (!c->graphs) return;
    c->recording = false;
    /* never empty after a first segment: that one is cut before an op it leaves recorded */
    if (c->rec.empty()) return;
    submit_segment(c, c->sig, true);
}

/* ---- lifetime ---- */

void cu_free(ls_backend *be) {
    if (!be) return;
    CudaBackend *c = impl_of(be);
    if (c->in_step) LSC_FATAL("free between step_begin and step_end");
    QueueLock q;
    q.forbid_capture("free");
    if (c->t_pending) {
        LSC_CHECK(cudaStreamSynchronize(g_stream));
        step_times_harvest(c);
    }
    for (int i = 0; i < c->n_cache; i++) LSC_CHECK(cudaGraphExecDestroy(c->cache[i].exec));
    if (c->staging) LSC_CHECK(cudaFree(c->staging));
    if (c->attn_scratch) LSC_CHECK(cudaFree(c->attn_scratch));
    if (c->mm_scratch) LSC_CHECK(cudaFree(c->mm_scratch));
    if (c->d_arena) LSC_CHECK(cudaFree(c->d_arena));
    if (c->h_arena) LSC_CHECK(cudaFreeHost(c->h_arena));
    if (c->done) LSC_CHECK(cudaEventDestroy(c->done));
    if (c->t0) LSC_CHECK(cudaEventDestroy(c->t0));
    if (c->t1) LSC_CHECK(cudaEventDestroy(c->t1));
    if (--g_stream_users == 0) {
        LSC_CHECK(cudaStreamSynchronize(g_stream));
        LSC_CHECK(cudaStreamDestroy(g_stream));
        g_stream = nullptr;
    }
    delete c;
}

ls_backend_ops make_ops(void) {
    ls_backend_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.host_memory = false;
    o.alloc = cu_alloc;
    o.release = cu_release;
    o.host_alloc = cu_host_alloc;
    o.host_free = cu_host_free;
    o.upload = cu_upload;
    o.download = cu_download;
    o.copy = cu_copy;
    o.copy_rows = cu_copy_rows;
    o.fill = cu_fill;
    o.sync = cu_sync;
    o.matmul = cu_matmul;
    o.get_rows = cu_get_rows;
    o.rmsnorm = cu_rmsnorm;
    o.rope_pairs = cu_rope_pairs;
    o.attention = cu_attention;
    o.gelu_mul = cu_gelu_mul;
    o.add = cu_add;
    o.scale = cu_scale;
    o.axpby = cu_axpby;
    o.mul_rows = cu_mul_rows;
    o.softcap = cu_softcap;
    o.kv_store = cu_kv_store;
    o.gather_rows = cu_gather_rows;
    o.scatter_add = cu_scatter_add;
    o.rmsnorm_to = cu_rmsnorm_to;
    o.add_rmsnorm = cu_add_rmsnorm;
    o.norm_rope = cu_norm_rope;
    o.kv_store2 = cu_kv_store2;
    o.step_begin = cu_step_begin;
    o.step_end = cu_step_end;
    o.free = cu_free;
    return o;
}

const ls_backend_ops g_ops = make_ops();

/* cudaMalloc, NULL (logged) when out of memory. */
void *create_alloc(size_t bytes, const char *what) {
    void *p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        log_error("cuda: create: %s (%zu bytes): out of device memory", what, bytes);
        return nullptr;
    }
    LSC_CHECK(e);
    return p;
}

ls_backend *cu_create(const ls_backend_params *p) {
    if (!cu_available()) {
        log_error("cuda: no CUDA device");
        return nullptr;
    }
    cu_init();
    CudaBackend *c = new (std::nothrow) CudaBackend();
    if (!c) return nullptr;
    c->base.ops = &g_ops;
    c->base.impl = c;
    c->graphs = ls_backend_graphs();
    {
        const unsigned off = ls_backend_cuda_off();
        c->merge = !(off & LS_CUDA_OFF_MERGE);
        c->segment = !(off & LS_CUDA_OFF_SEGMENT);
        ls_cuda_pdl_on = !(off & LS_CUDA_OFF_PDL);
        ls_cuda_attention_set_switches(!(off & LS_CUDA_OFF_ATTN_FINISH), !(off & LS_CUDA_OFF_ATTN_SPLIT));
        ls_cuda_mmq_gemv_variant(off & LS_CUDA_OFF_GEMV ? 0 : -1);
        ls_cuda_mmq_narrow(off & LS_CUDA_OFF_NARROW ? 0 : 1);
        ls_cuda_mmq_kq(off & LS_CUDA_OFF_KQ ? 0 : 1);
        ls_cuda_mmq_row1_warps(off & LS_CUDA_OFF_ROW1_WARP ? 4 : 1);
    }

    QueueLock q;
    q.forbid_capture("create");
    if (g_stream_users++ == 0) LSC_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    LSC_CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    LSC_CHECK(cudaEventCreate(&c->t0)); /* timing events: step timing */
    LSC_CHECK(cudaEventCreate(&c->t1));
    c->attn_bytes = ls_cuda_attention_scratch_bytes(p->max_rows, p->max_cols, p->max_keys);
    c->staging = (char *)create_alloc(kStagingBytes, "copy staging buffer");
    c->attn_scratch = c->staging ? (float *)create_alloc(c->attn_bytes, "attention scratch") : nullptr;
    /* rows beyond max_rows run in several passes (mmq.cu), so one row's worth suffices */
    c->mm_bytes = ls_cuda_mmq_scratch_bytes(p->max_rows > 0 ? p->max_rows : 1, p->max_cols > 0 ? p->max_cols : QB_MIN);
    c->mm_scratch = c->attn_scratch ? create_alloc(c->mm_bytes, "matmul activation scratch") : nullptr;
    c->d_arena = c->mm_scratch ? (uint8_t *)create_alloc(kArenaBytes, "step parameters") : nullptr;
    if (c->d_arena && cudaMallocHost((void **)&c->h_arena, kArenaBytes) != cudaSuccess) {
        (void)cudaGetLastError();
        log_error("cuda: create: step parameters (%zu bytes of pinned host memory): out of memory", kArenaBytes);
        c->h_arena = nullptr;
    }
    if (!c->h_arena) {
        q.lk.unlock();
        cu_free(&c->base);
        return nullptr;
    }
    return &c->base;
}

} // namespace

int64_t ls_cuda_step_segments(void) {
    return g_segmented_steps.load(std::memory_order_relaxed);
}

/* Collectives (kernels/collective.h, collective_nccl.cu) enqueue on the process queue like
 * an op, so they are ordered with the ops before and after them; never inside a step. */
void ls_cuda_on_queue(ls_backend *be, void (*fn)(cudaStream_t st, void *ud), void *ud) {
    no_step(impl_of(be), "a collective");
    QueueLock q;
    q.forbid_capture("a collective");
    fn(g_stream, ud);
}

extern "C" const ls_device_kind ls_device_cuda = {
    "cuda", cu_available, cu_device_name, cu_map_const, cu_unmap_const, cu_create,
};
