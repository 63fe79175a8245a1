/* Backend conformance harness (in the spirit of ggml's test-backend-ops): every op of
 * ls_backend_ops (kernels/backend.h) on every device kind present: "cpu" always, "cuda" when
 * this build has it and its available() says a GPU answers (the file runs unchanged there).
 *
 * Per kind the harness creates two backend instances of that kind: `be` (3 CPU threads)
 * makes the batched calls, `be1` (1 CPU thread) the single-row calls, so a row is compared
 * across row counts, thread counts and instances at once. Weights and norm vectors are host
 * memory mapped with map_const (unmapped at the end of each test); every activation, index
 * and KV buffer comes from alloc; bytes move only with upload / download: backend memory is
 * never dereferenced (it is device memory on CUDA). For each op:
 *
 *  (a) invariance: every row of an m-row call is memcmp-identical to that row computed by a
 *      1-row call, for m = 1..64 (cheap ops) or M_LIST (matmul, get_rows, attention), with
 *      the m rows taken at the start and at the end of the 64 input rows; rows outside the
 *      call and guard words after an output must stay untouched. Attention queries are also
 *      run in reversed order (the same query in a different batch, next to other queries).
 *  (b) accuracy: the 1-row results against a double-precision reference written here
 *      (straightforward loops; weights dequantized with the traits' dequantize_row, the
 *      format reference; MLX affine as scale * q + bias from its own bit unpacker). The
 *      tolerances, and why, are in the TOL_* table below.
 *  (c) with a second kind: its 1-row results against the first kind's ("cpu"), within the
 *      sum of both kinds' tolerances (exact ops: bit for bit).
 *  (d) fused ops (rmsnorm_to, add_rmsnorm, norm_rope, kv_store2): bit for bit the unfused op
 *      sequence they replace, on the same kind, besides (a) (see "fused ops" below).
 *
 * Error units: "relL2" = ||got - ref|| / ||ref|| per row (||got|| when the reference row is
 * zero); "ulp" = max |got - ref| / (FLT_EPSILON * max(|ref|, magnitude of the op's
 * intermediate terms)) per element, FLT_EPSILON being one ulp at 1.0; "exact" = the bits of
 * the correctly rounded f32 result of the formula in backend.h (0 or a failure).
 *
 * OP_SLOTS (bottom) maps every function slot of ls_backend_ops to the test that covers it;
 * a _Static_assert on sizeof(ls_backend_ops) and a runtime scan of the slot offsets make the
 * build or the test fail when an op is added without a test. The last lines of the output
 * are one summary line per (kind, op) with the largest error seen. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/f16.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/host_buffer.h"
#include "kernels/types.h"

#include "test_rng.h"

enum { MAX_DEV = 2, NR = 64 /* input rows per case */, GUARD = 67 /* floats after each output */ };

static const int64_t M_LIST[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64};
#define N_MLIST ((int)(sizeof M_LIST / sizeof M_LIST[0]))
static const uint32_t SENTINEL = 0x7fa5a5a5u; /* a NaN pattern no op of ours writes */

/* ---- tolerances ------------------------------------------------------------------------
 * {cpu, other kinds}. Each is what the backend passes with margin (the maxima observed are
 * printed in the summary: CPU here, CUDA on an H200, 2026-12-01).
 * The device column of matmul is tighter than the CPU's for quantized weights: the CUDA
 * matmul dequantizes in registers and keeps f32 activations (cuda_matmul.h), ~2e-7 for
 * every type. docs/cuda.md section 2 would allow bf16/f16 tensor-core inputs (~2^-9 per
 * product, ~1e-2 per row); a backend that takes that option must loosen its column here,
 * on purpose. Cross-kind checks use the sum of both columns. */
typedef struct {
    double cpu, dev;
} tolpair;
/* float weights (F32/F16/BF16): f32 activations and a fixed f32 summation order: only f32
 * rounding (~3e-7 for K <= 768). */
static const tolpair TOL_MM_FLOAT = {1e-5, 1e-5};
/* MLX affine: the CPU as float weights. The CUDA integer path (mmq.cu: MLX 4/8-bit, Q8_0,
 * Q4_K, Q6_K) carries activations as 16-bit fixed point per block of 32 (~2e-5 relative
 * rms), on purpose: it is what lets decode reach the memory roofline; the other types keep
 * the f32 kernel (~2e-7). */
static const tolpair TOL_MM_MLX = {1e-5, 2e-4};
/* GGUF quantized weights: the CPU quantizes activations to 8 bits (Q8_0 blocks of 32, Q8_K
 * blocks of 256): ~0.5% relative rms per element, 0.65-0.9% per output row seen. */
static const tolpair TOL_MM_QUANT = {2e-2, 2e-4};
/* Q4_K / Q6_K: the CUDA backend quantizes their activations as the CPU does (Q8_K blocks of
 * 256, docs/cuda.md 2a "K-quants"), so its error is the CPU's; and against the CPU's rows it
 * differs only in the f32 order of the superblock folds (H200: 1.7e-7 / 6.6e-8), so the
 * cross-kind check takes TOL_MM_KQUANT_CROSS instead of the sum of the two columns. */
static const tolpair TOL_MM_KQUANT = {2e-2, 2e-2};
static const double TOL_MM_KQUANT_CROSS = 1e-5;
/* get_rows is dequantization: the CPU is bit-exact with dequantize_row; a device may round
 * d * q + m differently by an ulp. */
static const tolpair TOL_GET_ROWS = {1e-6, 1e-6};
static const tolpair TOL_RMSNORM = {1e-5, 1e-5}; /* relL2 */
static const tolpair TOL_ROPE = {1e-5, 1e-5};    /* relL2 */
static const tolpair TOL_ATTN = {1e-5, 1e-5};    /* relL2 */
/* gelu_mul: ulp relative to max(|ref|, |g u|) (1 + tanh(z) cancels for negative g, so
 * the error scales with |g u|, not with the tiny result); softcap: relative to |ref|;
 * scatter_add: relative to max(|acc|, |y w|, |ref|): backend.h leaves open whether
 * acc + y * w is fused; unfused it is two roundings, at most 0.5 + 0.5 of that unit. */
static const tolpair TOL_GELU = {4, 4};
static const tolpair TOL_SOFTCAP = {4, 4};
static const tolpair TOL_SCATTER = {1.5, 1.5};
static const tolpair TOL_EXACT = {0, 0}; /* add, scale, axpby, mul_rows, fill: bit-exact */

/* ---- devices ---------------------------------------------------------------------------- */

typedef struct {
    const ls_device_kind *kind;
    const ls_backend_ops *ops;
    ls_backend *be;  /* batched calls */
    ls_backend *be1; /* single-row calls (a second instance, one CPU thread) */
    const char *name;
    bool is_cpu;
} tdev;

static tdev g_dev[MAX_DEV];
static int g_ndev;
static double g_t0;

static const ls_backend_params PARAMS = {.n_threads = 3, .max_rows = NR, .max_cols = 2048, .max_keys = 1024};

static double tol_of(int k, tolpair t) {
    return g_dev[k].is_cpu ? t.cpu : t.dev;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static uint64_t seed_of(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* ---- statistics and checks -------------------------------------------------------------- */

typedef struct {
    const char *op, *unit;
    double worst_ratio, err_at, tol_at; /* accuracy: largest err / tol (err itself if tol 0) */
    char where[160];
    long acc_checks, inv_rows;
    double xworst_ratio, xerr_at, xtol_at; /* kind vs the first kind */
    char xwhere[160];
    long x_checks;
    char note[200];
} opstat;

enum { MAX_STATS = 48 };
static opstat g_stat[MAX_DEV][MAX_STATS];
static int g_nstat[MAX_DEV];

static opstat *stat_of(int k, const char *op) {
    for (int i = 0; i < g_nstat[k]; i++)
        if (strcmp(g_stat[k][i].op, op) == 0) return &g_stat[k][i];
    assert_true(g_nstat[k] < MAX_STATS);
    opstat *s = &g_stat[k][g_nstat[k]++];
    memset(s, 0, sizeof *s);
    s->op = op;
    s->unit = "";
    s->worst_ratio = s->xworst_ratio = -1.0;
    return s;
}

static double ratio_of(double err, double tol) {
    return tol > 0 ? err / tol : err;
}

/* Accuracy check: fails with kind, op and `where` when err > tol. */
__attribute__((format(printf, 6, 7))) static void check_acc(int k, const char *op, const char *unit, double err,
                                                            double tol, const char *fmt, ...) {
    char where[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    opstat *s = stat_of(k, op);
    s->unit = unit;
    s->acc_checks++;
    if (!(err <= tol)) {
        print_error("[%s] %s %s: error %.4g %s > tolerance %.4g\n", g_dev[k].name, op, where, err, unit, tol);
        fail();
    }
    if (ratio_of(err, tol) > s->worst_ratio) {
        s->worst_ratio = ratio_of(err, tol);
        s->err_at = err;
        s->tol_at = tol;
        snprintf(s->where, sizeof s->where, "%s", where);
    }
}

/* Kind k against the first kind. */
__attribute__((format(printf, 6, 7))) static void check_cross(int k, const char *op, const char *unit, double err,
                                                              double tol, const char *fmt, ...) {
    char where[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    opstat *s = stat_of(k, op);
    s->x_checks++;
    if (!(err <= tol)) {
        print_error("[%s vs %s] %s %s: difference %.4g %s > tolerance %.4g\n", g_dev[k].name, g_dev[0].name, op, where,
                    err, unit, tol);
        fail();
    }
    if (ratio_of(err, tol) > s->xworst_ratio) {
        s->xworst_ratio = ratio_of(err, tol);
        s->xerr_at = err;
        s->xtol_at = tol;
        snprintf(s->xwhere, sizeof s->xwhere, "%s", where);
    }
}

/* Bitwise comparison of `rows` rows of row_bytes: got row r must equal want row r. `what`
 * says what a mismatch means. */
__attribute__((format(printf, 8, 9))) static void check_rows(int k, const char *op, const char *what, const void *got,
                                                             const void *want, int64_t rows, size_t row_bytes,
                                                             const char *fmt, ...) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *g = (const uint8_t *)got + (size_t)r * row_bytes,
                      *w = (const uint8_t *)want + (size_t)r * row_bytes;
        if (memcmp(g, w, row_bytes) == 0) continue;
        char where[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(where, sizeof where, fmt, ap);
        va_end(ap);
        size_t i = 0;
        while (g[i] == w[i]) i++;
        if (row_bytes % 4 == 0) {
            float a, b;
            memcpy(&a, g + i / 4 * 4, 4);
            memcpy(&b, w + i / 4 * 4, 4);
            print_error("[%s] %s %s: row %lld %s (first at float %zu: %.9g vs %.9g)\n", g_dev[k].name, op, where,
                        (long long)r, what, i / 4, (double)a, (double)b);
        } else {
            print_error("[%s] %s %s: row %lld %s (first at byte %zu: 0x%02x vs 0x%02x)\n", g_dev[k].name, op, where,
                        (long long)r, what, i, g[i], w[i]);
        }
        fail();
    }
}

static void count_inv(int k, const char *op, long rows) {
    stat_of(k, op)->inv_rows += rows;
}

/* ---- error metrics ---------------------------------------------------------------------- */

enum { MET_REL = 0, MET_ULP = 1 };

/* Error of a row of n outputs against ref (double). mag (optional) per element: the
 * magnitude the ulp metric is relative to (besides |ref|); a negative mag means the output
 * must be bit-identical to (float)ref. Non-finite outputs where the reference is finite
 * give +inf. */
static double row_err(int metric, const float *got, const double *ref, const double *mag, int64_t n) {
    double num = 0.0, den = 0.0, mx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double g = got[i], r = ref[i];
        if (mag && mag[i] < 0) {
            const float rf = (float)r;
            if (memcmp(&got[i], &rf, sizeof rf) != 0) {
                if (metric == MET_REL) return INFINITY;
                const double e = fabs(g - r) / (FLT_EPSILON * fmax(fabs(r), FLT_MIN));
                mx = fmax(mx, fmax(e, 1.0)); /* a sign-of-zero difference still counts as 1 */
            }
            den += r * r;
            continue;
        }
        if (!isfinite(g)) {
            if (g == r) continue;
            return INFINITY;
        }
        if (metric == MET_REL) {
            num += (g - r) * (g - r);
            den += r * r;
        } else {
            const double scale = FLT_EPSILON * fmax(fmax(fabs(r), mag ? mag[i] : 0.0), FLT_MIN);
            mx = fmax(mx, fabs(g - r) / scale);
        }
    }
    if (metric == MET_ULP) return mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static const char *unit_of(int metric) {
    return metric == MET_REL ? "relL2" : "ulp";
}

/* ---- host-side helpers: constants (mapped weights) and backend buffers ------------------- */

typedef struct {
    void *host;
    size_t bytes;
    bool mapped;
} cbuf;
enum { MAX_CONSTS = 512, MAX_BUFS = 256 };
static cbuf g_consts[MAX_CONSTS];
static int g_nconsts;

/* Host memory for a constant (weight, norm vector): fill it, then consts_map(). */
static void *const_alloc(size_t bytes) {
    assert_true(g_nconsts < MAX_CONSTS);
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    assert_non_null(p);
    g_consts[g_nconsts++] = (cbuf){p, bytes, false};
    return p;
}

/* Maps every constant not mapped yet, on every kind (the CUDA kind uploads it now). */
static void consts_map(void) {
    for (int i = 0; i < g_nconsts; i++) {
        if (g_consts[i].mapped) continue;
        for (int k = 0; k < g_ndev; k++) {
            char err[256] = "";
            const int rc = g_dev[k].kind->map_const(g_consts[i].host, g_consts[i].bytes, err, sizeof err);
            if (rc != 0) print_error("[%s] map_const of %zu bytes: %s\n", g_dev[k].name, g_consts[i].bytes, err);
            assert_int_equal(rc, 0);
        }
        g_consts[i].mapped = true;
    }
}

static void consts_release(void) {
    for (int i = 0; i < g_nconsts; i++) {
        if (g_consts[i].mapped)
            for (int k = 0; k < g_ndev; k++) g_dev[k].kind->unmap_const(g_consts[i].host);
        free(g_consts[i].host);
    }
    g_nconsts = 0;
}

typedef struct {
    tdev *d;
    void *p;
} dbuf_rec;
static dbuf_rec g_bufs[MAX_BUFS];
static int g_nbufs;

/* A backend buffer (alloc on `be`), released by bufs_release(). */
static void *dbuf(tdev *d, size_t bytes) {
    assert_true(g_nbufs < MAX_BUFS);
    void *p = d->ops->alloc(d->be, bytes);
    if (!p) print_error("[%s] alloc of %zu bytes failed\n", d->name, bytes);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0); /* backend.h: 64-byte aligned */
    g_bufs[g_nbufs++] = (dbuf_rec){d, p};
    return p;
}

/* Releases the buffers made since g_nbufs was `mark`, newest first. */
static void bufs_release_to(int mark) {
    while (g_nbufs > mark) {
        dbuf_rec *b = &g_bufs[--g_nbufs];
        b->d->ops->release(b->d->be, b->p);
    }
}

static void bufs_release(void) {
    bufs_release_to(0);
}

static void up(tdev *d, ls_backend *be, void *dst, const void *src, size_t bytes) {
    d->ops->upload(be, dst, src, bytes);
}

static void down(tdev *d, ls_backend *be, void *dst, const void *src, size_t bytes) {
    d->ops->download(be, dst, src, bytes);
}

/* Uploads `bytes` of the sentinel pattern. */
static void up_sentinel(tdev *d, void *dst, size_t bytes) {
    uint8_t *h = xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = (uint8_t)(SENTINEL >> (8 * (i % 4)));
    up(d, d->be, dst, h, bytes);
    free(h);
}

static void fill_sentinel(void *h, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) ((uint8_t *)h)[i] = (uint8_t)(SENTINEL >> (8 * (i % 4)));
}

/* Whether bytes [from, from + bytes) of a buffer filled by up_sentinel still hold it. */
static bool is_sentinel(const void *buf, size_t from, size_t bytes) {
    for (size_t i = from; i < from + bytes; i++)
        if (((const uint8_t *)buf)[i] != (uint8_t)(SENTINEL >> (8 * (i % 4)))) return false;
    return true;
}

/* Row scales of the test inputs: most rows ~1, some tiny, some large, row 11 all zeros. */
static float row_scale(int64_t r) {
    return r == 11 ? 0.0f : r % 13 == 5 ? 1e-3f : r % 17 == 9 ? 40.0f : 1.0f;
}

static void fill_rows(float *x, int64_t rows, int64_t d, uint64_t *rng) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < d; i++) x[r * d + i] = rng_normal(rng, row_scale(r));
}

/* The m rows [off, off + m) used for a batched call: the start and the end of the inputs. */
static int offsets_for(int64_t m, int64_t offs[2]) {
    offs[0] = 0;
    if (m >= NR) return 1;
    offs[1] = NR - m;
    return 2;
}

/* ---- independent format decoders (the reference side) ----------------------------------- */

static double dec_f16(uint16_t h) {
    const int e = (h >> 10) & 31, mant = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)mant, -24);
    else if (e == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp((double)(1024 + mant), e - 25);
    return (h & 0x8000) ? -v : v;
}

static double dec_bf16(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE binary16, round to nearest even, written from the definition (not core/f16.h). */
static uint16_t ref_f16_bits(float f) {
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return 0x7e00;
    if (isinf(f)) return (uint16_t)(sign | 0x7c00);
    const double a = fabs((double)f);
    if (a == 0.0) return sign;
    int e;
    (void)frexp(a, &e); /* a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 */
    const double ulp = a >= ldexp(1.0, -14) ? ldexp(1.0, e - 1 - 10) : ldexp(1.0, -24);
    const double q = nearbyint(a / ulp) * ulp; /* a / ulp is exact; nearbyint rounds to even */
    if (q >= 65536.0) return (uint16_t)(sign | 0x7c00);
    if (q < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)(q / ldexp(1.0, -24))); /* 1024 = min normal */
    int e2;
    (void)frexp(q, &e2);
    const int exp = e2 - 1 + 15;
    const uint16_t mant = (uint16_t)(q / ldexp(1.0, e2 - 1 - 10) - 1024.0);
    return (uint16_t)(sign | (uint16_t)(exp << 10) | mant);
}

/* MLX packed rows: element c at bits [c * bits, (c + 1) * bits), LSB first. */
static uint32_t unpack_bits(const uint8_t *row, int bits, int64_t c) {
    uint32_t v = 0;
    for (int b = 0; b < bits; b++) {
        const int64_t at = c * bits + b;
        v |= (uint32_t)((row[at >> 3] >> (at & 7)) & 1) << b;
    }
    return v;
}

static double sb_value(const void *base, ls_type t, int64_t i) {
    if (t == LS_TYPE_F32) {
        float f;
        memcpy(&f, (const uint8_t *)base + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)base + 2 * i, 2);
    return t == LS_TYPE_F16 ? dec_f16(h) : dec_bf16(h);
}

/* ---- weights ----------------------------------------------------------------------------- */

typedef struct {
    ls_weight w;
    double *deq;  /* [rows][cols]: the reference value of every element */
    size_t bytes; /* of w.data */
    char label[64];
} tweight;

/* A GGUF-type weight quantized with ls_quantize_row_ref from random rows (scales vary per
 * row; every third row has an offset, to exercise the min terms). */
static void make_gguf(tweight *t, ls_type type, int64_t rows, int64_t cols, uint64_t *rng) {
    const ls_type_traits *tr = ls_type_get(type);
    assert_non_null(tr);
    const size_t rb = ls_row_size(type, cols);
    assert_true(rb > 0);
    uint8_t *data = const_alloc(rb * (size_t)rows);
    float *tmp = xmalloc(sizeof(float) * (size_t)cols), *deq = xmalloc(sizeof(float) * (size_t)cols);
    t->deq = xmalloc(sizeof(double) * (size_t)(rows * cols));
    for (int64_t n = 0; n < rows; n++) {
        const float scale = 0.01f + 2.0f * rng_uniform(rng), bias = n % 3 == 1 ? 0.3f * scale : 0.0f;
        for (int64_t c = 0; c < cols; c++) tmp[c] = rng_normal(rng, scale) + bias;
        assert_int_equal(ls_quantize_row_ref(type, tmp, data + rb * (size_t)n, cols), 0);
        tr->dequantize_row(data + rb * (size_t)n, deq, cols);
        for (int64_t c = 0; c < cols; c++) t->deq[n * cols + c] = deq[c];
    }
    free(tmp);
    free(deq);
    t->w = (ls_weight){.type = type, .data = data, .rows = rows, .cols = cols, .row_bytes = rb};
    t->bytes = rb * (size_t)rows;
    snprintf(t->label, sizeof t->label, "%s K=%lld", tr->name, (long long)cols);
}

static const char *sb_name(ls_type t) {
    return t == LS_TYPE_F32 ? "f32" : t == LS_TYPE_F16 ? "f16" : "bf16";
}

/* An MLX affine weight: random packed words, random scales of both signs, biases around
 * -scale * 2^(bits-1) (centred weights, as quantized checkpoints have), stored as sbt. */
static void make_mlx(tweight *t, int bits, int group, ls_type sbt, int64_t rows, int64_t cols, uint64_t *rng) {
    const size_t rb = (size_t)(cols * bits / 8), ng = (size_t)(cols / group), sbb = sbt == LS_TYPE_F32 ? 4 : 2;
    uint8_t *q = const_alloc(rb * (size_t)rows);
    uint8_t *sc = const_alloc(ng * (size_t)rows * sbb), *bi = const_alloc(ng * (size_t)rows * sbb);
    for (size_t i = 0; i < rb * (size_t)rows; i++) q[i] = (uint8_t)rng_next(rng);
    for (size_t i = 0; i < ng * (size_t)rows; i++) {
        float s = rng_normal(rng, 0.02f);
        if (fabsf(s) < 1e-4f) s = 1e-3f;
        const float b = -s * (float)(1 << (bits - 1)) * (0.8f + 0.4f * rng_uniform(rng)) + rng_normal(rng, 0.01f);
        const float v[2] = {s, b};
        uint8_t *dst[2] = {sc, bi};
        for (int j = 0; j < 2; j++) {
            if (sbt == LS_TYPE_F32) {
                memcpy(dst[j] + 4 * i, &v[j], 4);
            } else {
                uint16_t h;
                if (sbt == LS_TYPE_F16) {
                    h = ls_f32_to_f16(v[j]);
                } else {
                    const uint32_t u = ls_bits_from_f32(v[j]);
                    h = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
                }
                memcpy(dst[j] + 2 * i, &h, 2);
            }
        }
    }
    t->deq = xmalloc(sizeof(double) * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const int64_t gi = r * (int64_t)ng + c / group;
            t->deq[r * cols + c] =
                sb_value(sc, sbt, gi) * (double)unpack_bits(q + rb * (size_t)r, bits, c) + sb_value(bi, sbt, gi);
        }
    t->w = (ls_weight){.type = LS_TYPE_MLX_AFFINE,
                       .data = q,
                       .rows = rows,
                       .cols = cols,
                       .row_bytes = rb,
                       .scales = sc,
                       .biases = bi,
                       .sb_type = sbt,
                       .bits = bits,
                       .group = group};
    t->bytes = rb * (size_t)rows;
    snprintf(t->label, sizeof t->label, "mlx%d g%d %s K=%lld", bits, group, sb_name(sbt), (long long)cols);
}

static bool is_float_type(ls_type t) {
    return t == LS_TYPE_F32 || t == LS_TYPE_F16 || t == LS_TYPE_BF16 || t == LS_TYPE_MLX_AFFINE;
}

/* Every weight configuration: the 11 GGUF types (float types also at an odd K) and MLX
 * affine bits x group x scale type. Returns the count; fills wt (type, K, bits, group, sbt). */
typedef struct {
    ls_type type;
    int64_t K;
    int bits, group;
    ls_type sbt;
    bool cpu_only; /* a shape backend.h allows but the CUDA matmul declines (cols % 8 != 0) */
} wcfg;

static int weight_configs(wcfg *out, int cap) {
    static const ls_type GG[] = {LS_TYPE_F32,  LS_TYPE_F16,  LS_TYPE_BF16, LS_TYPE_Q4_0, LS_TYPE_Q4_1, LS_TYPE_Q5_0,
                                 LS_TYPE_Q5_1, LS_TYPE_Q8_0, LS_TYPE_Q4_K, LS_TYPE_Q5_K, LS_TYPE_Q6_K};
    static const int BITS[] = {2, 3, 4, 5, 6, 8}, GROUPS[] = {32, 64, 128};
    static const ls_type SBT[] = {LS_TYPE_F32, LS_TYPE_F16, LS_TYPE_BF16};
    int n = 0;
    for (size_t i = 0; i < sizeof GG / sizeof GG[0]; i++) {
        assert_true(n + 3 <= cap);
        out[n++] = (wcfg){.type = GG[i], .K = 768};
        if (GG[i] == LS_TYPE_F32 || GG[i] == LS_TYPE_F16 || GG[i] == LS_TYPE_BF16) {
            out[n++] = (wcfg){.type = GG[i], .K = 680};                   /* not a multiple of 16, 32 or 64 */
            out[n++] = (wcfg){.type = GG[i], .K = 645, .cpu_only = true}; /* a float tail */
        }
    }
    for (size_t b = 0; b < 6; b++)
        for (size_t g = 0; g < 3; g++)
            for (size_t s = 0; s < 3; s++) {
                assert_true(n < cap);
                out[n++] =
                    (wcfg){.type = LS_TYPE_MLX_AFFINE, .K = 768, .bits = BITS[b], .group = GROUPS[g], .sbt = SBT[s]};
            }
    return n;
}

static void make_weight(tweight *t, const wcfg *c, int64_t rows, uint64_t *rng) {
    if (c->type == LS_TYPE_MLX_AFFINE)
        make_mlx(t, c->bits, c->group, c->sbt, rows, c->K, rng);
    else
        make_gguf(t, c->type, rows, c->K, rng);
}

/* Per-type summary lines: the MLX configurations are folded per bit width. */
typedef struct {
    char label[64];
    double err[MAX_DEV], tol[MAX_DEV], xerr[MAX_DEV];
    bool inb_bitwise[MAX_DEV], inb_tested[MAX_DEV];
} type_line;

static type_line *type_line_of(type_line *lines, int *n, const char *label) {
    for (int i = 0; i < *n; i++)
        if (strcmp(lines[i].label, label) == 0) return &lines[i];
    type_line *l = &lines[(*n)++];
    memset(l, 0, sizeof *l);
    snprintf(l->label, sizeof l->label, "%s", label);
    for (int k = 0; k < MAX_DEV; k++) l->inb_bitwise[k] = true;
    return l;
}

static void print_type_lines(const char *op, const type_line *lines, int n) {
    for (int k = 0; k < g_ndev; k++)
        for (int i = 0; i < n; i++) {
            const type_line *l = &lines[i];
            if (l->tol[k] == 0) {
                printf("[%s] %-8s %-22s not run on this kind (CPU-only shape)\n", g_dev[k].name, op, l->label);
                continue;
            }
            printf("[%s] %-8s %-22s max relL2 %.3g (tol %.3g)", g_dev[k].name, op, l->label, l->err[k], l->tol[k]);
            if (k > 0) printf("  vs %s %.3g", g_dev[0].name, l->xerr[k]);
            if (l->inb_tested[k])
                printf("  in_backend %s", l->inb_bitwise[k] ? "== mapped bitwise" : "differs from mapped");
            printf("\n");
        }
}

/* ---- matmul -------------------------------------------------------------------------------- */

enum { MM_N = 133 }; /* output columns: not a multiple of 8, 16, 32, 64 or 128 */

/* The 1-row results (host, [NR][N]) of weight w on kind k after checks (a) and (b). */
static float *mm_run(int k, const ls_weight *w, const char *label, const float *X, const double *yref, double tol,
                     double *max_err, bool all_offsets) {
    tdev *d = &g_dev[k];
    const int mark = g_nbufs;
    const int64_t K = w->cols, N = w->rows;
    float *dX = dbuf(d, sizeof(float) * (size_t)(NR * K));
    float *dY1 = dbuf(d, sizeof(float) * (size_t)(NR * N));
    float *dY = dbuf(d, sizeof(float) * (size_t)(NR * N + GUARD));
    up(d, d->be, dX, X, sizeof(float) * (size_t)(NR * K));
    d->ops->sync(d->be);
    float *Y1 = xmalloc(sizeof(float) * (size_t)(NR * N)), *Y = xmalloc(sizeof(float) * (size_t)(NR * N + GUARD));
    for (int64_t r = 0; r < NR; r++) d->ops->matmul(d->be1, w, dX + r * K, 1, dY1 + r * N);
    down(d, d->be1, Y1, dY1, sizeof(float) * (size_t)(NR * N));
    d->ops->sync(d->be1);
    for (int64_t r = 0; r < NR; r++) {
        const double e = row_err(MET_REL, Y1 + r * N, yref + r * N, NULL, N);
        check_acc(k, "matmul", "relL2", e, tol, "%s m=1 row %lld", label, (long long)r);
        if (e > *max_err) *max_err = e;
    }
    for (int i = 0; i < N_MLIST; i++) {
        const int64_t m = M_LIST[i];
        int64_t offs[2];
        int no = offsets_for(m, offs);
        if (!all_offsets && no == 2) offs[0] = offs[i % 2], no = 1;
        for (int o = 0; o < no; o++) {
            const int64_t off = offs[o];
            up_sentinel(d, dY, sizeof(float) * (size_t)(NR * N + GUARD));
            d->ops->matmul(d->be, w, dX + off * K, m, dY);
            down(d, d->be, Y, dY, sizeof(float) * (size_t)(m * N + GUARD));
            check_rows(k, "matmul", "differs from its 1-row result", Y, Y1 + off * N, m, sizeof(float) * (size_t)N,
                       "%s m=%lld (rows %lld..)", label, (long long)m, (long long)off);
            if (!is_sentinel(Y, sizeof(float) * (size_t)(m * N), sizeof(float) * GUARD)) {
                print_error("[%s] matmul %s m=%lld: wrote past its m x %lld output\n", d->name, label, (long long)m,
                            (long long)N);
                fail();
            }
            count_inv(k, "matmul", (long)m);
        }
    }
    free(Y);
    bufs_release_to(mark);
    return Y1;
}

static void test_matmul(void **state) {
    (void)state;
    wcfg cfg[128];
    const int nc = weight_configs(cfg, 128);
    type_line lines[64];
    int nl = 0;
    for (int ci = 0; ci < nc; ci++) {
        const wcfg *c = &cfg[ci];
        char seed[64];
        snprintf(seed, sizeof seed, "matmul %d %lld %d %d %d", (int)c->type, (long long)c->K, c->bits, c->group,
                 (int)c->sbt);
        uint64_t rng = seed_of(seed);
        tweight tw;
        make_weight(&tw, c, MM_N, &rng);
        consts_map();
        const int64_t K = c->K, N = MM_N;
        float *X = xmalloc(sizeof(float) * (size_t)(NR * K));
        fill_rows(X, NR, K, &rng);
        double *yref = xmalloc(sizeof(double) * (size_t)(NR * N));
        for (int64_t r = 0; r < NR; r++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0.0;
                for (int64_t i = 0; i < K; i++) s += tw.deq[n * K + i] * (double)X[r * K + i];
                yref[r * N + n] = s;
            }
        char fold[64];
        if (c->type == LS_TYPE_MLX_AFFINE)
            snprintf(fold, sizeof fold, "mlx%d (g32-128,f32/f16/bf16)", c->bits);
        else
            snprintf(fold, sizeof fold, "%s", tw.label);
        type_line *tl = type_line_of(lines, &nl, fold);
        float *res[MAX_DEV] = {0};
        const tolpair tp = c->type == LS_TYPE_MLX_AFFINE                        ? TOL_MM_MLX
                           : is_float_type(c->type)                             ? TOL_MM_FLOAT
                           : c->type == LS_TYPE_Q4_K || c->type == LS_TYPE_Q6_K ? TOL_MM_KQUANT
                                                                                : TOL_MM_QUANT;
        for (int k = 0; k < g_ndev; k++) {
            tdev *d = &g_dev[k];
            if (c->cpu_only && !d->is_cpu) continue;
            const double tol = tol_of(k, tp);
            tl->tol[k] = tol;
            res[k] = mm_run(k, &tw.w, tw.label, X, yref, tol, &tl->err[k], true);
            if (c->type != LS_TYPE_MLX_AFFINE) {
                /* in_backend: the same bytes in a backend buffer (the assistant's gathered
                 * rows); checked for accuracy and invariance, and compared with the mapped copy */
                void *dW = dbuf(d, tw.bytes);
                up(d, d->be, dW, tw.w.data, tw.bytes);
                ls_weight wb = tw.w;
                wb.data = dW;
                wb.in_backend = true;
                char lab[96];
                snprintf(lab, sizeof lab, "%s in_backend", tw.label);
                float *rb = mm_run(k, &wb, lab, X, yref, tol, &tl->err[k], false);
                tl->inb_tested[k] = true;
                if (memcmp(rb, res[k], sizeof(float) * (size_t)(NR * N)) != 0) tl->inb_bitwise[k] = false;
                free(rb);
                bufs_release();
            }
            if (k > 0)
                for (int64_t r = 0; r < NR; r++) {
                    double ref[MM_N];
                    for (int64_t n = 0; n < N; n++) ref[n] = res[0][r * N + n];
                    const double e = row_err(MET_REL, res[k] + r * N, ref, NULL, N);
                    const bool kq = c->type == LS_TYPE_Q4_K || c->type == LS_TYPE_Q6_K;
                    check_cross(k, "matmul", "relL2", e, kq ? TOL_MM_KQUANT_CROSS : tol + tol_of(0, tp), "%s row %lld",
                                tw.label, (long long)r);
                    if (e > tl->xerr[k]) tl->xerr[k] = e;
                }
        }
        for (int k = 0; k < g_ndev; k++) free(res[k]);
        free(X);
        free(yref);
        free(tw.deq);
        consts_release();
    }
    print_type_lines("matmul", lines, nl);
    for (int k = 0; k < g_ndev; k++) {
        bool all = true;
        for (int i = 0; i < nl; i++)
            if (lines[i].inb_tested[k] && !lines[i].inb_bitwise[k]) all = false;
        int ncpu = 0;
        for (int ci = 0; ci < nc; ci++) ncpu += cfg[ci].cpu_only;
        snprintf(stat_of(k, "matmul")->note, sizeof stat_of(k, "matmul")->note,
                 "%d weight configs%s; in_backend weights %s the mapped ones", g_dev[k].is_cpu ? nc : nc - ncpu,
                 g_dev[k].is_cpu ? "" : " (CPU-only shapes skipped)",
                 all ? "bit-identical to" : "NOT bit-identical to");
    }
}

/* ---- get_rows ------------------------------------------------------------------------------- */

static void test_get_rows(void **state) {
    (void)state;
    wcfg cfg[128];
    const int nc = weight_configs(cfg, 128);
    type_line lines[64];
    int nl = 0;
    for (int ci = 0; ci < nc; ci++) {
        const wcfg *c = &cfg[ci];
        char seed[64];
        snprintf(seed, sizeof seed, "get_rows %d %lld %d %d %d", (int)c->type, (long long)c->K, c->bits, c->group,
                 (int)c->sbt);
        uint64_t rng = seed_of(seed);
        enum { TR = 50 };
        tweight tw;
        make_weight(&tw, c, TR, &rng);
        consts_map();
        const int64_t K = c->K;
        int32_t ids[NR];
        for (int i = 0; i < NR; i++) ids[i] = (int32_t)(rng_next(&rng) % TR); /* repeats, any order */
        ids[0] = TR - 1;
        ids[1] = 0;
        ids[NR - 1] = TR - 1;
        char fold[64];
        if (c->type == LS_TYPE_MLX_AFFINE)
            snprintf(fold, sizeof fold, "mlx%d (g32-128,f32/f16/bf16)", c->bits);
        else
            snprintf(fold, sizeof fold, "%s", tw.label);
        type_line *tl = type_line_of(lines, &nl, fold);
        float *res[MAX_DEV] = {0};
        for (int k = 0; k < g_ndev; k++) {
            tdev *d = &g_dev[k];
            if (c->cpu_only && !d->is_cpu) continue;
            const double tol = tol_of(k, TOL_GET_ROWS);
            tl->tol[k] = tol;
            int32_t *dI = dbuf(d, sizeof ids);
            float *dO1 = dbuf(d, sizeof(float) * (size_t)(NR * K)),
                  *dO = dbuf(d, sizeof(float) * (size_t)(NR * K + GUARD));
            up(d, d->be, dI, ids, sizeof ids);
            float *O1 = xmalloc(sizeof(float) * (size_t)(NR * K)),
                  *O = xmalloc(sizeof(float) * (size_t)(NR * K + GUARD));
            for (int64_t i = 0; i < NR; i++) d->ops->get_rows(d->be1, &tw.w, dI + i, 1, dO1 + i * K);
            down(d, d->be1, O1, dO1, sizeof(float) * (size_t)(NR * K));
            for (int64_t i = 0; i < NR; i++) {
                const double e = row_err(MET_REL, O1 + i * K, tw.deq + ids[i] * K, NULL, K);
                check_acc(k, "get_rows", "relL2", e, tol, "%s n=1 id %d", tw.label, ids[i]);
                if (e > tl->err[k]) tl->err[k] = e;
            }
            for (int i = 0; i < N_MLIST; i++) {
                const int64_t m = M_LIST[i];
                int64_t offs[2];
                const int no = offsets_for(m, offs);
                for (int o = 0; o < no; o++) {
                    up_sentinel(d, dO, sizeof(float) * (size_t)(NR * K + GUARD));
                    d->ops->get_rows(d->be, &tw.w, dI + offs[o], m, dO);
                    down(d, d->be, O, dO, sizeof(float) * (size_t)(m * K + GUARD));
                    check_rows(k, "get_rows", "differs from its 1-row result", O, O1 + offs[o] * K, m,
                               sizeof(float) * (size_t)K, "%s n=%lld (ids %lld..)", tw.label, (long long)m,
                               (long long)offs[o]);
                    if (!is_sentinel(O, sizeof(float) * (size_t)(m * K), sizeof(float) * GUARD)) {
                        print_error("[%s] get_rows %s n=%lld: wrote past its output\n", d->name, tw.label,
                                    (long long)m);
                        fail();
                    }
                    count_inv(k, "get_rows", (long)m);
                }
            }
            if (k > 0)
                for (int64_t i = 0; i < NR; i++) {
                    double *ref = xmalloc(sizeof(double) * (size_t)K);
                    for (int64_t c2 = 0; c2 < K; c2++) ref[c2] = res[0][i * K + c2];
                    const double e = row_err(MET_REL, O1 + i * K, ref, NULL, K);
                    free(ref);
                    check_cross(k, "get_rows", "relL2", e, tol + tol_of(0, TOL_GET_ROWS), "%s id %d", tw.label, ids[i]);
                    if (e > tl->xerr[k]) tl->xerr[k] = e;
                }
            res[k] = O1;
            free(O);
            bufs_release();
        }
        for (int k = 0; k < g_ndev; k++) free(res[k]);
        free(tw.deq);
        consts_release();
    }
    print_type_lines("get_rows", lines, nl);
}

/* ---- row-wise in-place ops: one harness ------------------------------------------------------ */

typedef struct rowcase rowcase;
typedef void (*row_launch_fn)(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos,
                              int64_t m);
typedef void (*row_ref_fn)(const rowcase *c, int64_t r, double *ref, double *mag);

/* An in-place op over rows of d floats: x (host [NR][d]) is the operand, y an optional
 * second input, pos an optional int per row (rope), w an optional mapped constant vector. */
struct rowcase {
    const char *op;
    char label[96];
    int64_t d;
    const float *x, *y;
    const int32_t *pos;
    const float *w;
    float a, b;
    int32_t n_heads, hd, n_pairs;
    row_launch_fn launch;
    row_ref_fn ref;
    int metric;
    tolpair tol;
    bool all_m; /* m = 1..64, else M_LIST */
};

static void run_rowcase(const rowcase *c) {
    const int64_t d = c->d;
    const size_t xb = sizeof(float) * (size_t)(NR * d);
    double *ref = xmalloc(sizeof(double) * (size_t)(NR * d)), *mag = xmalloc(sizeof(double) * (size_t)(NR * d));
    for (int64_t r = 0; r < NR; r++) c->ref(c, r, ref + r * d, mag + r * d);
    float *res[MAX_DEV] = {0};
    float *host = xmalloc(xb);
    const char *unit = unit_of(c->metric);
    for (int k = 0; k < g_ndev; k++) {
        tdev *d0 = &g_dev[k];
        const double tol = tol_of(k, c->tol);
        float *dx = dbuf(d0, xb), *dy = c->y ? dbuf(d0, xb) : NULL;
        int32_t *dp = c->pos ? dbuf(d0, sizeof(int32_t) * NR) : NULL;
        if (dy) up(d0, d0->be, dy, c->y, xb);
        if (dp) up(d0, d0->be, dp, c->pos, sizeof(int32_t) * NR);
        /* singles on the second instance, each row in place at its own place */
        up(d0, d0->be1, dx, c->x, xb);
        for (int64_t r = 0; r < NR; r++)
            c->launch(c, d0, d0->be1, dx + r * d, dy ? dy + r * d : NULL, dp ? dp + r : NULL, 1);
        res[k] = xmalloc(xb);
        down(d0, d0->be1, res[k], dx, xb);
        d0->ops->sync(d0->be1);
        for (int64_t r = 0; r < NR; r++) {
            const double e = row_err(c->metric, res[k] + r * d, ref + r * d, mag + r * d, d);
            check_acc(k, c->op, unit, e, tol, "%s m=1 row %lld", c->label, (long long)r);
        }
        const int64_t nm = c->all_m ? NR : N_MLIST;
        for (int64_t i = 0; i < nm; i++) {
            const int64_t m = c->all_m ? i + 1 : M_LIST[i];
            int64_t offs[2];
            const int no = offsets_for(m, offs);
            for (int o = 0; o < no; o++) {
                const int64_t off = offs[o];
                up(d0, d0->be, dx, c->x, xb);
                c->launch(c, d0, d0->be, dx + off * d, dy ? dy + off * d : NULL, dp ? dp + off : NULL, m);
                down(d0, d0->be, host, dx, xb);
                check_rows(k, c->op, "differs from its 1-row result", host + off * d, res[k] + off * d, m,
                           sizeof(float) * (size_t)d, "%s m=%lld (rows %lld..)", c->label, (long long)m,
                           (long long)off);
                check_rows(k, c->op, "outside the call was modified", host, c->x, off, sizeof(float) * (size_t)d,
                           "%s m=%lld (rows %lld..)", c->label, (long long)m, (long long)off);
                check_rows(k, c->op, "outside the call was modified", host + (off + m) * d, c->x + (off + m) * d,
                           NR - off - m, sizeof(float) * (size_t)d, "%s m=%lld (rows %lld..)", c->label, (long long)m,
                           (long long)off);
                count_inv(k, c->op, (long)m);
            }
        }
        if (k > 0) {
            double *oref = xmalloc(sizeof(double) * (size_t)d);
            for (int64_t r = 0; r < NR; r++) {
                for (int64_t i = 0; i < d; i++) oref[i] = res[0][r * d + i];
                const double e = row_err(c->metric, res[k] + r * d, oref, mag + r * d, d);
                check_cross(k, c->op, unit, e, tol + tol_of(0, c->tol), "%s row %lld", c->label, (long long)r);
            }
            free(oref);
        }
        bufs_release();
    }
    for (int k = 0; k < g_ndev; k++) free(res[k]);
    free(host);
    free(ref);
    free(mag);
}

/* rmsnorm */
static void l_rmsnorm(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos,
                      int64_t m) {
    (void)y, (void)pos;
    d->ops->rmsnorm(be, x, c->w, m, c->d, c->a);
}
static void r_rmsnorm(const rowcase *c, int64_t r, double *ref, double *mag) {
    const float *x = c->x + r * c->d;
    double ss = 0.0;
    for (int64_t i = 0; i < c->d; i++) ss += (double)x[i] * x[i];
    const double s = 1.0 / sqrt(ss / (double)c->d + (double)c->a);
    for (int64_t i = 0; i < c->d; i++) {
        ref[i] = x[i] * s * (c->w ? (double)c->w[i] : 1.0);
        mag[i] = 0.0;
    }
}

static void test_rmsnorm(void **state) {
    (void)state;
    static const struct {
        int64_t n;
        bool weight;
        float eps;
    } C[] = {{256, true, 1e-6f}, {999, false, 1e-6f}, {999, true, 1e-5f}, {2560, true, 1e-6f}, {2560, false, 1e-6f}};
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        rowcase c = {.op = "rmsnorm",
                     .d = C[i].n,
                     .a = C[i].eps,
                     .launch = l_rmsnorm,
                     .ref = r_rmsnorm,
                     .metric = MET_REL,
                     .tol = TOL_RMSNORM,
                     .all_m = true};
        snprintf(c.label, sizeof c.label, "n=%lld %s eps=%g", (long long)C[i].n, C[i].weight ? "weight" : "no-weight",
                 (double)C[i].eps);
        uint64_t rng = seed_of(c.label);
        float *x = xmalloc(sizeof(float) * (size_t)(NR * C[i].n));
        fill_rows(x, NR, C[i].n, &rng);
        c.x = x;
        if (C[i].weight) {
            float *w = const_alloc(sizeof(float) * (size_t)C[i].n);
            for (int64_t j = 0; j < C[i].n; j++) w[j] = 1.0f + rng_normal(&rng, 0.3f);
            c.w = w;
            consts_map();
        }
        run_rowcase(&c);
        free(x);
        consts_release();
    }
}

/* rope_pairs */
static void l_rope(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos, int64_t m) {
    (void)y;
    d->ops->rope_pairs(be, x, m, c->n_heads, c->hd, c->n_pairs, pos, c->a, c->b);
}
/* The angle of pair j is pos * invf_j with invf_j = freq_scale * theta^(-2j/hd) rounded to
 * f32 (theta^(-2j/hd) first, as the reference implementations build inv_freq in float32);
 * cos, sin and the rotation in double. Pairs j >= n_pairs must stay bit-identical. */
static void r_rope(const rowcase *c, int64_t r, double *ref, double *mag) {
    const int32_t half = c->hd / 2;
    for (int32_t h = 0; h < c->n_heads; h++) {
        const float *v = c->x + r * c->d + (int64_t)h * c->hd;
        double *o = ref + (int64_t)h * c->hd, *mg = mag + (int64_t)h * c->hd;
        for (int32_t j = 0; j < half; j++) {
            if (j >= c->n_pairs) {
                o[j] = v[j], o[j + half] = v[j + half];
                mg[j] = mg[j + half] = -1.0;
                continue;
            }
            const float invf = (float)pow((double)c->a, -2.0 * j / (double)c->hd) * c->b;
            const double ang = (double)c->pos[r] * (double)invf, cs = cos(ang), sn = sin(ang);
            o[j] = v[j] * cs - (double)v[j + half] * sn;
            o[j + half] = v[j + half] * cs + (double)v[j] * sn;
            mg[j] = mg[j + half] = 0.0;
        }
    }
}

static void test_rope_pairs(void **state) {
    (void)state;
    static const struct {
        int32_t hd, heads, pairs;
        float theta, fscale;
    } C[] = {{64, 8, 32, 10000.0f, 1.0f}, {128, 4, 16, 1e6f, 1.0f},   {256, 2, 128, 1e6f, 0.125f},
             {512, 2, 64, 1e6f, 1.0f},    {512, 1, 256, 1e4f, 0.25f}, {128, 3, 0, 1e4f, 1.0f}};
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        const int64_t d = (int64_t)C[i].hd * C[i].heads;
        rowcase c = {.op = "rope_pairs",
                     .d = d,
                     .a = C[i].theta,
                     .b = C[i].fscale,
                     .n_heads = C[i].heads,
                     .hd = C[i].hd,
                     .n_pairs = C[i].pairs,
                     .launch = l_rope,
                     .ref = r_rope,
                     .metric = MET_REL,
                     .tol = TOL_ROPE,
                     .all_m = true};
        snprintf(c.label, sizeof c.label, "hd=%d heads=%d n_pairs=%d theta=%g freq_scale=%g", C[i].hd, C[i].heads,
                 C[i].pairs, (double)C[i].theta, (double)C[i].fscale);
        uint64_t rng = seed_of(c.label);
        float *x = xmalloc(sizeof(float) * (size_t)(NR * d));
        int32_t pos[NR];
        fill_rows(x, NR, d, &rng);
        for (int r = 0; r < NR; r++) pos[r] = (int32_t)(rng_next(&rng) % 40000);
        pos[0] = 0, pos[1] = 1, pos[2] = 131071, pos[NR - 1] = 65535, pos[NR - 2] = pos[NR - 3];
        c.x = x;
        c.pos = pos;
        run_rowcase(&c);
        free(x);
    }
}

/* elementwise ops over n = m * d */
static void l_gelu(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos, int64_t m) {
    (void)pos;
    d->ops->gelu_mul(be, x, y, m * c->d);
}
static void r_gelu(const rowcase *c, int64_t r, double *ref, double *mag) {
    for (int64_t i = 0; i < c->d; i++) {
        const double g = c->x[r * c->d + i], u = c->y[r * c->d + i];
        const double z = 0.7978845608028654 * (g + 0.044715 * g * g * g);
        ref[i] = 0.5 * g * (1.0 + tanh(z)) * u;
        mag[i] = fabs(g * u);
    }
}
static void l_add(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos, int64_t m) {
    (void)pos;
    d->ops->add(be, x, y, m * c->d);
}
/* Exact references: a double operation on f32 operands rounded once to f32 is the correctly
 * rounded f32 operation (53 >= 2 * 24 + 2), so these are the bits backend.h prescribes. */
static void r_add(const rowcase *c, int64_t r, double *ref, double *mag) {
    for (int64_t i = 0; i < c->d; i++) {
        ref[i] = (float)((double)c->x[r * c->d + i] + (double)c->y[r * c->d + i]);
        mag[i] = -1.0;
    }
}
static void l_scale(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos,
                    int64_t m) {
    (void)y, (void)pos;
    d->ops->scale(be, x, c->a, m * c->d);
}
static void r_scale(const rowcase *c, int64_t r, double *ref, double *mag) {
    for (int64_t i = 0; i < c->d; i++) {
        ref[i] = (float)((double)c->x[r * c->d + i] * (double)c->a);
        mag[i] = -1.0;
    }
}
static void l_axpby(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos,
                    int64_t m) {
    (void)pos;
    d->ops->axpby(be, x, y, c->a, c->b, m * c->d);
}
static void r_axpby(const rowcase *c, int64_t r, double *ref, double *mag) {
    for (int64_t i = 0; i < c->d; i++) {
        const float t = (float)((double)c->y[r * c->d + i] * (double)c->a);
        const float s = (float)((double)c->x[r * c->d + i] + (double)t);
        ref[i] = (float)((double)s * (double)c->b);
        mag[i] = -1.0;
    }
}
static void l_mul_rows(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos,
                       int64_t m) {
    (void)y, (void)pos;
    d->ops->mul_rows(be, x, c->w, c->a, m, c->d);
}
static void r_mul_rows(const rowcase *c, int64_t r, double *ref, double *mag) {
    for (int64_t i = 0; i < c->d; i++) {
        const float t = (float)((double)c->x[r * c->d + i] * (double)c->w[i]);
        ref[i] = (float)((double)t * (double)c->a);
        mag[i] = -1.0;
    }
}
static void l_softcap(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos,
                      int64_t m) {
    (void)y, (void)pos;
    d->ops->softcap(be, x, c->a, m * c->d);
}
static void r_softcap(const rowcase *c, int64_t r, double *ref, double *mag) {
    for (int64_t i = 0; i < c->d; i++) {
        ref[i] = tanh((double)c->x[r * c->d + i] / (double)c->a) * (double)c->a;
        mag[i] = 0.0;
    }
}
static void l_fill(const rowcase *c, tdev *d, ls_backend *be, float *x, const float *y, const int32_t *pos, int64_t m) {
    (void)y, (void)pos;
    d->ops->fill(be, x, c->a, m * c->d);
}
static void r_fill(const rowcase *c, int64_t r, double *ref, double *mag) {
    (void)r;
    for (int64_t i = 0; i < c->d; i++) ref[i] = c->a, mag[i] = -1.0;
}

/* Runs `op` over row widths 1, 999 and 4096 (tails, odd offsets, long vectors), m = 1..64. */
static void run_elementwise(const char *op, row_launch_fn launch, row_ref_fn ref, int metric, tolpair tol, bool has_y,
                            bool has_w, const float *params, int nparams) {
    static const int64_t D[] = {1, 999, 4096};
    for (size_t di = 0; di < sizeof D / sizeof D[0]; di++)
        for (int p = 0; p < nparams; p++) {
            const int64_t d = D[di];
            rowcase c = {.op = op,
                         .d = d,
                         .a = params[2 * p],
                         .b = params[2 * p + 1],
                         .launch = launch,
                         .ref = ref,
                         .metric = metric,
                         .tol = tol,
                         .all_m = true};
            snprintf(c.label, sizeof c.label, "d=%lld a=%g b=%g", (long long)d, (double)c.a, (double)c.b);
            char seed[160];
            snprintf(seed, sizeof seed, "%s %s", op, c.label);
            uint64_t rng = seed_of(seed);
            float *x = xmalloc(sizeof(float) * (size_t)(NR * d)), *y = xmalloc(sizeof(float) * (size_t)(NR * d));
            for (int64_t i = 0; i < NR * d; i++) {
                const int64_t r = i / d;
                /* mixed magnitudes: gelu's and softcap's saturated ranges, zeros of both signs */
                const uint64_t pick = rng_next(&rng) % 16;
                x[i] = pick == 0   ? 0.0f
                       : pick == 1 ? -0.0f
                       : pick < 4  ? (rng_uniform(&rng) - 0.5f) * 40.0f
                                   : rng_normal(&rng, r % 7 == 3 ? 30.0f : 1.5f);
                y[i] = rng_normal(&rng, row_scale(r) == 0.0f ? 1.0f : row_scale(r));
            }
            c.x = x;
            c.y = has_y ? y : NULL;
            if (has_w) {
                float *w = const_alloc(sizeof(float) * (size_t)d);
                for (int64_t i = 0; i < d; i++) w[i] = rng_normal(&rng, 1.0f);
                c.w = w;
                consts_map();
            }
            run_rowcase(&c);
            free(x);
            free(y);
            consts_release();
        }
}

static void test_gelu_mul(void **state) {
    (void)state;
    const float p[] = {0, 0};
    run_elementwise("gelu_mul", l_gelu, r_gelu, MET_ULP, TOL_GELU, true, false, p, 1);
}
static void test_add(void **state) {
    (void)state;
    const float p[] = {0, 0};
    run_elementwise("add", l_add, r_add, MET_ULP, TOL_EXACT, true, false, p, 1);
}
static void test_scale(void **state) {
    (void)state;
    const float p[] = {0.70710678f, 0, -3.0f, 0, 1e-3f, 0};
    run_elementwise("scale", l_scale, r_scale, MET_ULP, TOL_EXACT, false, false, p, 3);
}
static void test_axpby(void **state) {
    (void)state;
    const float p[] = {0.3f, 1.7f, -1.25f, 1.0f, 3.0f, 0.0625f};
    run_elementwise("axpby", l_axpby, r_axpby, MET_ULP, TOL_EXACT, true, false, p, 3);
}
static void test_mul_rows(void **state) {
    (void)state;
    const float p[] = {1.3f, 0, 1.0f, 0};
    run_elementwise("mul_rows", l_mul_rows, r_mul_rows, MET_ULP, TOL_EXACT, false, true, p, 2);
}
static void test_softcap(void **state) {
    (void)state;
    const float p[] = {30.0f, 0, 50.0f, 0};
    run_elementwise("softcap", l_softcap, r_softcap, MET_ULP, TOL_SOFTCAP, false, false, p, 2);
}
static void test_fill(void **state) {
    (void)state;
    const float p[] = {-3.25f, 0, -0.0f, 0};
    run_elementwise("fill", l_fill, r_fill, MET_ULP, TOL_EXACT, false, false, p, 2);
}

/* ---- attention --------------------------------------------------------------------------- */

typedef struct {
    int32_t hd, n_head, n_kv;
    bool kv_f32, strict;
    int32_t window, first_pos, n_slots;
    float scale;
} attn_cfg;

static const attn_cfg ATTN[] = {
    /* hd, heads, kv heads, f32 KV, strictly_before, window, first_pos, slots, scale */
    {64, 8, 2, false, false, 0, 0, 520, 0.125f},           /* GQA 4, keys across 256-blocks */
    {64, 4, 4, true, true, 48, 0, 300, 0.125f},            /* sliding + strictly before, from 0 */
    {64, 4, 1, false, false, 1, 40, 200, 1.0f},            /* window 1: each query its own key */
    {128, 4, 1, false, false, 0, 0, 600, 0.08838835f},     /* GQA 4, long */
    {128, 4, 2, true, false, 100, 77, 400, 1.0f},          /* compacted sliding cache, peaky */
    {256, 4, 2, false, true, 0, 0, 300, 0.0625f},          /* strictly before, position 0 -> zero row */
    {256, 2, 2, false, true, 64, 200, 330, 1.0f},          /* compacted, strictly before */
    {512, 2, 1, false, false, 0, 0, 520, 0.04419417f},     /* Gemma 4 global head dim */
    {512, 2, 1, true, true, 0, 0, 260, 1.0f},              /* f32 KV, strictly before */
    {512, 4, 2, false, false, 128, 300, 400, 0.04419417f}, /* compacted sliding, hd 512 */
};

static void attn_range(const attn_cfg *c, int32_t qp, int32_t *lo, int32_t *hi) {
    *hi = qp - (c->strict ? 1 : 0);
    *lo = 0;
    if (c->window > 0 && qp - c->window + 1 > *lo) *lo = qp - c->window + 1;
}

static void attn_call(tdev *d, ls_backend *be, const attn_cfg *c, const float *q, float *out, const void *k,
                      const void *v, const int32_t *pos, int64_t m) {
    const ls_attn_args a = {.q = q,
                            .out = out,
                            .k = k,
                            .v = v,
                            .kv_f32 = c->kv_f32,
                            .strictly_before = c->strict,
                            .m = m,
                            .n_head = c->n_head,
                            .n_kv = c->n_kv,
                            .hd = c->hd,
                            .q_pos = pos,
                            .first_pos = c->first_pos,
                            .n_slots = c->n_slots,
                            .window = c->window,
                            .scale = c->scale};
    d->ops->attention(be, &a);
}

static void test_attention(void **state) {
    (void)state;
    for (size_t ci = 0; ci < sizeof ATTN / sizeof ATTN[0]; ci++) {
        const attn_cfg *c = &ATTN[ci];
        char label[160];
        snprintf(label, sizeof label, "hd=%d heads=%d/%d %s window=%d first_pos=%d slots=%d%s", c->hd, c->n_head,
                 c->n_kv, c->kv_f32 ? "f32" : "f16", c->window, c->first_pos, c->n_slots,
                 c->strict ? " strictly_before" : "");
        uint64_t rng = seed_of(label);
        const int64_t W = (int64_t)c->n_head * c->hd, KW = (int64_t)c->n_kv * c->hd, S = c->n_slots;
        const size_t es = c->kv_f32 ? 4 : 2;
        /* the cache, in its stored format, and its reference values */
        uint8_t *kc = xmalloc(es * (size_t)(S * KW)), *vc = xmalloc(es * (size_t)(S * KW));
        double *kd = xmalloc(sizeof(double) * (size_t)(S * KW)), *vd = xmalloc(sizeof(double) * (size_t)(S * KW));
        for (int64_t i = 0; i < S * KW; i++) {
            const float kf = rng_normal(&rng, 1.0f), vf = rng_normal(&rng, 1.0f);
            if (c->kv_f32) {
                memcpy(kc + 4 * i, &kf, 4);
                memcpy(vc + 4 * i, &vf, 4);
                kd[i] = kf, vd[i] = vf;
            } else {
                const uint16_t kh = ls_f32_to_f16(kf), vh = ls_f32_to_f16(vf);
                memcpy(kc + 2 * i, &kh, 2);
                memcpy(vc + 2 * i, &vh, 2);
                kd[i] = dec_f16(kh), vd[i] = dec_f16(vh);
            }
        }
        /* 64 queries at valid positions: the lowest and highest, 256-block edges, random */
        const int32_t pmin = c->window > 0 && c->first_pos > 0 ? c->first_pos + c->window - 1 : 0;
        const int32_t pmax = c->first_pos + c->n_slots - 1 + (c->strict ? 1 : 0);
        int32_t pos[NR], posr[NR];
        for (int i = 0; i < NR; i++) pos[i] = pmin + (int32_t)(rng_next(&rng) % (uint64_t)(pmax - pmin + 1));
        pos[0] = pmin, pos[1] = pmax, pos[NR - 1] = pmin;
        const int32_t edges[] = {255, 256, 257, 511, 512};
        for (int i = 0; i < 5; i++)
            if (edges[i] >= pmin && edges[i] <= pmax) pos[5 + 7 * i] = edges[i];
        float *Q = xmalloc(sizeof(float) * (size_t)(NR * W)), *Qr = xmalloc(sizeof(float) * (size_t)(NR * W));
        for (int64_t i = 0; i < NR * W; i++) Q[i] = rng_normal(&rng, 1.5f);
        for (int i = 0; i < NR; i++) {
            posr[i] = pos[NR - 1 - i];
            memcpy(Qr + i * W, Q + (NR - 1 - i) * W, sizeof(float) * (size_t)W);
        }
        /* reference: exact softmax in double over the visible keys */
        double *ref = xmalloc(sizeof(double) * (size_t)(NR * W)), *mag = xmalloc(sizeof(double) * (size_t)(NR * W));
        double *sc = xmalloc(sizeof(double) * (size_t)S);
        for (int64_t r = 0; r < NR; r++) {
            int32_t lo, hi;
            attn_range(c, pos[r], &lo, &hi);
            for (int64_t i = 0; i < W; i++) ref[r * W + i] = 0.0, mag[r * W + i] = hi < lo ? -1.0 : 0.0;
            if (hi < lo) continue; /* no visible key: exactly zero */
            assert_true(lo >= c->first_pos && hi - c->first_pos < c->n_slots);
            for (int32_t h = 0; h < c->n_head; h++) {
                const int32_t kvh = h / (c->n_head / c->n_kv);
                const float *q = Q + r * W + (int64_t)h * c->hd;
                double mx = -INFINITY, sum = 0.0;
                for (int32_t t = lo; t <= hi; t++) {
                    const double *kk = kd + (int64_t)(t - c->first_pos) * KW + (int64_t)kvh * c->hd;
                    double s = 0.0;
                    for (int32_t j = 0; j < c->hd; j++) s += (double)q[j] * kk[j];
                    sc[t - lo] = s * c->scale;
                    if (sc[t - lo] > mx) mx = sc[t - lo];
                }
                for (int32_t t = lo; t <= hi; t++) sum += (sc[t - lo] = exp(sc[t - lo] - mx));
                double *o = ref + r * W + (int64_t)h * c->hd;
                for (int32_t t = lo; t <= hi; t++) {
                    const double *vv = vd + (int64_t)(t - c->first_pos) * KW + (int64_t)kvh * c->hd;
                    for (int32_t j = 0; j < c->hd; j++) o[j] += sc[t - lo] / sum * vv[j];
                }
            }
        }
        float *res[MAX_DEV] = {0};
        const size_t qb = sizeof(float) * (size_t)(NR * W);
        for (int k = 0; k < g_ndev; k++) {
            tdev *d = &g_dev[k];
            const double tol = tol_of(k, TOL_ATTN);
            float *dQ = dbuf(d, qb), *dQr = dbuf(d, qb), *dO1 = dbuf(d, qb);
            float *dO = dbuf(d, qb + sizeof(float) * GUARD);
            int32_t *dP = dbuf(d, sizeof pos), *dPr = dbuf(d, sizeof posr);
            void *dK = dbuf(d, es * (size_t)(S * KW)), *dV = dbuf(d, es * (size_t)(S * KW));
            up(d, d->be, dQ, Q, qb);
            up(d, d->be, dQr, Qr, qb);
            up(d, d->be, dP, pos, sizeof pos);
            up(d, d->be, dPr, posr, sizeof posr);
            up(d, d->be, dK, kc, es * (size_t)(S * KW));
            up(d, d->be, dV, vc, es * (size_t)(S * KW));
            d->ops->sync(d->be);
            float *O1 = xmalloc(qb), *O = xmalloc(qb + sizeof(float) * GUARD);
            for (int64_t r = 0; r < NR; r++) attn_call(d, d->be1, c, dQ + r * W, dO1 + r * W, dK, dV, dP + r, 1);
            down(d, d->be1, O1, dO1, qb);
            d->ops->sync(d->be1);
            for (int64_t r = 0; r < NR; r++) {
                const double e = row_err(MET_REL, O1 + r * W, ref + r * W, mag + r * W, W);
                check_acc(k, "attention", "relL2", e, tol, "%s m=1 query %lld (pos %d)", label, (long long)r, pos[r]);
            }
            for (int i = 0; i < N_MLIST; i++) {
                const int64_t m = M_LIST[i];
                const int64_t off = i % 2 ? NR - m : 0;
                /* queries [off, off + m) in order, then queries 63, 62, .. 64 - m (reversed) */
                for (int rev = 0; rev < 2; rev++) {
                    up_sentinel(d, dO, qb + sizeof(float) * GUARD);
                    attn_call(d, d->be, c, (rev ? dQr : dQ + off * W), dO, dK, dV, rev ? dPr : dP + off, m);
                    down(d, d->be, O, dO, sizeof(float) * (size_t)(m * W + GUARD));
                    if (!rev) {
                        check_rows(k, "attention", "differs from its 1-row result", O, O1 + off * W, m,
                                   sizeof(float) * (size_t)W, "%s m=%lld (queries %lld..)", label, (long long)m,
                                   (long long)off);
                    } else {
                        for (int64_t j = 0; j < m; j++)
                            check_rows(k, "attention", "(reversed batch) differs from its 1-row result", O + j * W,
                                       O1 + (NR - 1 - j) * W, 1, sizeof(float) * (size_t)W,
                                       "%s m=%lld reversed, query %lld", label, (long long)m, (long long)(NR - 1 - j));
                    }
                    if (!is_sentinel(O, sizeof(float) * (size_t)(m * W), sizeof(float) * GUARD)) {
                        print_error("[%s] attention %s m=%lld: wrote past its output\n", d->name, label, (long long)m);
                        fail();
                    }
                    count_inv(k, "attention", (long)m);
                }
            }
            if (k > 0) {
                double *oref = xmalloc(sizeof(double) * (size_t)W);
                for (int64_t r = 0; r < NR; r++) {
                    for (int64_t j = 0; j < W; j++) oref[j] = res[0][r * W + j];
                    const double e = row_err(MET_REL, O1 + r * W, oref, mag + r * W, W);
                    check_cross(k, "attention", "relL2", e, tol + tol_of(0, TOL_ATTN), "%s query %lld", label,
                                (long long)r);
                }
                free(oref);
            }
            res[k] = O1;
            free(O);
            bufs_release();
        }
        for (int k = 0; k < g_ndev; k++) free(res[k]);
        free(kc), free(vc), free(kd), free(vd), free(Q), free(Qr), free(ref), free(mag), free(sc);
    }
}

/* ---- kv_store ----------------------------------------------------------------------------- */

static void test_kv_store(void **state) {
    (void)state;
    /* f16 specials: max finite, the largest value rounding to it, overflow, infinities, NaN,
     * underflow to zero (2^-25 ties to even = 0), subnormals, ties to even, signed zeros */
    const float specials[] = {65504.0f,   65519.996f, 65520.0f, -70000.0f,       INFINITY,
                              -INFINITY,  NAN,        1e-8f,    0x1p-25f,        0x1.8p-25f,
                              0x1.4p-23f, 6.1e-5f,    0x1p-14f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
                              -0.0f,      0.0f,       2049.0f,  2051.0f,         -0x1.ffcp-15f};
    const int nsp = (int)(sizeof specials / sizeof specials[0]);
    static const int64_t D[] = {1, 999, 512};
    for (int f32 = 0; f32 < 2; f32++)
        for (size_t di = 0; di < sizeof D / sizeof D[0]; di++) {
            const int64_t d = D[di];
            const size_t es = f32 ? 4 : 2, rowb = es * (size_t)d;
            char label[64];
            snprintf(label, sizeof label, "%s d=%lld", f32 ? "f32" : "f16", (long long)d);
            uint64_t rng = seed_of(label);
            float *src = xmalloc(sizeof(float) * (size_t)(NR * d));
            fill_rows(src, NR, d, &rng);
            for (int i = 0; i < nsp; i++) src[(3 * d + 7 * i) % (NR * d)] = specials[i];
            for (int i = 0; i < nsp; i++) src[(40 * d + 5 * i + 1) % (NR * d)] = -specials[i];
            uint8_t *res[MAX_DEV] = {0};
            for (int k = 0; k < g_ndev; k++) {
                tdev *dv = &g_dev[k];
                float *dS = dbuf(dv, sizeof(float) * (size_t)(NR * d));
                uint8_t *dC1 = dbuf(dv, rowb * NR), *dC = dbuf(dv, rowb * NR + 4 * GUARD);
                up(dv, dv->be, dS, src, sizeof(float) * (size_t)(NR * d));
                dv->ops->sync(dv->be);
                uint8_t *C1 = xmalloc(rowb * NR), *C = xmalloc(rowb * NR + 4 * GUARD);
                for (int64_t r = 0; r < NR; r++) dv->ops->kv_store(dv->be1, dC1 + rowb * (size_t)r, f32, dS + r * d, d);
                down(dv, dv->be1, C1, dC1, rowb * NR);
                dv->ops->sync(dv->be1);
                /* accuracy: the exact bits (f32: a copy; f16: IEEE round to nearest even) */
                for (int64_t i = 0; i < NR * d; i++) {
                    bool ok;
                    if (f32) {
                        ok = memcmp(C1 + 4 * i, &src[i], 4) == 0;
                    } else {
                        uint16_t h;
                        memcpy(&h, C1 + 2 * i, 2);
                        const uint16_t want = ref_f16_bits(src[i]);
                        ok = isnan(src[i]) ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0 : h == want;
                    }
                    if (!ok) {
                        print_error("[%s] kv_store %s: element %lld (row %lld) of %.9g stored wrong\n", dv->name, label,
                                    (long long)i, (long long)(i / d), (double)src[i]);
                        fail();
                    }
                }
                check_acc(k, "kv_store", "exact", 0.0, 0.0, "%s", label);
                for (int64_t m = 1; m <= NR; m++) {
                    int64_t offs[2];
                    const int no = offsets_for(m, offs);
                    for (int o = 0; o < no; o++) {
                        const int64_t off = offs[o];
                        up_sentinel(dv, dC, rowb * NR + 4 * GUARD);
                        dv->ops->kv_store(dv->be, dC + rowb * (size_t)off, f32, dS + off * d, m * d);
                        down(dv, dv->be, C, dC, rowb * NR + 4 * GUARD);
                        check_rows(k, "kv_store", "differs from its 1-row result", C + rowb * (size_t)off,
                                   C1 + rowb * (size_t)off, m, rowb, "%s m=%lld (rows %lld..)", label, (long long)m,
                                   (long long)off);
                        if (!is_sentinel(C, 0, rowb * (size_t)off) ||
                            !is_sentinel(C, rowb * (size_t)(off + m), rowb * (size_t)(NR - off - m) + 4 * GUARD)) {
                            print_error("[%s] kv_store %s m=%lld: wrote outside its row range\n", dv->name, label,
                                        (long long)m);
                            fail();
                        }
                        count_inv(k, "kv_store", (long)m);
                    }
                }
                if (k > 0) {
                    int64_t bad = -1;
                    for (int64_t i = 0; i < NR * d && bad < 0; i++)
                        if (memcmp(C1 + es * i, res[0] + es * i, es) != 0 && !isnan(src[i])) bad = i;
                    check_cross(k, "kv_store", "exact", bad < 0 ? 0.0 : 1.0, 0.0, "%s element %lld", label,
                                (long long)bad);
                }
                res[k] = C1;
                free(C);
                bufs_release();
            }
            for (int k = 0; k < g_ndev; k++) free(res[k]);
            free(src);
        }
}

/* ---- gather_rows / scatter_add -------------------------------------------------------------- */

static void test_gather_rows(void **state) {
    (void)state;
    enum { SR = 50 };
    static const int64_t D[] = {1, 999};
    for (size_t di = 0; di < sizeof D / sizeof D[0]; di++) {
        const int64_t d = D[di];
        char label[32];
        snprintf(label, sizeof label, "d=%lld", (long long)d);
        uint64_t rng = seed_of(label);
        float *src = xmalloc(sizeof(float) * (size_t)(SR * d));
        fill_rows(src, SR, d, &rng);
        int32_t rows[NR];
        for (int j = 0; j < NR; j++) rows[j] = (int32_t)(rng_next(&rng) % SR);
        rows[0] = SR - 1, rows[1] = 0, rows[2] = 0;
        float *want = xmalloc(sizeof(float) * (size_t)(NR * d));
        for (int j = 0; j < NR; j++) memcpy(want + j * d, src + rows[j] * d, sizeof(float) * (size_t)d);
        for (int k = 0; k < g_ndev; k++) {
            tdev *dv = &g_dev[k];
            float *dS = dbuf(dv, sizeof(float) * (size_t)(SR * d)),
                  *dO = dbuf(dv, sizeof(float) * (size_t)(NR * d + GUARD));
            int32_t *dR = dbuf(dv, sizeof rows);
            up(dv, dv->be, dS, src, sizeof(float) * (size_t)(SR * d));
            up(dv, dv->be, dR, rows, sizeof rows);
            float *O = xmalloc(sizeof(float) * (size_t)(NR * d + GUARD));
            /* exact copies: comparing every call with the host gather covers (a), (b) and (c) */
            for (int64_t j = 0; j < NR; j++) dv->ops->gather_rows(dv->be1, dO + j * d, dS, dR + j, 1, d);
            down(dv, dv->be1, O, dO, sizeof(float) * (size_t)(NR * d));
            check_rows(k, "gather_rows", "is not the source row", O, want, NR, sizeof(float) * (size_t)d, "%s cnt=1",
                       label);
            check_acc(k, "gather_rows", "exact", 0.0, 0.0, "%s", label);
            for (int64_t m = 1; m <= NR; m++) {
                int64_t offs[2];
                const int no = offsets_for(m, offs);
                for (int o = 0; o < no; o++) {
                    up_sentinel(dv, dO, sizeof(float) * (size_t)(NR * d + GUARD));
                    dv->ops->gather_rows(dv->be, dO, dS, dR + offs[o], m, d);
                    down(dv, dv->be, O, dO, sizeof(float) * (size_t)(m * d + GUARD));
                    check_rows(k, "gather_rows", "differs from its 1-row result", O, want + offs[o] * d, m,
                               sizeof(float) * (size_t)d, "%s cnt=%lld (rows %lld..)", label, (long long)m,
                               (long long)offs[o]);
                    if (!is_sentinel(O, sizeof(float) * (size_t)(m * d), sizeof(float) * GUARD)) {
                        print_error("[%s] gather_rows %s cnt=%lld: wrote past its output\n", dv->name, label,
                                    (long long)m);
                        fail();
                    }
                    count_inv(k, "gather_rows", (long)m);
                }
            }
            if (k > 0) check_cross(k, "gather_rows", "exact", 0.0, 0.0, "%s", label);
            free(O);
            bufs_release();
        }
        free(src);
        free(want);
    }
}

static void test_scatter_add(void **state) {
    (void)state;
    enum { AR = 80 };
    static const int64_t D[] = {1, 999};
    for (size_t di = 0; di < sizeof D / sizeof D[0]; di++) {
        const int64_t d = D[di];
        char label[32];
        snprintf(label, sizeof label, "d=%lld", (long long)d);
        uint64_t rng = seed_of(label);
        const size_t ab = sizeof(float) * (size_t)(AR * d), yb = sizeof(float) * (size_t)(NR * d);
        float *acc = xmalloc(ab), *y = xmalloc(yb), w[NR];
        fill_rows(acc, AR, d, &rng);
        fill_rows(y, NR, d, &rng);
        for (int j = 0; j < NR; j++) w[j] = rng_normal(&rng, 1.0f);
        int32_t rows[AR]; /* distinct: a shuffled 0..AR-1, the first NR used */
        for (int i = 0; i < AR; i++) rows[i] = i;
        for (int i = AR - 1; i > 0; i--) {
            const int j = (int)(rng_next(&rng) % (uint64_t)(i + 1));
            const int32_t t = rows[i];
            rows[i] = rows[j], rows[j] = t;
        }
        /* reference of contribution j applied to the original acc */
        double *ref = xmalloc(sizeof(double) * (size_t)(NR * d)), *mag = xmalloc(sizeof(double) * (size_t)(NR * d));
        for (int64_t j = 0; j < NR; j++)
            for (int64_t i = 0; i < d; i++) {
                const double a = acc[rows[j] * d + i], p = (double)y[j * d + i] * w[j];
                ref[j * d + i] = a + p;
                mag[j * d + i] = fmax(fabs(a), fabs(p));
            }
        float *res[MAX_DEV] = {0};
        for (int k = 0; k < g_ndev; k++) {
            tdev *dv = &g_dev[k];
            const double tol = tol_of(k, TOL_SCATTER);
            float *dA = dbuf(dv, ab), *dY = dbuf(dv, yb), *dW = dbuf(dv, sizeof w);
            int32_t *dR = dbuf(dv, sizeof rows);
            up(dv, dv->be, dY, y, yb);
            up(dv, dv->be, dW, w, sizeof w);
            up(dv, dv->be, dR, rows, sizeof rows);
            up(dv, dv->be1, dA, acc, ab);
            float *S1 = xmalloc(ab), *A = xmalloc(ab), *got = xmalloc(yb);
            /* singles: the rows are distinct, so every contribution can go into one buffer */
            for (int64_t j = 0; j < NR; j++) dv->ops->scatter_add(dv->be1, dA, dY + j * d, dR + j, dW + j, 1, d);
            down(dv, dv->be1, S1, dA, ab);
            dv->ops->sync(dv->be1);
            for (int64_t j = 0; j < NR; j++) {
                memcpy(got + j * d, S1 + rows[j] * d, sizeof(float) * (size_t)d);
                const double e = row_err(MET_ULP, got + j * d, ref + j * d, mag + j * d, d);
                check_acc(k, "scatter_add", "ulp", e, tol, "%s cnt=1 contribution %lld (row %d)", label, (long long)j,
                          rows[j]);
            }
            for (int64_t m = 1; m <= NR; m++) {
                int64_t offs[2];
                const int no = offsets_for(m, offs);
                for (int o = 0; o < no; o++) {
                    const int64_t off = offs[o];
                    up(dv, dv->be, dA, acc, ab);
                    dv->ops->scatter_add(dv->be, dA, dY + off * d, dR + off, dW + off, m, d);
                    down(dv, dv->be, A, dA, ab);
                    for (int64_t r = 0; r < AR; r++) {
                        bool in = false;
                        for (int64_t j = off; j < off + m; j++) in = in || rows[j] == r;
                        check_rows(k, "scatter_add",
                                   in ? "differs from its 1-row result" : "was not in the call but was modified",
                                   A + r * d, in ? S1 + r * d : acc + r * d, 1, sizeof(float) * (size_t)d,
                                   "%s cnt=%lld (contributions %lld..), acc row %lld", label, (long long)m,
                                   (long long)off, (long long)r);
                    }
                    count_inv(k, "scatter_add", (long)m);
                }
            }
            /* several calls touching the same rows, in order: each call against the state the
             * previous one left, and the whole equal to the same contributions made one at a
             * time in the same order */
            {
                static const int32_t c0[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, c1[] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14},
                                     c2[] = {9, 5, 0, 14};
                const int32_t *calls[3] = {c0, c1, c2};
                const int64_t cnt[3] = {10, 10, 4}, yoff[3] = {0, 10, 20};
                int32_t *dRr = dbuf(dv, sizeof(int32_t) * 24);
                int32_t all[24];
                memcpy(all, c0, sizeof c0), memcpy(all + 10, c1, sizeof c1), memcpy(all + 20, c2, sizeof c2);
                up(dv, dv->be, dRr, all, sizeof all);
                float *prev = xmalloc(ab), *seq = xmalloc(ab);
                up(dv, dv->be, dA, acc, ab);
                memcpy(prev, acc, ab);
                for (int cidx = 0; cidx < 3; cidx++) {
                    dv->ops->scatter_add(dv->be, dA, dY + yoff[cidx] * d, dRr + yoff[cidx], dW + yoff[cidx], cnt[cidx],
                                         d);
                    down(dv, dv->be, A, dA, ab);
                    for (int64_t j = 0; j < cnt[cidx]; j++) {
                        const int64_t r = calls[cidx][j], yj = yoff[cidx] + j;
                        double rr[999], mm[999];
                        for (int64_t i = 0; i < d; i++) {
                            const double a = prev[r * d + i], p = (double)y[yj * d + i] * w[yj];
                            rr[i] = a + p;
                            mm[i] = fmax(fabs(a), fabs(p));
                        }
                        const double e = row_err(MET_ULP, A + r * d, rr, mm, d);
                        check_acc(k, "scatter_add", "ulp", e, tol, "%s call %d of 3, acc row %lld", label, cidx,
                                  (long long)r);
                    }
                    memcpy(prev, A, ab);
                }
                up(dv, dv->be1, dA, acc, ab);
                for (int64_t j = 0; j < 24; j++) dv->ops->scatter_add(dv->be1, dA, dY + j * d, dRr + j, dW + j, 1, d);
                down(dv, dv->be1, seq, dA, ab);
                check_rows(k, "scatter_add", "differs from one-at-a-time calls in the same order", A, seq, AR,
                           sizeof(float) * (size_t)d, "%s three overlapping calls", label);
                free(prev);
                free(seq);
            }
            if (k > 0)
                for (int64_t j = 0; j < NR; j++) {
                    double oref[999];
                    for (int64_t i = 0; i < d; i++) oref[i] = res[0][j * d + i];
                    const double e = row_err(MET_ULP, got + j * d, oref, mag + j * d, d);
                    check_cross(k, "scatter_add", "ulp", e, tol + tol_of(0, TOL_SCATTER), "%s contribution %lld", label,
                                (long long)j);
                }
            res[k] = got;
            free(S1);
            free(A);
            bufs_release();
        }
        for (int k = 0; k < g_ndev; k++) free(res[k]);
        free(acc);
        free(y);
        free(ref);
        free(mag);
    }
}

/* ---- fused ops: bitwise equal to their unfused sequences ---------------------------------------
 * backend.h promises that every fused op computes exactly the bits of the op sequence it
 * replaces, on every backend: model code switches between the two forms (gemma_forward.c uses
 * the unfused one around the probe hooks) and the logits must not notice. So no tolerance
 * here, and no reference of their own: the unfused ops are the reference (their accuracy and
 * invariance are tested above). Per case and kind:
 *  (b) the unfused sequence over all 64 rows (first instance) == the fused op called one row
 *      at a time (second instance), memcmp, for every output buffer; inputs left untouched;
 *  (a) the fused op over m = 1..64 rows at the start and at the end == its 1-row results,
 *      rows outside the call and guard bytes after every buffer untouched.
 * Buffers are rows of rowb bytes: FB_IN must stay as it was, FB_INOUT / FB_OUT are compared,
 * FB_SCRATCH (add_rmsnorm's t) is unspecified inside the call's rows. */

enum { FB_MAX = 4 };
typedef enum { FB_IN, FB_INOUT, FB_OUT, FB_SCRATCH } fb_role;

typedef struct fcase fcase;
/* Runs the op (fused or unfused) over m rows; buf[i] points at the first row of buffer i. */
typedef void (*fcase_fn)(const fcase *c, tdev *d, ls_backend *be, void *const *buf, const int32_t *pos, int64_t m);

struct fcase {
    const char *op;
    char label[128];
    int nbuf;
    size_t rowb[FB_MAX];
    fb_role role[FB_MAX];
    const void *init[FB_MAX]; /* [NR] rows; NULL: the sentinel (FB_OUT) */
    const char *name[FB_MAX];
    const int32_t *pos; /* [NR] (norm_rope) */
    const float *w1, *w2;
    float eps, s, theta, fscale;
    int32_t n_heads, hd, n_pairs;
    int64_t n;
    bool f32, xn, scale_always;
    fcase_fn fused, unfused;
};

static void fcase_reset(tdev *d, ls_backend *be, void *const *dbf, uint8_t *const *init, const size_t *tot, int nbuf) {
    for (int b = 0; b < nbuf; b++) up(d, be, dbf[b], init[b], tot[b]);
}

static void fcase_down(tdev *d, ls_backend *be, uint8_t *const *host, void *const *dbf, const size_t *tot, int nbuf) {
    for (int b = 0; b < nbuf; b++) down(d, be, host[b], dbf[b], tot[b]);
}

static void run_fcase(const fcase *c) {
    for (int k = 0; k < g_ndev; k++) {
        tdev *d = &g_dev[k];
        void *dbf[FB_MAX], *at[FB_MAX];
        uint8_t *I[FB_MAX], *U[FB_MAX], *F1[FB_MAX], *H[FB_MAX];
        size_t tot[FB_MAX];
        for (int b = 0; b < c->nbuf; b++) {
            tot[b] = c->rowb[b] * NR + sizeof(float) * GUARD;
            dbf[b] = dbuf(d, tot[b]);
            I[b] = xmalloc(tot[b]), U[b] = xmalloc(tot[b]), F1[b] = xmalloc(tot[b]), H[b] = xmalloc(tot[b]);
            fill_sentinel(I[b], tot[b]);
            if (c->init[b]) memcpy(I[b], c->init[b], c->rowb[b] * NR);
        }
        int32_t *dp = NULL;
        if (c->pos) {
            dp = dbuf(d, sizeof(int32_t) * NR);
            up(d, d->be, dp, c->pos, sizeof(int32_t) * NR);
        }
        /* (b) unfused over all rows vs fused one row at a time */
        fcase_reset(d, d->be, dbf, I, tot, c->nbuf);
        c->unfused(c, d, d->be, dbf, dp, NR);
        fcase_down(d, d->be, U, dbf, tot, c->nbuf);
        fcase_reset(d, d->be1, dbf, I, tot, c->nbuf);
        for (int64_t r = 0; r < NR; r++) {
            for (int b = 0; b < c->nbuf; b++) at[b] = (uint8_t *)dbf[b] + c->rowb[b] * (size_t)r;
            c->fused(c, d, d->be1, at, dp ? dp + r : NULL, 1);
        }
        fcase_down(d, d->be1, F1, dbf, tot, c->nbuf);
        d->ops->sync(d->be1);
        for (int b = 0; b < c->nbuf; b++) {
            if (c->role[b] == FB_IN)
                check_rows(k, c->op, "(an input) was modified", F1[b], I[b], 1, tot[b], "%s buffer %s", c->label,
                           c->name[b]);
            else if (c->role[b] != FB_SCRATCH)
                check_rows(k, c->op, "differs from the unfused op sequence", F1[b], U[b], NR, c->rowb[b],
                           "%s buffer %s (fused 1-row calls vs unfused over 64 rows)", c->label, c->name[b]);
            if (!is_sentinel(F1[b], c->rowb[b] * NR, sizeof(float) * GUARD)) {
                print_error("[%s] %s %s: wrote past buffer %s\n", d->name, c->op, c->label, c->name[b]);
                fail();
            }
        }
        /* (a) m rows at the start and at the end vs the 1-row results */
        for (int64_t m = 1; m <= NR; m++) {
            int64_t offs[2];
            const int no = offsets_for(m, offs);
            for (int o = 0; o < no; o++) {
                const int64_t off = offs[o];
                fcase_reset(d, d->be, dbf, I, tot, c->nbuf);
                for (int b = 0; b < c->nbuf; b++) at[b] = (uint8_t *)dbf[b] + c->rowb[b] * (size_t)off;
                c->fused(c, d, d->be, at, dp ? dp + off : NULL, m);
                fcase_down(d, d->be, H, dbf, tot, c->nbuf);
                for (int b = 0; b < c->nbuf; b++) {
                    const size_t rb = c->rowb[b], lo = rb * (size_t)off, hi = rb * (size_t)(off + m);
                    if (c->role[b] != FB_SCRATCH)
                        check_rows(k, c->op, "differs from its 1-row result", H[b] + lo, F1[b] + lo, m, rb,
                                   "%s buffer %s m=%lld (rows %lld..)", c->label, c->name[b], (long long)m,
                                   (long long)off);
                    check_rows(k, c->op, "outside the call was modified", H[b], I[b], 1, lo,
                               "%s buffer %s m=%lld (rows %lld..), before", c->label, c->name[b], (long long)m,
                               (long long)off);
                    check_rows(k, c->op, "outside the call (or its guard) was modified", H[b] + hi, I[b] + hi, 1,
                               tot[b] - hi, "%s buffer %s m=%lld (rows %lld..), after", c->label, c->name[b],
                               (long long)m, (long long)off);
                }
                count_inv(k, c->op, (long)m);
            }
        }
        check_acc(k, c->op, "exact", 0.0, 0.0, "%s", c->label);
        snprintf(stat_of(k, c->op)->note, sizeof stat_of(k, c->op)->note, "== the unfused op sequence, bitwise");
        for (int b = 0; b < c->nbuf; b++) free(I[b]), free(U[b]), free(F1[b]), free(H[b]);
        bufs_release();
    }
}

/* matmul_n (optional op; ls_backend_matmul_n otherwise makes n matmul calls): n weights on
 * one input == n matmul calls, bit for bit, at every M, on every device; on a device that
 * records steps also inside a recorded step (where the CUDA backend merges the launches:
 * docs/cuda.md 2b). Groups whose types share an activation layout and groups that do not. */
static void test_matmul_n(void **state) {
    (void)state;
    static const wcfg G[][3] = {
        {{LS_TYPE_Q5_0, 256, 0, 0, 0, false}, {LS_TYPE_Q5_0, 256, 0, 0, 0, false}, {LS_TYPE_Q8_0, 256, 0, 0, 0, false}},
        {{LS_TYPE_Q4_K, 256, 0, 0, 0, false}, {LS_TYPE_Q6_K, 256, 0, 0, 0, false}, {0, 0, 0, 0, 0, false}},
        {{LS_TYPE_Q4_0, 256, 0, 0, 0, false}, {LS_TYPE_Q4_1, 256, 0, 0, 0, false}, {LS_TYPE_Q5_1, 256, 0, 0, 0, false}},
        {{LS_TYPE_F16, 256, 0, 0, 0, false}, {LS_TYPE_Q8_0, 256, 0, 0, 0, false}, {0, 0, 0, 0, 0, false}},
        {{LS_TYPE_MLX_AFFINE, 256, 4, 64, LS_TYPE_BF16, false},
         {LS_TYPE_Q4_K, 256, 0, 0, 0, false},
         {0, 0, 0, 0, 0, false}},
    };
    static const int64_t ROWS[3] = {133, 64, 40};
    for (size_t gi = 0; gi < sizeof G / sizeof G[0]; gi++) {
        const int n = G[gi][2].K ? 3 : 2;
        char seed[32];
        snprintf(seed, sizeof seed, "matmul_n %zu", gi);
        uint64_t rng = seed_of(seed);
        tweight tw[3];
        const ls_weight *ws[3];
        for (int i = 0; i < n; i++) {
            make_weight(&tw[i], &G[gi][i], ROWS[i], &rng);
            ws[i] = &tw[i].w;
        }
        consts_map();
        const int64_t K = 256;
        float *X = xmalloc(sizeof(float) * (size_t)(NR * K));
        fill_rows(X, NR, K, &rng);
        for (int k = 0; k < g_ndev; k++) {
            tdev *d = &g_dev[k];
            float *dX = dbuf(d, sizeof(float) * (size_t)(NR * K)), *dS[3], *dG[3], *hS[3], *hG[3];
            up(d, d->be, dX, X, sizeof(float) * (size_t)(NR * K));
            for (int i = 0; i < n; i++) {
                dS[i] = dbuf(d, sizeof(float) * (size_t)(NR * ROWS[i]));
                dG[i] = dbuf(d, sizeof(float) * (size_t)(NR * ROWS[i]));
                hS[i] = xmalloc(sizeof(float) * (size_t)(NR * ROWS[i]));
                hG[i] = xmalloc(sizeof(float) * (size_t)(NR * ROWS[i]));
            }
            for (int mi = 0; mi < N_MLIST; mi++) {
                const int64_t m = M_LIST[mi];
                for (int step = 0; step < (d->ops->step_begin ? 2 : 1); step++) {
                    for (int i = 0; i < n; i++) d->ops->matmul(d->be, ws[i], dX, m, dS[i]);
                    if (step) d->ops->step_begin(d->be, 0x6d6e0000 + m);
                    ls_backend_matmul_n(d->be, n, ws, dX, m, dG);
                    if (step) d->ops->step_end(d->be);
                    for (int i = 0; i < n; i++) {
                        down(d, d->be, hS[i], dS[i], sizeof(float) * (size_t)(m * ROWS[i]));
                        down(d, d->be, hG[i], dG[i], sizeof(float) * (size_t)(m * ROWS[i]));
                        check_rows(k, "matmul_n", "differs from its matmul call", hG[i], hS[i], m,
                                   sizeof(float) * (size_t)ROWS[i], "%s group %zu weight %d m=%lld%s", tw[i].label, gi,
                                   i, (long long)m, step ? " (recorded step)" : "");
                    }
                    count_inv(k, "matmul_n", (long)m);
                }
            }
            for (int i = 0; i < n; i++) free(hS[i]), free(hG[i]);
            check_acc(k, "matmul_n", "exact", 0.0, 0.0, "group %zu", gi);
            snprintf(stat_of(k, "matmul_n")->note, sizeof stat_of(k, "matmul_n")->note,
                     "%s; == one matmul call per weight, bitwise", d->ops->matmul_n ? "one pass" : "NULL: n calls");
            bufs_release();
        }
        free(X);
        for (int i = 0; i < n; i++) free(tw[i].deq);
        consts_release();
    }
}

/* A mapped norm vector of n around 1 (some negative, as learned norms can be), or NULL. */
static const float *fcase_norm(bool present, int64_t n, uint64_t *rng) {
    if (!present) return NULL;
    float *w = const_alloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = 1.0f + rng_normal(rng, 0.5f);
    consts_map();
    return w;
}

/* rmsnorm_to */
static void fu_rmsnorm_to(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    (void)pos;
    if (c->nbuf == 1)
        d->ops->rmsnorm_to(be, b[0], b[0], c->w1, m, c->n, c->eps); /* in place */
    else
        d->ops->rmsnorm_to(be, b[1], b[0], c->w1, m, c->n, c->eps);
}
static void un_rmsnorm_to(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    (void)pos;
    float *x = b[c->nbuf - 1];
    if (c->nbuf == 2) d->ops->copy(be, x, b[0], sizeof(float) * (size_t)(m * c->n));
    d->ops->rmsnorm(be, x, c->w1, m, c->n, c->eps);
}

static void test_rmsnorm_to(void **state) {
    (void)state;
    static const struct {
        int64_t n;
        bool weight, in_place;
    } C[] = {{1, true, false},   {31, false, false},  {256, true, false}, {640, true, false},  {999, true, false},
             {999, false, true}, {2560, true, false}, {4099, true, true}, {1152, false, false}};
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        const int64_t n = C[i].n;
        fcase c = {.op = "rmsnorm_to", .n = n, .eps = 1e-6f, .fused = fu_rmsnorm_to, .unfused = un_rmsnorm_to};
        snprintf(c.label, sizeof c.label, "n=%lld %s%s", (long long)n, C[i].weight ? "weight" : "no-weight",
                 C[i].in_place ? " in place" : "");
        uint64_t rng = seed_of(c.label);
        float *x = xmalloc(sizeof(float) * (size_t)(NR * n));
        fill_rows(x, NR, n, &rng);
        c.w1 = fcase_norm(C[i].weight, n, &rng);
        c.nbuf = C[i].in_place ? 1 : 2;
        c.rowb[0] = c.rowb[1] = sizeof(float) * (size_t)n;
        c.init[0] = x;
        c.role[0] = C[i].in_place ? FB_INOUT : FB_IN, c.name[0] = C[i].in_place ? "x" : "src";
        c.role[1] = FB_OUT, c.name[1] = "dst";
        run_fcase(&c);
        free(x);
        consts_release();
    }
}

/* add_rmsnorm */
static void fu_add_rmsnorm(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    (void)pos;
    d->ops->add_rmsnorm(be, b[0], b[1], c->w1, c->s, c->xn ? b[2] : NULL, c->w2, m, c->n, c->eps);
}
static void un_add_rmsnorm(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    (void)pos;
    const ls_backend_ops *o = d->ops;
    o->rmsnorm(be, b[1], c->w1, m, c->n, c->eps);
    o->add(be, b[0], b[1], m * c->n);
    if (c->s != 1.0f || c->scale_always) o->scale(be, b[0], c->s, m * c->n);
    if (c->xn) {
        o->copy(be, b[2], b[0], sizeof(float) * (size_t)(m * c->n));
        o->rmsnorm(be, b[2], c->w2, m, c->n, c->eps);
    }
}

static void test_add_rmsnorm(void **state) {
    (void)state;
    /* scale_always: the unfused side multiplies by s = 1 too (the assistant's form): backend.h
     * says skipping it gives the same bits; row 11 of x holds subnormals and signed zeros next
     * to a zero t row, where a flush to zero would show. */
    static const struct {
        int64_t n;
        bool w_post, w_pre, xn;
        float s;
        bool scale_always;
    } C[] = {{640, true, true, true, 1.0f, false},         {1, true, true, true, 1.0f, false},
             {7, false, true, true, 0.5f, false},          {255, true, false, true, 1.0f, false},
             {1000, true, true, true, 1.7f, false},        {1152, true, true, false, 1.0f, false},
             {2560, false, false, false, 0.03125f, false}, {4097, true, true, true, 1.0f, true},
             {640, true, true, true, 1.0f, true},          {33, true, true, false, 1.0f, true}};
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        const int64_t n = C[i].n;
        fcase c = {.op = "add_rmsnorm",
                   .n = n,
                   .eps = 1e-6f,
                   .s = C[i].s,
                   .xn = C[i].xn,
                   .scale_always = C[i].scale_always,
                   .fused = fu_add_rmsnorm,
                   .unfused = un_add_rmsnorm};
        snprintf(c.label, sizeof c.label, "n=%lld w_post %s w_pre %s s=%g %s%s", (long long)n,
                 C[i].w_post ? "yes" : "no", C[i].w_pre ? "yes" : "no", (double)C[i].s, C[i].xn ? "xn" : "no xn",
                 C[i].scale_always ? " (unfused scales by 1)" : "");
        uint64_t rng = seed_of(c.label);
        float *x = xmalloc(sizeof(float) * (size_t)(NR * n)), *t = xmalloc(sizeof(float) * (size_t)(NR * n));
        fill_rows(x, NR, n, &rng);
        fill_rows(t, NR, n, &rng);       /* row 11 of t is all zeros */
        for (int64_t r = 0; r < NR; r++) /* the residual is larger than the block output, mostly */
            for (int64_t j = 0; j < n; j++) x[r * n + j] *= 8.0f;
        const float odd[] = {1e-40f, -3e-42f, -0.0f, 0.0f, 1.17549421e-38f};
        for (int j = 0; j < 5 && j < n; j++) x[11 * n + j] = odd[j];
        if (n > 3) x[20 * n + 3] = NAN, x[21 * n + 1] = INFINITY;
        c.w1 = fcase_norm(C[i].w_post, n, &rng);
        c.w2 = fcase_norm(C[i].w_pre, n, &rng);
        c.nbuf = C[i].xn ? 3 : 2;
        for (int b = 0; b < 3; b++) c.rowb[b] = sizeof(float) * (size_t)n;
        c.init[0] = x, c.role[0] = FB_INOUT, c.name[0] = "x";
        c.init[1] = t, c.role[1] = FB_SCRATCH, c.name[1] = "t";
        c.role[2] = FB_OUT, c.name[2] = "xn";
        run_fcase(&c);
        free(x);
        free(t);
        consts_release();
    }
}

/* norm_rope */
static void fu_norm_rope(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    d->ops->norm_rope(be, b[0], c->w1, m, c->n_heads, c->hd, c->eps, c->n_pairs, pos, c->theta, c->fscale);
}
static void un_norm_rope(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    d->ops->rmsnorm(be, b[0], c->w1, m * c->n_heads, c->hd, c->eps);
    d->ops->rope_pairs(be, b[0], m, c->n_heads, c->hd, c->n_pairs, pos, c->theta, c->fscale);
}

static void test_norm_rope(void **state) {
    (void)state;
    /* head dims 1..1024 (rope_pairs' limit: hd / 2 <= 512; odd ones only without rotated pairs),
     * full, partial ("proportional") and no rotation, linear position scaling, no weight */
    static const struct {
        int32_t hd, heads, pairs;
        float theta, fscale;
        bool weight;
    } C[] = {{1, 4, 0, 1e4f, 1.0f, true},      {7, 3, 0, 1e4f, 1.0f, true},      {2, 5, 1, 1e4f, 1.0f, true},
             {6, 2, 3, 1e4f, 1.0f, false},     {34, 3, 10, 1e4f, 1.0f, true},    {64, 8, 32, 1e4f, 1.0f, true},
             {128, 4, 16, 1e6f, 1.0f, true},   {130, 2, 65, 1e4f, 1.0f, true},   {256, 4, 128, 1e6f, 0.125f, true},
             {256, 2, 128, 1e4f, 1.0f, false}, {300, 1, 100, 1e4f, 1.0f, true},  {512, 2, 64, 1e6f, 1.0f, true},
             {512, 1, 256, 1e4f, 0.25f, true}, {1024, 1, 512, 1e4f, 1.0f, true}, {1024, 2, 0, 1e4f, 1.0f, true}};
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        const int64_t n = (int64_t)C[i].hd * C[i].heads;
        fcase c = {.op = "norm_rope",
                   .n = n,
                   .eps = 1e-6f,
                   .n_heads = C[i].heads,
                   .hd = C[i].hd,
                   .n_pairs = C[i].pairs,
                   .theta = C[i].theta,
                   .fscale = C[i].fscale,
                   .fused = fu_norm_rope,
                   .unfused = un_norm_rope};
        snprintf(c.label, sizeof c.label, "hd=%d heads=%d n_pairs=%d theta=%g freq_scale=%g %s", C[i].hd, C[i].heads,
                 C[i].pairs, (double)C[i].theta, (double)C[i].fscale, C[i].weight ? "weight" : "no-weight");
        uint64_t rng = seed_of(c.label);
        float *x = xmalloc(sizeof(float) * (size_t)(NR * n));
        int32_t pos[NR];
        fill_rows(x, NR, n, &rng);
        for (int r = 0; r < NR; r++) pos[r] = (int32_t)(rng_next(&rng) % 40000);
        pos[0] = 0, pos[1] = 1, pos[2] = 131071, pos[NR - 1] = 65535, pos[NR - 2] = pos[NR - 3];
        c.w1 = fcase_norm(C[i].weight, C[i].hd, &rng);
        c.pos = pos;
        c.nbuf = 1;
        c.rowb[0] = sizeof(float) * (size_t)n;
        c.init[0] = x, c.role[0] = FB_INOUT, c.name[0] = "x";
        run_fcase(&c);
        free(x);
        consts_release();
    }
}

/* kv_store2 */
static void fu_kv_store2(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    (void)pos;
    d->ops->kv_store2(be, b[2], b[3], c->f32, b[0], b[1], m * c->n);
}
static void un_kv_store2(const fcase *c, tdev *d, ls_backend *be, void *const *b, const int32_t *pos, int64_t m) {
    (void)pos;
    d->ops->kv_store(be, b[2], c->f32, b[0], m * c->n);
    d->ops->kv_store(be, b[3], c->f32, b[1], m * c->n);
}

static void test_kv_store2(void **state) {
    (void)state;
    const float specials[] = {65504.0f, 65519.996f, 65520.0f,   -70000.0f, INFINITY, -INFINITY, NAN,    1e-8f,
                              0x1p-25f, 0x1.8p-25f, 0x1.4p-23f, 6.1e-5f,   -0.0f,    2049.0f,   2051.0f};
    const int nsp = (int)(sizeof specials / sizeof specials[0]);
    static const int64_t D[] = {1, 999, 512, 1024};
    for (int f32 = 0; f32 < 2; f32++)
        for (size_t di = 0; di < sizeof D / sizeof D[0]; di++) {
            const int64_t n = D[di];
            fcase c = {.op = "kv_store2", .n = n, .f32 = f32 != 0, .fused = fu_kv_store2, .unfused = un_kv_store2};
            snprintf(c.label, sizeof c.label, "%s d=%lld", f32 ? "f32" : "f16", (long long)n);
            uint64_t rng = seed_of(c.label);
            float *k = xmalloc(sizeof(float) * (size_t)(NR * n)), *v = xmalloc(sizeof(float) * (size_t)(NR * n));
            fill_rows(k, NR, n, &rng);
            fill_rows(v, NR, n, &rng);
            for (int i = 0; i < nsp; i++) k[(3 * n + 7 * i) % (NR * n)] = specials[i];
            for (int i = 0; i < nsp; i++) v[(40 * n + 5 * i + 1) % (NR * n)] = -specials[i];
            c.nbuf = 4;
            c.rowb[0] = c.rowb[1] = sizeof(float) * (size_t)n;
            c.rowb[2] = c.rowb[3] = (f32 ? 4 : 2) * (size_t)n;
            c.init[0] = k, c.role[0] = FB_IN, c.name[0] = "k";
            c.init[1] = v, c.role[1] = FB_IN, c.name[1] = "v";
            c.role[2] = FB_OUT, c.name[2] = "k cache";
            c.role[3] = FB_OUT, c.name[3] = "v cache";
            run_fcase(&c);
            free(k);
            free(v);
        }
}

/* ---- memory ops: alloc / release / upload / download / copy / copy_rows / sync ------------- */

static void test_memory(void **state) {
    (void)state;
    static const size_t SZ[] = {1, 3, 64, 1000, 4097, (1u << 20) + 13};
    enum { NS = sizeof SZ / sizeof SZ[0] };
    uint64_t rng = seed_of("memory");
    for (int k = 0; k < g_ndev; k++) {
        tdev *d = &g_dev[k];
        void *bufs[NS];
        for (int i = 0; i < NS; i++) bufs[i] = dbuf(d, SZ[i]); /* non-NULL, 64-byte aligned */
        for (int i = 0; i < NS; i++) {
            uint8_t *h = xmalloc(SZ[i]), *g = xmalloc(SZ[i]);
            for (size_t j = 0; j < SZ[i]; j++) h[j] = (uint8_t)rng_next(&rng);
            up(d, d->be, bufs[i], h, SZ[i]);
            if (SZ[i] >= 16) { /* a partial upload at an odd offset, through the other instance */
                for (int j = 0; j < 5; j++) h[3 + j] = (uint8_t)(0xa0 + j);
                up(d, d->be1, (uint8_t *)bufs[i] + 3, h + 3, 5);
            }
            down(d, d->be, g, bufs[i], SZ[i]);
            check_rows(k, "upload", "(download after upload) differs", g, h, 1, SZ[i], "%zu bytes", SZ[i]);
            if (SZ[i] >= 16) { /* a partial download at an odd offset */
                memset(g, 0, SZ[i]);
                down(d, d->be1, g + 5, (uint8_t *)bufs[i] + 5, SZ[i] - 9);
                check_rows(k, "download", "(partial, offset 5) differs", g + 5, h + 5, 1, SZ[i] - 9, "%zu bytes",
                           SZ[i]);
            }
            free(h);
            free(g);
        }
        check_acc(k, "alloc", "exact", 0.0, 0.0, "%d buffers", NS);
        check_acc(k, "upload", "exact", 0.0, 0.0, "%d buffers", NS);
        check_acc(k, "download", "exact", 0.0, 0.0, "%d buffers", NS);
        bufs_release();
        check_acc(k, "release", "exact", 0.0, 0.0, "%d buffers", NS);
        if (d->ops->host_memory) {
            /* backend.h: host_memory lets an op write straight into a host buffer of one's own */
            float h[999], want[999];
            for (int i = 0; i < 999; i++) h[i] = rng_normal(&rng, 1.0f), want[i] = (float)((double)h[i] * 0.375);
            d->ops->scale(d->be, h, 0.375f, 999);
            d->ops->sync(d->be);
            check_rows(k, "scale", "(on a host buffer, host_memory) differs", h, want, 1, sizeof h, "n=999");
            snprintf(stat_of(k, "alloc")->note, sizeof stat_of(k, "alloc")->note,
                     "host_memory: an op on a plain host buffer checked");
        }
    }
}

static void test_copy(void **state) {
    (void)state;
    const size_t B = (size_t)22 << 20;
    static const struct {
        size_t src, dst, bytes;
    } C[] = {
        {0, 100, 1},
        {7, 1003, 3},
        {64, 4096, 1000}, /* disjoint, odd offsets */
        {5, 3, 1000},
        {3, 5, 1000}, /* overlap by all but 2 bytes */
        {100, 0, 65541},
        {0, 100, 65541}, /* dst < src, dst > src */
        {4097, 1, 200000},
        {1, 4097, 200000},
        {50000, 0, 100000},
        {0, 50000, 100000},
        {16, 0, 3u << 20},
        {0, 16, 3u << 20}, /* tiny distance, megabytes */
        {1u << 20, 0, 20u << 20},
        {0, 1u << 20, 20u << 20}, /* KV-compaction-sized moves */
        {123, 123, 5000},
        {10, 20, 0}, /* no-ops */
    };
    uint64_t rng = seed_of("copy");
    uint8_t *init = xmalloc(B), *want = xmalloc(B), *got = xmalloc(B);
    for (size_t i = 0; i < B; i += 8) {
        const uint64_t v = rng_next(&rng);
        memcpy(init + i, &v, 8);
    }
    for (int k = 0; k < g_ndev; k++) {
        tdev *d = &g_dev[k];
        uint8_t *dB = dbuf(d, B);
        for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
            up(d, d->be, dB, init, B);
            d->ops->copy(d->be, dB + C[i].dst, dB + C[i].src, C[i].bytes);
            down(d, d->be, got, dB, B);
            memcpy(want, init, B);
            memmove(want + C[i].dst, want + C[i].src, C[i].bytes);
            check_rows(k, "copy", "differs from memmove", got, want, 1, B, "src+%zu -> dst+%zu, %zu bytes", C[i].src,
                       C[i].dst, C[i].bytes);
            check_acc(k, "copy", "exact", 0.0, 0.0, "case %zu", i);
            if (k > 0) check_cross(k, "copy", "exact", 0.0, 0.0, "case %zu", i);
        }
        bufs_release();
    }
    free(init);
    free(want);
    free(got);
}

static void test_copy_rows(void **state) {
    (void)state;
    static const struct {
        int64_t width, dst_stride, src_stride;
    } C[] = {{999, 1003, 1000}, {1, 3, 2}, {512, 512, 512}, {64, 64, 100}};
    uint64_t rng = seed_of("copy_rows");
    for (size_t ci = 0; ci < sizeof C / sizeof C[0]; ci++) {
        const int64_t w = C[ci].width, ds = C[ci].dst_stride, ss = C[ci].src_stride;
        const size_t sb = sizeof(float) * (size_t)(NR * ss), db = sizeof(float) * (size_t)(NR * ds + GUARD);
        float *src = xmalloc(sb), *want = xmalloc(db), *got = xmalloc(db);
        for (int64_t i = 0; i < NR * ss; i++) src[i] = rng_normal(&rng, 1.0f);
        for (int k = 0; k < g_ndev; k++) {
            tdev *d = &g_dev[k];
            float *dS = dbuf(d, sb), *dD = dbuf(d, db);
            up(d, d->be, dS, src, sb);
            for (int64_t m = 1; m <= NR; m++) {
                int64_t offs[2];
                const int no = offsets_for(m, offs);
                for (int o = 0; o < no; o++) {
                    const int64_t off = offs[o];
                    ls_backend *be = m == 1 ? d->be1 : d->be;
                    up_sentinel(d, dD, db);
                    d->ops->copy_rows(be, dD + off * ds, ds, dS + off * ss, ss, w, m);
                    down(d, be, got, dD, db);
                    fill_sentinel(want, db);
                    for (int64_t r = off; r < off + m; r++)
                        memcpy(want + r * ds, src + r * ss, sizeof(float) * (size_t)w);
                    check_rows(k, "copy_rows", "differs from the host copy (gaps and guard included)", got, want, 1, db,
                               "width=%lld strides %lld/%lld rows=%lld at %lld", (long long)w, (long long)ds,
                               (long long)ss, (long long)m, (long long)off);
                    count_inv(k, "copy_rows", (long)m);
                }
            }
            check_acc(k, "copy_rows", "exact", 0.0, 0.0, "width %lld", (long long)w);
            if (k > 0) check_cross(k, "copy_rows", "exact", 0.0, 0.0, "width %lld", (long long)w);
            bufs_release();
        }
        free(src);
        free(want);
        free(got);
    }
}

/* sync: what one instance wrote is what another instance of the kind reads after it. */
static void test_sync(void **state) {
    (void)state;
    const int64_t n = 1 << 20;
    float *h = xmalloc(sizeof(float) * (size_t)n);
    for (int k = 0; k < g_ndev; k++) {
        tdev *d = &g_dev[k];
        d->ops->sync(d->be); /* nothing queued */
        float *dA = dbuf(d, sizeof(float) * (size_t)n), *dB = dbuf(d, sizeof(float) * (size_t)n);
        d->ops->fill(d->be, dA, 1.5f, n);
        d->ops->scale(d->be, dA, 2.0f, n);
        d->ops->copy(d->be, dB, dA, sizeof(float) * (size_t)n);
        d->ops->sync(d->be);
        d->ops->add(d->be1, dB, dA, n); /* 3 + 3 on the other instance */
        d->ops->scale(d->be1, dA, 3.0f, n);
        d->ops->sync(d->be1);
        down(d, d->be, h, dB, sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            if (h[i] != 6.0f) {
                print_error("[%s] sync: element %lld is %.9g, want 6\n", d->name, (long long)i, (double)h[i]);
                fail();
            }
        down(d, d->be, h, dA, sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            if (h[i] != 9.0f) {
                print_error("[%s] sync: element %lld is %.9g, want 9\n", d->name, (long long)i, (double)h[i]);
                fail();
            }
        check_acc(k, "sync", "exact", 0.0, 0.0, "two instances");
        bufs_release();
    }
    free(h);
}

/* free (more instances made and freed, in another order) and map_const's reference count. */
/* host_alloc / host_free (optional: page-locked host memory) through ls_host_buffer_alloc,
 * which falls back to aligned memory without them: 64-byte aligned, a download fills it
 * exactly, an upload from it arrives exactly, and it outlives the backend that made it. */
static void test_host_buffer(void **state) {
    (void)state;
    uint64_t rng = seed_of("host_buffer");
    for (int k = 0; k < g_ndev; k++) {
        tdev *d = &g_dev[k];
        assert_null(ls_host_buffer_alloc(d->be, 0));
        ls_host_buffer_free(NULL);
        enum { N = 262144 + 5 }; /* a Gemma logits row and a few */
        float *h = ls_host_buffer_alloc(d->be, sizeof(float) * N), *want = xmalloc(sizeof(float) * N);
        assert_non_null(h);
        assert_int_equal((uintptr_t)h % 64, 0);
        for (int i = 0; i < N; i++) want[i] = rng_normal(&rng, 1.0f);
        float *g = dbuf(d, sizeof(float) * N);
        up(d, d->be, g, want, sizeof(float) * N);
        down(d, d->be, h, g, sizeof(float) * N);
        check_rows(k, "host_alloc", "(download into it) differs", h, want, 1, sizeof(float) * N, "n=%d", N);
        for (int i = 0; i < N; i++) h[i] = -want[i], want[i] = h[i];
        up(d, d->be1, g, h, sizeof(float) * N);
        memset(h, 0, sizeof(float) * N);
        down(d, d->be1, h, g, sizeof(float) * N);
        check_rows(k, "host_alloc", "(upload from it) differs", h, want, 1, sizeof(float) * N, "n=%d", N);
        bufs_release();
        /* made by a backend that is gone, freed after it */
        ls_backend_params p = PARAMS;
        ls_backend *tmp = d->kind->create(&p);
        assert_non_null(tmp);
        void *late = ls_host_buffer_alloc(tmp, 4097);
        assert_non_null(late);
        memset(late, 0x5a, 4097);
        tmp->ops->free(tmp);
        ls_host_buffer_free(late);
        ls_host_buffer_free(h);
        free(want);
        check_acc(k, "host_alloc", "exact", 0.0, 0.0, "%s", d->ops->host_alloc ? "page-locked" : "(none: aligned)");
        check_acc(k, "host_free", "exact", 0.0, 0.0, "after its backend is freed");
    }
}

static void test_lifecycle(void **state) {
    (void)state;
    for (int k = 0; k < g_ndev; k++) {
        tdev *d = &g_dev[k];
        ls_backend *extra[3];
        for (int i = 0; i < 3; i++) {
            ls_backend_params p = PARAMS;
            p.n_threads = i + 1;
            p.max_keys = 64 << i;
            extra[i] = d->kind->create(&p);
            assert_non_null(extra[i]);
            assert_ptr_equal(extra[i]->ops, d->ops);
        }
        extra[1]->ops->free(extra[1]);
        extra[0]->ops->free(extra[0]);
        /* the survivor still works */
        float *buf = extra[2]->ops->alloc(extra[2], sizeof(float) * 100);
        assert_non_null(buf);
        extra[2]->ops->fill(extra[2], buf, 2.5f, 100);
        float h[100];
        extra[2]->ops->download(extra[2], h, buf, sizeof h);
        for (int i = 0; i < 100; i++) assert_true(h[i] == 2.5f);
        extra[2]->ops->release(extra[2], buf);
        extra[2]->ops->free(extra[2]);
        /* map_const is reference counted: mapped twice, unmapped once, still usable */
        float *w = aligned_alloc(64, sizeof(float) * 128);
        assert_non_null(w);
        for (int i = 0; i < 128; i++) w[i] = (float)(i + 1);
        char err[256] = "";
        assert_int_equal(d->kind->map_const(w, sizeof(float) * 128, err, sizeof err), 0);
        assert_int_equal(d->kind->map_const(w, sizeof(float) * 128, err, sizeof err), 0);
        d->kind->unmap_const(w);
        float *dx = dbuf(d, sizeof(float) * 128);
        float x[128];
        for (int i = 0; i < 128; i++) x[i] = 0.5f;
        up(d, d->be, dx, x, sizeof x);
        d->ops->mul_rows(d->be, dx, w, 2.0f, 1, 128);
        down(d, d->be, x, dx, sizeof x);
        for (int i = 0; i < 128; i++) assert_true(x[i] == (float)(i + 1));
        d->kind->unmap_const(w);
        free(w);
        bufs_release();
        check_acc(k, "free", "exact", 0.0, 0.0, "3 instances");
        snprintf(stat_of(k, "free")->note, sizeof stat_of(k, "free")->note,
                 "create/free x3; map_const twice + unmap twice (reference count)");
    }
}

/* ---- step capture ----------------------------------------------------------------------------- */

typedef struct {
    ls_weight w;
    const float *nw;
    float *x, *h, *y, *u;
    void *kv;
    int64_t K, N;
} chain_bufs;

static void run_chain(tdev *d, const chain_bufs *c, int64_t m) {
    const ls_backend_ops *o = d->ops;
    o->copy_rows(d->be, c->h, c->K, c->x, c->K, c->K, m);
    o->rmsnorm(d->be, c->h, c->nw, m, c->K, 1e-6f);
    o->matmul(d->be, &c->w, c->h, m, c->y);
    o->gelu_mul(d->be, c->y, c->u, m * c->N);
    o->axpby(d->be, c->y, c->u, 0.5f, 1.25f, m * c->N);
    o->softcap(d->be, c->y, 30.0f, m * c->N);
    o->kv_store(d->be, c->kv, false, c->y, m * c->N);
}

/* The attention prologue of a layer (gemma_forward.c attention_block): norm_rope of the q heads
 * then of the k heads, Gemma 4's value norm of v, and the kv_store2 of k and v. A recording
 * backend may run the four as one launch (the CUDA backend does); a replayed step must give
 * the bits of the four direct launches, for f16 and f32 caches, with and without the norm. */
typedef struct {
    float *q, *k, *v;
    void *ck, *cv;
    const float *wq, *wk;
    const int32_t *pos;
    int32_t nh, nkv, hd, pairs;
    bool f32, vnorm;
} attn_bufs;

static void run_attn_chain(tdev *d, const attn_bufs *a, int64_t m) {
    const ls_backend_ops *o = d->ops;
    o->norm_rope(d->be, a->q, a->wq, m, a->nh, a->hd, 1e-6f, a->pairs, a->pos, 1e6f, 1.0f);
    o->norm_rope(d->be, a->k, a->wk, m, a->nkv, a->hd, 1e-6f, a->pairs, a->pos, 1e6f, 1.0f);
    if (a->vnorm) o->rmsnorm(d->be, a->v, NULL, m * a->nkv, a->hd, 1e-6f);
    o->kv_store2(d->be, a->ck, a->cv, a->f32, a->k, a->v, m * a->nkv * a->hd);
}

static void step_attn_prologue(int k, tdev *d) {
    uint64_t rng = seed_of("step attention prologue");
    enum { MX = 9 };
    const int32_t nh = 4, nkv = 2, hd = 256;
    const int64_t qn = (int64_t)nh * hd, kn = (int64_t)nkv * hd;
    float *wq = const_alloc(sizeof(float) * hd), *wk = const_alloc(sizeof(float) * hd);
    for (int32_t i = 0; i < hd; i++) wq[i] = 1.0f + rng_normal(&rng, 0.2f), wk[i] = 1.0f + rng_normal(&rng, 0.2f);
    consts_map();
    float *in[3];
    const int64_t w[3] = {qn, kn, kn};
    for (int b = 0; b < 3; b++) {
        in[b] = xmalloc(sizeof(float) * (size_t)(MX * w[b]));
        fill_rows(in[b], MX, w[b], &rng);
    }
    int32_t pos[MX];
    for (int r = 0; r < MX; r++) pos[r] = 37 + 5 * r;
    attn_bufs a = {.wq = wq, .wk = wk, .nh = nh, .nkv = nkv, .hd = hd, .pairs = hd / 4};
    a.q = dbuf(d, sizeof(float) * (size_t)(MX * qn));
    a.k = dbuf(d, sizeof(float) * (size_t)(MX * kn));
    a.v = dbuf(d, sizeof(float) * (size_t)(MX * kn));
    a.ck = dbuf(d, sizeof(float) * (size_t)(MX * kn));
    a.cv = dbuf(d, sizeof(float) * (size_t)(MX * kn));
    int32_t *dp = dbuf(d, sizeof pos);
    up(d, d->be, dp, pos, sizeof pos);
    a.pos = dp;
    void *const bufs[5] = {a.q, a.k, a.v, a.ck, a.cv};
    static const int64_t MS[] = {1, 5, MX};
    for (int variant = 0; variant < 4; variant++) {
        a.f32 = variant & 1;
        a.vnorm = variant & 2;
        const size_t rb[5] = {sizeof(float) * (size_t)qn, sizeof(float) * (size_t)kn, sizeof(float) * (size_t)kn,
                              (a.f32 ? 4 : 2) * (size_t)kn, (a.f32 ? 4 : 2) * (size_t)kn};
        for (int mi = 0; mi < 3; mi++) {
            const int64_t m = MS[mi];
            uint8_t *want[5], *got[5];
            for (int rep = 0; rep < 3; rep++) { /* direct, then recorded twice (record, replay) */
                for (int b = 0; b < 3; b++) up(d, d->be, bufs[b], in[b], sizeof(float) * (size_t)(m * w[b]));
                if (rep > 0) d->ops->step_begin(d->be, 1000 + 10 * variant + mi);
                run_attn_chain(d, &a, m);
                if (rep > 0) d->ops->step_end(d->be);
                for (int b = 0; b < 5; b++) {
                    uint8_t *h = xmalloc(rb[b] * (size_t)m);
                    down(d, d->be, h, bufs[b], rb[b] * (size_t)m);
                    if (rep == 0) {
                        want[b] = h;
                        continue;
                    }
                    got[b] = h;
                    check_rows(k, "step_end", "(attention prologue replay) differs from direct launches", got[b],
                               want[b], m, rb[b], "m=%lld %s cache, %s value norm, buffer %d, pass %d", (long long)m,
                               a.f32 ? "f32" : "f16", a.vnorm ? "with" : "no", b, rep);
                    free(got[b]);
                }
            }
            for (int b = 0; b < 5; b++) free(want[b]);
            count_inv(k, "step_end", (long)m);
        }
    }
    for (int b = 0; b < 3; b++) free(in[b]);
    bufs_release();
    consts_release();
}

static void test_step(void **state) {
    (void)state;
    for (int k = 0; k < g_ndev; k++) {
        tdev *d = &g_dev[k];
        assert_true((d->ops->step_begin == NULL) == (d->ops->step_end == NULL));
        if (!d->ops->step_begin) {
            snprintf(stat_of(k, "step_begin")->note, sizeof stat_of(k, "step_begin")->note, "NULL: no step capture");
            snprintf(stat_of(k, "step_end")->note, sizeof stat_of(k, "step_end")->note, "NULL: no step capture");
            continue;
        }
        uint64_t rng = seed_of("step");
        const int64_t K = 512, N = 133, MX = 17;
        tweight tw;
        make_gguf(&tw, LS_TYPE_Q4_K, N, K, &rng);
        float *nw = const_alloc(sizeof(float) * (size_t)K);
        for (int64_t i = 0; i < K; i++) nw[i] = 1.0f + rng_normal(&rng, 0.2f);
        consts_map();
        chain_bufs c = {.w = tw.w, .nw = nw, .K = K, .N = N};
        c.x = dbuf(d, sizeof(float) * (size_t)(MX * K));
        c.h = dbuf(d, sizeof(float) * (size_t)(MX * K));
        c.y = dbuf(d, sizeof(float) * (size_t)(MX * N));
        c.u = dbuf(d, sizeof(float) * (size_t)(MX * N));
        c.kv = dbuf(d, 2 * (size_t)(MX * N));
        float *in[2][2]; /* two input sets (x, u) */
        for (int s = 0; s < 2; s++) {
            in[s][0] = xmalloc(sizeof(float) * (size_t)(MX * K));
            in[s][1] = xmalloc(sizeof(float) * (size_t)(MX * N));
            fill_rows(in[s][0], MX, K, &rng);
            for (int64_t i = 0; i < MX * N; i++) in[s][1][i] = rng_normal(&rng, 1.0f);
        }
        static const int64_t MS[] = {1, 4, 17};
        float *direct_y[3][2], *y = xmalloc(sizeof(float) * (size_t)(MX * N));
        uint16_t *direct_kv[3][2], *kv = xmalloc(2 * (size_t)(MX * N));
        for (int mi = 0; mi < 3; mi++)
            for (int s = 0; s < 2; s++) {
                const int64_t m = MS[mi];
                up(d, d->be, c.x, in[s][0], sizeof(float) * (size_t)(m * K));
                up(d, d->be, c.u, in[s][1], sizeof(float) * (size_t)(m * N));
                run_chain(d, &c, m);
                direct_y[mi][s] = xmalloc(sizeof(float) * (size_t)(m * N));
                direct_kv[mi][s] = xmalloc(2 * (size_t)(m * N));
                down(d, d->be, direct_y[mi][s], c.y, sizeof(float) * (size_t)(m * N));
                down(d, d->be, direct_kv[mi][s], c.kv, 2 * (size_t)(m * N));
            }
        d->ops->step_begin(d->be, 99); /* an empty step */
        d->ops->step_end(d->be);
        /* recorded steps, replayed: keys interleaved, inputs changed between replays */
        static const int SEQ[][2] = {{0, 0}, {0, 0}, {1, 0}, {0, 1}, {2, 0}, {1, 1}, {2, 1}, {0, 0}, {2, 0}};
        for (size_t i = 0; i < sizeof SEQ / sizeof SEQ[0]; i++) {
            const int mi = SEQ[i][0], s = SEQ[i][1];
            const int64_t m = MS[mi];
            up(d, d->be, c.x, in[s][0], sizeof(float) * (size_t)(m * K));
            up(d, d->be, c.u, in[s][1], sizeof(float) * (size_t)(m * N));
            d->ops->step_begin(d->be, m);
            run_chain(d, &c, m);
            d->ops->step_end(d->be);
            down(d, d->be, y, c.y, sizeof(float) * (size_t)(m * N));
            down(d, d->be, kv, c.kv, 2 * (size_t)(m * N));
            check_rows(k, "step_end", "(step replay) differs from direct launches", y, direct_y[mi][s], m,
                       sizeof(float) * (size_t)N, "m=%lld step %zu input set %d", (long long)m, i, s);
            check_rows(k, "step_end", "(step replay, KV) differs from direct launches", kv, direct_kv[mi][s], m,
                       2 * (size_t)N, "m=%lld step %zu input set %d", (long long)m, i, s);
            count_inv(k, "step_end", (long)m);
        }
        check_acc(k, "step_begin", "exact", 0.0, 0.0, "chain of 7 ops");
        check_acc(k, "step_end", "exact", 0.0, 0.0, "chain of 7 ops");
        for (int mi = 0; mi < 3; mi++)
            for (int s = 0; s < 2; s++) free(direct_y[mi][s]), free(direct_kv[mi][s]);
        for (int s = 0; s < 2; s++) free(in[s][0]), free(in[s][1]);
        free(y);
        free(kv);
        free(tw.deq);
        bufs_release();
        consts_release();
        step_attn_prologue(k, d);
    }
}

/* ---- the op table: every slot of ls_backend_ops and its test ------------------------------- */

typedef struct {
    size_t off;
    const char *slot, *test_name;
    CMUnitTestFunction test;
    bool optional;
} op_slot;

#define SLOT(f, t)                                                                                                     \
    { offsetof(ls_backend_ops, f), #f, #t, t, false }
#define SLOT_OPT(f, t)                                                                                                 \
    { offsetof(ls_backend_ops, f), #f, #t, t, true }

static void test_op_table(void **state);

static const op_slot OP_SLOTS[] = {
    SLOT(alloc, test_memory),
    SLOT(release, test_memory),
    SLOT_OPT(host_alloc, test_host_buffer),
    SLOT_OPT(host_free, test_host_buffer),
    SLOT(upload, test_memory),
    SLOT(download, test_memory),
    SLOT(copy, test_copy),
    SLOT(copy_rows, test_copy_rows),
    SLOT(fill, test_fill),
    SLOT(sync, test_sync),
    SLOT(matmul, test_matmul),
    SLOT_OPT(matmul_n, test_matmul_n),
    SLOT(get_rows, test_get_rows),
    SLOT(rmsnorm, test_rmsnorm),
    SLOT(rope_pairs, test_rope_pairs),
    SLOT(attention, test_attention),
    SLOT(gelu_mul, test_gelu_mul),
    SLOT(add, test_add),
    SLOT(scale, test_scale),
    SLOT(axpby, test_axpby),
    SLOT(mul_rows, test_mul_rows),
    SLOT(softcap, test_softcap),
    SLOT(kv_store, test_kv_store),
    SLOT(gather_rows, test_gather_rows),
    SLOT(scatter_add, test_scatter_add),
    SLOT(rmsnorm_to, test_rmsnorm_to),
    SLOT(add_rmsnorm, test_add_rmsnorm),
    SLOT(norm_rope, test_norm_rope),
    SLOT(kv_store2, test_kv_store2),
    SLOT_OPT(step_begin, test_step),
    SLOT_OPT(step_end, test_step),
    SLOT(free, test_lifecycle),
};
#define N_SLOTS (sizeof OP_SLOTS / sizeof OP_SLOTS[0])

/* Every member after host_memory is an op pointer; this fails to compile when one is added
 * (or removed) without updating OP_SLOTS; test_op_table checks that each offset is there. */
_Static_assert(offsetof(ls_backend_ops, alloc) + N_SLOTS * sizeof(void (*)(void)) == sizeof(ls_backend_ops),
               "ls_backend_ops changed: add the new op to OP_SLOTS with a test that covers it");

static void test_op_table(void **state) {
    (void)state;
    for (size_t off = offsetof(ls_backend_ops, alloc); off < sizeof(ls_backend_ops); off += sizeof(void (*)(void))) {
        int found = 0;
        for (size_t i = 0; i < N_SLOTS; i++) found += OP_SLOTS[i].off == off;
        if (found != 1) print_error("ls_backend_ops slot at offset %zu is in OP_SLOTS %d times\n", off, found);
        assert_int_equal(found, 1);
    }
    for (int k = 0; k < g_ndev; k++) {
        const ls_backend_ops *o = g_dev[k].ops;
        assert_non_null(o->name);
        for (size_t i = 0; i < N_SLOTS; i++) {
            void (*fn)(void);
            memcpy(&fn, (const char *)o + OP_SLOTS[i].off, sizeof fn);
            if (!fn && !OP_SLOTS[i].optional) {
                print_error("[%s] op %s is NULL (only step_begin / step_end may be)\n", g_dev[k].name,
                            OP_SLOTS[i].slot);
                fail();
            }
        }
    }
}

/* ---- setup, summary, main ----------------------------------------------------------------------- */

static int group_setup(void **state) {
    (void)state;
    g_t0 = now_s();
    static const char *const KINDS[] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) {
        const ls_device_kind *kind = ls_device_kind_find(KINDS[i]);
        if (!kind) continue;
        if (!kind->available()) {
            printf("kind %s: built but not available here, skipped\n", KINDS[i]);
            continue;
        }
        tdev *d = &g_dev[g_ndev];
        d->kind = kind;
        d->name = kind->name;
        d->is_cpu = strcmp(kind->name, "cpu") == 0;
        d->be = kind->create(&PARAMS);
        ls_backend_params p1 = PARAMS;
        p1.n_threads = 1;
        d->be1 = kind->create(&p1);
        if (!d->be || !d->be1) {
            fprintf(stderr, "kind %s: create failed\n", kind->name);
            return -1;
        }
        d->ops = d->be->ops;
        if (d->be1->ops != d->ops) {
            fprintf(stderr, "kind %s: two instances with different op tables\n", kind->name);
            return -1;
        }
        printf("kind %s: device \"%s\", ops \"%s\", host_memory %d, step capture %s\n", kind->name, kind->device_name(),
               d->ops->name, (int)d->ops->host_memory, d->ops->step_begin ? "yes" : "no");
        g_ndev++;
    }
    return g_ndev > 0 && strcmp(g_dev[0].name, "cpu") == 0 ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    printf("\n==== backend conformance summary (largest error per kind and op; ratio = error / tolerance) ====\n");
    for (int k = 0; k < g_ndev; k++)
        for (size_t i = 0; i < N_SLOTS; i++) {
            if (i > 0 && strcmp(OP_SLOTS[i].slot, OP_SLOTS[i - 1].slot) == 0) continue;
            opstat *s = stat_of(k, OP_SLOTS[i].slot);
            printf("[%s] %-11s", g_dev[k].name, s->op);
            if (s->acc_checks == 0 && s->inv_rows == 0 && !s->note[0]) {
                printf(" not run\n");
                continue;
            }
            if (s->acc_checks > 0) {
                if (strcmp(s->unit, "exact") == 0 || (s->tol_at == 0 && s->err_at == 0))
                    printf(" bit-exact (%ld check%s)", s->acc_checks, s->acc_checks == 1 ? "" : "s");
                else
                    printf(" max err %.3g %s (tol %.3g, ratio %.2f) at %s", s->err_at, s->unit, s->tol_at,
                           s->worst_ratio, s->where);
            }
            if (s->inv_rows > 0) printf("; %ld batched rows bitwise == 1-row", s->inv_rows);
            if (k > 0 && s->x_checks > 0) {
                if (s->xtol_at == 0)
                    printf("; vs %s: exact", g_dev[0].name);
                else
                    printf("; vs %s: max %.3g (tol %.3g) at %s", g_dev[0].name, s->xerr_at, s->xtol_at, s->xwhere);
            }
            if (s->note[0]) printf("%s%s", s->acc_checks > 0 || s->inv_rows > 0 ? "; " : " ", s->note);
            printf("\n");
        }
    printf("==== %d kind(s), %.1f s ====\n", g_ndev, now_s() - g_t0);
    for (int k = 0; k < g_ndev; k++) {
        g_dev[k].ops->free(g_dev[k].be);
        g_dev[k].ops->free(g_dev[k].be1);
    }
    return 0;
}

int main(void) {
    /* One cmocka test per distinct test function of OP_SLOTS (plus the table check first),
     * so an op's test cannot exist without being run. */
    struct CMUnitTest tests[N_SLOTS + 1];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest){"test_op_table", test_op_table, NULL, NULL, NULL};
    for (size_t i = 0; i < N_SLOTS; i++) {
        bool seen = false;
        for (size_t j = 0; j < n; j++) seen = seen || tests[j].test_func == OP_SLOTS[i].test;
        if (!seen) tests[n++] = (struct CMUnitTest){OP_SLOTS[i].test_name, OP_SLOTS[i].test, NULL, NULL, NULL};
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* LOCKSTEP_TEST_FILTER=test_matmul (a cmocka glob) runs a subset, e.g. one test per
     * process while bringing up a backend whose failures abort. */
    const char *filter = getenv("LOCKSTEP_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return _cmocka_run_group_tests("backend_ops", tests, n, group_setup, group_teardown);
}
