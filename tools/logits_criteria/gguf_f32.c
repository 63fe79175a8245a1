/* lockstep-gguf-f32: an F32 copy of a GGUF model (every tensor dequantized to float32), and a
 * digest of a model's weights as float32. Used by the logits criterion (a) (docs/benchmarks.md,
 * tests/logits_criteria.sh): CI makes the F32 copy of the default model itself, without
 * llama.cpp, and checks that its weights are bit for bit the ones llama.cpp's
 * `llama-quantize --allow-requantize IN OUT F32` wrote when the goldens were made (the digest
 * stored in tests/data/logits_criteria/golden.bin).
 *
 *   lockstep-gguf-f32 IN.gguf OUT.gguf   write the F32 copy, print its weights digest
 *   lockstep-gguf-f32 --digest IN.gguf   print the digest of IN's weights dequantized to F32
 *
 * The copy: GGUF v3; every metadata key/value of IN byte for byte and in order, except
 * general.file_type, which becomes 0 (all F32), as llama-quantize writes it; the same tensors
 * in the same order with the same shapes, type F32, data dequantized with lockstep's reference
 * dequantizers (kernels/types.h: the same expressions as ggml's dequantize_row_*), each tensor
 * at the next multiple of general.alignment.
 *
 * Digest (16 hex digits): FNV-1a 64 over, for each tensor in file order, its name (NUL
 * included), its 4 dims as u64 and its data as float32 little-endian (dequantized on the fly
 * when IN is not F32). Two files with the same digest hold the same tensors with the same
 * float32 bits, whatever their metadata. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "kernels/types.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME  0x100000001b3ULL

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

/* ---- raw walk over the metadata section (the file was validated by ls_gguf_open) ---------- */

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
    if (r->bad || r->n - r->pos < n)
        r->bad = true;
    else
        r->pos += (size_t)n;
}

static int scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_U8:
    case GGUF_VT_I8:
    case GGUF_VT_BOOL: return 1;
    case GGUF_VT_U16:
    case GGUF_VT_I16: return 2;
    case GGUF_VT_U32:
    case GGUF_VT_I32:
    case GGUF_VT_F32: return 4;
    case GGUF_VT_U64:
    case GGUF_VT_I64:
    case GGUF_VT_F64: return 8;
    default: return 0;
    }
}

static void skip_value(rd *r, uint32_t type, int depth) {
    if (type == GGUF_VT_STRING) {
        rd_skip(r, rd_u(r, 8));
    } else if (type == GGUF_VT_ARRAY) {
        uint32_t et = (uint32_t)rd_u(r, 4);
        uint64_t n = rd_u(r, 8);
        int es = scalar_size(et);
        if (depth > GGUF_MAX_ARRAY_DEPTH)
            r->bad = true;
        else if (es)
            n > (r->n - r->pos) / (uint64_t)es ? (void)(r->bad = true) : rd_skip(r, n * (uint64_t)es);
        else
            for (uint64_t i = 0; i < n && !r->bad; i++) skip_value(r, et, depth + 1);
    } else {
        int es = scalar_size(type);
        es ? rd_skip(r, (uint64_t)es) : (void)(r->bad = true);
    }
}

/* ---- output -------------------------------------------------------------------------------- */

typedef struct {
    FILE *f;
    uint64_t pos;
    bool bad;
} wr;

static void put(wr *w, const void *p, size_t n) {
    if (!w->bad && n && fwrite(p, 1, n, w->f) != n) w->bad = true;
    w->pos += n;
}
static void put_u32(wr *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 4);
}
static void put_u64(wr *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 8);
}
static void pad_to(wr *w, uint64_t align) {
    static const uint8_t zeros[256];
    while (w->pos % align) {
        uint64_t k = align - w->pos % align;
        put(w, zeros, k < sizeof zeros ? (size_t)k : sizeof zeros);
    }
}

/* Dequantize tensor t row by row (rows of ne[0] elements) into buf, feed the digest and, when
 * w is not NULL, the output. */
static int tensor_f32(const gguf_tensor *t, float *buf, uint64_t *h, wr *w) {
    const ls_type_traits *tr = ls_type_get(t->type);
    if (!tr || !tr->dequantize_row) {
        fprintf(stderr, "lockstep-gguf-f32: tensor '%s': type %u has no dequantizer\n", t->name, t->type);
        return -1;
    }
    int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t row_bytes = (size_t)(cols / tr->blck) * tr->type_size;
    const uint8_t *src = t->data;
    for (int64_t r = 0; r < rows; r++) {
        tr->dequantize_row(src + (size_t)r * row_bytes, buf, cols);
        *h = fnv(*h, buf, sizeof(float) * (size_t)cols);
        if (w) put(w, buf, sizeof(float) * (size_t)cols);
    }
    return 0;
}

static uint64_t tensor_header_digest(uint64_t h, const gguf_tensor *t) {
    h = fnv(h, t->name, strlen(t->name) + 1);
    for (int d = 0; d < 4; d++) {
        uint64_t v = (uint64_t)t->ne[d];
        uint8_t b[8];
        for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
        h = fnv(h, b, 8);
    }
    return h;
}

static float *row_buffer(const gguf_file *g) {
    int64_t maxc = 1;
    for (uint64_t i = 0; i < ls_gguf_n_tensors(g); i++)
        if (ls_gguf_tensor_at(g, i)->ne[0] > maxc) maxc = ls_gguf_tensor_at(g, i)->ne[0];
    return malloc(sizeof(float) * (size_t)maxc);
}

static int digest(const char *path) {
    char err[512];
    gguf_file *g;
    if (ls_gguf_open(path, &g, err, sizeof err)) {
        fprintf(stderr, "lockstep-gguf-f32: %s: %s\n", path, err);
        return 1;
    }
    float *buf = row_buffer(g);
    uint64_t h = FNV_OFFSET;
    int rc = buf ? 0 : 1;
    for (uint64_t i = 0; i < ls_gguf_n_tensors(g) && rc == 0; i++) {
        const gguf_tensor *t = ls_gguf_tensor_at(g, i);
        h = tensor_header_digest(h, t);
        rc = tensor_f32(t, buf, &h, NULL) ? 1 : 0;
    }
    if (rc == 0) printf("%016" PRIx64 "\n", h);
    free(buf);
    ls_gguf_close(g);
    return rc;
}

static int convert(const char *in, const char *out) {
    char err[512];
    gguf_file *g;
    if (ls_gguf_open(in, &g, err, sizeof err)) {
        fprintf(stderr, "lockstep-gguf-f32: %s: %s\n", in, err);
        return 1;
    }
    const void *base;
    size_t size;
    ls_gguf_mapping(g, &base, &size);
    uint64_t n_kv = ls_gguf_n_kv(g), n_t = ls_gguf_n_tensors(g);
    uint32_t align = ls_gguf_alignment(g);
    FILE *f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "lockstep-gguf-f32: cannot create '%s': %s\n", out, strerror(errno));
        ls_gguf_close(g);
        return 1;
    }
    wr w = {f, 0, false};
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, n_t);
    put_u64(&w, n_kv);
    /* metadata: walk the raw records after the 24-byte header (v2/v3 layout) */
    rd r = {base, size, 24, false};
    bool file_type_seen = false;
    for (uint64_t i = 0; i < n_kv && !r.bad; i++) {
        size_t start = r.pos;
        uint64_t klen = rd_u(&r, 8);
        size_t kpos = r.pos;
        rd_skip(&r, klen);
        uint32_t type = (uint32_t)rd_u(&r, 4);
        skip_value(&r, type, 1);
        if (r.bad) break;
        const char *key = (const char *)base + kpos;
        if (klen == strlen("general.file_type") && !memcmp(key, "general.file_type", klen)) {
            put(&w, (const uint8_t *)base + start, (size_t)(kpos + klen - start));
            put_u32(&w, GGUF_VT_U32);
            put_u32(&w, 0); /* LLAMA_FTYPE_ALL_F32 */
            file_type_seen = true;
        } else
            put(&w, (const uint8_t *)base + start, r.pos - start);
    }
    if (r.bad) {
        fprintf(stderr, "lockstep-gguf-f32: %s: cannot walk the metadata\n", in);
        fclose(f);
        ls_gguf_close(g);
        return 1;
    }
    if (!file_type_seen) fprintf(stderr, "lockstep-gguf-f32: note: %s has no general.file_type\n", in);
    /* tensor infos */
    uint64_t off = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        const gguf_tensor *t = ls_gguf_tensor_at(g, i);
        put_u64(&w, strlen(t->name));
        put(&w, t->name, strlen(t->name));
        put_u32(&w, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(&w, (uint64_t)t->ne[d]);
        put_u32(&w, LS_TYPE_F32);
        put_u64(&w, off);
        uint64_t nb = sizeof(float) * (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        off += (nb + align - 1) / align * align;
    }
    pad_to(&w, align);
    /* data */
    uint64_t data_start = w.pos, h = FNV_OFFSET;
    float *buf = row_buffer(g);
    int rc = buf ? 0 : 1;
    for (uint64_t i = 0; i < n_t && rc == 0 && !w.bad; i++) {
        const gguf_tensor *t = ls_gguf_tensor_at(g, i);
        h = tensor_header_digest(h, t);
        rc = tensor_f32(t, buf, &h, &w) ? 1 : 0;
        pad_to(&w, align);
    }
    free(buf);
    if (fclose(f) != 0) w.bad = true;
    if (w.bad) {
        fprintf(stderr, "lockstep-gguf-f32: write to '%s' failed\n", out);
        rc = 1;
    }
    if (rc == 0 && w.pos - data_start != off) {
        fprintf(stderr, "lockstep-gguf-f32: internal error: data size %" PRIu64 " != %" PRIu64 "\n", w.pos - data_start,
                off);
        rc = 1;
    }
    if (rc == 0) printf("%016" PRIx64 "\n", h);
    ls_gguf_close(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--digest")) return digest(argv[2]);
    if (argc == 3 && argv[1][0] != '-') return convert(argv[1], argv[2]);
    fprintf(stderr, "usage: lockstep-gguf-f32 IN.gguf OUT.gguf     F32 copy; prints its weights digest\n"
                    "       lockstep-gguf-f32 --digest IN.gguf     digest of IN's weights as float32\n");
    return 2;
}
