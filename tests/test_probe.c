/* The start-up exactness probe (docs/speculative.md section 6) on the random-weight fixture:
 * it passes for every block size; with a fault injected into one sub-op of the verify
 * block it fails and names exactly that layer, its kind and that sub-op; generation
 * declines speculation when it fails (or keeps it with allow_inexact); and the per-stage
 * comparison behind the localization, fed hand-made rows, reports the first divergence
 * in execution order. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"
#include "decode/probe.h"
#include "fixture_model.c"
#include "lockstep.h"

enum { N_LAYER = 6, FULL_LAYER = 5, N_PROMPT = 40, N_GEN = 96 };

static ls_model *g_model;

static int group_setup(void **state) {
    (void)state;
    char err[512];
    ls_set_log_level(3);
    fixture_params p = fixture_default_params();
    p.n_layer = N_LAYER;
    if (fixture_open(&p, &g_model, err, sizeof err) != LS_OK) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    ls_model_close(g_model);
    ls_set_log_level(1);
    return 0;
}

/* ---- log capture (the probe reports through the log) ---------------------------------------- */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log[64 * 1024];
static size_t g_log_n;

static void log_sink(ls_log_level level, const char *msg, void *ud) {
    (void)ud;
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR", ""};
    pthread_mutex_lock(&g_log_mu);
    int n = snprintf(g_log + g_log_n, sizeof g_log - g_log_n, "%s: %s\n", names[level], msg);
    if (n > 0) g_log_n += (size_t)n < sizeof g_log - g_log_n ? (size_t)n : sizeof g_log - g_log_n - 1;
    pthread_mutex_unlock(&g_log_mu);
}

static void log_capture_begin(ls_log_level level) {
    g_log_n = 0;
    g_log[0] = 0;
    ls_log_set_level(level);
    ls_log_set_sink(log_sink, NULL);
}

static void log_capture_end(void) {
    ls_log_set_sink(NULL, NULL);
    ls_log_set_level(LS_LOG_ERROR);
}

/* ---- (a) the probe passes on the fixture ---------------------------------------------------- */

static void test_probe_passes(void **state) {
    (void)state;
    for (int32_t k = 2; k <= 8; k++) {
        ls_probe_options opt = {.block_size = k, .n_threads = 1};
        ls_probe_result r;
        char err[256];
        assert_int_equal(ls_probe_run(g_model, &opt, &r, err, sizeof err), LS_OK);
        if (!r.passed) fail_msg("K=%d: %s", k, r.message);
        assert_true(r.total_bytes > 0);
        assert_int_equal(r.diff_bytes, 0);
        assert_non_null(strstr(r.message, "exactness probe passed"));
        assert_non_null(strstr(r.message, "beyond the sliding window 16"));
    }
    /* two threads, and the public entry point */
    ls_probe_options opt = {.block_size = 4, .n_threads = 2};
    ls_probe_result r;
    char err[256], msg[512];
    assert_int_equal(ls_probe_run(g_model, &opt, &r, err, sizeof err), LS_OK);
    assert_true(r.passed);
    ls_probe_params pp = {.block_size = 3, .n_threads = 1};
    bool passed = false;
    assert_int_equal(ls_probe(g_model, &pp, &passed, msg, sizeof msg, err, sizeof err), LS_OK);
    assert_true(passed);
    pp.block_size = 1;
    assert_int_equal(ls_probe(g_model, &pp, &passed, msg, sizeof msg, err, sizeof err), LS_ERR_ARG);
    /* fault stages are checked by name when the fault is set */
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 1, "softmax"), LS_ERR_ARG);
}

/* ---- (b) fault injection: the probe names the faulted layer, kind and sub-op ----------------- */

typedef struct {
    int32_t layer; /* -1: final stages */
    ls_stage stage;
    int32_t k;
} fault_case;

static void check_fault(const fault_case *fc, bool trace) {
    ls_probe_options opt = {.block_size = fc->k, .n_threads = 1, .trace = trace};
    ls_probe_result r;
    char err[256];
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, fc->layer, ls_stage_name(fc->stage)), LS_OK);
    int rc = ls_probe_run(g_model, &opt, &r, err, sizeof err);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 0, NULL), LS_OK);
    assert_int_equal(rc, LS_OK);
    const char *kind = fc->layer < 0 ? "output" : fc->layer == FULL_LAYER ? "full" : "sliding";
    if (r.passed || !r.localized || r.layer != fc->layer || r.stage != fc->stage)
        fail_msg("fault at layer %d %s (K=%d): %s", fc->layer, ls_stage_name(fc->stage), fc->k, r.message);
    assert_int_equal(r.layer_sliding, fc->layer >= 0 && fc->layer != FULL_LAYER);
    assert_true(r.diff_bytes > 0 && r.diff_bytes <= r.total_bytes);
    /* The fault perturbs the block's last row only: no earlier row can differ (causal). */
    assert_int_equal(r.block_row, fc->k - 1);
    /* "verify block position P differs from the single-token chain in D of T logit bytes;
     *  first divergence: layer L (sliding|full) <sub-op> at position p" */
    int P, L, p, end = 0;
    long long D, T;
    char kbuf[16], stage[32];
    int got = sscanf(r.message,
                     "verify block position %d differs from the single-token chain in %lld of %lld logit bytes; "
                     "first divergence: layer %d (%15[a-z]) %31s at position %d%n",
                     &P, &D, &T, &L, kbuf, stage, &p, &end);
    if (got != 7 || end != (int)strlen(r.message)) fail_msg("message not in the documented form: %s", r.message);
    assert_int_equal(P, fc->k - 1);
    assert_true(D > 0 && D <= T);
    assert_int_equal(T, (long long)fc->k * FIXTURE_N_VOCAB * 4); /* one case's block of logits */
    assert_int_equal(L, fc->layer);
    assert_string_equal(kbuf, kind);
    assert_string_equal(stage, ls_stage_name(fc->stage));
    assert_int_equal(p, r.position);
    assert_true(p >= fc->k); /* an absolute position after the case's prompt: prompt + K - 1 */
}

static void test_fault_localized(void **state) {
    (void)state;
    static const fault_case cases[] = {
        {0, LS_STAGE_ATTENTION, 4},
        {0, LS_STAGE_MLP, 4},
        {0, LS_STAGE_LAYER_OUTPUT, 4},
        {3, LS_STAGE_MLP, 2},
        {4, LS_STAGE_ATTENTION, 8},
        {FULL_LAYER, LS_STAGE_ATTENTION, 4},
        {FULL_LAYER, LS_STAGE_MLP, 4},
        {FULL_LAYER, LS_STAGE_LAYER_OUTPUT, 4},
        {FULL_LAYER, LS_STAGE_LAYER_OUTPUT, 8},
        {-1, LS_STAGE_FINAL_NORM, 4},
        {-1, LS_STAGE_LM_HEAD, 4},
        {-1, LS_STAGE_LM_HEAD, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_fault(&cases[i], false);
}

/* The trace pass (always localize, log per-layer verdicts) agrees, and its log names the
 * faulted sub-op as the one that differs first. */
static void test_fault_trace(void **state) {
    (void)state;
    fault_case fc = {2, LS_STAGE_MLP, 4};
    log_capture_begin(LS_LOG_INFO);
    check_fault(&fc, true);
    log_capture_end();
    assert_non_null(strstr(g_log, "probe trace: layer 1 (sliding): attention=identical mlp=identical "
                                  "layer-output=identical"));
    assert_non_null(strstr(g_log, "probe trace: layer 2 (sliding): attention=identical mlp=DIFFERS"));
    assert_non_null(strstr(g_log, "probe trace: layer 5 (full):"));
}

/* The test-control entry parses stage names and maps the final stages to layer -1; the
 * public probe reports a faulted run as ran-and-failed (LS_OK, passed false). */
static void test_fault_public_entry(void **state) {
    (void)state;
    char msg[512], err[256], set[512];
    bool passed = true;
    ls_probe_params pp = {.block_size = 4, .n_threads = 1};
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, FULL_LAYER, "attention"), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_DESCRIBE, set, sizeof set), LS_OK);
    assert_non_null(strstr(set, "fault_probe=5:attention"));
    assert_int_equal(ls_probe(g_model, &pp, &passed, msg, sizeof msg, err, sizeof err), LS_OK);
    assert_false(passed);
    assert_non_null(strstr(msg, "first divergence: layer 5 (full) attention at position"));
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 3, "lm-head"), LS_OK); /* layer ignored */
    assert_int_equal(ls_probe(g_model, &pp, &passed, msg, sizeof msg, err, sizeof err), LS_OK);
    assert_false(passed);
    assert_non_null(strstr(msg, "lm-head at position"));
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, N_LAYER, "mlp"), LS_OK);
    assert_int_equal(ls_probe(g_model, &pp, &passed, msg, sizeof msg, err, sizeof err), LS_ERR_ARG);
    assert_non_null(strstr(err, "fault layer"));
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 0, NULL), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_DESCRIBE, set, sizeof set), LS_OK);
    assert_non_null(strstr(set, "fault_probe=off"));
    assert_int_equal(ls_probe(g_model, &pp, &passed, msg, sizeof msg, err, sizeof err), LS_OK);
    assert_true(passed);
}

/* ---- (c) generation declines speculation when the probe fails --------------------------------- */

typedef struct {
    int32_t ids[N_GEN];
    int n;
} output;

static void on_token(int32_t id, void *ud) {
    output *o = ud;
    if (o->n < N_GEN) o->ids[o->n] = id;
    o->n++;
}

static void run(ls_session *s, const int32_t *prompt, ls_drafter *d, bool allow_inexact, output *o, ls_gen_stats *st) {
    ls_gen_params gp = ls_gen_default_params();
    gp.n_predict = N_GEN;
    gp.ignore_eos = true;
    gp.sampling.temperature = 0.8f;
    gp.sampling.seed = 5;
    gp.on_token = on_token;
    gp.drafter = d;
    gp.block_size = 4;
    gp.adaptive = false;
    gp.allow_inexact = allow_inexact;
    gp.skip_probe = false;
    memset(o, 0, sizeof *o);
    char err[256];
    if (ls_generate(s, prompt, N_PROMPT, &gp, NULL, o, st, err, sizeof err) != LS_OK) fail_msg("generate: %s", err);
    assert_int_equal(o->n, N_GEN);
}

static void test_decline_path(void **state) {
    (void)state;
    char err[256];
    ls_session *s;
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    assert_int_equal(ls_session_create(g_model, &sp, &s, err, sizeof err), LS_OK);
    ls_drafter *d;
    assert_int_equal(ls_drafter_ngram_create(1, 3, &d, err, sizeof err), LS_OK);
    int32_t prompt[N_PROMPT];
    prompt[0] = FIXTURE_BOS;
    for (int i = 1; i < N_PROMPT; i++) prompt[i] = FIXTURE_FIRST_PIECE + (i * 37) % 100;
    output classic, out;
    ls_gen_stats st;
    run(s, prompt, NULL, false, &classic, &st);
    assert_false(st.speculative);

    /* A failing probe: classic decoding serves the request, and says why. */
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 1, "attention"), LS_OK);
    log_capture_begin(LS_LOG_WARN);
    run(s, prompt, d, false, &out, &st);
    log_capture_end();
    assert_false(st.speculative);
    assert_non_null(st.spec_declined);
    assert_int_equal(st.rounds, 0);
    assert_memory_equal(out.ids, classic.ids, sizeof classic.ids);
    assert_non_null(strstr(g_log, "speculation declined"));
    assert_non_null(strstr(g_log, "first divergence: layer 1 (sliding) attention"));

    /* allow_inexact keeps speculating, loudly. (Only the probe's sessions are faulted, so
     * the output is still classic's.) */
    log_capture_begin(LS_LOG_WARN);
    run(s, prompt, d, true, &out, &st);
    log_capture_end();
    assert_true(st.speculative);
    assert_null(st.spec_declined);
    assert_true(st.rounds > 0);
    assert_memory_equal(out.ids, classic.ids, sizeof classic.ids);
    assert_non_null(strstr(g_log, "FAILED"));

    /* Reset: the memoized failure is forgotten and the probe passes again. */
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 0, NULL), LS_OK);
    run(s, prompt, d, false, &out, &st);
    assert_true(st.speculative);
    assert_null(st.spec_declined);
    assert_memory_equal(out.ids, classic.ids, sizeof classic.ids);

    ls_drafter_free(d);
    ls_session_free(s);
}

/* ---- (d) the per-stage comparison on hand-made rows ------------------------------------------ */

enum { U_LAYERS = 6, U_K = 4, U_W = 8, U_P0 = 20 };

/* Deterministic row content for (layer, stage, position). */
static void make_row(float *row, int32_t layer, ls_stage st, int32_t pos, int64_t width) {
    for (int64_t i = 0; i < width; i++) row[i] = (float)(layer * 1000 + (int)st * 100 + pos) + 0.125f * (float)i;
}

/* The chain arm as the probe records it: one row per forward, plus prefill rows (ignored). */
static void record_chain(ls_probe_capture *c) {
    float rows[U_P0][U_W];
    for (int32_t l = -1; l < U_LAYERS; l++)
        for (int st = 0; st < LS_STAGE_COUNT; st++) {
            if ((l < 0) != (st >= LS_STAGE_FINAL_NORM)) continue;
            for (int32_t p = 0; p < U_P0; p++) make_row(rows[p], l, (ls_stage)st, p, U_W);
            ls_probe_capture_rows(c, 0, l, (ls_stage)st, rows[0], U_P0, U_W, 0); /* prefill */
            for (int32_t r = 0; r < U_K; r++) {
                float row[U_W];
                make_row(row, l, (ls_stage)st, U_P0 + r, U_W);
                ls_probe_capture_rows(c, 0, l, (ls_stage)st, row, 1, U_W, U_P0 + r);
            }
        }
}

/* The block arm: K rows per stage, in execution order or reversed; `mutate` edits rows. */
typedef void (*mutate_fn)(float *rows, int32_t layer, ls_stage st);

static void record_block(ls_probe_capture *c, mutate_fn mutate, bool reversed) {
    int n = 0;
    struct {
        int32_t l;
        ls_stage st;
    } order[U_LAYERS * 3 + 2];
    for (int32_t l = 0; l < U_LAYERS; l++)
        for (int st = 0; st < LS_STAGE_FINAL_NORM; st++) order[n].l = l, order[n++].st = (ls_stage)st;
    order[n].l = -1, order[n++].st = LS_STAGE_FINAL_NORM;
    order[n].l = -1, order[n++].st = LS_STAGE_LM_HEAD;
    for (int i = 0; i < n; i++) {
        int j = reversed ? n - 1 - i : i;
        float rows[U_K][U_W];
        for (int32_t r = 0; r < U_K; r++) make_row(rows[r], order[j].l, order[j].st, U_P0 + r, U_W);
        if (mutate) mutate(rows[0], order[j].l, order[j].st);
        ls_probe_capture_rows(c, 1, order[j].l, order[j].st, rows[0], U_K, U_W, U_P0);
    }
}

static void flip_lsb(float *x) {
    uint32_t u;
    memcpy(&u, x, 4);
    u ^= 1u;
    memcpy(x, &u, 4);
}

/* Layer 3 mlp differs at block row 2; layer 5 attention (later layer) at row 0, earlier. */
static void mut_l3_mlp_l5_att(float *rows, int32_t layer, ls_stage st) {
    if (layer == 3 && st == LS_STAGE_MLP) flip_lsb(&rows[2 * U_W + 5]);
    if (layer == 5 && st == LS_STAGE_ATTENTION) flip_lsb(&rows[0 * U_W + 0]);
}
/* Final-norm (slot 0 in storage order) at row 0, layer 0 layer-output at row 3. */
static void mut_final_and_l0(float *rows, int32_t layer, ls_stage st) {
    if (layer == -1 && st == LS_STAGE_FINAL_NORM) rows[0] = -rows[0];
    if (layer == 0 && st == LS_STAGE_LAYER_OUTPUT) rows[3 * U_W + 7] += 1.0f;
}
/* Only the logits, and only their sign of zero: a byte difference all the same. */
static void mut_lm_head_zero(float *rows, int32_t layer, ls_stage st) {
    if (layer == -1 && st == LS_STAGE_LM_HEAD) rows[1 * U_W + 2] = 0.0f, rows[1 * U_W + 3] = -0.0f;
}

static void test_compare_unit(void **state) {
    (void)state;
    ls_probe_capture c;
    assert_int_equal(ls_probe_capture_init(&c, U_LAYERS, U_K, U_W), LS_OK);
    ls_probe_divergence dv;
    for (int rev = 0; rev < 2; rev++) {
        /* identical arms: no divergence */
        ls_probe_capture_reset(&c, U_P0);
        record_chain(&c);
        record_block(&c, NULL, rev);
        assert_false(ls_probe_capture_compare(&c, &dv));
        assert_int_equal(ls_probe_capture_diff_rows(&c, 3, LS_STAGE_MLP), 0);

        /* the earlier layer wins over the earlier position */
        ls_probe_capture_reset(&c, U_P0);
        record_chain(&c);
        record_block(&c, mut_l3_mlp_l5_att, rev);
        assert_true(ls_probe_capture_compare(&c, &dv));
        assert_int_equal(dv.layer, 3);
        assert_int_equal(dv.stage, LS_STAGE_MLP);
        assert_int_equal(dv.position, U_P0 + 2);
        assert_int_equal(ls_probe_capture_diff_rows(&c, 3, LS_STAGE_MLP), 1);
        assert_int_equal(ls_probe_capture_diff_rows(&c, 5, LS_STAGE_ATTENTION), 1);
        assert_int_equal(ls_probe_capture_diff_rows(&c, 3, LS_STAGE_ATTENTION), 0);
        assert_int_equal(ls_probe_capture_diff_rows(&c, 4, LS_STAGE_MLP), 0);

        /* the output stages run after every layer, whatever their storage slot */
        ls_probe_capture_reset(&c, U_P0);
        record_chain(&c);
        record_block(&c, mut_final_and_l0, rev);
        assert_true(ls_probe_capture_compare(&c, &dv));
        assert_int_equal(dv.layer, 0);
        assert_int_equal(dv.stage, LS_STAGE_LAYER_OUTPUT);
        assert_int_equal(dv.position, U_P0 + 3);
        assert_int_equal(ls_probe_capture_diff_rows(&c, -1, LS_STAGE_FINAL_NORM), 1);

        /* bytes, not values: 0.0 vs -0.0 differs; lm-head alone is reported as layer -1 */
        ls_probe_capture_reset(&c, U_P0);
        record_chain(&c);
        record_block(&c, mut_lm_head_zero, rev);
        assert_true(ls_probe_capture_compare(&c, &dv));
        assert_int_equal(dv.layer, -1);
        assert_int_equal(dv.stage, LS_STAGE_LM_HEAD);
        assert_int_equal(dv.position, U_P0 + 1);
    }

    /* A row seen in only one arm is not compared; after a reset nothing is remembered. */
    ls_probe_capture_reset(&c, U_P0);
    float row[U_W];
    make_row(row, 2, LS_STAGE_MLP, U_P0, U_W);
    ls_probe_capture_rows(&c, 0, 2, LS_STAGE_MLP, row, 1, U_W, U_P0);
    row[0] += 1;
    ls_probe_capture_rows(&c, 1, 2, LS_STAGE_MLP, row, 1, U_W, U_P0 + 1);
    assert_false(ls_probe_capture_compare(&c, &dv));
    ls_probe_capture_rows(&c, 1, 2, LS_STAGE_MLP, row, 1, U_W, U_P0);
    assert_true(ls_probe_capture_compare(&c, &dv));
    assert_int_equal(dv.position, U_P0);
    ls_probe_capture_reset(&c, U_P0);
    assert_false(ls_probe_capture_compare(&c, &dv));

    /* Wider rows (logits) are compared on their first `width` floats only. */
    float wide_a[2 * U_W], wide_b[2 * U_W];
    for (int i = 0; i < 2 * U_W; i++) wide_a[i] = wide_b[i] = (float)i;
    wide_b[U_W + 1] = 99.0f;
    ls_probe_capture_rows(&c, 0, -1, LS_STAGE_LM_HEAD, wide_a, 1, 2 * U_W, U_P0);
    ls_probe_capture_rows(&c, 1, -1, LS_STAGE_LM_HEAD, wide_b, 1, 2 * U_W, U_P0);
    assert_false(ls_probe_capture_compare(&c, &dv));
    wide_b[U_W - 1] = 98.0f;
    ls_probe_capture_rows(&c, 1, -1, LS_STAGE_LM_HEAD, wide_b, 1, 2 * U_W, U_P0);
    assert_true(ls_probe_capture_compare(&c, &dv));
    ls_probe_capture_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compare_unit),       cmocka_unit_test(test_probe_passes),
        cmocka_unit_test(test_fault_localized),    cmocka_unit_test(test_fault_trace),
        cmocka_unit_test(test_fault_public_entry), cmocka_unit_test(test_decline_path),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
