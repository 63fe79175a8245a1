/* lockstep-gen-model: random numbers, value tables, chunk generators and the streaming
 * writer (see gen_model.h). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gen_model.h"

/* Rows per generation chunk: as many as fit in this many bytes (at least one). Part of the
 * output's definition (it decides where RNG streams restart), so never derive it from the
 * thread count or buffer sizes. */
#define GM_CHUNK_BYTES (4u << 20)

/* ---------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------- */

uint64_t gm_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return gm_splitmix64(&h);
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

uint16_t gm_f32_to_bf16(float f) {
    uint32_t u = bits_from_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float gm_bf16_to_f32(uint16_t b) {
    return f32_from_bits((uint32_t)b << 16);
}

uint16_t gm_f32_to_f16(float f) {
    uint32_t x = bits_from_f32(f);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000, shift = 126 - e;
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = (ax >> 13) - (112u << 10), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1))) hm++;
    return (uint16_t)(sign | hm);
}

float gm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "lockstep-gen-model: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

gm_tensor *gm_tensor_add(gm_tensor_list *l) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        gm_tensor *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) {
            fprintf(stderr, "lockstep-gen-model: out of memory\n");
            exit(1);
        }
        l->v = v;
        l->cap = cap;
    }
    gm_tensor *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    return t;
}

void gm_tensor_list_free(gm_tensor_list *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].tab16);
        free(l->v[i].tab32);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---------------------------------------------------------------------------------------
 * Tables
 * ------------------------------------------------------------------------------------- */

/* Inverse of the standard normal CDF (Acklam's rational approximation, relative error
 * < 1.2e-9), for 0 < p < 1. */
static double norm_quantile(double p) {
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                3.754408661907416e+00};
    if (p < 0.02425) {
        double q = sqrt(-2 * log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - 0.02425) return -norm_quantile(1 - p);
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

/* The 256 quantiles (i + 1/2) / 256 of N(0, 1), rescaled to unit variance: symmetric, so a
 * tensor drawn from them has mean ~0 (a sampled table of 256 values would give every
 * element of a tensor the same offset of ~sd/16: one direction shared by all its rows). */
static void gauss_quantiles(double q[256]) {
    double ss = 0;
    for (int i = 0; i < 256; i++) {
        q[i] = norm_quantile((i + 0.5) / 256.0);
        ss += q[i] * q[i];
    }
    double k = 1.0 / sqrt(ss / 256.0);
    for (int i = 0; i < 256; i++) q[i] *= k;
}

uint16_t *gm_tab_bf16_gauss(double mean, double sd) {
    uint16_t *t = xmalloc(256 * sizeof *t);
    double q[256];
    gauss_quantiles(q);
    for (int i = 0; i < 256; i++) t[i] = gm_f32_to_bf16((float)(mean + sd * q[i]));
    return t;
}

float *gm_tab_f32_gauss(double mean, double sd) {
    float *t = xmalloc(256 * sizeof *t);
    double q[256];
    gauss_quantiles(q);
    for (int i = 0; i < 256; i++) t[i] = (float)(mean + sd * q[i]);
    return t;
}

uint16_t *gm_tab_bf16_const(float v) {
    uint16_t *t = xmalloc(256 * sizeof *t);
    for (int i = 0; i < 256; i++) t[i] = gm_f32_to_bf16(v);
    return t;
}

uint16_t *gm_tab_mlx_scales(uint64_t seed, double base) {
    uint16_t *t = xmalloc(256 * sizeof *t);
    gm_rng r;
    gm_rng_seed(&r, seed ^ 0x6d6c785f7363616cull);
    for (int i = 0; i < 256; i++) t[i] = gm_f32_to_bf16((float)(base * (0.85 + 0.3 * gm_uniform(&r))));
    return t;
}

uint16_t *gm_tab_mlx_biases(const uint16_t *scales, int bits) {
    uint16_t *t = xmalloc(256 * sizeof *t);
    float mid = (float)((1u << bits) - 1) * 0.5f; /* mean of q uniform in [0, 2^bits - 1] */
    for (int i = 0; i < 256; i++) t[i] = gm_f32_to_bf16(-gm_bf16_to_f32(scales[i]) * mid);
    return t;
}

/* [0..256) d, [256..512) dmin = 8 d (exact in f16 for the small values used here). */
uint16_t *gm_tab_f16_scales(uint64_t seed, double base) {
    uint16_t *t = xmalloc(512 * sizeof *t);
    gm_rng r;
    gm_rng_seed(&r, seed ^ 0x6b71756164736361ull);
    for (int i = 0; i < 256; i++) {
        t[i] = gm_f32_to_f16((float)(base * (0.85 + 0.3 * gm_uniform(&r))));
        t[256 + i] = gm_f32_to_f16(8.0f * gm_f16_to_f32(t[i]));
    }
    return t;
}

/* ---------------------------------------------------------------------------------------
 * Generators
 * ------------------------------------------------------------------------------------- */

static uint64_t chunk_rows(const gm_tensor *t) {
    uint64_t cr = t->row_bytes ? GM_CHUNK_BYTES / t->row_bytes : 1;
    return cr ? cr : 1;
}

static void fill_bytes(gm_rng *r, uint8_t *out, uint64_t n) {
    uint64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4] = {gm_next(r), gm_next(r), gm_next(r), gm_next(r)};
        memcpy(out + i, w, 32);
    }
    for (; i < n; i += 8) {
        uint64_t w = gm_next(r);
        memcpy(out + i, &w, n - i < 8 ? n - i : 8);
    }
}

static void fill_tab16(gm_rng *r, const uint16_t *tab, uint8_t *out, uint64_t n_elem) {
    uint16_t *o = (uint16_t *)(void *)out; /* chunk buffers are malloc'd: aligned */
    uint64_t i = 0;
    for (; i + 8 <= n_elem; i += 8) {
        uint64_t w = gm_next(r);
        for (int k = 0; k < 8; k++) o[i + k] = tab[(w >> (8 * k)) & 255];
    }
    if (i < n_elem) {
        uint64_t w = gm_next(r);
        for (int k = 0; i < n_elem; i++, k++) o[i] = tab[(w >> (8 * k)) & 255];
    }
}

static void fill_tab32(gm_rng *r, const float *tab, uint8_t *out, uint64_t n_elem) {
    float *o = (float *)(void *)out;
    uint64_t i = 0;
    for (; i + 8 <= n_elem; i += 8) {
        uint64_t w = gm_next(r);
        for (int k = 0; k < 8; k++) o[i + k] = tab[(w >> (8 * k)) & 255];
    }
    if (i < n_elem) {
        uint64_t w = gm_next(r);
        for (int k = 0; i < n_elem; i++, k++) o[i] = tab[(w >> (8 * k)) & 255];
    }
}

/* Q4_K: y = d * sc * q - dmin * m with q uniform in [0, 15], sc uniform in [32, 63] and
 * m = round(15 sc / 16), dmin = 8 d: dmin * m ~ 7.5 d sc, so the values are centred. */
static void fill_q4k(gm_rng *r, const uint16_t *tab, uint8_t *out, uint64_t n_blocks) {
    for (uint64_t b = 0; b < n_blocks; b++, out += 144) {
        uint64_t w = gm_next(r);
        int di = (int)(w & 255);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)(32 + ((w >> (8 + 5 * j)) & 31));
            m[j] = (uint8_t)((15 * sc[j] + 8) >> 4);
        }
        memcpy(out, &tab[di], 2);
        memcpy(out + 2, &tab[256 + di], 2);
        uint8_t *q = out + 4;
        for (int j = 0; j < 4; j++) {
            q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
            q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
            q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
        }
        fill_bytes(r, out + 16, 128);
    }
}

/* Q6_K: y = d * scale * (q - 32), q uniform in [0, 63], int8 scale uniform in +-[16, 31]
 * (random sign: q - 32 has mean -1/2, which the signs cancel across groups). */
static void fill_q6k(gm_rng *r, const uint16_t *tab, uint8_t *out, uint64_t n_blocks) {
    for (uint64_t b = 0; b < n_blocks; b++, out += 210) {
        fill_bytes(r, out, 192); /* ql[128], qh[64] */
        uint64_t w = gm_next(r);
        uint64_t w2 = gm_next(r);
        for (int j = 0; j < 16; j++) {
            int sc = 16 + (int)((w >> (4 * j)) & 15);
            out[192 + j] = (uint8_t)(int8_t)((w2 >> (8 + j)) & 1 ? -sc : sc);
        }
        memcpy(out + 208, &tab[w2 & 255], 2);
    }
}

/* Rows of chunk k of t. */
static void chunk_span(const gm_tensor *t, uint64_t k, uint64_t *r0, uint64_t *nr) {
    uint64_t cr = chunk_rows(t);
    *r0 = k * cr;
    *nr = t->rows - *r0 < cr ? t->rows - *r0 : cr;
}

static void generate_chunk(const gm_tensor *t, uint64_t k, uint8_t *out) {
    uint64_t r0, nr;
    chunk_span(t, k, &r0, &nr);
    gm_rng r;
    gm_rng_seed(&r, t->seed + 0x632be59bd9b4e019ull * (k + 1));
    uint64_t n = nr * t->row_bytes;
    switch (t->gen) {
    case GM_GEN_BYTES: fill_bytes(&r, out, n); break;
    case GM_GEN_TAB16: fill_tab16(&r, t->tab16, out, n / 2); break;
    case GM_GEN_TAB32: fill_tab32(&r, t->tab32, out, n / 4); break;
    case GM_GEN_Q4K: fill_q4k(&r, t->tab16, out, n / 144); break;
    case GM_GEN_Q6K: fill_q6k(&r, t->tab16, out, n / 210); break;
    }
}

/* ---------------------------------------------------------------------------------------
 * Streaming writer: workers generate chunks into a ring of slots, the caller's thread
 * writes them in order.
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const gm_tensor *t;
    uint64_t k;          /* chunk index within the tensor */
    uint64_t bytes;      /* chunk size */
    uint64_t pad_before; /* zero bytes to write before it (first chunk of a tensor) */
} gm_chunk;

typedef struct {
    const gm_chunk *chunks;
    int64_t n_chunks;
    int n_slots;
    uint8_t **slot_buf;
    int64_t *slot_chunk; /* chunk held by the slot, -1 = free */
    bool *slot_ready;
    int64_t next; /* next chunk to claim */
    bool abort;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} gm_pipe;

static void *worker_main(void *arg) {
    gm_pipe *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->abort || p->next >= p->n_chunks) break;
        int64_t c = p->next;
        int s = (int)(c % p->n_slots);
        if (p->slot_chunk[s] != -1) { /* still held by chunk c - n_slots: wait for the writer */
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        p->next++;
        p->slot_chunk[s] = c;
        p->slot_ready[s] = false;
        pthread_mutex_unlock(&p->mu);
        generate_chunk(p->chunks[c].t, p->chunks[c].k, p->slot_buf[s]);
        pthread_mutex_lock(&p->mu);
        p->slot_ready[s] = true;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int write_all(FILE *fp, const char *path, const void *data, uint64_t n) {
    if (n && fwrite(data, 1, (size_t)n, fp) != (size_t)n) {
        fprintf(stderr, "lockstep-gen-model: write error on %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int write_zeros(FILE *fp, const char *path, uint64_t n) {
    static const uint8_t z[4096];
    while (n) {
        uint64_t k = n < sizeof z ? n : sizeof z;
        if (write_all(fp, path, z, k)) return -1;
        n -= k;
    }
    return 0;
}

double gm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int gm_stream_tensors(FILE *fp, const char *path, const gm_tensor_list *l, const int *idx, int n, uint64_t data_base,
                      gm_opts *o) {
    /* chunk list */
    int64_t n_chunks = 0;
    for (int i = 0; i < n; i++) {
        const gm_tensor *t = &l->v[idx[i]];
        uint64_t cr = chunk_rows(t);
        n_chunks += (int64_t)((t->rows + cr - 1) / cr);
    }
    gm_chunk *chunks = xmalloc((size_t)n_chunks * sizeof *chunks);
    uint64_t pos = 0, max_bytes = 1, total = 0;
    int64_t c = 0;
    for (int i = 0; i < n; i++) {
        const gm_tensor *t = &l->v[idx[i]];
        if (t->offset < pos) {
            fprintf(stderr,
                    "lockstep-gen-model: internal error: tensor '%s' placed before the end of the previous one\n",
                    t->name);
            free(chunks);
            return -1;
        }
        uint64_t pad = t->offset - pos, cr = chunk_rows(t);
        for (uint64_t k = 0; k * cr < t->rows; k++, c++) {
            uint64_t r0, nr;
            chunk_span(t, k, &r0, &nr);
            chunks[c] = (gm_chunk){t, k, nr * t->row_bytes, k == 0 ? pad : 0};
            if (chunks[c].bytes > max_bytes) max_bytes = chunks[c].bytes;
        }
        pos = t->offset + t->nbytes;
        total += t->nbytes;
    }
    int nt = o->n_threads > 0 ? o->n_threads : 1;
    gm_pipe p = {.chunks = chunks, .n_chunks = n_chunks, .n_slots = 2 * nt + 2};
    p.slot_buf = xmalloc((size_t)p.n_slots * sizeof *p.slot_buf);
    p.slot_chunk = xmalloc((size_t)p.n_slots * sizeof *p.slot_chunk);
    p.slot_ready = xmalloc((size_t)p.n_slots * sizeof *p.slot_ready);
    for (int s = 0; s < p.n_slots; s++) {
        p.slot_buf[s] = xmalloc((size_t)max_bytes);
        p.slot_chunk[s] = -1;
        p.slot_ready[s] = false;
    }
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    pthread_t *th = xmalloc((size_t)nt * sizeof *th);
    int started = 0;
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, worker_main, &p) != 0) break;
    int rc = 0;
    if (started == 0) {
        fprintf(stderr, "lockstep-gen-model: cannot start worker threads\n");
        rc = -1;
    }
    double t0 = gm_now(), last = t0;
    uint64_t done = 0;
    for (int64_t k = 0; k < n_chunks && rc == 0; k++) {
        int s = (int)(k % p.n_slots);
        pthread_mutex_lock(&p.mu);
        while (!(p.slot_chunk[s] == k && p.slot_ready[s])) pthread_cond_wait(&p.cv, &p.mu);
        pthread_mutex_unlock(&p.mu);
        if (write_zeros(fp, path, chunks[k].pad_before) || write_all(fp, path, p.slot_buf[s], chunks[k].bytes)) rc = -1;
        done += chunks[k].bytes;
        pthread_mutex_lock(&p.mu);
        p.slot_chunk[s] = -1;
        p.slot_ready[s] = false;
        if (rc) p.abort = true;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
        double now = gm_now();
        if (!o->quiet && now - last >= 5.0) {
            fprintf(stderr, "  %s: %.2f / %.2f GB (%.0f MB/s)\n", path, done / 1e9, total / 1e9,
                    done / 1e6 / (now - t0));
            last = now;
        }
    }
    pthread_mutex_lock(&p.mu);
    p.abort = true;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    for (int s = 0; s < p.n_slots; s++) free(p.slot_buf[s]);
    free(p.slot_buf);
    free(p.slot_chunk);
    free(p.slot_ready);
    free(th);
    free(chunks);
    (void)data_base;
    o->bytes_written += done;
    return rc;
}

int gm_close_file(FILE *fp, const char *path, const gm_opts *o) {
    int rc = 0;
    if (fflush(fp) != 0) rc = -1;
    if (rc == 0 && !o->no_sync && fsync(fileno(fp)) != 0 && errno != EINVAL) rc = -1;
    if (fclose(fp) != 0) rc = -1;
    if (rc) fprintf(stderr, "lockstep-gen-model: cannot finish writing %s: %s\n", path, strerror(errno));
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Text
 * ------------------------------------------------------------------------------------- */

static void buf_reserve(gm_buf *b, size_t extra) {
    if (b->oom) return;
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    b->cap = cap;
}

void gm_buf_put(gm_buf *b, const void *data, size_t n) {
    buf_reserve(b, n);
    if (b->oom) return;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void gm_buf_printf(gm_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_reserve(b, (size_t)n);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void gm_buf_json_str(gm_buf *b, const char *s) {
    gm_buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            gm_buf_put(b, e, 2);
        } else if (*p == '\n') {
            gm_buf_put(b, "\\n", 2);
        } else if (*p < 0x20) {
            gm_buf_printf(b, "\\u%04x", *p);
        } else {
            gm_buf_put(b, p, 1);
        }
    }
    gm_buf_put(b, "\"", 1);
}

void gm_buf_free(gm_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int gm_write_text_file(const char *dir, const char *name, const char *text, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "lockstep-gen-model: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = fwrite(text, 1, len, fp) == len ? 0 : -1;
    if (fclose(fp) != 0) rc = -1;
    if (rc) fprintf(stderr, "lockstep-gen-model: write error on %s\n", path);
    return rc;
}

int gm_mkdir_p(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) goto fail;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) goto fail;
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        goto fail;
    }
    return 0;
fail:
    fprintf(stderr, "lockstep-gen-model: cannot create directory %s: %s\n", dir, strerror(errno));
    return -1;
}

void gm_fmt_bytes(uint64_t n, char *out, size_t cap) {
    snprintf(out, cap, "%.2f GB (%.2f GiB)", n / 1e9, n / 1073741824.0);
}
