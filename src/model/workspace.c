/* Activation buffers of a forward step, sized once for a row capacity (nothing on the
 * forward path allocates). Widths are the maxima over layers (model.h), plus the PLE and
 * MoE buffers when the model has those blocks. */
#include <stdlib.h>
#include <string.h>

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
        w.moe_rows = 1;
    }
    return w;
}

static int64_t floats_per_row(const ws_widths *w) {
    return w->x + w->xn + w->tmp + w->q + w->k + w->v + w->att + w->gate + w->up + w->ple + w->ple_tok + w->ple_tmp +
           w->moe_scores + w->moe_w + w->moe_in + w->moe_out + w->moe_acc;
}

uint64_t ls_workspace_bytes(const ls_model *m, int32_t rows, int32_t logit_rows) {
    ws_widths w = widths(&m->cfg);
    return sizeof(float) *
               ((uint64_t)rows * (uint64_t)floats_per_row(&w) + (uint64_t)logit_rows * (uint64_t)m->cfg.n_vocab) +
           sizeof(int32_t) * (uint64_t)rows * (uint64_t)(1 + w.moe_idx + w.moe_rows);
}

int ls_workspace_init(ls_workspace *ws, const ls_model *m, int32_t rows, int32_t logit_rows) {
    const ls_config *c = &m->cfg;
    ws_widths w = widths(c);
    memset(ws, 0, sizeof *ws);
    int fail = 0;
#define ALLOC(ptr, width)                                                                                              \
    do {                                                                                                               \
        if ((width) > 0 && !((ptr) = malloc(sizeof(*(ptr)) * (size_t)((int64_t)rows * (width))))) fail = 1;            \
    } while (0)
    ALLOC(ws->x, w.x);
    ALLOC(ws->xn, w.xn);
    ALLOC(ws->tmp, w.tmp);
    ALLOC(ws->q, w.q);
    ALLOC(ws->k, w.k);
    ALLOC(ws->v, w.v);
    ALLOC(ws->att, w.att);
    ALLOC(ws->gate, w.gate);
    ALLOC(ws->up, w.up);
    ALLOC(ws->positions, 1);
    ALLOC(ws->ple, w.ple);
    ALLOC(ws->ple_tok, w.ple_tok);
    ALLOC(ws->ple_tmp, w.ple_tmp);
    ALLOC(ws->moe_scores, w.moe_scores);
    ALLOC(ws->moe_w, w.moe_w);
    ALLOC(ws->moe_idx, w.moe_idx);
    ALLOC(ws->moe_in, w.moe_in);
    ALLOC(ws->moe_out, w.moe_out);
    ALLOC(ws->moe_acc, w.moe_acc);
    ALLOC(ws->moe_rows, w.moe_rows);
#undef ALLOC
    if (logit_rows > 0 && !(ws->logits = malloc(sizeof(float) * (size_t)logit_rows * (size_t)c->n_vocab))) fail = 1;
    if (fail) {
        ls_workspace_free(ws);
        return -1;
    }
    ws->cap = rows;
    ws->logit_cap = logit_rows;
    return 0;
}

void ls_workspace_free(ls_workspace *ws) {
    free(ws->x);
    free(ws->xn);
    free(ws->tmp);
    free(ws->q);
    free(ws->k);
    free(ws->v);
    free(ws->att);
    free(ws->gate);
    free(ws->up);
    free(ws->positions);
    free(ws->logits);
    free(ws->ple);
    free(ws->ple_tok);
    free(ws->ple_tmp);
    free(ws->moe_scores);
    free(ws->moe_w);
    free(ws->moe_idx);
    free(ws->moe_in);
    free(ws->moe_out);
    free(ws->moe_acc);
    free(ws->moe_rows);
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
