/* Gemma 4 assistant (MTP drafter): loader, target-compatibility check, one drafter step
 * and greedy proposals. See assistant.h and docs/gemma.md 5.
 *
 * Sliding-window keys. The spec (5.4) and mlx-vlm (masks.py: dist < window) let the draft
 * query at position P see the target's keys k in [P-W+1, P-1] (W-1 keys); the backend's
 * attention with strictly_before and window W gives exactly that range. transformers 5.x
 * (create_bidirectional_sliding_window_mask, |q - kv| <= W, then flipped) sees
 * k in [P-W-1, P-1] (W+1 keys) instead. The two agree while P < W and on full layers
 * (all k < P); we follow the spec / mlx-vlm (tests/test_assistant.c checks both: mlx-vlm on
 * every round, transformers where they agree). */
#include "model/assistant.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "format/hf_config.h"
#include "format/safetensors.h"
#include "kernels/backend.h"

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
    /* host side: centroid scores / candidate logits read back, candidate ids */
    float *h_cscore, *h_clogits;
    int32_t *cand, *csel;
    char err[256];
};

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
 * name without its leading "model." (spec 6.3). */
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
    if (ls_st_open_dir(dir, &a->st, inner, sizeof inner) != 0) {
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

/* ---------------------------------------------------------------------------------------
 * Scratch: backend buffers, made for the backend of the first step (and remade if a later
 * step comes with another one)
 * ------------------------------------------------------------------------------------- */

static void scratch_release(ls_assistant *a) {
    if (!a->be) return;
    void *bufs[] = {a->x,    a->h,      a->a,      a->t,     a->q,       a->att,  a->gate, a->up,   a->emb,
                    a->hcur, a->logits, a->cscore, a->crows, a->clogits, a->qpos, a->tok,  a->dcand};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) a->be->ops->release(a->be, bufs[i]);
    a->x = a->h = a->a = a->t = a->q = a->att = a->gate = a->up = a->emb = a->hcur = a->logits = NULL;
    a->cscore = a->crows = a->clogits = NULL;
    a->qpos = a->tok = a->dcand = NULL;
    a->be = NULL;
}

static int scratch_bind(ls_assistant *a, ls_backend *be) {
    if (a->be == be) return 0;
    scratch_release(a);
    a->be = be;
    int64_t mx = a->hidden > a->bb ? a->hidden : a->bb, nc = (int64_t)a->top_k * a->per_cluster;
    bool fail = false;
#define SALLOC(ptr, n)                                                                                                 \
    do {                                                                                                               \
        if ((n) > 0 && !((ptr) = be->ops->alloc(be, sizeof(*(ptr)) * (size_t)(n)))) fail = true;                       \
    } while (0)
    SALLOC(a->x, 2 * (int64_t)a->bb);
    SALLOC(a->h, a->hidden);
    SALLOC(a->a, a->hidden);
    SALLOC(a->t, mx);
    SALLOC(a->q, a->max_qdim);
    SALLOC(a->att, a->max_qdim);
    SALLOC(a->gate, a->max_inter);
    SALLOC(a->up, a->max_inter);
    SALLOC(a->emb, a->bb);
    SALLOC(a->hcur, a->bb);
    SALLOC(a->logits, a->vocab);
    SALLOC(a->qpos, 1);
    SALLOC(a->tok, 1);
    if (a->centroid_head) {
        SALLOC(a->cscore, a->n_centroids);
        SALLOC(a->crows, nc * a->hidden);
        SALLOC(a->clogits, nc);
        SALLOC(a->dcand, nc);
    }
#undef SALLOC
    if (fail) {
        scratch_release(a);
        return -1;
    }
    return 0;
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
    scratch_release(a);
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

/* ---------------------------------------------------------------------------------------
 * One step
 * ------------------------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static int serr(ls_assistant *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof a->err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *ls_assistant_error(const ls_assistant *a) {
    return a->err;
}

void ls_assistant_override_window(ls_assistant *a, int32_t window) {
    a->window = window;
}

static int kv_check(ls_assistant *a, const ls_asst_kv *kv, bool sliding, int32_t hd, int32_t nkv, int32_t P) {
    const char *ty = sliding ? "sliding" : "full";
    if (!kv || !kv->k || !kv->v) return serr(a, "assistant step: no %s-attention K/V given", ty);
    if (kv->head_dim != hd || kv->n_kv != nkv)
        return serr(a, "assistant step: %s K/V has %d heads of %d (expected %d of %d)", ty, kv->n_kv, kv->head_dim, nkv,
                    hd);
    int32_t lo = 0, hi = P - 1;
    if (sliding && P - a->window + 1 > lo) lo = P - a->window + 1;
    if (hi >= lo && (kv->first_pos > lo || kv->first_pos + (int64_t)kv->n_slots <= hi))
        return serr(a, "assistant step: %s K/V holds positions [%d, %lld) but position %d needs [%d, %d]", ty,
                    kv->first_pos, (long long)kv->first_pos + kv->n_slots, P, lo, hi);
    return 0;
}

/* The sparse centroid head (spec 5.5): cluster scores on the backend, the top-k clusters'
 * candidate ids on the host, then the candidates' logits on the backend; the full row
 * (candidates, and a fill value below the smallest elsewhere) is built on the host. */
static void centroid_head(ls_assistant *a, ls_backend *be, const float *h, float *logits) {
    const ls_backend_ops *op = be->ops;
    op->matmul(be, &a->centroids, h, 1, a->cscore);
    op->download(be, a->h_cscore, a->cscore, sizeof(float) * (size_t)a->n_centroids);
    const float *cs = a->h_cscore;
    /* top-k clusters by score, highest first, lowest index on ties (NaN never wins) */
    for (int32_t k = 0; k < a->top_k; k++) {
        int32_t best = -1;
        for (int32_t c = 0; c < a->n_centroids; c++) {
            bool taken = false;
            for (int32_t j = 0; j < k && !taken; j++) taken = a->csel[j] == c;
            if (taken) continue;
            if (best < 0 || cs[c] > cs[best] || (isnan(cs[best]) && !isnan(cs[c]))) best = c;
        }
        a->csel[k] = best;
    }
    int32_t nc = a->top_k * a->per_cluster;
    for (int32_t k = 0; k < a->top_k; k++)
        memcpy(a->cand + (int64_t)k * a->per_cluster, a->ordering + (int64_t)a->csel[k] * a->per_cluster,
               sizeof(int32_t) * (size_t)a->per_cluster);
    /* candidate logits: gather the candidate rows (dequantized) and one f32 matmul over
     * them (a weight made at run time, in backend memory) */
    op->upload(be, a->dcand, a->cand, sizeof(int32_t) * (size_t)nc);
    op->get_rows(be, &a->embd, a->dcand, nc, a->crows);
    ls_weight cw = {.type = LS_TYPE_F32,
                    .data = a->crows,
                    .rows = nc,
                    .cols = a->hidden,
                    .row_bytes = (uint64_t)a->hidden * sizeof(float),
                    .in_backend = true};
    op->matmul(be, &cw, h, 1, a->clogits);
    op->download(be, a->h_clogits, a->clogits, sizeof(float) * (size_t)nc);
    float mn = INFINITY;
    for (int32_t i = 0; i < nc; i++)
        if (a->h_clogits[i] < mn) mn = a->h_clogits[i];
    float fill = mn - 1.0f;
    for (int32_t i = 0; i < a->vocab; i++) logits[i] = fill;
    for (int32_t i = 0; i < nc; i++) logits[a->cand[i]] = a->h_clogits[i];
}

int ls_assistant_step(ls_assistant *a, ls_backend *be, const float *tok_embd_scaled, const float *hprev, int32_t P,
                      const ls_asst_kv *kv_sliding, const ls_asst_kv *kv_full, float *logits, float *hnext) {
    const ls_backend_ops *op = be->ops;
    if (P < 0) return serr(a, "assistant step: negative position %d", P);
    if (a->hd_s && kv_check(a, kv_sliding, true, a->hd_s, a->kv_s, P)) return -1;
    if (a->hd_f && kv_check(a, kv_full, false, a->hd_f, a->kv_f, P)) return -1;
    if (scratch_bind(a, be) != 0) return serr(a, "assistant step: out of memory for its buffers on %s", op->name);
    int64_t H = a->hidden;
    op->copy(be, a->x, tok_embd_scaled, sizeof(float) * (size_t)a->bb);
    op->copy(be, a->x + a->bb, hprev, sizeof(float) * (size_t)a->bb);
    op->upload(be, a->qpos, &P, sizeof P);
    op->matmul(be, &a->pre, a->x, 1, a->h);
    /* Fused ops (backend.h; the same bits as the sequences they replace): every residual add
     * carries the norm before it and the next norm after it, so a->a always holds the next
     * block's normed input, and after the last layer the output norm of h. */
    if (a->n_layers > 0) op->rmsnorm_to(be, a->a, a->h, a->layers[0].in_ln, 1, H, a->eps);
    for (int32_t l = 0; l < a->n_layers; l++) {
        const asst_layer *ly = &a->layers[l];
        const ls_asst_kv *kv = ly->sliding ? kv_sliding : kv_full;
        /* attention: q only; K/V are the target's; a->a = in_ln(h) */
        op->matmul(be, &ly->q, a->a, 1, a->q);
        /* q_norm and the target's rope op, so the query rotates exactly like the target's keys
         * (spec 3.4: pairs (j, j + hd/2), full layers proportional with the exponent over the
         * full dim) */
        op->norm_rope(be, a->q, ly->q_norm, 1, a->n_heads, ly->hd, a->eps, ly->n_rot_pairs, a->qpos, ly->theta,
                      ly->freq_scale);
        ls_attn_args args = {.q = a->q,
                             .out = a->att,
                             .k = kv->k,
                             .v = kv->v,
                             .kv_f32 = kv->f32,
                             .strictly_before = true,
                             .m = 1,
                             .n_head = a->n_heads,
                             .n_kv = kv->n_kv,
                             .hd = ly->hd,
                             .q_pos = a->qpos,
                             .first_pos = kv->first_pos,
                             .n_slots = kv->n_slots,
                             .window = ly->sliding ? a->window : 0,
                             .scale = 1.0f};
        op->attention(be, &args);
        op->matmul(be, &ly->o, a->att, 1, a->t);
        /* h += post_attn_ln(t); a->a = pre_ff_ln(h) */
        op->add_rmsnorm(be, a->h, a->t, ly->post_attn_ln, 1.0f, a->a, ly->pre_ff_ln, 1, H, a->eps);
        /* MLP */
        op->matmul(be, &ly->gate, a->a, 1, a->gate);
        op->matmul(be, &ly->up, a->a, 1, a->up);
        op->gelu_mul(be, a->gate, a->up, ly->inter);
        op->matmul(be, &ly->down, a->gate, 1, a->t);
        /* h = (h + post_ff_ln(t)) * scalar (a scalar of 1 multiplies exactly: backend.h); a->a =
         * the next layer's in_ln(h), or the output norm after the last layer */
        const float *w_next = l + 1 < a->n_layers ? a->layers[l + 1].in_ln : a->norm;
        op->add_rmsnorm(be, a->h, a->t, ly->post_ff_ln, ly->scalar, a->a, w_next, 1, H, a->eps);
    }
    /* hf: the output-normed hidden state, in a->a (written above unless there is no layer) */
    float *hf = a->a;
    if (a->n_layers == 0) op->rmsnorm_to(be, hf, a->h, a->norm, 1, H, a->eps);
    if (hnext) op->matmul(be, &a->post, hf, 1, hnext);
    if (logits) {
        if (a->centroid_head) {
            centroid_head(a, be, hf, logits);
        } else {
            op->matmul(be, &a->embd, hf, 1, a->logits); /* tied dense head, no softcap */
            op->download(be, logits, a->logits, sizeof(float) * (size_t)a->vocab);
        }
    }
    op->sync(be);
    return 0;
}

int ls_assistant_draft(ls_assistant *a, ls_backend *be, const ls_asst_embd *embd, int32_t bonus, const float *hprev,
                       int32_t P, const ls_asst_kv *kv_sliding, const ls_asst_kv *kv_full, int32_t k,
                       ls_asst_choose_fn choose, void *ud, float *logits, int32_t *out) {
    if (!embd || !embd->table || embd->table->cols != a->bb || embd->table->rows < a->vocab)
        return serr(a, "assistant draft: target embedding table must be [>= %d, %d]", a->vocab, a->bb);
    if (k < 0) return serr(a, "assistant draft: negative draft count %d", k);
    if (scratch_bind(a, be) != 0) return serr(a, "assistant draft: out of memory for its buffers on %s", be->ops->name);
    const ls_backend_ops *op = be->ops;
    op->copy(be, a->hcur, hprev, sizeof(float) * (size_t)a->bb);
    int32_t tok = bonus, cnt = 0;
    while (cnt < k) {
        if (tok < 0 || tok >= embd->table->rows)
            return serr(a, "assistant draft: token %d outside the target vocabulary", tok);
        op->upload(be, a->tok, &tok, sizeof tok);
        op->get_rows(be, embd->table, a->tok, 1, a->emb);
        op->scale(be, a->emb, embd->scale, a->bb);
        /* hprev is consumed at the start of the step, so hnext may land in hcur itself */
        if (ls_assistant_step(a, be, a->emb, a->hcur, P, kv_sliding, kv_full, logits, a->hcur) != 0) return -1;
        tok = choose(ud, cnt, logits, a->hcur);
        if (tok < 0) break;
        out[cnt++] = tok;
    }
    return cnt;
}
