/* CPU backend: implements the ops of kernels/backend.h with the batch-invariant CPU
 * kernels (cpu_kernels.h) and a thread pool. Every op splits rows, heads or output
 * columns across threads and never a reduction, so results do not depend on the thread
 * count or on how many rows share the call. All scratch is allocated at creation: the
 * decode path allocates nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "core/log.h"
#include "core/threads.h"
#include "kernels/backend.h"
#include "kernels/cpu/axpy.h"
#include "kernels/cpu/attn_group.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/expf.h"

typedef struct {
    ls_pool *pool;
    void *mm_scratch; /* quantized activations for one matmul */
    size_t mm_scratch_size;
    float *scores; /* [n_threads][LS_ATTN_ENT][max_keys] attention scores */
    int64_t max_keys;
} cpu_impl;

static cpu_impl *impl_of(ls_backend *be) {
    return (cpu_impl *)be->impl;
}

/* ---- matmul / get_rows --------------------------------------------------------- */

static void cpu_matmul(ls_backend *be, const ls_weight *w, const float *x, int64_t m, float *y) {
    cpu_impl *c = impl_of(be);
    if (w->type == LS_TYPE_MLX_AFFINE) {
        LS_ASSERT(ls_mlx_affine_scratch_size(w->cols, w->group, m) <= c->mm_scratch_size);
        ls_mlx_affine_matmul(c->pool, w, x, w->cols, m, y, w->rows, c->mm_scratch);
        return;
    }
    LS_ASSERT(ls_matmul_scratch_size(w->type, w->cols, m) <= c->mm_scratch_size);
    ls_matmul(c->pool, w->type, w->data, w->rows, w->cols, x, w->cols, m, y, w->rows, c->mm_scratch);
}

/* q / k / v and gate / up: one pool round for the weights that can share it (matmul.c,
 * ls_matmul_group: same bits as one call each); MLX weights and mixed activation layouts
 * take one call each. */
static void cpu_matmul_n(ls_backend *be, int n, const ls_weight *const *w, const float *x, int64_t m, float *const *y) {
    cpu_impl *c = impl_of(be);
    ls_mm_desc d[LS_MM_GROUP_MAX];
    bool group = n >= 2 && n <= LS_MM_GROUP_MAX;
    for (int i = 0; group && i < n; i++) {
        group = w[i]->type != LS_TYPE_MLX_AFFINE && w[i]->cols == w[0]->cols;
        d[i] = (ls_mm_desc){.type = w[i]->type, .W = w[i]->data, .N = w[i]->rows, .Y = y[i], .y_stride = w[i]->rows};
    }
    if (group) {
        LS_ASSERT(ls_matmul_scratch_size(w[0]->type, w[0]->cols, m) <= c->mm_scratch_size);
        if (ls_matmul_group(c->pool, n, d, w[0]->cols, x, w[0]->cols, m, c->mm_scratch) == 0) return;
    }
    for (int i = 0; i < n; i++) cpu_matmul(be, w[i], x, m, y[i]);
}

static void cpu_get_rows(ls_backend *be, const ls_weight *t, const int32_t *ids, int64_t n, float *dst) {
    (void)be;
    if (t->type == LS_TYPE_MLX_AFFINE) {
        ls_mlx_affine_get_rows(t, ids, n, dst);
        return;
    }
    ls_get_rows(t->type, t->data, t->cols, ids, n, dst);
}

/* ---- rmsnorm --------------------------------------------------------------------- */

typedef struct {
    float *x;
    const float *w;
    int64_t m, n;
    float eps;
} rms_job;

static void rms_row(float *x, const float *w, int64_t n, float eps) {
    /* Sum of squares in the fixed order of ls_dot_f32; then one scale per row. */
    float ss = ls_dot_f32(x, x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) x[i] = (x[i] * scale) * w[i];
    else
        for (int64_t i = 0; i < n; i++) x[i] = x[i] * scale;
}

static void rms_worker(void *arg, int ith, int nth) {
    rms_job *j = arg;
    long b, e;
    ls_split(j->m, ith, nth, &b, &e);
    for (long r = b; r < e; r++) rms_row(j->x + r * j->n, j->w, j->n, j->eps);
}

static void cpu_rmsnorm(ls_backend *be, float *x, const float *w, int64_t m, int64_t n, float eps) {
    rms_job j = {x, w, m, n, eps};
    if (m * n < 16384)
        rms_worker(&j, 0, 1);
    else
        ls_pool_run(impl_of(be)->pool, rms_worker, &j);
}

/* ---- rope ------------------------------------------------------------------------ */

static void cpu_rope_pairs(ls_backend *be, float *x, int64_t m, int32_t n_heads, int32_t hd, int32_t n_pairs,
                           const int32_t *pos, float theta_base, float freq_scale) {
    (void)be;
    ls_rope_pairs_ref(x, m, n_heads, hd, n_pairs, pos, theta_base, freq_scale);
}

/* ---- attention ------------------------------------------------------------------- */

typedef struct {
    const ls_attn_args *a;
    cpu_impl *c;
    bool grouped; /* f16 cache on AVX2: ls_attn_block items of `plan` */
    ls_attn_plan plan;
} attn_job;

/* One (query row, head): exact two-pass softmax over the visible keys in position order. */
static void attn_one(const ls_attn_args *a, int64_t r, int32_t h, float *scores) {
    int32_t hd = a->hd, group = a->n_head / a->n_kv, kvh = h / group;
    int32_t p = a->q_pos[r] - (a->strictly_before ? 1 : 0); /* last visible key */
    int32_t lo = 0;
    if (a->window > 0 && a->q_pos[r] - a->window + 1 > lo) lo = a->q_pos[r] - a->window + 1;
    float *out = a->out + (r * a->n_head + h) * (int64_t)hd;
    int32_t n = p - lo + 1;
    if (n <= 0) { /* nothing visible (strictly_before at position 0) */
        memset(out, 0, sizeof(float) * (size_t)hd);
        return;
    }
    LS_ASSERT(lo >= a->first_pos && p - a->first_pos < a->n_slots);
    const float *q = a->q + (r * a->n_head + h) * (int64_t)hd;
    int64_t kv_stride = (int64_t)a->n_kv * hd, base = (int64_t)(lo - a->first_pos) * kv_stride + (int64_t)kvh * hd;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        int64_t at = base + (int64_t)i * kv_stride;
        float s = (a->kv_f32 ? ls_dot_f32((const float *)a->k + at, q, hd)
                             : ls_dot_f16_f32((const uint16_t *)a->k + at, q, hd)) *
                  a->scale;
        scores[i] = s;
        if (s > mx) mx = s;
    }
    float sum; /* expf's bits, added in position order (expf.h) */
    ls_softmax_exp(ls_cpu_isa(), 1, scores, 0, n, &mx, &sum);
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int32_t i = 0; i < n; i++) {
        int64_t at = base + (int64_t)i * kv_stride;
        if (a->kv_f32) {
            const float *v = (const float *)a->v + at;
            for (int32_t d = 0; d < hd; d++) out[d] = fmaf(scores[i], v[d], out[d]);
        } else {
            ls_axpy_f16(out, scores[i], (const uint16_t *)a->v + at, hd);
        }
    }
    float inv = 1.0f / sum;
    for (int32_t d = 0; d < hd; d++) out[d] *= inv;
}

static void attn_worker(void *arg, int ith, int nth) {
    attn_job *j = arg;
    const ls_attn_args *a = j->a;
    float *scores = j->c->scores + (int64_t)ith * j->c->max_keys * LS_ATTN_ENT;
    if (j->grouped) {
        /* blocks of rows x heads sharing a KV head (attn_block.c), dealt round-robin */
        for (long t = ith; t < ls_attn_plan_items(a, &j->plan); t += nth)
            ls_attn_block(a, &j->plan, t, scores, j->c->max_keys);
        return;
    }
    /* (row, head) pairs dealt round-robin: under a causal mask later rows see more keys, so
     * contiguous halves would leave the first thread idle for most of a prefill */
    for (long t = ith; t < (long)(a->m * a->n_head); t += nth)
        attn_one(a, t / a->n_head, (int32_t)(t % a->n_head), scores);
}

static void cpu_attention(ls_backend *be, const ls_attn_args *a) {
    attn_job j = {a, impl_of(be), false, {1, 1}};
    j.grouped = !a->kv_f32 && a->hd % 16 == 0 && ls_cpu_isa() >= LS_ISA_AVX2;
    if (j.grouped) ls_attn_plan_make(a, ls_pool_size(impl_of(be)->pool), &j.plan);
    ls_pool_run(impl_of(be)->pool, attn_worker, &j);
}

/* ---- elementwise ----------------------------------------------------------------- */

/* Thread ith's share [*i0, *i1) of n elements, in whole pieces of 64 (a cache line of floats
 * stays with one thread). Elementwise ops give the same bits whatever the split. */
static void piece_range(int64_t n, int ith, int nth, int64_t *i0, int64_t *i1) {
    long b, e;
    ls_split((long)((n + 63) / 64), ith, nth, &b, &e);
    *i0 = (int64_t)b * 64;
    *i1 = (int64_t)e * 64 < n ? (int64_t)e * 64 : n;
}

typedef struct {
    float *g;
    const float *u;
    int64_t n;
} gelu_job;

static void gelu_worker(void *arg, int ith, int nth) {
    const gelu_job *j = arg;
    int64_t i0, i1;
    piece_range(j->n, ith, nth, &i0, &i1);
    if (i0 < i1) ls_gelu_mul(j->g + i0, j->u + i0, i1 - i0); /* per-element deterministic (dot_f32.c) */
}

static void cpu_gelu_mul(ls_backend *be, float *g, const float *u, int64_t n) {
    gelu_job j = {g, u, n};
    if (n < 16384)
        gelu_worker(&j, 0, 1);
    else
        ls_pool_run(impl_of(be)->pool, gelu_worker, &j);
}

static void cpu_add(ls_backend *be, float *x, const float *y, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_scale(ls_backend *be, float *x, float s, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static void cpu_axpby(ls_backend *be, float *x, const float *y, float a, float b, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] = (x[i] + y[i] * a) * b;
}

static void cpu_mul_rows(ls_backend *be, float *x, const float *w, float s, int64_t m, int64_t n) {
    (void)be;
    for (int64_t r = 0; r < m; r++) {
        float *xr = x + r * n;
        for (int64_t i = 0; i < n; i++) xr[i] = (xr[i] * w[i]) * s;
    }
}

static void cpu_softcap(ls_backend *be, float *x, float cap, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}

static void cpu_kv_store(ls_backend *be, void *dst, bool f32, const float *src, int64_t n) {
    (void)be;
    if (f32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = ls_f32_to_f16(src[i]);
}

static void cpu_gather_rows(ls_backend *be, float *dst, const float *src, const int32_t *rows, int64_t cnt, int64_t d) {
    (void)be;
    for (int64_t j = 0; j < cnt; j++) memcpy(dst + j * d, src + (int64_t)rows[j] * d, sizeof(float) * (size_t)d);
}

static void cpu_scatter_add(ls_backend *be, float *acc, const float *y, const int32_t *rows, const float *w,
                            int64_t cnt, int64_t d) {
    (void)be;
    for (int64_t j = 0; j < cnt; j++) {
        float *a = acc + (int64_t)rows[j] * d;
        const float *yj = y + j * d;
        float wj = w[j];
        for (int64_t i = 0; i < d; i++) a[i] += yj[i] * wj;
    }
}

/* ---- memory: plain host buffers ------------------------------------------------ */

static void *cpu_alloc(ls_backend *be, size_t bytes) {
    (void)be;
    return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
}

static void cpu_release(ls_backend *be, void *p) {
    (void)be;
    free(p);
}

static void cpu_upload(ls_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_copy(ls_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_copy_rows(ls_backend *be, float *dst, int64_t ds, const float *src, int64_t ss, int64_t width,
                          int64_t rows) {
    (void)be;
    for (int64_t r = 0; r < rows; r++) memmove(dst + r * ds, src + r * ss, sizeof(float) * (size_t)width);
}

static void cpu_sync(ls_backend *be) {
    (void)be; /* every op has finished when it returns */
}

static void cpu_fill(ls_backend *be, float *x, float v, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] = v;
}

/* ---- fused ops ---------------------------------------------------------------------
 * The unfused sequences of backend.h themselves, op after op, so the CPU bytes cannot change
 * whichever form model code uses (tests/data/cpu_bytes); the launches they save are a device
 * backend's concern (docs/cuda.md 2). */

static void cpu_rmsnorm_to(ls_backend *be, float *dst, const float *src, const float *w, int64_t m, int64_t n,
                           float eps) {
    if (dst != src) cpu_copy(be, dst, src, sizeof(float) * (size_t)(m * n));
    cpu_rmsnorm(be, dst, w, m, n, eps);
}

/* Row-parallel forms: each row runs the sequence above, op after op, on its own elements
 * (every op here is row-wise or elementwise), so splitting rows over threads changes no
 * bit; one pool round instead of several, and no op left on one thread. */
enum { CPU_PAR_MIN_ELEMS = 16384 }; /* below: one thread (a pool round costs more) */

typedef struct {
    float *x, *t, *xn;
    const float *w_post, *w_pre;
    float s, eps;
    int64_t m, n;
} add_rms_job;

static void add_rms_worker(void *arg, int ith, int nth) {
    const add_rms_job *j = arg;
    long b, e;
    ls_split(j->m, ith, nth, &b, &e);
    for (long r = b; r < e; r++) {
        float *x = j->x + r * j->n, *t = j->t + r * j->n;
        rms_row(t, j->w_post, j->n, j->eps);
        for (int64_t i = 0; i < j->n; i++) x[i] += t[i];
        if (j->s != 1.0f)
            for (int64_t i = 0; i < j->n; i++) x[i] *= j->s;
        if (j->xn) {
            float *xn = j->xn + r * j->n;
            if (xn != x) memcpy(xn, x, sizeof(float) * (size_t)j->n);
            rms_row(xn, j->w_pre, j->n, j->eps);
        }
    }
}

static void cpu_add_rmsnorm(ls_backend *be, float *x, float *t, const float *w_post, float s, float *xn,
                            const float *w_pre, int64_t m, int64_t n, float eps) {
    add_rms_job j = {x, t, xn, w_post, w_pre, s, eps, m, n};
    if (m * n < CPU_PAR_MIN_ELEMS)
        add_rms_worker(&j, 0, 1);
    else
        ls_pool_run(impl_of(be)->pool, add_rms_worker, &j);
}

typedef struct {
    float *x;
    const float *w;
    const int32_t *pos;
    int64_t m;
    int32_t n_heads, hd, n_pairs;
    float eps, theta_base, freq_scale;
} norm_rope_job;

static void norm_rope_worker(void *arg, int ith, int nth) {
    const norm_rope_job *j = arg;
    long b, e;
    ls_split(j->m, ith, nth, &b, &e);
    if (b >= e) return;
    float *xb = j->x + b * (int64_t)j->n_heads * j->hd;
    for (long i = 0; i < (e - b) * j->n_heads; i++) rms_row(xb + i * j->hd, j->w, j->hd, j->eps);
    ls_rope_pairs_ref(xb, e - b, j->n_heads, j->hd, j->n_pairs, j->pos + b, j->theta_base, j->freq_scale);
}

static void cpu_norm_rope(ls_backend *be, float *x, const float *w, int64_t m, int32_t n_heads, int32_t hd, float eps,
                          int32_t n_pairs, const int32_t *pos, float theta_base, float freq_scale) {
    norm_rope_job j = {x, w, pos, m, n_heads, hd, n_pairs, eps, theta_base, freq_scale};
    if (m * n_heads * hd < CPU_PAR_MIN_ELEMS)
        norm_rope_worker(&j, 0, 1);
    else
        ls_pool_run(impl_of(be)->pool, norm_rope_worker, &j);
}

typedef struct {
    void *dk, *dv;
    const float *k, *v;
    bool f32;
    int64_t n;
} kv2_job;

static void kv2_worker(void *arg, int ith, int nth) {
    const kv2_job *j = arg;
    int64_t i0, i1;
    piece_range(j->n, ith, nth, &i0, &i1);
    if (i0 >= i1) return;
    const size_t es = j->f32 ? sizeof(float) : sizeof(uint16_t);
    cpu_kv_store(NULL, (uint8_t *)j->dk + (size_t)i0 * es, j->f32, j->k + i0, i1 - i0);
    cpu_kv_store(NULL, (uint8_t *)j->dv + (size_t)i0 * es, j->f32, j->v + i0, i1 - i0);
}

static void cpu_kv_store2(ls_backend *be, void *dk, void *dv, bool f32, const float *k, const float *v, int64_t n) {
    kv2_job j = {dk, dv, k, v, f32, n};
    if (n < CPU_PAR_MIN_ELEMS)
        kv2_worker(&j, 0, 1);
    else
        ls_pool_run(impl_of(be)->pool, kv2_worker, &j);
}

static void cpu_free(ls_backend *be) {
    if (!be) return;
    cpu_impl *c = impl_of(be);
    if (c) {
        ls_pool_free(c->pool);
        free(c->mm_scratch);
        free(c->scores);
        free(c);
    }
    free(be);
}

static const ls_backend_ops cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_upload,
    .copy = cpu_copy,
    .copy_rows = cpu_copy_rows,
    .fill = cpu_fill,
    .sync = cpu_sync,
    .matmul = cpu_matmul,
    .matmul_n = cpu_matmul_n,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .rope_pairs = cpu_rope_pairs,
    .attention = cpu_attention,
    .gelu_mul = cpu_gelu_mul,
    .add = cpu_add,
    .scale = cpu_scale,
    .axpby = cpu_axpby,
    .mul_rows = cpu_mul_rows,
    .softcap = cpu_softcap,
    .kv_store = cpu_kv_store,
    .gather_rows = cpu_gather_rows,
    .scatter_add = cpu_scatter_add,
    .rmsnorm_to = cpu_rmsnorm_to,
    .add_rmsnorm = cpu_add_rmsnorm,
    .norm_rope = cpu_norm_rope,
    .kv_store2 = cpu_kv_store2,
    .free = cpu_free,
};

ls_backend *ls_backend_cpu_create(int n_threads, int64_t max_rows, int64_t max_cols, int64_t max_keys) {
    ls_backend *be = calloc(1, sizeof *be);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!be || !c) goto fail;
    be->ops = &cpu_ops;
    be->impl = c;
    c->pool = ls_pool_create(n_threads);
    if (!c->pool) goto fail;
    /* Largest activation format is F32 (4 bytes/element); quantized formats are smaller. */
    int64_t kpad = (max_cols + LS_QK_K - 1) / LS_QK_K * LS_QK_K;
    size_t need = ls_matmul_scratch_size(LS_TYPE_F32, kpad, max_rows);
    size_t q8k = ls_matmul_scratch_size(LS_TYPE_Q4_K, kpad, max_rows);
    size_t q80 = ls_matmul_scratch_size(LS_TYPE_Q8_0, kpad, max_rows);
    /* MLX affine weights need their activation xsums: 8 floats per group of >= 32 */
    size_t mlx = ls_mlx_affine_scratch_size(kpad, 32, max_rows);
    if (q8k > need) need = q8k;
    if (q80 > need) need = q80;
    if (mlx > need) need = mlx;
    c->mm_scratch_size = need;
    c->mm_scratch = aligned_alloc(64, (need + 63) / 64 * 64);
    c->max_keys = max_keys;
    c->scores = malloc(sizeof(float) * (size_t)max_keys * (size_t)n_threads * LS_ATTN_ENT);
    if (!c->mm_scratch || !c->scores) goto fail;
    return be;
fail:
    if (be && c) {
        be->impl = c;
        cpu_free(be);
    } else {
        free(be);
        free(c);
    }
    return NULL;
}

const char *ls_backend_cpu_isa_name(void) {
    return ls_cpu_isa() == LS_ISA_AVX512 ? "cpu-avx512" : ls_cpu_isa() == LS_ISA_AVX2 ? "cpu-avx2" : "cpu-scalar";
}

/* ---- the CPU device kind ---------------------------------------------------------- */

static bool cpu_available(void) {
    return true;
}

static int cpu_map_const(const void *host, size_t bytes, char *err, size_t errlen) {
    (void)host, (void)bytes, (void)err, (void)errlen;
    return 0; /* the kernels read host memory as it is */
}

static void cpu_unmap_const(const void *host) {
    (void)host;
}

static ls_backend *cpu_create(const ls_backend_params *p) {
    return ls_backend_cpu_create(p->n_threads > 0 ? p->n_threads : 1, p->max_rows, p->max_cols, p->max_keys);
}

const ls_device_kind ls_device_cpu = {
    .name = "cpu",
    .available = cpu_available,
    .device_name = ls_backend_cpu_isa_name,
    .map_const = cpu_map_const,
    .unmap_const = cpu_unmap_const,
    .create = cpu_create,
};
