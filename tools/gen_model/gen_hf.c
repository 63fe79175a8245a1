/* lockstep-gen-model: Gemma 4 31B checkpoint directories (safetensors).
 *
 *   gemma4-31b-qat        mlx-community layout of the QAT release: MLX affine 4-bit g64
 *                         (attention, embedding / tied head), 8-bit g64 MLP, bf16 scales,
 *                         biases and norms; text-only names (model.*), model_type gemma4_text,
 *                         shards of at most 5 GiB (mlx-lm's default) + index.
 *   gemma4-31b-assistant  the bf16 Gemma 4 assistant (MTP drafter) of the 31B.
 *
 * Templates: tests/data/hf/gemma4_dense_mlx_q4_mlp8 and tests/data/hf/gemma4_dense_assistant
 * (same config keys and tensor names, real sizes from docs/gemma.md 1, 2, 5). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen_model.h"

typedef struct {
    int n_layers, hidden, inter, heads, hd_s, kv_s, hd_f, kv_f, vocab, window, max_pos;
    bool sliding[128];
} g4_geom;

/* The 31B text stack (docs/gemma.md 1-2): 5 sliding + 1 full, the last layer full. */
static void geom_31b(g4_geom *g, int n_layers) {
    memset(g, 0, sizeof *g);
    g->n_layers = n_layers;
    g->hidden = 5376;
    g->inter = 21504;
    g->heads = 32;
    g->hd_s = 256;
    g->kv_s = 16;
    g->hd_f = 512;
    g->kv_f = 4;
    g->vocab = 262144;
    g->window = 1024;
    g->max_pos = 262144;
    for (int i = 0; i < n_layers; i++) g->sliding[i] = (i + 1) % 6 != 0;
    g->sliding[n_layers - 1] = false; /* HF (and the engine) force the last layer to full attention */
}

/* ---------------------------------------------------------------------------------------
 * Tensor descriptions
 * ------------------------------------------------------------------------------------- */

static uint64_t tensor_seed(uint64_t seed, const char *name) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ gm_hash_str(name);
    return gm_splitmix64(&x);
}

static gm_tensor *add_named(gm_tensor_list *l, const char *name) {
    gm_tensor *t = gm_tensor_add(l);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* MLX affine module <mod>: .weight U32 [rows, cols*bits/32], .scales / .biases bf16
 * [rows, cols/group]. Dequantized w = s q + b with q uniform, s ~ sigma / std(q) and
 * b = -s 2^(bits-1): centred values of standard deviation ~sigma. */
static void add_mlx(gm_tensor_list *l, uint64_t seed, const char *mod, int64_t rows, int64_t cols, int bits, int group,
                    double sigma) {
    char n[GM_MAX_NAME];
    snprintf(n, sizeof n, "%s.weight", mod);
    gm_tensor *w = add_named(l, n);
    w->dtype = GM_ST_U32;
    w->n_dims = 2;
    w->shape[0] = rows;
    w->shape[1] = cols * bits / 32;
    w->rows = (uint64_t)rows;
    w->row_bytes = (uint64_t)(cols * bits / 8);
    w->n_params = (uint64_t)(rows * cols);
    w->gen = GM_GEN_BYTES;
    w->seed = tensor_seed(seed, n);

    double levels = (double)(1u << bits), q_sd = sqrt((levels * levels - 1.0) / 12.0);
    snprintf(n, sizeof n, "%s.scales", mod);
    uint64_t sb_seed = tensor_seed(seed, n); /* scales and biases draw the same table indices */
    uint16_t *stab = gm_tab_mlx_scales(sb_seed, sigma / q_sd);
    gm_tensor *s = add_named(l, n);
    s->dtype = GM_ST_BF16;
    s->n_dims = 2;
    s->shape[0] = rows;
    s->shape[1] = cols / group;
    s->rows = (uint64_t)rows;
    s->row_bytes = (uint64_t)(cols / group) * 2;
    s->gen = GM_GEN_TAB16;
    s->seed = sb_seed;
    s->tab16 = stab;

    snprintf(n, sizeof n, "%s.biases", mod);
    gm_tensor *b = add_named(l, n);
    *b = *s;
    snprintf(b->name, sizeof b->name, "%s", n);
    b->tab16 = gm_tab_mlx_biases(stab, bits);
}

static void add_bf16_mat(gm_tensor_list *l, uint64_t seed, const char *name, int64_t rows, int64_t cols, double sigma) {
    gm_tensor *t = add_named(l, name);
    t->dtype = GM_ST_BF16;
    t->n_dims = 2;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->rows = (uint64_t)rows;
    t->row_bytes = (uint64_t)cols * 2;
    t->n_params = (uint64_t)(rows * cols);
    t->gen = GM_GEN_TAB16;
    t->seed = tensor_seed(seed, name);
    t->tab16 = gm_tab_bf16_gauss(0.0, sigma);
}

static void add_bf16_vec(gm_tensor_list *l, uint64_t seed, const char *name, int64_t n, double mean, double sd) {
    gm_tensor *t = add_named(l, name);
    t->dtype = GM_ST_BF16;
    t->n_dims = 1;
    t->shape[0] = n;
    t->rows = 1;
    t->row_bytes = (uint64_t)n * 2;
    t->n_params = (uint64_t)n;
    t->gen = GM_GEN_TAB16;
    t->seed = tensor_seed(seed, name);
    t->tab16 = sd > 0 ? gm_tab_bf16_gauss(mean, sd) : gm_tab_bf16_const((float)mean);
}

/* Value choices (docs/large_models.md), checked at full depth with `lockstep logits`:
 *  - linear weights sd 1/sqrt(in); token embedding sd 0.03 (x sqrt(5376) = 73.5 at the
 *    input: RMS ~2.2);
 *  - pre-norm gains (input_layernorm, pre_feedforward_layernorm) 1 +- 0.05;
 *  - post-block gains (post_attention_layernorm, post_feedforward_layernorm) 16 +- 0.8: each
 *    block adds RMS ~16 to the residual, which at 60 layers (RMS ~175) drowns the token's
 *    own embedding. With gains of 1 the residual stays dominated by it (RMS 2.2 vs ~11) and
 *    the tied head scores the input token ~15 sd above every other one: the model just
 *    repeats its input. (The test fixtures use larger post-norm gains for the same reason.)
 *  - final norm 2 +- 0.1: logits of sd ~4.3, so the softcap (30) bends the largest ones;
 *  - q/k norm gains 0.5 +- 0.025: attention scores of sd ~4 (sliding) / ~6 (full). With 0.35
 *    (sd ~2, near-uniform attention) neighbouring positions' hidden states were so alike at
 *    60 layers that consecutive logit rows correlated 0.6 and greedy decoding repeated one
 *    token; with 1 (sd 16-23, near one-hot) they correlate 0.2-0.5, but such sharp attention
 *    makes the net chaotic: on the Gemma 3 GGUF the equivalent setting let two correct
 *    engines (llama.cpp, this one) agree on only 2 of 13 argmaxes. 0.5 gives 0.36-0.53;
 *  - layer_scalar 1. */
#define EMBED_SD        0.03
#define NORM_MEAN       1.0
#define NORM_SD         0.05
#define POST_NORM_MEAN  16.0
#define POST_NORM_SD    0.8
#define FINAL_NORM_MEAN 2.0
#define FINAL_NORM_SD   0.1
#define QK_NORM_MEAN    0.5
#define QK_NORM_SD      0.025

static void build_qat(gm_tensor_list *l, const g4_geom *g, uint64_t seed) {
    int64_t H = g->hidden, I = g->inter;
    double sd_h = 1.0 / sqrt((double)H), sd_i = 1.0 / sqrt((double)I);
    add_mlx(l, seed, "model.embed_tokens", g->vocab, H, 4, 64, EMBED_SD);
    char p[96], n[GM_MAX_NAME];
    for (int i = 0; i < g->n_layers; i++) {
        bool s = g->sliding[i];
        int64_t hd = s ? g->hd_s : g->hd_f, kv = s ? g->kv_s : g->kv_f, q = (int64_t)g->heads * hd;
        snprintf(p, sizeof p, "model.layers.%d", i);
#define MOD(suffix) (snprintf(n, sizeof n, "%s.%s", p, suffix), n)
        add_mlx(l, seed, MOD("self_attn.q_proj"), q, H, 4, 64, sd_h);
        add_mlx(l, seed, MOD("self_attn.k_proj"), kv * hd, H, 4, 64, sd_h);
        if (s) add_mlx(l, seed, MOD("self_attn.v_proj"), kv * hd, H, 4, 64, sd_h); /* full: attention_k_eq_v */
        add_mlx(l, seed, MOD("self_attn.o_proj"), H, q, 4, 64, 1.0 / sqrt((double)q));
        add_bf16_vec(l, seed, MOD("self_attn.q_norm.weight"), hd, QK_NORM_MEAN, QK_NORM_SD);
        add_bf16_vec(l, seed, MOD("self_attn.k_norm.weight"), hd, QK_NORM_MEAN, QK_NORM_SD);
        add_mlx(l, seed, MOD("mlp.gate_proj"), I, H, 8, 64, sd_h);
        add_mlx(l, seed, MOD("mlp.up_proj"), I, H, 8, 64, sd_h);
        add_mlx(l, seed, MOD("mlp.down_proj"), H, I, 8, 64, sd_i);
        add_bf16_vec(l, seed, MOD("input_layernorm.weight"), H, NORM_MEAN, NORM_SD);
        add_bf16_vec(l, seed, MOD("post_attention_layernorm.weight"), H, POST_NORM_MEAN, POST_NORM_SD);
        add_bf16_vec(l, seed, MOD("pre_feedforward_layernorm.weight"), H, NORM_MEAN, NORM_SD);
        add_bf16_vec(l, seed, MOD("post_feedforward_layernorm.weight"), H, POST_NORM_MEAN, POST_NORM_SD);
        add_bf16_vec(l, seed, MOD("layer_scalar"), 1, 1.0, 0);
#undef MOD
    }
    add_bf16_vec(l, seed, "model.norm.weight", H, FINAL_NORM_MEAN, FINAL_NORM_SD);
}

/* The assistant (docs/gemma.md 5.2): no k/v projections (every layer reads the target's K/V). */
static void build_assistant(gm_tensor_list *l, const g4_geom *g, int backbone, uint64_t seed) {
    int64_t H = g->hidden, I = g->inter;
    double sd_h = 1.0 / sqrt((double)H);
    add_bf16_mat(l, seed, "model.embed_tokens.weight", g->vocab, H, EMBED_SD);
    char p[96], n[GM_MAX_NAME];
    for (int i = 0; i < g->n_layers; i++) {
        bool s = g->sliding[i];
        int64_t hd = s ? g->hd_s : g->hd_f, q = (int64_t)g->heads * hd;
        snprintf(p, sizeof p, "model.layers.%d", i);
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", p, suffix), n)
        add_bf16_vec(l, seed, NAME("input_layernorm.weight"), H, NORM_MEAN, NORM_SD);
        add_bf16_vec(l, seed, NAME("layer_scalar"), 1, 1.0, 0);
        add_bf16_mat(l, seed, NAME("mlp.down_proj.weight"), H, I, 1.0 / sqrt((double)I));
        add_bf16_mat(l, seed, NAME("mlp.gate_proj.weight"), I, H, sd_h);
        add_bf16_mat(l, seed, NAME("mlp.up_proj.weight"), I, H, sd_h);
        add_bf16_vec(l, seed, NAME("post_attention_layernorm.weight"), H, NORM_MEAN, NORM_SD);
        add_bf16_vec(l, seed, NAME("post_feedforward_layernorm.weight"), H, NORM_MEAN, NORM_SD);
        add_bf16_vec(l, seed, NAME("pre_feedforward_layernorm.weight"), H, NORM_MEAN, NORM_SD);
        add_bf16_mat(l, seed, NAME("self_attn.o_proj.weight"), H, q, 1.0 / sqrt((double)q));
        add_bf16_vec(l, seed, NAME("self_attn.q_norm.weight"), hd, QK_NORM_MEAN, QK_NORM_SD);
        add_bf16_mat(l, seed, NAME("self_attn.q_proj.weight"), q, H, sd_h);
#undef NAME
    }
    add_bf16_vec(l, seed, "model.norm.weight", H, FINAL_NORM_MEAN, FINAL_NORM_SD);
    add_bf16_mat(l, seed, "post_projection.weight", backbone, H, sd_h);
    add_bf16_mat(l, seed, "pre_projection.weight", H, 2 * (int64_t)backbone, 1.0 / sqrt(2.0 * backbone));
}

/* ---------------------------------------------------------------------------------------
 * safetensors files
 * ------------------------------------------------------------------------------------- */

#define ST_HEADER_ALIGN 64 /* data section starts at a multiple of this (padded header) */

typedef struct {
    char name[64];
    int *idx; /* tensors in file order */
    int n;
    uint64_t data_bytes, header_bytes;
} st_shard;

static int name_cmp(const void *a, const void *b) {
    const gm_tensor *x = *(const gm_tensor *const *)a, *y = *(const gm_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Split l into shards of at most max_bytes (a tensor never splits; mlx-lm's rule), order
 * each shard's tensors (sizes that are multiples of 64 first, so every tensor but the odd
 * small ones at the end stays 64-byte aligned) and lay out offsets and headers. */
static st_shard *plan_shards(gm_tensor_list *l, uint64_t max_bytes, const char *format, int *n_out, gm_buf *headers) {
    int ns = 0;
    uint64_t cur = 0;
    for (int i = 0; i < l->n; i++) {
        gm_tensor *t = &l->v[i];
        if (ns == 0 || (cur > 0 && cur + t->nbytes > max_bytes)) {
            ns++;
            cur = 0;
        }
        t->file = ns - 1;
        cur += t->nbytes;
    }
    st_shard *sh = calloc((size_t)ns, sizeof *sh);
    if (!sh) return NULL;
    for (int s = 0; s < ns; s++) {
        st_shard *f = &sh[s];
        if (ns == 1)
            snprintf(f->name, sizeof f->name, "model.safetensors");
        else
            snprintf(f->name, sizeof f->name, "model-%05d-of-%05d.safetensors", s + 1, ns);
        f->idx = malloc((size_t)l->n * sizeof *f->idx);
        if (!f->idx) return NULL;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < l->n; i++) {
                gm_tensor *t = &l->v[i];
                if (t->file == s && ((t->nbytes % 64 == 0) == (pass == 0))) f->idx[f->n++] = i;
            }
        gm_buf *h = &headers[s];
        gm_buf_printf(h, "{\"__metadata__\":{\"format\":\"%s\"}", format);
        uint64_t off = 0;
        for (int k = 0; k < f->n; k++) {
            gm_tensor *t = &l->v[f->idx[k]];
            t->offset = off;
            gm_buf_printf(h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, t->dtype == GM_ST_U32 ? "U32" : "BF16");
            for (int d = 0; d < t->n_dims; d++) gm_buf_printf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            gm_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                          (unsigned long long)(off + t->nbytes));
            off += t->nbytes;
        }
        gm_buf_put(h, "}", 1);
        while ((8 + h->len) % ST_HEADER_ALIGN) gm_buf_put(h, " ", 1);
        f->data_bytes = off;
        f->header_bytes = 8 + h->len;
        if (h->oom) return NULL;
    }
    *n_out = ns;
    return sh;
}

static int write_shard(const char *dir, const st_shard *f, const gm_buf *header, const gm_tensor_list *l, gm_opts *o) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, f->name);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "lockstep-gen-model: cannot create %s\n", path);
        return -1;
    }
    uint8_t len8[8];
    uint64_t hl = header->len;
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hl >> (8 * i));
    int rc = 0;
    if (fwrite(len8, 1, 8, fp) != 8 || fwrite(header->p, 1, header->len, fp) != header->len) {
        fprintf(stderr, "lockstep-gen-model: write error on %s\n", path);
        rc = -1;
    }
    if (rc == 0) rc = gm_stream_tensors(fp, path, l, f->idx, f->n, f->header_bytes, o);
    if (gm_close_file(fp, path, o) != 0) rc = -1;
    return rc;
}

static int write_index(const char *dir, const gm_tensor_list *l, const st_shard *sh) {
    const gm_tensor **order = malloc((size_t)l->n * sizeof *order);
    if (!order) return -1;
    uint64_t total = 0, params = 0;
    for (int i = 0; i < l->n; i++) {
        order[i] = &l->v[i];
        total += l->v[i].nbytes;
        params += l->v[i].n_params;
    }
    qsort(order, (size_t)l->n, sizeof *order, name_cmp);
    gm_buf b = {0};
    gm_buf_printf(&b,
                  "{\n    \"metadata\": {\n        \"total_size\": %llu,\n        \"total_parameters\": %llu\n    },\n",
                  (unsigned long long)total, (unsigned long long)params);
    gm_buf_printf(&b, "    \"weight_map\": {\n");
    for (int i = 0; i < l->n; i++)
        gm_buf_printf(&b, "        \"%s\": \"%s\"%s\n", order[i]->name, sh[order[i]->file].name,
                      i + 1 < l->n ? "," : "");
    gm_buf_printf(&b, "    }\n}");
    free(order);
    int rc = b.oom ? -1 : gm_write_text_file(dir, "model.safetensors.index.json", b.p, b.len);
    gm_buf_free(&b);
    return rc;
}

/* Plan, print, and (unless dry_run) write the safetensors files of l into dir. */
static int write_checkpoint(gm_args *a, gm_tensor_list *l, const char *format, uint64_t shard_bytes, bool index) {
    int ns = 0;
    gm_buf headers[64];
    memset(headers, 0, sizeof headers);
    {
        /* count shards first so the header array is large enough */
        uint64_t cur = 0;
        int n = 0;
        for (int i = 0; i < l->n; i++) {
            if (n == 0 || (cur > 0 && cur + l->v[i].nbytes > shard_bytes)) {
                n++;
                cur = 0;
            }
            cur += l->v[i].nbytes;
        }
        if (n > 64) {
            fprintf(stderr, "lockstep-gen-model: %d shards: use a larger --shard-gb\n", n);
            return -1;
        }
    }
    st_shard *sh = plan_shards(l, shard_bytes, format, &ns, headers);
    if (!sh) {
        fprintf(stderr, "lockstep-gen-model: out of memory\n");
        return -1;
    }
    uint64_t total = 0;
    char sz[64];
    for (int s = 0; s < ns; s++) {
        uint64_t fb = sh[s].header_bytes + sh[s].data_bytes;
        total += fb;
        gm_fmt_bytes(fb, sz, sizeof sz);
        printf("  %-36s %5d tensors  %s\n", sh[s].name, sh[s].n, sz);
    }
    gm_fmt_bytes(total, sz, sizeof sz);
    printf("  total weights: %s in %d file%s\n", sz, ns, ns == 1 ? "" : "s");
    fflush(stdout);
    int rc = 0;
    if (!a->dry_run) {
        double t0 = gm_now();
        for (int s = 0; s < ns && rc == 0; s++) {
            if (!a->io.quiet) fprintf(stderr, "writing %s/%s\n", a->out, sh[s].name);
            rc = write_shard(a->out, &sh[s], &headers[s], l, &a->io);
        }
        a->io.seconds += gm_now() - t0;
        if (rc == 0 && index) rc = write_index(a->out, l, sh);
    }
    for (int s = 0; s < ns; s++) {
        free(sh[s].idx);
        gm_buf_free(&headers[s]);
    }
    free(sh);
    return rc;
}

static void layer_types_json(gm_buf *b, const g4_geom *g, const char *ind) {
    gm_buf_printf(b, "%s\"layer_types\": [\n", ind);
    for (int i = 0; i < g->n_layers; i++)
        gm_buf_printf(b, "%s    \"%s\"%s\n", ind, g->sliding[i] ? "sliding_attention" : "full_attention",
                      i + 1 < g->n_layers ? "," : "");
    gm_buf_printf(b, "%s],\n", ind);
}

static void rope_json(gm_buf *b, const char *ind) {
    gm_buf_printf(b,
                  "%s\"rope_parameters\": {\n"
                  "%s    \"full_attention\": {\n"
                  "%s        \"partial_rotary_factor\": 0.25,\n"
                  "%s        \"rope_theta\": 1000000.0,\n"
                  "%s        \"rope_type\": \"proportional\"\n"
                  "%s    },\n"
                  "%s    \"sliding_attention\": {\n"
                  "%s        \"rope_theta\": 10000.0,\n"
                  "%s        \"rope_type\": \"default\"\n"
                  "%s    }\n"
                  "%s},\n",
                  ind, ind, ind, ind, ind, ind, ind, ind, ind, ind, ind);
}

static void quant_json(gm_buf *b, const char *key, const g4_geom *g) {
    gm_buf_printf(b, "    \"%s\": {\n        \"group_size\": 64,\n        \"bits\": 4,\n        \"mode\": \"affine\"",
                  key);
    static const char *mlp[3] = {"gate_proj", "down_proj", "up_proj"}; /* mlx-lm's order in the fixture */
    for (int i = 0; i < g->n_layers; i++)
        for (int k = 0; k < 3; k++)
            gm_buf_printf(b,
                          ",\n        \"model.layers.%d.mlp.%s\": {\n            \"group_size\": 64,\n"
                          "            \"bits\": 8\n        }",
                          i, mlp[k]);
    gm_buf_printf(b, "\n    },\n");
}

/* config.json of the QAT target, key for key the fixture's (gemma4_dense_mlx_q4_mlp8). */
static int write_qat_config(const char *dir, const g4_geom *g) {
    gm_buf b = {0};
    gm_buf_printf(&b,
                  "{\n"
                  "    \"architectures\": [\n        \"Gemma4ForCausalLM\"\n    ],\n"
                  "    \"attention_bias\": false,\n"
                  "    \"attention_dropout\": 0.0,\n"
                  "    \"attention_k_eq_v\": true,\n"
                  "    \"bos_token_id\": 2,\n"
                  "    \"dtype\": \"bfloat16\",\n"
                  "    \"enable_moe_block\": false,\n"
                  "    \"eos_token_id\": [\n        1,\n        106,\n        50\n    ],\n"
                  "    \"final_logit_softcapping\": 30.0,\n"
                  "    \"global_head_dim\": %d,\n"
                  "    \"head_dim\": %d,\n"
                  "    \"hidden_activation\": \"gelu_pytorch_tanh\",\n"
                  "    \"hidden_size\": %d,\n"
                  "    \"hidden_size_per_layer_input\": 0,\n"
                  "    \"initializer_range\": 0.02,\n"
                  "    \"intermediate_size\": %d,\n",
                  g->hd_f, g->hd_s, g->hidden, g->inter);
    layer_types_json(&b, g, "    ");
    gm_buf_printf(&b,
                  "    \"max_position_embeddings\": %d,\n"
                  "    \"model_type\": \"gemma4_text\",\n"
                  "    \"moe_intermediate_size\": null,\n"
                  "    \"num_attention_heads\": %d,\n"
                  "    \"num_experts\": null,\n"
                  "    \"num_global_key_value_heads\": %d,\n"
                  "    \"num_hidden_layers\": %d,\n"
                  "    \"num_key_value_heads\": %d,\n"
                  "    \"num_kv_shared_layers\": 0,\n"
                  "    \"pad_token_id\": 0,\n",
                  g->max_pos, g->heads, g->kv_f, g->n_layers, g->kv_s);
    quant_json(&b, "quantization", g);
    quant_json(&b, "quantization_config", g);
    gm_buf_printf(&b, "    \"rms_norm_eps\": 1e-06,\n");
    rope_json(&b, "    ");
    gm_buf_printf(&b,
                  "    \"sliding_window\": %d,\n"
                  "    \"tie_word_embeddings\": true,\n"
                  "    \"top_k_experts\": null,\n"
                  "    \"use_bidirectional_attention\": null,\n"
                  "    \"use_cache\": true,\n"
                  "    \"use_double_wide_mlp\": false,\n"
                  "    \"vocab_size\": %d,\n"
                  "    \"vocab_size_per_layer_input\": %d\n"
                  "}",
                  g->window, g->vocab, g->vocab);
    int rc = b.oom ? -1 : gm_write_text_file(dir, "config.json", b.p, b.len);
    gm_buf_free(&b);
    return rc;
}

/* config.json of the assistant (fixture gemma4_dense_assistant; 31B values, docs/gemma.md 5.1). */
static int write_assistant_config(const char *dir, const g4_geom *g, int backbone) {
    gm_buf b = {0};
    gm_buf_printf(&b,
                  "{\n"
                  "  \"architectures\": [\n    \"Gemma4AssistantForCausalLM\"\n  ],\n"
                  "  \"backbone_hidden_size\": %d,\n"
                  "  \"centroid_intermediate_top_k\": 32,\n"
                  "  \"dtype\": \"bfloat16\",\n"
                  "  \"model_type\": \"gemma4_assistant\",\n"
                  "  \"num_centroids\": 2048,\n"
                  "  \"text_config\": {\n"
                  "    \"attention_bias\": false,\n"
                  "    \"attention_dropout\": 0.0,\n"
                  "    \"attention_k_eq_v\": true,\n"
                  "    \"bos_token_id\": 2,\n"
                  "    \"dtype\": \"bfloat16\",\n"
                  "    \"enable_moe_block\": false,\n"
                  "    \"eos_token_id\": 1,\n"
                  "    \"final_logit_softcapping\": 30.0,\n"
                  "    \"global_head_dim\": %d,\n"
                  "    \"head_dim\": %d,\n"
                  "    \"hidden_activation\": \"gelu_pytorch_tanh\",\n"
                  "    \"hidden_size\": %d,\n"
                  "    \"hidden_size_per_layer_input\": 0,\n"
                  "    \"initializer_range\": 0.02,\n"
                  "    \"intermediate_size\": %d,\n",
                  backbone, g->hd_f, g->hd_s, g->hidden, g->inter);
    /* two-space style inside text_config */
    gm_buf_printf(&b, "    \"layer_types\": [\n");
    for (int i = 0; i < g->n_layers; i++)
        gm_buf_printf(&b, "      \"%s\"%s\n", g->sliding[i] ? "sliding_attention" : "full_attention",
                      i + 1 < g->n_layers ? "," : "");
    gm_buf_printf(&b,
                  "    ],\n"
                  "    \"max_position_embeddings\": %d,\n"
                  "    \"model_type\": \"gemma4_text\",\n"
                  "    \"moe_intermediate_size\": null,\n"
                  "    \"num_attention_heads\": %d,\n"
                  "    \"num_experts\": null,\n"
                  "    \"num_global_key_value_heads\": %d,\n"
                  "    \"num_hidden_layers\": %d,\n"
                  "    \"num_key_value_heads\": %d,\n"
                  "    \"num_kv_shared_layers\": %d,\n"
                  "    \"pad_token_id\": 0,\n"
                  "    \"rms_norm_eps\": 1e-06,\n"
                  "    \"rope_parameters\": {\n"
                  "      \"full_attention\": {\n"
                  "        \"partial_rotary_factor\": 0.25,\n"
                  "        \"rope_theta\": 1000000.0,\n"
                  "        \"rope_type\": \"proportional\"\n"
                  "      },\n"
                  "      \"sliding_attention\": {\n"
                  "        \"rope_theta\": 10000.0,\n"
                  "        \"rope_type\": \"default\"\n"
                  "      }\n"
                  "    },\n"
                  "    \"sliding_window\": %d,\n"
                  "    \"tie_word_embeddings\": true,\n"
                  "    \"top_k_experts\": null,\n"
                  "    \"use_bidirectional_attention\": null,\n"
                  "    \"use_cache\": true,\n"
                  "    \"use_double_wide_mlp\": false,\n"
                  "    \"vocab_size\": %d,\n"
                  "    \"vocab_size_per_layer_input\": 0\n"
                  "  },\n"
                  "  \"tie_word_embeddings\": true,\n"
                  "  \"use_ordered_embeddings\": false\n"
                  "}\n",
                  g->max_pos, g->heads, g->kv_f, g->n_layers, g->kv_s, g->n_layers, g->window, g->vocab);
    int rc = b.oom ? -1 : gm_write_text_file(dir, "config.json", b.p, b.len);
    gm_buf_free(&b);
    return rc;
}

static const char GENERATION_CONFIG[] = "{\n"
                                        "  \"bos_token_id\": 2,\n"
                                        "  \"do_sample\": true,\n"
                                        "  \"eos_token_id\": [\n    1,\n    106,\n    50\n  ],\n"
                                        "  \"pad_token_id\": 0,\n"
                                        "  \"temperature\": 1.0,\n"
                                        "  \"top_k\": 64,\n"
                                        "  \"top_p\": 0.95\n"
                                        "}";

static const char README_MLX[] =
    "---\nlanguage: en\nlibrary_name: mlx\npipeline_tag: text-generation\ntags:\n- mlx\n---\n\n"
    "Synthetic checkpoint written by lockstep-gen-model: the geometry and MLX quantization layout of\n"
    "Gemma 4 31B QAT (4-bit g64, 8-bit g64 MLP) with deterministic pseudo-random weights.\n"
    "For benchmarks and exactness tests only; the text it generates is meaningless.\n";

static const char README_ASSISTANT[] =
    "Synthetic checkpoint written by lockstep-gen-model: the geometry of the bf16 Gemma 4 31B assistant\n"
    "(MTP drafter) with deterministic pseudo-random weights. Pairs with a gemma4-31b-qat directory from\n"
    "the same tool. For benchmarks and exactness tests only.\n";

static const char CHAT_TEMPLATE[] =
    "{{ bos_token }}{% for m in messages %}<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] | trim }}<turn|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|turn>model\n"
    "{% endif %}";

static int side_files(const char *dir, int32_t vocab, bool mlx) {
    if (gm_write_tokenizer_files(dir, vocab) != 0) return -1;
    if (gm_write_text_file(dir, "generation_config.json", GENERATION_CONFIG, strlen(GENERATION_CONFIG)) != 0) return -1;
    const char *readme = mlx ? README_MLX : README_ASSISTANT;
    if (gm_write_text_file(dir, "README.md", readme, strlen(readme)) != 0) return -1;
    if (mlx && gm_write_text_file(dir, "chat_template.jinja", CHAT_TEMPLATE, strlen(CHAT_TEMPLATE)) != 0) return -1;
    return 0;
}

static void finish_sizes(gm_tensor_list *l) {
    for (int i = 0; i < l->n; i++) l->v[i].nbytes = l->v[i].rows * l->v[i].row_bytes;
}

int gm_kind_gemma4_qat(gm_args *a) {
    int n_layers = a->layers > 0 ? a->layers : 60;
    if (n_layers > 60) {
        fprintf(stderr, "lockstep-gen-model: --layers %d: the 31B has 60\n", n_layers);
        return 2;
    }
    g4_geom g;
    geom_31b(&g, n_layers);
    gm_tensor_list l = {0};
    build_qat(&l, &g, a->seed);
    finish_sizes(&l);
    int n_full = 0;
    for (int i = 0; i < g.n_layers; i++) n_full += !g.sliding[i];
    printf("gemma4-31b-qat: %d layers (%d full attention), hidden %d, vocab %d -> %s\n", g.n_layers, n_full, g.hidden,
           g.vocab, a->out);
    if (!a->dry_run && gm_mkdir_p(a->out) != 0) return 1;
    int rc = write_checkpoint(a, &l, "mlx", a->shard_bytes, true);
    if (rc == 0 && !a->dry_run) rc = write_qat_config(a->out, &g);
    if (rc == 0 && !a->dry_run) rc = side_files(a->out, g.vocab, true);
    gm_tensor_list_free(&l);
    return rc ? 1 : 0;
}

int gm_kind_gemma4_assistant(gm_args *a) {
    if (a->layers > 0) fprintf(stderr, "lockstep-gen-model: --layers is ignored for the assistant (4 layers)\n");
    g4_geom g;
    geom_31b(&g, 4); /* S, S, S, F: the kinds of the target's last sliding and full layers */
    g.hidden = 1024;
    g.inter = 8192;
    gm_tensor_list l = {0};
    build_assistant(&l, &g, 5376, a->seed ^ 0x617373697374616eull);
    finish_sizes(&l);
    printf("gemma4-31b-assistant: 4 layers, hidden %d, backbone 5376, vocab %d -> %s\n", g.hidden, g.vocab, a->out);
    if (!a->dry_run && gm_mkdir_p(a->out) != 0) return 1;
    /* transformers writes one model.safetensors below its shard limit, and no index */
    int rc = write_checkpoint(a, &l, "pt", UINT64_MAX, false);
    if (rc == 0 && !a->dry_run) rc = write_assistant_config(a->out, &g, 5376);
    if (rc == 0 && !a->dry_run) rc = side_files(a->out, g.vocab, false);
    gm_tensor_list_free(&l);
    return rc ? 1 : 0;
}
