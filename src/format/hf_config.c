/* config.json -> ls_hf_config.
 *
 * The file is untrusted: every field is type- and range-checked, and the first problem is
 * reported with the field's full JSON path ("text_config.num_key_value_heads: ..."). The
 * ranges are deliberately tight (e.g. head_dim <= 4096, hidden <= 65536) so that products
 * model code forms later (heads * head_dim, vocab * hidden) cannot overflow.
 *
 * Per-layer geometry is resolved in one order, each step reading only earlier results:
 * layer types -> flat head dims / KV heads -> per_layer_config overrides -> KV sharing
 * (which checks that a shared layer's geometry matches its source) -> MLP widths. */
#include "format/hf_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_CONFIG_MAX              (16u << 20) /* real configs are < 100 KB; MLX quant blocks a few KB */
#define HF_MAX_VOCAB               (1 << 24)
#define HF_MAX_HIDDEN              (1 << 16)
#define HF_MAX_INTER               (1 << 20)
#define HF_MAX_HEADS               1024
#define HF_MAX_HEADDIM             4096
#define HF_MAX_EXPERTS             4096
#define HF_SCOPE_LEN               160
#define HF_DEFAULT_SLIDING_PATTERN 6

typedef struct {
    char *err;
    size_t errlen;
    int failed;
} hf_ctx;

/* A JSON object and its path prefix for messages ("" at top level, "text_config."). */
typedef struct {
    const cJSON *obj;
    char scope[HF_SCOPE_LEN];
} hf_view;

__attribute__((format(printf, 2, 3))) static void hf_fail(hf_ctx *c, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = 1;
    if (!c->err || c->errlen == 0) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "config: %s", msg);
    for (char *p = c->err; *p; p++) /* strings quoted from the file may hold control bytes */
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
}

/* Scopes are cut when too long: they only label messages. */
__attribute__((format(printf, 2, 3))) static void scope_set(char *dst, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, HF_SCOPE_LEN, fmt, ap);
    va_end(ap);
}

static hf_view view_of(const cJSON *obj, const char *parent, const char *name) {
    hf_view v = {obj, ""};
    scope_set(v.scope, "%s%s.", parent, name);
    return v;
}

/* The field, or NULL when absent or JSON null (HF writes null for "unset"). */
static const cJSON *field(const hf_view *v, const char *name) {
    const cJSON *f = v->obj ? cJSON_GetObjectItemCaseSensitive(v->obj, name) : NULL;
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static int is_int(const cJSON *f, int64_t lo, int64_t hi) {
    if (!cJSON_IsNumber(f)) return 0;
    double d = f->valuedouble;
    return isfinite(d) && floor(d) == d && d >= (double)lo && d <= (double)hi;
}

/* Integer in [lo, hi]; `def` when absent unless required. Returns 1 when present. */
static int get_int(hf_ctx *c, const hf_view *v, const char *name, int required, int32_t def, int64_t lo, int64_t hi,
                   int32_t *out) {
    const cJSON *f = field(v, name);
    *out = def;
    if (c->failed) return 0;
    if (!f) {
        if (required) hf_fail(c, "%s%s: missing", v->scope, name);
        return 0;
    }
    if (!is_int(f, lo, hi)) {
        hf_fail(c, "%s%s: must be an integer in [%lld, %lld]", v->scope, name, (long long)lo, (long long)hi);
        return 0;
    }
    *out = (int32_t)f->valuedouble;
    return 1;
}

/* Finite number in [lo, hi]; `def` when absent. Returns 1 when present. */
static int get_num(hf_ctx *c, const hf_view *v, const char *name, float def, double lo, double hi, float *out) {
    const cJSON *f = field(v, name);
    *out = def;
    if (c->failed || !f) return 0;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < lo || f->valuedouble > hi) {
        hf_fail(c, "%s%s: must be a number in [%g, %g]", v->scope, name, lo, hi);
        return 0;
    }
    *out = (float)f->valuedouble;
    return 1;
}

static bool get_bool(hf_ctx *c, const hf_view *v, const char *name, bool def) {
    const cJSON *f = field(v, name);
    if (c->failed || !f) return def;
    if (!cJSON_IsBool(f)) {
        hf_fail(c, "%s%s: must be true or false", v->scope, name);
        return def;
    }
    return cJSON_IsTrue(f);
}

/* String field or NULL when absent; a non-string is an error. */
static const char *get_str(hf_ctx *c, const hf_view *v, const char *name) {
    const cJSON *f = field(v, name);
    if (c->failed || !f) return NULL;
    if (!cJSON_IsString(f)) {
        hf_fail(c, "%s%s: must be a string", v->scope, name);
        return NULL;
    }
    return f->valuestring;
}

/* Object field or NULL when absent; a non-object is an error. */
static const cJSON *get_obj(hf_ctx *c, const hf_view *v, const char *name) {
    const cJSON *f = field(v, name);
    if (c->failed || !f) return NULL;
    if (!cJSON_IsObject(f)) {
        hf_fail(c, "%s%s: must be an object", v->scope, name);
        return NULL;
    }
    return f;
}

/* ---------------------------------------------------------------------------------------
 * Model type and core sizes
 * ------------------------------------------------------------------------------------- */

/* Selects the arch and the object holding the text model's fields. */
static void arch_parse(hf_ctx *c, const hf_view *root, ls_hf_config *o, hf_view *text) {
    const char *mt = get_str(c, root, "model_type");
    if (c->failed) return;
    if (!mt) {
        hf_fail(c, "model_type: missing");
        return;
    }
    snprintf(o->model_type, sizeof o->model_type, "%s", mt);
    bool nested = true;
    const char *text_type = "gemma4_text";
    if (strcmp(mt, "gemma3_text") == 0 || strcmp(mt, "gemma3") == 0) {
        o->arch = LS_ARCH_GEMMA3;
        nested = strcmp(mt, "gemma3") == 0;
        text_type = "gemma3_text";
    } else if (strcmp(mt, "gemma4_text") == 0 || strcmp(mt, "gemma4") == 0 || strcmp(mt, "gemma4_unified") == 0) {
        o->arch = LS_ARCH_GEMMA4;
        nested = strcmp(mt, "gemma4_text") != 0;
    } else if (strcmp(mt, "gemma4_assistant") == 0 || strcmp(mt, "gemma4_unified_assistant") == 0) {
        o->arch = LS_ARCH_GEMMA4_ASSISTANT; /* the 12B's drafter has the same config shape */
    } else {
        hf_fail(c,
                "model_type: unsupported '%.40s' (expected gemma3_text, gemma3, gemma4_text, gemma4, "
                "gemma4_unified, gemma4_assistant or gemma4_unified_assistant)",
                mt);
        return;
    }
    *text = *root;
    if (!nested) return;
    const cJSON *tc = get_obj(c, root, "text_config");
    if (!tc && !c->failed) hf_fail(c, "text_config: missing (required for model_type %s)", mt);
    if (c->failed) return;
    *text = view_of(tc, "", "text_config");
    const char *tt = get_str(c, text, "model_type");
    bool unified_ok = o->arch != LS_ARCH_GEMMA3 && tt && strcmp(tt, "gemma4_unified_text") == 0;
    if (tt && strcmp(tt, text_type) != 0 && !unified_ok)
        hf_fail(c, "text_config.model_type: '%.40s' does not match %s (expected %s)", tt, mt, text_type);
}

static void sizes_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    get_int(c, t, "vocab_size", 1, 0, 1, HF_MAX_VOCAB, &o->vocab_size);
    get_int(c, t, "hidden_size", 1, 0, 1, HF_MAX_HIDDEN, &o->hidden_size);
    get_int(c, t, "intermediate_size", 1, 0, 1, HF_MAX_INTER, &o->intermediate_size);
    get_int(c, t, "num_hidden_layers", 1, 0, 1, LS_HF_MAX_LAYERS, &o->n_layers);
    get_int(c, t, "num_attention_heads", 1, 0, 1, HF_MAX_HEADS, &o->n_heads);
    get_int(c, t, "head_dim", 0, 256, 2, HF_MAX_HEADDIM, &o->head_dim);
    get_int(c, t, "global_head_dim", 0, o->head_dim, 2, HF_MAX_HEADDIM, &o->global_head_dim);
    get_int(c, t, "num_key_value_heads", 1, 0, 1, HF_MAX_HEADS, &o->n_kv_heads);
    get_int(c, t, "sliding_window", 1, 0, 1, INT32_MAX, &o->sliding_window);
    get_int(c, t, "max_position_embeddings", 0, 131072, 1, INT32_MAX, &o->max_position_embeddings);
    get_num(c, t, "rms_norm_eps", 1e-6f, 1e-30, 1.0, &o->rms_norm_eps);
    if (!c->failed && o->rms_norm_eps <= 0) hf_fail(c, "%srms_norm_eps: must be positive", t->scope);
    const char *act = get_str(c, t, "hidden_activation");
    if (act && strcmp(act, "gelu_pytorch_tanh") != 0)
        hf_fail(c, "%shidden_activation: unsupported '%.40s' (only gelu_pytorch_tanh)", t->scope, act);
    float cap;
    if (get_num(c, t, "attn_logit_softcapping", 0, 0, 1e9, &cap) && cap != 0)
        hf_fail(c, "%sattn_logit_softcapping: attention logit soft-capping is not supported", t->scope);
}

/* ---------------------------------------------------------------------------------------
 * Layer types
 * ------------------------------------------------------------------------------------- */

static void layer_types_list(hf_ctx *c, const hf_view *t, const cJSON *lt, ls_hf_config *o) {
    if (!cJSON_IsArray(lt)) {
        hf_fail(c, "%slayer_types: must be an array", t->scope);
        return;
    }
    int n = cJSON_GetArraySize(lt);
    if (n != o->n_layers) {
        hf_fail(c, "%slayer_types: %d entries but num_hidden_layers is %d", t->scope, n, o->n_layers);
        return;
    }
    int i = 0;
    for (const cJSON *e = lt->child; e; e = e->next, i++) {
        const char *s = cJSON_IsString(e) ? e->valuestring : "";
        if (strcmp(s, "sliding_attention") == 0)
            o->layer_sliding[i] = true;
        else if (strcmp(s, "full_attention") == 0)
            o->layer_sliding[i] = false;
        else {
            hf_fail(c, "%slayer_types[%d]: must be \"sliding_attention\" or \"full_attention\"", t->scope, i);
            return;
        }
    }
}

static void layer_types_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    if (c->failed) return;
    const cJSON *lt = field(t, "layer_types");
    if (lt) {
        layer_types_list(c, t, lt, o);
    } else {
        /* Older exporters: full attention on every N-th layer. */
        int32_t pattern;
        const char *key = field(t, "sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
        get_int(c, t, key, 0, HF_DEFAULT_SLIDING_PATTERN, 1, LS_HF_MAX_LAYERS, &pattern);
        for (int32_t i = 0; i < o->n_layers && !c->failed; i++) o->layer_sliding[i] = (i + 1) % pattern != 0;
    }
    if (o->arch != LS_ARCH_GEMMA3 && !c->failed) o->layer_sliding[o->n_layers - 1] = false; /* as HF forces it */
}

/* ---------------------------------------------------------------------------------------
 * Attention geometry
 * ------------------------------------------------------------------------------------- */

static void heads_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    if (c->failed) return;
    if (o->arch == LS_ARCH_GEMMA3) {
        o->global_head_dim = o->head_dim; /* Gemma 3 has one head dim and no K=V layers */
        o->n_global_kv_heads = o->n_kv_heads;
    } else {
        o->attention_k_eq_v = get_bool(c, t, "attention_k_eq_v", false);
        int32_t g;
        get_int(c, t, "num_global_key_value_heads", 0, o->n_kv_heads, 1, HF_MAX_HEADS, &g);
        o->n_global_kv_heads = o->attention_k_eq_v ? g : o->n_kv_heads;
    }
    for (int32_t i = 0; i < o->n_layers; i++) {
        bool s = o->layer_sliding[i];
        o->layer_head_dim[i] = s ? o->head_dim : o->global_head_dim;
        o->layer_kv_heads[i] = s ? o->n_kv_heads : o->n_global_kv_heads;
        o->layer_k_eq_v[i] = !s && o->attention_k_eq_v;
    }
}

/* A canonical decimal layer index ("5", not "05" or "+5") below n. */
static int layer_key(const char *s, int32_t n) {
    if (!s[0] || strlen(s) > 4 || (s[0] == '0' && s[1])) return -1;
    int v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v < n ? v : -1;
}

/* transformers 5.x: {"5": {"head_dim": 64, "num_key_value_heads": 1}}. */
static void per_layer_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    const cJSON *plc = get_obj(c, t, "per_layer_config");
    if (!plc) return;
    bool seen[LS_HF_MAX_LAYERS] = {false};
    for (const cJSON *e = plc->child; e && !c->failed; e = e->next) {
        int i = layer_key(e->string, o->n_layers);
        if (i < 0) {
            hf_fail(c, "%sper_layer_config: key '%.20s' is not a layer index below %d", t->scope, e->string,
                    o->n_layers);
            return;
        }
        if (seen[i]) {
            hf_fail(c, "%sper_layer_config: layer %d appears twice", t->scope, i);
            return;
        }
        seen[i] = true;
        if (!cJSON_IsObject(e)) {
            hf_fail(c, "%sper_layer_config.%d: must be an object", t->scope, i);
            return;
        }
        hf_view lv = {e, ""};
        scope_set(lv.scope, "%sper_layer_config.%d.", t->scope, i);
        for (const cJSON *k = e->child; k; k = k->next)
            if (strcmp(k->string, "head_dim") != 0 && strcmp(k->string, "num_key_value_heads") != 0) {
                hf_fail(c, "%s%.40s: unsupported per-layer override", lv.scope, k->string);
                return;
            }
        get_int(c, &lv, "head_dim", 0, o->layer_head_dim[i], 2, HF_MAX_HEADDIM, &o->layer_head_dim[i]);
        get_int(c, &lv, "num_key_value_heads", 0, o->layer_kv_heads[i], 1, HF_MAX_HEADS, &o->layer_kv_heads[i]);
    }
    /* The summary fields describe the first layer of each type after the overrides. */
    for (int32_t i = o->n_layers - 1; i >= 0; i--) {
        if (o->layer_sliding[i]) {
            o->head_dim = o->layer_head_dim[i];
            o->n_kv_heads = o->layer_kv_heads[i];
        } else {
            o->global_head_dim = o->layer_head_dim[i];
            o->n_global_kv_heads = o->layer_kv_heads[i];
        }
    }
}

static void heads_check(hf_ctx *c, const hf_view *t, const ls_hf_config *o) {
    for (int32_t i = 0; i < o->n_layers && !c->failed; i++) {
        int32_t kv = o->layer_kv_heads[i], d = o->layer_head_dim[i];
        if (kv > o->n_heads || o->n_heads % kv != 0)
            hf_fail(c, "%snum_key_value_heads: layer %d has %d KV heads, which does not divide num_attention_heads %d",
                    t->scope, i, kv, o->n_heads);
        else if (d % 2 != 0)
            hf_fail(c, "%shead_dim: layer %d has odd head dim %d (RoPE rotates pairs)", t->scope, i, d);
    }
}

/* ---------------------------------------------------------------------------------------
 * KV sharing and MLP widths
 * ------------------------------------------------------------------------------------- */

/* Shared layer i reads the last non-shared layer of its type before `first`. */
static void kv_source_resolve(hf_ctx *c, const hf_view *t, ls_hf_config *o, int32_t first) {
    for (int32_t i = 0; i < o->n_layers && !c->failed; i++) {
        o->layer_kv_source[i] = i;
        if (i < first) continue;
        int32_t j = first - 1;
        while (j >= 0 && o->layer_sliding[j] != o->layer_sliding[i]) j--;
        if (j < 0) {
            hf_fail(c, "%snum_kv_shared_layers: shared layer %d (%s) has no earlier non-shared layer of its type",
                    t->scope, i, o->layer_sliding[i] ? "sliding" : "full");
        } else if (o->layer_head_dim[j] != o->layer_head_dim[i] || o->layer_kv_heads[j] != o->layer_kv_heads[i]) {
            hf_fail(c,
                    "%snum_kv_shared_layers: shared layer %d reads the K/V of layer %d but their head dim / KV "
                    "heads differ",
                    t->scope, i, j);
        }
        o->layer_kv_source[i] = j;
    }
}

static void sharing_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    if (c->failed || o->arch == LS_ARCH_GEMMA3) {
        for (int32_t i = 0; i < o->n_layers; i++) o->layer_kv_source[i] = i;
        for (int32_t i = 0; i < o->n_layers; i++) o->layer_intermediate[i] = o->intermediate_size;
        return;
    }
    o->use_double_wide_mlp = get_bool(c, t, "use_double_wide_mlp", false);
    int32_t first;
    if (o->arch == LS_ARCH_GEMMA4_ASSISTANT) {
        int32_t ignored; /* HF's post-init sets it to num_hidden_layers whatever the file says */
        get_int(c, t, "num_kv_shared_layers", 0, 0, 0, LS_HF_MAX_LAYERS, &ignored);
        o->num_kv_shared_layers = o->n_layers;
        first = 0;
        for (int32_t i = 0; i < o->n_layers; i++) o->layer_kv_source[i] = -1;
    } else {
        get_int(c, t, "num_kv_shared_layers", 0, 0, 0, o->n_layers - 1, &o->num_kv_shared_layers);
        first = o->n_layers - o->num_kv_shared_layers;
        kv_source_resolve(c, t, o, first);
    }
    if (o->use_double_wide_mlp && o->intermediate_size > HF_MAX_INTER / 2)
        hf_fail(c, "%sintermediate_size: %d too large to double", t->scope, o->intermediate_size);
    for (int32_t i = 0; i < o->n_layers; i++)
        o->layer_intermediate[i] = o->intermediate_size * (o->use_double_wide_mlp && i >= first ? 2 : 1);
}

static void extras_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    if (c->failed || o->arch == LS_ARCH_GEMMA3) return;
    get_int(c, t, "hidden_size_per_layer_input", 0, 0, 0, HF_MAX_HIDDEN, &o->hidden_size_per_layer_input);
    get_int(c, t, "vocab_size_per_layer_input", 0, o->hidden_size_per_layer_input ? o->vocab_size : 0, 0, HF_MAX_VOCAB,
            &o->vocab_size_per_layer_input);
    if (!c->failed && o->hidden_size_per_layer_input > 0 && o->vocab_size_per_layer_input == 0)
        hf_fail(c, "%svocab_size_per_layer_input: must be positive when hidden_size_per_layer_input is set", t->scope);
    o->enable_moe_block = get_bool(c, t, "enable_moe_block", false);
    if (!o->enable_moe_block || c->failed) return;
    get_int(c, t, "num_experts", 1, 0, 1, HF_MAX_EXPERTS, &o->num_experts);
    get_int(c, t, "top_k_experts", 1, 0, 1, o->num_experts > 0 ? o->num_experts : 1, &o->top_k_experts);
    const char *key = field(t, "moe_intermediate_size") ? "moe_intermediate_size" : "expert_intermediate_size";
    get_int(c, t, key, 1, 0, 1, HF_MAX_INTER, &o->moe_intermediate_size);
}

/* ---------------------------------------------------------------------------------------
 * RoPE
 * ------------------------------------------------------------------------------------- */

typedef struct {
    float theta, partial, factor;
} hf_rope;

/* One rope_parameters entry. Only what the kernels implement is accepted: default and
 * proportional (partial rotary, exponent over the full head dim) and linear scaling. */
static void rope_entry(hf_ctx *c, const hf_view *v, hf_rope *r) {
    const char *type = get_str(c, v, "rope_type");
    if (!type) type = "default";
    bool has_partial = get_num(c, v, "partial_rotary_factor", 1.0f, 1e-6, 1.0, &r->partial);
    bool has_factor = get_num(c, v, "factor", 1.0f, 1e-6, 1e6, &r->factor);
    get_num(c, v, "rope_theta", r->theta, 1.0, 1e12, &r->theta);
    if (c->failed) return;
    if (strcmp(type, "proportional") == 0) {
        if (r->factor != 1.0f) hf_fail(c, "%sfactor: scaling is not supported with rope_type proportional", v->scope);
    } else if (strcmp(type, "linear") == 0) {
        if (!has_factor) hf_fail(c, "%sfactor: missing (required by rope_type linear)", v->scope);
        if (r->partial != 1.0f) hf_fail(c, "%spartial_rotary_factor: only 1 with rope_type linear", v->scope);
    } else if (strcmp(type, "default") == 0) {
        if ((has_partial && r->partial != 1.0f) || (has_factor && r->factor != 1.0f))
            hf_fail(c, "%srope_type default takes no partial_rotary_factor or factor", v->scope);
    } else {
        hf_fail(c, "%srope_type: unsupported '%.40s' (default, proportional or linear)", v->scope, type);
    }
}

static void rope_nested(hf_ctx *c, const hf_view *t, const cJSON *rp, hf_rope *sl, hf_rope *fu) {
    hf_view pv = view_of(rp, t->scope, "rope_parameters");
    const cJSON *s = get_obj(c, &pv, "sliding_attention"), *f = get_obj(c, &pv, "full_attention");
    if (!c->failed && !s && !f)
        hf_fail(c, "%srope_parameters: expects entries per layer type (sliding_attention, full_attention)", t->scope);
    hf_view sv = view_of(s, pv.scope, "sliding_attention"), fv = view_of(f, pv.scope, "full_attention");
    if (s) rope_entry(c, &sv, sl);
    if (f) rope_entry(c, &fv, fu);
    if (!c->failed && (sl->partial != 1.0f || sl->factor != 1.0f))
        hf_fail(c, "%ssliding_attention: only unscaled full-rotary RoPE is supported on sliding layers", pv.scope);
}

/* Gemma 3 before transformers 5: rope_theta (full), rope_local_base_freq, rope_scaling. */
static void rope_gemma3_flat(hf_ctx *c, const hf_view *t, hf_rope *sl, hf_rope *fu) {
    get_num(c, t, "rope_theta", fu->theta, 1.0, 1e12, &fu->theta);
    get_num(c, t, "rope_local_base_freq", sl->theta, 1.0, 1e12, &sl->theta);
    const cJSON *rs = get_obj(c, t, "rope_scaling");
    if (!rs) return;
    hf_view sv = view_of(rs, t->scope, "rope_scaling");
    const char *type = get_str(c, &sv, "rope_type");
    if (!type) type = get_str(c, &sv, "type");
    if (!type) type = "default";
    if (strcmp(type, "linear") != 0 && strcmp(type, "default") != 0 && !c->failed)
        hf_fail(c, "%srope_type: unsupported '%.40s' (linear only)", sv.scope, type);
    get_num(c, &sv, "factor", 1.0f, 1e-6, 1e6, &fu->factor);
}

static void rope_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    if (c->failed) return;
    bool g4 = o->arch != LS_ARCH_GEMMA3;
    hf_rope sl = {1e4f, 1.0f, 1.0f}, fu = {1e6f, g4 ? 0.25f : 1.0f, 1.0f};
    const cJSON *rp = get_obj(c, t, "rope_parameters");
    if (rp) {
        rope_nested(c, t, rp, &sl, &fu); /* an explicit entry replaces the 0.25 default */
    } else if (!g4) {
        rope_gemma3_flat(c, t, &sl, &fu);
    }
    o->rope_theta_sliding = sl.theta;
    o->rope_theta_full = fu.theta;
    o->rope_partial_full = fu.partial;
    o->rope_scaling_full = fu.factor;
}

/* ---------------------------------------------------------------------------------------
 * Tokens, scalars, assistant
 * ------------------------------------------------------------------------------------- */

static void eos_add(hf_ctx *c, const hf_view *v, const cJSON *e, ls_hf_config *o) {
    if (!is_int(e, 0, o->vocab_size - 1)) {
        hf_fail(c, "%seos_token_id: ids must be integers in [0, %d)", v->scope, o->vocab_size);
        return;
    }
    int32_t id = (int32_t)e->valuedouble;
    for (int32_t k = 0; k < o->n_eos; k++)
        if (o->eos_token_ids[k] == id) return;
    if (o->n_eos == (int32_t)(sizeof o->eos_token_ids / sizeof o->eos_token_ids[0])) {
        hf_fail(c, "%seos_token_id: more than %d distinct ids", v->scope, o->n_eos);
        return;
    }
    o->eos_token_ids[o->n_eos++] = id;
}

/* eos_token_id is an int or a list; top level and text_config may both carry one: union. */
static void eos_parse(hf_ctx *c, const hf_view *v, ls_hf_config *o) {
    const cJSON *e = field(v, "eos_token_id");
    if (!e || c->failed) return;
    if (!cJSON_IsArray(e)) {
        eos_add(c, v, e, o);
        return;
    }
    for (const cJSON *x = e->child; x && !c->failed; x = x->next) eos_add(c, v, x, o);
}

static void tokens_parse(hf_ctx *c, const hf_view *root, const hf_view *t, ls_hf_config *o) {
    if (c->failed) return;
    const hf_view *bos_from = field(t, "bos_token_id") ? t : root;
    get_int(c, bos_from, "bos_token_id", 0, 2, 0, o->vocab_size - 1, &o->bos_token_id);
    if (!c->failed && o->bos_token_id >= o->vocab_size)
        hf_fail(c, "%sbos_token_id: default 2 is outside vocab_size %d", t->scope, o->vocab_size);
    eos_parse(c, root, o);
    if (t->obj != root->obj) eos_parse(c, t, o);
    /* Multimodal wrappers tie at the top level; the text_config value is the fallback. */
    const hf_view *tie_from = field(root, "tie_word_embeddings") ? root : t;
    o->tie_word_embeddings = get_bool(c, tie_from, "tie_word_embeddings", true);
}

static void scalars_parse(hf_ctx *c, const hf_view *t, ls_hf_config *o) {
    if (c->failed) return;
    bool g3 = o->arch == LS_ARCH_GEMMA3;
    get_num(c, t, "final_logit_softcapping", g3 ? 0.0f : 30.0f, 0.0, 1e6, &o->final_logit_softcapping);
    if (g3)
        get_num(c, t, "query_pre_attn_scalar", (float)o->head_dim, 1e-6, 1e9, &o->query_pre_attn_scalar);
    else
        o->query_pre_attn_scalar = 0; /* Gemma 4 attention scale is 1 */
    const cJSON *bidir = field(t, "use_bidirectional_attention");
    if (bidir && (cJSON_IsTrue(bidir) || (cJSON_IsString(bidir) && strcmp(bidir->valuestring, "all") == 0)))
        hf_fail(c, "%suse_bidirectional_attention: bidirectional text attention is not supported", t->scope);
}

static void assistant_parse(hf_ctx *c, const hf_view *root, ls_hf_config *o) {
    if (c->failed || o->arch != LS_ARCH_GEMMA4_ASSISTANT) return;
    get_int(c, root, "backbone_hidden_size", 1, 0, 1, HF_MAX_HIDDEN, &o->backbone_hidden_size);
    o->use_ordered_embeddings = get_bool(c, root, "use_ordered_embeddings", false);
    if (o->use_ordered_embeddings) {
        get_int(c, root, "num_centroids", 0, 2048, 1, o->vocab_size, &o->num_centroids);
        get_int(c, root, "centroid_intermediate_top_k", 0, 32, 1, o->num_centroids > 0 ? o->num_centroids : 1,
                &o->centroid_intermediate_top_k);
        if (!c->failed && o->vocab_size % o->num_centroids != 0)
            hf_fail(c, "num_centroids: %d does not divide vocab_size %d", o->num_centroids, o->vocab_size);
    }
    o->final_logit_softcapping = 0; /* the drafter applies no final softcap (docs/gemma.md 5.3) */
}

/* ---------------------------------------------------------------------------------------
 * MLX quantization
 * ------------------------------------------------------------------------------------- */

static int bits_ok(int32_t b) {
    return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8;
}
static int group_ok(int32_t g) {
    return g == 32 || g == 64 || g == 128;
}

/* Module paths compare without their leading "language_model." / "model." prefixes. */
static const char *path_norm(const char *p) {
    for (;;) {
        if (strncmp(p, "language_model.", 15) == 0)
            p += 15;
        else if (strncmp(p, "model.", 6) == 0)
            p += 6;
        else
            return p;
    }
}

static void bits_group(hf_ctx *c, const hf_view *v, int32_t def_bits, int32_t def_group, int32_t *bits,
                       int32_t *group) {
    get_int(c, v, "bits", 0, def_bits, 0, 64, bits);
    get_int(c, v, "group_size", 0, def_group, 0, 1 << 20, group);
    if (!c->failed && !bits_ok(*bits)) hf_fail(c, "%sbits: %d not supported (2, 3, 4, 5, 6 or 8)", v->scope, *bits);
    if (!c->failed && !group_ok(*group)) hf_fail(c, "%sgroup_size: %d not supported (32, 64 or 128)", v->scope, *group);
}

static void override_parse(hf_ctx *c, const hf_view *qv, const cJSON *e, ls_hf_quant *q) {
    ls_hf_quant_override *ov = &q->overrides[q->n_overrides];
    char scope[HF_SCOPE_LEN];
    scope_set(scope, "%s%.60s", qv->scope, e->string);
    if (e->string[0] == 0) {
        hf_fail(c, "%s: empty module path", qv->scope);
        return;
    }
    if (cJSON_IsBool(e)) {
        ov->quantized = cJSON_IsTrue(e);
        ov->bits = ov->quantized ? q->bits : 0;
        ov->group_size = ov->quantized ? q->group_size : 0;
    } else if (cJSON_IsObject(e)) {
        hf_view ev = {e, ""};
        scope_set(ev.scope, "%s.", scope);
        ov->quantized = true;
        bits_group(c, &ev, q->bits, q->group_size, &ov->bits, &ov->group_size);
    } else {
        hf_fail(c, "%s: must be an object {bits, group_size} or false", scope);
    }
    if (c->failed) return;
    ov->path = strdup(e->string);
    if (!ov->path)
        hf_fail(c, "%s: out of memory", scope);
    else
        q->n_overrides++;
}

static int override_norm_cmp(const ls_hf_quant_override *a, const ls_hf_quant_override *b) {
    return strcmp(path_norm(a->path), path_norm(b->path));
}

/* Normalized path, then the path as written, so the order (and the message) is deterministic. */
static int override_cmp(const void *pa, const void *pb) {
    const ls_hf_quant_override *a = pa, *b = pb;
    int r = override_norm_cmp(a, b);
    return r ? r : strcmp(a->path, b->path);
}

/* Sorted by normalized path: duplicates become neighbours (one pass instead of all pairs, so
 * a config with 10^5 entries stays fast) and ls_hf_quant_for can binary-search. */
static void overrides_sort(hf_ctx *c, const hf_view *qv, ls_hf_quant *q) {
    qsort(q->overrides, (size_t)q->n_overrides, sizeof *q->overrides, override_cmp);
    for (int32_t k = 1; k < q->n_overrides; k++)
        if (override_norm_cmp(&q->overrides[k - 1], &q->overrides[k]) == 0) {
            hf_fail(c, "%s%.60s: same module as '%.60s'", qv->scope, q->overrides[k].path, q->overrides[k - 1].path);
            return;
        }
}

static void quant_parse(hf_ctx *c, const hf_view *root, ls_hf_quant *q) {
    const char *key = field(root, "quantization") ? "quantization" : "quantization_config";
    const cJSON *blk = get_obj(c, root, key);
    if (!blk) return;
    hf_view qv = view_of(blk, "", key);
    const char *method = get_str(c, &qv, "quant_method");
    const char *mode = get_str(c, &qv, "mode");
    if (c->failed) return;
    if (method && !mode) {
        hf_fail(c, "%squant_method: unsupported quantization method '%.40s' (MLX affine only)", qv.scope, method);
        return;
    }
    if (mode && strcmp(mode, "affine") != 0) {
        hf_fail(c, "%smode: unsupported quantization mode '%.40s' (affine only)", qv.scope, mode);
        return;
    }
    if (!field(&qv, "bits") || !field(&qv, "group_size")) {
        hf_fail(c, "%s%s: missing", qv.scope, field(&qv, "bits") ? "group_size" : "bits");
        return;
    }
    bits_group(c, &qv, 0, 0, &q->bits, &q->group_size);
    if (c->failed) return;
    q->overrides = calloc((size_t)cJSON_GetArraySize(blk) + 1, sizeof *q->overrides);
    if (!q->overrides) {
        hf_fail(c, "%s: out of memory", key);
        return;
    }
    for (const cJSON *e = blk->child; e && !c->failed; e = e->next) {
        if (strcmp(e->string, "bits") == 0 || strcmp(e->string, "group_size") == 0 || strcmp(e->string, "mode") == 0)
            continue;
        override_parse(c, &qv, e, q);
    }
    if (!c->failed) overrides_sort(c, &qv, q);
    q->present = !c->failed;
}

bool ls_hf_quant_for(const ls_hf_config *c, const char *module_path, int32_t *bits, int32_t *group_size) {
    const ls_hf_quant *q = &c->quant;
    if (!q->present) return false;
    const char *want = path_norm(module_path);
    int32_t lo = 0, hi = q->n_overrides;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        const ls_hf_quant_override *ov = &q->overrides[mid];
        int r = strcmp(path_norm(ov->path), want);
        if (r < 0) {
            lo = mid + 1;
        } else if (r > 0) {
            hi = mid;
        } else {
            if (!ov->quantized) return false;
            *bits = ov->bits;
            *group_size = ov->group_size;
            return true;
        }
    }
    *bits = q->bits;
    *group_size = q->group_size;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------------------- */

void ls_hf_config_free(ls_hf_config *c) {
    if (!c) return;
    for (int32_t k = 0; k < c->quant.n_overrides; k++) free(c->quant.overrides[k].path);
    free(c->quant.overrides);
    c->quant.overrides = NULL;
    c->quant.n_overrides = 0;
    c->quant.present = false;
}

/* The JSON object in [json, json+len), NUL-terminated on a copy so cJSON cannot read past it. */
static cJSON *json_object_parse(hf_ctx *c, const char *json, size_t len) {
    if (len > HF_CONFIG_MAX) {
        hf_fail(c, "%zu bytes is larger than the limit %u", len, HF_CONFIG_MAX);
        return NULL;
    }
    if (len && memchr(json, 0, len)) {
        hf_fail(c, "contains a NUL byte");
        return NULL;
    }
    char *text = malloc(len + 1);
    if (!text) {
        hf_fail(c, "out of memory");
        return NULL;
    }
    if (len) memcpy(text, json, len);
    text[len] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root)
        hf_fail(c, "not valid JSON (error at byte %zu)", end ? (size_t)(end - text) : (size_t)0);
    else if (!cJSON_IsObject(root))
        hf_fail(c, "top level is not a JSON object");
    free(text);
    if (c->failed) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int ls_hf_config_parse(const char *json, size_t len, ls_hf_config *out, char *err, size_t errlen) {
    hf_ctx c = {err, errlen, 0};
    if (err && errlen) err[0] = 0;
    memset(out, 0, sizeof *out);
    cJSON *doc = json_object_parse(&c, json ? json : "", json ? len : 0);
    if (!doc) return -1;
    hf_view root = {doc, ""}, text = root;
    arch_parse(&c, &root, out, &text);
    sizes_parse(&c, &text, out);
    layer_types_parse(&c, &text, out);
    heads_parse(&c, &text, out);
    if (!c.failed && out->arch != LS_ARCH_GEMMA3) per_layer_parse(&c, &text, out);
    if (!c.failed) heads_check(&c, &text, out);
    sharing_parse(&c, &text, out);
    extras_parse(&c, &text, out);
    rope_parse(&c, &text, out);
    scalars_parse(&c, &text, out);
    tokens_parse(&c, &root, &text, out);
    assistant_parse(&c, &root, out);
    if (!c.failed) quant_parse(&c, &root, &out->quant);
    cJSON_Delete(doc);
    if (c.failed) {
        ls_hf_config_free(out);
        return -1;
    }
    return 0;
}

int ls_hf_config_load(const char *dir, ls_hf_config *out, char *err, size_t errlen) {
    char path[4096];
    memset(out, 0, sizeof *out);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (err && errlen) snprintf(err, errlen, "config: cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    char *buf = malloc(HF_CONFIG_MAX + 1);
    size_t n = buf ? fread(buf, 1, HF_CONFIG_MAX + 1, fp) : 0;
    int bad = !buf || ferror(fp);
    fclose(fp);
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "config: cannot read '%s'", path);
        free(buf);
        return -1;
    }
    char inner[512];
    int rc = ls_hf_config_parse(buf, n, out, inner, sizeof inner);
    free(buf);
    if (rc != 0 && err && errlen)
        snprintf(err, errlen, "%s: %s", path, inner + (strncmp(inner, "config: ", 8) ? 0 : 8));
    return rc;
}
