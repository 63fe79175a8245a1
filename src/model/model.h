/* Internal model representation: config validated at load, weights pointing into the
 * mmapped GGUF or safetensors files, the tokenizer. Immutable after ls_model_open; shared
 * by sessions.
 *
 * One representation serves Gemma 3 (GGUF or HF/MLX directory) and Gemma 4 (directory):
 * geometry is per layer (head dim, KV heads, MLP width, RoPE), norm vectors are stored as
 * f32 factors ready to multiply (Gemma 3's (1 + w) is folded in at load), and optional
 * features (value norm, layer scalar, PLE, MoE, KV sharing, softcap) are switched on by
 * their fields. The forward pass (gemma_forward.c) reads only this struct. */
#ifndef LS_MODEL_MODEL_H
#define LS_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf.h"
#include "kernels/backend.h"
#include "lockstep.h"
#include "tokenizer/tokenizer.h"

typedef struct ls_st_set ls_st_set;

enum { LS_MAX_DEVICE_KINDS = 4 };

typedef enum { LS_FAMILY_GEMMA3 = 3, LS_FAMILY_GEMMA4 = 4 } ls_family;

typedef struct {
    int32_t n_vocab, n_layer, n_embd, n_head;
    /* Reported geometry (ls_model_info): the first layer's KV heads / head dim, the dense
     * MLP width. Layers carry their own. */
    int32_t n_head_kv, head_dim, n_ff;
    int32_t n_ctx_train, sliding_window;
    float eps;
    float rope_base_full, rope_base_sliding;
    float attn_scale;    /* applied to q.k (Gemma 3: query_pre_attn_scalar^-0.5; Gemma 4: 1) */
    float embd_scale;    /* sqrt(n_embd), rounded to bf16 for bf16 checkpoints (docs/gemma.md 3.1) */
    float final_softcap; /* logits = c * tanh(logits / c); 0 = none */
    ls_family family;
    /* Maxima over layers, for sizing buffers. */
    int32_t max_q;  /* n_head * head_dim */
    int32_t max_kv; /* n_kv * head_dim */
    int32_t max_ff; /* MLP width (double-wide included) */
    int32_t max_hd; /* head dim */
    /* Per-layer embeddings (Gemma 4 E models): width per layer, 0 = off. */
    int32_t ple_dim;
    /* MoE (Gemma 4 26B-A4B style): experts, experts per token, expert MLP width; 0 = off. */
    int32_t n_expert, n_expert_used, moe_ff;
    /* KV cache element type sessions use by default: f32 for float/MLX checkpoints (so
     * the cache adds no rounding the float32 reference does not have), f16 for GGUF. */
    bool kv_f32;
} ls_config;

/* Mixture-of-experts block of one layer (runs next to the dense MLP; docs/gemma.md 3.2). */
typedef struct {
    ls_weight router;              /* [n_expert x n_embd] */
    const float *router_scale;     /* [n_embd] */
    const float *per_expert_scale; /* [n_expert] */
    ls_weight *gate, *up, *down;   /* [n_expert] each: [moe_ff x n_embd], [moe_ff x n_embd], [n_embd x moe_ff] */
    const float *pre_norm_2, *post_norm_1, *post_norm_2; /* [n_embd] */
} ls_moe;

typedef struct {
    bool sliding;
    int32_t head_dim, n_kv, n_ff;
    bool k_eq_v;    /* no V projection: V = the raw K projection (Gemma 4 full layers) */
    bool v_norm;    /* RMS-normalize V without weight (Gemma 4) */
    int32_t kv_src; /* layer whose KV cache this layer reads: itself, or its KV-sharing source */
    /* RoPE: NeoX pairs (j, j + head_dim/2); pair j < rope_pairs rotates by
     * pos * rope_freq_scale * rope_base^(-2j/head_dim), the others stay (proportional RoPE). */
    float rope_base, rope_freq_scale;
    int32_t rope_pairs;
    float layer_scalar; /* multiplies the residual stream after the layer (1 = none) */
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
    ls_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    /* PLE (when cfg.ple_dim > 0) */
    ls_weight ple_gate, ple_proj; /* [P x n_embd], [n_embd x P] */
    const float *ple_post_norm;   /* [n_embd] */
    ls_moe *moe;                  /* NULL: no MoE block */
} ls_layer;

struct ls_model {
    gguf_file *gguf; /* GGUF models */
    ls_st_set *st;   /* checkpoint-directory models */
    ls_tokenizer *tok;
    ls_config cfg;
    char arch[32];
    char name[128];
    ls_weight tok_embd; /* [n_vocab x n_embd]; also the tied LM head */
    const float *output_norm;
    ls_layer *layers;
    /* PLE tables (cfg.ple_dim > 0) */
    ls_weight ple_embd;         /* [n_vocab x n_layer * P] */
    ls_weight ple_model_proj;   /* [n_layer * P x n_embd] */
    const float *ple_proj_norm; /* [P] */
    ls_moe *moes;               /* [n_layer] when MoE (layers point here) */
    ls_weight *expert_w;        /* backing store of the per-expert weights */
    float **owned;              /* norm vectors converted to f32 (freed at close) */
    size_t *owned_bytes;        /* [n_owned] their sizes (mapped to devices like the files) */
    int n_owned;
    /* Device kinds whose ops can read this model's constants (map_const done), and the kind
     * its sessions use by default (ls_model_set_device; NULL = ls_device_default()). */
    const ls_device_kind *mapped[LS_MAX_DEVICE_KINDS];
    int n_mapped;
    const ls_device_kind *device;
    int64_t n_params;
    uint64_t weight_bytes;
    /* File identity, for caches keyed by the model (the probe verdict cache). */
    char path[1024];
    uint64_t file_size;
    int64_t file_mtime;
    /* Structured output: the vocabulary's byte trie, built on first use (docs/structured_output.md). */
    struct ls_gvocab *gvocab;
    /* Set by the loaders when one of their own allocations (tables, weight copies, the
     * tokenizer) failed:
     * ls_model_open then returns LS_ERR_NOMEM instead of LS_ERR. */
    bool load_nomem;
};

/* Load a Hugging Face / MLX checkpoint directory into m (model_load_hf.c); m is zeroed
 * except path. Returns 0, or -1 with a message naming the tensor or config field. */
int ls_model_load_hf(ls_model *m, const char *dir, char *err, size_t errlen);
/* Keep a malloc'd buffer until ls_model_close. Returns 0 or -1 (then frees it). */
int ls_model_own(ls_model *m, float *buf, size_t bytes);
/* malloc / calloc for the loaders (fault site "model"): a failure also marks the model
 * load_nomem. */
void *ls_model_alloc(ls_model *m, size_t bytes);
void *ls_model_calloc(ls_model *m, size_t n, size_t size);
/* Build identity (generated at build time by cmake/build_id.cmake). */
const char *ls_build_id(void);
/* Every constant host range of the model (mapped file bytes, owned vectors), for
 * ls_device_kind.map_const. */
typedef int (*ls_range_fn)(void *ud, const void *base, size_t bytes);
int ls_model_for_each_range(const ls_model *m, ls_range_fn fn, void *ud);
/* Map the model's constants for `kind` once (idempotent). 0, or an error code with err. */
int ls_model_map(ls_model *m, const ls_device_kind *kind, char *err, size_t errlen);
void ls_model_unmap_all(ls_model *m);
/* The device kind for a session of m: `name` ("cpu", "cuda"; NULL/"" = the model's device,
 * "auto" = the build's default), mapped. NULL with err when unknown or unavailable. */
const ls_device_kind *ls_model_kind_for(ls_model *m, const char *name, char *err, size_t errlen);

#endif
