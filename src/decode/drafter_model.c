/* Draft-model drafter: a smaller model with the same vocabulary runs its own session.
 * Its KV cache mirrors the history: before proposing, it is rolled back to the longest
 * prefix it shares with the history and the missing tokens are prefilled; each draft token
 * is then chosen by the same sampler the target uses (same seed, same absolute position),
 * which raises acceptance at temperature > 0 without affecting exactness: the target's own
 * choice decides every emitted token. The sampler's scratch is the draft session's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/drafter.h"
#include "decode/sampler.h"
#include "model/session.h"

typedef struct {
    ls_session *s;
    int32_t *seen; /* [n_ctx] tokens the draft session holds, by position */
    float *logits; /* [n_vocab] */
    int32_t n_vocab, n_ctx;
} model_impl;

static int32_t model_propose(ls_drafter *d, ls_session *target, const int32_t *hist, int32_t n, int32_t max,
                             const ls_sampling *sp, bool greedy, int32_t *out) {
    (void)target;
    model_impl *mi = d->impl;
    char err[256];
    if (n + max > mi->n_ctx) max = mi->n_ctx - n;
    if (max <= 0) return 0;
    /* Keep the shared prefix, re-run the rest (chunked by the session's batch size). */
    int32_t have = ls_session_pos(mi->s);
    int32_t common = 0;
    while (common < have && common < n && mi->seen[common] == hist[common]) common++;
    if (common == n) common = n - 1; /* the last token must be run to get its logits */
    if (ls_session_truncate(mi->s, common) != LS_OK) {
        if (ls_session_truncate(mi->s, 0) != LS_OK) return 0;
        common = 0;
    }
    int32_t nb = ls_session_n_batch(mi->s);
    for (int32_t i = common; i < n; i += nb) {
        int32_t m = n - i < nb ? n - i : nb;
        bool last = i + m == n;
        if (ls_session_eval(mi->s, hist + i, m, last ? m - 1 : m, last ? mi->logits : NULL, err, sizeof err) != LS_OK)
            return 0;
        memcpy(mi->seen + i, hist + i, sizeof(int32_t) * (size_t)m);
    }
    ls_sampling g = *sp;
    if (greedy) g.temperature = 0;
    int32_t cnt = 0;
    /* The history plus drafts so far, for penalties: the draft buffer follows hist. */
    int32_t *h = mi->seen; /* seen[0..n) == hist[0..n) now */
    for (;;) {
        int32_t pos = n + cnt;
        int32_t tok = ls_sampler_sample(&mi->s->sampler, &g, mi->logits, h, pos);
        out[cnt++] = tok;
        h[pos] = tok;
        if (cnt == max) break;
        if (ls_session_eval(mi->s, &tok, 1, 0, mi->logits, err, sizeof err) != LS_OK) break;
    }
    return cnt;
}

static void model_rollback(ls_drafter *d, int32_t n) {
    model_impl *mi = d->impl;
    if (ls_session_pos(mi->s) > n) ls_session_truncate(mi->s, n);
}

static void model_free(ls_drafter *d) {
    if (!d) return;
    model_impl *mi = d->impl;
    if (mi) {
        ls_session_free(mi->s);
        free(mi->seen);
        free(mi);
    }
    free(d);
}

static const ls_drafter_ops model_ops = {
    .name = "model", .propose = model_propose, .rollback = model_rollback, .free = model_free};

int ls_drafter_model_create(ls_model *draft, const ls_model *target, int32_t n_ctx, int32_t n_threads, ls_drafter **out,
                            char *err, size_t errlen) {
    *out = NULL;
    ls_model_info di, ti;
    ls_model_get_info(draft, &di);
    ls_model_get_info(target, &ti);
    if (di.n_vocab != ti.n_vocab || !ls_model_same_vocab(draft, target)) {
        snprintf(err, errlen,
                 "draft model vocabulary does not match the target's (%d vs %d tokens, or different token texts); "
                 "a draft model must share the target's tokenizer",
                 di.n_vocab, ti.n_vocab);
        return LS_ERR_ARG;
    }
    ls_drafter *d = calloc(1, sizeof *d);
    model_impl *mi = calloc(1, sizeof *mi);
    if (!d || !mi) goto nomem;
    d->ops = &model_ops;
    d->impl = mi;
    ls_session_params p = ls_session_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = n_threads;
    p.device = ls_model_device(target); /* drafts run where the target runs */
    int rc = ls_session_create(draft, &p, &mi->s, err, errlen);
    if (rc != LS_OK) {
        model_free(d);
        return rc;
    }
    mi->n_ctx = ls_session_n_ctx(mi->s);
    mi->n_vocab = di.n_vocab;
    mi->seen = malloc(sizeof(int32_t) * (size_t)mi->n_ctx);
    mi->logits = ls_session_logits_buffer(mi->s, 1); /* mi->s's: freed with it */
    if (!mi->seen || !mi->logits) goto nomem;
    *out = d;
    return LS_OK;
nomem:
    snprintf(err, errlen, "out of memory creating the draft model drafter");
    if (d)
        model_free(d);
    else
        free(mi);
    return LS_ERR_NOMEM;
}
