/* Logprobs (docs/logprobs.md): ls_logprobs on hand-made rows (normalization, the top list's
 * order and ties, argument checks, determinism), then ls_generate's on_logprobs on the tiny
 * random-weight fixture: the logprobs of every emitted token equal ls_logprobs over a
 * one-token decode row of that position, and are bitwise the same with every drafter (verify
 * rows), every block size and at T 0 and 0.8; rejected drafts never show. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixture_model.c"
#include "lockstep.h"

/* ---- ls_logprobs on hand-made rows ----------------------------------------------------- */

static void test_uniform_row(void **state) {
    (void)state;
    enum { V = 1000 };
    static float row[V];
    for (int i = 0; i < V; i++) row[i] = 3.25f;
    ls_token_logprobs lp;
    assert_int_equal(ls_logprobs(row, V, 17, 5, &lp), LS_OK);
    assert_int_equal(lp.token, 17);
    assert_true(fabs(lp.logprob - (float)-log((double)V)) < 1e-6);
    assert_int_equal(lp.n_top, 5);
    for (int k = 0; k < 5; k++) { /* all tied: the lowest ids, in order */
        assert_int_equal(lp.top[k].id, k);
        assert_true(lp.top[k].logprob == lp.logprob);
    }
}

/* exp(logprob) over the whole vocabulary sums to 1; the top list is sorted by logprob
 * (descending), ties by id, and holds the real maxima. */
static void test_normalized_and_ordered(void **state) {
    (void)state;
    enum { V = 777 };
    static float row[V];
    uint64_t x = 99;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        row[i] = (float)((int)((x >> 40) % 2001) - 1000) / 100.0f; /* -10..10 in steps of 0.01: many ties */
    }
    row[500] = row[3] = 12.5f; /* a tie at the top: 3 before 500 */
    double sum = 0;
    ls_token_logprobs lp;
    for (int i = 0; i < V; i++) {
        assert_int_equal(ls_logprobs(row, V, i, 0, &lp), LS_OK);
        assert_int_equal(lp.n_top, 0);
        assert_true(lp.logprob <= 0.0f);
        sum += exp((double)lp.logprob);
    }
    assert_true(fabs(sum - 1.0) < 1e-5);
    assert_int_equal(ls_logprobs(row, V, 42, LS_MAX_TOP_LOGPROBS, &lp), LS_OK);
    assert_int_equal(lp.n_top, LS_MAX_TOP_LOGPROBS);
    assert_int_equal(lp.top[0].id, 3);
    assert_int_equal(lp.top[1].id, 500);
    for (int k = 1; k < lp.n_top; k++) {
        const ls_logprob *a = &lp.top[k - 1], *b = &lp.top[k];
        assert_true(a->logprob >= b->logprob);
        assert_true(row[a->id] > row[b->id] || (row[a->id] == row[b->id] && a->id < b->id));
    }
    /* nothing outside the list beats its last entry */
    const ls_logprob *last = &lp.top[lp.n_top - 1];
    for (int i = 0; i < V; i++) {
        bool in = false;
        for (int k = 0; k < lp.n_top; k++) in |= lp.top[k].id == i;
        if (!in) assert_true(row[i] < row[last->id] || (row[i] == row[last->id] && i > last->id));
    }
    /* the chosen token's logprob is the same number in the top list */
    assert_int_equal(ls_logprobs(row, V, 500, 3, &lp), LS_OK);
    assert_true(lp.logprob == lp.top[1].logprob);
    /* same row, same bits */
    ls_token_logprobs lp2;
    assert_int_equal(ls_logprobs(row, V, 500, 3, &lp2), LS_OK);
    assert_memory_equal(&lp, &lp2, sizeof lp);
}

static void test_extremes_and_arguments(void **state) {
    (void)state;
    float row[4] = {1e30f, -1e30f, 0.0f, -INFINITY};
    ls_token_logprobs lp;
    assert_int_equal(ls_logprobs(row, 4, 0, 20, &lp), LS_OK);
    assert_true(lp.logprob == 0.0f);
    assert_int_equal(lp.n_top, 4); /* capped to the vocabulary */
    assert_int_equal(lp.top[0].id, 0);
    assert_int_equal(lp.top[1].id, 2);
    assert_int_equal(lp.top[2].id, 1);
    assert_int_equal(lp.top[3].id, 3);
    assert_true(isfinite(lp.top[2].logprob) && lp.top[2].logprob < -1e29f);
    assert_true(isinf(lp.top[3].logprob) && lp.top[3].logprob < 0);
    assert_int_equal(ls_logprobs(row, 4, 4, 0, &lp), LS_ERR_ARG);
    assert_int_equal(ls_logprobs(row, 4, -1, 0, &lp), LS_ERR_ARG);
    assert_int_equal(ls_logprobs(row, 4, 0, 21, &lp), LS_ERR_ARG);
    assert_int_equal(ls_logprobs(row, 4, 0, -1, &lp), LS_ERR_ARG);
    assert_int_equal(ls_logprobs(NULL, 4, 0, 0, &lp), LS_ERR_ARG);
    assert_int_equal(ls_logprobs(row, 0, 0, 0, &lp), LS_ERR_ARG);
}

/* ---- generation on the fixture ------------------------------------------------------------ */

enum { N_PROMPT = 40, N_GEN = 96, N_CTX = 256, N_TOP = 5 };

static struct {
    ls_model *target, *target2, *trunc;
    ls_session *sess;
    int32_t prompt[N_PROMPT];
} W;

static int group_setup(void **state) {
    (void)state;
    char err[512];
    ls_set_log_level(2);
    fixture_params p = fixture_default_params();
    fixture_params pt = p;
    pt.n_layer = 2; /* the target's first 2 layers: a drafter that is right only some of the time */
    if (fixture_open(&p, &W.target, err, sizeof err) || fixture_open(&p, &W.target2, err, sizeof err) ||
        fixture_open(&pt, &W.trunc, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_threads = 1;
    if (ls_session_create(W.target, &sp, &W.sess, err, sizeof err)) {
        fprintf(stderr, "session: %s\n", err);
        return -1;
    }
    uint64_t x = 12345;
    W.prompt[0] = FIXTURE_BOS;
    for (int i = 1; i < N_PROMPT; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        W.prompt[i] = FIXTURE_FIRST_PIECE + (int32_t)((x >> 33) % (FIXTURE_N_VOCAB - FIXTURE_FIRST_PIECE));
    }
    memcpy(W.prompt + 28, W.prompt + 8, sizeof(int32_t) * 8); /* something for prompt lookup */
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    ls_session_free(W.sess);
    ls_model_close(W.target);
    ls_model_close(W.target2);
    ls_model_close(W.trunc);
    return 0;
}

typedef struct {
    int32_t ids[N_GEN];
    ls_token_logprobs lp[N_GEN];
    int n, n_lp;
} output;

static void on_token(int32_t id, void *ud) {
    output *o = ud;
    if (o->n < N_GEN) o->ids[o->n] = id;
    o->n++;
}

static void on_logprobs(const ls_token_logprobs *lp, void *ud) {
    output *o = ud;
    assert_int_equal(o->n_lp + 1, o->n); /* right after on_token, one per emitted token */
    if (o->n_lp < N_GEN) o->lp[o->n_lp] = *lp;
    o->n_lp++;
}

static ls_gen_params params(float temp) {
    ls_gen_params gp = ls_gen_default_params();
    gp.n_predict = N_GEN;
    gp.ignore_eos = true;
    gp.sampling.temperature = temp;
    gp.sampling.top_k = 0;
    gp.sampling.min_p = 0.0f;
    gp.sampling.seed = 42;
    gp.adaptive = false;
    gp.skip_probe = true;
    gp.on_token = on_token;
    gp.on_logprobs = on_logprobs;
    gp.n_top_logprobs = N_TOP;
    return gp;
}

static void generate(const ls_gen_params *gp, output *o, ls_gen_stats *st) {
    memset(o, 0, sizeof *o);
    char err[512] = "";
    int rc = ls_generate(W.sess, W.prompt, N_PROMPT, gp, NULL, o, st, err, sizeof err);
    if (rc != LS_OK) fail_msg("ls_generate: %s", err);
    assert_int_equal(o->n, N_GEN);
    assert_int_equal(o->n_lp, N_GEN);
}

/* The reference: feed prompt + the emitted tokens one at a time through a fresh session and
 * take ls_logprobs of each one-token decode row. */
static void check_against_decode_rows(const output *o) {
    char err[512];
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_threads = 1;
    ls_session *s;
    if (ls_session_create(W.target, &sp, &s, err, sizeof err)) fail_msg("session: %s", err);
    int32_t nv = ls_session_n_vocab(s);
    float *row = malloc(sizeof(float) * (size_t)nv);
    assert_non_null(row);
    if (ls_session_eval(s, W.prompt, N_PROMPT, N_PROMPT - 1, row, err, sizeof err)) fail_msg("eval: %s", err);
    for (int i = 0; i < o->n; i++) {
        ls_token_logprobs want;
        assert_int_equal(ls_logprobs(row, nv, o->ids[i], N_TOP, &want), LS_OK);
        want.pos = N_PROMPT + i;
        if (memcmp(&want, &o->lp[i], sizeof want) != 0)
            fail_msg("token %d (id %d): logprob %.9g vs %.9g from its decode row", i, o->ids[i], o->lp[i].logprob,
                     want.logprob);
        if (ls_session_eval(s, &o->ids[i], 1, 0, row, err, sizeof err)) fail_msg("eval: %s", err);
    }
    free(row);
    ls_session_free(s);
}

static void assert_same(const output *a, const output *b, const char *what) {
    for (int i = 0; i < N_GEN; i++) {
        if (a->ids[i] != b->ids[i]) fail_msg("%s: token %d differs", what, i);
        if (memcmp(&a->lp[i], &b->lp[i], sizeof a->lp[i]) != 0)
            fail_msg("%s: logprobs of token %d differ (%.9g vs %.9g)", what, i, a->lp[i].logprob, b->lp[i].logprob);
    }
}

static void test_generation_matches_decode_rows(void **state) {
    (void)state;
    for (int ti = 0; ti < 2; ti++) {
        ls_gen_params gp = params(ti ? 0.8f : 0.0f);
        output o;
        ls_gen_stats st;
        generate(&gp, &o, &st);
        for (int i = 0; i < o.n; i++) {
            assert_int_equal(o.lp[i].token, o.ids[i]);
            assert_int_equal(o.lp[i].pos, N_PROMPT + i);
            assert_int_equal(o.lp[i].n_top, N_TOP);
            if (ti == 0) { /* greedy: the chosen token is the most likely one */
                assert_int_equal(o.lp[i].top[0].id, o.ids[i]);
                assert_true(o.lp[i].top[0].logprob == o.lp[i].logprob);
            }
        }
        check_against_decode_rows(&o);
    }
}

/* Every drafter and block size: the same tokens and the same logprob bits as classic
 * decoding, while drafts are both accepted and rejected. */
static void test_speculative_same_bits(void **state) {
    (void)state;
    static const int32_t ks[] = {2, 4, 8};
    for (int ti = 0; ti < 2; ti++) {
        ls_gen_params gp = params(ti ? 0.8f : 0.0f);
        output ref, o;
        ls_gen_stats st;
        generate(&gp, &ref, &st);
        for (int dk = 0; dk < 3; dk++) {
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                ls_drafter *d = NULL;
                char err[512] = "";
                int rc = dk == 0   ? ls_drafter_ngram_create(1, 3, &d, err, sizeof err)
                         : dk == 1 ? ls_drafter_model_create(W.target2, W.target, N_CTX, 1, &d, err, sizeof err)
                                   : ls_drafter_model_create(W.trunc, W.target, N_CTX, 1, &d, err, sizeof err);
                if (rc != LS_OK) fail_msg("drafter: %s", err);
                ls_gen_params g2 = gp;
                g2.drafter = d;
                g2.block_size = ks[ki];
                generate(&g2, &o, &st);
                char what[96];
                snprintf(what, sizeof what, "%s K=%d T=%.1f", ls_drafter_name(d), ks[ki], ti ? 0.8 : 0.0);
                if (!st.speculative || st.accepted == 0) fail_msg("%s: no draft accepted", what);
                assert_same(&ref, &o, what);
                ls_drafter_free(d);
            }
        }
    }
}

/* Rejection sampling picks other tokens, but each token's logprobs still come from the
 * target's row that chose it. */
static void test_rejection_mode_rows(void **state) {
    (void)state;
    ls_drafter *d = NULL;
    char err[512] = "";
    if (ls_drafter_model_create(W.trunc, W.target, N_CTX, 1, &d, err, sizeof err) != LS_OK) fail_msg("%s", err);
    ls_gen_params gp = params(0.8f);
    gp.drafter = d;
    gp.block_size = 4;
    gp.spec_sampling = LS_SPEC_REJECTION;
    output o;
    ls_gen_stats st;
    generate(&gp, &o, &st);
    assert_true(st.speculative);
    check_against_decode_rows(&o);
    ls_drafter_free(d);
}

static void test_bad_top_count(void **state) {
    (void)state;
    ls_gen_params gp = params(0.0f);
    gp.n_top_logprobs = LS_MAX_TOP_LOGPROBS + 1;
    output o;
    memset(&o, 0, sizeof o);
    ls_gen_stats st;
    char err[256] = "";
    assert_int_equal(ls_generate(W.sess, W.prompt, N_PROMPT, &gp, NULL, &o, &st, err, sizeof err), LS_ERR_ARG);
    assert_non_null(strstr(err, "logprobs"));
    gp.n_top_logprobs = -1;
    assert_int_equal(ls_generate(W.sess, W.prompt, N_PROMPT, &gp, NULL, &o, &st, err, sizeof err), LS_ERR_ARG);
    assert_int_equal(o.n, 0);
}

/* ls_token_text: the bytes a token adds to the text (byte tokens: one byte; SentencePiece's
 * U+2581 as a space; control tokens nothing). */
static void test_token_text(void **state) {
    (void)state;
    char b[64];
    assert_int_equal(ls_token_text(W.target, FIXTURE_FIRST_BYTE + 0x41, b, sizeof b), 1);
    assert_int_equal(b[0], 'A');
    assert_int_equal(ls_token_text(W.target, FIXTURE_BOS, b, sizeof b), 0);
    assert_int_equal(ls_token_text(W.target, FIXTURE_N_VOCAB, b, sizeof b), -1);
    for (int32_t id = FIXTURE_FIRST_PIECE; id < FIXTURE_FIRST_PIECE + 20; id++) {
        ls_detok dt = {0};
        char d[64];
        int n = ls_token_text(W.target, id, b, sizeof b);
        assert_true(n > 0);
        assert_int_equal(ls_token_text(W.target, id, NULL, 0), n); /* size query */
        assert_int_equal(ls_detok_token(W.target, &dt, id, d, sizeof d), n);
        assert_memory_equal(b, d, (size_t)n);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_row),
        cmocka_unit_test(test_normalized_and_ordered),
        cmocka_unit_test(test_extremes_and_arguments),
        cmocka_unit_test(test_token_text),
        cmocka_unit_test(test_generation_matches_decode_rows),
        cmocka_unit_test(test_speculative_same_bits),
        cmocka_unit_test(test_rejection_mode_rows),
        cmocka_unit_test(test_bad_top_count),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
