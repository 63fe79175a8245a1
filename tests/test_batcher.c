/* The batcher: several sessions' rows in one forward give each session exactly the bits it
 * gets alone, and generations served concurrently through a batcher (classic and
 * speculative, T = 0 and T = 0.8) equal the same generations run alone.
 *
 * Runs on the tiny random-weight Gemma 3 fixture (fixture_model.c): window 16, so the
 * prompts here run past it and exercise sliding-window compaction inside shared steps. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "fixture_model.c"
#include "model/session.h"

static ls_model *g_model;

static int setup(void **state) {
    (void)state;
    char err[256];
    fixture_params p = fixture_default_params();
    if (fixture_open(&p, &g_model, err, sizeof err) != LS_OK) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ls_model_close(g_model);
    return 0;
}

static ls_session *new_session(int32_t n_batch, int32_t threads) {
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = 512;
    sp.n_batch = n_batch;
    sp.n_threads = threads;
    ls_session *s = NULL;
    char err[256];
    assert_int_equal(ls_session_create(g_model, &sp, &s, err, sizeof err), LS_OK);
    return s;
}

static void fill_prompt(int32_t *t, int32_t n, uint32_t seed) {
    t[0] = FIXTURE_BOS;
    for (int32_t i = 1; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = FIXTURE_FIRST_PIECE + (int32_t)((seed >> 8) % (FIXTURE_N_VOCAB - FIXTURE_FIRST_PIECE));
    }
}

/* Direct multi-segment forwards: sessions at different positions (one past the window),
 * with different row counts and logits ranges, in one step; every logits row must equal
 * the same session's rows run alone. */
static void test_segments_match_solo(void **state) {
    (void)state;
    enum { NS = 4 };
    int32_t pre[NS] = {3, 40, 17, 1}; /* tokens already in each cache */
    int32_t rows[NS] = {1, 5, 12, 3};
    int32_t from[NS] = {0, 0, 11, 1};
    int32_t prompt[64];
    ls_session *solo[NS], *bat[NS];
    float *want[NS], *got[NS];
    const int64_t nv = FIXTURE_N_VOCAB;
    char err[256];
    for (int i = 0; i < NS; i++) {
        solo[i] = new_session(32, 1);
        bat[i] = new_session(32, 1);
        fill_prompt(prompt, pre[i] + rows[i], 77u + (uint32_t)i);
        for (int k = 0; k < 2; k++) { /* same history in both sessions */
            ls_session *s = k ? bat[i] : solo[i];
            for (int32_t at = 0; at < pre[i]; at += 8) {
                int32_t m = pre[i] - at < 8 ? pre[i] - at : 8;
                assert_int_equal(ls_session_eval(s, prompt + at, m, m, NULL, err, sizeof err), LS_OK);
            }
        }
        want[i] = calloc((size_t)(rows[i] * nv), sizeof(float));
        got[i] = calloc((size_t)(rows[i] * nv), sizeof(float));
        assert_int_equal(ls_session_eval(solo[i], prompt + pre[i], rows[i], from[i], want[i], err, sizeof err), LS_OK);
    }
    /* The batched step, with two threads (the solo runs used one). */
    ls_backend *be = ls_backend_cpu_create(2, 64, 256, 512);
    ls_workspace ws;
    assert_int_equal(ls_workspace_init(&ws, be, g_model, 64, 32), 0);
    ls_fwd_seg segs[NS];
    int32_t toks[NS][16];
    for (int i = 0; i < NS; i++) {
        fill_prompt(prompt, pre[i] + rows[i], 77u + (uint32_t)i);
        memcpy(toks[i], prompt + pre[i], sizeof(int32_t) * (size_t)rows[i]);
        segs[i] = (ls_fwd_seg){.s = bat[i], .tokens = toks[i], .n = rows[i], .logits_from = from[i], .logits = got[i]};
        assert_int_equal(ls_fwd_prepare(&segs[i], 64, err, sizeof err), LS_OK);
    }
    ls_gemma3_forward(be, &ws, segs, NS);
    for (int i = 0; i < NS; i++) {
        assert_int_equal(ls_session_pos(bat[i]), pre[i] + rows[i]);
        assert_memory_equal(want[i], got[i], sizeof(float) * (size_t)((rows[i] - from[i]) * nv));
        /* and the caches now hold the same keys: one more token agrees too */
        int32_t t = FIXTURE_FIRST_PIECE + i;
        assert_int_equal(ls_session_eval(solo[i], &t, 1, 0, want[i], err, sizeof err), LS_OK);
        assert_int_equal(ls_session_eval(bat[i], &t, 1, 0, got[i], err, sizeof err), LS_OK);
        assert_memory_equal(want[i], got[i], sizeof(float) * (size_t)nv);
    }
    ls_workspace_free(&ws);
    be->ops->free(be);
    for (int i = 0; i < NS; i++) {
        ls_session_free(solo[i]);
        ls_session_free(bat[i]);
        free(want[i]);
        free(got[i]);
    }
}

/* ---- concurrent generations through one batcher ---------------------------------------- */

enum { MAXTOK = 160 };
typedef struct {
    ls_session *s;
    ls_drafter *d;
    int32_t prompt[96];
    int32_t np;
    int32_t n_predict;
    float temperature;
    uint64_t seed;
    int32_t toks[MAXTOK];
    int32_t n;
    ls_gen_stats st;
    int rc;
} job;

static void on_tok(int32_t id, void *ud) {
    job *j = ud;
    if (j->n < MAXTOK) j->toks[j->n++] = id;
}

static bool sink(const char *t, size_t n, void *ud) {
    (void)t, (void)n, (void)ud;
    return true;
}

static void *run(void *arg) {
    job *j = arg;
    ls_gen_params gp = ls_gen_default_params();
    gp.n_predict = j->n_predict;
    gp.ignore_eos = true;
    gp.sampling.temperature = j->temperature;
    gp.sampling.top_p = 0.95f;
    gp.sampling.seed = j->seed;
    gp.drafter = j->d;
    gp.block_size = 4;
    gp.skip_probe = true;
    gp.on_token = on_tok;
    char err[256];
    j->n = 0;
    j->rc = ls_generate(j->s, j->prompt, j->np, &gp, sink, j, &j->st, err, sizeof err);
    return NULL;
}

static void concurrent(bool spec) {
    enum { NJ = 4 };
    job solo[NJ], bat[NJ];
    char err[256];
    memset(solo, 0, sizeof solo);
    for (int i = 0; i < NJ; i++) {
        job *j = &solo[i];
        j->np = 10 + 25 * i; /* 10..85 tokens: several 16-row prefill chunks for the long ones */
        fill_prompt(j->prompt, j->np, 1000u + (uint32_t)i);
        j->n_predict = 40 + 30 * (NJ - i);
        j->temperature = i % 2 ? 0.8f : 0.0f;
        j->seed = 42u + (uint64_t)i;
        j->s = new_session(16, 1);
        if (spec) assert_int_equal(ls_drafter_ngram_create(1, 3, &j->d, err, sizeof err), LS_OK);
        run(j);
        assert_int_equal(j->rc, LS_OK);
        assert_int_equal(j->n, j->n_predict);
    }
    ls_batcher_params bp = ls_batcher_default_params();
    bp.n_threads = 2;
    bp.n_ctx = 512;
    bp.max_rows = 16 + NJ * 4;
    bp.max_logit_rows = NJ * 4;
    ls_batcher *b = NULL;
    assert_int_equal(ls_batcher_create(g_model, &bp, &b, err, sizeof err), LS_OK);
    pthread_t th[NJ];
    for (int i = 0; i < NJ; i++) {
        bat[i] = solo[i];
        bat[i].s = new_session(16, 1);
        bat[i].d = NULL;
        if (spec) assert_int_equal(ls_drafter_ngram_create(1, 3, &bat[i].d, err, sizeof err), LS_OK);
        assert_int_equal(ls_session_attach(bat[i].s, b, err, sizeof err), LS_OK);
    }
    for (int i = 0; i < NJ; i++) assert_int_equal(pthread_create(&th[i], NULL, run, &bat[i]), 0);
    for (int i = 0; i < NJ; i++) pthread_join(th[i], NULL);
    ls_batcher_stats bs;
    ls_batcher_get_stats(b, &bs);
    for (int i = 0; i < NJ; i++) {
        assert_int_equal(bat[i].rc, LS_OK);
        assert_int_equal(bat[i].n, solo[i].n);
        assert_memory_equal(bat[i].toks, solo[i].toks, sizeof(int32_t) * (size_t)solo[i].n);
        assert_true(bat[i].st.max_step_ms > 0);
    }
    /* The point of the batcher: steps really carried several sequences. */
    print_message("batcher: %llu steps, %llu rows, %.2f sequences/step, max %d\n", (unsigned long long)bs.steps,
                  (unsigned long long)bs.rows, (double)bs.segments / (double)bs.steps, bs.max_segments);
    assert_true(bs.max_segments >= 2);
    assert_true(bs.segments > bs.steps);
    for (int i = 0; i < NJ; i++) {
        ls_session_free(bat[i].s);
        ls_session_free(solo[i].s);
        ls_drafter_free(bat[i].d);
        ls_drafter_free(solo[i].d);
    }
    ls_batcher_free(b);
}

static void test_concurrent_classic(void **state) {
    (void)state;
    concurrent(false);
}

static void test_concurrent_speculative(void **state) {
    (void)state;
    concurrent(true);
}

/* A bad request fails alone; the others in its step are served. The batcher is held while
 * three sessions queue their evals (a bad token id, and two good prompts), so all three are
 * taken into ONE step (the step count proves it); the bad one gets its error, the good ones
 * their logits, bit-identical to a forward of their rows alone. */
typedef struct {
    ls_session *s;
    const int32_t *tokens;
    int32_t n;
    float *logits;
    int rc;
    char err[256];
} eval_job;

static void *eval_thread(void *arg) {
    eval_job *j = arg;
    j->rc = ls_session_eval(j->s, j->tokens, j->n, j->n - 1, j->logits, j->err, sizeof j->err);
    return NULL;
}

static void test_bad_segment_fails_alone(void **state) {
    (void)state;
    char err[256];
    ls_batcher *b = NULL;
    ls_batcher_params bp = ls_batcher_default_params();
    bp.n_threads = 1;
    bp.n_ctx = 512;
    assert_int_equal(ls_batcher_create(g_model, &bp, &b, err, sizeof err), LS_OK);
    enum { NG = 5 };
    int32_t bad = FIXTURE_N_VOCAB + 5, good[2][NG];
    fill_prompt(good[0], NG, 11);
    fill_prompt(good[1], NG, 12);
    float ref[2][FIXTURE_N_VOCAB], out[3][FIXTURE_N_VOCAB];
    for (int g = 0; g < 2; g++) { /* each good prompt alone, without a batcher */
        ls_session *solo = new_session(16, 1);
        assert_int_equal(ls_session_eval(solo, good[g], NG, NG - 1, ref[g], err, sizeof err), LS_OK);
        ls_session_free(solo);
    }
    eval_job jobs[3] = {{.tokens = &bad, .n = 1}, {.tokens = good[0], .n = NG}, {.tokens = good[1], .n = NG}};
    for (int i = 0; i < 3; i++) {
        jobs[i].s = new_session(16, 1);
        jobs[i].logits = out[i];
        assert_int_equal(ls_session_attach(jobs[i].s, b, err, sizeof err), LS_OK);
    }
    ls_batcher_stats before, after;
    ls_batcher_get_stats(b, &before);
    ls_batcher_hold(b, true);
    pthread_t th[3];
    for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, eval_thread, &jobs[i]), 0);
    for (int w = 0; ls_batcher_n_queued(b) < 3; w++) {
        assert_true(w < 10000); /* 10 s */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    ls_batcher_hold(b, false);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    ls_batcher_get_stats(b, &after);
    assert_int_equal(after.steps - before.steps, 1);       /* one step took all three */
    assert_int_equal(after.segments - before.segments, 2); /* ... and ran the two good ones */
    assert_int_equal(jobs[0].rc, LS_ERR_ARG);
    assert_non_null(strstr(jobs[0].err, "out of range"));
    assert_int_equal(ls_session_pos(jobs[0].s), 0);
    for (int g = 0; g < 2; g++) {
        if (jobs[1 + g].rc != LS_OK) fail_msg("good request %d in the bad one's step: %s", g, jobs[1 + g].err);
        assert_int_equal(ls_session_pos(jobs[1 + g].s), NG);
        assert_memory_equal(out[1 + g], ref[g], sizeof ref[g]);
    }
    ls_session *s = jobs[1].s;
    ls_session_free(jobs[0].s);
    ls_session_free(jobs[2].s);
    /* too many rows for the session */
    int32_t many[17] = {0};
    assert_int_equal(ls_session_eval(s, many, 17, 0, NULL, err, sizeof err), LS_ERR_ARG);
    /* attach refuses a session bigger than the batcher */
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = 1024;
    ls_session *big = NULL;
    assert_int_equal(ls_session_create(g_model, &sp, &big, err, sizeof err), LS_OK);
    assert_int_equal(ls_session_attach(big, b, err, sizeof err), LS_ERR_ARG);
    ls_session_free(big);
    ls_session_free(s);
    ls_batcher_free(b);
    /* only max_rows given, below the default logits budget: the budget follows it */
    bp = ls_batcher_default_params();
    bp.max_rows = 32;
    bp.n_ctx = 512;
    assert_int_equal(ls_batcher_create(g_model, &bp, &b, err, sizeof err), LS_OK);
    ls_batcher_free(b);
}

/* ls_session_logits_buffer: the session's own rows (page-locked on a GPU), reused while they
 * suffice and grown when asked for more; rows evaluated into it, solo and through a batcher,
 * equal rows evaluated into a caller's malloc'd buffer. */
static void test_logits_buffer(void **state) {
    (void)state;
    enum { N = 5 };
    char err[256];
    int32_t t[N];
    fill_prompt(t, N, 77);
    ls_session *s = new_session(16, 1), *ref = new_session(16, 1);
    assert_null(ls_session_logits_buffer(s, 0));
    float *b3 = ls_session_logits_buffer(s, 3);
    assert_non_null(b3);
    assert_int_equal((uintptr_t)b3 % 64, 0);
    assert_ptr_equal(ls_session_logits_buffer(s, 1), b3);
    assert_ptr_equal(ls_session_logits_buffer(s, 3), b3);
    float *b = ls_session_logits_buffer(s, N);
    assert_non_null(b);
    float *want = malloc(sizeof(float) * N * FIXTURE_N_VOCAB);
    assert_non_null(want);
    assert_int_equal(ls_session_eval(ref, t, N, 0, want, err, sizeof err), LS_OK);
    assert_int_equal(ls_session_eval(s, t, N, 0, b, err, sizeof err), LS_OK);
    assert_memory_equal(b, want, sizeof(float) * N * FIXTURE_N_VOCAB);
    /* attached to a batcher: the batcher's step downloads into the session's buffer */
    ls_batcher_params bp = ls_batcher_default_params();
    bp.n_ctx = 512;
    ls_batcher *bt = NULL;
    assert_int_equal(ls_batcher_create(g_model, &bp, &bt, err, sizeof err), LS_OK);
    assert_int_equal(ls_session_truncate(s, 0), LS_OK);
    assert_int_equal(ls_session_attach(s, bt, err, sizeof err), LS_OK);
    memset(b, 0, sizeof(float) * N * FIXTURE_N_VOCAB);
    assert_int_equal(ls_session_eval(s, t, N, 0, b, err, sizeof err), LS_OK);
    assert_memory_equal(b, want, sizeof(float) * N * FIXTURE_N_VOCAB);
    ls_session_free(s);
    ls_batcher_free(bt);
    ls_session_free(ref);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_buffer),           cmocka_unit_test(test_segments_match_solo),
        cmocka_unit_test(test_concurrent_classic),      cmocka_unit_test(test_concurrent_speculative),
        cmocka_unit_test(test_bad_segment_fails_alone),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
