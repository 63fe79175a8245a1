/* lockstep-gen-model: a Gemma 3 27B-geometry Q4_K_M GGUF (docs/gguf.md).
 *
 * Metadata: every key/value of the template GGUF (the default Gemma 3 270M Q4_K_M) copied
 * byte for byte, in order, tokenizer arrays included, except the geometry keys, which are
 * replaced in place (gemma3.block_count, ...) or inserted after the last gemma3.* key,
 * plus general.name / general.size_label. The real 27B also has gemma3.rope.scaling.type
 * "linear" / .factor 8 (global layers); this engine refuses a rope scaling key for now, so
 * they are written only with --rope-scaling (llama.cpp reads a missing key as factor 1, so
 * both engines compute the same model either way).
 *
 * Tensors: the names, order (output_norm, token_embd, then blk.0.. with each block's tensors
 * sorted by name, as in the template) and Q4_K_M type mix of llama.cpp's quantizer
 * (llama-quant.cpp, llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q4_K_M):
 *   - default Q4_K;
 *   - token_embd (it is also the output head: no output.weight) Q6_K;
 *   - attn_v and ffn_down Q6_K on the layers where use_more_bits(i, n) holds
 *     (i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2), else Q4_K;
 *   - norms F32, stored with Gemma 3's +1 already added.
 * Data: GGUF v3, tensor infos with ne[0] = columns first, each tensor at the next multiple
 * of general.alignment (32 unless the template sets it) after the previous one, exactly
 * where ggml's reader expects it (offset == sum of the padded sizes before it). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen_model.h"

enum { GT_U8, GT_I8, GT_U16, GT_I16, GT_U32, GT_I32, GT_F32, GT_BOOL, GT_STR, GT_ARR, GT_U64, GT_I64, GT_F64 };

typedef struct {
    const uint8_t *p;
    size_t n, pos;
    bool bad;
} rd;

static uint64_t rd_u(rd *r, int bytes) {
    if (r->bad || r->n - r->pos < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[r->pos + i] << (8 * i);
    r->pos += (size_t)bytes;
    return v;
}

static void rd_skip(rd *r, uint64_t n) {
    if (r->bad || r->n - r->pos < n) {
        r->bad = true;
        return;
    }
    r->pos += (size_t)n;
}

static int scalar_size(uint32_t t) {
    switch (t) {
    case GT_U8:
    case GT_I8:
    case GT_BOOL: return 1;
    case GT_U16:
    case GT_I16: return 2;
    case GT_U32:
    case GT_I32:
    case GT_F32: return 4;
    case GT_U64:
    case GT_I64:
    case GT_F64: return 8;
    default: return 0;
    }
}

static void skip_value(rd *r, uint32_t type, int depth) {
    if (type == GT_STR) {
        rd_skip(r, rd_u(r, 8));
    } else if (type == GT_ARR) {
        uint32_t et = (uint32_t)rd_u(r, 4);
        uint64_t n = rd_u(r, 8);
        if (depth > 4) {
            r->bad = true;
            return;
        }
        int es = scalar_size(et);
        if (es) {
            if (n > (r->n - r->pos) / (uint64_t)es)
                r->bad = true;
            else
                rd_skip(r, n * (uint64_t)es);
        } else {
            for (uint64_t i = 0; i < n && !r->bad; i++) skip_value(r, et, depth + 1);
        }
    } else {
        int es = scalar_size(type);
        if (!es)
            r->bad = true;
        else
            rd_skip(r, (uint64_t)es);
    }
}

typedef struct {
    const char *key; /* points into the mapping (not NUL-terminated) */
    size_t key_len;
    size_t start, end; /* the whole record */
    uint32_t type;
    size_t value_pos;
} kv_rec;

typedef struct {
    const char *key;
    uint32_t type; /* GT_U32, GT_F32 or GT_STR */
    uint32_t u;
    float f;
    const char *s;
    bool used;
} kv_override;

static bool key_is(const kv_rec *k, const char *s) {
    return k->key_len == strlen(s) && memcmp(k->key, s, k->key_len) == 0;
}

static void put_u32(gm_buf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    gm_buf_put(b, x, 4);
}

static void put_u64(gm_buf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    gm_buf_put(b, x, 8);
}

static void put_str(gm_buf *b, const char *s) {
    put_u64(b, strlen(s));
    gm_buf_put(b, s, strlen(s));
}

static void put_override(gm_buf *b, const kv_override *o) {
    put_str(b, o->key);
    put_u32(b, o->type);
    if (o->type == GT_U32) {
        put_u32(b, o->u);
    } else if (o->type == GT_F32) {
        uint32_t u;
        memcpy(&u, &o->f, 4);
        put_u32(b, u);
    } else {
        put_str(b, o->s);
    }
}

/* ---------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------- */

static bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static uint64_t tensor_seed(uint64_t seed, const char *name) {
    uint64_t x = seed * 0xd1342543de82ef95ull ^ gm_hash_str(name) ^ 0x6767756633ull;
    return gm_splitmix64(&x);
}

/* Weight [rows x cols] of ggml type ty with values of standard deviation ~sigma. */
static void add_q(gm_tensor_list *l, uint64_t seed, const char *name, int ty, int64_t rows, int64_t cols,
                  double sigma) {
    gm_tensor *t = gm_tensor_add(l);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = ty;
    t->n_dims = 2;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->rows = (uint64_t)rows;
    t->n_params = (uint64_t)(rows * cols);
    t->seed = tensor_seed(seed, name);
    if (ty == GM_GGML_Q4_K) {
        /* y = d sc (q - ~7.5): rms(q - 7.5) = 4.61, rms(sc in [32, 63]) = 48.39 */
        t->row_bytes = (uint64_t)(cols / 256) * 144;
        t->gen = GM_GEN_Q4K;
        t->tab16 = gm_tab_f16_scales(t->seed, sigma / (4.61 * 48.39));
    } else {
        /* y = d sc (q - 32): rms(q - 32) = 18.48, rms(sc in [16, 31]) = 23.95 */
        t->row_bytes = (uint64_t)(cols / 256) * 210;
        t->gen = GM_GEN_Q6K;
        t->tab16 = gm_tab_f16_scales(t->seed, sigma / (18.48 * 23.95));
    }
}

/* Norm weights as Gemma 3 GGUFs store them: the gain 1 + w, here ~N(mean, (mean/20)^2).
 * Gains (docs/large_models.md): pre-norms 1; post-block norms 16, so the residual (RMS ~180
 * at 62 layers) is not dominated by the token's own embedding (RMS 2.2; with the tied head
 * that made the model repeat its input); q/k norms 2, for attention scores of sd ~3.5
 * (with 1: near-uniform attention, neighbouring positions alike, consecutive logit rows
 * correlated ~0.75; with 4: near one-hot attention, so chaotic that llama.cpp and this
 * engine, both correct, agreed on 2 of 13 argmaxes; with 2: rows correlate ~0.5 and the
 * two engines' logits ~0.98-0.998, 10 of 13 argmaxes); final norm 2 (logits sd ~4.5). */
static void add_norm(gm_tensor_list *l, uint64_t seed, const char *name, int64_t n, double mean) {
    gm_tensor *t = gm_tensor_add(l);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = GM_GGML_F32;
    t->n_dims = 1;
    t->shape[0] = n;
    t->rows = 1;
    t->row_bytes = (uint64_t)n * 4;
    t->n_params = (uint64_t)n;
    t->gen = GM_GEN_TAB32;
    t->seed = tensor_seed(seed, name);
    t->tab32 = gm_tab_f32_gauss(mean, mean / 20);
}

typedef struct {
    int n_layers, hidden, ff, heads, kv, hd, vocab, window, ctx;
} g3_geom;

static void build_g3(gm_tensor_list *l, const g3_geom *g, uint64_t seed) {
    int64_t H = g->hidden, F = g->ff, Q = (int64_t)g->heads * g->hd, KV = (int64_t)g->kv * g->hd;
    double sd_h = 1.0 / sqrt((double)H);
    add_norm(l, seed, "output_norm.weight", H, 2.0);
    add_q(l, seed, "token_embd.weight", GM_GGML_Q6_K, g->vocab, H, 0.03);
    char n[GM_MAX_NAME];
    for (int i = 0; i < g->n_layers; i++) {
        bool more = use_more_bits(i, g->n_layers);
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s.weight", i, s), n)
        add_q(l, seed, NM("attn_k"), GM_GGML_Q4_K, KV, H, sd_h);
        add_norm(l, seed, NM("attn_k_norm"), g->hd, 2.0);
        add_norm(l, seed, NM("attn_norm"), H, 1.0);
        add_q(l, seed, NM("attn_output"), GM_GGML_Q4_K, H, Q, 1.0 / sqrt((double)Q));
        add_q(l, seed, NM("attn_q"), GM_GGML_Q4_K, Q, H, sd_h);
        add_norm(l, seed, NM("attn_q_norm"), g->hd, 2.0);
        add_q(l, seed, NM("attn_v"), more ? GM_GGML_Q6_K : GM_GGML_Q4_K, KV, H, sd_h);
        add_q(l, seed, NM("ffn_down"), more ? GM_GGML_Q6_K : GM_GGML_Q4_K, H, F, 1.0 / sqrt((double)F));
        add_q(l, seed, NM("ffn_gate"), GM_GGML_Q4_K, F, H, sd_h);
        add_norm(l, seed, NM("ffn_norm"), H, 1.0);
        add_q(l, seed, NM("ffn_up"), GM_GGML_Q4_K, F, H, sd_h);
        add_norm(l, seed, NM("post_attention_norm"), H, 16.0);
        add_norm(l, seed, NM("post_ffw_norm"), H, 16.0);
#undef NM
    }
    for (int i = 0; i < l->n; i++) l->v[i].nbytes = l->v[i].rows * l->v[i].row_bytes;
}

/* ---------------------------------------------------------------------------------------
 * Template
 * ------------------------------------------------------------------------------------- */

typedef struct {
    uint8_t *map;
    size_t size;
    kv_rec *kv;
    uint64_t n_kv;
    uint32_t alignment;
    int64_t n_tokens;
} gguf_tpl;

static int tpl_open(const char *path, gguf_tpl *t) {
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "lockstep-gen-model: cannot open template %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 24) {
        fprintf(stderr, "lockstep-gen-model: %s: not a GGUF file\n", path);
        close(fd);
        return -1;
    }
    t->size = (size_t)st.st_size;
    void *m = mmap(NULL, t->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "lockstep-gen-model: cannot map %s: %s\n", path, strerror(errno));
        return -1;
    }
    t->map = m;
    rd r = {t->map, t->size, 0, false};
    uint32_t magic = (uint32_t)rd_u(&r, 4), version = (uint32_t)rd_u(&r, 4);
    if (magic != 0x46554747u || (version != 2 && version != 3)) {
        fprintf(stderr, "lockstep-gen-model: %s: not a GGUF v2/v3 file\n", path);
        return -1;
    }
    rd_u(&r, 8); /* tensor count: the template's tensors are not copied */
    t->n_kv = rd_u(&r, 8);
    if (t->n_kv > 100000) r.bad = true;
    t->kv = calloc(t->n_kv ? t->n_kv : 1, sizeof *t->kv);
    t->alignment = 32;
    t->n_tokens = -1;
    for (uint64_t i = 0; i < t->n_kv && !r.bad && t->kv; i++) {
        kv_rec *k = &t->kv[i];
        k->start = r.pos;
        uint64_t kl = rd_u(&r, 8);
        if (r.bad || kl > r.n - r.pos) {
            r.bad = true;
            break;
        }
        k->key = (const char *)r.p + r.pos;
        k->key_len = (size_t)kl;
        r.pos += (size_t)kl;
        k->type = (uint32_t)rd_u(&r, 4);
        k->value_pos = r.pos;
        if (key_is(k, "general.alignment") && k->type == GT_U32) {
            rd v = r;
            t->alignment = (uint32_t)rd_u(&v, 4);
        }
        if (key_is(k, "tokenizer.ggml.tokens") && k->type == GT_ARR) {
            rd v = r;
            rd_u(&v, 4);
            t->n_tokens = (int64_t)rd_u(&v, 8);
        }
        skip_value(&r, k->type, 0);
        k->end = r.pos;
    }
    if (r.bad || !t->kv) {
        fprintf(stderr, "lockstep-gen-model: %s: malformed GGUF metadata\n", path);
        return -1;
    }
    if (t->alignment == 0 || (t->alignment & (t->alignment - 1))) {
        fprintf(stderr, "lockstep-gen-model: %s: general.alignment %u is not a power of two\n", path, t->alignment);
        return -1;
    }
    bool g3 = false;
    for (uint64_t i = 0; i < t->n_kv; i++) {
        kv_rec *k = &t->kv[i];
        if (key_is(k, "general.architecture") && k->type == GT_STR) {
            rd v = {t->map, t->size, k->value_pos, false};
            uint64_t n = rd_u(&v, 8);
            g3 = !v.bad && n == 6 && v.n - v.pos >= 6 && memcmp(v.p + v.pos, "gemma3", 6) == 0;
        }
    }
    if (!g3) {
        fprintf(stderr, "lockstep-gen-model: %s: general.architecture is not gemma3\n", path);
        return -1;
    }
    if (t->n_tokens <= 0) {
        fprintf(stderr, "lockstep-gen-model: %s: no tokenizer.ggml.tokens array\n", path);
        return -1;
    }
    return 0;
}

static void tpl_close(gguf_tpl *t) {
    if (t->map) munmap(t->map, t->size);
    free(t->kv);
}

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* The metadata key/values: the template's, in its order, with the overrides replacing keys
 * of the same name and the rest written after the template's last gemma3.* key; the
 * template's gemma3.rope.scaling.* keys are dropped without rope_scaling. Returns the count. */
static uint64_t put_metadata(gm_buf *h, const gguf_tpl *tpl, kv_override *ov, int n_ov, bool rope_scaling) {
    uint64_t n_kv = 0;
    int64_t last_arch_kv = -1;
    for (uint64_t i = 0; i < tpl->n_kv; i++)
        if (tpl->kv[i].key_len > 7 && memcmp(tpl->kv[i].key, "gemma3.", 7) == 0) last_arch_kv = (int64_t)i;
    for (uint64_t i = 0; i < tpl->n_kv; i++) {
        const kv_rec *k = &tpl->kv[i];
        bool replaced = false;
        for (int j = 0; j < n_ov && !replaced; j++)
            if (key_is(k, ov[j].key)) {
                put_override(h, &ov[j]);
                ov[j].used = replaced = true;
                n_kv++;
            }
        bool drop = !replaced && !rope_scaling && k->key_len > 20 && memcmp(k->key, "gemma3.rope.scaling.", 20) == 0;
        if (!replaced && !drop) {
            gm_buf_put(h, tpl->map + k->start, k->end - k->start);
            n_kv++;
        }
        if ((int64_t)i == last_arch_kv || (last_arch_kv < 0 && i + 1 == tpl->n_kv))
            for (int j = 0; j < n_ov; j++)
                if (!ov[j].used) {
                    put_override(h, &ov[j]);
                    ov[j].used = true;
                    n_kv++;
                }
    }
    return n_kv;
}

/* The tensor infos (offsets assigned here, each tensor aligned); returns the data size. */
static uint64_t put_tensor_infos(gm_buf *h, gm_tensor_list *l, uint64_t alignment) {
    uint64_t off = 0;
    for (int i = 0; i < l->n; i++) {
        gm_tensor *t = &l->v[i];
        t->offset = off;
        put_str(h, t->name);
        put_u32(h, (uint32_t)t->n_dims);
        if (t->n_dims == 1) {
            put_u64(h, (uint64_t)t->shape[0]);
        } else {
            put_u64(h, (uint64_t)t->shape[1]); /* ne[0] = columns */
            put_u64(h, (uint64_t)t->shape[0]);
        }
        put_u32(h, (uint32_t)t->dtype);
        put_u64(h, t->offset);
        off = align_up(off + t->nbytes, alignment);
    }
    return off;
}

static void report_q4km(const gm_args *a, const g3_geom *g, const gm_tensor_list *l, uint64_t n_kv, uint64_t tpl_kv,
                        uint64_t data_start, uint64_t file_size) {
    uint64_t by_type[3] = {0}, n_type[3] = {0};
    for (int i = 0; i < l->n; i++) {
        int k = l->v[i].dtype == GM_GGML_F32 ? 0 : l->v[i].dtype == GM_GGML_Q4_K ? 1 : 2;
        by_type[k] += l->v[i].nbytes;
        n_type[k]++;
    }
    char sz[64];
    gm_fmt_bytes(file_size, sz, sizeof sz);
    printf("gemma3-27b-q4km: %d layers, hidden %d, vocab %d -> %s\n", g->n_layers, g->hidden, g->vocab, a->out);
    printf("  tensors: %d (F32 %llu, Q4_K %llu, Q6_K %llu); Q4_K %.2f GB, Q6_K %.2f GB\n", l->n,
           (unsigned long long)n_type[0], (unsigned long long)n_type[1], (unsigned long long)n_type[2],
           by_type[1] / 1e9, by_type[2] / 1e9);
    printf("  metadata: %llu keys (%llu copied from the template), header %.2f MB\n", (unsigned long long)n_kv,
           (unsigned long long)tpl_kv, data_start / 1e6);
    printf("  total: %s\n", sz);
    fflush(stdout);
}

/* Header, then every tensor streamed, then the last tensor padded to data_size. 0 or -1. */
static int write_q4km(gm_args *a, const gm_buf *h, const gm_tensor_list *l, uint64_t data_start, uint64_t data_size) {
    int rc = 0;
    double t0 = gm_now();
    FILE *fp = fopen(a->out, "wb");
    if (!fp) {
        fprintf(stderr, "lockstep-gen-model: cannot create %s: %s\n", a->out, strerror(errno));
        rc = -1;
    } else {
        if (fwrite(h->p, 1, h->len, fp) != h->len) {
            fprintf(stderr, "lockstep-gen-model: write error on %s\n", a->out);
            rc = -1;
        }
        int *idx = malloc((size_t)l->n * sizeof *idx);
        for (int i = 0; i < l->n && idx; i++) idx[i] = i;
        if (rc == 0) rc = idx ? gm_stream_tensors(fp, a->out, l, idx, l->n, data_start, &a->io) : -1;
        free(idx);
        /* pad the last tensor like the gguf writers do */
        const gm_tensor *last = &l->v[l->n - 1];
        uint64_t tail = data_size - (last->offset + last->nbytes);
        static const uint8_t zeros[64];
        for (uint64_t k = 0; rc == 0 && tail; tail -= k) {
            k = tail < sizeof zeros ? tail : sizeof zeros;
            if (fwrite(zeros, 1, (size_t)k, fp) != k) rc = -1;
        }
        if (gm_close_file(fp, a->out, &a->io) != 0) rc = -1;
    }
    a->io.seconds += gm_now() - t0;
    return rc;
}

int gm_kind_gemma3_q4km(gm_args *a) {
    if (!a->like) {
        fprintf(stderr, "lockstep-gen-model: --kind gemma3-27b-q4km needs --like TEMPLATE.gguf "
                        "(e.g. ~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf)\n");
        return 2;
    }
    int n_layers = a->layers > 0 ? a->layers : 62;
    if (n_layers > 62) {
        fprintf(stderr, "lockstep-gen-model: --layers %d: the 27B has 62\n", n_layers);
        return 2;
    }
    gguf_tpl tpl;
    if (tpl_open(a->like, &tpl) != 0) {
        tpl_close(&tpl);
        return 1;
    }
    g3_geom g = {.n_layers = n_layers,
                 .hidden = 5376,
                 .ff = 21504,
                 .heads = 32,
                 .kv = 16,
                 .hd = 128,
                 .vocab = (int)tpl.n_tokens,
                 .window = 1024,
                 .ctx = 131072};
    if (g.vocab != 262144)
        fprintf(stderr,
                "lockstep-gen-model: note: the template's tokenizer has %d tokens (Gemma 3: 262144); "
                "token_embd gets that many rows\n",
                g.vocab);
    char name[96];
    snprintf(name, sizeof name, "Gemma 3 27B synthetic (lockstep-gen-model, seed %llu)", (unsigned long long)a->seed);
    kv_override ov[] = {
        {"general.name", GT_STR, 0, 0, name, false},
        {"general.size_label", GT_STR, 0, 0, "27B", false},
        {"gemma3.context_length", GT_U32, (uint32_t)g.ctx, 0, NULL, false},
        {"gemma3.embedding_length", GT_U32, (uint32_t)g.hidden, 0, NULL, false},
        {"gemma3.block_count", GT_U32, (uint32_t)g.n_layers, 0, NULL, false},
        {"gemma3.feed_forward_length", GT_U32, (uint32_t)g.ff, 0, NULL, false},
        {"gemma3.attention.head_count", GT_U32, (uint32_t)g.heads, 0, NULL, false},
        {"gemma3.attention.layer_norm_rms_epsilon", GT_F32, 0, 1e-6f, NULL, false},
        {"gemma3.attention.key_length", GT_U32, (uint32_t)g.hd, 0, NULL, false},
        {"gemma3.attention.value_length", GT_U32, (uint32_t)g.hd, 0, NULL, false},
        {"gemma3.rope.freq_base", GT_F32, 0, 1000000.0f, NULL, false},
        {"gemma3.attention.sliding_window", GT_U32, (uint32_t)g.window, 0, NULL, false},
        {"gemma3.attention.head_count_kv", GT_U32, (uint32_t)g.kv, 0, NULL, false},
        {"gemma3.rope.scaling.type", GT_STR, 0, 0, "linear", false},
        {"gemma3.rope.scaling.factor", GT_F32, 0, 8.0f, NULL, false},
    };
    int n_ov = (int)(sizeof ov / sizeof ov[0]);
    if (!a->rope_scaling) n_ov -= 2; /* and template keys gemma3.rope.scaling.* are dropped below */

    gm_tensor_list l = {0};
    build_g3(&l, &g, a->seed);

    /* header: metadata, then the tensor infos */
    gm_buf h = {0};
    gm_buf_put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, (uint64_t)l.n);
    size_t n_kv_pos = h.len;
    put_u64(&h, 0); /* patched below */
    uint64_t n_kv = put_metadata(&h, &tpl, ov, n_ov, a->rope_scaling);
    for (int i = 0; i < 8; i++) h.p[n_kv_pos + (size_t)i] = (char)(n_kv >> (8 * i));
    uint64_t off = put_tensor_infos(&h, &l, tpl.alignment);
    uint64_t data_start = align_up(h.len, tpl.alignment);
    while (h.len < data_start) gm_buf_put(&h, "\0", 1);
    report_q4km(a, &g, &l, n_kv, tpl.n_kv, data_start, data_start + off);

    int rc = h.oom ? -1 : 0;
    if (rc == 0 && !a->dry_run) rc = write_q4km(a, &h, &l, data_start, off);
    gm_buf_free(&h);
    gm_tensor_list_free(&l);
    tpl_close(&tpl);
    return rc ? 1 : 0;
}
