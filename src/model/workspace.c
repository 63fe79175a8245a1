/* Activation buffers of a forward step, sized once for a row capacity (nothing on the
 * forward path allocates), in the backend's memory (docs/cuda.md 3): model code hands them
 * to ops and never dereferences them. Widths are the maxima over layers (model.h), plus
 * the PLE and MoE buffers when the model has those blocks, plus the small host buffers the
 * host-side steps need (MoE routing, probe captures). */
#include <stdlib.h>
#include <string.h>

#include "kernels/host_buffer.h"
#include "model/session.h"

/* Floats (or int32s) per row of each buffer, in one table so sizing and allocation agree. */
typedef struct {
    int64_t x, xn, tmp, q, k, v, att, gate, up, ple, ple_tok, ple_tmp;
    int64_t moe_scores, moe_w, moe_in, moe_out, moe_acc, moe_idx, moe_rows;
} ws_widths;

static ws_widths widths(const ls_config *c) {
    ws_widths w = {0};
    w.x = w.xn = w.tmp = c->n_embd;
    w.q = w.att = c->max_q;
    w.k = w.v = c->max_kv;
    w.gate = w.up = c->max_ff > c->ple_dim ? c->max_ff : c->ple_dim;
    if (c->ple_dim > 0) {
        w.ple = w.ple_tok = (int64_t)c->n_layer * c->ple_dim;
        w.ple_tmp = c->ple_dim;
    }
    if (c->n_expert > 0) {
        w.moe_scores = c->n_expert;
        w.moe_w = w.moe_idx = c->n_expert_used;
        w.moe_in = w.moe_out = w.moe_acc = c->n_embd;
        w.moe_rows = c->n_expert_used;
    }
    return w;
}

static int64_t floats_per_row(const ws_widths *w) {
    return w->x + w->xn + w->tmp + w->q + w->k + w->v + w->att + w->gate + w->up + w->ple + w->ple_tok + w->ple_tmp +
           w->moe_in + w->moe_out + w->moe_acc + w->moe_w + w->moe_scores;
}

uint64_t ls_workspace_bytes(const ls_model *m, int32_t rows, int32_t logit_rows) {
    ws_widths w = widths(&m->cfg);
    return sizeof(float) *
               ((uint64_t)rows * (uint64_t)floats_per_row(&w) + (uint64_t)logit_rows * (uint64_t)m->cfg.n_vocab) +
           sizeof(int32_t) * (uint64_t)rows * (uint64_t)(2 + w.moe_idx + 2 * w.moe_rows);
}

int ls_workspace_init(ls_workspace *ws, ls_backend *be, const ls_model *m, int32_t rows, int32_t logit_rows) {
    const ls_config *c = &m->cfg;
    ws_widths w = widths(c);
    memset(ws, 0, sizeof *ws);
    ws->be = be;
    int fail = 0;
    /* Backend buffers */
#define BALLOC(ptr, width)                                                                                             \
    do {                                                                                                               \
        if ((width) > 0 && !((ptr) = be->ops->alloc(be, sizeof(*(ptr)) * (size_t)((int64_t)rows * (width)))))          \
            fail = 1;                                                                                                  \
    } while (0)
    /* Host buffers that a step copies to or from the backend (token ids and positions every
     * step, MoE routing every MoE layer): page-locked where the backend has such memory, so the
     * copies skip the driver's staging (src/kernels/host_buffer.c) */
#define HALLOC(ptr, width)                                                                                             \
    do {                                                                                                               \
        if ((width) > 0 && !((ptr) = ls_host_buffer_alloc(be, sizeof(*(ptr)) * (size_t)((int64_t)rows * (width)))))    \
            fail = 1;                                                                                                  \
    } while (0)
    BALLOC(ws->x, w.x);
    BALLOC(ws->xn, w.xn);
    BALLOC(ws->tmp, w.tmp);
    BALLOC(ws->q, w.q);
    BALLOC(ws->k, w.k);
    BALLOC(ws->v, w.v);
    BALLOC(ws->att, w.att);
    BALLOC(ws->gate, w.gate);
    BALLOC(ws->up, w.up);
    /* token ids [cap] then positions [cap], one buffer: a step uploads both at once */
    BALLOC(ws->tokens, 2);
    BALLOC(ws->ple, w.ple);
    BALLOC(ws->ple_tok, w.ple_tok);
    BALLOC(ws->ple_tmp, w.ple_tmp);
    BALLOC(ws->moe_scores, w.moe_scores);
    BALLOC(ws->moe_in, w.moe_in);
    BALLOC(ws->moe_out, w.moe_out);
    BALLOC(ws->moe_acc, w.moe_acc);
    BALLOC(ws->moe_w, w.moe_w);
    BALLOC(ws->moe_src, w.moe_rows);
    HALLOC(ws->h_ids, 2);
    HALLOC(ws->h_moe_scores, w.moe_scores);
    HALLOC(ws->h_moe_w, w.moe_w);
    HALLOC(ws->h_moe_idx, w.moe_idx);
    HALLOC(ws->h_moe_src, w.moe_rows);
    HALLOC(ws->h_moe_wsel, w.moe_rows);
    /* the probe's captures: rows x the widest activation, copied only while the probe runs:
     * plain memory (not worth page-locking that much for every session) */
    if (w.x > 0 && !(ws->h_capture = malloc(sizeof(float) * (size_t)((int64_t)rows * w.x)))) fail = 1;
#undef BALLOC
#undef HALLOC
    if (logit_rows > 0 && !(ws->logits = be->ops->alloc(be, sizeof(float) * (size_t)logit_rows * (size_t)c->n_vocab)))
        fail = 1;
    if (fail) {
        ls_workspace_free(ws);
        return -1;
    }
    ws->positions = ws->tokens + rows;
    ws->cap = rows;
    ws->logit_cap = logit_rows;
    return 0;
}

void ls_workspace_free(ls_workspace *ws) {
    ls_backend *be = ws->be;
    if (be) {
        void *bufs[] = {ws->x,          ws->xn,     ws->tmp,     ws->q,       ws->k,       ws->v,       ws->att,
                        ws->gate,       ws->up,     ws->tokens,  ws->ple,     ws->ple_tok, ws->ple_tmp, ws->logits,
                        ws->moe_scores, ws->moe_in, ws->moe_out, ws->moe_acc, ws->moe_w,   ws->moe_src};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) be->ops->release(be, bufs[i]);
    }
    ls_host_buffer_free(ws->h_ids);
    ls_host_buffer_free(ws->h_moe_scores);
    ls_host_buffer_free(ws->h_moe_w);
    ls_host_buffer_free(ws->h_moe_idx);
    ls_host_buffer_free(ws->h_moe_src);
    ls_host_buffer_free(ws->h_moe_wsel);
    free(ws->h_capture);
    memset(ws, 0, sizeof *ws);
}

int64_t ls_model_max_cols(const ls_model *m) {
    const ls_config *c = &m->cfg;
    int64_t mc = c->n_embd;
    if (c->max_q > mc) mc = c->max_q;
    if (c->max_ff > mc) mc = c->max_ff;
    if (c->ple_dim > mc) mc = c->ple_dim;
    return mc;
}
