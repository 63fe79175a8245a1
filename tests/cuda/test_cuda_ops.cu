/* Standalone GPU test of the CUDA backend's ops (src/kernels/cuda; docs/cuda.md). No
 * framework: one line per check, exit status 0 = pass, 1 = a failure, 77 = no CUDA device.
 *
 * For every op, on random inputs:
 *  (a) row invariance, bit for bit: row i of an M-row call (M = 1..64) == row i computed
 *      alone (memcmp), the inputs of each call uploaded to fresh offsets;
 *  (b) accuracy against the CPU backend (backend_cpu.c; ops it does not have yet are
 *      computed here from backend.h's definitions): element-wise ops 1e-6 relative,
 *      attention and rmsnorm 1e-5 relative L2, rope 1e-5 relative L2, matmul 3e-2;
 *  (c) a chain of ops run as step graphs (step_begin / step_end, with repeated, new and
 *      evicted keys and changing buffers) == the same chain launched directly
 *      (graphs off: ls_backend_set_graphs(false));
 *  (d) copy with overlapping ranges == memmove, both directions, every copy strategy.
 * matmul / get_rows are tested when kernels/cuda/cuda_matmul.h exists, per weight type the
 * CUDA matmul supports (types it answers -1 for are listed as skipped).
 *
 * The build and run commands are below, as line comments (they hold shell globs). */
// Build, from the repository root, either against the library:
//   cmake --preset release && cmake --build build/release
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90,code=sm_90 -Xcompiler=-ffp-contract=off -I src -o build/test_cuda_ops tests/cuda/test_cuda_ops.cu build/release/liblockstep.a -lcjson -lm -lpthread
// or, where cJSON / libmicrohttpd are missing (the GPU machine), from the sources it needs:
//   mkdir -p build/cudatest
//   for f in src/core/log.c src/core/threads.c src/kernels/types.c src/kernels/cpu/*.c; do case $f in *_avx2.c) x="-mavx2 -mfma -mf16c";; *) x="";; esac; gcc -std=c11 -O2 -D_GNU_SOURCE -ffp-contract=off -fno-fast-math $x -I src -c $f -o build/cudatest/$(basename $f .c).o || exit 1; done
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90,code=sm_90 -Xcompiler=-ffp-contract=off -I src -o build/test_cuda_ops tests/cuda/test_cuda_ops.cu src/kernels/cuda/*.cu build/cudatest/*.o -lm -lpthread
// Run: build/test_cuda_ops   (exit 0 pass, 1 failure, 77 no CUDA device; under compute-sanitizer too)
// Attention timings: build/test_cuda_ops --bench; attention cases only: build/test_cuda_ops --attention
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/backend.h"
#include "kernels/host_buffer.h"
extern "C" {
#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"
}

#if __has_include("kernels/cuda/cuda_ops.h")
#include "kernels/cuda/cuda_ops.h" /* ls_cuda_attention_set_switches */
#define TEST_ATTN_SWITCHES 1
#else
#define TEST_ATTN_SWITCHES 0
#endif
#if __has_include("kernels/cuda/cuda_matmul.h")
#include "kernels/cuda/cuda_matmul.h"
#define TEST_MATMUL 1
#else
#define TEST_MATMUL 0
#endif

namespace {

/* ---- plumbing ---------------------------------------------------------------------- */

int g_failures = 0;
const ls_device_kind *K = &ls_device_cuda;
ls_backend *G = nullptr;   /* CUDA, graphs on (the default) */
ls_backend *CPU = nullptr; /* reference */
ls_backend *GS = nullptr;  /* CUDA with a small attention scratch: calls run in row groups */

constexpr int MAXM = 64;

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    float uni() { return (float)(next() >> 40) * (1.0f / 16777216.0f); }
    float normal(float scale) {
        float v = 0.0f;
        for (int i = 0; i < 4; i++) v += uni();
        return (v - 2.0f) * 1.7f * scale;
    }
    int below(int n) { return (int)(next() % (uint64_t)n); }
};

std::vector<float> randv(Rng &r, size_t n, float scale) {
    std::vector<float> v(n);
    for (auto &x : v) x = r.normal(scale);
    return v;
}

void die(const char *msg) {
    fprintf(stderr, "FATAL: %s\n", msg);
    exit(1);
}

void *dalloc(ls_backend *be, size_t bytes) {
    void *p = be->ops->alloc(be, bytes);
    if (!p) die("device alloc failed");
    return p;
}

/* Device buffers released at scope end. */
struct DBuf {
    ls_backend *be;
    void *p;
    DBuf(ls_backend *b, size_t bytes) : be(b), p(dalloc(b, bytes)) {}
    ~DBuf() { be->ops->release(be, p); }
    DBuf(const DBuf &) = delete;
    DBuf &operator=(const DBuf &) = delete;
    float *f() const { return (float *)p; }
    int32_t *i() const { return (int32_t *)p; }
};

void up(ls_backend *be, void *d, const void *h, size_t bytes) {
    be->ops->upload(be, d, h, bytes);
}
void down(ls_backend *be, void *h, const void *d, size_t bytes) {
    be->ops->download(be, h, d, bytes);
}

/* Constant host ranges mapped for the whole run (weights-like). */
struct Mapped {
    std::vector<float> v;
    explicit Mapped(std::vector<float> x) : v(std::move(x)) {
        char err[256] = "";
        if (K->map_const(v.data(), v.size() * sizeof(float), err, sizeof err) != 0) die(err);
    }
    ~Mapped() { K->unmap_const(v.data()); }
};

/* ---- checks ------------------------------------------------------------------------ */

void report(const char *name, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void report(const char *name, bool ok, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%-6s %-34s %s\n", ok ? "ok" : "FAIL", name, msg);
    fflush(stdout);
    if (!ok) g_failures++;
}

/* run(r0, M, out): the op on rows [r0, r0 + M) of the test's inputs, uploaded to the start
 * of its device buffers; out gets M * row_bytes bytes of results. */
typedef std::function<void(int r0, int M, std::vector<uint8_t> &out)> RunFn;

/* (a): every row of every M-row call (M = 1..maxm) equals the row computed alone. */
bool invariance(const char *name, size_t row_bytes, const RunFn &run, int maxm = MAXM) {
    std::vector<std::vector<uint8_t>> alone(maxm);
    for (int i = 0; i < maxm; i++) run(i, 1, alone[i]);
    std::vector<uint8_t> full;
    for (int M = 1; M <= maxm; M++) {
        run(0, M, full);
        for (int i = 0; i < M; i++)
            if (memcmp(full.data() + (size_t)i * row_bytes, alone[i].data(), row_bytes) != 0) {
                size_t b = 0;
                while (full[(size_t)i * row_bytes + b] == alone[i][b]) b++;
                report(name, false, "row invariance: M=%d row %d differs from the row alone (byte %zu)", M, i, b);
                return false;
            }
    }
    return true;
}

double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (!(num == num)) return INFINITY; /* a NaN (e.g. an element never written) must fail, not vanish in max */
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

/* max |a - ref| / |ref| (elements where both are 0 count 0; NaN -> inf); counts bit
 * differences in *ndiff. */
double max_rel(const float *a, const float *ref, size_t n, size_t *ndiff) {
    double mx = 0.0;
    size_t nd = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &ref[i], 4) != 0) nd++;
        if (isnan(a[i]) || isnan(ref[i])) {
            if (!(isnan(a[i]) && isnan(ref[i]))) mx = INFINITY;
            continue;
        }
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (d == 0.0) continue;
        const double r = d / fmax(fabs((double)ref[i]), 1e-30);
        if (r > mx) mx = r;
    }
    if (ndiff) *ndiff = nd;
    return mx;
}

const float *as_f(const std::vector<uint8_t> &b) {
    return (const float *)b.data();
}

/* The standard element-wise report: invariance + accuracy. */
void check_elementwise(const char *name, size_t row_floats, const RunFn &run, const std::vector<float> &ref) {
    const bool inv = invariance(name, row_floats * 4, run);
    std::vector<uint8_t> full;
    run(0, MAXM, full);
    size_t nd = 0;
    const double e = max_rel(as_f(full), ref.data(), ref.size(), &nd);
    report(name, inv && e <= 1e-6, "invariant M=1..%d %s; vs cpu max rel %.3g (%zu/%zu elements not bit-equal)", MAXM,
           inv ? "yes" : "NO", e, nd, ref.size());
}

/* ---- element-wise ops --------------------------------------------------------------- */

void test_fill() {
    const int W = 333;
    RunFn run = [&](int, int M, std::vector<uint8_t> &out) {
        DBuf x(G, (size_t)M * W * 4);
        G->ops->fill(G, x.f(), -2.5f, (int64_t)M * W);
        out.resize((size_t)M * W * 4);
        down(G, out.data(), x.p, out.size());
    };
    check_elementwise("fill", W, run, std::vector<float>((size_t)MAXM * W, -2.5f));
}

void test_copy_rows() {
    Rng r(11);
    const int W = 300, SS = 317, DS = 305;
    const std::vector<float> src = randv(r, (size_t)MAXM * SS, 1.0f);
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        DBuf s(G, (size_t)M * SS * 4), d(G, (size_t)M * DS * 4);
        up(G, s.p, src.data() + (size_t)r0 * SS, (size_t)M * SS * 4);
        G->ops->copy_rows(G, d.f(), DS, s.f(), SS, W, M);
        std::vector<float> h((size_t)M * DS);
        down(G, h.data(), d.p, h.size() * 4);
        out.resize((size_t)M * W * 4);
        for (int i = 0; i < M; i++) memcpy(out.data() + (size_t)i * W * 4, &h[(size_t)i * DS], W * 4);
    };
    std::vector<float> ref((size_t)MAXM * W);
    for (int i = 0; i < MAXM; i++) memcpy(&ref[(size_t)i * W], &src[(size_t)i * SS], W * 4);
    check_elementwise("copy_rows", W, run, ref);
}

/* Binary / unary element-wise ops over M rows of W: x op= y. */
void test_binary(const char *name, int W, float xscale, float yscale,
                 const std::function<void(ls_backend *, float *, const float *, int64_t)> &op, uint64_t seed) {
    Rng r(seed);
    std::vector<float> x = randv(r, (size_t)MAXM * W, xscale), y = randv(r, (size_t)MAXM * W, yscale);
    /* a few special values */
    const float sp[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 90.0f, -90.0f, 1e4f, -1e4f};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) x[i * 7] = sp[i];
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        const size_t n = (size_t)M * W;
        DBuf dx(G, n * 4), dy(G, n * 4);
        up(G, dx.p, x.data() + (size_t)r0 * W, n * 4);
        up(G, dy.p, y.data() + (size_t)r0 * W, n * 4);
        op(G, dx.f(), dy.f(), (int64_t)n);
        out.resize(n * 4);
        down(G, out.data(), dx.p, n * 4);
    };
    std::vector<float> ref = x;
    op(CPU, ref.data(), y.data(), (int64_t)ref.size());
    check_elementwise(name, W, run, ref);
}

/* CPU references for ops the CPU backend may not have yet (backend.h definitions; this
 * file is compiled with -ffp-contract=off, so each product and sum rounds on its own). */
void ref_scale(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * s;
}
void ref_axpby(float *x, const float *y, float a, float b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float t = y[i] * a;
        const float u = x[i] + t;
        x[i] = u * b;
    }
}
void ref_softcap(float *x, float cap, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}
void ref_mul_rows(float *x, const float *w, float s, int64_t m, int64_t n) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < n; i++) {
            const float t = x[r * n + i] * w[i];
            x[r * n + i] = t * s;
        }
}

void test_elementwise() {
    test_binary("add", 1000, 1.0f, 1.0f,
                [](ls_backend *be, float *x, const float *y, int64_t n) { be->ops->add(be, x, y, n); }, 21);
    test_binary("gelu_mul", 1536, 3.0f, 1.0f,
                [](ls_backend *be, float *x, const float *y, int64_t n) { be->ops->gelu_mul(be, x, y, n); }, 22);
    test_binary("scale", 999, 1.0f, 1.0f,
                [](ls_backend *be, float *x, const float *, int64_t n) {
                    if (be == CPU && !be->ops->scale)
                        ref_scale(x, 0.7071f, n);
                    else
                        be->ops->scale(be, x, 0.7071f, n);
                },
                23);
    test_binary("axpby (b = 1)", 1000, 1.0f, 1.0f,
                [](ls_backend *be, float *x, const float *y, int64_t n) {
                    if (be == CPU && !be->ops->axpby)
                        ref_axpby(x, y, 0.3f, 1.0f, n);
                    else
                        be->ops->axpby(be, x, y, 0.3f, 1.0f, n);
                },
                24);
    test_binary("axpby (b = 0.83)", 1000, 1.0f, 1.0f,
                [](ls_backend *be, float *x, const float *y, int64_t n) {
                    if (be == CPU && !be->ops->axpby)
                        ref_axpby(x, y, -1.7f, 0.83f, n);
                    else
                        be->ops->axpby(be, x, y, -1.7f, 0.83f, n);
                },
                25);
    test_binary("softcap", 1000, 40.0f, 1.0f,
                [](ls_backend *be, float *x, const float *, int64_t n) {
                    if (be == CPU && !be->ops->softcap)
                        ref_softcap(x, 30.0f, n);
                    else
                        be->ops->softcap(be, x, 30.0f, n);
                },
                26);
}

void test_mul_rows() {
    Rng r(31);
    const int W = 1152;
    Mapped w(randv(r, W, 1.0f));
    const std::vector<float> x = randv(r, (size_t)MAXM * W, 1.0f);
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        const size_t n = (size_t)M * W;
        DBuf dx(G, n * 4);
        up(G, dx.p, x.data() + (size_t)r0 * W, n * 4);
        G->ops->mul_rows(G, dx.f(), w.v.data(), 1.37f, M, W);
        out.resize(n * 4);
        down(G, out.data(), dx.p, n * 4);
    };
    std::vector<float> ref = x;
    if (CPU->ops->mul_rows)
        CPU->ops->mul_rows(CPU, ref.data(), w.v.data(), 1.37f, MAXM, W);
    else
        ref_mul_rows(ref.data(), w.v.data(), 1.37f, MAXM, W);
    check_elementwise("mul_rows", W, run, ref);
}

void test_kv_store() {
    Rng r(41);
    const int W = 512;
    std::vector<float> x = randv(r, (size_t)MAXM * W, 4.0f);
    x[0] = 70000.0f;  /* overflows f16 */
    x[1] = 1e-6f;     /* f16 subnormal */
    x[2] = 6.1e-5f;   /* near the smallest normal */
    x[3] = 2049.0f;   /* a tie: rounds to even */
    x[4] = -2051.0f;  /* a tie: rounds to even */
    x[5] = 1e-9f;     /* to zero */
    for (int f32 = 0; f32 <= 1; f32++) {
        const size_t eb = f32 ? 4 : 2;
        RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
            const size_t n = (size_t)M * W;
            DBuf dx(G, n * 4), dc(G, n * eb + 64);
            up(G, dx.p, x.data() + (size_t)r0 * W, n * 4);
            /* at an offset: a cache row range need not start a buffer */
            G->ops->kv_store(G, (char *)dc.p + 64, f32 != 0, dx.f(), (int64_t)n);
            out.resize(n * eb);
            down(G, out.data(), (char *)dc.p + 64, n * eb);
        };
        const char *name = f32 ? "kv_store f32" : "kv_store f16";
        const bool inv = invariance(name, W * eb, run);
        std::vector<uint8_t> full;
        run(0, MAXM, full);
        size_t nd = 0;
        if (f32) {
            nd = memcmp(full.data(), x.data(), full.size()) != 0;
        } else {
            const uint16_t *h = (const uint16_t *)full.data();
            for (size_t i = 0; i < x.size(); i++) nd += h[i] != ls_f32_to_f16(x[i]);
        }
        report(name, inv && nd == 0, "invariant %s; %zu elements differ from the CPU's rounding", inv ? "yes" : "NO",
               nd);
    }
}

void test_gather_rows() {
    Rng r(51);
    const int D = 700, NSRC = 97;
    const std::vector<float> src = randv(r, (size_t)NSRC * D, 1.0f);
    std::vector<int32_t> rows(MAXM);
    for (auto &x : rows) x = r.below(NSRC);
    DBuf ds(G, src.size() * 4);
    up(G, ds.p, src.data(), src.size() * 4);
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        DBuf di(G, (size_t)M * 4), dd(G, (size_t)M * D * 4);
        up(G, di.p, rows.data() + r0, (size_t)M * 4);
        G->ops->gather_rows(G, dd.f(), ds.f(), di.i(), M, D);
        out.resize((size_t)M * D * 4);
        down(G, out.data(), dd.p, out.size());
    };
    std::vector<float> ref((size_t)MAXM * D);
    for (int j = 0; j < MAXM; j++) memcpy(&ref[(size_t)j * D], &src[(size_t)rows[j] * D], D * 4);
    check_elementwise("gather_rows", D, run, ref);
}

void test_scatter_add() {
    Rng r(61);
    const int D = 640, NACC = 150;
    const std::vector<float> acc0 = randv(r, (size_t)NACC * D, 1.0f), y = randv(r, (size_t)MAXM * D, 1.0f),
                             w = randv(r, MAXM, 1.0f);
    std::vector<int32_t> perm(NACC);
    for (int i = 0; i < NACC; i++) perm[i] = i;
    for (int i = NACC - 1; i > 0; i--) std::swap(perm[i], perm[r.below(i + 1)]);
    const std::vector<int32_t> rows(perm.begin(), perm.begin() + MAXM); /* distinct */
    DBuf da(G, acc0.size() * 4);
    /* "row j" of the output is acc[rows[j]] after the call */
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        DBuf di(G, (size_t)M * 4), dy(G, (size_t)M * D * 4), dw(G, (size_t)M * 4);
        up(G, da.p, acc0.data(), acc0.size() * 4);
        up(G, di.p, rows.data() + r0, (size_t)M * 4);
        up(G, dy.p, y.data() + (size_t)r0 * D, (size_t)M * D * 4);
        up(G, dw.p, w.data() + r0, (size_t)M * 4);
        G->ops->scatter_add(G, da.f(), dy.f(), di.i(), dw.f(), M, D);
        std::vector<float> h(acc0.size());
        down(G, h.data(), da.p, h.size() * 4);
        out.resize((size_t)M * D * 4);
        for (int j = 0; j < M; j++) memcpy(out.data() + (size_t)j * D * 4, &h[(size_t)rows[r0 + j] * D], D * 4);
    };
    std::vector<float> acc = acc0;
    if (CPU->ops->scatter_add) {
        CPU->ops->scatter_add(CPU, acc.data(), y.data(), rows.data(), w.data(), MAXM, D);
    } else {
        for (int j = 0; j < MAXM; j++)
            for (int i = 0; i < D; i++) {
                const float t = y[(size_t)j * D + i] * w[j];
                acc[(size_t)rows[j] * D + i] = acc[(size_t)rows[j] * D + i] + t;
            }
    }
    std::vector<float> ref((size_t)MAXM * D);
    for (int j = 0; j < MAXM; j++) memcpy(&ref[(size_t)j * D], &acc[(size_t)rows[j] * D], D * 4);
    /* rows not in rows[] must be untouched */
    std::vector<uint8_t> full;
    run(0, MAXM, full);
    std::vector<float> h(acc0.size());
    down(G, h.data(), da.p, h.size() * 4);
    size_t touched = 0;
    for (int i = MAXM; i < NACC; i++) touched += memcmp(&h[(size_t)perm[i] * D], &acc0[(size_t)perm[i] * D], D * 4) != 0;
    if (touched) report("scatter_add", false, "%zu rows outside rows[] changed", touched);
    check_elementwise("scatter_add", D, run, ref);
}

/* ---- rmsnorm, rope ------------------------------------------------------------------ */

void test_rmsnorm(int n, bool with_w) {
    char name[64];
    snprintf(name, sizeof name, "rmsnorm n=%d%s", n, with_w ? "" : " (no w)");
    Rng r(71 + n);
    /* w inside a larger mapped range (not at its base): translation keeps the offset */
    Mapped wbig(randv(r, (size_t)n + 100, 1.0f));
    const float *w = with_w ? wbig.v.data() + 37 : nullptr;
    std::vector<float> x = randv(r, (size_t)MAXM * n, 1.0f);
    for (int i = 0; i < n; i++) x[(size_t)5 * n + i] *= 1e-3f; /* rows of very different scale */
    for (int i = 0; i < n; i++) x[(size_t)6 * n + i] *= 1e3f;
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        const size_t cnt = (size_t)M * n;
        DBuf dx(G, cnt * 4);
        up(G, dx.p, x.data() + (size_t)r0 * n, cnt * 4);
        G->ops->rmsnorm(G, dx.f(), w, M, n, 1e-6f);
        out.resize(cnt * 4);
        down(G, out.data(), dx.p, cnt * 4);
    };
    const bool inv = invariance(name, (size_t)n * 4, run);
    std::vector<float> ref = x;
    CPU->ops->rmsnorm(CPU, ref.data(), w, MAXM, n, 1e-6f);
    std::vector<uint8_t> full;
    run(0, MAXM, full);
    double worst = 0.0;
    for (int i = 0; i < MAXM; i++)
        worst = std::max(worst, rel_l2(as_f(full) + (size_t)i * n, ref.data() + (size_t)i * n, n));
    report(name, inv && worst <= 1e-5, "invariant %s; vs cpu worst row rel L2 %.3g", inv ? "yes" : "NO", worst);
}

void test_rope(int hd, int n_pairs, float theta, float fscale) {
    char name[64];
    snprintf(name, sizeof name, "rope hd=%d pairs=%d", hd, n_pairs);
    Rng r(81 + hd + n_pairs);
    const int H = 5, W = H * hd;
    const std::vector<float> x = randv(r, (size_t)MAXM * W, 1.0f);
    std::vector<int32_t> pos(MAXM);
    for (auto &p : pos) p = r.below(9000);
    pos[0] = 0;
    pos[1] = 131071;
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        const size_t cnt = (size_t)M * W;
        DBuf dx(G, cnt * 4), dp(G, (size_t)M * 4);
        up(G, dx.p, x.data() + (size_t)r0 * W, cnt * 4);
        up(G, dp.p, pos.data() + r0, (size_t)M * 4);
        G->ops->rope_pairs(G, dx.f(), M, H, hd, n_pairs, dp.i(), theta, fscale);
        out.resize(cnt * 4);
        down(G, out.data(), dx.p, cnt * 4);
    };
    const bool inv = invariance(name, (size_t)W * 4, run);
    std::vector<float> ref = x;
    CPU->ops->rope_pairs(CPU, ref.data(), MAXM, H, hd, n_pairs, pos.data(), theta, fscale);
    std::vector<uint8_t> full;
    run(0, MAXM, full);
    size_t nd = 0;
    const double e = rel_l2(as_f(full), ref.data(), ref.size());
    max_rel(as_f(full), ref.data(), ref.size(), &nd);
    /* pairs past n_pairs must be untouched */
    size_t moved = 0;
    for (int i = 0; i < MAXM; i++)
        for (int h = 0; h < H; h++)
            for (int j = n_pairs; j < hd / 2; j++) {
                const size_t a = (size_t)i * W + (size_t)h * hd + j;
                moved += as_f(full)[a] != x[a] || as_f(full)[a + hd / 2] != x[a + hd / 2];
            }
    report(name, inv && e <= 1e-5 && moved == 0, "invariant %s; vs cpu rel L2 %.3g (%zu/%zu not bit-equal)%s",
           inv ? "yes" : "NO", e, nd, ref.size(), moved ? "; UNROTATED PAIRS CHANGED" : "");
}

/* ---- attention ---------------------------------------------------------------------- */

struct AttnCase {
    const char *name;
    int hd, n_head, n_kv;
    bool f32, strictly_before;
    int first_pos, n_slots, window;
    int misalign; /* bytes added to the K / V pointers (scalar load path) */
};

void test_attention(const AttnCase &c) {
    Rng r(91 + c.hd * 7 + c.n_slots);
    const int Wq = c.n_head * c.hd, Wkv = c.n_kv * c.hd;
    const size_t eb = c.f32 ? 4 : 2;
    const float scale = 1.0f / sqrtf((float)c.hd) * 1.5f;
    const std::vector<float> q = randv(r, (size_t)MAXM * Wq, 1.0f);
    /* K / V as the cache holds them (f16 values rounded once; the CPU reads the same bits) */
    const size_t nkv = (size_t)c.n_slots * Wkv;
    std::vector<uint8_t> kh(nkv * eb + 16), vh(nkv * eb + 16);
    {
        const std::vector<float> kf = randv(r, nkv, 1.0f), vf = randv(r, nkv, 1.0f);
        for (size_t i = 0; i < nkv; i++) {
            if (c.f32) {
                memcpy(&kh[i * 4], &kf[i], 4);
                memcpy(&vh[i * 4], &vf[i], 4);
            } else {
                const uint16_t a = ls_f32_to_f16(kf[i]), b = ls_f32_to_f16(vf[i]);
                memcpy(&kh[i * 2], &a, 2);
                memcpy(&vh[i * 2], &b, 2);
            }
        }
    }
    /* positions whose visible keys lie in the filled slots; some rows see nothing when the
     * cache starts at 0 and keys are strictly before */
    const int sb = c.strictly_before ? 1 : 0;
    int pmin = c.first_pos + sb, pmax = c.first_pos + c.n_slots - 1 + sb;
    if (c.first_pos > 0) pmin = std::max(pmin, c.first_pos + c.window - 1); /* needs a window */
    if (c.first_pos == 0 && sb) pmin = 0;
    std::vector<int32_t> pos(MAXM);
    for (auto &p : pos) p = pmin + r.below(pmax - pmin + 1);
    pos[0] = pmax;
    pos[1] = pmin;
    pos[2] = std::max(pmin, std::min(pmax, (pmin + pmax) / 2 / 256 * 256)); /* a chunk boundary */
    pos[3] = std::max(pmin, std::min(pmax, pos[2] - 1));

    DBuf dk(G, kh.size()), dv(G, vh.size());
    void *kp = (char *)dk.p + c.misalign, *vp = (char *)dv.p + c.misalign;
    up(G, kp, kh.data(), nkv * eb);
    up(G, vp, vh.data(), nkv * eb);
    RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
        DBuf dq(G, (size_t)M * Wq * 4), dout(G, (size_t)M * Wq * 4), dp(G, (size_t)M * 4);
        up(G, dq.p, q.data() + (size_t)r0 * Wq, (size_t)M * Wq * 4);
        up(G, dp.p, pos.data() + r0, (size_t)M * 4);
        G->ops->fill(G, dout.f(), NAN, (int64_t)M * Wq); /* poison: every element must be written */
        ls_attn_args a;
        memset(&a, 0, sizeof a);
        a.q = dq.f();
        a.out = dout.f();
        a.k = kp;
        a.v = vp;
        a.kv_f32 = c.f32;
        a.strictly_before = c.strictly_before;
        a.m = M;
        a.n_head = c.n_head;
        a.n_kv = c.n_kv;
        a.hd = c.hd;
        a.q_pos = dp.i();
        a.first_pos = c.first_pos;
        a.n_slots = c.n_slots;
        a.window = c.window;
        a.scale = scale;
        G->ops->attention(G, &a);
        out.resize((size_t)M * Wq * 4);
        down(G, out.data(), dout.p, out.size());
    };
    const bool inv = invariance(c.name, (size_t)Wq * 4, run);

    std::vector<float> ref((size_t)MAXM * Wq);
    ls_attn_args a;
    memset(&a, 0, sizeof a);
    a.q = q.data();
    a.out = ref.data();
    a.k = kh.data();
    a.v = vh.data();
    a.kv_f32 = c.f32;
    a.strictly_before = c.strictly_before;
    a.m = MAXM;
    a.n_head = c.n_head;
    a.n_kv = c.n_kv;
    a.hd = c.hd;
    a.q_pos = pos.data();
    a.first_pos = c.first_pos;
    a.n_slots = c.n_slots;
    a.window = c.window;
    a.scale = scale;
    CPU->ops->attention(CPU, &a);
    std::vector<uint8_t> full;
    run(0, MAXM, full);
    double worst = 0.0;
    int zero_rows = 0;
    for (int i = 0; i < MAXM; i++)
        for (int h = 0; h < c.n_head; h++) {
            const size_t off = ((size_t)i * c.n_head + h) * c.hd;
            bool z = true;
            for (int d = 0; d < c.hd; d++) z = z && ref[off + d] == 0.0f;
            zero_rows += z;
            worst = std::max(worst, rel_l2(as_f(full) + off, ref.data() + off, c.hd));
        }
    /* one- and two-row calls with one query vector a block off (wide tiles): the same bits as
     * the 64-row call (the default takes one vector a block or wide tiles by the grid's size,
     * attention.cu split_pays, which the invariance check above sees at M = 1) */
    bool split_ok = true;
#if TEST_ATTN_SWITCHES
    ls_cuda_attention_set_switches(true, false);
    for (int r0 = 0; r0 < 4 && split_ok; r0++) {
        std::vector<uint8_t> o;
        run(r0, 1 + (r0 & 1), o);
        split_ok = memcmp(o.data(), full.data() + (size_t)r0 * Wq * 4, o.size()) == 0;
    }
    ls_cuda_attention_set_switches(true, true);
#endif
    /* the same 64 rows through a backend whose scratch holds only a few rows at a time */
    bool grouped_ok = true;
    {
        DBuf dq(GS, (size_t)MAXM * Wq * 4), dout(GS, (size_t)MAXM * Wq * 4), dp(GS, (size_t)MAXM * 4);
        DBuf gk(GS, kh.size()), gv(GS, vh.size());
        up(GS, (char *)gk.p + c.misalign, kh.data(), nkv * eb);
        up(GS, (char *)gv.p + c.misalign, vh.data(), nkv * eb);
        up(GS, dq.p, q.data(), (size_t)MAXM * Wq * 4);
        up(GS, dp.p, pos.data(), (size_t)MAXM * 4);
        ls_attn_args g = a;
        g.q = dq.f();
        g.out = dout.f();
        g.k = (char *)gk.p + c.misalign;
        g.v = (char *)gv.p + c.misalign;
        g.q_pos = dp.i();
        GS->ops->attention(GS, &g);
        std::vector<uint8_t> h((size_t)MAXM * Wq * 4);
        down(GS, h.data(), dout.p, h.size());
        grouped_ok = memcmp(h.data(), full.data(), h.size()) == 0;
    }
    report(c.name, inv && grouped_ok && split_ok && worst <= 1e-5,
           "invariant %s%s%s; vs cpu worst (row, head) rel L2 %.3g; %d empty heads", inv ? "yes" : "NO",
           grouped_ok ? "" : " (ROW GROUPS DIFFER)", split_ok ? "" : " (WIDE TILES DIFFER)", worst, zero_rows);
}

/* ---- copy with overlap (d) ---------------------------------------------------------- */

/* The CUDA backend's host buffers (src/kernels/host_buffer.c) are page-locked, not the plain
 * fallback: the driver reports them as registered host memory, and a download into one
 * arrives whole. test_backend_ops checks the contents on every backend; this checks the kind. */
void test_host_buffer() {
    const size_t n = 262144; /* one Gemma logits row */
    float *h = (float *)ls_host_buffer_alloc(G, n * sizeof(float));
    cudaPointerAttributes at = {};
    const bool got = h && cudaPointerGetAttributes(&at, h) == cudaSuccess;
    const bool locked = got && at.type == cudaMemoryTypeHost;
    bool same = false;
    if (h) {
        std::vector<float> want(n);
        Rng r(7);
        for (float &v : want) v = r.normal(1.0f);
        DBuf d(G, n * sizeof(float));
        G->ops->upload(G, d.p, want.data(), n * sizeof(float));
        memset(h, 0, n * sizeof(float));
        G->ops->download(G, h, d.p, n * sizeof(float));
        same = memcmp(h, want.data(), n * sizeof(float)) == 0;
    }
    (void)cudaGetLastError(); /* a plain pointer may leave cudaErrorInvalidValue on older drivers */
    report("host buffer page-locked", h && locked && same, "memory type %d (%d = page-locked host), download %s",
           got ? (int)at.type : -1, (int)cudaMemoryTypeHost, same ? "exact" : "differs");
    ls_host_buffer_free(h);
}

void test_copy() {
    Rng r(101);
    const size_t N = (size_t)48 << 20;
    std::vector<uint8_t> h(N);
    for (size_t i = 0; i < N; i += 8) {
        const uint64_t v = r.next();
        memcpy(&h[i], &v, 8);
    }
    DBuf d(G, N);
    struct C {
        size_t dst, src, len;
    };
    const size_t MB = (size_t)1 << 20;
    const C cases[] = {
        {0, 10 * MB, 5 * MB},            /* disjoint */
        {20 * MB, 3 * MB, 10 * MB},      /* disjoint, dst > src */
        {100, 100, 5000},                /* dst == src */
        {0, 4, 20 * MB},                 /* dst < src, gap 4: staged pieces */
        {4, 0, 20 * MB},                 /* dst > src, gap 4: staged */
        {1000, 1001, 77777},             /* gap 1, odd sizes: staged, one piece */
        {1001, 1000, 77777},
        {MB, 2 * MB, 30 * MB},           /* gap 1 MB, 30 pieces > 16: staged */
        {2 * MB, MB, 30 * MB},
        {0, 3 * MB + 12, 20 * MB},       /* gap ~3 MB, 7 pieces: direct */
        {3 * MB + 12, 0, 20 * MB},
        {0, 9 * MB + 4, 30 * MB + 100},  /* gap >= staging: direct */
        {9 * MB + 4, 0, 30 * MB + 100},
        {64, 0, 100},                    /* small, overlapping by 36 */
        {0, 64, 100},
    };
    bool ok = true;
    int n = 0;
    for (const C &c : cases) {
        up(G, d.p, h.data(), N);
        std::vector<uint8_t> want = h, got(N);
        memmove(&want[c.dst], &want[c.src], c.len);
        G->ops->copy(G, (char *)d.p + c.dst, (char *)d.p + c.src, c.len);
        down(G, got.data(), d.p, N);
        if (memcmp(got.data(), want.data(), N) != 0) {
            ok = false;
            size_t b = 0;
            while (got[b] == want[b]) b++;
            printf("       copy dst %zu src %zu len %zu: first wrong byte %zu\n", c.dst, c.src, c.len, b);
        }
        n++;
    }
    report("copy (memmove)", ok, "%d cases (disjoint, equal, overlapping both ways, direct and staged)", n);
}

/* ---- matmul / get_rows (the other engineer's kernels, through this backend) --------- */

#if TEST_MATMUL
struct MMWeight {
    ls_weight w;
    std::vector<uint8_t> data, scales, biases;
};

/* A random weight of type t (rows x cols); false if the reference quantizer lacks t. */
bool make_weight(ls_type t, int64_t rows, int64_t cols, Rng &r, MMWeight &mw) {
    memset(&mw.w, 0, sizeof mw.w);
    const std::vector<float> f = randv(r, (size_t)(rows * cols), 0.05f);
    mw.w.rows = rows;
    mw.w.cols = cols;
    if (t == LS_TYPE_MLX_AFFINE) {
        const int32_t bits = 4, group = 64;
        mw.data.resize((size_t)(rows * cols * bits / 8));
        mw.scales.resize((size_t)(rows * cols / group) * 2);
        mw.biases.resize((size_t)(rows * cols / group) * 2);
        if (ls_mlx_affine_quantize_ref(f.data(), rows, cols, bits, group, LS_TYPE_BF16, mw.data.data(),
                                       mw.scales.data(), mw.biases.data()) != 0)
            return false;
        mw.w.type = t;
        mw.w.row_bytes = (uint64_t)(cols * bits / 8);
        mw.w.sb_type = LS_TYPE_BF16;
        mw.w.bits = bits;
        mw.w.group = group;
    } else {
        const size_t rb = ls_row_size(t, cols);
        if (!rb) return false;
        mw.data.resize(rb * (size_t)rows);
        for (int64_t i = 0; i < rows; i++)
            if (ls_quantize_row_ref(t, f.data() + i * cols, mw.data.data() + rb * (size_t)i, cols) != 0) return false;
        mw.w.type = t;
        mw.w.row_bytes = rb;
    }
    mw.w.data = mw.data.data();
    mw.w.scales = mw.scales.empty() ? nullptr : mw.scales.data();
    mw.w.biases = mw.biases.empty() ? nullptr : mw.biases.data();
    return true;
}

/* Whether the CUDA matmul takes this weight (asked directly, on device copies). */
bool cuda_supports(const MMWeight &mw) {
    ls_weight d = mw.w;
    void *p[3] = {nullptr, nullptr, nullptr};
    const std::vector<uint8_t> *src[3] = {&mw.data, &mw.scales, &mw.biases};
    for (int i = 0; i < 3; i++)
        if (!src[i]->empty()) {
            if (cudaMalloc(&p[i], src[i]->size()) != cudaSuccess) die("cudaMalloc");
            if (cudaMemcpy(p[i], src[i]->data(), src[i]->size(), cudaMemcpyHostToDevice) != cudaSuccess)
                die("cudaMemcpy");
        }
    d.data = p[0];
    d.scales = p[1];
    d.biases = p[2];
    float *x = nullptr, *y = nullptr;
    if (cudaMalloc(&x, (size_t)d.cols * 4) != cudaSuccess || cudaMalloc(&y, (size_t)d.rows * 4) != cudaSuccess)
        die("cudaMalloc");
    cudaMemset(x, 0, (size_t)d.cols * 4);
    void *scr = nullptr;
    const size_t scr_bytes = ls_cuda_mmq_scratch_bytes(1, d.cols);
    if (cudaMalloc(&scr, scr_bytes) != cudaSuccess) die("cudaMalloc");
    const int rc = ls_cuda_matmul(0, &d, x, 1, y, scr, scr_bytes);
    cudaFree(scr);
    if (cudaDeviceSynchronize() != cudaSuccess) die("probe matmul failed");
    for (int i = 0; i < 3; i++) cudaFree(p[i]);
    cudaFree(x);
    cudaFree(y);
    return rc == 0;
}

void test_matmul() {
    const ls_type types[] = {LS_TYPE_F32,  LS_TYPE_F16,  LS_TYPE_BF16, LS_TYPE_Q8_0,       LS_TYPE_Q4_0,
                             LS_TYPE_Q4_K, LS_TYPE_Q5_K, LS_TYPE_Q6_K, LS_TYPE_MLX_AFFINE};
    const int64_t N = 272, Kc = 512;
    for (ls_type t : types) {
        char name[64];
        snprintf(name, sizeof name, "matmul %s", t == LS_TYPE_MLX_AFFINE ? "mlx4-bf16" : ls_type_name(t));
        Rng r(200 + (uint64_t)t);
        MMWeight mw;
        if (!make_weight(t, N, Kc, r, mw)) {
            printf("skip   %-34s no reference quantizer\n", name);
            continue;
        }
        if (!cuda_supports(mw)) {
            printf("skip   %-34s the CUDA matmul answers -1\n", name);
            continue;
        }
        char err[256] = "";
        const void *ranges[3] = {mw.w.data, mw.w.scales, mw.w.biases};
        const size_t sizes[3] = {mw.data.size(), mw.scales.size(), mw.biases.size()};
        for (int i = 0; i < 3; i++)
            if (ranges[i] && K->map_const(ranges[i], sizes[i], err, sizeof err) != 0) die(err);
        const std::vector<float> x = randv(r, (size_t)MAXM * Kc, 1.0f);
        RunFn run = [&](int r0, int M, std::vector<uint8_t> &out) {
            DBuf dx(G, (size_t)M * Kc * 4), dy(G, (size_t)M * N * 4);
            up(G, dx.p, x.data() + (size_t)r0 * Kc, (size_t)M * Kc * 4);
            G->ops->matmul(G, &mw.w, dx.f(), M, dy.f());
            out.resize((size_t)M * N * 4);
            down(G, out.data(), dy.p, out.size());
        };
        const bool inv = invariance(name, (size_t)N * 4, run);
        std::vector<float> ref((size_t)MAXM * N);
        CPU->ops->matmul(CPU, &mw.w, x.data(), MAXM, ref.data());
        std::vector<uint8_t> full;
        run(0, MAXM, full);
        const double e = rel_l2(as_f(full), ref.data(), ref.size());
        report(name, inv && e <= 3e-2, "invariant %s; vs cpu rel L2 %.3g", inv ? "yes" : "NO", e);
        if (t == LS_TYPE_F32) {
            /* the same weight as a backend buffer made at run time (in_backend: not translated) */
            DBuf dwt(G, mw.data.size());
            up(G, dwt.p, mw.data.data(), mw.data.size());
            MMWeight bw;
            bw.w = mw.w;
            bw.w.data = dwt.p;
            bw.w.in_backend = true;
            DBuf dx(G, (size_t)MAXM * Kc * 4), dy(G, (size_t)MAXM * N * 4);
            up(G, dx.p, x.data(), (size_t)MAXM * Kc * 4);
            G->ops->matmul(G, &bw.w, dx.f(), MAXM, dy.f());
            std::vector<uint8_t> got((size_t)MAXM * N * 4);
            down(G, got.data(), dy.p, got.size());
            report("matmul f32 in_backend", memcmp(got.data(), full.data(), got.size()) == 0,
                   "backend-buffer weight == the same weight mapped, bit for bit");
        }

        /* get_rows of the same table */
        snprintf(name, sizeof name, "get_rows %s", t == LS_TYPE_MLX_AFFINE ? "mlx4-bf16" : ls_type_name(t));
        std::vector<int32_t> ids(MAXM);
        for (auto &v : ids) v = r.below((int)N);
        RunFn rg = [&](int r0, int M, std::vector<uint8_t> &out) {
            DBuf di(G, (size_t)M * 4), dd(G, (size_t)M * Kc * 4);
            up(G, di.p, ids.data() + r0, (size_t)M * 4);
            G->ops->get_rows(G, &mw.w, di.i(), M, dd.f());
            out.resize((size_t)M * Kc * 4);
            down(G, out.data(), dd.p, out.size());
        };
        const bool ginv = invariance(name, (size_t)Kc * 4, rg);
        std::vector<float> gref((size_t)MAXM * Kc);
        CPU->ops->get_rows(CPU, &mw.w, ids.data(), MAXM, gref.data());
        rg(0, MAXM, full);
        const double ge = rel_l2(as_f(full), gref.data(), gref.size());
        report(name, ginv && ge <= 1e-5, "invariant %s; vs cpu rel L2 %.3g", ginv ? "yes" : "NO", ge);
        for (int i = 0; i < 3; i++)
            if (ranges[i]) K->unmap_const(ranges[i]);
    }
}
#endif

/* ---- graphs (c) --------------------------------------------------------------------- */

/* The buffers of one backend for the graph test. */
struct Chain {
    ls_backend *be;
    static constexpr int NH = 8, NKV = 4, HD = 128, D = NH * HD, DKV = NKV * HD, S0 = 300, SLOTS = 300 + MAXM;
    DBuf x[2], y, kin, vin, pos, o, g, acc, z, tmp, kc, vc, rows, wts;
    explicit Chain(ls_backend *b)
        : be(b), x{DBuf(b, (size_t)MAXM * D * 4), DBuf(b, (size_t)MAXM * D * 4)}, y(b, (size_t)MAXM * D * 4),
          kin(b, (size_t)MAXM * DKV * 4), vin(b, (size_t)MAXM * DKV * 4), pos(b, (size_t)MAXM * 4),
          o(b, (size_t)MAXM * D * 4), g(b, (size_t)MAXM * D * 4), acc(b, (size_t)MAXM * D * 4),
          z(b, (size_t)MAXM * D * 4), tmp(b, 64), kc(b, (size_t)SLOTS * DKV * 2), vc(b, (size_t)SLOTS * DKV * 2),
          rows(b, (size_t)MAXM * 4), wts(b, (size_t)MAXM * 4) {}
};

void chain_step(Chain &c, int M, int which, const float *w_host, bool capture, int64_t key) {
    ls_backend *be = c.be;
    const ls_backend_ops *o = be->ops;
    float *x = c.x[which].f();
    if (capture) o->step_begin(be, key);
    o->rmsnorm(be, x, w_host, M, Chain::D, 1e-6f);
    o->rope_pairs(be, x, M, Chain::NH, Chain::HD, Chain::HD / 2, c.pos.i(), 10000.0f, 1.0f);
    o->kv_store(be, (uint16_t *)c.kc.p + (size_t)Chain::S0 * Chain::DKV, false, c.kin.f(), (int64_t)M * Chain::DKV);
    o->kv_store(be, (uint16_t *)c.vc.p + (size_t)Chain::S0 * Chain::DKV, false, c.vin.f(), (int64_t)M * Chain::DKV);
    ls_attn_args a;
    memset(&a, 0, sizeof a);
    a.q = x;
    a.out = c.o.f();
    a.k = c.kc.p;
    a.v = c.vc.p;
    a.m = M;
    a.n_head = Chain::NH;
    a.n_kv = Chain::NKV;
    a.hd = Chain::HD;
    a.q_pos = c.pos.i();
    a.first_pos = 0;
    a.n_slots = Chain::S0 + M;
    a.window = 0;
    a.scale = 0.088f;
    o->attention(be, &a);
    const int64_t n = (int64_t)M * Chain::D;
    o->gelu_mul(be, c.o.f(), c.y.f(), n);
    o->axpby(be, c.o.f(), x, 0.5f, 1.0f, n);
    o->mul_rows(be, c.o.f(), w_host, 0.7f, M, Chain::D);
    o->softcap(be, c.o.f(), 30.0f, n);
    o->add(be, c.o.f(), c.y.f(), n);
    o->scale(be, c.o.f(), 0.9f, n);
    o->gather_rows(be, c.g.f(), c.o.f(), c.rows.i(), M, Chain::D);
    o->scatter_add(be, c.acc.f(), c.g.f(), c.rows.i(), c.wts.f(), M, Chain::D);
    if (M > 1) o->copy(be, c.o.f() + Chain::D, c.o.f(), (size_t)(M - 1) * Chain::D * 4); /* overlapping */
    o->copy_rows(be, c.z.f(), Chain::D, c.o.f(), Chain::D, Chain::D, M);
    o->fill(be, c.tmp.f(), 1.5f, 7);
    /* a residual step after 16 recorded launches: with graphs, the step's first segment is
     * submitted before it (docs/cuda.md 2b), the rest at step_end */
    o->scale(be, c.z.f(), 1.25f, n);
    o->add_rmsnorm(be, c.acc.f(), c.g.f(), w_host, 0.75f, c.z.f(), w_host, M, Chain::D, 1e-6f);
    o->softcap(be, c.z.f(), 20.0f, n);
    if (capture) o->step_end(be);
}

void test_graphs() {
    ls_backend_set_graphs(false); /* ls_test_control(LS_TESTCTL_CUDA_GRAPHS, 0) */
    ls_backend_params p = {1, MAXM, 8192, 4096};
    ls_backend *bd = K->create(&p);
    ls_backend_set_graphs(true);
    ls_backend *bg = K->create(&p);
    if (!bd || !bg) die("create");
    Rng r(301);
    Mapped w(randv(r, Chain::D, 1.0f));
    bool ok = true;
    int steps = 0;
    int64_t tn, th, td;
    ls_backend_step_times_take(&tn, &th, &td); /* from zero */
    ls_backend_set_step_timing(true);          /* ls_test_control(LS_TESTCTL_STEP_TIMES, 1, ..) */
    size_t nkeys = 0;
#if TEST_ATTN_SWITCHES
    const int64_t seg0 = ls_cuda_step_segments();
#endif
    {
        Chain cd(bd), cg(bg);
        /* same initial caches and accumulators */
        const std::vector<float> acc0 = randv(r, (size_t)MAXM * Chain::D, 1.0f);
        std::vector<uint16_t> cache0((size_t)Chain::SLOTS * Chain::DKV);
        for (auto &h : cache0) h = ls_f32_to_f16(r.normal(1.0f));
        for (Chain *c : {&cd, &cg}) {
            up(c->be, c->acc.p, acc0.data(), acc0.size() * 4);
            up(c->be, c->kc.p, cache0.data(), cache0.size() * 2);
            up(c->be, c->vc.p, cache0.data(), cache0.size() * 2);
        }
        /* repeated keys (graph update), more than 16 keys (eviction), alternating buffers */
        /* (M, key): repeated keys (graph update in place), more than 16 keys (eviction: two graphs a key),
         * one key whose graph changes shape with M (update fails: re-instantiated) */
        const int plan[][2] = {{1, 1},   {4, 4},   {1, 1},   {4, 4},   {8, 8},   {1, 1},   {17, 17}, {4, 4},
                               {2, 2},   {3, 3},   {5, 5},   {6, 6},   {7, 7},   {9, 9},   {10, 10}, {11, 11},
                               {12, 12}, {13, 13}, {14, 14}, {15, 15}, {16, 16}, {18, 18}, {19, 19}, {64, 64},
                               {20, 20}, {1, 1},   {4, 4},   {64, 64}, {1, 999}, {2, 999}, {1, 999}, {3, 999}};
        std::vector<int> keys;
        for (const auto &pk : plan) {
            const int M = pk[0];
            if (std::find(keys.begin(), keys.end(), pk[1]) == keys.end()) keys.push_back(pk[1]);
            const int which = steps & 1;
            const std::vector<float> x = randv(r, (size_t)M * Chain::D, 1.0f), y = randv(r, (size_t)M * Chain::D, 1.0f),
                                     kin = randv(r, (size_t)M * Chain::DKV, 1.0f),
                                     vin = randv(r, (size_t)M * Chain::DKV, 1.0f), wts = randv(r, M, 1.0f);
            std::vector<int32_t> pos(M), rows(M);
            for (int i = 0; i < M; i++) {
                pos[i] = Chain::S0 + i;
                rows[i] = M - 1 - i;
            }
            for (Chain *c : {&cd, &cg}) {
                up(c->be, c->x[which].p, x.data(), x.size() * 4);
                up(c->be, c->y.p, y.data(), y.size() * 4);
                up(c->be, c->kin.p, kin.data(), kin.size() * 4);
                up(c->be, c->vin.p, vin.data(), vin.size() * 4);
                up(c->be, c->wts.p, wts.data(), wts.size() * 4);
                up(c->be, c->pos.p, pos.data(), pos.size() * 4);
                up(c->be, c->rows.p, rows.data(), rows.size() * 4);
            }
            /* the direct backend brackets too: with graphs off, step_begin / step_end are no-ops */
            chain_step(cd, M, which, w.v.data(), true, pk[1]);
            chain_step(cg, M, which, w.v.data(), true, pk[1]);
            const size_t nz = (size_t)M * Chain::D * 4, nacc = (size_t)MAXM * Chain::D * 4,
                         nc = (size_t)Chain::SLOTS * Chain::DKV * 2;
            std::vector<uint8_t> a(nacc), b(nacc);
            const struct {
                const char *what;
                size_t off_d, bytes;
            } outs[] = {{"z", 0, nz}, {"acc", 0, nacc}, {"k cache", 0, nc}, {"v cache", 0, nc}};
            const DBuf *bd_bufs[] = {&cd.z, &cd.acc, &cd.kc, &cd.vc}, *bg_bufs[] = {&cg.z, &cg.acc, &cg.kc, &cg.vc};
            for (int i = 0; i < 4; i++) {
                a.resize(outs[i].bytes);
                b.resize(outs[i].bytes);
                down(bd, a.data(), bd_bufs[i]->p, outs[i].bytes);
                down(bg, b.data(), bg_bufs[i]->p, outs[i].bytes);
                if (memcmp(a.data(), b.data(), outs[i].bytes) != 0) {
                    printf("       graph step %d (M=%d): %s differs from direct launches\n", steps, M, outs[i].what);
                    ok = false;
                }
            }
            /* and the step's result is not stale: z must hold this step's data (not NaN) */
            std::vector<float> zf((size_t)M * Chain::D);
            down(bg, zf.data(), cg.z.p, zf.size() * 4);
            for (float v : zf)
                if (!isfinite(v)) {
                    printf("       graph step %d (M=%d): non-finite output\n", steps, M);
                    ok = false;
                    break;
                }
            steps++;
        }
        nkeys = keys.size();
    }
    bd->ops->free(bd);
    bg->ops->free(bg);
    report("graph replay == direct", ok, "%d steps of a 20-op chain, %zu keys (updates, evictions, reshapes)", steps,
           nkeys);
#if TEST_ATTN_SWITCHES
    /* every recorded step of bg was submitted in two segments (bd records nothing) */
    const int64_t segs = ls_cuda_step_segments() - seg0;
    report("step segments", segs == steps, "%lld of %d recorded steps submitted in two segments", (long long)segs, steps);
#endif
    /* step timing: the replayed steps of bg alone (bd launches directly; a step captured into a
     * new graph is not counted), each with host and GPU time */
    ls_backend_set_step_timing(false);
    ls_backend_step_times_take(&tn, &th, &td);
    const int64_t replays = (int64_t)steps - (int64_t)nkeys;
    report("step timing", tn >= 1 && tn <= replays && th > 0 && td > 0,
           "%lld timed replays of at most %lld, host %.1f us, GPU %.1f us a step", (long long)tn, (long long)replays,
           tn ? th / 1e3 / (double)tn : 0.0, tn ? td / 1e3 / (double)tn : 0.0);
}

/* ---- timing (--bench): attention at decode and prefill shapes ---------------------- */

double now_s() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One attention call's time in us: `iters` launches back to back after 3 warm-up calls. */
double time_attention(ls_backend *be, const ls_attn_args &a, int iters) {
    for (int i = 0; i < 3; i++) be->ops->attention(be, &a);
    be->ops->sync(be);
    const double t0 = now_s();
    for (int i = 0; i < iters; i++) be->ops->attention(be, &a);
    be->ops->sync(be);
    return (now_s() - t0) / iters * 1e6;
}

/* Decode shapes (f32 caches: the MLX models' default) are timed twice, with one query vector
 * a block allowed (the backend's choice: attention.cu split_pays) and with it off, the
 * measurement behind split_pays' rule; the 31B's verify blocks of 4 rows at long contexts
 * (its global layers' tiles of 4 vectors read each chunk 8 times). */
void bench_attention() {
    ls_backend_params p = {1, 512, 16384, 8192};
    ls_backend *be = K->create(&p);
    if (!be) die("create");
    struct B {
        const char *name;
        int m, n_head, n_kv, hd, ctx, window;
        bool f32;
    } cases[] = {
        {"decode hd256 32/16 ctx4096", 1, 32, 16, 256, 4096, 0, false},
        {"decode hd256 32/16 ctx4096 win1024", 1, 32, 16, 256, 4096, 1024, false},
        {"decode hd512 32/4 ctx4096", 1, 32, 4, 512, 4096, 0, false},
        {"decode f32 hd256 32/16 ctx160", 1, 32, 16, 256, 160, 1024, true},
        {"decode f32 hd256 32/16 ctx512", 1, 32, 16, 256, 512, 1024, true},
        {"decode f32 hd256 32/16 ctx2048 win1024", 1, 32, 16, 256, 2048, 1024, true},
        {"decode f32 hd512 32/4 ctx160", 1, 32, 4, 512, 160, 0, true},
        {"decode f32 hd512 32/4 ctx512", 1, 32, 4, 512, 512, 0, true},
        {"decode f32 hd512 32/4 ctx1024", 1, 32, 4, 512, 1024, 0, true},
        {"decode f32 hd512 32/4 ctx2048", 1, 32, 4, 512, 2048, 0, true},
        {"decode f32 hd512 32/4 ctx3072", 1, 32, 4, 512, 3072, 0, true},
        {"decode f32 hd512 32/4 ctx4096", 1, 32, 4, 512, 4096, 0, true},
        {"decode f32 hd512 32/4 ctx8192", 1, 32, 4, 512, 8192, 0, true},
        {"verify4 f32 hd512 32/4 ctx2048", 4, 32, 4, 512, 2048, 0, true},
        {"verify4 f32 hd512 32/4 ctx8192", 4, 32, 4, 512, 8192, 0, true},
        {"verify4 f32 hd256 32/16 ctx2048 win1024", 4, 32, 16, 256, 2048, 1024, true},
        {"verify8 hd256 32/16 ctx4096", 8, 32, 16, 256, 4096, 0, false},
        {"prefill512 hd256 32/16 ctx512", 512, 32, 16, 256, 512, 0, false},
        {"prefill512 hd512 32/4 ctx512", 512, 32, 4, 512, 512, 0, false},
        {"prefill512 hd256 32/16 ctx4096", 512, 32, 16, 256, 4096, 0, false},
    };
    Rng r(999);
    for (const B &c : cases) {
        const size_t nkv = (size_t)c.ctx * c.n_kv * c.hd, nq = (size_t)c.m * c.n_head * c.hd;
        const size_t esz = c.f32 ? 4 : 2;
        std::vector<uint16_t> kh(c.f32 ? 0 : nkv);
        for (auto &h : kh) h = ls_f32_to_f16(r.normal(1.0f));
        const std::vector<float> kf = c.f32 ? randv(r, nkv, 1.0f) : std::vector<float>();
        const void *kv = c.f32 ? (const void *)kf.data() : (const void *)kh.data();
        const std::vector<float> q = randv(r, nq, 1.0f);
        std::vector<int32_t> pos(c.m);
        for (int i = 0; i < c.m; i++) pos[i] = c.ctx - c.m + i;
        DBuf dk(be, nkv * esz), dv(be, nkv * esz), dq(be, nq * 4), dout(be, nq * 4), dp(be, (size_t)c.m * 4);
        up(be, dk.p, kv, nkv * esz);
        up(be, dv.p, kv, nkv * esz);
        up(be, dq.p, q.data(), nq * 4);
        up(be, dp.p, pos.data(), (size_t)c.m * 4);
        ls_attn_args a;
        memset(&a, 0, sizeof a);
        a.q = dq.f();
        a.out = dout.f();
        a.k = dk.p;
        a.v = dv.p;
        a.m = c.m;
        a.n_head = c.n_head;
        a.n_kv = c.n_kv;
        a.hd = c.hd;
        a.q_pos = dp.i();
        a.n_slots = c.ctx;
        a.window = c.window;
        a.scale = 0.0625f;
        a.kv_f32 = c.f32;
        const int iters = c.m >= 512 ? 20 : 200;
        const double us = time_attention(be, a, iters);
        const int keys = c.window ? std::min(c.window, c.ctx) : c.ctx;
        const double kvbytes = (double)keys * c.n_kv * c.hd * esz * 2;
        printf("bench  %-40s %9.1f us  (K+V visible to the last row %.1f MB: %.0f GB/s)", c.name, us, kvbytes / 1e6,
               kvbytes / (us * 1e-6) / 1e9);
#if TEST_ATTN_SWITCHES
        if (c.m * (c.n_head / c.n_kv) <= 8) { /* calls the split may take (attention.cu kSplitMax) */
            ls_cuda_attention_set_switches(true, false);
            printf("; one vector a block off: %.1f us", time_attention(be, a, iters));
            ls_cuda_attention_set_switches(true, true);
        }
#endif
        printf("\n");
    }
    be->ops->free(be);
}

} // namespace

int main(int argc, char **argv) {
    if (!K->available()) {
        printf("SKIP: no CUDA device (%s)\n", K->device_name());
        return 77;
    }
    printf("device: %s\n", K->device_name());
    ls_backend_params p = {1, MAXM, 8192, 4096};
    G = K->create(&p);
    CPU = ls_backend_cpu_create(4, MAXM, 8192, 4096);
    ls_backend_params ps = {1, 2, 8192, 4096};
    GS = K->create(&ps);
    if (!G || !CPU || !GS) die("backend create failed");

    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench_attention();
        G->ops->free(G);
        GS->ops->free(GS);
        CPU->ops->free(CPU);
        return 0;
    }
    /* --attention: the attention cases only (e.g. under compute-sanitizer --tool racecheck) */
    const bool only_attention = argc > 1 && strcmp(argv[1], "--attention") == 0;
    if (only_attention) goto attention;
    test_fill();
    test_copy_rows();
    test_elementwise();
    test_mul_rows();
    test_kv_store();
    test_gather_rows();
    test_scatter_add();
    test_rmsnorm(1000, true);
    test_rmsnorm(5376, true);
    test_rmsnorm(256, false);
    test_rope(128, 64, 10000.0f, 1.0f);
    test_rope(256, 32, 1000000.0f, 1.0f); /* proportional (Gemma 4 global) */
    test_rope(512, 256, 1000000.0f, 0.125f);
attention:
    static const AttnCase cases[] = {
        {"attention hd256 g2 f16", 256, 8, 4, false, false, 0, 700, 0, 0},
        {"attention hd128 g4 f32 win sb", 128, 4, 1, true, true, 100, 900, 300, 0},
        {"attention hd512 g4 f16 sb", 512, 8, 2, false, true, 0, 600, 0, 0},
        {"attention hd32 g1 f16 win", 32, 16, 16, false, false, 0, 2000, 1024, 0},
        {"attention hd64 f32 one slot", 64, 2, 1, true, false, 0, 1, 0, 0},
        {"attention hd96 g3 f16 unaligned", 96, 6, 2, false, false, 0, 530, 0, 2},
        {"attention hd160 g1 f32 win unaligned", 160, 2, 2, true, true, 257, 800, 500, 4},
        {"attention hd256 g8 f16 long", 256, 16, 2, false, false, 0, 4000, 0, 0},
        {"attention hd512 g8 f32 long", 512, 16, 2, true, false, 0, 4000, 0, 0},
    };
    for (const AttnCase &c : cases) test_attention(c);
    if (only_attention) goto done;
    test_copy();
    test_host_buffer();
#if TEST_MATMUL
    test_matmul();
#else
    printf("skip   %-34s kernels/cuda/cuda_matmul.h not in this tree\n", "matmul / get_rows");
#endif
    test_graphs();
done:
    G->ops->free(G);
    GS->ops->free(GS);
    CPU->ops->free(CPU);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("FAIL   device error at exit: %s\n", cudaGetErrorString(e));
        g_failures++;
    }
    printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
    return g_failures ? 1 : 0;
}
