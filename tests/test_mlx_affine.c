/* MLX affine-quantized weights (kernels/cpu/mlx_affine*.c, docs/gemma.md 6.4).
 *
 *  - golden (tools/gen_mlx_quant_golden.py -> tests/data/mlx_affine/, mlx 0.32): our
 *    dequantizer equals mx.dequantize bit for bit, for every bits x group x scale dtype;
 *    our reference quantizer equals mx.quantize byte for byte; the matmul (both ISAs) is
 *    within a tight tolerance of mx.quantized_matmul (different summation order);
 *  - batch invariance, as test_kernels_invariance does for the GGUF types: every row of
 *    the matmul for M = 1..17, threads 1/2/3 and both ISAs is memcmp-equal to that row
 *    computed alone, single-threaded, scalar;
 *  - get_rows == dequantize, the CPU backend's dispatch, and geometry validation. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/f16.h"
#include "core/threads.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/types.h"

static const int BITS[] = {2, 3, 4, 5, 6, 8};
static const int GROUPS[] = {32, 64, 128};
static const ls_type SB_TYPES[] = {LS_TYPE_F32, LS_TYPE_F16, LS_TYPE_BF16};

#include "test_rng.h"

static size_t sb_bytes(ls_type t) {
    return t == LS_TYPE_F32 ? 4 : 2;
}

/* float -> scale dtype, round to nearest even (the test's values are finite). */
static void sb_store(ls_type t, void *base, int64_t i, float v) {
    if (t == LS_TYPE_F32) {
        memcpy((uint8_t *)base + 4 * i, &v, 4);
        return;
    }
    uint16_t h;
    if (t == LS_TYPE_F16) {
        h = ls_f32_to_f16(v);
    } else {
        const uint32_t u = ls_bits_from_f32(v);
        h = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    }
    memcpy((uint8_t *)base + 2 * i, &h, 2);
}

static ls_weight make_weight(const void *q, const void *sc, const void *bi, ls_type sbt, int bits, int group,
                             int64_t rows, int64_t cols) {
    ls_weight w = {.type = LS_TYPE_MLX_AFFINE,
                   .data = q,
                   .rows = rows,
                   .cols = cols,
                   .row_bytes = (uint64_t)(cols * bits / 8),
                   .scales = sc,
                   .biases = bi,
                   .sb_type = sbt,
                   .bits = bits,
                   .group = group};
    return w;
}

static void *xmalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    assert_non_null(p);
    return p;
}

/* ---- golden data from mlx ---- */

typedef struct {
    char name[256];
    uint32_t bits, group, sb_type, rows, cols, n_act;
    float *src, *deq, *x, *y;
    uint8_t *packed, *scales, *biases;
} golden;

static void read_exact(FILE *f, void *dst, size_t n) {
    assert_int_equal(fread(dst, 1, n, f), n);
}

static void golden_load(const char *dir, const char *name, golden *g) {
    char path[1024];
    snprintf(path, sizeof path, "%s/mlx_affine/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) print_error("cannot open %s (set LOCKSTEP_TEST_DATA)\n", path);
    assert_non_null(f);
    snprintf(g->name, sizeof g->name, "%s", name);
    char magic[4];
    read_exact(f, magic, 4);
    assert_memory_equal(magic, "LSMA", 4);
    uint32_t h[6];
    read_exact(f, h, sizeof h);
    g->bits = h[0], g->group = h[1], g->sb_type = h[2], g->rows = h[3], g->cols = h[4], g->n_act = h[5];
    const size_t n = (size_t)g->rows * g->cols, ng = n / g->group, sbb = sb_bytes((ls_type)g->sb_type);
    g->src = xmalloc(4 * n);
    g->packed = xmalloc(n * g->bits / 8);
    g->scales = xmalloc(ng * sbb);
    g->biases = xmalloc(ng * sbb);
    g->deq = xmalloc(4 * n);
    g->x = xmalloc(4 * (size_t)g->n_act * g->cols);
    g->y = xmalloc(4 * (size_t)g->n_act * g->rows);
    read_exact(f, g->src, 4 * n);
    read_exact(f, g->packed, n * g->bits / 8);
    read_exact(f, g->scales, ng * sbb);
    read_exact(f, g->biases, ng * sbb);
    read_exact(f, g->deq, 4 * n);
    read_exact(f, g->x, 4 * (size_t)g->n_act * g->cols);
    read_exact(f, g->y, 4 * (size_t)g->n_act * g->rows);
    assert_int_equal(fgetc(f), EOF); /* nothing left over: the layout is the documented one */
    fclose(f);
}

static void golden_free(golden *g) {
    free(g->src);
    free(g->packed);
    free(g->scales);
    free(g->biases);
    free(g->deq);
    free(g->x);
    free(g->y);
}

/* Calls fn on every case of the manifest; returns the number of cases. */
static int golden_each(void (*fn)(const golden *g, void *ctx), void *ctx) {
    const char *dir = getenv("LOCKSTEP_TEST_DATA");
    if (!dir) dir = "tests/data";
    char path[1024], line[256];
    snprintf(path, sizeof path, "%s/mlx_affine/manifest.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) print_error("cannot open %s (set LOCKSTEP_TEST_DATA)\n", path);
    assert_non_null(f);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        golden g;
        golden_load(dir, line, &g);
        fn(&g, ctx);
        golden_free(&g);
        n++;
    }
    fclose(f);
    return n;
}

typedef struct {
    int cases, neg_scales, fma_differs;
    int bits_seen[9], groups_seen[129], sb_seen[3];
} deq_stats;

static void check_dequant(const golden *g, void *ctx) {
    deq_stats *st = ctx;
    const ls_type sbt = (ls_type)g->sb_type;
    const ls_weight w =
        make_weight(g->packed, g->scales, g->biases, sbt, (int)g->bits, (int)g->group, g->rows, g->cols);
    assert_int_equal(ls_mlx_affine_check(&w), 0);
    st->cases++;
    st->bits_seen[g->bits] = 1;
    st->groups_seen[g->group] = 1;
    st->sb_seen[sbt == LS_TYPE_F32 ? 0 : sbt == LS_TYPE_F16 ? 1 : 2] = 1;
    float *row = xmalloc(4 * g->cols);
    for (uint32_t r = 0; r < g->rows; r++) {
        ls_mlx_affine_dequantize_row(&w, r, row);
        const float *want = g->deq + (size_t)r * g->cols;
        for (uint32_t c = 0; c < g->cols; c++)
            if (memcmp(&row[c], &want[c], 4) != 0) {
                print_error("%s row %u col %u: dequant %.9g, mlx %.9g\n", g->name, r, c, row[c], want[c]);
                fail();
            }
        /* with a fused multiply-add instead, some elements differ from mlx (f32 scales) */
        const int ng = (int)(g->cols / g->group);
        for (uint32_t c = 0; c < g->cols; c++) {
            const int64_t i = (int64_t)r * ng + c / g->group;
            float s, b;
            if (sbt == LS_TYPE_F32) {
                memcpy(&s, g->scales + 4 * i, 4);
                memcpy(&b, g->biases + 4 * i, 4);
            } else {
                uint16_t hs, hb;
                memcpy(&hs, g->scales + 2 * i, 2);
                memcpy(&hb, g->biases + 2 * i, 2);
                s = sbt == LS_TYPE_F16 ? ls_f16_to_f32(hs) : ls_bf16_to_f32(hs);
                b = sbt == LS_TYPE_F16 ? ls_f16_to_f32(hb) : ls_bf16_to_f32(hb);
            }
            if (c % g->group == 0 && s < 0.0f) st->neg_scales++;
            const float fused = fmaf(s, (float)ls_mlx_affine_unpack(g->packed + (size_t)r * w.row_bytes, w.bits, c), b);
            if (fused != want[c]) st->fma_differs++;
        }
    }
    /* get_rows: same bits as dequantize, in any order, with repeats */
    const int32_t ids[5] = {(int32_t)g->rows - 1, 0, 2, 0, 1};
    float *rows = xmalloc(4 * 5 * g->cols);
    ls_mlx_affine_get_rows(&w, ids, 5, rows);
    for (int i = 0; i < 5; i++)
        assert_memory_equal(rows + (size_t)i * g->cols, g->deq + (size_t)ids[i] * g->cols, 4 * g->cols);
    free(rows);
    free(row);
}

static void test_golden_dequant(void **st) {
    (void)st;
    deq_stats s = {0};
    assert_int_equal(golden_each(check_dequant, &s), 54);
    for (int i = 0; i < 6; i++) assert_true(s.bits_seen[BITS[i]]);
    for (int i = 0; i < 3; i++) assert_true(s.groups_seen[GROUPS[i]] && s.sb_seen[i]);
    assert_true(s.neg_scales > 0);  /* the data exercises negative scales */
    assert_true(s.fma_differs > 0); /* and tells (scale * q) + bias from fmaf(scale, q, bias) */
    print_message("golden dequant: %d cases bit-exact vs mx.dequantize; %d negative scales; an fma formula would "
                  "differ in %d elements\n",
                  s.cases, s.neg_scales, s.fma_differs);
}

/* Our reference quantizer reproduces mx.quantize on the same (dtype-rounded) floats. */
static void check_quantizer(const golden *g, void *ctx) {
    int *n = ctx;
    const size_t ng = (size_t)g->rows * g->cols / g->group, sbb = sb_bytes((ls_type)g->sb_type);
    uint8_t *q = xmalloc((size_t)g->rows * g->cols * g->bits / 8), *sc = xmalloc(ng * sbb), *bi = xmalloc(ng * sbb);
    assert_int_equal(ls_mlx_affine_quantize_ref(g->src, g->rows, g->cols, (int)g->bits, (int)g->group,
                                                (ls_type)g->sb_type, q, sc, bi),
                     0);
    if (memcmp(q, g->packed, (size_t)g->rows * g->cols * g->bits / 8) != 0 || memcmp(sc, g->scales, ng * sbb) != 0 ||
        memcmp(bi, g->biases, ng * sbb) != 0) {
        print_error("%s: reference quantizer differs from mx.quantize\n", g->name);
        fail();
    }
    (*n)++;
    free(q);
    free(sc);
    free(bi);
}

static void test_golden_quantizer(void **st) {
    (void)st;
    int n = 0;
    golden_each(check_quantizer, &n);
    assert_int_equal(n, 54);
}

typedef struct {
    double max_rel_cond;                          /* |y - y_mlx| / sum |x_k w_k| */
    double max_rel;                               /* |y - y_mlx| / |y_mlx| */
    double max_rel_exact_ours, max_rel_exact_mlx; /* vs a double-precision dot, same scale */
} mm_stats;

static void check_matmul(const golden *g, void *ctx) {
    mm_stats *st = ctx;
    const ls_weight w = make_weight(g->packed, g->scales, g->biases, (ls_type)g->sb_type, (int)g->bits, (int)g->group,
                                    g->rows, g->cols);
    const size_t ss = ls_mlx_affine_scratch_size(g->cols, (int)g->group, g->n_act);
    void *scratch = xmalloc(ss);
    float *y = xmalloc(4 * (size_t)g->n_act * g->rows);
    for (int isa = 0; isa <= have_avx2(); isa++) {
        ls_mlx_affine_matmul_isa((ls_isa)isa, NULL, &w, g->x, g->cols, g->n_act, y, g->rows, scratch);
        for (uint32_t m = 0; m < g->n_act; m++)
            for (uint32_t n = 0; n < g->rows; n++) {
                double exact = 0.0, cond = 0.0;
                for (uint32_t k = 0; k < g->cols; k++) {
                    const double p = (double)g->deq[(size_t)n * g->cols + k] * (double)g->x[(size_t)m * g->cols + k];
                    exact += p;
                    cond += fabs(p);
                }
                const double ours = y[m * g->rows + n], theirs = g->y[m * g->rows + n];
                const double d = fabs(ours - theirs);
                if (cond > 0.0) {
                    if (d / cond > st->max_rel_cond) st->max_rel_cond = d / cond;
                    if (fabs(ours - exact) / cond > st->max_rel_exact_ours)
                        st->max_rel_exact_ours = fabs(ours - exact) / cond;
                    if (fabs(theirs - exact) / cond > st->max_rel_exact_mlx)
                        st->max_rel_exact_mlx = fabs(theirs - exact) / cond;
                }
                if (theirs != 0.0 && d / fabs(theirs) > st->max_rel) st->max_rel = d / fabs(theirs);
                /* K = 384 products: float summation error stays far below 1e-6 of sum |x w| (seen 1.5e-7) */
                if (!(d <= 1e-6 * cond)) {
                    print_error("%s isa %d m %u n %u: %.9g vs mlx %.9g (sum|xw| %.6g)\n", g->name, isa, m, n, ours,
                                theirs, cond);
                    fail();
                }
            }
    }
    free(y);
    free(scratch);
}

static void test_golden_matmul(void **st) {
    (void)st;
    mm_stats s = {0};
    assert_int_equal(golden_each(check_matmul, &s), 54);
    print_message("golden matmul vs mx.quantized_matmul: max |d|/sum|xw| %.3g, max |d|/|y| %.3g; vs double: ours "
                  "%.3g, mlx %.3g (of sum|xw|)\n",
                  s.max_rel_cond, s.max_rel, s.max_rel_exact_ours, s.max_rel_exact_mlx);
}

/* ---- batch invariance ---- */

enum { N_ROWS = 37, M_MAX = 17, K_INV = 384 };

typedef struct {
    uint8_t *q, *sc, *bi;
    ls_weight w;
} qweight;

/* draw 0: quantized from random floats (mixed offsets, so both scale signs); draw 1:
 * random code bytes (every code, including 2^bits - 1) with random signed scales/biases. */
static void make_qweight(qweight *qw, int bits, int group, ls_type sbt, int draw, uint64_t *rng) {
    const int64_t ng = (int64_t)N_ROWS * K_INV / group;
    const size_t qbytes = (size_t)N_ROWS * K_INV * bits / 8;
    qw->q = xmalloc(qbytes);
    qw->sc = xmalloc((size_t)ng * sb_bytes(sbt));
    qw->bi = xmalloc((size_t)ng * sb_bytes(sbt));
    if (draw == 0) {
        float *src = xmalloc(sizeof(float) * N_ROWS * K_INV);
        for (int64_t i = 0; i < (int64_t)N_ROWS * K_INV; i++) {
            const float off = (float)((i / group) % 5) * 0.4f - 0.8f;
            src[i] = rng_normal(rng, 1.0f) + off;
        }
        assert_int_equal(ls_mlx_affine_quantize_ref(src, N_ROWS, K_INV, bits, group, sbt, qw->q, qw->sc, qw->bi), 0);
        free(src);
    } else {
        for (size_t i = 0; i < qbytes; i++) qw->q[i] = (uint8_t)rng_next(rng);
        for (int64_t i = 0; i < ng; i++) {
            sb_store(sbt, qw->sc, i, (rng_uniform(rng) - 0.5f) * 0.1f);
            sb_store(sbt, qw->bi, i, (rng_uniform(rng) - 0.5f) * 2.0f);
        }
    }
    qw->w = make_weight(qw->q, qw->sc, qw->bi, sbt, bits, group, N_ROWS, K_INV);
    assert_int_equal(ls_mlx_affine_check(&qw->w), 0);
}

static void free_qweight(qweight *qw) {
    free(qw->q);
    free(qw->sc);
    free(qw->bi);
}

static void check_batch(ls_isa isa, ls_pool *pool, const ls_weight *w, const float *X, int64_t xs, int64_t m0,
                        int64_t M, const float *ref, float *Y, int64_t ys, void *scratch) {
    for (int64_t i = 0; i < M * ys; i++) Y[i] = -12345.0f; /* padding must survive */
    ls_mlx_affine_matmul_isa(isa, pool, w, X + m0 * xs, xs, M, Y, ys, scratch);
    for (int64_t m = 0; m < M; m++) {
        if (memcmp(Y + m * ys, ref + (m0 + m) * N_ROWS, sizeof(float) * N_ROWS) != 0) {
            for (int n = 0; n < N_ROWS; n++)
                if (memcmp(&Y[m * ys + n], &ref[(m0 + m) * N_ROWS + n], sizeof(float)) != 0)
                    print_error("bits %d group %d sb %s isa %d threads %d M %lld row %lld col %d: %.9g vs %.9g\n",
                                w->bits, w->group, ls_type_name(w->sb_type), (int)isa, ls_pool_size(pool), (long long)M,
                                (long long)(m0 + m), n, Y[m * ys + n], ref[(m0 + m) * N_ROWS + n]);
            fail();
        }
        for (int64_t n = N_ROWS; n < ys; n++) assert_true(Y[m * ys + n] == -12345.0f);
    }
}

static void test_batch_invariance(void **st) {
    (void)st;
    ls_pool *pools[3] = {ls_pool_create(1), ls_pool_create(2), ls_pool_create(3)};
    for (int i = 0; i < 3; i++) assert_non_null(pools[i]);
    const int avx2 = have_avx2();
    const int64_t xs = K_INV + 3, ys = N_ROWS + 5; /* strides wider than the rows */
    float *X = xmalloc(sizeof(float) * (size_t)(xs * M_MAX));
    float *ref = xmalloc(sizeof(float) * N_ROWS * M_MAX);
    float *Y = xmalloc(sizeof(float) * (size_t)(ys * M_MAX));
    float *xsum = xmalloc(ls_mlx_affine_scratch_size(K_INV, 32, 1));
    uint64_t rng = 0x5eed;
    int combos = 0;
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++)
            for (int si = 0; si < 3; si++)
                for (int draw = 0; draw < 2; draw++) {
                    const int bits = BITS[bi], group = GROUPS[gi];
                    qweight qw;
                    make_qweight(&qw, bits, group, SB_TYPES[si], draw, &rng);
                    void *scratch = xmalloc(ls_mlx_affine_scratch_size(K_INV, group, M_MAX));
                    for (int64_t m = 0; m < M_MAX; m++) {
                        const float scale = m == 5 ? 1e-3f : m == 9 ? 40.0f : 1.0f;
                        for (int64_t k = 0; k < xs; k++) X[m * xs + k] = m == 11 ? 0.0f : rng_normal(&rng, scale);
                    }
                    for (int64_t m = 0; m < M_MAX; m++) {
                        float y1[N_ROWS + 5];
                        ls_mlx_affine_matmul_isa(LS_ISA_SCALAR, NULL, &qw.w, X + m * xs, xs, 1, y1, N_ROWS + 5,
                                                 scratch);
                        memcpy(ref + m * N_ROWS, y1, sizeof(float) * N_ROWS);
                        /* the single-output entry points: scalar == AVX2 == the matmul's row */
                        ls_mlx_affine_xsums(X + m * xs, K_INV, group, xsum);
                        for (int n = 0; n < N_ROWS; n++) {
                            const float vs = ls_mlx_affine_dot_isa(LS_ISA_SCALAR, &qw.w, n, X + m * xs, xsum);
                            assert_memory_equal(&vs, &y1[n], sizeof(float));
                            if (avx2) {
                                const float va = ls_mlx_affine_dot_isa(LS_ISA_AVX2, &qw.w, n, X + m * xs, xsum);
                                assert_memory_equal(&vs, &va, sizeof(float));
                            }
                        }
                    }
                    for (int isa = 0; isa <= avx2; isa++)
                        for (int p = 0; p < 3; p++)
                            for (int64_t M = 1; M <= M_MAX; M++) {
                                check_batch((ls_isa)isa, pools[p], &qw.w, X, xs, 0, M, ref, Y, ys, scratch);
                                /* the same rows at other positions in the batch, next to other rows */
                                if (M < M_MAX && p == 1)
                                    check_batch((ls_isa)isa, pools[p], &qw.w, X, xs, M_MAX - M, M, ref, Y, ys, scratch);
                            }
                    free(scratch);
                    free_qweight(&qw);
                    combos++;
                }
    print_message("batch invariance: %d weight sets (bits x group x scale dtype x 2 draws), N = %d, K = %d, M = 1..%d, "
                  "threads 1/2/3, %s\n",
                  combos, N_ROWS, K_INV, M_MAX, avx2 ? "scalar and AVX2" : "scalar only (no AVX2 on this CPU)");
    free(xsum);
    free(X);
    free(ref);
    free(Y);
    for (int i = 0; i < 3; i++) ls_pool_free(pools[i]);
}

/* The CPU backend dispatches MLX weights to these kernels (matmul and get_rows). */
static void test_backend(void **st) {
    (void)st;
    uint64_t rng = 99;
    qweight qw;
    make_qweight(&qw, 4, 64, LS_TYPE_BF16, 0, &rng);
    ls_backend *be = ls_backend_cpu_create(3, M_MAX, K_INV, 16);
    assert_non_null(be);
    float *X = xmalloc(sizeof(float) * M_MAX * K_INV), *Y = xmalloc(sizeof(float) * M_MAX * N_ROWS);
    float *Z = xmalloc(sizeof(float) * M_MAX * N_ROWS);
    void *scratch = xmalloc(ls_mlx_affine_scratch_size(K_INV, 64, M_MAX));
    for (int i = 0; i < M_MAX * K_INV; i++) X[i] = rng_normal(&rng, 1.0f);
    be->ops->matmul(be, &qw.w, X, M_MAX, Y);
    ls_mlx_affine_matmul_isa(LS_ISA_SCALAR, NULL, &qw.w, X, K_INV, M_MAX, Z, N_ROWS, scratch);
    assert_memory_equal(Y, Z, sizeof(float) * M_MAX * N_ROWS);
    const int32_t ids[3] = {36, 0, 36};
    float *E = xmalloc(sizeof(float) * 3 * K_INV), *D = xmalloc(sizeof(float) * K_INV);
    be->ops->get_rows(be, &qw.w, ids, 3, E);
    for (int i = 0; i < 3; i++) {
        ls_mlx_affine_dequantize_row(&qw.w, ids[i], D);
        assert_memory_equal(E + i * K_INV, D, sizeof(float) * K_INV);
    }
    be->ops->free(be);
    free(X);
    free(Y);
    free(Z);
    free(E);
    free(D);
    free(scratch);
    free_qweight(&qw);
}

/* Geometry the kernels do not support is refused, not misread. */
static void test_validation(void **st) {
    (void)st;
    uint8_t q[256 * 8] = {0}, sb[64] = {0};
    float src[256] = {0};
    const ls_weight ok = make_weight(q, sb, sb, LS_TYPE_F16, 4, 64, 2, 256);
    assert_int_equal(ls_mlx_affine_check(&ok), 0);
    ls_weight w = ok;
    w.cols = 96; /* not a multiple of the group */
    w.row_bytes = 96 * 4 / 8;
    assert_int_equal(ls_mlx_affine_check(&w), -1);
    const int bad_bits[] = {0, 1, 7, 9, 16, 32};
    for (size_t i = 0; i < sizeof bad_bits / sizeof bad_bits[0]; i++) {
        w = ok;
        w.bits = bad_bits[i];
        w.row_bytes = (uint64_t)(256 * bad_bits[i] / 8);
        assert_int_equal(ls_mlx_affine_check(&w), -1);
        assert_int_equal(ls_mlx_affine_quantize_ref(src, 1, 256, bad_bits[i], 64, LS_TYPE_F16, q, sb, sb), -1);
    }
    const int bad_groups[] = {0, 8, 16, 48, 256};
    for (size_t i = 0; i < sizeof bad_groups / sizeof bad_groups[0]; i++) {
        w = ok;
        w.group = bad_groups[i];
        assert_int_equal(ls_mlx_affine_check(&w), -1);
        assert_int_equal(ls_mlx_affine_quantize_ref(src, 1, 256, 4, bad_groups[i], LS_TYPE_F16, q, sb, sb), -1);
    }
    assert_int_equal(ls_mlx_affine_quantize_ref(src, 1, 96, 4, 64, LS_TYPE_F16, q, sb, sb), -1);
    assert_int_equal(ls_mlx_affine_quantize_ref(src, 1, 256, 4, 64, LS_TYPE_Q8_0, q, sb, sb), -1);
    w = ok;
    w.row_bytes = 256; /* inconsistent with cols * bits / 8 */
    assert_int_equal(ls_mlx_affine_check(&w), -1);
    w = ok;
    w.sb_type = LS_TYPE_Q8_0;
    assert_int_equal(ls_mlx_affine_check(&w), -1);
    w = ok;
    w.type = LS_TYPE_Q4_0;
    assert_int_equal(ls_mlx_affine_check(&w), -1);
    w = ok;
    w.scales = NULL;
    assert_int_equal(ls_mlx_affine_check(&w), -1);
    w = ok;
    w.rows = 0;
    assert_int_equal(ls_mlx_affine_check(&w), -1);
    assert_int_equal(ls_mlx_affine_check(NULL), -1);
    assert_int_equal(ls_mlx_affine_scratch_size(96, 64, 1), 0);
    /* a name, but no block traits: rows are not self-contained, so no row size */
    assert_string_equal(ls_type_name(LS_TYPE_MLX_AFFINE), "mlx-affine");
    assert_null(ls_type_get(LS_TYPE_MLX_AFFINE));
    assert_int_equal(ls_row_size(LS_TYPE_MLX_AFFINE, 256), 0);
}

/* The unpacker reads the LSB-first stream across byte boundaries (3/5/6 bits). */
static void test_unpack(void **st) {
    (void)st;
    for (int bi = 0; bi < 6; bi++) {
        const int bits = BITS[bi];
        uint8_t row[32 * 8 / 8 * 8] = {0};
        uint32_t want[64];
        uint64_t rng = (uint64_t)bits;
        for (int c = 0; c < 64; c++) {
            want[c] = (uint32_t)(rng_next(&rng) & ((1u << bits) - 1));
            for (int b = 0; b < bits; b++)
                if (want[c] >> b & 1) row[(c * bits + b) / 8] |= (uint8_t)(1u << ((c * bits + b) % 8));
        }
        for (int c = 0; c < 64; c++) assert_int_equal(ls_mlx_affine_unpack(row, bits, c), want[c]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unpack),           cmocka_unit_test(test_validation),
        cmocka_unit_test(test_golden_dequant),   cmocka_unit_test(test_golden_quantizer),
        cmocka_unit_test(test_golden_matmul),    cmocka_unit_test(test_backend),
        cmocka_unit_test(test_batch_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
