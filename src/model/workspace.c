/* Activation buffers of a forward step, sized once for a row capacity (nothing on the
 * forward path allocates). */
#include <stdlib.h>
#include <string.h>

#include "model/session.h"

uint64_t ls_workspace_bytes(const ls_model *m, int32_t rows, int32_t logit_rows) {
    const ls_config *c = &m->cfg;
    uint64_t d = (uint64_t)c->n_embd, qd = (uint64_t)c->n_head * (uint64_t)c->head_dim,
             kvd = (uint64_t)c->n_head_kv * (uint64_t)c->head_dim;
    uint64_t per_row = 3 * d + 2 * qd + 2 * kvd + 2 * (uint64_t)c->n_ff;
    return sizeof(float) * ((uint64_t)rows * per_row + (uint64_t)logit_rows * (uint64_t)c->n_vocab) +
           sizeof(int32_t) * (uint64_t)rows;
}

int ls_workspace_init(ls_workspace *ws, const ls_model *m, int32_t rows, int32_t logit_rows) {
    const ls_config *c = &m->cfg;
    int64_t d = c->n_embd, qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    memset(ws, 0, sizeof *ws);
#define ALLOC(ptr, count) ((ptr) = malloc(sizeof(*(ptr)) * (size_t)(count)))
    if (!ALLOC(ws->x, rows * d) || !ALLOC(ws->xn, rows * d) || !ALLOC(ws->tmp, rows * d) || !ALLOC(ws->q, rows * qd) ||
        !ALLOC(ws->k, rows * kvd) || !ALLOC(ws->v, rows * kvd) || !ALLOC(ws->att, rows * qd) ||
        !ALLOC(ws->gate, (int64_t)rows * c->n_ff) || !ALLOC(ws->up, (int64_t)rows * c->n_ff) ||
        !ALLOC(ws->positions, rows) || (logit_rows > 0 && !ALLOC(ws->logits, (int64_t)logit_rows * c->n_vocab))) {
        ls_workspace_free(ws);
        return -1;
    }
#undef ALLOC
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
    memset(ws, 0, sizeof *ws);
}
