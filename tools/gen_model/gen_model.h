/* lockstep-gen-model: model files of the real geometry of large Gemma models, filled with
 * deterministic pseudo-random weights (docs/large_models.md).
 *
 * Every tensor is described once (name, dtype, shape, how its bytes are generated); a
 * writer streams the tensors of one output file through a pipeline: worker threads fill
 * fixed-size chunks of rows, the main thread writes them in order with large fwrites.
 * A chunk's bytes depend only on (seed, tensor name, chunk index), and chunk boundaries
 * only on the tensor's row size, so the output is byte-identical for any thread count. */
#ifndef LS_GEN_MODEL_H
#define LS_GEN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------------------------------
 * Random numbers: splitmix64 (seeding, hashing) and xoshiro256** (bulk).
 * ------------------------------------------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} gm_rng;

static inline uint64_t gm_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void gm_rng_seed(gm_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = gm_splitmix64(&x);
}

static inline uint64_t gm_rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t gm_next(gm_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = gm_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = gm_rotl(s[3], 45);
    return out;
}

/* Uniform double in [0, 1). */
static inline double gm_uniform(gm_rng *r) {
    return (double)(gm_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t gm_hash_str(const char *s); /* FNV-1a 64, then mixed */

uint16_t gm_f32_to_bf16(float f); /* round to nearest even */
float gm_bf16_to_f32(uint16_t b);
uint16_t gm_f32_to_f16(float f);
float gm_f16_to_f32(uint16_t h);

/* ---------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------- */

typedef enum {
    GM_GEN_BYTES, /* uniformly random bytes (quantized codes) */
    GM_GEN_TAB16, /* 2-byte elements drawn from tab16[256] (bf16 / f16 values) */
    GM_GEN_TAB32, /* 4-byte elements drawn from tab32[256] (f32 values) */
    GM_GEN_Q4K,   /* ggml Q4_K blocks */
    GM_GEN_Q6K,   /* ggml Q6_K blocks */
} gm_gen;

/* safetensors dtypes / ggml types used here */
typedef enum { GM_ST_U32, GM_ST_BF16 } gm_st_dtype;
enum { GM_GGML_F32 = 0, GM_GGML_Q4_K = 12, GM_GGML_Q6_K = 14 };

#define GM_MAX_NAME 160

typedef struct {
    char name[GM_MAX_NAME];
    int dtype;        /* gm_st_dtype (safetensors) or ggml type id (GGUF) */
    int n_dims;       /* 1..2 */
    int64_t shape[2]; /* row-major, outermost first: [rows, cols] or [n] */
    uint64_t rows;    /* generation rows (1 for vectors) */
    uint64_t row_bytes;
    uint64_t nbytes;   /* rows * row_bytes */
    uint64_t n_params; /* logical parameter count (unpacked) */
    gm_gen gen;
    uint64_t seed;   /* per-tensor stream */
    uint16_t *tab16; /* GM_GEN_TAB16 [256]; Q4_K/Q6_K: f16 d [0..256), dmin = 8 d [256..512) (owned) */
    float *tab32;    /* GM_GEN_TAB32 [256] (owned) */
    /* placement, filled by the writers */
    int file;
    uint64_t offset; /* in the file's data section */
} gm_tensor;

typedef struct {
    gm_tensor *v;
    int n, cap;
} gm_tensor_list;

gm_tensor *gm_tensor_add(gm_tensor_list *l);
void gm_tensor_list_free(gm_tensor_list *l);

/* ---------------------------------------------------------------------------------------
 * Tables (values for TAB16/TAB32 and the K-quant super-block scales)
 * ------------------------------------------------------------------------------------- */

/* 256 bf16 / f32 values: the 256 quantiles of N(mean, sd^2) (symmetric about mean). */
uint16_t *gm_tab_bf16_gauss(double mean, double sd);
float *gm_tab_f32_gauss(double mean, double sd);
/* 256 bf16 values = v (constant). */
uint16_t *gm_tab_bf16_const(float v);
/* MLX affine scales: 256 bf16 values in base * [0.85, 1.15]; and the matching biases
 * -scale * (2^bits - 1) / 2 rounded to bf16, so that w = scale * q + bias is centred for q
 * uniform in [0, 2^bits - 1] (-scale * 2^(bits-1) would leave a mean of -scale / 2: for
 * 4-bit weights 11% of their standard deviation, one direction shared by every row). */
uint16_t *gm_tab_mlx_scales(uint64_t seed, double base);
uint16_t *gm_tab_mlx_biases(const uint16_t *scales, int bits);
/* 256 f16 super-block scales d in base * [0.85, 1.15]. */
uint16_t *gm_tab_f16_scales(uint64_t seed, double base);

/* ---------------------------------------------------------------------------------------
 * Output
 * ------------------------------------------------------------------------------------- */

typedef struct {
    int n_threads;
    bool quiet;
    bool no_sync; /* skip fsync at close */
    /* totals for the final report */
    uint64_t bytes_written;
    double seconds;
} gm_opts;

/* Write tensors idx[0..n) (in that order) of list, each preceded by zero padding up to its
 * t->offset (data section relative; data_base = file position where the section starts).
 * The caller has written the header. Returns 0 or -1 (message printed). */
int gm_stream_tensors(FILE *fp, const char *path, const gm_tensor_list *l, const int *idx, int n, uint64_t data_base,
                      gm_opts *o);
/* fflush + fsync (unless no_sync) + fclose with error checks. */
int gm_close_file(FILE *fp, const char *path, const gm_opts *o);

/* A growable text buffer (JSON writing). */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} gm_buf;

void gm_buf_printf(gm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gm_buf_put(gm_buf *b, const void *data, size_t n);
void gm_buf_json_str(gm_buf *b, const char *s); /* "..." with JSON escapes */
void gm_buf_free(gm_buf *b);

int gm_write_text_file(const char *dir, const char *name, const char *text, size_t len);
int gm_mkdir_p(const char *dir);
double gm_now(void);
void gm_fmt_bytes(uint64_t n, char *out, size_t cap); /* "12.34 GB (11.49 GiB)" */

/* ---------------------------------------------------------------------------------------
 * Kinds
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const char *out;
    const char *like; /* GGUF template */
    int layers;       /* 0 = full depth */
    uint64_t seed;
    uint64_t shard_bytes; /* safetensors shard limit */
    bool dry_run;
    bool rope_scaling; /* GGUF: write gemma3.rope.scaling.* (linear 8); off by default */
    gm_opts io;
} gm_args;

int gm_kind_gemma4_qat(gm_args *a);
int gm_kind_gemma4_assistant(gm_args *a);
int gm_kind_gemma3_q4km(gm_args *a);

/* tokenizer.json (262144-token BPE in the fixture layout) + tokenizer_config.json and the
 * small side files of a checkpoint directory. */
int gm_write_tokenizer_files(const char *dir, int32_t vocab);

#endif
