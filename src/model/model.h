/* Internal model representation: config validated at load, weights pointing into the
 * mmapped GGUF, the tokenizer. Immutable after ls_model_open; shared by sessions. */
#ifndef LS_MODEL_MODEL_H
#define LS_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf.h"
#include "kernels/backend.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int32_t n_vocab, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_ctx_train, sliding_window;
    float eps;
    float rope_base_full, rope_base_sliding;
    float attn_scale; /* applied to q.k */
    float embd_scale; /* sqrt(n_embd) */
} ls_config;

typedef struct {
    bool sliding;
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm; /* +1 already added */
    ls_weight wq, wk, wv, wo, w_gate, w_up, w_down;
} ls_layer;

struct ls_model {
    gguf_file *gguf;
    ls_tokenizer *tok;
    ls_config cfg;
    char arch[32];
    char name[128];
    ls_weight tok_embd; /* [n_vocab x n_embd]; also the tied LM head */
    const float *output_norm;
    ls_layer *layers;
    float **owned; /* norm vectors converted to f32 (freed at close) */
    int n_owned;
    int64_t n_params;
    uint64_t weight_bytes;
    /* File identity, for caches keyed by the model (the probe verdict cache). */
    char path[1024];
    uint64_t file_size;
    int64_t file_mtime;
};

#endif
