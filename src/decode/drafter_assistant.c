/* Gemma 4 assistant drafter (docs/gemma.md 5.4-5.6). It keeps no state between rounds: each
 * propose reads, from the target session,
 *   - hprev: the target's final-normed hidden row at position P-1 (ls_session_hidden; the
 *     last eval with logits covered it: the prefill's last row, or row `accepted` of the
 *     verify block), P = n-1 being the bonus token's position;
 *   - K/V: the caches of the target's last non-shared sliding and full layers
 *     (ls_session_kv_source), of which the drafter reads positions < P only (rejected rows
 *     beyond are never seen);
 *   - token embeddings: the target's table times its embedding scale.
 * Step 1 feeds (bonus, hprev), step k feeds (d_{k-1}, hnext_{k-1}), all at position P. Each
 * draft is chosen with the target's sampler at its absolute position (greedy when asked),
 * like the draft-model drafter (its sampler scratch is the drafter's own, sized at
 * creation). The loop itself is ls_assistant_draft (model/assistant_step.c), which the reference
 * tests run too. Anything unusable (no hidden row for P-1, a cache not covering the window)
 * makes it propose nothing rather than fail the generation; a step that fails says why in
 * the log (once at WARN, then at DEBUG). */
#include "lockstep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "decode/drafter.h"
#include "decode/sampler.h"
#include "format/hf_config.h"
#include "kernels/host_buffer.h"
#include "model/assistant.h"
#include "model/model.h"
#include "model/session.h"

/* The drafter runs on the target's device (it reads the target's K/V and hidden rows
 * there, into the assistant's scratch in that backend's memory); logits and hist are host
 * memory. */
typedef struct {
    ls_assistant *a;
    const ls_device_kind *kind;
    bool mapped;
    ls_backend *be;
    const ls_model *target;
    int32_t vocab, bb, n_ctx;
    float *logits;      /* [vocab] */
    int32_t *hist;      /* [n_ctx] history + drafts, for the sampler's penalties */
    ls_sampler sampler; /* scratch for choosing drafts */
} asst_impl;

/* Each draft: the target's sampler at the draft's absolute position, over the history plus
 * the drafts so far. */
typedef struct {
    asst_impl *ai;
    const ls_sampling *sp;
    int32_t n; /* history length: draft j is at position n + j */
} choose_ctx;

static int32_t asst_choose(void *ud, int32_t step, const float *logits, const float *hnext) {
    (void)hnext;
    choose_ctx *c = ud;
    int32_t pos = c->n + step;
    int32_t tok = ls_sampler_sample(&c->ai->sampler, c->sp, logits, c->ai->hist, pos);
    c->ai->hist[pos] = tok;
    return tok;
}

static void kv_view(const ls_kv_layer *c, int32_t n_kv, int32_t hd, ls_asst_kv *v) {
    v->k = c->k;
    v->v = c->v;
    v->f32 = c->f32;
    v->n_kv = n_kv;
    v->head_dim = hd;
    v->first_pos = c->first_pos;
    v->n_slots = c->n;
}

static int32_t asst_propose(ls_drafter *d, ls_session *target, const int32_t *hist, int32_t n, int32_t max,
                            const ls_sampling *sp, bool greedy, int32_t *out) {
    asst_impl *ai = d->impl;
    int32_t P = n - 1;
    if (max <= 0 || P < 1 || n > ai->n_ctx || target->model != ai->target) return 0;
    if (n + max > ai->n_ctx) max = ai->n_ctx - n;
    if (max <= 0) return 0;
    /* hprev = the target's final-normed hidden state at P-1 */
    const float *hprev = ls_session_hidden(target, (P - 1) - target->hidden_pos0);
    if (!hprev || ls_session_pos(target) < P) return 0;
    const ls_kv_layer *cs = NULL, *cf = NULL;
    int32_t nkv_s = 0, hd_s = 0, nkv_f = 0, hd_f = 0;
    ls_asst_kv vs = {0}, vf = {0};
    if (ls_session_kv_source(target, true, &cs, &nkv_s, &hd_s) >= 0) kv_view(cs, nkv_s, hd_s, &vs);
    if (ls_session_kv_source(target, false, &cf, &nkv_f, &hd_f) >= 0) kv_view(cf, nkv_f, hd_f, &vf);
    ls_sampling g = *sp;
    if (greedy) g.temperature = 0;
    memcpy(ai->hist, hist, sizeof(int32_t) * (size_t)n);
    ls_asst_embd e = {&ai->target->tok_embd, ai->target->cfg.embd_scale};
    choose_ctx cc = {ai, &g, n};
    int32_t cnt = ls_assistant_draft(ai->a, ai->be, &e, hist[n - 1], hprev, P, cs ? &vs : NULL, cf ? &vf : NULL, max,
                                     asst_choose, &cc, ai->logits, out);
    if (cnt < 0) {
        LS_LOG_ONCE(LS_LOG_WARN, "assistant drafter: no drafts this round: %s", ls_assistant_error(ai->a));
        return 0;
    }
    return cnt;
}

static void asst_rollback(ls_drafter *d, int32_t n) {
    (void)d; /* no state of its own: everything is read from the target per round */
    (void)n;
}

static int map_range(void *ud, const void *base, size_t bytes) {
    const ls_device_kind *k = ud;
    char err[256];
    if (k->map_const(base, bytes, err, sizeof err) != 0) {
        LS_ERROR("assistant drafter: %s", err);
        return -1;
    }
    return 0;
}

static int unmap_range(void *ud, const void *base, size_t bytes) {
    (void)bytes;
    ((const ls_device_kind *)ud)->unmap_const(base);
    return 0;
}

static void asst_free(ls_drafter *d) {
    if (!d) return;
    asst_impl *ai = d->impl;
    if (ai) {
        if (ai->a && ai->mapped) ls_assistant_for_each_range(ai->a, unmap_range, (void *)ai->kind);
        ls_assistant_free(ai->a); /* frees its scratch with ai->be: before the backend */
        if (ai->be) ai->be->ops->free(ai->be);
        ls_host_buffer_free(ai->logits); /* needs no backend */
        free(ai->hist);
        ls_sampler_free(&ai->sampler);
        free(ai);
    }
    free(d);
}

static const ls_drafter_ops asst_ops = {
    .name = "assistant", .propose = asst_propose, .rollback = asst_rollback, .free = asst_free};

/* The geometry the drafter reads: the target's last non-shared layer of each type. */
static void target_geom(const ls_model *m, ls_asst_target_geom *g) {
    memset(g, 0, sizeof *g);
    g->hidden = m->cfg.n_embd;
    g->vocab = m->cfg.n_vocab;
    g->sliding_window = m->cfg.sliding_window;
    for (int32_t i = 0; i < m->cfg.n_layer; i++) {
        const ls_layer *l = &m->layers[i];
        if (l->kv_src != i) continue;
        if (l->sliding) {
            g->head_dim_sliding = l->head_dim;
            g->kv_heads_sliding = l->n_kv;
        } else {
            g->head_dim_full = l->head_dim;
            g->kv_heads_full = l->n_kv;
        }
    }
}

int ls_drafter_assistant_create(const char *dir, const ls_model *target, int32_t n_ctx, int32_t n_threads,
                                ls_drafter **out, char *err, size_t errlen) {
    *out = NULL;
    if (target->cfg.family != LS_FAMILY_GEMMA4) {
        snprintf(err, errlen, "the Gemma 4 assistant drafts only for Gemma 4 targets (target '%s' is not)",
                 target->name);
        return LS_ERR_ARG;
    }
    if (n_ctx <= 0) n_ctx = target->cfg.n_ctx_train;
    ls_drafter *d = calloc(1, sizeof *d);
    asst_impl *ai = calloc(1, sizeof *ai);
    if (!d || !ai) {
        free(d);
        free(ai);
        snprintf(err, errlen, "out of memory creating the assistant drafter");
        return LS_ERR_NOMEM;
    }
    d->ops = &asst_ops;
    d->impl = ai;
    ai->target = target;
    ai->n_ctx = n_ctx;
    if (ls_assistant_load(dir, &ai->a, err, errlen) != 0) {
        asst_free(d);
        return LS_ERR_ARG;
    }
    ls_asst_target_geom g;
    target_geom(target, &g);
    if (ls_assistant_check_target(ai->a, &g, err, errlen) != 0) {
        asst_free(d);
        return LS_ERR_ARG;
    }
    ls_assistant_info inf;
    ls_assistant_get_info(ai->a, &inf);
    ai->vocab = inf.vocab;
    ai->bb = inf.backbone;
    ai->kind = ls_model_kind_for((ls_model *)target, NULL, err, errlen);
    if (!ai->kind) {
        asst_free(d);
        return LS_ERR_ARG;
    }
    if (ls_assistant_for_each_range(ai->a, map_range, (void *)ai->kind) != 0) {
        ls_assistant_for_each_range(ai->a, unmap_range, (void *)ai->kind);
        asst_free(d);
        snprintf(err, errlen, "out of %s memory for the assistant's weights", ai->kind->name);
        return LS_ERR_NOMEM;
    }
    ai->mapped = true;
    ls_backend_params bp = {.n_threads = n_threads > 0 ? n_threads : 1,
                            .max_rows = 1,
                            .max_cols = ls_assistant_max_cols(ai->a),
                            .max_keys = n_ctx};
    ai->be = ai->kind->create(&bp);
    ai->logits = ai->be ? ls_host_buffer_alloc(ai->be, sizeof(float) * (size_t)ai->vocab) : NULL;
    ai->hist = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!ai->be || !ai->logits || !ai->hist) {
        asst_free(d);
        snprintf(err, errlen, "out of memory creating the assistant drafter");
        return LS_ERR_NOMEM;
    }
    int rc = ls_sampler_init(&ai->sampler, ai->vocab, err, errlen);
    if (rc != LS_OK) {
        asst_free(d);
        return rc;
    }
    *out = d;
    return LS_OK;
}

bool ls_is_assistant_checkpoint(const char *path) {
    ls_hf_config cfg;
    char err[256];
    if (ls_hf_config_load(path, &cfg, err, sizeof err) != 0) return false;
    bool yes = cfg.arch == LS_ARCH_GEMMA4_ASSISTANT;
    ls_hf_config_free(&cfg);
    return yes;
}
