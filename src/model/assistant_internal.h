/* Private to src/model/assistant_load.c (loading, target check) and assistant_step.c (one
 * drafter step, the drafting loop): the assistant struct. */
#ifndef LS_MODEL_ASSISTANT_INTERNAL_H
#define LS_MODEL_ASSISTANT_INTERNAL_H

#include "format/hf_config.h"
#include "format/safetensors.h"
#include "kernels/backend.h"
#include "model/assistant.h"

typedef struct {
    bool sliding;
    int32_t hd, n_kv, n_rot_pairs, inter;
    float theta, freq_scale;
    ls_weight q, o, gate, up, down;
    float *in_ln, *post_attn_ln, *pre_ff_ln, *post_ff_ln, *q_norm;
    float scalar;
} asst_layer;

struct ls_assistant {
    ls_hf_config cfg;
    ls_st_set *st;
    int32_t hidden, bb, vocab, n_layers, n_heads, window;
    int32_t hd_s, hd_f, kv_s, kv_f; /* 0 when no layer of that type */
    int32_t max_inter, max_qdim;
    float eps;
    asst_layer *layers;
    ls_weight pre, post, embd, centroids;
    float *norm;
    bool centroid_head, quantized;
    int32_t n_centroids, top_k, per_cluster;
    int32_t *ordering; /* [vocab] */
    /* Scratch in the memory of backend `be` (bound at the first step; docs/cuda.md 3) */
    ls_backend *be;
    float *x, *h, *a, *t, *q, *att, *gate, *up, *emb, *hcur, *logits;
    float *cscore, *crows, *clogits;
    int32_t *qpos, *tok, *dcand;
    int32_t *h_io; /* host staging of qpos and tok, page-locked where the backend has it */
    /* host side: centroid scores / candidate logits read back, candidate ids */
    float *h_cscore, *h_clogits;
    int32_t *cand, *csel;
    char err[256];
};

/* Releases the step scratch (assistant_step.c); the assistant keeps working, the next step
 * binds new scratch. */
void ls_asst_scratch_release(ls_assistant *a);

#endif
