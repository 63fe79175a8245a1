/* Tensor-parallel sessions (model/tp.h; docs/design.md, "Tensor parallelism"): a facade
 * session whose evals run the forward of every rank at once, one thread per rank, each over
 * its own shard model, backend instance and KV cache, the ranks meeting in the exact
 * all-reduce. Process model: one process, one thread per rank; on "cpu" ranks are CPU
 * backend instances (host collective), on "cuda" CUDA instances on devices 0..N-1 (NCCL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/threads.h"
#include "model/session.h"
#include "model/tp.h"

static ls_collective *make_collective(ls_tp_group *g, const ls_device_kind *kind, int64_t max_elems,
                                      ls_reduce_mode mode, char *err, size_t errlen) {
    if (strcmp(kind->name, "cpu") == 0) {
        ls_collective *c = ls_collective_host_create(g->n, max_elems, mode);
        if (!c)
            snprintf(err, errlen, "--tensor-parallel %d: out of memory for the collective", g->n);
        else
            LS_INFO("tensor parallel: %d rank(s) as CPU threads, %s all-reduce", g->n,
                    mode == LS_REDUCE_EXACT ? "exact (all-gather + rank-order sum)" : "plain (ring order)");
        return c;
    }
#ifdef LS_HAVE_CUDA
    ls_backend *be[LS_MAX_RANKS];
    for (int r = 0; r < g->n; r++) be[r] = g->rank_s[r]->be;
    return ls_collective_nccl_create(g->n, be, max_elems, mode, err, errlen);
#else
    snprintf(err, errlen, "--tensor-parallel on '%s': no collective for this device kind", kind->name);
    return NULL;
#endif
}

/* Rank r's LM head (vocabulary rows [r V/n, (r+1) V/n) of the tied embedding) and its logits
 * buffer. 0 or -1 (out of memory). */
static int rank_head(ls_tp_group *g, const ls_model *m, int r) {
    ls_tp_rank *k = &g->rank[r];
    ls_session *rs = g->rank_s[r];
    int64_t V = m->cfg.n_vocab;
    k->rank = r;
    k->n_ranks = g->n;
    k->coll = g->coll;
    k->v0 = (int64_t)r * V / g->n;
    k->nv = (int64_t)(r + 1) * V / g->n - k->v0;
    k->head = m->tok_embd;
    k->head.data = (const char *)m->tok_embd.data + k->v0 * (int64_t)m->tok_embd.row_bytes;
    k->head.rows = k->nv;
    if (m->tok_embd.type == LS_TYPE_MLX_AFFINE) {
        size_t per_row = (size_t)(m->tok_embd.cols / m->tok_embd.group) * (m->tok_embd.sb_type == LS_TYPE_F32 ? 4 : 2);
        k->head.scales = (const char *)m->tok_embd.scales + k->v0 * (int64_t)per_row;
        k->head.biases = (const char *)m->tok_embd.biases + k->v0 * (int64_t)per_row;
    }
    k->logit_cap = rs->n_batch;
    /* Off the host the rank's workspace already holds [n_batch][V] logits floats: reuse them. */
    k->own_logits = !(rs->ws.logits && rs->ws.logit_cap >= k->logit_cap);
    k->logits = k->own_logits ? rs->be->ops->alloc(rs->be, sizeof(float) * (size_t)k->logit_cap * (size_t)k->nv)
                              : rs->ws.logits;
    if (!k->logits) return -1;
    rs->ws.tp = k;
    return 0;
}

/* The rank sessions, the collective and the heads; LS_OK or an error code with err. */
static int group_init(ls_tp_group *g, ls_model *m, const ls_session_params *p, const ls_device_kind *kind, char *err,
                      size_t errlen) {
    int n = g->n;
    int32_t threads = p->n_threads > 0 ? p->n_threads : ls_cpu_count();
    ls_session_params rp = *p;
    rp.tensor_parallel = 0;
    rp.device = kind->name;
    rp.n_threads = threads / n > 0 ? threads / n : 1;
    for (int r = 0; r < n; r++) {
        if (ls_tp_shard_init(&g->shard[r], m, kind, r, n, err, errlen) != 0) return LS_ERR_NOMEM;
        int rc = ls_session_create(&g->shard[r].m, &rp, &g->rank_s[r], err, errlen);
        if (rc != LS_OK) return rc;
    }
    ls_session *s0 = g->rank_s[0];
    g->coll = make_collective(g, kind, (int64_t)s0->n_batch * m->cfg.n_embd, (ls_reduce_mode)p->tp_reduce, err, errlen);
    if (!g->coll) return LS_ERR_ARG;
    for (int r = 0; r < n; r++)
        if (rank_head(g, m, r) != 0) {
            snprintf(err, errlen, "--tensor-parallel %d: out of memory for the logits of rank %d", n, r);
            return LS_ERR_NOMEM;
        }
    g->pool = ls_pool_create(n);
    if (!g->pool) {
        snprintf(err, errlen, "--tensor-parallel %d: cannot start the rank threads", n);
        return LS_ERR_NOMEM;
    }
    return LS_OK;
}

int ls_tp_session_create(ls_model *m, const ls_session_params *p, const ls_device_kind *kind, ls_session **out,
                         char *err, size_t errlen) {
    int n = p->tensor_parallel;
    *out = NULL;
    if (ls_tp_check(m, n, err, errlen) != 0) return LS_ERR_ARG;
    if (strcmp(kind->name, "cpu") != 0 && n > 1) {
        /* backend_cuda.cu drives device 0 through one process-wide stream: ranks on devices
         * 1..n-1 need the per-device kind of the plan (docs/design.md, "Tensor parallelism"), not built yet. */
        snprintf(err, errlen,
                 "--tensor-parallel %d on %s: only 1 rank (device 0, through NCCL) is supported yet; the per-device "
                 "CUDA kind N > 1 needs is not built (docs/design.md, \"Tensor parallelism\")",
                 n, kind->name);
        return LS_ERR_ARG;
    }
    ls_session *s = calloc(1, sizeof *s);
    ls_tp_group *g = calloc(1, sizeof *g);
    if (!s || !g) {
        free(s);
        free(g);
        snprintf(err, errlen, "out of memory");
        return LS_ERR_NOMEM;
    }
    s->model = m;
    s->kind = kind;
    s->tp = g;
    g->n = n;
    int rc = group_init(g, m, p, kind, err, errlen);
    if (rc == LS_OK) rc = ls_sampler_init(&s->sampler, m->cfg.n_vocab, err, errlen);
    if (rc != LS_OK) {
        ls_session_free(s);
        return rc;
    }
    s->n_ctx = g->rank_s[0]->n_ctx;
    s->n_batch = g->rank_s[0]->n_batch;
    s->n_threads = g->rank_s[0]->n_threads * n;
    *out = s;
    return LS_OK;
}

void ls_tp_group_free(ls_tp_group *g) {
    if (!g) return;
    if (g->coll) g->coll->free(g->coll); /* NCCL: its buffers go back through the rank backends */
    for (int r = 0; r < g->n; r++) {
        ls_session *rs = g->rank_s[r];
        if (rs && g->rank[r].own_logits && g->rank[r].logits) rs->be->ops->release(rs->be, g->rank[r].logits);
        ls_session_free(rs);
        ls_tp_shard_free(&g->shard[r]); /* after the session: its constants stay mapped until then */
    }
    ls_pool_free(g->pool);
    free(g);
}

typedef struct {
    ls_tp_group *g;
    const int32_t *tokens;
    int32_t n, logits_from;
    float *logits;
} tp_job;

static void rank_forward(void *arg, int r, int nth) {
    (void)nth;
    tp_job *j = arg;
    ls_session *rs = j->g->rank_s[r];
    ls_fwd_seg seg = {.s = rs, .tokens = j->tokens, .n = j->n, .logits_from = j->logits_from, .logits = j->logits};
    ls_gemma_forward(rs->be, &rs->ws, &seg, 1);
}

/* The probe's hooks: captures on rank 0 only (every rank holds the same reduced rows, and the
 * logits are whole only here, after the gather); the fault on every rank, so the replicas
 * stay identical. */
static void hooks_to_ranks(ls_session *s) {
    ls_tp_group *g = s->tp;
    for (int r = 0; r < g->n; r++) {
        ls_session *rs = g->rank_s[r];
        rs->capture = r == 0 ? s->capture : NULL;
        rs->capture_ud = s->capture_ud;
        rs->fault_on = s->fault_on && s->fault_stage != LS_STAGE_LM_HEAD;
        rs->fault_layer = s->fault_layer;
        rs->fault_stage = s->fault_stage;
    }
}

static void lm_head_hooks(ls_session *s, int32_t n, int32_t from, float *logits) {
    int32_t rows = n - from;
    int64_t V = s->model->cfg.n_vocab;
    if (s->fault_on && n > 1 && s->fault_layer == -1 && s->fault_stage == LS_STAGE_LM_HEAD) {
        float *x = logits + (int64_t)(rows - 1) * V; /* as gemma_forward.c stage_done_seg does */
        x[0] += 1.0f + (x[0] < 0 ? -x[0] : x[0]);
    }
    if (s->capture) s->capture(s->capture_ud, -1, LS_STAGE_LM_HEAD, logits, rows, V, s->pos + from);
}

int ls_tp_eval(ls_session *s, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
               size_t errlen) {
    ls_tp_group *g = s->tp;
    s->last_step_ms = 0;
    double t0 = ls_now_ms();
    for (int r = 0; r < g->n; r++) {
        ls_fwd_seg seg = {.s = g->rank_s[r], .tokens = tokens, .n = n, .logits_from = logits_from, .logits = logits};
        int rc = ls_fwd_prepare(&seg, g->rank_s[r]->n_batch, err, errlen);
        if (rc != LS_OK) return rc;
    }
    hooks_to_ranks(s);
    tp_job j = {.g = g, .tokens = tokens, .n = n, .logits_from = logits_from, .logits = logits};
    ls_pool_run(g->pool, rank_forward, &j);
    int32_t from = logits_from < 0 ? 0 : logits_from;
    if (logits && from < n && (s->capture || s->fault_on)) lm_head_hooks(s, n, from, logits);
    s->pos = g->rank_s[0]->pos;
    s->last_step_ms = ls_now_ms() - t0;
    return LS_OK;
}

int ls_tp_truncate(ls_session *s, int32_t pos) {
    ls_tp_group *g = s->tp;
    for (int r = 0; r < g->n; r++) {
        int rc = ls_session_truncate(g->rank_s[r], pos);
        if (rc != LS_OK) return rc; /* the ranks' caches are alike: the first refuses or none does */
    }
    s->pos = pos;
    return LS_OK;
}
