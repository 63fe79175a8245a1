/* Tests for config.json parsing (src/format/hf_config.c).
 *
 * (a) Real-shaped configs under tests/data/hf_configs/ (Gemma 3 270M and 4B, Gemma 4 31B as
 *     an MLX 4-bit export, the same 31B saved by transformers 5 with per_layer_config, E2B,
 *     26B-A4B, the 31B assistant): the resolved per-layer arrays and scalars are checked
 *     against the values in docs/gemma.md.
 * (b) Inconsistent variants, made by editing one field of a real config with cJSON: each must
 *     fail with a message naming the field.
 * (c) The reference checkpoints under tests/data/hf/ (written by transformers and mlx-lm; skipped
 *     when absent): config and weights load, and every MLX-quantized tensor's packed width agrees
 *     with the bits/group size ls_hf_quant_for gives for its module. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/hf_config.h"
#include "format/safetensors.h"

static char *read_text(const char *name, size_t *len) {
    const char *dir = getenv("LOCKSTEP_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/hf_configs/%s", dir ? dir : "tests/data", name);
    FILE *f = fopen(path, "rb");
    if (!f) print_error("cannot open %s (set LOCKSTEP_TEST_DATA)\n", path);
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void load_ok(const char *name, ls_hf_config *c) {
    size_t len;
    char *text = read_text(name, &len), err[512] = "";
    int rc = ls_hf_config_parse(text, len, c, err, sizeof err);
    if (rc != 0) print_error("%s: %s\n", name, err);
    assert_int_equal(rc, 0);
    free(text);
}

/* ---------------------------------------------------------------------------------------
 * Valid configs
 * ------------------------------------------------------------------------------------- */

static void test_gemma3_270m(void **state) {
    (void)state;
    ls_hf_config c;
    load_ok("gemma3_270m.json", &c);
    assert_int_equal(c.arch, LS_ARCH_GEMMA3);
    assert_string_equal(c.model_type, "gemma3_text");
    assert_int_equal(c.vocab_size, 262144);
    assert_int_equal(c.hidden_size, 640);
    assert_int_equal(c.intermediate_size, 2048);
    assert_int_equal(c.n_layers, 18);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 1);
    assert_int_equal(c.head_dim, 256);
    assert_int_equal(c.global_head_dim, 256);
    assert_int_equal(c.sliding_window, 512);
    assert_int_equal(c.max_position_embeddings, 32768);
    assert_true(c.rms_norm_eps == 1e-6f);
    assert_true(c.rope_theta_sliding == 1e4f && c.rope_theta_full == 1e6f);
    assert_true(c.rope_partial_full == 1.0f && c.rope_scaling_full == 1.0f);
    assert_true(c.query_pre_attn_scalar == 256.0f);
    assert_true(c.final_logit_softcapping == 0.0f);
    assert_true(c.tie_word_embeddings);
    assert_false(c.attention_k_eq_v);
    assert_int_equal(c.bos_token_id, 2);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 1);
    for (int i = 0; i < 18; i++) {
        assert_int_equal(c.layer_sliding[i], (i + 1) % 6 != 0);
        assert_int_equal(c.layer_head_dim[i], 256);
        assert_int_equal(c.layer_kv_heads[i], 1);
        assert_false(c.layer_k_eq_v[i]);
        assert_int_equal(c.layer_kv_source[i], i);
        assert_int_equal(c.layer_intermediate[i], 2048);
    }
    assert_false(c.quant.present);
    int32_t bits = -1, gs = -1;
    assert_false(ls_hf_quant_for(&c, "model.layers.0.mlp.gate_proj", &bits, &gs));
    ls_hf_config_free(&c);
}

/* No layer_types: sliding_window_pattern 6 over 34 layers, and Gemma 3 does NOT force the
 * last layer (33) to full attention. */
static void test_gemma3_4b_multimodal(void **state) {
    (void)state;
    ls_hf_config c;
    load_ok("gemma3_4b_it.json", &c);
    assert_int_equal(c.arch, LS_ARCH_GEMMA3);
    assert_int_equal(c.n_layers, 34);
    assert_int_equal(c.vocab_size, 262208);
    assert_int_equal(c.n_kv_heads, 4);
    assert_true(c.layer_sliding[33]);
    assert_false(c.layer_sliding[29]);
    assert_true(c.layer_sliding[30]);
    assert_true(c.rope_scaling_full == 8.0f);
    assert_true(c.rope_theta_full == 1e6f && c.rope_theta_sliding == 1e4f);
    assert_int_equal(c.n_eos, 2);
    assert_int_equal(c.eos_token_ids[0], 1);
    assert_int_equal(c.eos_token_ids[1], 106);
    assert_int_equal(c.max_position_embeddings, 131072); /* default */
    ls_hf_config_free(&c);
}

static void check_31b_layers(const ls_hf_config *c) {
    assert_int_equal(c->n_layers, 60);
    for (int i = 0; i < 60; i++) {
        bool full = (i + 1) % 6 == 0;
        assert_int_equal(c->layer_sliding[i], !full);
        assert_int_equal(c->layer_head_dim[i], full ? 512 : 256);
        assert_int_equal(c->layer_kv_heads[i], full ? 4 : 16);
        assert_int_equal(c->layer_k_eq_v[i], full);
        assert_int_equal(c->layer_kv_source[i], i);
        assert_int_equal(c->layer_intermediate[i], 21504);
    }
    assert_int_equal(c->head_dim, 256);
    assert_int_equal(c->global_head_dim, 512);
    assert_int_equal(c->n_kv_heads, 16);
    assert_int_equal(c->n_global_kv_heads, 4);
}

static void test_gemma4_31b_mlx(void **state) {
    (void)state;
    ls_hf_config c;
    load_ok("gemma4_31b_mlx_4bit.json", &c);
    assert_int_equal(c.arch, LS_ARCH_GEMMA4);
    assert_string_equal(c.model_type, "gemma4");
    assert_int_equal(c.hidden_size, 5376);
    assert_int_equal(c.n_heads, 32);
    check_31b_layers(&c);
    assert_true(c.layer_k_eq_v[5] && c.layer_head_dim[5] == 512 && c.layer_kv_heads[5] == 4);
    assert_true(c.attention_k_eq_v);
    assert_true(c.rope_theta_sliding == 1e4f && c.rope_theta_full == 1e6f);
    assert_true(c.rope_partial_full == 0.25f && c.rope_scaling_full == 1.0f);
    assert_true(c.query_pre_attn_scalar == 0.0f);
    assert_true(c.final_logit_softcapping == 30.0f);
    assert_int_equal(c.num_kv_shared_layers, 0);
    assert_int_equal(c.hidden_size_per_layer_input, 0);
    assert_false(c.enable_moe_block);
    assert_int_equal(c.max_position_embeddings, 262144);
    assert_int_equal(c.n_eos, 2); /* [1, 106] at top level, 1 in text_config: union */

    assert_true(c.quant.present);
    assert_int_equal(c.quant.bits, 4);
    assert_int_equal(c.quant.group_size, 64);
    assert_int_equal(c.quant.n_overrides, 15);
    int32_t bits = 0, gs = 0;
    assert_true(ls_hf_quant_for(&c, "language_model.model.layers.0.mlp.gate_proj", &bits, &gs));
    assert_int_equal(bits, 8);
    assert_int_equal(gs, 64);
    bits = gs = 0; /* normalized names match too */
    assert_true(ls_hf_quant_for(&c, "model.layers.2.mlp.down_proj", &bits, &gs));
    assert_int_equal(bits, 8);
    bits = 0;
    assert_true(ls_hf_quant_for(&c, "layers.59.mlp.up_proj", &bits, &gs));
    assert_int_equal(bits, 8);
    assert_true(ls_hf_quant_for(&c, "model.language_model.layers.3.self_attn.o_proj", &bits, &gs));
    assert_int_equal(bits, 6);
    assert_int_equal(gs, 32);
    assert_true(ls_hf_quant_for(&c, "language_model.model.layers.3.mlp.gate_proj", &bits, &gs));
    assert_int_equal(bits, 4); /* not overridden: the default */
    assert_int_equal(gs, 64);
    assert_true(ls_hf_quant_for(&c, "language_model.model.layers.1.self_attn.q_proj", &bits, &gs));
    assert_int_equal(bits, 4);
    assert_false(ls_hf_quant_for(&c, "language_model.model.embed_tokens", &bits, &gs));
    assert_false(ls_hf_quant_for(&c, "model.embed_tokens", &bits, &gs));
    assert_false(ls_hf_quant_for(&c, "vision_tower.encoder.layers.0.self_attn.q_proj", &bits, &gs));
    /* a prefix of an overridden path is a different module */
    assert_true(ls_hf_quant_for(&c, "language_model.model.layers.0.mlp.gate", &bits, &gs));
    assert_int_equal(bits, 4);
    ls_hf_config_free(&c);
    ls_hf_config_free(&c); /* idempotent */
}

/* transformers 5.x per_layer_config instead of the flat global fields: same geometry. */
static void test_gemma4_31b_per_layer_config(void **state) {
    (void)state;
    ls_hf_config a, b;
    load_ok("gemma4_31b_mlx_4bit.json", &a);
    load_ok("gemma4_31b_tf5_per_layer.json", &b);
    check_31b_layers(&b);
    assert_memory_equal(a.layer_sliding, b.layer_sliding, sizeof a.layer_sliding);
    assert_memory_equal(a.layer_head_dim, b.layer_head_dim, sizeof a.layer_head_dim);
    assert_memory_equal(a.layer_kv_heads, b.layer_kv_heads, sizeof a.layer_kv_heads);
    assert_memory_equal(a.layer_k_eq_v, b.layer_k_eq_v, sizeof a.layer_k_eq_v);
    assert_false(b.quant.present);
    ls_hf_config_free(&a);
    ls_hf_config_free(&b);
}

static void test_gemma4_e2b(void **state) {
    (void)state;
    ls_hf_config c;
    load_ok("gemma4_e2b_it.json", &c);
    assert_int_equal(c.n_layers, 35);
    assert_int_equal(c.num_kv_shared_layers, 20);
    assert_int_equal(c.hidden_size_per_layer_input, 256);
    assert_int_equal(c.vocab_size_per_layer_input, 262144);
    assert_true(c.use_double_wide_mlp);
    assert_false(c.attention_k_eq_v);
    assert_int_equal(c.sliding_window, 512);
    for (int i = 0; i < 35; i++) {
        bool full = i % 5 == 4;
        assert_int_equal(c.layer_sliding[i], !full);
        assert_int_equal(c.layer_head_dim[i], full ? 512 : 256);
        assert_int_equal(c.layer_kv_heads[i], 1);
        assert_false(c.layer_k_eq_v[i]);
        assert_int_equal(c.layer_intermediate[i], i >= 15 ? 12288 : 6144);
        if (i < 15)
            assert_int_equal(c.layer_kv_source[i], i);
        else
            assert_int_equal(c.layer_kv_source[i], full ? 14 : 13);
    }
    assert_int_equal(c.layer_kv_source[15], 13);
    assert_int_equal(c.layer_kv_source[19], 14);
    assert_int_equal(c.n_global_kv_heads, 1); /* num_global_key_value_heads null, no k_eq_v */
    ls_hf_config_free(&c);
}

static void test_gemma4_26b_moe(void **state) {
    (void)state;
    ls_hf_config c;
    load_ok("gemma4_26b_a4b_it.json", &c);
    assert_int_equal(c.n_layers, 30);
    assert_true(c.enable_moe_block);
    assert_int_equal(c.num_experts, 128);
    assert_int_equal(c.top_k_experts, 8);
    assert_int_equal(c.moe_intermediate_size, 704);
    assert_int_equal(c.intermediate_size, 2112);
    assert_int_equal(c.layer_kv_heads[0], 8);
    assert_int_equal(c.layer_kv_heads[5], 2);
    assert_true(c.layer_k_eq_v[29]);
    assert_false(c.layer_sliding[29]);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[2], 50);
    ls_hf_config_free(&c);
}

static void test_gemma4_assistant(void **state) {
    (void)state;
    ls_hf_config c;
    load_ok("gemma4_31b_assistant.json", &c);
    assert_int_equal(c.arch, LS_ARCH_GEMMA4_ASSISTANT);
    assert_int_equal(c.backbone_hidden_size, 5376);
    assert_int_equal(c.hidden_size, 1024);
    assert_int_equal(c.n_layers, 4);
    assert_int_equal(c.num_kv_shared_layers, 4);
    assert_false(c.use_ordered_embeddings);
    assert_true(c.final_logit_softcapping == 0.0f);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(c.layer_kv_source[i], -1);
        assert_int_equal(c.layer_intermediate[i], 8192);
        assert_int_equal(c.layer_sliding[i], i < 3);
    }
    assert_int_equal(c.layer_head_dim[3], 512);
    assert_int_equal(c.layer_kv_heads[3], 4);
    assert_true(c.layer_k_eq_v[3]);
    assert_int_equal(c.layer_kv_heads[0], 16);
    ls_hf_config_free(&c);
}

/* ---------------------------------------------------------------------------------------
 * Edited configs
 * ------------------------------------------------------------------------------------- */

/* Parse `file` after setting (or, with value NULL, deleting) key in the object at the dotted
 * path obj ("" = top level). */
static int parse_edited(const char *file, const char *obj, const char *key, const char *value, ls_hf_config *c,
                        char *err, size_t errlen) {
    size_t len;
    char *text = read_text(file, &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON *o = root;
    char path[256];
    snprintf(path, sizeof path, "%s", obj);
    for (char *save = NULL, *part = strtok_r(path, ".", &save); part; part = strtok_r(NULL, ".", &save)) {
        o = cJSON_GetObjectItemCaseSensitive(o, part);
        if (!o) print_error("no object %s in %s\n", obj, file);
        assert_non_null(o);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        if (!v) print_error("bad test value %s\n", value);
        assert_non_null(v);
        cJSON_AddItemToObject(o, key, v);
    }
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    int rc = ls_hf_config_parse(out, strlen(out), c, err, errlen);
    free(out);
    return rc;
}

typedef struct {
    const char *file, *obj, *key, *value, *expect;
} edit_case;

#define G3  "gemma3_270m.json"
#define G31 "gemma4_31b_mlx_4bit.json"
#define TF5 "gemma4_31b_tf5_per_layer.json"
#define E2B "gemma4_e2b_it.json"
#define MOE "gemma4_26b_a4b_it.json"
#define AST "gemma4_31b_assistant.json"
#define TC  "text_config"
#define Q   "quantization"

static const edit_case bad_cases[] = {
    {G3, "", "model_type", NULL, "model_type: missing"},
    {G3, "", "model_type", "\"llama\"", "model_type: unsupported 'llama'"},
    {G3, "", "model_type", "3", "model_type: must be a string"},
    {G31, "", "text_config", NULL, "text_config: missing"},
    {G31, "", "text_config", "[]", "text_config: must be an object"},
    {G31, TC, "model_type", "\"gemma3_text\"", "text_config.model_type: 'gemma3_text' does not match"},
    {G3, "", "vocab_size", NULL, "vocab_size: missing"},
    {G3, "", "vocab_size", "0", "vocab_size: must be an integer"},
    {G3, "", "hidden_size", "-640", "hidden_size: must be an integer"},
    {G3, "", "hidden_size", "640.5", "hidden_size: must be an integer"},
    {G3, "", "hidden_size", "\"640\"", "hidden_size: must be an integer"},
    {G3, "", "hidden_size", "1e300", "hidden_size: must be an integer"},
    {G31, TC, "num_hidden_layers", "0", "text_config.num_hidden_layers: must be an integer in [1, 512]"},
    {G31, TC, "num_hidden_layers", "513", "text_config.num_hidden_layers: must be an integer in [1, 512]"},
    {G31, TC, "num_hidden_layers", "59", "text_config.layer_types: 60 entries but num_hidden_layers is 59"},
    {G31, TC, "layer_types", "\"sliding_attention\"", "text_config.layer_types: must be an array"},
    {G3, "", "layer_types", "[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\",\"global\"]",
     "layer_types: 4 entries"},
    {G31, TC, "num_attention_heads", "24", "text_config.num_key_value_heads: layer 0 has 16 KV heads"},
    {G3, "", "num_key_value_heads", "3", "num_key_value_heads: layer 0 has 3 KV heads"},
    {G3, "", "num_key_value_heads", NULL, "num_key_value_heads: missing"},
    {G3, "", "head_dim", "255", "head_dim: layer 0 has odd head dim 255"},
    {G31, TC, "num_global_key_value_heads", "3", "text_config.num_key_value_heads: layer 5 has 3 KV heads"},
    {G31, TC, "num_key_value_heads", "12", "text_config.num_key_value_heads: layer 0 has 12 KV heads"},
    {G31, TC, "global_head_dim", "0", "text_config.global_head_dim: must be an integer"},
    {G31, TC, "attention_k_eq_v", "1", "text_config.attention_k_eq_v: must be true or false"},
    {G3, "", "sliding_window", NULL, "sliding_window: missing"},
    {G3, "", "rms_norm_eps", "-1", "rms_norm_eps: must be a number"},
    {G3, "", "rms_norm_eps", "0", "rms_norm_eps: must be a number"},
    {G3, "", "attn_logit_softcapping", "50.0", "attn_logit_softcapping: attention logit soft-capping"},
    {G3, "", "hidden_activation", "\"silu\"", "hidden_activation: unsupported 'silu'"},
    {G3, "", "query_pre_attn_scalar", "0", "query_pre_attn_scalar: must be a number"},
    {G3, "", "final_logit_softcapping", "\"30\"", "final_logit_softcapping: must be a number"},
    {G3, "", "rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":8}", "rope_scaling.rope_type: unsupported 'yarn'"},
    {G3, "", "rope_theta", "0", "rope_theta: must be a number"},
    {G3, "", "bos_token_id", "262144", "bos_token_id: must be an integer in [0, 262143]"},
    {G3, "", "eos_token_id", "[1, -1]", "eos_token_id: ids must be integers"},
    {G3, "", "eos_token_id", "[1,2,3,4,5,6,7,8,9]", "eos_token_id: more than 8 distinct ids"},
    {G3, "", "eos_token_id", "\"1\"", "eos_token_id: ids must be integers"},
    {G3, "", "use_bidirectional_attention", "true", "use_bidirectional_attention"},
    {G3, "", "layer_types", NULL, NULL}, /* fallback pattern: accepted (checked below) */
    {"gemma3_4b_it.json", TC, "sliding_window_pattern", "0",
     "text_config.sliding_window_pattern: must be an integer in [1, 512]"},
    {G31, TC, "rope_parameters", "{\"rope_type\":\"default\",\"rope_theta\":10000}",
     "text_config.rope_parameters: expects entries per layer type"},
    {G31, TC ".rope_parameters.full_attention", "rope_type", "\"yarn\"",
     "text_config.rope_parameters.full_attention.rope_type: unsupported 'yarn'"},
    {G31, TC ".rope_parameters.sliding_attention", "partial_rotary_factor", "0.5",
     "text_config.rope_parameters.sliding_attention.rope_type default takes no partial_rotary_factor"},
    {G31, TC ".rope_parameters", "sliding_attention", "{\"rope_type\": \"linear\", \"factor\": 8}",
     "text_config.rope_parameters.sliding_attention: only unscaled full-rotary"},
    {G31, TC ".rope_parameters", "sliding_attention", "{\"rope_type\": \"proportional\"}", NULL}, /* = default */
    {G31, TC ".rope_parameters.full_attention", "partial_rotary_factor", "1.5",
     "full_attention.partial_rotary_factor: must be a number in"},
    {G31, TC ".rope_parameters.full_attention", "rope_type", "\"linear\"",
     "full_attention.factor: missing (required by rope_type linear)"},
    {G31, TC ".rope_parameters.full_attention", "rope_theta", "-5", "full_attention.rope_theta: must be a number"},
    {TF5, TC ".per_layer_config", "60", "{\"head_dim\": 512}", "text_config.per_layer_config: key '60'"},
    {TF5, TC ".per_layer_config", "05", "{\"head_dim\": 512}", "text_config.per_layer_config: key '05'"},
    {TF5, TC ".per_layer_config", "x", "{\"head_dim\": 512}", "text_config.per_layer_config: key 'x'"},
    {TF5, TC ".per_layer_config", "11", "{\"head_dim\": 512, \"sliding_window\": 4}",
     "text_config.per_layer_config.11.sliding_window: unsupported per-layer override"},
    {TF5, TC ".per_layer_config", "11", "{\"num_key_value_heads\": 5}",
     "text_config.num_key_value_heads: layer 11 has 5 KV heads"},
    {TF5, TC ".per_layer_config", "11", "{\"head_dim\": -1}", "text_config.per_layer_config.11.head_dim: must be"},
    {TF5, TC ".per_layer_config", "11", "7", "text_config.per_layer_config.11: must be an object"},
    {TF5, TC, "per_layer_config", "[]", "text_config.per_layer_config: must be an object"},
    {E2B, TC, "num_kv_shared_layers", "35", "text_config.num_kv_shared_layers: must be an integer in [0, 34]"},
    {E2B, TC, "num_kv_shared_layers", "-1", "text_config.num_kv_shared_layers: must be an integer"},
    {E2B, TC, "num_kv_shared_layers", "31",
     "text_config.num_kv_shared_layers: shared layer 4 (full) has no earlier non-shared layer of its type"},
    {E2B, TC, "per_layer_config", "{\"30\": {\"head_dim\": 128}}",
     "num_kv_shared_layers: shared layer 30 reads the K/V of layer 13 but their head dim"},
    {E2B, TC, "hidden_size_per_layer_input", "-1", "text_config.hidden_size_per_layer_input: must be"},
    {E2B, TC, "vocab_size_per_layer_input", "0", "text_config.vocab_size_per_layer_input: must be positive"},
    {E2B, TC, "intermediate_size", "1048575", "text_config.intermediate_size: 1048575 too large to double"},
    {MOE, TC, "num_experts", NULL, "text_config.num_experts: missing"},
    {MOE, TC, "top_k_experts", "129", "text_config.top_k_experts: must be an integer in [1, 128]"},
    {MOE, TC, "moe_intermediate_size", NULL, "text_config.expert_intermediate_size: missing"},
    {MOE, TC, "enable_moe_block", "\"yes\"", "text_config.enable_moe_block: must be true or false"},
    {AST, "", "backbone_hidden_size", NULL, "backbone_hidden_size: missing"},
    {AST, "", "use_ordered_embeddings", "true", NULL}, /* 2048 centroids divide 262144 */
    {AST, "", "num_centroids", "3000", NULL},          /* ignored without ordered embeddings */
    {AST, TC, "model_type", "\"gemma4_assistant\"", "text_config.model_type: 'gemma4_assistant' does not match"},
    {AST, "", "model_type", "\"gemma4_unified_assistant\"", NULL},
    {G31, TC, "model_type", "\"gemma4_unified_text\"", NULL},
    {"gemma3_4b_it.json", TC, "model_type", "\"gemma4_unified_text\"",
     "text_config.model_type: 'gemma4_unified_text' does not match gemma3"},
    {G31, Q, "mode", "\"mxfp4\"", "quantization.mode: unsupported quantization mode 'mxfp4'"},
    {G31, Q, "bits", "7", "quantization.bits: 7 not supported"},
    {G31, Q, "bits", NULL, "quantization.bits: missing"},
    {G31, Q, "group_size", "48", "quantization.group_size: 48 not supported"},
    {G31, Q, "group_size", NULL, "quantization.group_size: missing"},
    {G31, Q, "language_model.model.layers.0.mlp.gate_proj", "{\"bits\": 1, \"group_size\": 64}",
     "quantization.language_model.model.layers.0.mlp.gate_proj.bits: 1 not supported"},
    {G31, Q, "language_model.model.layers.0.mlp.gate_proj", "{\"bits\": 8, \"group_size\": 16}",
     "quantization.language_model.model.layers.0.mlp.gate_proj.group_size: 16 not supported"},
    {G31, Q, "language_model.model.layers.0.mlp.gate_proj", "\"8bit\"",
     "quantization.language_model.model.layers.0.mlp.gate_proj: must be an object"},
    {G31, Q, "model.layers.1.mlp.up_proj", "false", "quantization.model.layers.1.mlp.up_proj: same module as"},
    {G31, Q, "", "false", "quantization.: empty module path"},
    {G31, "", "quantization", "{\"quant_method\": \"gptq\", \"bits\": 4}",
     "quantization.quant_method: unsupported quantization method 'gptq'"},
    {G31, "", "quantization", "[]", "quantization: must be an object"},
};

static void test_edited_configs(void **state) {
    (void)state;
    int n = (int)(sizeof bad_cases / sizeof bad_cases[0]), rejected = 0, expected = 0;
    for (int i = 0; i < n; i++) expected += bad_cases[i].expect != NULL;
    for (int i = 0; i < n; i++) {
        const edit_case *k = &bad_cases[i];
        ls_hf_config c;
        char err[512] = "";
        int rc = parse_edited(k->file, k->obj, k->key, k->value, &c, err, sizeof err);
        if (!k->expect) {
            if (rc != 0) print_error("case %d (%s %s.%s): unexpected error: %s\n", i, k->file, k->obj, k->key, err);
            assert_int_equal(rc, 0);
            ls_hf_config_free(&c);
            continue;
        }
        if (rc == 0 || !strstr(err, k->expect))
            print_error("case %d (%s %s.%s = %s): rc %d, got \"%s\", want \"%s\"\n", i, k->file, k->obj, k->key,
                        k->value ? k->value : "(deleted)", rc, err, k->expect);
        assert_int_equal(rc, -1);
        assert_non_null(strstr(err, k->expect));
        assert_false(c.quant.present); /* a failed parse leaves nothing to free */
        assert_null(c.quant.overrides);
        rejected++;
    }
    assert_int_equal(rejected, expected);
    assert_true(expected >= 70);
}

/* Defaults and fallbacks that the edited cases above only accept. */
static void test_fallbacks(void **state) {
    (void)state;
    ls_hf_config c;
    char err[512];
    /* Gemma 4 without layer_types: full every 6th layer, and the last one forced full. */
    assert_int_equal(parse_edited(MOE, TC, "layer_types", NULL, &c, err, sizeof err), 0);
    for (int i = 0; i < 30; i++) assert_int_equal(c.layer_sliding[i], (i + 1) % 6 != 0);
    ls_hf_config_free(&c);
    assert_int_equal(parse_edited(E2B, TC, "layer_types", NULL, &c, err, sizeof err), 0);
    for (int i = 0; i < 35; i++) assert_int_equal(c.layer_sliding[i], (i + 1) % 6 != 0 && i != 34);
    assert_int_equal(c.layer_kv_source[34], 11); /* last full layer before 15 */
    assert_int_equal(c.layer_kv_source[33], 14);
    ls_hf_config_free(&c);
    /* sliding_window_pattern 5 on E2B reproduces its layer_types */
    ls_hf_config ref;
    load_ok(E2B, &ref);
    size_t len;
    char *text = read_text(E2B, &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    cJSON_DeleteItemFromObjectCaseSensitive(tc, "layer_types");
    cJSON_AddNumberToObject(tc, "sliding_window_pattern", 5);
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    assert_int_equal(ls_hf_config_parse(out, strlen(out), &c, err, sizeof err), 0);
    free(out);
    assert_memory_equal(c.layer_sliding, ref.layer_sliding, sizeof c.layer_sliding);
    assert_memory_equal(c.layer_kv_source, ref.layer_kv_source, sizeof c.layer_kv_source);
    ls_hf_config_free(&c);
    ls_hf_config_free(&ref);
    /* Gemma 4 without rope_parameters: 1e4 / 1e6 proportional 0.25 */
    assert_int_equal(parse_edited(G31, TC, "rope_parameters", NULL, &c, err, sizeof err), 0);
    assert_true(c.rope_theta_sliding == 1e4f && c.rope_theta_full == 1e6f && c.rope_partial_full == 0.25f);
    ls_hf_config_free(&c);
    /* transformers 5 style nested rope for Gemma 3 with linear scaling */
    assert_int_equal(parse_edited(G3, "", "rope_parameters",
                                  "{\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": "
                                  "1000000.0}, \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": "
                                  "10000.0}}",
                                  &c, err, sizeof err),
                     0);
    assert_true(c.rope_scaling_full == 8.0f && c.rope_partial_full == 1.0f && c.rope_theta_full == 1e6f);
    ls_hf_config_free(&c);
    /* Gemma 3 defaults: query_pre_attn_scalar = head_dim, eos null -> none */
    assert_int_equal(parse_edited(G3, "", "query_pre_attn_scalar", NULL, &c, err, sizeof err), 0);
    assert_true(c.query_pre_attn_scalar == 256.0f);
    ls_hf_config_free(&c);
    assert_int_equal(parse_edited(G3, "", "eos_token_id", "null", &c, err, sizeof err), 0);
    assert_int_equal(c.n_eos, 0);
    ls_hf_config_free(&c);
    /* quantization_config alone is read like quantization; `true` means the defaults */
    assert_int_equal(parse_edited(G31, "", "quantization", NULL, &c, err, sizeof err), 0);
    assert_true(c.quant.present && c.quant.bits == 4 && c.quant.n_overrides == 15);
    ls_hf_config_free(&c);
    assert_int_equal(parse_edited(G31, Q, "language_model.model.layers.7.mlp.gate_proj", "true", &c, err, sizeof err),
                     0);
    int32_t bits = 0, gs = 0;
    assert_true(ls_hf_quant_for(&c, "layers.7.mlp.gate_proj", &bits, &gs) && bits == 4 && gs == 64);
    ls_hf_config_free(&c);
    /* the assistant with the centroid head */
    assert_int_equal(parse_edited(AST, "", "use_ordered_embeddings", "true", &c, err, sizeof err), 0);
    assert_true(c.use_ordered_embeddings && c.num_centroids == 2048 && c.centroid_intermediate_top_k == 32);
    ls_hf_config_free(&c);
    assert_int_equal(parse_edited(AST, "", "num_centroids", "3000", &c, err, sizeof err), 0);
    ls_hf_config_free(&c);
}

static void test_not_json(void **state) {
    (void)state;
#define LIT(s) s, sizeof s - 1
    static const struct {
        const char *text;
        size_t len;
        const char *expect;
    } cases[] = {
        {LIT(""), "not valid JSON"},
        {LIT("{"), "not valid JSON"},
        {LIT("[1,2]"), "top level is not a JSON object"},
        {LIT("{\"model_type\": \"gemma3_text\"} x"), "not valid JSON"},
        {LIT("{\"model_type\":\0\"gemma3_text\"}"), "contains a NUL byte"},
        {"{\"model_type\": \"gemma3_text\"}", 10, "not valid JSON"}, /* length is honoured */
        {LIT("{\"model_type\": \"gemma3_text\"}"), "vocab_size: missing"},
    };
#undef LIT
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ls_hf_config c;
        char err[256] = "";
        assert_int_equal(ls_hf_config_parse(cases[i].text, cases[i].len, &c, err, sizeof err), -1);
        if (!strstr(err, cases[i].expect)) print_error("case %zu: %s\n", i, err);
        assert_non_null(strstr(err, cases[i].expect));
        assert_int_equal(strncmp(err, "config: ", 8), 0);
    }
}

static void test_load_dir(void **state) {
    (void)state;
    char dir[] = "/tmp/ls_hf_config_XXXXXX";
    assert_non_null(mkdtemp(dir));
    ls_hf_config c;
    char err[512] = "", path[600];
    assert_int_equal(ls_hf_config_load(dir, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "config.json"));
    assert_non_null(strstr(err, dir));
    size_t len;
    char *text = read_text(E2B, &len);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
    free(text);
    assert_int_equal(ls_hf_config_load(dir, &c, err, sizeof err), 0);
    assert_int_equal(c.layer_kv_source[19], 14);
    ls_hf_config_free(&c);
    f = fopen(path, "wb"); /* now an inconsistent one: the message names the file and field */
    fputs("{\"model_type\": \"gemma3_text\", \"vocab_size\": 0}", f);
    fclose(f);
    assert_int_equal(ls_hf_config_load(dir, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "vocab_size"));
    unlink(path);
    rmdir(dir);
}

/* Modules with .scales are the quantized ones; their bits and group size must explain the
 * packed width: weight cols * 32 / bits == scales cols * group_size. */
static int quant_mismatches(const ls_hf_config *c, const ls_st_set *s, int *n_quantized) {
    int bad = 0;
    for (int64_t i = 0; i < ls_st_count(s); i++) {
        const char *name = ls_st_at(s, i)->name;
        size_t n = strlen(name);
        if (n < 7 || strcmp(name + n - 7, ".scales") != 0) continue;
        char module[512], wname[520];
        snprintf(module, sizeof module, "%.*s", (int)(n - 7), name);
        snprintf(wname, sizeof wname, "%s.weight", module);
        const ls_st_tensor *w = ls_st_find(s, wname), *sc = ls_st_at(s, i);
        int32_t bits = 0, gs = 0;
        bool q = ls_hf_quant_for(c, module, &bits, &gs);
        (*n_quantized)++;
        if (!w || !q || w->dtype != LS_ST_U32 ||
            w->shape[w->n_dims - 1] * 32 / bits != sc->shape[sc->n_dims - 1] * gs) {
            print_error("%s: quantized %d bits %d group %d\n", module, q, bits, gs);
            bad++;
        }
    }
    return bad;
}

static void test_reference_checkpoints(void **state) {
    (void)state;
    const char *data = getenv("LOCKSTEP_TEST_DATA");
    char root[1024];
    snprintf(root, sizeof root, "%s/hf", data ? data : "tests/data");
    DIR *d = opendir(root);
    if (!d) skip();
    int n_dirs = 0, n_quantized = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char dir[2048], cfg[2100], err[512] = "";
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        struct stat st;
        if (e->d_name[0] == '.' || stat(cfg, &st) != 0) continue;
        ls_hf_config c;
        ls_st_set *s = NULL;
        int rc = ls_hf_config_load(dir, &c, err, sizeof err);
        if (rc == 0) {
            rc = ls_st_open_dir(dir, &s, err, sizeof err);
            if (rc != 0) ls_hf_config_free(&c);
        }
        if (rc != 0) print_error("%s: %s\n", dir, err);
        assert_int_equal(rc, 0);
        assert_true(ls_st_count(s) > 0);
        assert_int_equal(quant_mismatches(&c, s, &n_quantized), 0);
        ls_st_close(s);
        ls_hf_config_free(&c);
        n_dirs++;
    }
    closedir(d);
    assert_true(n_dirs > 0);
    if (n_quantized == 0) print_message("note: no MLX-quantized reference checkpoint found\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3_270m),      cmocka_unit_test(test_gemma3_4b_multimodal),
        cmocka_unit_test(test_gemma4_31b_mlx),   cmocka_unit_test(test_gemma4_31b_per_layer_config),
        cmocka_unit_test(test_gemma4_e2b),       cmocka_unit_test(test_gemma4_26b_moe),
        cmocka_unit_test(test_gemma4_assistant), cmocka_unit_test(test_edited_configs),
        cmocka_unit_test(test_fallbacks),        cmocka_unit_test(test_not_json),
        cmocka_unit_test(test_load_dir),         cmocka_unit_test(test_reference_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
