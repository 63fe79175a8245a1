/* Generation: classic decoding and exact speculative decoding over one emission path.
 *
 * Both modes prefill the prompt identically (chunks of n_batch) and choose the token for
 * absolute position p with the same sampler from the logits row of position p-1, with the
 * same history. Speculative rounds (docs/speculative.md section 4): the drafter proposes up to
 * K-1 tokens after the bonus token; ONE target forward runs [bonus, d1..] as a block; row j's
 * logits equal the chain's (batch-invariant kernels), so the choice c_j equals classic
 * decoding's; drafts are accepted while d_{j+1} == c_j; every emitted token is checked for
 * EOS / budget / context exactly as classic decoding checks it; then every cache is rolled
 * back to the last emitted token, which becomes the next bonus. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "decode/adaptive.h"
#include "decode/drafter.h"
#include "decode/grammar.h"
#include "decode/probe.h"
#include "decode/rng.h"
#include "decode/sampler.h"
#include "lockstep.h"
#include "model/session.h"

ls_gen_params ls_gen_default_params(void) {
    ls_gen_params p = {.n_predict = 256, .sampling = ls_sampling_default(), .block_size = 4, .adaptive = true};
    return p;
}

typedef struct {
    ls_session *s;
    const ls_model *m;
    const ls_gen_params *gp;
    int32_t *hist; /* [n_ctx] prompt, then emitted tokens by position */
    int32_t n_ctx, n_vocab, budget;
    ls_detok dt;
    ls_text_cb cb;
    void *ud;
    ls_gen_stats *st;
    int32_t kmax; /* K after the cap to the session batch */
    bool done;
    /* Structured output (docs/structured_output.md section 5): the automaton state after the
     * emitted tokens, the allowed-token scratch and the states of the trie walk. */
    const ls_grammar *gr;
    const ls_gvocab *gv;
    ls_gstate gs;
    ls_gstate *walk;
    uint8_t *allow;
    ls_sampling masked;
} gen_state;

/* The sampling settings for the row of the next position: with a grammar, the row's
 * disallowed tokens become -inf and top-k is capped to the allowed count (tokens of zero
 * probability never enter the draw). The mask depends only on the text emitted before the
 * position, so every schedule applies the same mask to the same row. */
static const ls_sampling *constrain(gen_state *g, float *row) {
    if (!g->gr) return &g->gp->sampling;
    double t0 = ls_now_ms();
    int32_t n = ls_grammar_mask(g->gr, g->gv, &g->gs, g->walk, g->allow);
    if (n == 0) /* a dead end (the vocabulary cannot spell any allowed byte): let it end */
        for (int32_t t = 0; t < g->n_vocab; t++) n += g->allow[t] = ls_token_is_eog(g->m, t);
    for (int32_t t = 0; t < g->n_vocab; t++)
        if (!g->allow[t]) row[t] = -INFINITY;
    g->masked = g->gp->sampling;
    if (n > 0 && (g->masked.top_k <= 0 || g->masked.top_k > n)) g->masked.top_k = n;
    g->st->grammar_masks++;
    g->st->grammar_ms += ls_now_ms() - t0;
    return &g->masked;
}

/* Offer the token chosen for position pos from logits row `row` (the row that chose it: its
 * logprobs come from exactly that row). Returns false when generation ends (an EOG token ends
 * it without being emitted, like classic decoding). */
static bool emit(gen_state *g, int32_t pos, int32_t tok, const float *row) {
    if (!g->gp->ignore_eos && ls_token_is_eog(g->m, tok)) {
        g->st->stop_reason = "eos";
        g->done = true;
        return false;
    }
    g->hist[pos] = tok;
    g->st->n_generated++;
    if (g->gr) ls_gstate_feed_token(g->gr, g->gv, &g->gs, tok);
    if (g->gp->on_token) g->gp->on_token(tok, g->ud);
    if (g->gp->on_logprobs) {
        ls_token_logprobs lp;
        ls_logprobs(row, g->n_vocab, tok, g->gp->n_top_logprobs, &lp); /* arguments checked by ls_generate */
        lp.pos = pos;
        g->gp->on_logprobs(&lp, g->ud);
    }
    char text[256];
    int n = ls_detok_token(g->m, &g->dt, tok, text, sizeof text);
    if (n > 0 && g->cb && !g->cb(text, (size_t)n, g->ud)) {
        g->st->stop_reason = "stopped";
        g->done = true;
    } else if (g->st->n_generated >= g->budget) {
        g->st->stop_reason = "length";
        g->done = true;
    } else if (pos + 1 >= g->n_ctx) {
        g->st->stop_reason = "context";
        g->done = true;
    }
    return !g->done;
}

/* Every target forward of a generation goes through here, to track the longest step. */
static int eval(gen_state *g, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
                size_t errlen) {
    int rc = ls_session_eval(g->s, tokens, n, logits_from, logits, err, errlen);
    double ms = ls_session_last_step_ms(g->s);
    if (ms > g->st->max_step_ms) g->st->max_step_ms = ms;
    return rc;
}

static bool cancelled(gen_state *g) {
    if (!g->gp->cancelled || !g->gp->cancelled(g->ud)) return false;
    g->st->stop_reason = "cancelled";
    g->done = true;
    return true;
}

/* Chunks of n_batch rows; cancellation is checked between chunks, so a client that leaves
 * during a long prompt frees its slot after at most one chunk. */
static int prefill(gen_state *g, const int32_t *tokens, int32_t n, float *logits, char *err, size_t errlen) {
    int32_t nb = ls_session_n_batch(g->s);
    for (int32_t i = 0; i < n; i += nb) {
        if (cancelled(g)) return LS_OK;
        int32_t m = n - i < nb ? n - i : nb;
        bool last = i + m == n;
        int rc = eval(g, tokens + i, m, last ? m - 1 : m, last ? logits : NULL, err, errlen);
        if (rc != LS_OK) return rc;
    }
    return LS_OK;
}

static int classic_loop(gen_state *g, float *logits, int32_t pos, char *err, size_t errlen) {
    for (;;) {
        const ls_sampling *sp = constrain(g, logits);
        int32_t tok = ls_sampler_sample(&g->s->sampler, sp, logits, g->hist, pos);
        if (!emit(g, pos, tok, logits) || cancelled(g)) return LS_OK;
        int rc = eval(g, &tok, 1, 0, logits, err, errlen);
        if (rc != LS_OK) return rc;
        pos++;
    }
}

/* The target's choice for block row j (position pos) given draft d (or -1 after the last
 * draft). Exact mode: the classic sampler, so the token equals classic decoding's.
 * Rejection mode: accept d with probability p(d), else draw from p without d. */
static int32_t choose(gen_state *g, float *row, int32_t pos, int32_t draft) {
    const ls_sampling *sp = constrain(g, row);
    ls_sampler *sm = &g->s->sampler;
    if (g->gp->spec_sampling == LS_SPEC_EXACT || draft < 0 || sp->temperature <= 0)
        return ls_sampler_sample(sm, sp, row, g->hist, pos);
    const ls_cand *c;
    int32_t greedy;
    int32_t n = ls_sampler_dist(sm, sp, row, g->hist, pos, &c, &greedy);
    if (n == 0) return greedy;
    float pd = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].id == draft) pd = c[i].p;
    return ls_uniform(sp->seed, pos, 1) < pd ? draft : ls_cand_draw(c, n, ls_uniform(sp->seed, pos, 2), draft);
}

static int spec_loop(gen_state *g, float *logits_buf, int32_t pos, char *err, size_t errlen) {
    const ls_gen_params *gp = g->gp;
    ls_gen_stats *st = g->st;
    int32_t kmax = g->kmax;
    ls_adapt ad;
    ls_adapt_init(&ad, kmax);
    int32_t drafts[LS_SPEC_MAX_BLOCK], block[LS_SPEC_MAX_BLOCK];
    /* First token after prefill: the classic sampler (the bonus). */
    int32_t tok = ls_sampler_sample(&g->s->sampler, constrain(g, logits_buf), logits_buf, g->hist, pos);
    if (!emit(g, pos, tok, logits_buf)) return LS_OK;
    int32_t n = pos + 1; /* hist[0..n): the last entry is the bonus, not yet run */
    for (;;) {
        if (cancelled(g)) return LS_OK;
        int32_t k = gp->adaptive ? ls_adapt_choose(&ad) : kmax;
        int32_t maxd = k - 1;
        int32_t remaining = g->budget - st->n_generated;
        if (maxd > remaining - 1) maxd = remaining - 1;
        if (maxd > g->n_ctx - n) maxd = g->n_ctx - n;
        if (maxd < 0) maxd = 0;
        double t0 = ls_now_ms();
        int32_t nd = maxd > 0 ? gp->drafter->ops->propose(gp->drafter, g->s, g->hist, n, maxd, &gp->sampling,
                                                          gp->spec_sampling == LS_SPEC_REJECTION, drafts)
                              : 0;
        double t1 = ls_now_ms();
        block[0] = g->hist[n - 1];
        memcpy(block + 1, drafts, sizeof(int32_t) * (size_t)nd);
        int rc = eval(g, block, nd + 1, 0, logits_buf, err, errlen);
        if (rc != LS_OK) return rc;
        /* checked: drafts accepted or rejected (a mismatch rejects its draft and the ones
         * after it). Drafts after the point where generation ended (EOS, budget, context, the
         * callback) are neither: they were never checked. */
        int32_t emitted = 0, accepted = 0, checked = nd;
        bool ended = false;
        for (int32_t j = 0; j <= nd; j++) {
            float *row = logits_buf + (int64_t)j * g->n_vocab;
            int32_t c = choose(g, row, n + j, j < nd ? drafts[j] : -1);
            bool hit = j < nd && c == drafts[j];
            int32_t before = st->n_generated;
            /* Row j chose c; the rows after a rejected draft are never looked at. */
            emit(g, n + j, c, row);
            emitted += st->n_generated > before; /* an EOS that ends generation is not emitted */
            if (hit) {
                accepted++;
                st->accepted_at[j]++;
            }
            if (g->done) { /* EOS, budget, context or the callback */
                ended = true;
                if (j + 1 < nd) checked = j + 1;
                break;
            }
            if (!hit) break;
        }
        double t2 = ls_now_ms(); /* verify = the block forward + choosing its tokens */
        /* Roll the target back to the last emitted token (it is the next bonus): the cache
         * then holds the bonus and the accepted drafts, all equal to the history. Also when
         * generation ended, so the cache never holds a rejected draft (prefix reuse relies
         * on the cache matching prompt + emitted tokens). */
        int32_t new_n = n + emitted;
        if (ls_session_truncate(g->s, n + accepted) != LS_OK) {
            snprintf(err, errlen, "speculative: rollback to %d failed", n + accepted);
            return LS_ERR;
        }
        if (!ended) gp->drafter->ops->rollback(gp->drafter, new_n - 1);
        double t3 = ls_now_ms();
        st->rounds++;
        st->emitted += emitted;
        if (nd == 0) {
            st->plain_steps++;
            st->adaptive_plain_steps += k == 1;
        } else {
            st->verify_rounds++;
            st->proposed += nd;
            st->checked += checked;
            st->accepted += accepted;
            for (int32_t j = 0; j < checked; j++) st->proposed_at[j]++;
            if (accepted == 0)
                st->zero_accept_rounds++;
            else if (accepted == checked)
                st->full_accept_rounds++;
            else
                st->partial_accept_rounds++;
        }
        st->draft_ms += t1 - t0;
        st->verify_ms += t2 - t1;
        st->rollback_ms += t3 - t2;
        if (gp->adaptive) ls_adapt_observe(&ad, nd + 1, accepted, t3 - t0);
        st->final_block_size = k;
        if (ended || g->done) return LS_OK;
        n = new_n;
    }
}

/* The grammar's scratch: the vocabulary trie (built once per model), the allowed-token
 * array and the walk's states. */
static int grammar_setup(gen_state *g, char *err, size_t errlen) {
    g->gr = g->gp->grammar;
    if (!g->gr) return LS_OK;
    g->gv = ls_gvocab_of_model(g->m);
    if (g->gv) {
        /* Sized for both the rows and the tokenizer: entries past the tokenizer stay 0 (never allowed). */
        int32_t nv = ls_gvocab_n_vocab(g->gv);
        g->allow = calloc((size_t)(nv > g->n_vocab ? nv : g->n_vocab), 1);
        g->walk = malloc(sizeof(ls_gstate) * (size_t)(ls_gvocab_max_len(g->gv) + 1));
    }
    if (!g->gv || !g->allow || !g->walk) {
        snprintf(err, errlen, "out of memory for the grammar's token mask");
        return LS_ERR_NOMEM;
    }
    ls_gstate_init(g->gr, &g->gs);
    return LS_OK;
}

int ls_generate(ls_session *s, const int32_t *prompt, int32_t n_prompt, const ls_gen_params *gp, ls_text_cb cb,
                void *ud, ls_gen_stats *stats, char *err, size_t errlen) {
    ls_gen_stats st;
    memset(&st, 0, sizeof st);
    st.n_prompt = n_prompt;
    st.stop_reason = "length";
    int32_t n_ctx = ls_session_n_ctx(s), n_vocab = ls_session_n_vocab(s);
    if (n_prompt <= 0) {
        snprintf(err, errlen, "empty prompt");
        return LS_ERR_ARG;
    }
    if (n_prompt >= n_ctx) {
        snprintf(err, errlen, "prompt of %d tokens does not fit the context of %d", n_prompt, n_ctx);
        return LS_ERR_CONTEXT;
    }
    if (gp->on_logprobs && (gp->n_top_logprobs < 0 || gp->n_top_logprobs > LS_MAX_TOP_LOGPROBS)) {
        snprintf(err, errlen, "top logprobs %d out of range [0, %d]", gp->n_top_logprobs, LS_MAX_TOP_LOGPROBS);
        return LS_ERR_ARG;
    }
    bool spec = gp->drafter != NULL;
    if (spec && (gp->block_size < 2 || gp->block_size > LS_SPEC_MAX_BLOCK)) {
        snprintf(err, errlen, "draft block size %d out of range [2, %d]", gp->block_size, LS_SPEC_MAX_BLOCK);
        return LS_ERR_ARG;
    }
    /* A verify block is K rows (the bonus and up to K-1 drafts) in one forward: it must fit
     * the session batch. A smaller batch caps K (classic decoding runs there too); a batch of
     * one row leaves no room for a draft. Said once per process, and in the stats. */
    int32_t kmax = spec ? gp->block_size : 0, nb = ls_session_n_batch(s);
    if (spec && kmax > nb) {
        st.block_size_requested = kmax;
        if (nb < 2) {
            LS_LOG_ONCE(LS_LOG_WARN, "speculation off: the session batch (%d row) has no room for a draft", nb);
            st.spec_declined = "session batch of 1 row";
            spec = false;
        } else {
            LS_LOG_ONCE(LS_LOG_WARN, "draft block size %d capped to the session batch %d", kmax, nb);
        }
        kmax = nb;
    }
    if (spec && !gp->skip_probe) {
        double tp = ls_now_ms();
        ls_probe_result pr;
        ls_probe_run_cached(s, ls_drafter_name(gp->drafter), kmax, &pr);
        st.probe_ms = ls_now_ms() - tp;
        if (!pr.passed) {
            if (gp->allow_inexact) {
                /* Once per process at WARN (a server would repeat it per request), then DEBUG. */
                LS_LOG_ONCE(LS_LOG_WARN,
                            "exactness probe FAILED but --allow-inexact keeps speculation on: output may differ "
                            "from classic decoding. %s",
                            pr.message);
            } else {
                LS_LOG_ONCE(LS_LOG_WARN, "speculation declined, serving classic decoding: %s", pr.message);
                st.spec_declined = "exactness probe failed";
                spec = false;
            }
        }
    }
    int32_t budget = gp->n_predict < 0 ? n_ctx - n_prompt : gp->n_predict;
    int32_t rows = spec ? kmax : 1;
    int32_t *hist = malloc(sizeof(int32_t) * (size_t)n_ctx);
    float *logits = ls_session_logits_buffer(s, rows); /* page-locked on a GPU: K rows come back every round */
    if (!hist || !logits) {
        free(hist);
        snprintf(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    memcpy(hist, prompt, sizeof(int32_t) * (size_t)n_prompt);
    gen_state g = {.s = s,
                   .m = ls_session_model(s),
                   .gp = gp,
                   .hist = hist,
                   .n_ctx = n_ctx,
                   .n_vocab = n_vocab,
                   .budget = budget,
                   .cb = cb,
                   .ud = ud,
                   .st = &st,
                   .kmax = kmax};
    if (grammar_setup(&g, err, errlen) != LS_OK) {
        free(g.allow);
        free(g.walk);
        free(hist);
        return LS_ERR_NOMEM;
    }
    double t0 = ls_now_ms();
    /* Keep a reused prefix if the cache can resume after it; the last prompt token always
     * runs (its logits choose the first token). */
    int32_t keep = gp->n_reuse < n_prompt - 1 ? gp->n_reuse : n_prompt - 1;
    if (keep < 0 || keep > ls_session_pos(s)) keep = 0;
    int rc = ls_session_truncate(s, keep);
    if (rc != LS_OK) {
        keep = 0;
        rc = ls_session_truncate(s, 0);
    }
    st.n_prompt_cached = keep;
    if (spec) gp->drafter->ops->rollback(gp->drafter, 0);
    if (rc == LS_OK) rc = prefill(&g, prompt + keep, n_prompt - keep, logits, err, errlen);
    double t1 = ls_now_ms();
    st.prefill_ms = t1 - t0;
    st.speculative = spec;
    st.block_size = spec ? kmax : 0;
    if (rc == LS_OK && budget > 0 && !g.done)
        rc = spec ? spec_loop(&g, logits, n_prompt, err, errlen) : classic_loop(&g, logits, n_prompt, err, errlen);
    char text[64];
    int n = ls_detok_finish(&g.dt, text, sizeof text);
    if (n > 0 && cb) cb(text, (size_t)n, ud);
    st.decode_ms = ls_now_ms() - t1;
    ls_session_idle(s);
    if (stats) *stats = st;
    free(g.allow);
    free(g.walk);
    free(hist);
    return rc;
}
