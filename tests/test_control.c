/* ls_test_control: the one entry for settings, debug switches and fault injection
 * (include/lockstep.h, docs/settings.md).
 *   (a) the entry itself: unknown ops and arguments are refused, DESCRIBE reports what is set,
 *       the ISA cannot change once the kernels chose it;
 *   (b) sampling never changes silently: an allocation failure of the sampler's scratch is an
 *       error (ls_sample, ls_session_create, ls_drafter_model_create), never dropped penalties
 *       or a greedy fallback; and the session's preallocated scratch chooses exactly the tokens
 *       ls_sample chooses (penalties included);
 *   (c) ls_model_open reports running out of memory as LS_ERR_NOMEM, also when it is the
 *       tokenizer's (GGUF and tokenizer.json) that runs out;
 *   (d) the probe's verdict memo is written only where the front end says. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture_model.c"
#include "lockstep.h"

enum { N_PROMPT = 24, N_GEN = 48 };

static ls_model *g_model;

static int group_setup(void **state) {
    (void)state;
    char err[512];
    ls_set_log_level(3);
    fixture_params p = fixture_default_params();
    p.n_layer = 6;
    if (fixture_open(&p, &g_model, err, sizeof err) != LS_OK) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    ls_model_close(g_model);
    return 0;
}

static void describe(char *buf, size_t cap) {
    assert_int_equal(ls_test_control(LS_TESTCTL_DESCRIBE, buf, cap), LS_OK);
}

/* ---- (a) ------------------------------------------------------------------------------------ */

static void test_entry(void **state) {
    (void)state;
    char d[1400];
    assert_int_equal(ls_test_control(0), LS_ERR_ARG);
    assert_int_equal(ls_test_control(999), LS_ERR_ARG);
    assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "avx512"), LS_ERR_ARG);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "nowhere", 1), LS_ERR_ARG);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "sampler", -1), LS_ERR_ARG);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 0, "softmax"), LS_ERR_ARG);
    assert_int_equal(ls_test_control(LS_TESTCTL_DESCRIBE, NULL, (size_t)0), LS_ERR_ARG);

    describe(d, sizeof d); /* the defaults */
    assert_non_null(strstr(d, "cuda_graphs=1 probe_trace=0 probe_memo=off fault_probe=off fault_alloc=off"));

    assert_int_equal(ls_test_control(LS_TESTCTL_CUDA_GRAPHS, 0), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_PROBE_TRACE, 1), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_PROBE_MEMO_DIR, "/tmp/memo"), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 3, "final-norm"), LS_OK); /* final: layer -1 */
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "model", 2), LS_OK);
    describe(d, sizeof d);
    assert_non_null(
        strstr(d, "cuda_graphs=0 probe_trace=1 probe_memo=/tmp/memo fault_probe=-1:final-norm fault_alloc=model:2"));

    assert_int_equal(ls_test_control(LS_TESTCTL_CUDA_GRAPHS, 1), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_PROBE_TRACE, 0), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_PROBE_MEMO_DIR, NULL), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_PROBE, 0, NULL), LS_OK);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "model", 0), LS_OK);
    describe(d, sizeof d);
    assert_non_null(strstr(d, "cuda_graphs=1 probe_trace=0 probe_memo=off fault_probe=off fault_alloc=off"));

    /* DESCRIBE chose the ISA (it names it): setting the same one is fine, another is too late. */
    if (strstr(d, "isa=avx512")) {
        assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "auto"), LS_OK);
        assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "avx2"), LS_ERR);
        assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "scalar"), LS_ERR);
    } else if (strstr(d, "isa=avx2")) {
        assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "auto"), LS_OK);
        assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "avx2"), LS_OK); /* the hardware's best already */
        assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "scalar"), LS_ERR);
    } else {
        assert_int_equal(ls_test_control(LS_TESTCTL_ISA, "scalar"), LS_OK);
    }
}

/* ---- (b) ------------------------------------------------------------------------------------ */

static ls_sampling sampling(float temp) {
    ls_sampling s = ls_sampling_default();
    s.temperature = temp;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
    s.seed = 99;
    return s;
}

static void test_sample_alloc_failure(void **state) {
    (void)state;
    float l[4] = {2.0f, 1.9f, 0.0f, 0.0f};
    int32_t hist[3] = {0, 0, 3};
    ls_sampling s = sampling(0);
    s.repeat_penalty = 1.2f; /* the penalty turns the choice from 0 into 1 */
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), 1);
    /* Without its scratch, ls_sample neither drops the penalty (0) nor picks anything else. */
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "sampler", 1), LS_OK);
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), LS_ERR_NOMEM);
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), 1); /* one failure armed, used up */
    /* Temperature sampling does not fall back to greedy either. */
    s = sampling(1.0f);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "sampler", 1), LS_OK);
        assert_int_equal(ls_sample(&s, l, 4, NULL, i), LS_ERR_NOMEM);
        assert_true(ls_sample(&s, l, 4, NULL, i) >= 0);
    }
}

static void test_session_alloc_failure(void **state) {
    (void)state;
    char err[256] = "";
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = 128;
    sp.n_threads = 1;
    ls_session *s = NULL;
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "sampler", 1), LS_OK);
    assert_int_equal(ls_session_create(g_model, &sp, &s, err, sizeof err), LS_ERR_NOMEM);
    assert_null(s);
    assert_non_null(strstr(err, "sampler"));

    /* A draft model's session has a sampler too: its failure reaches the caller. */
    fixture_params dp = fixture_default_params();
    dp.n_layer = 2;
    ls_model *draft = NULL;
    assert_int_equal(fixture_open(&dp, &draft, err, sizeof err), LS_OK);
    ls_drafter *d = NULL;
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "sampler", 1), LS_OK);
    assert_int_equal(ls_drafter_model_create(draft, g_model, 128, 1, &d, err, sizeof err), LS_ERR_NOMEM);
    assert_null(d);
    assert_non_null(strstr(err, "sampler"));
    assert_int_equal(ls_drafter_model_create(draft, g_model, 128, 1, &d, err, sizeof err), LS_OK);
    ls_drafter_free(d);
    ls_model_close(draft);
}

typedef struct {
    int32_t ids[N_GEN];
    int n;
} output;

static void on_token(int32_t id, void *ud) {
    output *o = ud;
    if (o->n < N_GEN) o->ids[o->n] = id;
    o->n++;
}

/* A session of the fixture model on one thread with n_ctx positions. */
static ls_session *one_thread_session(int32_t n_ctx) {
    char err[256];
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 1;
    ls_session *s = NULL;
    assert_int_equal(ls_session_create(g_model, &sp, &s, err, sizeof err), LS_OK);
    return s;
}

/* ls_generate samples with the session's scratch; replaying the same logits rows through
 * ls_sample gives the same tokens, penalties and filters included. */
static void test_session_scratch_same_tokens(void **state) {
    (void)state;
    char err[256];
    ls_session *s = one_thread_session(128);
    int32_t hist[N_PROMPT + N_GEN];
    hist[0] = FIXTURE_BOS;
    for (int i = 1; i < N_PROMPT; i++) hist[i] = FIXTURE_FIRST_PIECE + (i * 13) % 60;
    ls_gen_params gp = ls_gen_default_params();
    gp.n_predict = N_GEN;
    gp.ignore_eos = true;
    gp.sampling = sampling(0.9f);
    gp.sampling.top_k = 20;
    gp.sampling.repeat_penalty = 1.3f;
    gp.sampling.frequency_penalty = 0.2f;
    gp.sampling.presence_penalty = 0.1f;
    gp.on_token = on_token;
    output o = {0};
    ls_gen_stats st;
    assert_int_equal(ls_generate(s, hist, N_PROMPT, &gp, NULL, &o, &st, err, sizeof err), LS_OK);
    assert_int_equal(o.n, N_GEN);

    float *logits = malloc(sizeof(float) * FIXTURE_N_VOCAB);
    assert_non_null(logits);
    assert_int_equal(ls_session_truncate(s, 0), LS_OK);
    assert_int_equal(ls_session_eval(s, hist, N_PROMPT, N_PROMPT - 1, logits, err, sizeof err), LS_OK);
    int penalized = 0;
    for (int j = 0; j < N_GEN; j++) {
        int32_t pos = N_PROMPT + j;
        int32_t tok = ls_sample(&gp.sampling, logits, FIXTURE_N_VOCAB, hist, pos);
        ls_sampling plain = gp.sampling;
        plain.repeat_penalty = 1.0f;
        plain.frequency_penalty = plain.presence_penalty = 0.0f;
        penalized += ls_sample(&plain, logits, FIXTURE_N_VOCAB, hist, pos) != tok;
        assert_int_equal(tok, o.ids[j]);
        hist[pos] = tok;
        assert_int_equal(ls_session_eval(s, &tok, 1, 0, logits, err, sizeof err), LS_OK);
    }
    assert_true(penalized > 0); /* the penalties mattered on this run */
    free(logits);
    ls_session_free(s);
}

/* LS_TESTCTL_STEP_TIMES: only backends that replay recorded steps count them (the CPU none);
 * every take starts the totals again from zero. */
static void test_step_times(void **state) {
    (void)state;
    char err[256];
    ls_session *s = one_thread_session(64);
    float *logits = malloc(sizeof(float) * FIXTURE_N_VOCAB);
    assert_non_null(logits);
    int32_t tok = FIXTURE_BOS;
    ls_step_times t = {.steps = -1};
    assert_int_equal(ls_test_control(LS_TESTCTL_STEP_TIMES, 1, (ls_step_times *)NULL), LS_OK);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(ls_session_eval(s, &tok, 1, 0, logits, err, sizeof err), LS_OK);
        tok = FIXTURE_FIRST_PIECE + i;
    }
    assert_int_equal(ls_test_control(LS_TESTCTL_STEP_TIMES, 0, &t), LS_OK);
    if (strcmp(ls_session_device(s), "cpu") == 0) {
        assert_int_equal(t.steps, 0);
        assert_true(t.host_ms == 0.0 && t.device_ms == 0.0);
    } else { /* the first step of a shape is captured, the later ones replay */
        assert_true(t.steps >= 1 && t.steps <= 5);
        assert_true(t.host_ms > 0.0 && t.device_ms > 0.0);
    }
    assert_int_equal(ls_session_eval(s, &tok, 1, 0, logits, err, sizeof err), LS_OK); /* timing off */
    assert_int_equal(ls_test_control(LS_TESTCTL_STEP_TIMES, 0, &t), LS_OK);
    assert_int_equal(t.steps, 0);
    assert_true(t.host_ms == 0.0 && t.device_ms == 0.0);
    free(logits);
    ls_session_free(s);
}

/* ---- (c) ------------------------------------------------------------------------------------ */

static void test_model_open_nomem(void **state) {
    (void)state;
    char err[256] = "";
    fixture_params p = fixture_default_params();
    p.n_layer = 2;
    ls_model *m = NULL;
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "model", 1), LS_OK);
    assert_int_equal(fixture_open(&p, &m, err, sizeof err), LS_ERR_NOMEM);
    assert_null(m);
    assert_non_null(strstr(err, "out of memory"));
    assert_int_equal(fixture_open(&p, &m, err, sizeof err), LS_OK);
    ls_model_close(m);
}

/* The tokenizer's allocations fail: ls_model_open says LS_ERR_NOMEM (it said LS_ERR), for a
 * GGUF file and for a checkpoint directory (tokenizer.json); the next open works. */
static void test_model_open_tokenizer_nomem(void **state) {
    (void)state;
    char err[256] = "";
    fixture_params p = fixture_default_params();
    p.n_layer = 2;
    ls_model *m = NULL;
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "tokenizer", 1), LS_OK);
    assert_int_equal(fixture_open(&p, &m, err, sizeof err), LS_ERR_NOMEM);
    assert_null(m);
    assert_non_null(strstr(err, "tokenizer: out of memory"));
    assert_int_equal(fixture_open(&p, &m, err, sizeof err), LS_OK);
    ls_model_close(m);
    m = NULL;

    const char *data = getenv("LOCKSTEP_TEST_DATA");
    assert_non_null(data);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/hf/gemma3_text", data);
    assert_int_equal(ls_test_control(LS_TESTCTL_FAULT_ALLOC, "tokenizer", 1), LS_OK);
    assert_int_equal(ls_model_open(dir, &m, err, sizeof err), LS_ERR_NOMEM);
    assert_null(m);
    assert_non_null(strstr(err, "out of memory"));
    assert_int_equal(ls_model_open(dir, &m, err, sizeof err), LS_OK);
    ls_model_close(m);
}

/* ---- (d) ------------------------------------------------------------------------------------ */

static int count_files(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), ls = strlen(suffix);
        n += l > ls && !strcmp(e->d_name + l - ls, suffix);
    }
    closedir(d);
    return n;
}

static void spec_run(ls_session *s, ls_drafter *d, int32_t block) {
    int32_t prompt[N_PROMPT];
    prompt[0] = FIXTURE_BOS;
    for (int i = 1; i < N_PROMPT; i++) prompt[i] = FIXTURE_FIRST_PIECE + (i * 7) % 50;
    ls_gen_params gp = ls_gen_default_params();
    gp.n_predict = 8;
    gp.ignore_eos = true;
    gp.drafter = d;
    gp.block_size = block;
    gp.skip_probe = false;
    ls_gen_stats st;
    char err[256];
    if (ls_generate(s, prompt, N_PROMPT, &gp, NULL, NULL, &st, err, sizeof err) != LS_OK) fail_msg("%s", err);
    assert_true(st.speculative);
}

static void test_probe_memo_dir(void **state) {
    (void)state;
    char tmpl[] = "/tmp/lockstep-memo-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/lockstep/probe", tmpl); /* created on the first write */
    char err[256];
    ls_session *s = one_thread_session(128);
    ls_drafter *d;
    assert_int_equal(ls_drafter_ngram_create(1, 3, &d, err, sizeof err), LS_OK);

    /* No folder set (the library's default): nothing is written anywhere. */
    spec_run(s, d, 3);
    assert_int_equal(count_files(dir, ".pass"), 0);
    /* A folder: the passing verdict is remembered there (one per K). */
    assert_int_equal(ls_test_control(LS_TESTCTL_PROBE_MEMO_DIR, dir), LS_OK);
    spec_run(s, d, 4);
    assert_int_equal(count_files(dir, ".pass"), 1);
    spec_run(s, d, 4); /* memoized in the process: no second file */
    spec_run(s, d, 5);
    assert_int_equal(count_files(dir, ".pass"), 2);
    assert_int_equal(ls_test_control(LS_TESTCTL_PROBE_MEMO_DIR, NULL), LS_OK);
    spec_run(s, d, 6);
    assert_int_equal(count_files(dir, ".pass"), 2);

    ls_drafter_free(d);
    ls_session_free(s);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entry),
        cmocka_unit_test(test_sample_alloc_failure),
        cmocka_unit_test(test_session_alloc_failure),
        cmocka_unit_test(test_session_scratch_same_tokens),
        cmocka_unit_test(test_step_times),
        cmocka_unit_test(test_model_open_nomem),
        cmocka_unit_test(test_model_open_tokenizer_nomem),
        cmocka_unit_test(test_probe_memo_dir),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
