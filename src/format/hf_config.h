/* config.json of a Hugging Face / MLX checkpoint, reduced to what the engine needs
 * (docs/gemma.md 2, 5.1, 6.4). Accepts model_type gemma3_text, gemma3 (with
 * text_config), gemma4_text, gemma4 / gemma4_unified (with text_config) and
 * gemma4_assistant (text_config + backbone fields). Per-layer geometry is resolved here
 * once, from either the flat fields (global_head_dim, num_global_key_value_heads,
 * attention_k_eq_v) or transformers 5.x per_layer_config overrides, so model code only
 * reads the arrays. Inconsistent configs are rejected with a message naming the field. */
#ifndef LS_FORMAT_HF_CONFIG_H
#define LS_FORMAT_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { LS_ARCH_GEMMA3 = 3, LS_ARCH_GEMMA4 = 4, LS_ARCH_GEMMA4_ASSISTANT = 5 } ls_hf_arch;

#define LS_HF_MAX_LAYERS 512

/* One MLX quantization override: module path (as written in config.json, e.g.
 * "language_model.model.layers.0.mlp.gate_proj") -> bits/group, or not quantized. */
typedef struct {
    char *path;
    bool quantized; /* false for a `false` entry */
    int32_t bits, group_size;
} ls_hf_quant_override;

typedef struct {
    bool present; /* a `quantization` (or `quantization_config`) block with mode affine */
    int32_t bits, group_size;
    ls_hf_quant_override *overrides;
    int32_t n_overrides;
} ls_hf_quant;

typedef struct {
    ls_hf_arch arch;
    char model_type[48]; /* as written at top level */

    /* text model (for the assistant: its own small text stack) */
    int32_t vocab_size, hidden_size, intermediate_size, n_layers, n_heads;
    int32_t head_dim, global_head_dim;     /* sliding / full head dims (Gemma 3: equal) */
    int32_t n_kv_heads, n_global_kv_heads; /* sliding / full KV heads (resolved) */
    bool attention_k_eq_v;                 /* full layers: V = raw K projection */
    int32_t sliding_window;
    int32_t max_position_embeddings;
    float rms_norm_eps;
    float rope_theta_sliding, rope_theta_full; /* default 1e4 / 1e6 */
    float rope_partial_full;                   /* Gemma 4 proportional: 0.25; Gemma 3: 1.0 */
    float rope_scaling_full;                   /* Gemma 3 linear factor on full layers (1 = none) */
    float query_pre_attn_scalar;               /* Gemma 3 attention scale = this^-0.5; Gemma 4: 0 (scale 1) */
    float final_logit_softcapping;             /* 0 = none */
    bool tie_word_embeddings;
    int32_t bos_token_id, eos_token_ids[8], n_eos;

    /* per layer, resolved */
    bool layer_sliding[LS_HF_MAX_LAYERS];
    int32_t layer_head_dim[LS_HF_MAX_LAYERS];
    int32_t layer_kv_heads[LS_HF_MAX_LAYERS];
    bool layer_k_eq_v[LS_HF_MAX_LAYERS];          /* full layer without v_proj */
    int32_t layer_kv_source[LS_HF_MAX_LAYERS];    /* the layer whose K/V it reads (itself unless shared) */
    int32_t layer_intermediate[LS_HF_MAX_LAYERS]; /* MLP width (double-wide on shared layers) */

    /* Gemma 4 extras */
    int32_t num_kv_shared_layers;
    int32_t hidden_size_per_layer_input; /* PLE width; 0 = off */
    int32_t vocab_size_per_layer_input;
    bool use_double_wide_mlp;
    bool enable_moe_block;
    int32_t num_experts, top_k_experts, moe_intermediate_size;

    /* gemma4_assistant */
    int32_t backbone_hidden_size;
    bool use_ordered_embeddings; /* centroid head */
    int32_t num_centroids, centroid_intermediate_top_k;

    ls_hf_quant quant;
} ls_hf_config;

/* Parse config.json text (len bytes, need not be NUL-terminated). Returns 0, or -1 with a
 * message in err. On success free with ls_hf_config_free. */
int ls_hf_config_parse(const char *json, size_t len, ls_hf_config *out, char *err, size_t errlen);
/* Read and parse <dir>/config.json. */
int ls_hf_config_load(const char *dir, ls_hf_config *out, char *err, size_t errlen);
void ls_hf_config_free(ls_hf_config *c);

/* Quantization of one module (path without ".weight"): returns true and bits/group when
 * the config says it is quantized (override, else the default), false for a `false`
 * override or no quantization block. Matches paths with or without a leading
 * "language_model." / "model." so callers may pass normalized names. */
bool ls_hf_quant_for(const ls_hf_config *c, const char *module_path, int32_t *bits, int32_t *group_size);

#endif
