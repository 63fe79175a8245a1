/* Loading a Gemma 3 GGUF: read the hyper-parameters, bind every tensor to a layer slot,
 * and check every shape and type once so the forward pass can trust them */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fault.h"
#include "core/log.h"
#include "lockstep.h"
#include "format/safetensors.h"
#include "decode/grammar.h"
#include "model/model.h"

#define ERRF(...) snprintf(err, errlen, __VA_ARGS__)

static int get_i32(const gguf_file *f, const char *arch, const char *suffix, int32_t *out, int required, char *err,
                   size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    int rc = ls_gguf_get_i64(f, key, &v);
    if (rc == -1 && !required) return 0;
    if (rc != 0) {
        ERRF("model: %s metadata '%s'", rc == -1 ? "missing" : "bad", key);
        return -1;
    }
    if (v <= 0 || v > (1 << 30)) {
        ERRF("model: metadata '%s' = %lld out of range", key, (long long)v);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int get_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, char *err, size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = ls_gguf_get_f32(f, key, out);
    if (rc == -1) return 0; /* keep default */
    if (rc != 0 || !isfinite(*out) || *out <= 0) {
        ERRF("model: bad metadata '%s'", key);
        return -1;
    }
    return 0;
}

/* Bind a 2-D weight [rows x cols] (GGUF ne = {cols, rows}) and check its shape. */
static int bind_weight(ls_model *m, const char *name, int64_t rows, int64_t cols, ls_weight *w, char *err,
                       size_t errlen) {
    const gguf_tensor *t = ls_gguf_find_tensor(m->gguf, name);
    if (!t) {
        ERRF("model: missing tensor '%s'", name);
        return -1;
    }
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
        ERRF("model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name, (long long)t->ne[0],
             (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)cols, (long long)rows);
        return -1;
    }
    const ls_type_traits *tr = ls_type_get(t->type);
    if (!tr) {
        ERRF("model: tensor '%s' has unsupported type %s (%u)", name, ls_type_name(t->type), t->type);
        return -1;
    }
    w->type = (ls_type)t->type;
    w->data = t->data;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = ls_row_size(t->type, cols);
    m->n_params += rows * cols;
    m->weight_bytes += t->nbytes;
    return 0;
}

/* Bind a norm vector of n floats; non-F32 storage is converted into an owned buffer. */
static int bind_vec(ls_model *m, const char *name, int64_t n, const float **out, char *err, size_t errlen) {
    const gguf_tensor *t = ls_gguf_find_tensor(m->gguf, name);
    if (!t) {
        ERRF("model: missing tensor '%s'", name);
        return -1;
    }
    if (t->n_dims != 1 || t->ne[0] != n) {
        ERRF("model: tensor '%s' has %lld elements, expected %lld", name, (long long)t->ne[0], (long long)n);
        return -1;
    }
    m->n_params += n;
    m->weight_bytes += t->nbytes;
    if (t->type == LS_TYPE_F32) {
        *out = t->data;
        return 0;
    }
    const ls_type_traits *tr = ls_type_get(t->type);
    if (!tr || (t->type != LS_TYPE_F16 && t->type != LS_TYPE_BF16)) {
        ERRF("model: norm tensor '%s' has unsupported type %s", name, ls_type_name(t->type));
        return -1;
    }
    float *buf = ls_model_alloc(m, sizeof(float) * (size_t)n);
    if (!buf || ls_model_own(m, buf, sizeof(float) * (size_t)n) != 0) {
        ERRF("model: out of memory");
        return -1;
    }
    tr->dequantize_row(t->data, buf, n);
    *out = buf;
    return 0;
}

void *ls_model_alloc(ls_model *m, size_t bytes) {
    void *p = ls_fault_malloc(LS_FAULT_MODEL, bytes);
    if (!p) m->load_nomem = true;
    return p;
}

void *ls_model_calloc(ls_model *m, size_t n, size_t size) {
    void *p = ls_fault_calloc(LS_FAULT_MODEL, n, size);
    if (!p) m->load_nomem = true;
    return p;
}

int ls_model_own(ls_model *m, float *buf, size_t bytes) {
    float **grown = realloc(m->owned, sizeof(float *) * (size_t)(m->n_owned + 1));
    if (grown) m->owned = grown;
    size_t *sizes = grown ? realloc(m->owned_bytes, sizeof(size_t) * (size_t)(m->n_owned + 1)) : NULL;
    if (!sizes) {
        free(buf);
        m->load_nomem = true;
        return -1;
    }
    m->owned_bytes = sizes;
    m->owned_bytes[m->n_owned] = bytes;
    m->owned[m->n_owned++] = buf;
    return 0;
}

static int read_config(ls_model *m, char *err, size_t errlen) {
    const gguf_file *f = m->gguf;
    const char *a = m->arch;
    ls_config *c = &m->cfg;
    if (get_i32(f, a, "block_count", &c->n_layer, 1, err, errlen) ||
        get_i32(f, a, "embedding_length", &c->n_embd, 1, err, errlen) ||
        get_i32(f, a, "feed_forward_length", &c->n_ff, 1, err, errlen) ||
        get_i32(f, a, "attention.head_count", &c->n_head, 1, err, errlen))
        return -1;
    c->n_head_kv = c->n_head;
    c->head_dim = c->n_embd / c->n_head;
    c->n_ctx_train = 8192;
    c->sliding_window = 0;
    int32_t vlen = 0;
    if (get_i32(f, a, "attention.head_count_kv", &c->n_head_kv, 0, err, errlen) ||
        get_i32(f, a, "attention.key_length", &c->head_dim, 0, err, errlen) ||
        get_i32(f, a, "attention.value_length", &vlen, 0, err, errlen) ||
        get_i32(f, a, "context_length", &c->n_ctx_train, 0, err, errlen) ||
        get_i32(f, a, "attention.sliding_window", &c->sliding_window, 0, err, errlen))
        return -1;
    if (vlen && vlen != c->head_dim) {
        ERRF("model: key_length %d != value_length %d is not supported", c->head_dim, vlen);
        return -1;
    }
    if (c->n_head % c->n_head_kv != 0) {
        ERRF("model: head_count %d is not a multiple of head_count_kv %d", c->n_head, c->n_head_kv);
        return -1;
    }
    if (c->head_dim % 2 != 0 || c->head_dim > 1024) {
        ERRF("model: unsupported head dim %d", c->head_dim);
        return -1;
    }
    if (c->n_layer > 4096) {
        ERRF("model: block_count %d is absurd", c->n_layer);
        return -1;
    }
    c->eps = 1e-6f;
    c->rope_base_full = 1000000.0f;
    c->rope_base_sliding = 10000.0f;
    if (get_f32(f, a, "attention.layer_norm_rms_epsilon", &c->eps, err, errlen) ||
        get_f32(f, a, "rope.freq_base", &c->rope_base_full, err, errlen) ||
        get_f32(f, a, "rope.freq_base_swa", &c->rope_base_sliding, err, errlen))
        return -1;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gguf_str st;
    if (ls_gguf_get_str(f, key, &st) == 0 && !(st.len == 4 && memcmp(st.ptr, "none", 4) == 0)) {
        ERRF("model: rope scaling '%.*s' is not supported yet", (int)st.len, st.ptr);
        return -1;
    }
    /* Gemma 3: query_pre_attn_scalar = head_dim for all sizes but 27B (GGUF does not store
     * it; llama.cpp derives it the same way). */
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (c->n_layer == 62) c->attn_scale = 1.0f / sqrtf((float)(c->n_embd / c->n_head));
    c->embd_scale = sqrtf((float)c->n_embd);
    c->family = LS_FAMILY_GEMMA3;
    c->final_softcap = 0.0f;
    c->max_q = c->n_head * c->head_dim;
    c->max_kv = c->n_head_kv * c->head_dim;
    c->max_ff = c->n_ff;
    c->max_hd = c->head_dim;
    c->kv_f32 = false; /* quantized GGUF weights: f16 KV (the golden tests were made with it) */
    return 0;
}

static int bind_tensors(ls_model *m, char *err, size_t errlen) {
    ls_config *c = &m->cfg;
    const gguf_tensor *te = ls_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te || te->n_dims != 2) {
        ERRF("model: missing or malformed tensor 'token_embd.weight'");
        return -1;
    }
    c->n_vocab = (int32_t)te->ne[1];
    if (te->ne[1] > (1 << 24)) {
        ERRF("model: vocabulary of %lld is absurd", (long long)te->ne[1]);
        return -1;
    }
    if (bind_weight(m, "token_embd.weight", c->n_vocab, c->n_embd, &m->tok_embd, err, errlen) ||
        bind_vec(m, "output_norm.weight", c->n_embd, &m->output_norm, err, errlen))
        return -1;
    m->layers = ls_model_calloc(m, (size_t)c->n_layer, sizeof(ls_layer));
    if (!m->layers) {
        ERRF("model: out of memory");
        return -1;
    }
    int64_t q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    for (int i = 0; i < c->n_layer; i++) {
        ls_layer *l = &m->layers[i];
        char n[96];
        /* Gemma 3: every 6th layer attends to the full context, the rest slide. */
        l->sliding = c->sliding_window > 0 && (i + 1) % 6 != 0;
        l->head_dim = c->head_dim;
        l->n_kv = c->n_head_kv;
        l->n_ff = c->n_ff;
        l->kv_src = i;
        l->rope_base = l->sliding ? c->rope_base_sliding : c->rope_base_full;
        l->rope_pairs = c->head_dim / 2;
        l->rope_freq_scale = 1.0f;
        l->layer_scalar = 1.0f;
#define W(name, rows, cols, dst)                                                                                       \
    (snprintf(n, sizeof n, "blk.%d." name ".weight", i), bind_weight(m, n, rows, cols, dst, err, errlen))
#define V(name, len, dst) (snprintf(n, sizeof n, "blk.%d." name ".weight", i), bind_vec(m, n, len, dst, err, errlen))
        if (W("attn_q", q, c->n_embd, &l->wq) || W("attn_k", kv, c->n_embd, &l->wk) ||
            W("attn_v", kv, c->n_embd, &l->wv) || W("attn_output", c->n_embd, q, &l->wo) ||
            W("ffn_gate", c->n_ff, c->n_embd, &l->w_gate) || W("ffn_up", c->n_ff, c->n_embd, &l->w_up) ||
            W("ffn_down", c->n_embd, c->n_ff, &l->w_down) || V("attn_norm", c->n_embd, &l->attn_norm) ||
            V("attn_q_norm", c->head_dim, &l->q_norm) || V("attn_k_norm", c->head_dim, &l->k_norm) ||
            V("post_attention_norm", c->n_embd, &l->post_attn_norm) || V("ffn_norm", c->n_embd, &l->ffn_norm) ||
            V("post_ffw_norm", c->n_embd, &l->post_ffw_norm))
            return -1;
#undef W
#undef V
    }
    return 0;
}

int ls_model_open(const char *path, ls_model **out, char *err, size_t errlen) {
    *out = NULL;
    ls_model *m = calloc(1, sizeof *m);
    if (!m) {
        ERRF("model: out of memory");
        return LS_ERR_NOMEM;
    }
    struct stat ds;
    if (stat(path, &ds) == 0 && S_ISDIR(ds.st_mode)) {
        /* A Hugging Face / MLX checkpoint directory (model_load_hf.c). */
        if (!realpath(path, m->path)) snprintf(m->path, sizeof m->path, "%s", path);
        if (ls_model_load_hf(m, path, err, errlen) != 0) goto fail;
        *out = m;
        return LS_OK;
    }
    if (ls_gguf_open_ex(path, LS_GGUF_OPEN_HUGE, &m->gguf, err, errlen) != 0) goto fail;
    struct stat sb;
    if (stat(path, &sb) == 0) {
        m->file_size = (uint64_t)sb.st_size;
        m->file_mtime = (int64_t)sb.st_mtime;
    }
    if (!realpath(path, m->path)) snprintf(m->path, sizeof m->path, "%s", path);
    gguf_str s;
    if (ls_gguf_get_str(m->gguf, "general.architecture", &s) != 0) {
        ERRF("model: '%s' has no general.architecture", path);
        goto fail;
    }
    if (!(s.len == 6 && memcmp(s.ptr, "gemma3", 6) == 0)) {
        ERRF("model: architecture '%.*s' is not supported (supported: gemma3)", (int)(s.len > 64 ? 64 : s.len), s.ptr);
        goto fail;
    }
    memcpy(m->arch, s.ptr, s.len);
    if (ls_gguf_get_str(m->gguf, "general.name", &s) == 0)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len > 100 ? 100 : s.len), s.ptr);
    if (read_config(m, err, errlen) || bind_tensors(m, err, errlen)) goto fail;
    int trc = ls_tokenizer_from_gguf(m->gguf, &m->tok, err, errlen);
    if (trc != 0) {
        m->load_nomem |= trc == LS_ERR_NOMEM;
        goto fail;
    }
    if (ls_tokenizer_n_vocab(m->tok) != m->cfg.n_vocab) {
        ERRF("model: tokenizer has %d tokens but token_embd has %d rows", ls_tokenizer_n_vocab(m->tok), m->cfg.n_vocab);
        goto fail;
    }
    *out = m;
    return LS_OK;
fail:;
    bool nomem = m->load_nomem;
    ls_model_close(m);
    return nomem ? LS_ERR_NOMEM : LS_ERR;
}

void ls_model_close(ls_model *m) {
    if (!m) return;
    ls_model_unmap_all(m);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->owned_bytes);
    free(m->layers);
    free(m->moes);
    free(m->expert_w);
    ls_tokenizer_free(m->tok);
    ls_gvocab_free(m->gvocab);
    ls_gguf_close(m->gguf);
    ls_st_close(m->st);
    free(m);
}

void ls_model_get_info(const ls_model *m, ls_model_info *info) {
    const ls_config *c = &m->cfg;
    info->arch = m->arch;
    info->name = m->name;
    info->n_vocab = c->n_vocab;
    info->n_layer = c->n_layer;
    info->n_embd = c->n_embd;
    info->n_head = c->n_head;
    info->n_head_kv = c->n_head_kv;
    info->head_dim = c->head_dim;
    info->n_ff = c->n_ff;
    info->n_ctx_train = c->n_ctx_train;
    info->sliding_window = c->sliding_window;
    info->n_expert = c->n_expert;
    info->n_params = m->n_params;
    info->weight_bytes = m->weight_bytes;
}
