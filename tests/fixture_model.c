/* Tiny random-weight Gemma 3 GGUF for tests; see fixture_model.h. A minimal GGUF v3
 * writer (alignment 32) over an in-memory buffer, then one fwrite. */
#include "fixture_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/types.h"

fixture_params fixture_default_params(void) {
    fixture_params p = {.seed = 1,
                        .n_layer = 6,
                        .sliding_window = 16,
                        .n_ctx_train = 4096,
                        .vocab_variant = false,
                        .embd_std = 0.03f,
                        .weight_gain = 1.0f,
                        .out_norm = 6.0f,
                        .embd_type = LS_TYPE_Q8_0};
    return p;
}

/* ---- deterministic randomness ------------------------------------------------------ */

typedef struct {
    uint64_t s;
} fx_rng;

static uint64_t fx_next(fx_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double fx_unit(fx_rng *r) {
    return ((fx_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
} /* (0,1) */

static float fx_normal(fx_rng *r) { /* Box-Muller */
    double u = fx_unit(r), v = fx_unit(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* ---- growable byte buffer and GGUF primitives ---------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} fx_buf;

static void fx_put(fx_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void fx_u32(fx_buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    fx_put(b, x, 4);
}
static void fx_u64(fx_buf *b, uint64_t v) {
    fx_u32(b, (uint32_t)v);
    fx_u32(b, (uint32_t)(v >> 32));
}
static void fx_f32(fx_buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    fx_u32(b, u);
}
static void fx_strn(fx_buf *b, const char *s, size_t n) {
    fx_u64(b, n);
    fx_put(b, s, n);
}
static void fx_str(fx_buf *b, const char *s) {
    fx_strn(b, s, strlen(s));
}

enum { FX_U32 = 4, FX_I32 = 5, FX_F32 = 6, FX_BOOL = 7, FX_STRING = 8, FX_ARRAY = 9 };

static void kv_u32(fx_buf *b, uint64_t *nkv, const char *key, uint32_t v) {
    fx_str(b, key);
    fx_u32(b, FX_U32);
    fx_u32(b, v);
    (*nkv)++;
}
static void kv_f32(fx_buf *b, uint64_t *nkv, const char *key, float v) {
    fx_str(b, key);
    fx_u32(b, FX_F32);
    fx_f32(b, v);
    (*nkv)++;
}
static void kv_bool(fx_buf *b, uint64_t *nkv, const char *key, bool v) {
    fx_str(b, key);
    fx_u32(b, FX_BOOL);
    uint8_t x = v;
    fx_put(b, &x, 1);
    (*nkv)++;
}
static void kv_str(fx_buf *b, uint64_t *nkv, const char *key, const char *v) {
    fx_str(b, key);
    fx_u32(b, FX_STRING);
    fx_str(b, v);
    (*nkv)++;
}
static void kv_arr(fx_buf *b, uint64_t *nkv, const char *key, uint32_t elem, uint64_t count) {
    fx_str(b, key);
    fx_u32(b, FX_ARRAY);
    fx_u32(b, elem);
    fx_u64(b, count);
    (*nkv)++;
}

/* ---- vocabulary ------------------------------------------------------------------ */

/* Text of token i into buf (NUL-terminated); its type. */
static int fx_token(int32_t i, bool variant, char *buf, size_t cap) {
    static const char *const head[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>"};
    if (i < 5) {
        snprintf(buf, cap, "%s", head[i]);
        return i == 3 ? 2 /* UNKNOWN */ : 3 /* CONTROL */;
    }
    if (i < 105) {
        snprintf(buf, cap, "<unused%d>", i - 5);
        return 3;
    }
    if (i == 105 || i == 106) {
        snprintf(buf, cap, "%s", i == 105 ? "<start_of_turn>" : "<end_of_turn>");
        return 3;
    }
    if (i < FIXTURE_FIRST_PIECE) {
        snprintf(buf, cap, "<0x%02X>", i - FIXTURE_FIRST_BYTE);
        return 6; /* BYTE */
    }
    if (variant && i == FIXTURE_VARIANT_TOKEN) {
        snprintf(buf, cap, "\xe2\x96\x81variant");
        return 1;
    }
    /* Normal pieces: "▁", "▁a".."▁z", "a".."z", then letter pairs "aa", "ab", ... */
    int j = i - FIXTURE_FIRST_PIECE;
    if (j == 0)
        snprintf(buf, cap, "\xe2\x96\x81");
    else if (j <= 26)
        snprintf(buf, cap, "\xe2\x96\x81%c", 'a' + j - 1);
    else if (j <= 52)
        snprintf(buf, cap, "%c", 'a' + j - 27);
    else {
        int k = j - 53;
        snprintf(buf, cap, "%c%c", 'a' + k / 26, 'a' + k % 26);
    }
    return 1; /* NORMAL */
}

/* ---- tensors --------------------------------------------------------------------- */

typedef struct {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[2];
    uint8_t *data;
    size_t nbytes;
} fx_tensor;

typedef struct {
    fx_tensor *t;
    int n, cap;
    fx_rng rng;
    bool fail;
} fx_tensors;

static fx_tensor *fx_add(fx_tensors *ts, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0, uint64_t ne1) {
    if (ts->fail) return NULL;
    if (ts->n == ts->cap) {
        int cap = ts->cap ? ts->cap * 2 : 64;
        fx_tensor *q = realloc(ts->t, sizeof *q * (size_t)cap);
        if (!q) {
            ts->fail = true;
            return NULL;
        }
        ts->t = q;
        ts->cap = cap;
    }
    fx_tensor *t = &ts->t[ts->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->nbytes = ls_row_size(type, (int64_t)ne0) * (size_t)ne1;
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->data || !t->nbytes) ts->fail = true;
    return ts->fail ? NULL : t;
}

/* A [rows x cols] weight of `type`, elements N(0, std^2), quantized row by row. */
static void fx_matrix(fx_tensors *ts, const char *name, ls_type type, int64_t rows, int64_t cols, float std) {
    fx_tensor *t = fx_add(ts, name, type, 2, (uint64_t)cols, (uint64_t)rows);
    if (!t) return;
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!row) {
        ts->fail = true;
        return;
    }
    size_t rb = ls_row_size(type, cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = std * fx_normal(&ts->rng);
        if (ls_quantize_row_ref(type, row, t->data + (size_t)r * rb, cols) != 0) ts->fail = true;
    }
    free(row);
}

/* A norm vector as GGUF stores Gemma norms (+1 already added): center + spread * N(0,1). */
static void fx_norm(fx_tensors *ts, const char *name, int64_t n, float center, float spread) {
    fx_tensor *t = fx_add(ts, name, LS_TYPE_F32, 1, (uint64_t)n, 1);
    if (!t) return;
    float *v = (float *)t->data;
    for (int64_t i = 0; i < n; i++) v[i] = center + spread * fx_normal(&ts->rng);
}

static void fx_build_tensors(const fixture_params *p, fx_tensors *ts) {
    /* Types for the 128-column matrices (cycled over every layer's six of them) and for
     * ffn_down (K = 256, so the K-quants fit). */
    static const ls_type t128[] = {LS_TYPE_Q8_0, LS_TYPE_Q5_0, LS_TYPE_Q4_0, LS_TYPE_F16,
                                   LS_TYPE_F32,  LS_TYPE_Q4_1, LS_TYPE_Q5_1, LS_TYPE_BF16};
    static const ls_type t256[] = {LS_TYPE_Q4_K, LS_TYPE_Q6_K, LS_TYPE_Q5_K};
    const int64_t d = FIXTURE_N_EMBD, ff = FIXTURE_N_FF, hd = FIXTURE_HEAD_DIM;
    const int64_t qd = FIXTURE_N_HEAD * hd, kvd = FIXTURE_N_HEAD_KV * hd;
    float g = p->weight_gain;
    fx_matrix(ts, "token_embd.weight", (ls_type)p->embd_type, FIXTURE_N_VOCAB, d, p->embd_std);
    fx_norm(ts, "output_norm.weight", d, p->out_norm, 0.05f * p->out_norm);
    for (int i = 0; i < p->n_layer; i++) {
        char n[96];
        int c = i * 6;
#define M(suffix, rows, cols, type)                                                                                    \
    (snprintf(n, sizeof n, "blk.%d." suffix ".weight", i), fx_matrix(ts, n, type, rows, cols, g / sqrtf((float)(cols))))
#define N(suffix, len, center, spread)                                                                                 \
    (snprintf(n, sizeof n, "blk.%d." suffix ".weight", i), fx_norm(ts, n, len, center, spread))
        M("attn_q", qd, d, t128[(c + 0) % 8]);
        M("attn_k", kvd, d, t128[(c + 1) % 8]);
        M("attn_v", kvd, d, t128[(c + 2) % 8]);
        M("attn_output", d, qd, t128[(c + 3) % 8]);
        M("ffn_gate", ff, d, t128[(c + 4) % 8]);
        M("ffn_up", ff, d, t128[(c + 5) % 8]);
        M("ffn_down", d, ff, t256[i % 3]);
        N("attn_norm", d, 1.0f, 0.1f);
        N("attn_q_norm", hd, 1.0f, 0.1f);
        N("attn_k_norm", hd, 1.0f, 0.1f);
        N("post_attention_norm", d, 1.0f, 0.1f);
        N("ffn_norm", d, 1.0f, 0.1f);
        N("post_ffw_norm", d, 1.0f, 0.1f);
#undef M
#undef N
    }
}

/* ---- the file -------------------------------------------------------------------- */

static void fx_build_kvs(const fixture_params *p, fx_buf *b, uint64_t *nkv) {
    kv_str(b, nkv, "general.architecture", "gemma3");
    kv_str(b, nkv, "general.name", "lockstep-fixture");
    kv_u32(b, nkv, "general.alignment", 32);
    kv_u32(b, nkv, "gemma3.context_length", (uint32_t)p->n_ctx_train);
    kv_u32(b, nkv, "gemma3.embedding_length", FIXTURE_N_EMBD);
    kv_u32(b, nkv, "gemma3.block_count", (uint32_t)p->n_layer);
    kv_u32(b, nkv, "gemma3.feed_forward_length", FIXTURE_N_FF);
    kv_u32(b, nkv, "gemma3.attention.head_count", FIXTURE_N_HEAD);
    kv_u32(b, nkv, "gemma3.attention.head_count_kv", FIXTURE_N_HEAD_KV);
    kv_u32(b, nkv, "gemma3.attention.key_length", FIXTURE_HEAD_DIM);
    kv_u32(b, nkv, "gemma3.attention.value_length", FIXTURE_HEAD_DIM);
    kv_u32(b, nkv, "gemma3.attention.sliding_window", (uint32_t)p->sliding_window);
    kv_f32(b, nkv, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
    kv_f32(b, nkv, "gemma3.rope.freq_base", 1000000.0f);
    kv_str(b, nkv, "tokenizer.ggml.model", "llama");
    char text[64];
    kv_arr(b, nkv, "tokenizer.ggml.tokens", FX_STRING, FIXTURE_N_VOCAB);
    for (int32_t i = 0; i < FIXTURE_N_VOCAB; i++) {
        fx_token(i, p->vocab_variant, text, sizeof text);
        fx_str(b, text);
    }
    kv_arr(b, nkv, "tokenizer.ggml.scores", FX_F32, FIXTURE_N_VOCAB);
    for (int32_t i = 0; i < FIXTURE_N_VOCAB; i++)
        fx_f32(b, i < FIXTURE_FIRST_PIECE ? 0.0f : -(float)(i - FIXTURE_FIRST_PIECE));
    kv_arr(b, nkv, "tokenizer.ggml.token_type", FX_I32, FIXTURE_N_VOCAB);
    for (int32_t i = 0; i < FIXTURE_N_VOCAB; i++) fx_u32(b, (uint32_t)fx_token(i, p->vocab_variant, text, sizeof text));
    kv_u32(b, nkv, "tokenizer.ggml.bos_token_id", FIXTURE_BOS);
    kv_u32(b, nkv, "tokenizer.ggml.eos_token_id", FIXTURE_EOS);
    kv_u32(b, nkv, "tokenizer.ggml.unknown_token_id", 3);
    kv_u32(b, nkv, "tokenizer.ggml.padding_token_id", 0);
    kv_bool(b, nkv, "tokenizer.ggml.add_bos_token", true);
    kv_bool(b, nkv, "tokenizer.ggml.add_space_prefix", false);
}

static void fx_pad(fx_buf *b, size_t align) {
    static const uint8_t zeros[64];
    size_t r = b->n % align;
    if (r) fx_put(b, zeros, align - r);
}

int fixture_write(const fixture_params *p, const char *path, char *err, size_t errlen) {
    if (p->n_layer < 1 || p->n_layer > 64 || p->sliding_window < 0) {
        snprintf(err, errlen, "fixture: bad parameters");
        return -1;
    }
    fx_tensors ts = {.rng = {p->seed * 0x2545F4914F6CDD1Dull + 12345}};
    fx_buf kvs = {0}, out = {0};
    uint64_t nkv = 0;
    int rc = -1;
    fx_build_tensors(p, &ts);
    fx_build_kvs(p, &kvs, &nkv);
    if (ts.fail || kvs.oom) {
        snprintf(err, errlen, "fixture: out of memory or quantizer failure");
        goto done;
    }
    fx_put(&out, "GGUF", 4);
    fx_u32(&out, 3);
    fx_u64(&out, (uint64_t)ts.n);
    fx_u64(&out, nkv);
    fx_put(&out, kvs.p, kvs.n);
    uint64_t off = 0;
    for (int i = 0; i < ts.n; i++) {
        fx_tensor *t = &ts.t[i];
        fx_str(&out, t->name);
        fx_u32(&out, t->n_dims);
        for (uint32_t k = 0; k < t->n_dims; k++) fx_u64(&out, t->ne[k]);
        fx_u32(&out, t->type);
        fx_u64(&out, off);
        off += (t->nbytes + 31) / 32 * 32;
    }
    fx_pad(&out, 32);
    for (int i = 0; i < ts.n; i++) {
        fx_put(&out, ts.t[i].data, ts.t[i].nbytes);
        fx_pad(&out, 32);
    }
    if (out.oom) {
        snprintf(err, errlen, "fixture: out of memory");
        goto done;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "fixture: cannot create %s", path);
        goto done;
    }
    size_t w = fwrite(out.p, 1, out.n, f);
    if (fclose(f) != 0 || w != out.n) {
        snprintf(err, errlen, "fixture: short write to %s", path);
        goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < ts.n; i++) free(ts.t[i].data);
    free(ts.t);
    free(kvs.p);
    free(out.p);
    return rc;
}

int fixture_open(const fixture_params *p, ls_model **out, char *err, size_t errlen) {
    *out = NULL;
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/lockstep-fixture-XXXXXX.gguf", dir && *dir ? dir : "/tmp");
    int fd = mkstemps(path, 5);
    if (fd < 0) {
        snprintf(err, errlen, "fixture: cannot create a temporary file in %s", dir && *dir ? dir : "/tmp");
        return LS_ERR;
    }
    close(fd);
    int rc = fixture_write(p, path, err, errlen) == 0 ? ls_model_open(path, out, err, errlen) : LS_ERR;
    unlink(path);
    return rc;
}
