/* Acceptance test of the product promise (docs/speculative.md): with a drafter, generation
 * emits exactly the tokens (and bytes) classic decoding emits, for every drafter, block
 * size, thread count and temperature, and stops at exactly the same place.
 *
 * Runs on the tiny random-weight Gemma 3 fixture (fixture_model.c): 6 layers (layer 5
 * full attention, the others sliding with a window of 16), weights in every quantized
 * type, so a 40-token prompt is already beyond the window and 256 generated tokens take
 * tens of milliseconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "decode/drafter.h"
#include "fixture_model.c"
#include "lockstep.h"

enum { N_PROMPT = 40, N_GEN = 256, N_CTX = 512, MAX_OUT = 2048 };

/* ---- fixtures shared by every test ---------------------------------------------------- */

typedef struct {
    ls_model *target;    /* 6 layers, seed 1 */
    ls_model *target2;   /* the same file loaded a second time (drafts == the target's choices) */
    ls_model *small;     /* 2 layers, another seed, same vocabulary (a poor drafter) */
    ls_model *trunc;     /* the target's first 2 layers (same seed): a decent drafter */
    ls_model *variant;   /* the target's weights, one token text changed */
    ls_session *sess[3]; /* [threads] for threads 1 and 2 */
    int32_t prompt[N_PROMPT];
} world;

static world W;

static int group_setup(void **state) {
    (void)state;
    char err[512];
    ls_set_log_level(2); /* keep "probe passed" info lines out of the test output */
    fixture_params p = fixture_default_params();
    if (fixture_open(&p, &W.target, err, sizeof err) || fixture_open(&p, &W.target2, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    fixture_params ps = p;
    ps.seed = 7;
    ps.n_layer = 2;
    ps.embd_type = LS_TYPE_F16;
    fixture_params pv = p;
    pv.vocab_variant = true;
    fixture_params pt = p;
    pt.n_layer = 2; /* the generator draws tensors in file order: same embedding, same first layers */
    if (fixture_open(&ps, &W.small, err, sizeof err) || fixture_open(&pv, &W.variant, err, sizeof err) ||
        fixture_open(&pt, &W.trunc, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    for (int t = 1; t <= 2; t++) {
        ls_session_params sp = ls_session_default_params();
        sp.n_ctx = N_CTX;
        sp.n_threads = t;
        if (ls_session_create(W.target, &sp, &W.sess[t], err, sizeof err)) {
            fprintf(stderr, "session: %s\n", err);
            return -1;
        }
    }
    /* BOS, then pseudo-random normal pieces with one repeated stretch (prompt lookup
     * has something to find from the start). */
    uint64_t x = 12345;
    W.prompt[0] = FIXTURE_BOS;
    for (int i = 1; i < N_PROMPT; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        W.prompt[i] = FIXTURE_FIRST_PIECE + (int32_t)((x >> 33) % (FIXTURE_N_VOCAB - FIXTURE_FIRST_PIECE));
    }
    memcpy(W.prompt + 28, W.prompt + 8, sizeof(int32_t) * 8);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    for (int t = 1; t <= 2; t++) ls_session_free(W.sess[t]);
    ls_model_close(W.target);
    ls_model_close(W.target2);
    ls_model_close(W.small);
    ls_model_close(W.trunc);
    ls_model_close(W.variant);
    return 0;
}

/* ---- running generation ------------------------------------------------------------------ */

typedef struct {
    int32_t ids[MAX_OUT];
    int n;
    char text[MAX_OUT * 8];
    size_t text_n;
} output;

static void on_token(int32_t id, void *ud) {
    output *o = ud;
    if (o->n < MAX_OUT) o->ids[o->n] = id;
    o->n++;
}

static bool on_text(const char *text, size_t len, void *ud) {
    output *o = ud;
    if (o->text_n + len <= sizeof o->text) memcpy(o->text + o->text_n, text, len);
    o->text_n += len;
    return true;
}

static ls_gen_params params(float temp, uint64_t seed) {
    ls_gen_params gp = ls_gen_default_params();
    gp.n_predict = N_GEN;
    gp.ignore_eos = true;
    gp.sampling.temperature = temp;
    gp.sampling.top_k = 0;
    gp.sampling.top_p = 0.95f;
    gp.sampling.min_p = 0.0f;
    gp.sampling.seed = seed;
    gp.adaptive = false;
    gp.skip_probe = true;
    gp.on_token = on_token;
    return gp;
}

static void generate(ls_session *s, const int32_t *prompt, int32_t np, const ls_gen_params *gp, output *o,
                     ls_gen_stats *st) {
    memset(o, 0, sizeof *o);
    char err[512] = "";
    int rc = ls_generate(s, prompt, np, gp, on_text, o, st, err, sizeof err);
    if (rc != LS_OK) fail_msg("ls_generate: %s", err);
    assert_int_equal(o->n, st->n_generated);
}

static void assert_same_output(const output *a, const output *b, const char *what) {
    if (a->n != b->n) fail_msg("%s: %d tokens vs classic %d", what, b->n, a->n);
    for (int i = 0; i < a->n && i < MAX_OUT; i++)
        if (a->ids[i] != b->ids[i]) fail_msg("%s: token %d differs: %d vs classic %d", what, i, b->ids[i], a->ids[i]);
    assert_int_equal(a->text_n, b->text_n);
    assert_memory_equal(a->text, b->text, a->text_n < sizeof a->text ? a->text_n : sizeof a->text);
}

/* Drafters under test, created per thread count (a draft model has its own session). */
typedef enum { D_NGRAM1, D_NGRAM2, D_NGRAM3, D_NGRAM13, D_SELF, D_SMALL, D_TRUNC } drafter_kind;
static const char *const drafter_names[] = {"ngram 1",
                                            "ngram 2",
                                            "ngram 3",
                                            "ngram 1..3",
                                            "model (target itself)",
                                            "model (2-layer, other seed)",
                                            "model (the target's first 2 layers)"};

static ls_drafter *make_drafter(drafter_kind k, int threads, int32_t n_ctx) {
    ls_drafter *d = NULL;
    char err[512] = "";
    int rc;
    switch (k) {
    case D_NGRAM1: rc = ls_drafter_ngram_create(1, 1, &d, err, sizeof err); break;
    case D_NGRAM2: rc = ls_drafter_ngram_create(2, 2, &d, err, sizeof err); break;
    case D_NGRAM3: rc = ls_drafter_ngram_create(3, 3, &d, err, sizeof err); break;
    case D_NGRAM13: rc = ls_drafter_ngram_create(1, 3, &d, err, sizeof err); break;
    case D_SELF: rc = ls_drafter_model_create(W.target2, W.target, n_ctx, threads, &d, err, sizeof err); break;
    case D_SMALL: rc = ls_drafter_model_create(W.small, W.target, n_ctx, threads, &d, err, sizeof err); break;
    default: rc = ls_drafter_model_create(W.trunc, W.target, n_ctx, threads, &d, err, sizeof err); break;
    }
    if (rc != LS_OK || !d) fail_msg("drafter %s: %s", drafter_names[k], err);
    return d;
}

/* ---- byte-identical output: every drafter x block size x threads x temperature ---------- */

/* Classic decoding of the shared prompt, per thread count and temperature (computed once). */
static const output *classic_ref(int threads, int ti) {
    static output refs[3][2];
    static bool have[3][2];
    if (!have[threads][ti]) {
        ls_gen_params gp = params(ti ? 0.8f : 0.0f, 42);
        ls_gen_stats st;
        generate(W.sess[threads], W.prompt, N_PROMPT, &gp, &refs[threads][ti], &st);
        assert_int_equal(refs[threads][ti].n, N_GEN);
        assert_false(st.speculative);
        have[threads][ti] = true;
    }
    return &refs[threads][ti];
}

/* The full matrix: every drafter x K in {2, 4, 8} x threads {1, 2} x T in {0, 0.8}. */
static void exact_matrix(drafter_kind dk) {
    static const int32_t ks[] = {2, 4, 8};
    static const float temps[] = {0.0f, 0.8f};
    output out;
    for (int ti = 0; ti < 2; ti++) {
        /* classic decoding itself does not depend on the thread count */
        assert_same_output(classic_ref(1, ti), classic_ref(2, ti), "classic, 2 threads vs 1");
        for (int threads = 1; threads <= 2; threads++) {
            ls_session *s = W.sess[threads];
            const output *ref = classic_ref(threads, ti);
            /* the draft model's own thread count does not affect the target's tokens */
            ls_drafter *d = make_drafter(dk, 1, N_CTX);
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                char what[128];
                snprintf(what, sizeof what, "%s K=%d threads=%d T=%.1f", drafter_names[dk], ks[ki], threads, temps[ti]);
                ls_gen_params gp = params(temps[ti], 42);
                gp.drafter = d;
                gp.block_size = ks[ki];
                /* the start-up probe runs (and must pass) at T = 0; skipped at T = 0.8 to
                 * stay fast (it is memoized per model, drafter, K and threads anyway) */
                gp.skip_probe = ti != 0;
                ls_gen_stats st;
                generate(s, W.prompt, N_PROMPT, &gp, &out, &st);
                assert_same_output(ref, &out, what);
                if (!st.speculative || st.spec_declined)
                    fail_msg("%s: speculation not used (%s)", what, st.spec_declined ? st.spec_declined : "?");
                assert_true(st.rounds > 0);
                assert_true(st.proposed > 0);
                assert_true(st.accepted <= st.proposed);
                assert_int_equal(st.emitted, N_GEN - 1); /* the first token comes from prefill */
                double rate = (double)st.accepted / (double)st.proposed;
                if (getenv("LS_TEST_VERBOSE"))
                    fprintf(stderr, "%s: rounds %lld acceptance %.3f\n", what, (long long)st.rounds, rate);
                if (dk != D_SMALL) assert_true(st.rounds < N_GEN - 1); /* some round emitted more than one token */
                if (dk == D_SELF) {
                    /* the drafter is the target: same logits, same position-keyed draws */
                    if (rate != 1.0) fail_msg("%s: acceptance %.4f, expected 1.0", what, rate);
                    assert_int_equal(st.zero_accept_rounds, 0);
                }
            }
            ls_drafter_free(d);
        }
    }
}

static void test_exact_ngram1(void **state) {
    (void)state;
    exact_matrix(D_NGRAM1);
}
static void test_exact_ngram2(void **state) {
    (void)state;
    exact_matrix(D_NGRAM2);
}
static void test_exact_ngram3(void **state) {
    (void)state;
    exact_matrix(D_NGRAM3);
}
static void test_exact_ngram13(void **state) {
    (void)state;
    exact_matrix(D_NGRAM13);
}
static void test_exact_model_self(void **state) {
    (void)state;
    exact_matrix(D_SELF);
}
static void test_exact_model_small(void **state) {
    (void)state;
    exact_matrix(D_SMALL);
}
static void test_exact_model_truncated(void **state) {
    (void)state;
    exact_matrix(D_TRUNC);
}

/* Adaptive width changes K (and may fall back to single steps) from measured timings:
 * whatever schedule it picks, the tokens do not change. */
static void test_exact_adaptive(void **state) {
    (void)state;
    static const drafter_kind kinds[] = {D_NGRAM13, D_SELF, D_SMALL};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        for (int ti = 0; ti < 2; ti++) {
            ls_gen_params gp = params(ti ? 0.8f : 0.0f, 7);
            output ref, out;
            ls_gen_stats st;
            generate(W.sess[1], W.prompt, N_PROMPT, &gp, &ref, &st);
            gp.drafter = make_drafter(kinds[i], 1, N_CTX);
            gp.block_size = 8;
            gp.adaptive = true;
            generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &st);
            assert_same_output(&ref, &out, drafter_names[kinds[i]]);
            assert_true(st.speculative && st.rounds > 0);
            ls_drafter_free(gp.drafter);
        }
}

/* Different seeds and a longer generation with the small draft model (divergence tends
 * to show after a few hundred tokens, docs/speculative.md section 9). */
static void test_exact_seeds_long(void **state) {
    (void)state;
    ls_drafter *d = make_drafter(D_SMALL, 1, N_CTX);
    for (uint64_t seed = 100; seed < 103; seed++) {
        ls_gen_params gp = params(0.8f, seed);
        gp.n_predict = N_CTX - N_PROMPT - 8;
        output ref, out;
        ls_gen_stats st;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &ref, &st);
        gp.drafter = d;
        gp.block_size = 5;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &st);
        assert_same_output(&ref, &out, "small draft model, long");
    }
    ls_drafter_free(d);
}

/* ---- rejection sampling (opt-in, not byte-identical at T > 0) --------------------------- */

static void test_rejection_mode(void **state) {
    (void)state;
    static const drafter_kind kinds[] = {D_NGRAM13, D_SMALL, D_SELF};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        ls_drafter *d = make_drafter(kinds[i], 1, N_CTX);
        ls_gen_params gp = params(0.0f, 3);
        output ref, out;
        ls_gen_stats st;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &ref, &st);
        gp.drafter = d;
        gp.block_size = 4;
        gp.spec_sampling = LS_SPEC_REJECTION;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &st);
        assert_same_output(&ref, &out, "rejection mode at T=0"); /* greedy: identical */
        assert_true(st.speculative && st.rounds > 0);
        /* T = 0.8: same distribution, different bytes by design; it must just run. */
        gp.sampling.temperature = 0.8f;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &st);
        assert_int_equal(out.n, N_GEN);
        assert_string_equal(st.stop_reason, "length");
        assert_true(st.speculative && st.rounds > 0 && st.proposed > 0);
        ls_drafter_free(d);
    }
}

/* ---- stop conditions ------------------------------------------------------------------ */

static void assert_same_stop(const output *ro, const ls_gen_stats *rs, const output *so, const ls_gen_stats *ss,
                             const char *what) {
    assert_same_output(ro, so, what);
    assert_int_equal(rs->n_generated, ss->n_generated);
    if (strcmp(rs->stop_reason, ss->stop_reason) != 0)
        fail_msg("%s: stop reason '%s' vs classic '%s'", what, ss->stop_reason, rs->stop_reason);
}

/* Without ignore_eos both stop at the same EOS (which may sit in the middle of a verify
 * block, with drafts after it). */
static void test_stop_eos(void **state) {
    (void)state;
    static const drafter_kind kinds[] = {D_NGRAM13, D_SELF, D_TRUNC};
    ls_drafter *ds[3];
    for (int i = 0; i < 3; i++) ds[i] = make_drafter(kinds[i], 1, N_CTX);
    int eos_stops = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        ls_gen_params gp = params(seed % 8 == 0 ? 0.0f : 1.0f, seed);
        gp.ignore_eos = false;
        gp.n_predict = 300;
        output ref, out;
        ls_gen_stats rs, ss;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &ref, &rs);
        if (getenv("LS_TEST_VERBOSE")) fprintf(stderr, "seed %d: %s after %d\n", (int)seed, rs.stop_reason, ref.n);
        if (!strcmp(rs.stop_reason, "eos")) {
            eos_stops++;
            assert_true(ref.n < gp.n_predict);
        }
        for (int i = 0; i < 3; i++) {
            gp.drafter = ds[i];
            gp.block_size = i == 0 ? 4 : 8;
            generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &ss);
            char what[96];
            snprintf(what, sizeof what, "eos stop, %s, seed %d", drafter_names[kinds[i]], (int)seed);
            assert_same_stop(&ref, &rs, &out, &ss, what);
        }
    }
    /* the fixture makes EOS (or <end_of_turn>) likely enough at T = 1: seeds 1, 2, 4, 6 */
    assert_true(eos_stops >= 3);
    for (int i = 0; i < 3; i++) ls_drafter_free(ds[i]);
}

static void test_stop_budget(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 2, 3, 5, 9};
    static const drafter_kind kinds[] = {D_NGRAM1, D_SELF, D_SMALL};
    for (int i = 0; i < 3; i++) {
        ls_drafter *d = make_drafter(kinds[i], 1, N_CTX);
        for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++)
            for (int ti = 0; ti < 2; ti++)
                for (int32_t k = 2; k <= 8; k += 6) {
                    ls_gen_params gp = params(ti ? 0.8f : 0.0f, 5);
                    gp.n_predict = budgets[b];
                    output ref, out;
                    ls_gen_stats rs, ss;
                    generate(W.sess[1], W.prompt, N_PROMPT, &gp, &ref, &rs);
                    assert_int_equal(ref.n, budgets[b]);
                    gp.drafter = d;
                    gp.block_size = k;
                    generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &ss);
                    assert_same_stop(&ref, &rs, &out, &ss, "n_predict");
                    assert_int_equal(out.n, budgets[b]);
                    assert_string_equal(ss.stop_reason, "length");
                }
        ls_drafter_free(d);
    }
}

/* A small context: both stop at the last position the context can hold. */
static void test_stop_context(void **state) {
    (void)state;
    static const int32_t ctxs[] = {N_PROMPT + 1, N_PROMPT + 2, N_PROMPT + 37, N_PROMPT + 64};
    static const drafter_kind kinds[] = {D_NGRAM13, D_SELF, D_SMALL};
    for (size_t c = 0; c < sizeof ctxs / sizeof *ctxs; c++) {
        ls_session *s;
        char err[256];
        ls_session_params sp = ls_session_default_params();
        sp.n_ctx = ctxs[c];
        sp.n_threads = 1;
        assert_int_equal(ls_session_create(W.target, &sp, &s, err, sizeof err), LS_OK);
        for (int i = 0; i < 3; i++) {
            ls_drafter *d = make_drafter(kinds[i], 1, ctxs[c]);
            for (int pi = 0; pi < 2; pi++) {
                ls_gen_params gp = params(0.8f, 11);
                gp.n_predict = pi ? -1 : N_GEN;
                output ref, out;
                ls_gen_stats rs, ss;
                generate(s, W.prompt, N_PROMPT, &gp, &ref, &rs);
                assert_int_equal(ref.n, ctxs[c] - N_PROMPT);
                assert_string_equal(rs.stop_reason, pi ? "length" : "context");
                gp.drafter = d;
                gp.block_size = 8 <= ctxs[c] ? 8 : 2;
                generate(s, W.prompt, N_PROMPT, &gp, &out, &ss);
                assert_same_stop(&ref, &rs, &out, &ss, "context limit");
            }
            ls_drafter_free(d);
        }
        ls_session_free(s);
    }
}

/* The text callback stopping generation stops both at the same token. */
static bool stop_after_8(const char *text, size_t len, void *ud) {
    on_text(text, len, ud);
    return ((output *)ud)->n < 8;
}

static void test_stop_callback(void **state) {
    (void)state;
    ls_drafter *d = make_drafter(D_SELF, 1, N_CTX);
    ls_gen_params gp = params(0.8f, 9);
    output ref, out;
    ls_gen_stats rs, ss;
    memset(&ref, 0, sizeof ref);
    char err[256];
    assert_int_equal(ls_generate(W.sess[1], W.prompt, N_PROMPT, &gp, stop_after_8, &ref, &rs, err, sizeof err), LS_OK);
    gp.drafter = d;
    gp.block_size = 8;
    memset(&out, 0, sizeof out);
    assert_int_equal(ls_generate(W.sess[1], W.prompt, N_PROMPT, &gp, stop_after_8, &out, &ss, err, sizeof err), LS_OK);
    assert_same_stop(&ref, &rs, &out, &ss, "callback stop");
    assert_string_equal(ss.stop_reason, "stopped");
    assert_true(out.n >= 8 && out.n < N_GEN);
    ls_drafter_free(d);
}

/* ---- round statistics ----------------------------------------------------------------------- */

static void assert_perfect_acceptance(const ls_gen_stats *st, const char *what) {
    /* the target drafting for itself: every draft that was checked is accepted */
    if (st->accepted != st->checked)
        fail_msg("%s: accepted %lld of %lld checked (%lld proposed), expected all", what, (long long)st->accepted,
                 (long long)st->checked, (long long)st->proposed);
    for (int i = 0; i < LS_SPEC_MAX_BLOCK; i++)
        if (st->accepted_at[i] != st->proposed_at[i])
            fail_msg("%s: position %d: accepted %lld of %lld", what, i + 1, (long long)st->accepted_at[i],
                     (long long)st->proposed_at[i]);
    assert_true(st->checked <= st->proposed);
    assert_int_equal(st->zero_accept_rounds + st->partial_accept_rounds, 0);
}

/* An EOS accepted inside a block ends generation there: the drafts after it were never
 * checked, so they are neither accepted nor rejected (acceptance stays exactly 1 with the
 * target as its own drafter). Same for the text callback stopping inside a block. */
static void test_stats_stop_inside_block(void **state) {
    (void)state;
    ls_drafter *d = make_drafter(D_SELF, 1, N_CTX);
    int eos_inside = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        ls_gen_params gp = params(1.0f, seed);
        gp.ignore_eos = false;
        gp.n_predict = 300;
        output ref, out;
        ls_gen_stats rs, ss;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &ref, &rs);
        gp.drafter = d;
        gp.block_size = 8;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &ss);
        char what[64];
        snprintf(what, sizeof what, "eos stop, seed %d", (int)seed);
        assert_same_stop(&ref, &rs, &out, &ss, what);
        assert_perfect_acceptance(&ss, what);
        if (!strcmp(ss.stop_reason, "eos") && ss.proposed > ss.checked) eos_inside++;
    }
    assert_true(eos_inside >= 1); /* the case happened: drafts after an accepted EOS */
    ls_gen_params gp = params(0.8f, 9);
    gp.drafter = d;
    gp.block_size = 8;
    output out;
    ls_gen_stats ss;
    memset(&out, 0, sizeof out);
    char err[256];
    assert_int_equal(ls_generate(W.sess[1], W.prompt, N_PROMPT, &gp, stop_after_8, &out, &ss, err, sizeof err), LS_OK);
    assert_string_equal(ss.stop_reason, "stopped");
    assert_perfect_acceptance(&ss, "callback stop");
    ls_drafter_free(d);
}

/* Verify rounds and plain (one-row) steps are counted apart: the adaptive width always
 * measures one plain step early on, and a drafter with nothing to propose makes plain
 * steps of the full width. */
static void test_stats_plain_steps(void **state) {
    (void)state;
    static const drafter_kind kinds[] = {D_SELF, D_NGRAM3};
    for (int i = 0; i < 2; i++) {
        ls_drafter *d = make_drafter(kinds[i], 1, N_CTX);
        ls_gen_params gp = params(0.8f, 42);
        gp.drafter = d;
        gp.block_size = 4;
        gp.adaptive = i == 0;
        output out;
        ls_gen_stats st;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &st);
        assert_same_output(classic_ref(1, 1), &out, drafter_names[kinds[i]]);
        assert_true(st.speculative);
        assert_int_equal(st.rounds, st.verify_rounds + st.plain_steps);
        assert_true(st.verify_rounds > 0);
        assert_true(st.plain_steps > 0);
        if (i == 0)
            assert_true(st.adaptive_plain_steps >= 1);
        else
            assert_int_equal(st.adaptive_plain_steps, 0);
        char line[2048];
        ls_gen_stats_format(&st, line, sizeof line);
        char want[128];
        snprintf(want, sizeof want, " rounds=%lld verify_rounds=%lld plain_steps=%lld ", (long long)st.rounds,
                 (long long)st.verify_rounds, (long long)st.plain_steps);
        if (!strstr(line, want)) fail_msg("stats line lacks '%s': %s", want, line);
        ls_drafter_free(d);
    }
}

/* ---- drafter and parameter validation ------------------------------------------------------ */

static void test_vocab_mismatch_refused(void **state) {
    (void)state;
    ls_drafter *d = (ls_drafter *)&d; /* must be reset to NULL */
    char err[512] = "";
    int rc = ls_drafter_model_create(W.variant, W.target, N_CTX, 1, &d, err, sizeof err);
    assert_true(rc < 0);
    assert_null(d);
    assert_non_null(strstr(err, "vocabulary"));
    /* the same weights with the same vocabulary are accepted */
    rc = ls_drafter_model_create(W.small, W.target, N_CTX, 1, &d, err, sizeof err);
    assert_int_equal(rc, LS_OK);
    assert_string_equal(ls_drafter_name(d), "model");
    ls_drafter_free(d);
}

static void test_block_size_checked(void **state) {
    (void)state;
    ls_drafter *d = make_drafter(D_NGRAM1, 1, N_CTX);
    ls_gen_params gp = params(0.0f, 1);
    gp.drafter = d;
    output out;
    memset(&out, 0, sizeof out);
    ls_gen_stats st;
    char err[256];
    for (int k = 0; k < 2; k++) {
        gp.block_size = k ? LS_SPEC_MAX_BLOCK + 1 : 1;
        err[0] = 0;
        assert_int_equal(ls_generate(W.sess[1], W.prompt, N_PROMPT, &gp, on_text, &out, &st, err, sizeof err),
                         LS_ERR_ARG);
        assert_non_null(strstr(err, "block size"));
    }
    ls_drafter_free(d);
}

/* A session batch smaller than K caps K (a verify block is K rows in one forward) instead of
 * failing; a batch of one row leaves no room for a draft (classic decoding). Either way the
 * bytes are classic decoding's. */
static void test_block_size_capped_to_batch(void **state) {
    (void)state;
    static const int32_t batches[] = {1, 2, 3, 7};
    for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
        ls_session *s;
        char err[256] = "";
        ls_session_params sp = ls_session_default_params();
        sp.n_ctx = N_CTX;
        sp.n_threads = 1;
        sp.n_batch = batches[b];
        assert_int_equal(ls_session_create(W.target, &sp, &s, err, sizeof err), LS_OK);
        ls_drafter *d = make_drafter(D_SELF, 1, N_CTX);
        for (int ti = 0; ti < 2; ti++) {
            ls_gen_params gp = params(ti ? 0.8f : 0.0f, 42);
            gp.drafter = d;
            gp.block_size = 8;
            gp.skip_probe = ti != 0;
            output out;
            ls_gen_stats st;
            generate(s, W.prompt, N_PROMPT, &gp, &out, &st);
            char what[64];
            snprintf(what, sizeof what, "batch %d, K 8, T=%.1f", batches[b], ti ? 0.8 : 0.0);
            assert_same_output(classic_ref(1, ti), &out, what);
            if (batches[b] == 1) {
                assert_false(st.speculative);
                assert_non_null(st.spec_declined);
            } else {
                assert_true(st.speculative);
                assert_int_equal(st.block_size, batches[b]);
                assert_int_equal(st.block_size_requested, 8);
                assert_true(st.final_block_size <= batches[b]);
                assert_true(st.verify_rounds > 0);
            }
        }
        ls_drafter_free(d);
        ls_session_free(s);
    }
    /* a batch that holds K: no cap reported */
    ls_drafter *d = make_drafter(D_NGRAM13, 1, N_CTX);
    ls_gen_params gp = params(0.0f, 42);
    gp.drafter = d;
    gp.block_size = 8;
    output out;
    ls_gen_stats st;
    generate(W.sess[1], W.prompt, N_PROMPT, &gp, &out, &st);
    assert_int_equal(st.block_size, 8);
    assert_int_equal(st.block_size_requested, 0);
    ls_drafter_free(d);
}

/* The fixture is not degenerate: greedy decoding does not repeat one token from the start,
 * and the tokenizer built from its metadata works. */
static void test_fixture_sane(void **state) {
    (void)state;
    ls_model_info info;
    ls_model_get_info(W.target, &info);
    assert_string_equal(info.arch, "gemma3");
    assert_int_equal(info.n_vocab, FIXTURE_N_VOCAB);
    assert_int_equal(info.n_layer, 6);
    assert_int_equal(info.sliding_window, 16);
    assert_int_equal(info.head_dim, FIXTURE_HEAD_DIM);
    assert_int_equal(ls_token_bos(W.target), FIXTURE_BOS);
    assert_true(ls_token_is_eog(W.target, FIXTURE_EOS));
    assert_true(ls_token_is_eog(W.target, 106));
    assert_true(ls_model_same_vocab(W.target, W.small));
    assert_false(ls_model_same_vocab(W.target, W.variant));
    int32_t ids[16];
    int64_t n = ls_model_tokenize(W.target, "ab cd", 5, true, false, ids, 16);
    assert_true(n >= 3 && n <= 6);
    assert_int_equal(ids[0], FIXTURE_BOS);
    for (int i = 1; i < n; i++) assert_true(ids[i] >= FIXTURE_FIRST_PIECE);
    for (int t = 0; t < 2; t++) {
        ls_gen_params gp = params(t ? 0.8f : 0.0f, 1);
        output o;
        ls_gen_stats st;
        generate(W.sess[1], W.prompt, N_PROMPT, &gp, &o, &st);
        int distinct = 0;
        static bool seen[FIXTURE_N_VOCAB];
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < o.n; i++) distinct += !seen[o.ids[i]], seen[o.ids[i]] = true;
        bool all_same_16 = true;
        for (int i = 1; i < 16; i++) all_same_16 &= o.ids[i] == o.ids[0];
        assert_false(all_same_16);
        assert_true(distinct >= (t ? 40 : 8));
    }
}

/* LS_TEST_VERBOSE=1 prints each test's wall time and the round statistics. */
static double t_start_ms;
static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static int timer_start(void **state) {
    (void)state;
    t_start_ms = wall_ms();
    return 0;
}
static int timer_stop(void **state) {
    (void)state;
    if (getenv("LS_TEST_VERBOSE")) fprintf(stderr, "  (%.0f ms)\n", wall_ms() - t_start_ms);
    return 0;
}
/* The n-gram drafter prefers, among matches of one length, the one at the distance of the
 * last accepted proposal (drafter_ngram.c): a source [10 .. 70], a preamble with 30 followed
 * by 99 98 97, then the copy starts. */
static void test_ngram_aligned_match(void **state) {
    (void)state;
    const int32_t hist[15] = {10, 20, 30, 40, 50, 60, 70, 77, 30, 99, 98, 97, 10, 20, 30};
    const ls_sampling sp = ls_sampling_default();
    char err[256];
    for (int accepted = 0; accepted < 2; accepted++) {
        ls_drafter *d = NULL;
        assert_int_equal(ls_drafter_ngram_create(1, 1, &d, err, sizeof err), LS_OK);
        d->ops->rollback(d, 0);
        int32_t out[3];
        assert_int_equal(d->ops->propose(d, NULL, hist, 13, 3, &sp, false, out), 3); /* after "10" */
        assert_int_equal(out[0], 20);
        d->ops->rollback(d, 13 + accepted);                                          /* "20" accepted, or nothing */
        assert_int_equal(d->ops->propose(d, NULL, hist, 15, 3, &sp, false, out), 3); /* after "30" */
        /* aligned with the accepted copy: the source's 40 50 60; else the most recent: 99 98 97 */
        assert_int_equal(out[0], accepted ? 40 : 99);
        assert_int_equal(out[2], accepted ? 60 : 97);
        ls_drafter_free(d);
    }
}

#undef cmocka_unit_test
#define cmocka_unit_test(f) cmocka_unit_test_setup_teardown(f, timer_start, timer_stop)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_sane),
        cmocka_unit_test(test_exact_ngram1),
        cmocka_unit_test(test_exact_ngram2),
        cmocka_unit_test(test_exact_ngram3),
        cmocka_unit_test(test_exact_ngram13),
        cmocka_unit_test(test_ngram_aligned_match),
        cmocka_unit_test(test_exact_model_self),
        cmocka_unit_test(test_exact_model_small),
        cmocka_unit_test(test_exact_model_truncated),
        cmocka_unit_test(test_exact_adaptive),
        cmocka_unit_test(test_exact_seeds_long),
        cmocka_unit_test(test_rejection_mode),
        cmocka_unit_test(test_stop_eos),
        cmocka_unit_test(test_stop_budget),
        cmocka_unit_test(test_stop_context),
        cmocka_unit_test(test_stop_callback),
        cmocka_unit_test(test_vocab_mismatch_refused),
        cmocka_unit_test(test_block_size_checked),
        cmocka_unit_test(test_block_size_capped_to_batch),
        cmocka_unit_test(test_stats_stop_inside_block),
        cmocka_unit_test(test_stats_plain_steps),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
