/* Gemma 4 assistant (MTP drafter): loading a checkpoint directory (config.json and
 * safetensors, HF or MLX spellings), the target-compatibility check and the accessors. The
 * step and the drafting loop are in assistant_step.c. See assistant.h and docs/gemma.md 5. */
#include "model/assistant_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "format/hf_config.h"
#include "format/safetensors.h"
#include "kernels/backend.h"

/* ---------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------- */

typedef struct {
    ls_assistant *a;
    char *err;
    size_t errlen;
    bool failed;
} loader;

__attribute__((format(printf, 2, 3))) static void lfail(loader *L, const char *fmt, ...) {
    if (L->failed) return;
    L->failed = true;
    if (!L->err || !L->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err, L->errlen, fmt, ap);
    va_end(ap);
}

/* HF names, with the MLX spellings tried too: an optional "language_model." prefix, or the
 * name without its leading "model." (docs/gemma.md 6.3). */
static const ls_st_tensor *tfind(const ls_st_set *st, const char *name) {
    const ls_st_tensor *t = ls_st_find(st, name);
    if (t) return t;
    char buf[320];
    snprintf(buf, sizeof buf, "language_model.%s", name);
    if ((t = ls_st_find(st, buf))) return t;
    if (strncmp(name, "model.", 6) == 0) return ls_st_find(st, name + 6);
    return NULL;
}

static const char *shape_str(const ls_st_tensor *t, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int32_t i = 0; i < t->n_dims && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

static bool float_dtype(ls_st_dtype d) {
    return d == LS_ST_F32 || d == LS_ST_F16 || d == LS_ST_BF16;
}

static ls_type ls_type_of(ls_st_dtype d) {
    return d == LS_ST_F32 ? LS_TYPE_F32 : d == LS_ST_F16 ? LS_TYPE_F16 : LS_TYPE_BF16;
}

static float elem_f32(const void *p, ls_st_dtype d, int64_t i) {
    if (d == LS_ST_F32) {
        float f;
        memcpy(&f, (const uint8_t *)p + 4 * i, 4);
        return f;
    }
    uint16_t u;
    memcpy(&u, (const uint8_t *)p + 2 * i, 2);
    return d == LS_ST_F16 ? ls_f16_to_f32(u) : ls_bf16_to_f32(u);
}

/* A float vector of n elements (shape [n]) as an owned f32 copy. */
static float *load_vec(loader *L, const char *name, int64_t n) {
    if (L->failed) return NULL;
    const ls_st_tensor *t = tfind(L->a->st, name);
    char sb[96];
    if (!t) {
        lfail(L, "assistant: missing tensor '%s'", name);
        return NULL;
    }
    if (!float_dtype(t->dtype)) {
        lfail(L, "assistant: tensor '%s' has dtype %s (expected F32, F16 or BF16)", name, ls_st_dtype_name(t->dtype));
        return NULL;
    }
    if (t->n_dims != 1 || t->shape[0] != n) {
        lfail(L, "assistant: tensor '%s' has shape %s (expected [%lld])", name, shape_str(t, sb, sizeof sb),
              (long long)n);
        return NULL;
    }
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) {
        lfail(L, "assistant: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) v[i] = elem_f32(t->data, t->dtype, i);
    return v;
}

/* A matrix W [rows x cols] (name without ".weight"): float, or MLX affine when
 * <name>.scales exists (bits and group derived from the packed/scales widths and
 * cross-checked with config.json's quantization block when it has one). */
static void load_mat(loader *L, const char *base, int64_t rows, int64_t cols, ls_weight *w) {
    if (L->failed) return;
    char name[256], sname[256], bname[256], sb[96];
    snprintf(name, sizeof name, "%s.weight", base);
    snprintf(sname, sizeof sname, "%s.scales", base);
    snprintf(bname, sizeof bname, "%s.biases", base);
    const ls_st_tensor *t = tfind(L->a->st, name);
    if (!t) {
        lfail(L, "assistant: missing tensor '%s'", name);
        return;
    }
    memset(w, 0, sizeof *w);
    const ls_st_tensor *s = tfind(L->a->st, sname);
    if (!s) {
        if (!float_dtype(t->dtype)) {
            lfail(L, "assistant: tensor '%s' has dtype %s (expected F32, F16 or BF16, or U32 with %s)", name,
                  ls_st_dtype_name(t->dtype), sname);
            return;
        }
        if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols) {
            lfail(L, "assistant: tensor '%s' has shape %s (expected [%lld, %lld])", name, shape_str(t, sb, sizeof sb),
                  (long long)rows, (long long)cols);
            return;
        }
        w->type = ls_type_of(t->dtype);
        w->data = t->data;
        w->rows = rows;
        w->cols = cols;
        w->row_bytes = (uint64_t)cols * (t->dtype == LS_ST_F32 ? 4u : 2u);
        return;
    }
    const ls_st_tensor *b = tfind(L->a->st, bname);
    if (!b) {
        lfail(L, "assistant: quantized tensor '%s' has scales but no '%s'", name, bname);
        return;
    }
    if (t->dtype != LS_ST_U32 || t->n_dims != 2 || t->shape[0] != rows || t->shape[1] <= 0) {
        lfail(L, "assistant: quantized tensor '%s' is %s %s (expected U32 [%lld, cols*bits/32])", name,
              ls_st_dtype_name(t->dtype), shape_str(t, sb, sizeof sb), (long long)rows);
        return;
    }
    if (!float_dtype(s->dtype) || s->dtype != b->dtype || s->n_dims != 2 || b->n_dims != 2 || s->shape[0] != rows ||
        b->shape[0] != rows || s->shape[1] != b->shape[1] || s->shape[1] <= 0 || cols % s->shape[1] != 0) {
        lfail(L, "assistant: scales/biases of '%s' are %s %s / %s (expected one float dtype, [%lld, cols/group])", name,
              ls_st_dtype_name(s->dtype), shape_str(s, sb, sizeof sb), ls_st_dtype_name(b->dtype), (long long)rows);
        return;
    }
    int64_t group = cols / s->shape[1], packed_bits = t->shape[1] * 32;
    if (packed_bits % cols != 0) {
        lfail(L, "assistant: quantized tensor '%s': %lld packed words per row do not fit %lld columns", name,
              (long long)t->shape[1], (long long)cols);
        return;
    }
    int32_t bits = (int32_t)(packed_bits / cols), cbits, cgroup;
    if (ls_hf_quant_for(&L->a->cfg, base, &cbits, &cgroup) && (cbits != bits || cgroup != group)) {
        lfail(L, "assistant: quantized tensor '%s' is %d-bit group %lld but config.json says %d-bit group %d", name,
              bits, (long long)group, cbits, cgroup);
        return;
    }
    w->type = LS_TYPE_MLX_AFFINE;
    w->data = t->data;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = (uint64_t)cols * (uint64_t)bits / 8;
    w->scales = s->data;
    w->biases = b->data;
    w->sb_type = ls_type_of(s->dtype);
    w->bits = bits;
    w->group = (int32_t)group;
    if (ls_mlx_affine_check(w) != 0) {
        lfail(L, "assistant: quantized tensor '%s': unsupported %d-bit group %lld layout", name, bits,
              (long long)group);
        return;
    }
    L->a->quantized = true;
}

static void load_ordering(loader *L) {
    ls_assistant *a = L->a;
    if (L->failed) return;
    const char *name = "masked_embedding.token_ordering";
    const ls_st_tensor *t = tfind(a->st, name);
    char sb[96];
    if (!t) {
        lfail(L, "assistant: missing tensor '%s' (use_ordered_embeddings is true)", name);
        return;
    }
    if ((t->dtype != LS_ST_I64 && t->dtype != LS_ST_I32) || t->n_dims != 1 || t->shape[0] != a->vocab) {
        lfail(L, "assistant: tensor '%s' is %s %s (expected I64 [%d])", name, ls_st_dtype_name(t->dtype),
              shape_str(t, sb, sizeof sb), a->vocab);
        return;
    }
    a->ordering = malloc(sizeof(int32_t) * (size_t)a->vocab);
    uint8_t *seen = calloc((size_t)a->vocab, 1);
    if (!a->ordering || !seen) {
        free(seen);
        lfail(L, "assistant: out of memory");
        return;
    }
    for (int32_t i = 0; i < a->vocab && !L->failed; i++) {
        int64_t v;
        if (t->dtype == LS_ST_I64) {
            memcpy(&v, (const uint8_t *)t->data + 8 * (size_t)i, 8);
        } else {
            int32_t v32;
            memcpy(&v32, (const uint8_t *)t->data + 4 * (size_t)i, 4);
            v = v32;
        }
        if (v < 0 || v >= a->vocab || seen[v])
            lfail(L, "assistant: '%s' is not a permutation of the vocabulary (entry %d = %lld)", name, i, (long long)v);
        else
            seen[v] = 1;
        a->ordering[i] = (int32_t)v;
    }
    free(seen);
}

/* The geometry of one layer type; all assistant layers of a type read the same target cache,
 * so they must agree. */
static void type_geom(loader *L, bool sliding, int32_t *hd, int32_t *kv) {
    const ls_hf_config *c = &L->a->cfg;
    *hd = *kv = 0;
    for (int32_t i = 0; i < c->n_layers && !L->failed; i++) {
        if (c->layer_sliding[i] != sliding) continue;
        if (*hd == 0) {
            *hd = c->layer_head_dim[i];
            *kv = c->layer_kv_heads[i];
        } else if (*hd != c->layer_head_dim[i] || *kv != c->layer_kv_heads[i]) {
            lfail(L, "assistant config: %s layers disagree on head_dim / KV heads (layer %d: %d / %d vs %d / %d)",
                  sliding ? "sliding" : "full", i, c->layer_head_dim[i], c->layer_kv_heads[i], *hd, *kv);
        }
        if (!L->failed && (*kv <= 0 || c->n_heads % *kv != 0))
            lfail(L, "assistant config: num_attention_heads %d is not a multiple of layer %d's %d KV heads", c->n_heads,
                  i, *kv);
    }
}

static void config_check(loader *L) {
    ls_assistant *a = L->a;
    const ls_hf_config *c = &a->cfg;
    if (c->arch != LS_ARCH_GEMMA4_ASSISTANT) {
        lfail(L, "assistant config: model_type '%s' is not a Gemma 4 assistant (expected gemma4_assistant)",
              c->model_type);
        return;
    }
    if (c->backbone_hidden_size <= 0) lfail(L, "assistant config: backbone_hidden_size missing or not positive");
    if (!c->tie_word_embeddings)
        lfail(L, "assistant config: tie_word_embeddings false is not supported (the head is model.embed_tokens)");
    if (c->hidden_size_per_layer_input > 0)
        lfail(L, "assistant config: hidden_size_per_layer_input %d (the drafter has no per-layer inputs)",
              c->hidden_size_per_layer_input);
    if (c->enable_moe_block) lfail(L, "assistant config: enable_moe_block is not supported in a drafter");
    if (c->use_ordered_embeddings &&
        (c->num_centroids <= 0 || c->centroid_intermediate_top_k <= 0 ||
         c->centroid_intermediate_top_k > c->num_centroids || c->vocab_size % c->num_centroids != 0))
        lfail(L, "assistant config: bad centroid head (num_centroids %d, centroid_intermediate_top_k %d, vocab %d)",
              c->num_centroids, c->centroid_intermediate_top_k, c->vocab_size);
    type_geom(L, true, &a->hd_s, &a->kv_s);
    type_geom(L, false, &a->hd_f, &a->kv_f);
    if (L->failed) return;
    a->hidden = c->hidden_size;
    a->bb = c->backbone_hidden_size;
    a->vocab = c->vocab_size;
    a->n_layers = c->n_layers;
    a->n_heads = c->n_heads;
    a->window = c->sliding_window;
    a->eps = c->rms_norm_eps;
    a->centroid_head = c->use_ordered_embeddings;
    a->n_centroids = c->num_centroids;
    a->top_k = c->centroid_intermediate_top_k;
    a->per_cluster = a->centroid_head ? a->vocab / a->n_centroids : 0;
}

static float *falloc(loader *L, int64_t n) {
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) lfail(L, "assistant: out of memory");
    return p;
}

static void load_layers(loader *L) {
    ls_assistant *a = L->a;
    const ls_hf_config *c = &a->cfg;
    a->layers = calloc((size_t)a->n_layers, sizeof *a->layers);
    if (!a->layers) {
        lfail(L, "assistant: out of memory");
        return;
    }
    char p[160], n[224];
    for (int32_t i = 0; i < a->n_layers && !L->failed; i++) {
        asst_layer *ly = &a->layers[i];
        ly->sliding = c->layer_sliding[i];
        ly->hd = c->layer_head_dim[i];
        ly->n_kv = c->layer_kv_heads[i];
        ly->inter = c->layer_intermediate[i];
        ly->theta = ly->sliding ? c->rope_theta_sliding : c->rope_theta_full;
        ly->freq_scale = !ly->sliding && c->rope_scaling_full > 0 ? 1.0f / c->rope_scaling_full : 1.0f;
        /* HF: int(partial_rotary_factor * head_dim // 2) rotated pairs, identity for the rest */
        float partial = ly->sliding ? 1.0f : c->rope_partial_full;
        ly->n_rot_pairs = (int32_t)floor((double)partial * (double)ly->hd / 2.0);
        if (ly->n_rot_pairs < 0 || ly->n_rot_pairs > ly->hd / 2) ly->n_rot_pairs = ly->hd / 2;
        if (ly->hd / 2 > 512) lfail(L, "assistant config: head_dim %d larger than 1024 is not supported", ly->hd);
        int64_t qd = (int64_t)a->n_heads * ly->hd;
        if (qd > a->max_qdim) a->max_qdim = (int32_t)qd;
        if (ly->inter > a->max_inter) a->max_inter = ly->inter;
        snprintf(p, sizeof p, "model.layers.%d", i);
#define LN(field, nm)                                                                                                  \
    do {                                                                                                               \
        snprintf(n, sizeof n, "%s.%s", p, nm);                                                                         \
        ly->field = load_vec(L, n, a->hidden);                                                                         \
    } while (0)
        LN(in_ln, "input_layernorm.weight");
        LN(post_attn_ln, "post_attention_layernorm.weight");
        LN(pre_ff_ln, "pre_feedforward_layernorm.weight");
        LN(post_ff_ln, "post_feedforward_layernorm.weight");
#undef LN
        snprintf(n, sizeof n, "%s.self_attn.q_norm.weight", p);
        ly->q_norm = load_vec(L, n, ly->hd);
        snprintf(n, sizeof n, "%s.layer_scalar", p);
        float *s = load_vec(L, n, 1);
        if (s) ly->scalar = s[0];
        free(s);
        snprintf(n, sizeof n, "%s.self_attn.q_proj", p);
        load_mat(L, n, qd, a->hidden, &ly->q);
        snprintf(n, sizeof n, "%s.self_attn.o_proj", p);
        load_mat(L, n, a->hidden, qd, &ly->o);
        snprintf(n, sizeof n, "%s.mlp.gate_proj", p);
        load_mat(L, n, ly->inter, a->hidden, &ly->gate);
        snprintf(n, sizeof n, "%s.mlp.up_proj", p);
        load_mat(L, n, ly->inter, a->hidden, &ly->up);
        snprintf(n, sizeof n, "%s.mlp.down_proj", p);
        load_mat(L, n, a->hidden, ly->inter, &ly->down);
    }
}

int ls_assistant_load(const char *dir, ls_assistant **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    ls_assistant *a = calloc(1, sizeof *a);
    if (!a) {
        if (err && errlen) snprintf(err, errlen, "assistant: out of memory");
        return -1;
    }
    loader L = {a, err, errlen, false};
    char inner[512];
    if (ls_hf_config_load(dir, &a->cfg, inner, sizeof inner) != 0) {
        lfail(&L, "assistant: %s", inner);
        goto fail;
    }
    config_check(&L);
    if (L.failed) goto fail;
    if (ls_st_open_dir_ex(dir, LS_ST_OPEN_HUGE, &a->st, inner, sizeof inner) != 0) {
        lfail(&L, "assistant: %s", inner);
        goto fail;
    }
    load_mat(&L, "pre_projection", a->hidden, 2 * (int64_t)a->bb, &a->pre);
    load_mat(&L, "post_projection", a->bb, a->hidden, &a->post);
    load_mat(&L, "model.embed_tokens", a->vocab, a->hidden, &a->embd);
    a->norm = load_vec(&L, "model.norm.weight", a->hidden);
    load_layers(&L);
    if (a->centroid_head) {
        load_mat(&L, "masked_embedding.centroids", a->n_centroids, a->hidden, &a->centroids);
        load_ordering(&L);
    }
    if (L.failed) goto fail;
    if (a->centroid_head) {
        int64_t nc = (int64_t)a->top_k * a->per_cluster;
        a->h_cscore = falloc(&L, a->n_centroids);
        a->h_clogits = falloc(&L, nc);
        a->cand = malloc(sizeof(int32_t) * (size_t)nc);
        a->csel = malloc(sizeof(int32_t) * (size_t)a->top_k);
        if (!a->cand || !a->csel) lfail(&L, "assistant: out of memory");
    }
    if (L.failed) goto fail;
    *out = a;
    return 0;
fail:
    ls_assistant_free(a);
    return -1;
}

int ls_assistant_for_each_range(const ls_assistant *a, int (*fn)(void *ud, const void *base, size_t bytes), void *ud) {
    const void *base;
    size_t size;
    for (int32_t i = 0; i < ls_st_n_files(a->st); i++) {
        ls_st_file_mapping(a->st, i, &base, &size);
        if (size && fn(ud, base, size) != 0) return -1;
    }
    size_t hb = sizeof(float) * (size_t)a->hidden;
    if (fn(ud, a->norm, hb) != 0) return -1;
    for (int32_t i = 0; i < a->n_layers; i++) {
        const asst_layer *ly = &a->layers[i];
        if (fn(ud, ly->in_ln, hb) || fn(ud, ly->post_attn_ln, hb) || fn(ud, ly->pre_ff_ln, hb) ||
            fn(ud, ly->post_ff_ln, hb) || fn(ud, ly->q_norm, sizeof(float) * (size_t)ly->hd))
            return -1;
    }
    return 0;
}

void ls_assistant_free(ls_assistant *a) {
    if (!a) return;
    if (a->layers) {
        for (int32_t i = 0; i < a->n_layers; i++) {
            asst_layer *ly = &a->layers[i];
            free(ly->in_ln);
            free(ly->post_attn_ln);
            free(ly->pre_ff_ln);
            free(ly->post_ff_ln);
            free(ly->q_norm);
        }
        free(a->layers);
    }
    free(a->norm);
    free(a->ordering);
    ls_asst_scratch_release(a);
    free(a->h_cscore);
    free(a->h_clogits);
    free(a->cand);
    free(a->csel);
    ls_st_close(a->st);
    ls_hf_config_free(&a->cfg);
    free(a);
}

void ls_assistant_get_info(const ls_assistant *a, ls_assistant_info *info) {
    memset(info, 0, sizeof *info);
    info->hidden = a->hidden;
    info->backbone = a->bb;
    info->vocab = a->vocab;
    info->n_layers = a->n_layers;
    info->n_heads = a->n_heads;
    info->head_dim_sliding = a->hd_s;
    info->head_dim_full = a->hd_f;
    info->kv_heads_sliding = a->kv_s;
    info->kv_heads_full = a->kv_f;
    info->sliding_window = a->window;
    info->intermediate = a->max_inter;
    info->centroid_head = a->centroid_head;
    info->n_centroids = a->n_centroids;
    info->centroid_top_k = a->top_k;
    info->quantized = a->quantized;
}

int64_t ls_assistant_max_cols(const ls_assistant *a) {
    int64_t m = 2 * (int64_t)a->bb;
    if (a->hidden > m) m = a->hidden;
    if (a->max_qdim > m) m = a->max_qdim;
    if (a->max_inter > m) m = a->max_inter;
    return m;
}

int ls_assistant_check_target(const ls_assistant *a, const ls_asst_target_geom *t, char *err, size_t errlen) {
#define MISMATCH(...)                                                                                                  \
    do {                                                                                                               \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__);                                                         \
        return -1;                                                                                                     \
    } while (0)
    if (a->bb != t->hidden)
        MISMATCH("assistant does not fit the target: backbone_hidden_size %d != target hidden size %d", a->bb,
                 t->hidden);
    if (a->vocab != t->vocab)
        MISMATCH("assistant does not fit the target: vocab_size %d != target vocabulary %d", a->vocab, t->vocab);
    if (a->hd_s) {
        if (t->head_dim_sliding <= 0 || t->kv_heads_sliding <= 0)
            MISMATCH("assistant does not fit the target: it has sliding-attention layers, the target has none");
        if (a->hd_s != t->head_dim_sliding)
            MISMATCH("assistant does not fit the target: sliding head_dim %d != target's %d", a->hd_s,
                     t->head_dim_sliding);
        if (a->kv_s != t->kv_heads_sliding)
            MISMATCH("assistant does not fit the target: sliding KV heads %d != target's %d", a->kv_s,
                     t->kv_heads_sliding);
        if (a->window != t->sliding_window)
            MISMATCH("assistant does not fit the target: sliding_window %d != target's %d", a->window,
                     t->sliding_window);
    }
    if (a->hd_f) {
        if (t->head_dim_full <= 0 || t->kv_heads_full <= 0)
            MISMATCH("assistant does not fit the target: it has full-attention layers, the target has none");
        if (a->hd_f != t->head_dim_full)
            MISMATCH("assistant does not fit the target: full-attention head_dim (global_head_dim) %d != target's %d",
                     a->hd_f, t->head_dim_full);
        if (a->kv_f != t->kv_heads_full)
            MISMATCH("assistant does not fit the target: full-attention KV heads %d != target's %d", a->kv_f,
                     t->kv_heads_full);
    }
#undef MISMATCH
    return 0;
}
