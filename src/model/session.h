/* Per-sequence state: KV cache, position, activation buffers sized at creation, and the
 * backend (with its thread pool). Nothing on the forward path allocates. */
#ifndef LS_MODEL_SESSION_H
#define LS_MODEL_SESSION_H

#include <stdint.h>

#include "kernels/backend.h"
#include "lockstep.h"
#include "model/kv_cache.h"
#include "model/model.h"

/* Sub-op stages the exactness probe captures and compares, in execution order per layer
 * (the last two once per forward, after all layers). */
typedef enum {
    LS_STAGE_ATTENTION = 0, /* attention block output (after the output projection) */
    LS_STAGE_MLP,           /* MLP output (after the down projection) */
    LS_STAGE_LAYER_OUTPUT,  /* residual stream after the layer */
    LS_STAGE_FINAL_NORM,    /* output-normed hidden rows */
    LS_STAGE_LM_HEAD,       /* logits rows */
    LS_STAGE_COUNT
} ls_stage;
const char *ls_stage_name(ls_stage st);

/* Called with the rows of one stage: rows [n][width], row r at absolute position pos0 + r.
 * layer is -1 for the final-norm and lm-head stages. */
typedef void (*ls_capture_fn)(void *ud, int32_t layer, ls_stage st, const float *rows, int32_t n, int64_t width,
                              int32_t pos0);

struct ls_session {
    ls_model *model;
    ls_backend *be;
    int32_t n_ctx, n_batch, n_threads;
    int32_t pos;     /* tokens in the cache */
    ls_kv_layer *kv; /* [n_layer] */
    /* Activations, n_batch rows each. */
    float *x;           /* [n_batch][n_embd] residual stream */
    float *xn;          /* [n_batch][n_embd] normed input of a sub-block */
    float *tmp;         /* [n_batch][n_embd] sub-block output */
    float *q;           /* [n_batch][n_head * head_dim] */
    float *k;           /* [n_batch][n_head_kv * head_dim] */
    float *v;           /* [n_batch][n_head_kv * head_dim] */
    float *att;         /* [n_batch][n_head * head_dim] */
    float *gate;        /* [n_batch][n_ff] */
    float *up;          /* [n_batch][n_ff] */
    int32_t *positions; /* [n_batch] */
    /* Exactness-probe hooks (NULL / off in normal operation; never set on a request path). */
    ls_capture_fn capture;
    void *capture_ud;
    /* Test-only fault injection: when on, forwards of more than one row perturb one element
     * of the last row of `fault_stage` in layer `fault_layer` (enough to reach the logits),
     * so tests can check the probe names exactly that layer and sub-op. */
    bool fault_on;
    int32_t fault_layer;
    ls_stage fault_stage;
};

/* Internal controls used by the probe and its tests. */
void ls_session_set_capture(ls_session *s, ls_capture_fn fn, void *ud);
void ls_session_set_fault(ls_session *s, bool on, int32_t layer, ls_stage stage);

/* The forward pass (gemma3_forward.c). */
int ls_gemma3_forward(ls_session *s, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
                      size_t errlen);

#endif
