/* The kernels against references outside our own code:
 *  - dequantizers bit for bit against golden data from the PyPI gguf package
 *    (tools/gen_quant_golden.py -> tests/data/quant_golden/, found via LOCKSTEP_TEST_DATA),
 *    and our reference quantizers byte for byte against gguf's where gguf has one;
 *  - activation quantization pinned to llama.cpp's semantics on hand-made rows (ties,
 *    the Q8_K sign trick, bsums);
 *  - every vec_dot, both ISAs, close to a double-precision dot of the dequantized
 *    weights with the float activations;
 *  - get_rows and the type traits (sizes, unknown ids, overflow). */
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
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/types.h"

#include "test_rng.h"

/* ---- golden files ---- */

typedef struct {
    uint32_t type, n, has_src;
    float *src;      /* [n] */
    uint8_t *blocks; /* [ls_row_size(type, n)] */
    float *deq;      /* [n] */
} golden;

static void golden_load(const char *name, golden *g) {
    const char *dir = getenv("LOCKSTEP_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/quant_golden/%s.bin", dir ? dir : "tests/data", name);
    FILE *f = fopen(path, "rb");
    if (!f) print_error("cannot open %s (set LOCKSTEP_TEST_DATA)\n", path);
    assert_non_null(f);
    char magic[4];
    assert_int_equal(fread(magic, 1, 4, f), 4);
    assert_memory_equal(magic, "LSQG", 4);
    uint32_t hdr[3];
    assert_int_equal(fread(hdr, 4, 3, f), 3);
    g->type = hdr[0];
    g->n = hdr[1];
    g->has_src = hdr[2];
    const size_t bytes = ls_row_size(g->type, g->n);
    assert_true(bytes > 0);
    g->src = malloc(sizeof(float) * g->n);
    g->blocks = malloc(bytes);
    g->deq = malloc(sizeof(float) * g->n);
    assert_true(g->src && g->blocks && g->deq);
    assert_int_equal(fread(g->src, sizeof(float), g->n, f), g->n);
    assert_int_equal(fread(g->blocks, 1, bytes, f), bytes);
    assert_int_equal(fread(g->deq, sizeof(float), g->n, f), g->n);
    fclose(f);
}

static void golden_free(golden *g) {
    free(g->src);
    free(g->blocks);
    free(g->deq);
}

static void check_golden(const char *name, ls_type t) {
    golden g;
    golden_load(name, &g);
    assert_int_equal(g.type, t);
    const ls_type_traits *tr = ls_type_get(t);
    assert_non_null(tr);
    float *out = malloc(sizeof(float) * g.n);
    assert_non_null(out);
    tr->dequantize_row(g.blocks, out, g.n);
    for (uint32_t i = 0; i < g.n; i++) {
        if (memcmp(&out[i], &g.deq[i], sizeof(float)) != 0) {
            print_error("%s element %u: ours %.9g, gguf %.9g\n", name, i, out[i], g.deq[i]);
            fail();
        }
    }
    if (g.has_src) {
        /* our reference quantizer writes the same bytes as gguf's */
        const size_t bytes = ls_row_size(t, g.n);
        uint8_t *q = malloc(bytes);
        assert_non_null(q);
        assert_int_equal(ls_quantize_row_ref(t, g.src, q, g.n), 0);
        assert_memory_equal(q, g.blocks, bytes);
        free(q);
    }
    free(out);
    golden_free(&g);
}

static void test_golden_f16(void **st) {
    (void)st;
    check_golden("f16", LS_TYPE_F16);
}
static void test_golden_bf16(void **st) {
    (void)st;
    check_golden("bf16", LS_TYPE_BF16);
}
static void test_golden_q4_0(void **st) {
    (void)st;
    check_golden("q4_0", LS_TYPE_Q4_0);
}
static void test_golden_q4_1(void **st) {
    (void)st;
    check_golden("q4_1", LS_TYPE_Q4_1);
}
static void test_golden_q5_0(void **st) {
    (void)st;
    check_golden("q5_0", LS_TYPE_Q5_0);
}
static void test_golden_q5_1(void **st) {
    (void)st;
    check_golden("q5_1", LS_TYPE_Q5_1);
}
static void test_golden_q8_0(void **st) {
    (void)st;
    check_golden("q8_0", LS_TYPE_Q8_0);
}
static void test_golden_q4_k(void **st) {
    (void)st;
    check_golden("q4_k", LS_TYPE_Q4_K);
}
static void test_golden_q5_k(void **st) {
    (void)st;
    check_golden("q5_k", LS_TYPE_Q5_K);
}
static void test_golden_q6_k(void **st) {
    (void)st;
    check_golden("q6_k", LS_TYPE_Q6_K);
}

/* ---- activation quantization semantics (llama.cpp's, see quant_act.c) ---- */

static void test_act_q8_0_semantics(void **st) {
    (void)st;
    float x[64] = {0};
    /* block 0: amax = 127, so id = 127 / 127 = 1 exactly and ties are visible: llama.cpp's
     * AVX2 quantize_row_q8_0 rounds half to even (2.5 -> 2, -3.5 -> -4, 0.5 -> 0) */
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -3.5f;
    x[3] = 0.5f;
    x[4] = -126.6f;
    /* block 1: all zero: d = 0 and q = 0 */
    ls_block_q8_0 y[2];
    ls_quantize_act_row(LS_TYPE_Q8_0, x, y, 64);
    assert_int_equal(y[0].d, ls_f32_to_f16(1.0f));
    assert_int_equal(y[0].qs[0], 127);
    assert_int_equal(y[0].qs[1], 2);
    assert_int_equal(y[0].qs[2], -4);
    assert_int_equal(y[0].qs[3], 0);
    assert_int_equal(y[0].qs[4], -127);
    assert_int_equal(y[1].d, 0);
    for (int j = 0; j < 32; j++) assert_int_equal(y[1].qs[j], 0);
    /* a general block: d = f16(amax / 127), q = rne(x * (127 / amax)) */
    uint64_t rng = 5;
    for (int j = 0; j < 32; j++) x[j] = rng_normal(&rng, 1.0f);
    ls_quantize_act_row(LS_TYPE_Q8_0, x, y, 32);
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    assert_int_equal(y[0].d, ls_f32_to_f16(amax / 127.0f));
    const float id = 127.0f / amax;
    for (int j = 0; j < 32; j++) assert_int_equal(y[0].qs[j], (int)nearbyintf(x[j] * id));
}

static void test_act_q8_k_semantics(void **st) {
    (void)st;
    float x[512] = {0};
    /* block 0: the largest magnitude is negative: iscale = -127 / max = 1, so d = 1 and
     * q = nearest_int(x) (ties to even), clamped to 127 */
    x[0] = -127.0f;
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = 126.9f;
    x[20] = -7.0f;
    /* block 1: all zero -> d = 0, q = 0, bsums = 0 */
    ls_block_q8_k y[2];
    memset(y, 0x5a, sizeof y);
    ls_quantize_act_row(LS_TYPE_Q8_K, x, y, 512);
    assert_true(y[0].d == 1.0f);
    assert_int_equal(y[0].qs[0], -127);
    assert_int_equal(y[0].qs[1], 2);
    assert_int_equal(y[0].qs[2], 4);
    assert_int_equal(y[0].qs[3], 127);
    assert_int_equal(y[0].bsums[0], -127 + 2 + 4 + 127);
    assert_int_equal(y[0].bsums[1], -7);
    assert_true(y[1].d == 0.0f);
    for (int j = 0; j < 16; j++) assert_int_equal(y[1].bsums[j], 0);
    for (int j = 0; j < 256; j++) assert_int_equal(y[1].qs[j], 0);
    /* positive max: iscale = -127 / max is negative, so q has the opposite sign of x and
     * d = 1 / iscale is negative: d * q still reproduces x */
    uint64_t rng = 9;
    for (int j = 0; j < 256; j++) x[j] = rng_normal(&rng, 1.0f);
    x[17] = 9.0f; /* the max */
    ls_quantize_act_row(LS_TYPE_Q8_K, x, y, 256);
    assert_true(y[0].d < 0.0f);
    assert_int_equal(y[0].qs[17], -127);
    float deq[256];
    ls_dequantize_row_q8_k(y, deq, 256);
    for (int j = 0; j < 256; j++) assert_true(fabsf(deq[j] - x[j]) <= 9.0f / 127.0f * 0.5f * 1.001f);
    for (int b = 0; b < 16; b++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += y[0].qs[16 * b + j];
        assert_int_equal(y[0].bsums[b], s);
    }
}

/* ---- vec_dot accuracy against double precision ---- */

static void check_dot_accuracy(ls_type t, int64_t K, double tol) {
    enum { ROWS = 24 };
    const ls_type_traits *tr = ls_type_get(t);
    const size_t wrow = ls_row_size(t, K), arow = ls_row_size(tr->act_type, K);
    uint8_t *w = malloc(wrow), *act = malloc(arow ? arow : 1);
    float *wf = malloc(sizeof(float) * K), *wd = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * K);
    assert_true(w && act && wf && wd && x);
    uint64_t rng = 1000 + (uint64_t)t;
    const int avx2 = have_avx2();
    for (int r = 0; r < ROWS; r++) {
        const float scale = 0.05f + (float)r * 0.2f;
        for (int64_t k = 0; k < K; k++) wf[k] = rng_normal(&rng, 1.0f) * scale + (r % 3 == 0 ? 0.2f * scale : 0.0f);
        assert_int_equal(ls_quantize_row_ref(t, wf, w, K), 0);
        tr->dequantize_row(w, wd, K);
        /* activations correlated with the weights, so the dot is far from zero and a
         * relative error is meaningful */
        for (int64_t k = 0; k < K; k++) x[k] = 0.7f * wd[k] / scale + 0.5f * rng_normal(&rng, 1.0f);
        double ref = 0.0;
        for (int64_t k = 0; k < K; k++) ref += (double)wd[k] * (double)x[k];
        const void *a = x;
        if (tr->act_type != LS_TYPE_F32) {
            ls_quantize_act_row(tr->act_type, x, act, K);
            a = act;
        }
        for (int isa = 0; isa <= (avx2 ? 1 : 0); isa++) {
            const float got = ls_vec_dot_get(t, (ls_isa)isa)(K, w, a);
            const double rel = fabs((double)got - ref) / fabs(ref);
            if (!(rel < tol)) {
                print_error("%s K=%lld row %d isa %d: got %.9g ref %.9g rel %.3g\n", tr->name, (long long)K, r, isa,
                            got, ref, rel);
                fail();
            }
        }
    }
    free(w);
    free(act);
    free(wf);
    free(wd);
    free(x);
}

static void test_dot_accuracy(void **st) {
    (void)st;
    /* float weights: only float rounding; quantized: the 8-bit activations dominate */
    check_dot_accuracy(LS_TYPE_F32, 645, 1e-5);
    check_dot_accuracy(LS_TYPE_F16, 645, 1e-5);
    check_dot_accuracy(LS_TYPE_BF16, 645, 1e-5);
    static const ls_type q32[] = {LS_TYPE_Q4_0, LS_TYPE_Q4_1, LS_TYPE_Q5_0, LS_TYPE_Q5_1, LS_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof q32 / sizeof q32[0]; i++) {
        check_dot_accuracy(q32[i], 640, 1e-2);
        check_dot_accuracy(q32[i], 2048, 1e-2);
    }
    static const ls_type qk[] = {LS_TYPE_Q4_K, LS_TYPE_Q5_K, LS_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof qk / sizeof qk[0]; i++) {
        check_dot_accuracy(qk[i], 768, 1e-2);
        check_dot_accuracy(qk[i], 2048, 1e-2);
    }
}

/* ---- get_rows and traits ---- */

static void test_get_rows(void **st) {
    (void)st;
    static const ls_type types[] = {LS_TYPE_F32,  LS_TYPE_F16,  LS_TYPE_BF16, LS_TYPE_Q4_0, LS_TYPE_Q4_1, LS_TYPE_Q5_0,
                                    LS_TYPE_Q5_1, LS_TYPE_Q8_0, LS_TYPE_Q4_K, LS_TYPE_Q5_K, LS_TYPE_Q6_K};
    enum { ROWS = 9, K = 512 };
    const int32_t ids[5] = {3, 0, 8, 3, 5};
    uint64_t rng = 3;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const ls_type t = types[ti];
        const size_t row = ls_row_size(t, K);
        uint8_t *table = malloc(row * ROWS);
        float *src = malloc(sizeof(float) * K), *out = malloc(sizeof(float) * K * 5), *one = malloc(sizeof(float) * K);
        assert_true(table && src && out && one);
        for (int r = 0; r < ROWS; r++) {
            for (int k = 0; k < K; k++) src[k] = rng_normal(&rng, 1.0f) * (float)(r + 1);
            assert_int_equal(ls_quantize_row_ref(t, src, table + row * r, K), 0);
        }
        ls_get_rows(t, table, K, ids, 5, out);
        for (int i = 0; i < 5; i++) {
            ls_type_get(t)->dequantize_row(table + row * (size_t)ids[i], one, K);
            assert_memory_equal(out + (size_t)i * K, one, sizeof(float) * K);
        }
        free(table);
        free(src);
        free(out);
        free(one);
    }
}

static void test_traits(void **st) {
    (void)st;
    assert_int_equal(ls_row_size(LS_TYPE_Q4_K, 2048), 8 * 144);
    assert_int_equal(ls_row_size(LS_TYPE_Q8_0, 640), 20 * 34);
    assert_int_equal(ls_row_size(LS_TYPE_Q6_K, 256), 210);
    assert_int_equal(ls_row_size(LS_TYPE_Q5_0, 64), 44);
    assert_int_equal(ls_row_size(LS_TYPE_BF16, 3), 6);
    assert_int_equal(ls_row_size(LS_TYPE_F32, 5), 20);
    assert_int_equal(ls_row_size(LS_TYPE_Q8_K, 256), 292);
    assert_int_equal(ls_row_size(LS_TYPE_Q4_0, 33), 0);       /* not a block multiple */
    assert_int_equal(ls_row_size(LS_TYPE_Q4_0, -32), 0);      /* negative */
    assert_int_equal(ls_row_size(LS_TYPE_F32, INT64_MAX), 0); /* overflows size_t */
    assert_int_equal(ls_row_size(4, 32), 0);                  /* removed ggml type id */
    assert_int_equal(ls_row_size(1000, 32), 0);
    assert_null(ls_type_get(4));
    assert_null(ls_type_get(LS_TYPE_COUNT));
    assert_string_equal(ls_type_name(LS_TYPE_Q6_K), "q6_K");
    assert_string_equal(ls_type_name(99), "?");
    assert_int_equal(ls_type_get(LS_TYPE_Q5_0)->act_type, LS_TYPE_Q8_0);
    assert_int_equal(ls_type_get(LS_TYPE_Q4_K)->act_type, LS_TYPE_Q8_K);
    assert_int_equal(ls_type_get(LS_TYPE_BF16)->act_type, LS_TYPE_F32);
    assert_null(ls_vec_dot_get(LS_TYPE_Q8_K, LS_ISA_SCALAR)); /* activation format only */
    assert_int_equal(ls_matmul_scratch_size(LS_TYPE_Q4_K, 2048, 3), 3 * 8 * 292);
    assert_int_equal(ls_matmul_scratch_size(LS_TYPE_F16, 2048, 3), 0); /* float weights read X */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_f16),
        cmocka_unit_test(test_golden_bf16),
        cmocka_unit_test(test_golden_q4_0),
        cmocka_unit_test(test_golden_q4_1),
        cmocka_unit_test(test_golden_q5_0),
        cmocka_unit_test(test_golden_q5_1),
        cmocka_unit_test(test_golden_q8_0),
        cmocka_unit_test(test_golden_q4_k),
        cmocka_unit_test(test_golden_q5_k),
        cmocka_unit_test(test_golden_q6_k),
        cmocka_unit_test(test_act_q8_0_semantics),
        cmocka_unit_test(test_act_q8_k_semantics),
        cmocka_unit_test(test_dot_accuracy),
        cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_traits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
