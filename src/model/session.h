/* Per-sequence state: KV cache, position, activation buffers sized at creation, and the
 * backend (with its thread pool). Nothing on the forward path allocates. */
#ifndef LS_MODEL_SESSION_H
#define LS_MODEL_SESSION_H

#include <stdint.h>

#include "kernels/backend.h"
#include "lockstep.h"
#include "model/kv_cache.h"
#include "model/model.h"

struct ls_session {
    ls_model *model;
    ls_backend *be;
    int32_t n_ctx, n_batch, n_threads;
    int32_t pos; /* tokens in the cache */
    ls_kv_layer *kv; /* [n_layer] */
    /* Activations, n_batch rows each. */
    float *x;    /* [n_batch][n_embd] residual stream */
    float *xn;   /* [n_batch][n_embd] normed input of a sub-block */
    float *tmp;  /* [n_batch][n_embd] sub-block output */
    float *q;    /* [n_batch][n_head * head_dim] */
    float *k;    /* [n_batch][n_head_kv * head_dim] */
    float *v;    /* [n_batch][n_head_kv * head_dim] */
    float *att;  /* [n_batch][n_head * head_dim] */
    float *gate; /* [n_batch][n_ff] */
    float *up;   /* [n_batch][n_ff] */
    int32_t *positions; /* [n_batch] */
};

/* The forward pass (gemma3_forward.c). */
int ls_gemma3_forward(ls_session *s, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
                      size_t errlen);

#endif
