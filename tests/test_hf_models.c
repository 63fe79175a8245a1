/* Hugging Face / MLX checkpoint directories (tests/data/hf, README there): the engine's
 * logits match the reference goldens (transformers float32 for the bf16 checkpoints:
 * rel L2 <= 1e-3 per row and identical argmax; mlx-lm float32 for the MLX-quantized ones:
 * rel L2 <= 1e-2 per row, top-1 agreement >= 99%), greedy generation equals the golden
 * tokens, Gemma 4 forwards are batch-invariant (one prefill == token chain == chunks, bit
 * for bit; the exactness probe passes for K = 2..8), and malformed checkpoints (missing
 * tensor, wrong shape, inconsistent config) fail with a message naming the problem. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "kernels/cpu/cpu_kernels.h"
#include "lockstep.h"
#include "model/session.h"

enum { SEQ = 40, VOCAB = 512, N_PROMPT = 30, N_GREEDY = 64 };

static char g_dir[1024];

static void fixture_path(const char *name, char *out, size_t cap) {
    const char *root = getenv("LOCKSTEP_TEST_DATA");
    snprintf(out, cap, "%s/hf/%s", root ? root : "tests/data", name);
}

static void *read_file(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *buf = malloc(want + 1);
    size_t n = buf ? fread(buf, 1, want + 1, f) : 0;
    fclose(f);
    if (n != want) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void *golden(const char *fx, const char *file, size_t bytes) {
    char p[1200], dir[1024];
    fixture_path(fx, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/golden/%s", dir, file);
    void *b = read_file(p, bytes);
    if (!b) fail_msg("cannot read golden %s (%zu bytes)", p, bytes);
    return b;
}

static double manifest_num(const char *fx, const char *key) {
    char p[1200], dir[1024];
    fixture_path(fx, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/golden/manifest.json", dir);
    FILE *f = fopen(p, "rb");
    if (!f) return NAN;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    double r = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    cJSON_Delete(j);
    return r;
}

static ls_model *open_fixture(const char *fx) {
    char dir[1024], err[512];
    fixture_path(fx, dir, sizeof dir);
    ls_model *m = NULL;
    if (ls_model_open(dir, &m, err, sizeof err) != LS_OK) fail_msg("open %s: %s", fx, err);
    return m;
}

static ls_session *new_session(ls_model *m, int32_t n_batch, int32_t kv_type) {
    char err[512];
    ls_session_params p = ls_session_default_params();
    p.n_ctx = 128;
    p.n_batch = n_batch;
    p.n_threads = 2;
    p.kv_type = kv_type;
    ls_session *s = NULL;
    if (ls_session_create(m, &p, &s, err, sizeof err) != LS_OK) fail_msg("session: %s", err);
    return s;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Logits of one sequence, evaluated in chunks of `chunk` rows (SEQ = one prefill). */
static void eval_seq(ls_session *s, const int32_t *toks, int chunk, float *logits) {
    char err[512];
    assert_int_equal(ls_session_truncate(s, 0), LS_OK);
    for (int at = 0; at < SEQ; at += chunk) {
        int n = SEQ - at < chunk ? SEQ - at : chunk;
        if (ls_session_eval(s, toks + at, n, 0, logits + (size_t)at * VOCAB, err, sizeof err) != LS_OK)
            fail_msg("eval: %s", err);
    }
}

typedef struct {
    double max_rel;
    int agree, rows;
} cmp_stats;

static cmp_stats compare_logits(const char *fx, ls_model *m, int32_t kv_type) {
    int32_t *toks = golden(fx, "tokens.i32", sizeof(int32_t) * 2 * SEQ);
    float *ref = golden(fx, "logits.f32", sizeof(float) * 2 * SEQ * VOCAB);
    float *got = malloc(sizeof(float) * SEQ * VOCAB);
    ls_session *s = new_session(m, 64, kv_type);
    cmp_stats st = {0, 0, 0};
    for (int q = 0; q < 2; q++) {
        eval_seq(s, toks + q * SEQ, SEQ, got);
        for (int t = 0; t < SEQ; t++) {
            const float *a = got + (size_t)t * VOCAB, *b = ref + ((size_t)q * SEQ + t) * VOCAB;
            double num = 0, den = 0;
            for (int i = 0; i < VOCAB; i++) {
                num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
                den += (double)b[i] * b[i];
            }
            double rel = sqrt(num / den);
            if (rel > st.max_rel) st.max_rel = rel;
            st.agree += argmax(a, VOCAB) == argmax(b, VOCAB);
            st.rows++;
        }
    }
    ls_session_free(s);
    free(got);
    free(ref);
    free(toks);
    return st;
}

/* Greedy continuation of the golden prompt, one token per eval (the decode path). */
static int greedy_matches(const char *fx, ls_model *m) {
    char err[512];
    int32_t *prompt = golden(fx, "greedy_prompt.i32", sizeof(int32_t) * N_PROMPT);
    int32_t *want = golden(fx, "greedy_tokens.i32", sizeof(int32_t) * N_GREEDY);
    ls_session *s = new_session(m, 64, 0);
    float *lg = malloc(sizeof(float) * VOCAB);
    assert_int_equal(ls_session_eval(s, prompt, N_PROMPT, N_PROMPT - 1, lg, err, sizeof err), LS_OK);
    int match = 0;
    for (int i = 0; i < N_GREEDY; i++) {
        int32_t t = argmax(lg, VOCAB);
        if (t != want[i]) break;
        match++;
        if (i + 1 < N_GREEDY) assert_int_equal(ls_session_eval(s, &t, 1, 0, lg, err, sizeof err), LS_OK);
    }
    free(lg);
    ls_session_free(s);
    free(prompt);
    free(want);
    return match;
}

static void check_fixture(const char *fx, bool mlx) {
    ls_model *m = open_fixture(fx);
    cmp_stats st = compare_logits(fx, m, 0);
    int g = greedy_matches(fx, m);
    double gap = manifest_num(fx, "greedy_min_top2_gap");
    printf("[ hf ] %-26s max rel L2 %.3g, argmax %d/%d, greedy %d/%d (golden min top-2 gap %.3g)\n", fx, st.max_rel,
           st.agree, st.rows, g, N_GREEDY, gap);
    if (mlx) {
        assert_true(st.max_rel <= 1e-2);
        assert_true(st.agree * 100 >= st.rows * 99);
    } else {
        assert_true(st.max_rel <= 1e-3);
        assert_int_equal(st.agree, st.rows);
    }
    /* non-square hidden: the golden uses bf16(sqrt(H)); the same reference with the exact float32
     * sqrt(H) is `wrong` away (8e-3 for the MLX copy, inside the 1e-2 MLX bound), so also require
     * the engine to be 10x closer than that */
    double wrong = manifest_num(fx, "exact_scale_vs_golden_max_rel_l2");
    if (!isnan(wrong)) {
        printf("[ hf ] %-26s exact-sqrt scale would give rel L2 %.3g\n", fx, wrong);
        assert_true(st.max_rel <= wrong / 10);
    }
    assert_int_equal(g, N_GREEDY);
    ls_model_close(m);
}

#define FIXTURE_TEST(name, mlx)                                                                                        \
    static void test_##name(void **state) {                                                                            \
        (void)state;                                                                                                   \
        check_fixture(#name, mlx);                                                                                     \
    }
FIXTURE_TEST(gemma4_dense, false)
FIXTURE_TEST(gemma3_text, false)
FIXTURE_TEST(gemma4_ple, false)
FIXTURE_TEST(gemma4_moe, false)
FIXTURE_TEST(gemma4_dense_mlx_q4_mlp8, true)
FIXTURE_TEST(gemma4_dense_mlx_q3, true)
FIXTURE_TEST(gemma4_dense_mlx_q5_false, true)
FIXTURE_TEST(gemma4_dense_mlx_q6, true)
FIXTURE_TEST(gemma4_ple_mlx_q4, true)
FIXTURE_TEST(gemma4_moe_mlx_q4, true)
/* non-square hidden 96: embedding scale bf16(sqrt(96)) = 9.8125, not 9.79796 (README) */
FIXTURE_TEST(gemma4_dense_h96, false)
FIXTURE_TEST(gemma3_text_h96, false)
FIXTURE_TEST(gemma4_dense_h96_mlx_q4, true)
FIXTURE_TEST(gemma3_text_mlx_q4, true)
/* gemma4_dense re-saved in 3 shards + index (transformers 5 config with per_layer_config) */
FIXTURE_TEST(gemma4_dense_sharded, false)

/* KV precision: the f16 cache against the f32 default on the bf16 fixtures (reported). */
static void test_kv_precision(void **state) {
    (void)state;
    static const char *fx[] = {"gemma4_dense", "gemma3_text", "gemma4_ple", "gemma4_moe"};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        ls_model *m = open_fixture(fx[i]);
        cmp_stats a = compare_logits(fx[i], m, 1), b = compare_logits(fx[i], m, 2);
        printf("[ hf ] %-26s KV f16: max rel L2 %.3g argmax %d/%d | KV f32: %.3g argmax %d/%d\n", fx[i], a.max_rel,
               a.agree, a.rows, b.max_rel, b.agree, b.rows);
        ls_model_close(m);
    }
}

/* One prefill == one token at a time == chunks of 3 and 7, bit for bit; the drafter's view
 * (final-normed hidden rows, the KV sources) is filled. */
/* Several sessions in ONE forward step (what the server's batcher runs): sequence 0 at
 * positions 20..24, sequence 1 at 33 (one decode row), sequence 0 again from 3..14 with logits
 * for its last 8 rows only, on a 1-thread backend; every logits row must equal the same
 * position of a plain prefill (2 threads). ref[q] = that prefill's logits of sequence q. */
static void shared_step(ls_model *m, const int32_t *toks, const float *ref0, const float *ref1) {
    enum { NS = 3 };
    const int32_t seq[NS] = {0, 1, 0}, pre[NS] = {20, 33, 3}, rows[NS] = {5, 1, 12}, from[NS] = {0, 0, 4};
    ls_session *ss[NS];
    float *got[NS];
    ls_fwd_seg segs[NS];
    char err[512];
    for (int i = 0; i < NS; i++) {
        ss[i] = new_session(m, 64, 0);
        const int32_t *t = toks + seq[i] * SEQ;
        if (ls_session_eval(ss[i], t, pre[i], pre[i], NULL, err, sizeof err) != LS_OK) fail_msg("eval: %s", err);
        got[i] = malloc(sizeof(float) * (size_t)(rows[i] * VOCAB));
        segs[i] =
            (ls_fwd_seg){.s = ss[i], .tokens = t + pre[i], .n = rows[i], .logits_from = from[i], .logits = got[i]};
        assert_int_equal(ls_fwd_prepare(&segs[i], 64, err, sizeof err), LS_OK);
    }
    ls_backend *be = ls_backend_cpu_create(1, 64, ls_model_max_cols(m), 128);
    ls_workspace ws;
    assert_int_equal(ls_workspace_init(&ws, be, m, 64, 32), 0);
    ls_gemma_forward(be, &ws, segs, NS);
    for (int i = 0; i < NS; i++) {
        const float *ref = seq[i] ? ref1 : ref0;
        for (int r = from[i]; r < rows[i]; r++)
            if (memcmp(got[i] + (size_t)(r - from[i]) * VOCAB, ref + (size_t)(pre[i] + r) * VOCAB,
                       sizeof(float) * VOCAB) != 0)
                fail_msg("shared step: segment %d row at position %d differs from a plain prefill", i, pre[i] + r);
        ls_session_free(ss[i]);
        free(got[i]);
    }
    ls_workspace_free(&ws);
    be->ops->free(be);
}

static void invariance(const char *fx) {
    ls_model *m = open_fixture(fx);
    int32_t *toks = golden(fx, "tokens.i32", sizeof(int32_t) * 2 * SEQ);
    size_t bytes = sizeof(float) * SEQ * VOCAB;
    float *a = malloc(bytes), *b = malloc(bytes);
    ls_session *s = new_session(m, 64, 0);
    float *ref1 = malloc(bytes);
    eval_seq(s, toks + SEQ, SEQ, ref1);
    for (int q = 0; q < 2; q++) {
        eval_seq(s, toks + q * SEQ, SEQ, a);
        if (q == 0) shared_step(m, toks, a, ref1);
        assert_int_equal(ls_session_n_hidden(s), SEQ);
        static const int chunks[] = {1, 3, 7};
        for (size_t c = 0; c < 3; c++) {
            eval_seq(s, toks + q * SEQ, chunks[c], b);
            if (memcmp(a, b, bytes) != 0) fail_msg("%s: chunks of %d differ from one prefill", fx, chunks[c]);
        }
    }
    const ls_kv_layer *kv;
    int32_t nkv, hd;
    assert_true(ls_session_kv_source(s, false, &kv, &nkv, &hd) >= 0);
    assert_int_equal(kv->first_pos + kv->n, SEQ);
    assert_true(ls_session_kv_source(s, true, &kv, &nkv, &hd) >= 0);
    assert_int_equal(kv->first_pos + kv->n, SEQ);
    ls_session_free(s);
    free(a);
    free(b);
    free(ref1);
    free(toks);
    char msg[512], err[512];
    for (int k = 2; k <= 8; k++) {
        ls_probe_params pp = {.block_size = k, .n_threads = 2};
        bool passed = false;
        int rc = ls_probe(m, &pp, &passed, msg, sizeof msg, err, sizeof err);
        if (rc != LS_OK || !passed) fail_msg("%s: probe K=%d: %s", fx, k, rc != LS_OK ? err : msg);
    }
    ls_model_close(m);
}

static void test_invariance_dense(void **state) {
    (void)state;
    invariance("gemma4_dense");
}
static void test_invariance_ple(void **state) {
    (void)state;
    invariance("gemma4_ple");
}
static void test_invariance_moe(void **state) {
    (void)state;
    invariance("gemma4_moe");
}
static void test_invariance_mlx(void **state) {
    (void)state;
    invariance("gemma4_dense_mlx_q4_mlp8");
}

/* RoPE with a rotated-pairs count: all pairs is plain full rotary; Gemma 4's
 * proportional RoPE (d 32, 4 of 16 pairs) rotates pair j by pos * theta^(-2j/32) (exponent
 * over the FULL head dim) and leaves the other pairs alone; linear scaling divides the
 * frequencies. Each row depends only on its own position. */
static void test_rope_pairs(void **state) {
    (void)state;
    enum { HD = 32, NH = 2, M = 3 };
    const int32_t pos[M] = {0, 5, 37};
    float x[M * NH * HD], b[M * NH * HD];
    for (int i = 0; i < M * NH * HD; i++) x[i] = sinf(0.37f * (float)i) + 0.1f;
    ls_backend *be = ls_backend_cpu_create(1, M, 64, 64);
    assert_non_null(be);
    /* (all pairs, theta 1e4) = plain full rotary; (4 pairs, 1e6, scale 1 and 1/8) */
    for (int sc = 0; sc < 3; sc++) {
        float fs = sc == 1 ? 0.125f : 1.0f, theta = sc == 2 ? 10000.0f : 1e6f;
        int np = sc == 2 ? HD / 2 : 4;
        memcpy(b, x, sizeof x);
        be->ops->rope_pairs(be, b, M, NH, HD, np, pos, theta, fs);
        for (int r = 0; r < M; r++)
            for (int h = 0; h < NH; h++)
                for (int j = 0; j < HD / 2; j++) {
                    const float *v = x + (r * NH + h) * HD;
                    const float *o = b + (r * NH + h) * HD;
                    double ang = j < np ? pos[r] * fs * pow(theta, -2.0 * j / HD) : 0.0;
                    double e0 = v[j] * cos(ang) - v[j + HD / 2] * sin(ang);
                    double e1 = v[j + HD / 2] * cos(ang) + v[j] * sin(ang);
                    assert_true(fabs(o[j] - e0) < 1e-5 && fabs(o[j + HD / 2] - e1) < 1e-5);
                    if (j >= np) assert_true(o[j] == v[j] && o[j + HD / 2] == v[j + HD / 2]);
                }
    }
    /* row-independent: the last row alone gives the same bits */
    float one[NH * HD];
    memcpy(one, x + 2 * NH * HD, sizeof one);
    be->ops->rope_pairs(be, one, 1, NH, HD, HD / 2, pos + 2, 10000.0f, 1.0f); /* as the last case above */
    assert_memory_equal(one, b + 2 * NH * HD, sizeof one);
    be->ops->free(be);
}

/* ---- malformed checkpoints ------------------------------------------------------------ */

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_non_null(a);
    assert_non_null(b);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) assert_int_equal(fwrite(buf, 1, n, b), n);
    fclose(a);
    fclose(b);
}

/* A copy of gemma4_dense in a temp dir; the safetensors header's text for tensor names can
 * be edited in place (same length keeps every offset valid). */
static void make_copy(void) {
    char src[1024], p[1200], q[1200];
    snprintf(g_dir, sizeof g_dir, "/tmp/ls_hf_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    fixture_path("gemma4_dense", src, sizeof src);
    static const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", src, files[i]);
        snprintf(q, sizeof q, "%s/%s", g_dir, files[i]);
        copy_file(p, q);
    }
}

static void remove_copy(void) {
    char p[1200];
    static const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

/* Replace the first occurrence of `from` with `to` (same length) in a file. */
static void patch_file(const char *name, const char *from, const char *to) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    size_t fl = strlen(from);
    assert_int_equal(fl, strlen(to));
    char *hit = NULL;
    for (long i = 0; i + (long)fl <= len && !hit; i++)
        if (memcmp(buf + i, from, fl) == 0) hit = buf + i;
    assert_non_null(hit);
    memcpy(hit, to, fl);
    f = fopen(p, "wb");
    assert_int_equal(fwrite(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    free(buf);
}

static void expect_open_error(const char *needle) {
    char err[512] = "";
    ls_model *m = NULL;
    int rc = ls_model_open(g_dir, &m, err, sizeof err);
    printf("[ hf ] malformed -> %s\n", err);
    assert_int_not_equal(rc, LS_OK);
    assert_null(m);
    if (!strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void test_missing_tensor(void **state) {
    (void)state;
    make_copy();
    patch_file("model.safetensors", "model.layers.3.mlp.up_proj.weight", "model.layers.3.mlp.up_projXweight");
    expect_open_error("model.layers.3.mlp.up_proj.weight");
    remove_copy();
}

static void test_wrong_shape(void **state) {
    (void)state;
    make_copy();
    /* config says intermediate 128; 96 makes every MLP tensor the wrong shape */
    patch_file("config.json", "\"intermediate_size\": 128", "\"intermediate_size\": 96 ");
    expect_open_error("mlp.");
    remove_copy();
}

static void test_inconsistent_config(void **state) {
    (void)state;
    make_copy();
    /* 4 heads cannot be shared by 3 KV heads */
    patch_file("config.json", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
    char err[512] = "";
    ls_model *m = NULL;
    assert_int_not_equal(ls_model_open(g_dir, &m, err, sizeof err), LS_OK);
    printf("[ hf ] inconsistent config -> %s\n", err);
    assert_true(strstr(err, "key_value_heads") || strstr(err, "KV heads"));
    remove_copy();
}

int main(void) {
    char dir[1024];
    struct stat sb;
    fixture_path("gemma4_dense", dir, sizeof dir);
    if (stat(dir, &sb) != 0) {
        printf("skip: no fixtures at %s\n", dir);
        return 77;
    }
    ls_set_log_level(3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_pairs),          cmocka_unit_test(test_gemma4_dense),
        cmocka_unit_test(test_gemma3_text),         cmocka_unit_test(test_gemma4_dense_mlx_q4_mlp8),
        cmocka_unit_test(test_gemma4_dense_mlx_q3), cmocka_unit_test(test_gemma4_dense_mlx_q5_false),
        cmocka_unit_test(test_gemma4_dense_mlx_q6), cmocka_unit_test(test_gemma4_ple),
        cmocka_unit_test(test_gemma4_ple_mlx_q4),   cmocka_unit_test(test_gemma4_moe),
        cmocka_unit_test(test_gemma4_moe_mlx_q4),   cmocka_unit_test(test_gemma4_dense_h96),
        cmocka_unit_test(test_gemma3_text_h96),     cmocka_unit_test(test_gemma4_dense_h96_mlx_q4),
        cmocka_unit_test(test_gemma3_text_mlx_q4),  cmocka_unit_test(test_gemma4_dense_sharded),
        cmocka_unit_test(test_kv_precision),        cmocka_unit_test(test_invariance_dense),
        cmocka_unit_test(test_invariance_ple),      cmocka_unit_test(test_invariance_moe),
        cmocka_unit_test(test_invariance_mlx),      cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_wrong_shape),         cmocka_unit_test(test_inconsistent_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
