/* Session lifecycle: size and allocate the KV cache and every activation buffer up
 * front (with a clear error when it does not fit), run forward passes, roll back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/threads.h"
#include "kernels/host_buffer.h"
#include "model/session.h"
#include "model/tp.h"

ls_session_params ls_session_default_params(void) {
    ls_session_params p = {.n_ctx = 0, .n_threads = 0, .n_batch = 512};
    return p;
}

/* MemAvailable from /proc/meminfo in bytes, or 0 if unknown. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", (unsigned long long *)&kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

static int32_t kv_capacity(const ls_model *m, int layer, int32_t n_ctx, int32_t n_batch) {
    const ls_config *c = &m->cfg;
    if (m->layers[layer].kv_src != layer) return 0; /* KV-shared: reads its source's cache */
    if (!m->layers[layer].sliding) return n_ctx;
    /* window + the largest block one forward appends; never more than the context */
    int64_t cap = (int64_t)c->sliding_window + n_batch;
    return cap < n_ctx ? (int32_t)cap : n_ctx;
}

int ls_session_create(ls_model *m, const ls_session_params *p, ls_session **out, char *err, size_t errlen) {
    *out = NULL;
    const ls_config *c = &m->cfg;
    ls_session_params dp = ls_session_default_params();
    if (!p) p = &dp;
    int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx : c->n_ctx_train;
    int32_t n_threads = p->n_threads > 0 ? p->n_threads : ls_cpu_count();
    int32_t n_batch = p->n_batch > 0 ? p->n_batch : 512;
    if (n_ctx < 1 || n_ctx > (1 << 24)) {
        snprintf(err, errlen, "context length %d out of range", n_ctx);
        return LS_ERR_ARG;
    }
    if (n_threads > 512) n_threads = 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (p->kv_type < 0 || p->kv_type > 2) {
        snprintf(err, errlen, "kv_type %d out of range (0 = model default, 1 = f16, 2 = f32)", p->kv_type);
        return LS_ERR_ARG;
    }
    bool kv_f32 = p->kv_type == 0 ? c->kv_f32 : p->kv_type == 2;
    const ls_device_kind *kind = ls_model_kind_for(m, p->device, err, errlen);
    if (!kind) return LS_ERR_ARG;
    bool on_host = strcmp(kind->name, "cpu") == 0;
    if (p->tensor_parallel < 0 || p->tensor_parallel > LS_MAX_RANKS || p->tp_reduce < 0 || p->tp_reduce > 1) {
        snprintf(err, errlen, "tensor_parallel %d (0..%d) or tp_reduce %d (0..1) out of range", p->tensor_parallel,
                 (int)LS_MAX_RANKS, p->tp_reduce);
        return LS_ERR_ARG;
    }
    /* Tensor parallelism: a facade over rank sessions of shard models (model/tp.h); off (0)
     * leaves everything below as it was. */
    if (p->tensor_parallel > 0) return ls_tp_session_create(m, p, kind, out, err, errlen);

    /* Budget everything before allocating anything. */
    int64_t d = c->n_embd;
    uint64_t kv_bytes = 0;
    for (int i = 0; i < c->n_layer; i++)
        kv_bytes += ls_kv_bytes_t(kv_capacity(m, i, n_ctx, n_batch), m->layers[i].n_kv * m->layers[i].head_dim, kv_f32);
    /* Off the host, the head's rows come back through the workspace: room for a whole batch. */
    int32_t logit_rows = on_host ? 0 : n_batch;
    uint64_t act = ls_workspace_bytes(m, n_batch, logit_rows) + sizeof(float) * (uint64_t)n_batch * (uint64_t)d;
    uint64_t sampler_bytes = (sizeof(float) + sizeof(int32_t) + sizeof(ls_cand)) * (uint64_t)c->n_vocab;
    uint64_t total = kv_bytes + act + sizeof(float) * (uint64_t)n_ctx * (uint64_t)n_threads + sampler_bytes;
    uint64_t avail = on_host ? mem_available() : 0; /* device memory: cudaMalloc says when it is short */
    if (avail && total > avail) {
        snprintf(err, errlen,
                 "session needs %.1f MiB (KV cache %.1f MiB for context %d) but only %.1f MiB are available; "
                 "lower the context with -c",
                 total / 1048576.0, kv_bytes / 1048576.0, n_ctx, avail / 1048576.0);
        return LS_ERR_NOMEM;
    }

    ls_session *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->model = m;
    s->kind = kind;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->n_threads = n_threads;
    ls_backend_params bp = {
        .n_threads = n_threads, .max_rows = n_batch, .max_cols = ls_model_max_cols(m), .max_keys = n_ctx};
    s->be = kind->create(&bp);
    if (!s->be) goto nomem;
    s->kv = calloc((size_t)c->n_layer, sizeof(ls_kv_layer));
    if (!s->kv) goto nomem;
    for (int i = 0; i < c->n_layer; i++) {
        const ls_layer *l = &m->layers[i];
        if (ls_kv_init_be(&s->kv[i], s->be, kv_capacity(m, i, n_ctx, n_batch), l->n_kv * l->head_dim,
                          l->sliding ? c->sliding_window : 0, kv_f32))
            goto nomem;
    }
    if (ls_workspace_init(&s->ws, s->be, m, n_batch, logit_rows) != 0) goto nomem;
    s->hidden = s->be->ops->alloc(s->be, sizeof(float) * (size_t)n_batch * (size_t)d);
    if (!s->hidden) goto nomem;
    int rc = ls_sampler_init(&s->sampler, c->n_vocab, err, errlen);
    if (rc != LS_OK) {
        ls_session_free(s);
        return rc;
    }
    *out = s;
    return LS_OK;
nomem:
    snprintf(err, errlen, "out of memory allocating a session (%.1f MiB, context %d)", total / 1048576.0, n_ctx);
    ls_session_free(s);
    return LS_ERR_NOMEM;
}

void ls_session_free(ls_session *s) {
    if (!s) return;
    if (s->batcher) ls_session_attach(s, NULL, NULL, 0);
    if (s->tp) ls_tp_group_free(s->tp);
    if (s->kv)
        for (int i = 0; i < s->model->cfg.n_layer; i++) ls_kv_free(&s->kv[i]);
    free(s->kv);
    if (s->hidden) s->be->ops->release(s->be, s->hidden);
    ls_workspace_free(&s->ws);
    if (s->be) s->be->ops->free(s->be);
    ls_host_buffer_free(s->h_logits); /* needs no backend */
    ls_sampler_free(&s->sampler);
    free(s);
}

int32_t ls_session_n_ctx(const ls_session *s) {
    return s->n_ctx;
}
int32_t ls_session_pos(const ls_session *s) {
    return s->pos;
}
int32_t ls_session_n_vocab(const ls_session *s) {
    return s->model->cfg.n_vocab;
}
int32_t ls_session_n_batch(const ls_session *s) {
    return s->n_batch;
}
double ls_session_last_step_ms(const ls_session *s) {
    return s->last_step_ms;
}
int32_t ls_session_n_threads(const ls_session *s) {
    return s->n_threads;
}
const char *ls_session_device(const ls_session *s) {
    return s->kind->name;
}

int ls_session_eval(ls_session *s, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
                    size_t errlen) {
    ls_fwd_seg g = {.s = s, .tokens = tokens, .n = n, .logits_from = logits_from, .logits = logits};
    s->last_step_ms = 0; /* a failed eval reports no step */
    if (s->batcher) return ls_batcher_eval(s->batcher, &g, err, errlen);
    if (s->tp) return ls_tp_eval(s, tokens, n, logits_from, logits, err, errlen);
    double t0 = ls_now_ms();
    int rc = ls_fwd_prepare(&g, s->n_batch, err, errlen);
    if (rc != LS_OK) return rc;
    ls_gemma_forward(s->be, &s->ws, &g, 1);
    s->last_step_ms = ls_now_ms() - t0;
    return LS_OK;
}

/* Kept across calls (a server slot's requests reuse it): page-locking memory is a driver
 * call that maps and locks every page, and freeing it waits for the device. */
float *ls_session_logits_buffer(ls_session *s, int32_t rows) {
    if (!s || rows < 1) return NULL;
    if (rows <= s->h_logits_rows) return s->h_logits;
    size_t nv = (size_t)s->model->cfg.n_vocab;
    if ((size_t)rows > SIZE_MAX / sizeof(float) / nv) return NULL;
    float *b = ls_host_buffer_alloc(s->be, sizeof(float) * nv * (size_t)rows);
    if (!b) return NULL;
    ls_host_buffer_free(s->h_logits);
    s->h_logits = b;
    s->h_logits_rows = rows;
    return b;
}

int ls_session_truncate(ls_session *s, int32_t pos) {
    if (pos < 0 || pos > s->pos) return LS_ERR_ARG;
    if (s->tp) return ls_tp_truncate(s, pos);
    /* Check every layer first so a refused rollback changes nothing. */
    const ls_model *m = s->model;
    for (int i = 0; i < m->cfg.n_layer; i++)
        if (m->layers[i].kv_src == i && !ls_kv_can_truncate(&s->kv[i], pos)) return LS_ERR;
    for (int i = 0; i < m->cfg.n_layer; i++)
        if (m->layers[i].kv_src == i && ls_kv_truncate(&s->kv[i], pos) != 0) return LS_ERR;
    s->pos = pos;
    return LS_OK;
}

void ls_session_set_capture(ls_session *s, ls_capture_fn fn, void *ud) {
    s->capture = fn;
    s->capture_ud = ud;
}

void ls_session_set_fault(ls_session *s, bool on, int32_t layer, ls_stage stage) {
    s->fault_on = on;
    s->fault_layer = layer;
    s->fault_stage = stage;
}

const float *ls_session_hidden(const ls_session *s, int32_t row) {
    if (!s->hidden || row < 0 || row >= s->n_hidden) return NULL;
    return s->hidden + (int64_t)row * s->model->cfg.n_embd;
}

int32_t ls_session_n_hidden(const ls_session *s) {
    return s->n_hidden;
}

int32_t ls_session_kv_source(const ls_session *s, bool sliding, const ls_kv_layer **kv, int32_t *n_kv,
                             int32_t *head_dim) {
    const ls_model *m = s->model;
    if (!s->kv) return -1; /* a tensor-parallel facade: its caches are sharded over the ranks */
    for (int i = m->cfg.n_layer - 1; i >= 0; i--) {
        const ls_layer *l = &m->layers[i];
        if (l->kv_src != i || l->sliding != sliding) continue;
        if (kv) *kv = &s->kv[i];
        if (n_kv) *n_kv = l->n_kv;
        if (head_dim) *head_dim = l->head_dim;
        return i;
    }
    return -1;
}
