/* Loading a Hugging Face or MLX checkpoint directory (config.json + safetensors +
 * tokenizer.json) of Gemma 3 or Gemma 4 into the ls_model representation
 * (docs/gemma.md 2, 6). Weights stay in the mmapped files (BF16/F16/F32 and
 * MLX affine-quantized weights map straight into ls_weight); only norm vectors and
 * scalars are converted to f32 (with Gemma 3's 1 + w folded in). Every tensor's shape,
 * dtype and quantization is checked here, once, so the forward pass can trust them;
 * errors name the tensor or config field. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/hf_config.h"
#include "format/safetensors.h"
#include "kernels/backend.h"
#include "model/model.h"

#define ERRF(...) snprintf(L->err, L->errlen, __VA_ARGS__)

typedef struct {
    ls_model *m;
    const ls_hf_config *hc;
    const char *prefix; /* "model.", "model.language_model.", "language_model.model." */
    bool add_one;       /* Gemma 3: norms store w, the model multiplies by 1 + w */
    char *err;
    size_t errlen;
} hf_loader;

static const ls_st_tensor *find(hf_loader *L, const char *name) {
    char full[512];
    snprintf(full, sizeof full, "%s%s", L->prefix, name);
    return ls_st_find(L->m->st, full);
}

static int float_type(ls_st_dtype d, ls_type *out) {
    switch (d) {
    case LS_ST_F32: *out = LS_TYPE_F32; return 0;
    case LS_ST_F16: *out = LS_TYPE_F16; return 0;
    case LS_ST_BF16: *out = LS_TYPE_BF16; return 0;
    default: return -1;
    }
}

static void shape_str(const ls_st_tensor *t, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < t->n_dims && at + 24 < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
}

/* The tensor's data, or an owned copy when it is not aligned to its element size: the
 * safetensors format does not align tensors (mlx writes headers of any length), and the
 * float kernels read whole uint16_t / float elements. NULL when out of memory. */
static const void *aligned_data(hf_loader *L, const ls_st_tensor *t) {
    size_t es = ls_st_dtype_size(t->dtype);
    if (es <= 1 || (uintptr_t)t->data % es == 0) return t->data;
    float *copy = ls_model_alloc(L->m, t->nbytes + sizeof(float));
    if (!copy || ls_model_own(L->m, copy, t->nbytes + sizeof(float)) != 0) return NULL;
    memcpy(copy, t->data, t->nbytes);
    return copy;
}

/* One bind_linear call: the module, its weight tensor and the expected layout. */
typedef struct {
    const char *mod;
    char name[512]; /* the weight tensor's name under the prefix */
    const ls_st_tensor *t;
    int64_t nexp, rows_total, cols, row0, rows;
    int nd;        /* 3 with experts, else 2 */
    int64_t ne;    /* max(nexp, 1) */
    char shp[128]; /* t's shape, for messages */
} lin_req;

static int lin_bad_shape(hf_loader *L, const lin_req *q) {
    if (q->nexp)
        ERRF("model: tensor '%s%s' has shape [%s], expected [%lld, %lld, %lld]", L->prefix, q->name, q->shp,
             (long long)q->nexp, (long long)q->rows_total, (long long)q->cols);
    else
        ERRF("model: tensor '%s%s' has shape [%s], expected [%lld, %lld]", L->prefix, q->name, q->shp,
             (long long)q->rows_total, (long long)q->cols);
    return -1;
}

/* A BF16 / F16 / F32 weight. */
static int bind_float_linear(hf_loader *L, const lin_req *q, ls_weight *out) {
    const ls_st_tensor *t = q->t;
    ls_type ty;
    if (float_type(t->dtype, &ty) != 0) {
        ERRF("model: tensor '%s%s' has dtype %s (expected BF16, F16 or F32, or MLX scales)", L->prefix, q->name,
             ls_st_dtype_name(t->dtype));
        return -1;
    }
    if (t->shape[q->nd - 1] != q->cols) return lin_bad_shape(L, q);
    size_t es = ls_st_dtype_size(t->dtype);
    const void *data = aligned_data(L, t);
    if (!data) {
        ERRF("model: out of memory");
        return -1;
    }
    for (int64_t e = 0; e < q->ne; e++) {
        ls_weight *w = &out[e];
        memset(w, 0, sizeof *w);
        w->type = ty;
        w->rows = q->rows;
        w->cols = q->cols;
        w->row_bytes = (uint64_t)q->cols * es;
        w->data = (const uint8_t *)data + ((uint64_t)e * (uint64_t)q->rows_total + (uint64_t)q->row0) * w->row_bytes;
    }
    L->m->n_params += q->ne * q->rows * q->cols;
    L->m->weight_bytes += (uint64_t)q->ne * (uint64_t)q->rows * (uint64_t)q->cols * es;
    return 0;
}

/* The bits and group an MLX module is stored with must be config.json's for it. */
static int check_mlx_quant(hf_loader *L, const char *path, int32_t bits, int32_t group) {
    int32_t cb = 0, cg = 0;
    if (!L->hc->quant.present) return 0;
    if (!ls_hf_quant_for(L->hc, path, &cb, &cg)) {
        ERRF("model: '%s' is quantized in the checkpoint but config.json's quantization says it is not", path);
        return -1;
    }
    if (cb != bits || cg != group) {
        ERRF("model: '%s' is stored as %d-bit group %d but config.json's quantization says %d-bit group %d", path, bits,
             group, cb, cg);
        return -1;
    }
    return 0;
}

/* An MLX affine-quantized weight (docs/gemma.md 6.4): U32 packed words, scales sc, biases bi. */
static int bind_mlx_linear(hf_loader *L, const lin_req *q, const ls_st_tensor *sc, const ls_st_tensor *bi,
                           ls_weight *out) {
    const ls_st_tensor *t = q->t;
    int nd = q->nd;
    char sn[512], bn[512];
    snprintf(sn, sizeof sn, "%s.scales", q->mod);
    snprintf(bn, sizeof bn, "%s.biases", q->mod);
    if (!bi) {
        ERRF("model: tensor '%s%s' has scales but no biases", L->prefix, bn);
        return -1;
    }
    ls_type sbt;
    if (t->dtype != LS_ST_U32 || float_type(sc->dtype, &sbt) != 0 || bi->dtype != sc->dtype) {
        ERRF("model: quantized module '%s%s' has dtypes %s/%s/%s (expected U32 weight, float scales = biases)",
             L->prefix, q->mod, ls_st_dtype_name(t->dtype), ls_st_dtype_name(sc->dtype), ls_st_dtype_name(bi->dtype));
        return -1;
    }
    int64_t pc = t->shape[nd - 1];
    if (sc->n_dims != nd || bi->n_dims != nd || (q->nexp && (sc->shape[0] != q->nexp || bi->shape[0] != q->nexp)) ||
        sc->shape[nd - 2] != q->rows_total || bi->shape[nd - 2] != q->rows_total ||
        sc->shape[nd - 1] != bi->shape[nd - 1] || sc->shape[nd - 1] <= 0) {
        char s2[128];
        shape_str(sc, s2, sizeof s2);
        ERRF("model: tensor '%s%s' has shape [%s], inconsistent with its weight [%s]", L->prefix, sn, s2, q->shp);
        return -1;
    }
    int64_t ng = sc->shape[nd - 1], cols = q->cols;
    if (cols % ng != 0 || (pc * 32) % cols != 0) return lin_bad_shape(L, q);
    int32_t bits = (int32_t)(pc * 32 / cols), group = (int32_t)(cols / ng);
    char path[512];
    snprintf(path, sizeof path, "%s%s", L->prefix, q->mod);
    if (check_mlx_quant(L, path, bits, group)) return -1;
    size_t sbs = ls_st_dtype_size(sc->dtype);
    /* The packed words are U32: aligned_data copies them when the file puts them at an
     * offset that is not a multiple of 4 (the GPU kernels load whole words; docs/cuda.md). */
    const void *packed = aligned_data(L, t), *sdata = aligned_data(L, sc), *bdata = aligned_data(L, bi);
    if (!packed || !sdata || !bdata) {
        ERRF("model: out of memory");
        return -1;
    }
    for (int64_t e = 0; e < q->ne; e++) {
        ls_weight *w = &out[e];
        memset(w, 0, sizeof *w);
        w->type = LS_TYPE_MLX_AFFINE;
        w->rows = q->rows;
        w->cols = cols;
        w->bits = bits;
        w->group = group;
        w->sb_type = sbt;
        w->row_bytes = (uint64_t)(cols * bits / 8);
        uint64_t r0 = (uint64_t)e * (uint64_t)q->rows_total + (uint64_t)q->row0;
        w->data = (const uint8_t *)packed + r0 * (uint64_t)pc * 4;
        w->scales = (const uint8_t *)sdata + r0 * (uint64_t)ng * sbs;
        w->biases = (const uint8_t *)bdata + r0 * (uint64_t)ng * sbs;
        if (ls_mlx_affine_check(w) != 0) {
            ERRF("model: quantized module '%s' (%d-bit, group %d) is not supported", path, bits, group);
            return -1;
        }
    }
    L->m->n_params += q->ne * q->rows * cols;
    L->m->weight_bytes += t->nbytes + sc->nbytes + bi->nbytes;
    return 0;
}

/* Bind the linear module `mod` (path under the prefix, without ".weight"): nexp experts
 * (0 = a plain 2-D weight) of [rows_total x cols], taking rows [row0, row0 + rows) of each
 * into out[0..max(nexp,1)). The tensor is "<mod>.weight", or "<mod>" itself for HF's
 * fused expert parameters. MLX-quantized iff "<mod>.scales" exists: bits and group follow
 * from the packed and scales widths and must agree with config.json's quantization. */
static int bind_linear(hf_loader *L, const char *mod, int64_t nexp, int64_t rows_total, int64_t cols, int64_t row0,
                       int64_t rows, ls_weight *out) {
    lin_req q = {.mod = mod, .nexp = nexp, .rows_total = rows_total, .cols = cols, .row0 = row0, .rows = rows};
    snprintf(q.name, sizeof q.name, "%s.weight", mod);
    q.t = find(L, q.name);
    if (!q.t) {
        snprintf(q.name, sizeof q.name, "%s", mod);
        q.t = find(L, q.name);
    }
    if (!q.t) {
        ERRF("model: missing tensor '%s%s.weight'", L->prefix, mod);
        return -1;
    }
    char sn[512];
    snprintf(sn, sizeof sn, "%s.scales", mod);
    const ls_st_tensor *sc = find(L, sn);
    snprintf(sn, sizeof sn, "%s.biases", mod);
    const ls_st_tensor *bi = find(L, sn);
    q.nd = nexp ? 3 : 2;
    q.ne = nexp ? nexp : 1;
    shape_str(q.t, q.shp, sizeof q.shp);
    if (q.t->n_dims != q.nd || (nexp && q.t->shape[0] != nexp) || q.t->shape[q.nd - 2] != rows_total)
        return lin_bad_shape(L, &q);
    return sc ? bind_mlx_linear(L, &q, sc, bi, out) : bind_float_linear(L, &q, out);
}

static int bind_w(hf_loader *L, const char *mod, int64_t rows, int64_t cols, ls_weight *w) {
    return bind_linear(L, mod, 0, rows, cols, 0, rows, w);
}

/* A float vector of n elements as f32 (owned copy); add_one folds Gemma 3's 1 + w in. */
static int bind_vec(hf_loader *L, const char *name, int64_t n, bool add_one, const float **out) {
    const ls_st_tensor *t = find(L, name);
    if (!t) {
        ERRF("model: missing tensor '%s%s'", L->prefix, name);
        return -1;
    }
    ls_type ty;
    if (float_type(t->dtype, &ty) != 0) {
        ERRF("model: tensor '%s%s' has dtype %s (expected BF16, F16 or F32)", L->prefix, name,
             ls_st_dtype_name(t->dtype));
        return -1;
    }
    if (t->n_dims != 1 || t->shape[0] != n) {
        char shp[128];
        shape_str(t, shp, sizeof shp);
        ERRF("model: tensor '%s%s' has shape [%s], expected [%lld]", L->prefix, name, shp, (long long)n);
        return -1;
    }
    float *buf = ls_model_alloc(L->m, sizeof(float) * (size_t)n);
    if (!buf || ls_model_own(L->m, buf, sizeof(float) * (size_t)n) != 0) {
        ERRF("model: out of memory");
        return -1;
    }
    const void *data = aligned_data(L, t);
    if (!data) {
        ERRF("model: out of memory");
        return -1;
    }
    ls_type_get(ty)->dequantize_row(data, buf, n);
    if (add_one)
        for (int64_t i = 0; i < n; i++) buf[i] += 1.0f;
    L->m->n_params += n;
    L->m->weight_bytes += t->nbytes;
    *out = buf;
    return 0;
}

static int bind_scalar(hf_loader *L, const char *name, float *out) {
    const float *v;
    if (bind_vec(L, name, 1, false, &v) != 0) return -1;
    *out = v[0];
    return 0;
}

/* sqrt(hidden) as the reference computes it: rounded to bf16 when the embedding is stored
 * in bf16 (HF casts the scale to the weight dtype; docs/gemma.md 3.1), exact otherwise. */
static float embed_scale(const ls_weight *e, int32_t hidden) {
    float s = sqrtf((float)hidden);
    bool bf16 = e->type == LS_TYPE_BF16 || (e->type == LS_TYPE_MLX_AFFINE && e->sb_type == LS_TYPE_BF16);
    if (!bf16) return s;
    uint32_t u;
    memcpy(&u, &s, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u; /* round to nearest even */
    memcpy(&s, &u, 4);
    return s;
}

static int config_to_model(hf_loader *L) {
    const ls_hf_config *h = L->hc;
    ls_model *m = L->m;
    ls_config *c = &m->cfg;
    if (h->arch == LS_ARCH_GEMMA4_ASSISTANT) {
        ERRF("model: '%s' is a Gemma 4 assistant (drafter) checkpoint, not a target model", h->model_type);
        return -1;
    }
    c->family = h->arch == LS_ARCH_GEMMA3 ? LS_FAMILY_GEMMA3 : LS_FAMILY_GEMMA4;
    snprintf(m->arch, sizeof m->arch, "%s", c->family == LS_FAMILY_GEMMA3 ? "gemma3" : "gemma4");
    c->n_vocab = h->vocab_size;
    c->n_layer = h->n_layers;
    c->n_embd = h->hidden_size;
    c->n_head = h->n_heads;
    c->n_ff = h->intermediate_size;
    c->n_ctx_train = h->max_position_embeddings > 0 ? h->max_position_embeddings : 8192;
    c->sliding_window = h->sliding_window;
    c->eps = h->rms_norm_eps;
    c->rope_base_full = h->rope_theta_full;
    c->rope_base_sliding = h->rope_theta_sliding;
    c->attn_scale = c->family == LS_FAMILY_GEMMA3 ? 1.0f / sqrtf(h->query_pre_attn_scalar) : 1.0f;
    c->final_softcap = h->final_logit_softcapping > 0 ? h->final_logit_softcapping : 0.0f;
    c->ple_dim = h->hidden_size_per_layer_input;
    if (h->enable_moe_block) {
        c->n_expert = h->num_experts;
        c->n_expert_used = h->top_k_experts;
        c->moe_ff = h->moe_intermediate_size;
    }
    c->kv_f32 = true;
    if (!h->tie_word_embeddings) {
        ERRF("model: config.json: tie_word_embeddings false is not supported (Gemma ties the LM head)");
        return -1;
    }
    if (c->n_layer <= 0 || c->n_head <= 0 || c->n_embd <= 0 || c->n_vocab <= 0) {
        ERRF("model: config.json: empty geometry");
        return -1;
    }
    m->layers = ls_model_calloc(m, (size_t)c->n_layer, sizeof(ls_layer));
    if (!m->layers) {
        ERRF("model: out of memory");
        return -1;
    }
    c->n_head_kv = h->layer_kv_heads[0];
    c->head_dim = h->layer_head_dim[0];
    c->max_ff = c->moe_ff;
    for (int i = 0; i < c->n_layer; i++) {
        ls_layer *l = &m->layers[i];
        l->sliding = h->layer_sliding[i] && c->sliding_window > 0;
        l->head_dim = h->layer_head_dim[i];
        l->n_kv = h->layer_kv_heads[i];
        l->n_ff = h->layer_intermediate[i];
        l->k_eq_v = h->layer_k_eq_v[i];
        l->v_norm = c->family == LS_FAMILY_GEMMA4;
        l->kv_src = h->layer_kv_source[i];
        l->layer_scalar = 1.0f;
        if (l->head_dim <= 0 || l->head_dim % 2 || l->head_dim > 1024 || l->n_kv <= 0 || c->n_head % l->n_kv) {
            ERRF("model: config.json: layer %d has head dim %d and %d KV heads (for %d heads)", i, l->head_dim, l->n_kv,
                 c->n_head);
            return -1;
        }
        if (l->kv_src < 0 || l->kv_src > i || m->layers[l->kv_src].kv_src != l->kv_src) {
            ERRF("model: config.json: layer %d reads the KV cache of layer %d", i, l->kv_src);
            return -1;
        }
        if (l->sliding) {
            l->rope_base = h->rope_theta_sliding;
            l->rope_pairs = l->head_dim / 2;
            l->rope_freq_scale = 1.0f;
        } else {
            /* HF: rope_angles = int(partial_rotary_factor * head_dim // 2) */
            l->rope_base = h->rope_theta_full;
            l->rope_pairs = (int32_t)floor((double)h->rope_partial_full * l->head_dim / 2.0);
            l->rope_freq_scale = h->rope_scaling_full > 0 ? 1.0f / h->rope_scaling_full : 1.0f;
        }
        if (l->head_dim > c->max_hd) c->max_hd = l->head_dim;
        if (c->n_head * l->head_dim > c->max_q) c->max_q = c->n_head * l->head_dim;
        if (l->n_kv * l->head_dim > c->max_kv) c->max_kv = l->n_kv * l->head_dim;
        if (l->n_ff > c->max_ff) c->max_ff = l->n_ff;
    }
    return 0;
}

static int bind_layer(hf_loader *L, int i) {
    ls_model *m = L->m;
    const ls_config *c = &m->cfg;
    ls_layer *l = &m->layers[i];
    int64_t d = c->n_embd, q = (int64_t)c->n_head * l->head_dim, kv = (int64_t)l->n_kv * l->head_dim;
    char n[256];
    bool g3 = L->add_one;
#define LIN(name, rows, cols, dst) (snprintf(n, sizeof n, "layers.%d." name, i), bind_w(L, n, rows, cols, dst))
#define VEC(name, len, dst)        (snprintf(n, sizeof n, "layers.%d." name ".weight", i), bind_vec(L, n, len, g3, dst))
    if (LIN("self_attn.q_proj", q, d, &l->wq) || LIN("self_attn.o_proj", d, q, &l->wo) ||
        VEC("self_attn.q_norm", l->head_dim, &l->q_norm) || VEC("input_layernorm", d, &l->attn_norm) ||
        VEC("post_attention_layernorm", d, &l->post_attn_norm) || VEC("pre_feedforward_layernorm", d, &l->ffn_norm) ||
        VEC("post_feedforward_layernorm", d, &l->post_ffw_norm) || LIN("mlp.gate_proj", l->n_ff, d, &l->w_gate) ||
        LIN("mlp.up_proj", l->n_ff, d, &l->w_up) || LIN("mlp.down_proj", d, l->n_ff, &l->w_down))
        return -1;
    /* KV-shared layers have no K/V of their own (any k/v tensors in the file are unused). */
    if (l->kv_src == i) {
        if (LIN("self_attn.k_proj", kv, d, &l->wk) || VEC("self_attn.k_norm", l->head_dim, &l->k_norm)) return -1;
        if (!l->k_eq_v && LIN("self_attn.v_proj", kv, d, &l->wv)) return -1;
    }
    if (c->family == LS_FAMILY_GEMMA4) {
        snprintf(n, sizeof n, "layers.%d.layer_scalar", i);
        if (bind_scalar(L, n, &l->layer_scalar)) return -1;
    }
    if (c->ple_dim > 0) {
        int64_t p = c->ple_dim;
        if (LIN("per_layer_input_gate", p, d, &l->ple_gate) || LIN("per_layer_projection", d, p, &l->ple_proj) ||
            VEC("post_per_layer_input_norm", d, &l->ple_post_norm))
            return -1;
    }
    if (c->n_expert > 0) {
        ls_moe *e = &m->moes[i];
        int64_t E = c->n_expert, I = c->moe_ff;
        l->moe = e;
        e->gate = m->expert_w + (size_t)i * 3 * (size_t)E;
        e->up = e->gate + E;
        e->down = e->up + E;
        if (LIN("router.proj", E, d, &e->router) || VEC("pre_feedforward_layernorm_2", d, &e->pre_norm_2) ||
            VEC("post_feedforward_layernorm_1", d, &e->post_norm_1) ||
            VEC("post_feedforward_layernorm_2", d, &e->post_norm_2))
            return -1;
        snprintf(n, sizeof n, "layers.%d.router.scale", i);
        if (bind_vec(L, n, d, false, &e->router_scale)) return -1;
        snprintf(n, sizeof n, "layers.%d.router.per_expert_scale", i);
        if (bind_vec(L, n, E, false, &e->per_expert_scale)) return -1;
        /* HF fuses gate and up as experts.gate_up_proj [E, 2I, H] (gate = first I rows);
         * mlx-lm splits them into experts.switch_glu.{gate,up,down}_proj [E, out, in]. */
        snprintf(n, sizeof n, "layers.%d.experts.gate_up_proj", i);
        if (find(L, n)) {
            if (bind_linear(L, n, E, 2 * I, d, 0, I, e->gate) || bind_linear(L, n, E, 2 * I, d, I, I, e->up)) return -1;
            snprintf(n, sizeof n, "layers.%d.experts.down_proj", i);
            if (bind_linear(L, n, E, d, I, 0, d, e->down)) return -1;
        } else {
            snprintf(n, sizeof n, "layers.%d.experts.switch_glu.gate_proj", i);
            if (bind_linear(L, n, E, I, d, 0, I, e->gate)) return -1;
            snprintf(n, sizeof n, "layers.%d.experts.switch_glu.up_proj", i);
            if (bind_linear(L, n, E, I, d, 0, I, e->up)) return -1;
            snprintf(n, sizeof n, "layers.%d.experts.switch_glu.down_proj", i);
            if (bind_linear(L, n, E, d, I, 0, d, e->down)) return -1;
        }
    }
#undef LIN
#undef VEC
    return 0;
}

static int bind_all(hf_loader *L) {
    ls_model *m = L->m;
    ls_config *c = &m->cfg;
    /* HF text (model.), HF multimodal (model.language_model.), MLX multimodal
     * (language_model.model.); vision/audio towers live under other prefixes and are ignored. */
    static const char *prefixes[] = {"model.language_model.", "language_model.model.", "model.", "language_model."};
    L->prefix = NULL;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0] && !L->prefix; i++) {
        char name[128];
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (ls_st_find(m->st, name)) L->prefix = prefixes[i];
    }
    if (!L->prefix) {
        L->prefix = "model.";
        ERRF("model: missing tensor 'model.embed_tokens.weight' (also looked for model.language_model.*, "
             "language_model.model.*)");
        return -1;
    }
    if (bind_w(L, "embed_tokens", c->n_vocab, c->n_embd, &m->tok_embd) ||
        bind_vec(L, "norm.weight", c->n_embd, L->add_one, &m->output_norm))
        return -1;
    c->embd_scale = embed_scale(&m->tok_embd, c->n_embd);
    if (c->ple_dim > 0) {
        int64_t lp = (int64_t)c->n_layer * c->ple_dim;
        if (L->hc->vocab_size_per_layer_input < c->n_vocab) {
            ERRF("model: config.json: vocab_size_per_layer_input %d < vocab_size %d is not supported",
                 L->hc->vocab_size_per_layer_input, c->n_vocab);
            return -1;
        }
        if (bind_w(L, "embed_tokens_per_layer", L->hc->vocab_size_per_layer_input, lp, &m->ple_embd) ||
            bind_w(L, "per_layer_model_projection", lp, c->n_embd, &m->ple_model_proj) ||
            bind_vec(L, "per_layer_projection_norm.weight", c->ple_dim, false, &m->ple_proj_norm))
            return -1;
    }
    if (c->n_expert > 0) {
        m->moes = ls_model_calloc(m, (size_t)c->n_layer, sizeof(ls_moe));
        m->expert_w = ls_model_calloc(m, (size_t)c->n_layer * 3 * (size_t)c->n_expert, sizeof(ls_weight));
        if (!m->moes || !m->expert_w) {
            ERRF("model: out of memory");
            return -1;
        }
    }
    for (int i = 0; i < c->n_layer; i++)
        if (bind_layer(L, i) != 0) return -1;
    return 0;
}

int ls_model_load_hf(ls_model *m, const char *dir, char *err, size_t errlen) {
    hf_loader Ld = {.m = m, .err = err, .errlen = errlen}, *L = &Ld;
    ls_hf_config *hc = ls_model_calloc(m, 1, sizeof *hc);
    if (!hc) {
        ERRF("model: out of memory");
        return -1;
    }
    int rc = -1;
    if (ls_hf_config_load(dir, hc, err, errlen) != 0) goto done;
    L->hc = hc;
    L->add_one = hc->arch == LS_ARCH_GEMMA3;
    if (config_to_model(L) != 0) goto done;
    if (ls_st_open_dir_ex(dir, LS_ST_OPEN_HUGE, &m->st, err, errlen) != 0) goto done;
    if (bind_all(L) != 0) goto done;
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    snprintf(m->name, sizeof m->name, "%.100s", base);
    /* File identity for caches keyed by the model: config.json's mtime, total weight bytes. */
    char p[4096];
    struct stat sb;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (stat(p, &sb) == 0) m->file_mtime = (int64_t)sb.st_mtime;
    m->file_size = m->weight_bytes;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    int trc = ls_tokenizer_from_json(p, &m->tok, err, errlen);
    if (trc != 0) {
        m->load_nomem |= trc == LS_ERR_NOMEM; /* ls_model_open then returns LS_ERR_NOMEM */
        goto done;
    }
    if (ls_tokenizer_n_vocab(m->tok) > m->cfg.n_vocab) {
        ERRF("model: tokenizer has %d tokens but embed_tokens has %d rows", ls_tokenizer_n_vocab(m->tok),
             m->cfg.n_vocab);
        goto done;
    }
    rc = 0;
done:
    ls_hf_config_free(hc);
    free(hc);
    return rc;
}
