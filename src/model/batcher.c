/* The batcher: one forward per step for every session that has work.
 *
 * Sessions attached to a batcher keep their own thread of control (sampling, drafting,
 * streaming) and call ls_session_eval as usual; the call queues the session's rows and
 * waits. The batcher thread gathers the queued requests of all sessions into one step and
 * runs a single forward over their concatenated rows: every weight matrix is read once
 * for all of them, KV writes and attention go to each session's own cache. The kernels
 * are batch-invariant, so each request's logits are bit-identical to a forward of its rows
 * alone, and a request's output never depends on what else the server is doing.
 *
 * Gathering: after a step, the sessions it served usually come straight back with their
 * next rows (a decode token, a verify block, the next prefill chunk). The batcher waits for
 * them for a short while (half the last step's time, at most 10 ms) unless they declared
 * themselves idle (ls_session_idle, called when a generation ends), then takes queued
 * requests first-fit in arrival order within the row budgets. A long prompt arrives in
 * chunks of the session's n_batch rows, so it shares steps with the decode rows of the
 * other sessions instead of stalling them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/threads.h"
#include "model/session.h"

typedef struct breq {
    ls_fwd_seg seg;
    int rc;
    bool done;
    double step_ms;
    char err[256];
    struct breq *next;
} breq;

struct ls_batcher {
    ls_model *m;
    ls_backend *be;
    const ls_device_kind *kind;
    ls_workspace ws;
    int32_t max_rows, max_logit_rows, n_ctx;
    pthread_t th;
    bool started, stop;
    bool hold; /* tests: take nothing until released (ls_batcher_hold) */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    breq *head;
    ls_session *last[LS_MAX_SEGS]; /* sessions served by the last step */
    int n_last;
    double last_step_ms;
    ls_batcher_stats st;
};

static bool queued(const ls_batcher *b, const ls_session *s) {
    for (const breq *r = b->head; r; r = r->next)
        if (r->seg.s == s) return true;
    return false;
}

static bool all_back(const ls_batcher *b) {
    for (int i = 0; i < b->n_last; i++)
        if (!b->last[i]->batch_idle && !queued(b, b->last[i])) return false;
    return true;
}

static int32_t logit_rows(const ls_fwd_seg *g) {
    if (!g->logits || g->logits_from >= g->n) return 0;
    return g->n - (g->logits_from < 0 ? 0 : g->logits_from);
}

/* Unlink up to LS_MAX_SEGS requests, first-fit in arrival order within the budgets (the
 * oldest request always fits: each is at most one session's n_batch rows). */
static int take(ls_batcher *b, breq **out) {
    int n = 0;
    int32_t rows = 0, lrows = 0;
    breq **pp = &b->head;
    while (*pp && n < LS_MAX_SEGS) {
        breq *r = *pp;
        int32_t lr = logit_rows(&r->seg);
        bool fits = rows + r->seg.n <= b->max_rows && lrows + lr <= b->max_logit_rows;
        if (n == 0 || fits) {
            *pp = r->next;
            out[n++] = r;
            rows += r->seg.n;
            lrows += lr;
        } else {
            pp = &r->next;
        }
    }
    return n;
}

static void *batcher_main(void *arg) {
    ls_batcher *b = arg;
    breq *batch[LS_MAX_SEGS];
    ls_fwd_seg segs[LS_MAX_SEGS];
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while ((!b->head || b->hold) && !b->stop) pthread_cond_wait(&b->cv_work, &b->mu);
        if (!b->head) break; /* stopping and nothing queued */
        double wait = b->last_step_ms * 0.5;
        if (wait > 10) wait = 10;
        double deadline = ls_now_ms() + wait;
        while (!b->stop && !all_back(b)) {
            double left = deadline - ls_now_ms();
            if (left <= 0) break;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            long ns = ts.tv_nsec + (long)(left * 1e6);
            ts.tv_sec += ns / 1000000000L;
            ts.tv_nsec = ns % 1000000000L;
            pthread_cond_timedwait(&b->cv_work, &b->mu, &ts);
        }
        int n = take(b, batch);
        pthread_mutex_unlock(&b->mu);

        /* Check each request on its own: a bad one fails alone. */
        int ns = 0;
        int32_t rows = 0;
        for (int i = 0; i < n; i++) {
            batch[i]->rc = ls_fwd_prepare(&batch[i]->seg, b->max_rows, batch[i]->err, sizeof batch[i]->err);
            if (batch[i]->rc == LS_OK) {
                segs[ns++] = batch[i]->seg;
                rows += batch[i]->seg.n;
            }
        }
        double t0 = ls_now_ms();
        if (ns > 0) ls_gemma_forward(b->be, &b->ws, segs, ns);
        double dt = ls_now_ms() - t0;

        pthread_mutex_lock(&b->mu);
        b->n_last = 0;
        for (int i = 0; i < n; i++) {
            batch[i]->step_ms = dt;
            batch[i]->done = true;
            if (batch[i]->rc == LS_OK) b->last[b->n_last++] = batch[i]->seg.s;
        }
        if (ns > 0) {
            b->last_step_ms = dt;
            b->st.steps++;
            b->st.rows += (uint64_t)rows;
            b->st.segments += (uint64_t)ns;
            b->st.busy_ms += dt;
            if (ns > b->st.max_segments) b->st.max_segments = ns;
        }
        pthread_cond_broadcast(&b->cv_done);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int ls_batcher_eval(ls_batcher *b, ls_fwd_seg *seg, char *err, size_t errlen) {
    breq r = {.seg = *seg};
    pthread_mutex_lock(&b->mu);
    if (b->stop) {
        pthread_mutex_unlock(&b->mu);
        snprintf(err, errlen, "eval: the batcher is shutting down");
        return LS_ERR;
    }
    seg->s->batch_idle = false;
    breq **pp = &b->head;
    while (*pp) pp = &(*pp)->next;
    *pp = &r;
    pthread_cond_signal(&b->cv_work);
    while (!r.done) pthread_cond_wait(&b->cv_done, &b->mu);
    pthread_mutex_unlock(&b->mu);
    seg->s->last_step_ms = r.rc == LS_OK ? r.step_ms : 0;
    if (r.rc != LS_OK) snprintf(err, errlen, "%s", r.err);
    return r.rc;
}

void ls_batcher_idle(ls_batcher *b, ls_session *s) {
    pthread_mutex_lock(&b->mu);
    s->batch_idle = true;
    pthread_cond_signal(&b->cv_work);
    pthread_mutex_unlock(&b->mu);
}

void ls_batcher_hold(ls_batcher *b, bool on) {
    pthread_mutex_lock(&b->mu);
    b->hold = on;
    pthread_cond_signal(&b->cv_work);
    pthread_mutex_unlock(&b->mu);
}

int ls_batcher_n_queued(ls_batcher *b) {
    pthread_mutex_lock(&b->mu);
    int n = 0;
    for (const breq *r = b->head; r; r = r->next) n++;
    pthread_mutex_unlock(&b->mu);
    return n;
}

ls_batcher_params ls_batcher_default_params(void) {
    ls_batcher_params p = {.n_threads = 0, .max_rows = 0, .max_logit_rows = 0, .n_ctx = 0}; /* 0: automatic */
    return p;
}

int ls_batcher_create(ls_model *m, const ls_batcher_params *p, ls_batcher **out, char *err, size_t errlen) {
    *out = NULL;
    ls_batcher_params dp = ls_batcher_default_params();
    if (!p) p = &dp;
    const ls_config *c = &m->cfg;
    int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx : c->n_ctx_train;
    int32_t rows = p->max_rows > 0 ? p->max_rows : 256;
    int32_t lrows = p->max_logit_rows > 0 ? p->max_logit_rows : rows < 64 ? rows : 64;
    int32_t threads = p->n_threads > 0 ? p->n_threads : ls_cpu_count();
    if (rows > 65536 || lrows > rows) {
        snprintf(err, errlen, "batcher: max_rows %d / max_logit_rows %d out of range", rows, lrows);
        return LS_ERR_ARG;
    }
    const ls_device_kind *kind = ls_model_kind_for(m, p->device, err, errlen);
    if (!kind) return LS_ERR_ARG;
    ls_backend_params bp = {
        .n_threads = threads, .max_rows = rows, .max_cols = ls_model_max_cols(m), .max_keys = n_ctx};
    ls_batcher *b = calloc(1, sizeof *b);
    if (b) b->be = kind->create(&bp);
    if (!b || !b->be || ls_workspace_init(&b->ws, b->be, m, rows, lrows) != 0) {
        snprintf(err, errlen, "batcher: out of memory (%.1f MiB of activations)",
                 ls_workspace_bytes(m, rows, lrows) / 1048576.0);
        if (b) ls_workspace_free(&b->ws);
        if (b && b->be) b->be->ops->free(b->be);
        free(b);
        return LS_ERR_NOMEM;
    }
    b->m = m;
    b->max_rows = rows;
    b->max_logit_rows = lrows;
    b->n_ctx = n_ctx;
    b->kind = kind;
    pthread_mutex_init(&b->mu, NULL);
    /* The gather wait is timed on the monotonic clock: a wall-clock step must not stall it. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv_work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&b->cv_done, NULL);
    if (!b->be || pthread_create(&b->th, NULL, batcher_main, b) != 0) {
        snprintf(err, errlen, "batcher: cannot start its backend or thread");
        ls_batcher_free(b);
        return LS_ERR;
    }
    b->started = true;
    *out = b;
    return LS_OK;
}

void ls_batcher_free(ls_batcher *b) {
    if (!b) return;
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->stop = true;
        pthread_cond_broadcast(&b->cv_work);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->th, NULL);
    }
    pthread_cond_destroy(&b->cv_work);
    pthread_cond_destroy(&b->cv_done);
    pthread_mutex_destroy(&b->mu);
    ls_workspace_free(&b->ws);
    if (b->be) b->be->ops->free(b->be);
    free(b);
}

int ls_session_attach(ls_session *s, ls_batcher *b, char *err, size_t errlen) {
    if (s->batcher) { /* detach: forget it in the previous step's set */
        ls_batcher *old = s->batcher;
        pthread_mutex_lock(&old->mu);
        for (int i = 0; i < old->n_last; i++)
            if (old->last[i] == s) old->last[i--] = old->last[--old->n_last];
        pthread_mutex_unlock(&old->mu);
        s->batcher = NULL;
    }
    if (!b) return LS_OK;
    if (s->tp) {
        snprintf(
            err, errlen,
            "attach: a tensor-parallel session cannot join a batcher yet (docs/design.md, \"Tensor parallelism\")");
        return LS_ERR_ARG;
    }
    if (b->m != s->model || s->n_ctx > b->n_ctx || s->n_batch > b->max_rows || s->kind != b->kind) {
        snprintf(err, errlen,
                 "attach: the session (context %d, batch %d, %s) does not fit the batcher (context %d, %d rows, %s) or "
                 "uses another model",
                 s->n_ctx, s->n_batch, s->kind->name, b->n_ctx, b->max_rows, b->kind->name);
        return LS_ERR_ARG;
    }
    s->batcher = b;
    s->batch_idle = true;
    return LS_OK;
}

void ls_session_idle(ls_session *s) {
    if (s->batcher) ls_batcher_idle(s->batcher, s);
}

void ls_batcher_get_stats(ls_batcher *b, ls_batcher_stats *st) {
    pthread_mutex_lock(&b->mu);
    *st = b->st;
    pthread_mutex_unlock(&b->mu);
}
