/* GGUF reader: maps a file (or takes caller memory) and validates all of it once.
 *
 * Everything is read through one bounds-checked cursor (gguf_parser) whose first error
 * sticks: later reads return zeros and loops stop, so parsing code stays linear and the
 * message names the first problem and where it was ("metadata key #3 'x'[5]: ...").
 *
 * Metadata is parsed in two passes over the same bytes. Pass 1 validates and counts the
 * decoded items that arrays of strings / arrays of arrays need; pass 2 decodes into one
 * arena of exactly that size. So the reader never allocates from an untrusted count: every
 * count is first checked against the bytes that remain (an element takes at least 1, 8 or
 * 12 bytes), and the real model's 262144-string vocabulary costs one allocation.
 *
 * Lookups use sorted indexes (binary search) rather than hash tables: O(log n), no
 * hash-flooding worst case on hostile names, and sorting doubles as the duplicate check.
 * Tensor data is never copied; pointers point into the mapping. */
#include "core/hugemap.h"
#include "format/gguf.h"
#include "format/name_quote.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/types.h"

#define GGUF_HEADER_SIZE       24 /* magic, version, tensor count, kv count */
#define GGUF_MIN_KV_SIZE       13 /* key length + value type + a 1-byte value */
#define GGUF_MIN_TENSOR_INFO   32 /* name length + n_dims + one ne + type + offset */
#define GGUF_MIN_ARRAY_SIZE    12 /* element type + count */
#define GGUF_DEFAULT_ALIGNMENT 32

/* A name (key or tensor name) and the index of what it names, for the sorted indexes. */
typedef struct {
    const char *ptr;
    uint64_t len;
    uint64_t idx;
} gguf_ref;

struct gguf_file {
    const uint8_t *base; /* [size] the file bytes (mapping or caller memory) */
    size_t size;
    void *map;      /* non-NULL when we own a mapping (of the file, or a huge-page copy) */
    size_t map_len; /* its length for munmap */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset; /* file offset of the data section */
    uint64_t n_kv, n_tensors;
    gguf_kv *kvs;           /* [n_kv] */
    gguf_value *items;      /* [n_items] decoded elements of string / nested arrays */
    gguf_tensor *tensors;   /* [n_tensors] */
    char *names;            /* tensor names, NUL-terminated, back to back */
    gguf_ref *kv_index;     /* [n_kv] sorted by key */
    gguf_ref *tensor_index; /* [n_tensors] sorted by name */
};

/* ---------------------------------------------------------------------------------------
 * Cursor with a sticky first error
 * ------------------------------------------------------------------------------------- */

enum { AT_FILE, AT_KV, AT_TENSOR };

typedef struct {
    const uint8_t *base;
    size_t size, pos;
    int failed;
    char *err;
    size_t errlen;
    /* Where we are, for messages. */
    int at;                              /* AT_* */
    uint64_t index;                      /* key / tensor number */
    gguf_str name;                       /* its name once read (ptr NULL before) */
    int depth;                           /* valid entries of path[] */
    uint64_t path[GGUF_MAX_ARRAY_DEPTH]; /* element indices inside nested arrays */
    /* Item arena: NULL while counting (pass 1), then filled in pass 2. */
    gguf_value *items;
    uint64_t n_items, cap_items;
} gguf_parser;

static size_t cur_left(const gguf_parser *p) {
    return p->size - p->pos;
}

static void where_format(const gguf_parser *p, char *buf, size_t cap) {
    char name[LS_NAME_QUOTED];
    int n = 0;
    int named = p->name.ptr && p->name.len > 0; /* else locate it by number */
    buf[0] = 0;
    if (named) ls_name_quote(name, sizeof name, p->name.ptr, p->name.len);
    if (p->at == AT_KV) {
        if (named)
            n = snprintf(buf, cap, "metadata key #%" PRIu64 " '%s'", p->index, name);
        else
            n = snprintf(buf, cap, "metadata key #%" PRIu64, p->index);
        for (int d = 0; d < p->depth && n > 0 && (size_t)n < cap; d++)
            n += snprintf(buf + n, cap - (size_t)n, "[%" PRIu64 "]", p->path[d]);
    } else if (p->at == AT_TENSOR) {
        if (named)
            snprintf(buf, cap, "tensor '%s'", name);
        else
            snprintf(buf, cap, "tensor #%" PRIu64, p->index);
    }
}

__attribute__((format(printf, 2, 3))) static void parser_fail(gguf_parser *p, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = 1;
    if (!p->err || p->errlen == 0) return;
    char where[LS_NAME_QUOTED + 248], msg[512];
    where_format(p, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "gguf: %s%s%s", where, where[0] ? ": " : "", msg);
}

/* n bytes at the cursor for "<what><suffix>", or NULL (and the error set) if fewer remain.
 * The two-part label keeps formatting off the hot path (262144 strings in a vocabulary). */
static const uint8_t *cur_take2(gguf_parser *p, uint64_t n, const char *what, const char *suffix) {
    if (p->failed) return NULL;
    if (n > cur_left(p)) {
        parser_fail(p, "truncated: %s%s needs %" PRIu64 " bytes at offset %zu, file size %zu", what, suffix, n, p->pos,
                    p->size);
        return NULL;
    }
    const uint8_t *r = p->base + p->pos;
    p->pos += (size_t)n;
    return r;
}

static const uint8_t *cur_take(gguf_parser *p, uint64_t n, const char *what) {
    return cur_take2(p, n, what, "");
}

static uint16_t le16(const uint8_t *b) {
    return (uint16_t)(b[0] | b[1] << 8);
}
static uint32_t le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t le64(const uint8_t *b) {
    return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
}

static uint32_t cur_u32(gguf_parser *p, const char *what) {
    const uint8_t *b = cur_take(p, 4, what);
    return b ? le32(b) : 0;
}

static uint64_t cur_u64(gguf_parser *p, const char *what) {
    const uint8_t *b = cur_take(p, 8, what);
    return b ? le64(b) : 0;
}

/* A gguf string (u64 length + bytes); its length is checked before anything trusts it. */
static gguf_str cur_str(gguf_parser *p, const char *what) {
    gguf_str s = {NULL, 0};
    const uint8_t *b = cur_take2(p, 8, what, " length");
    if (!b) return s;
    uint64_t n = le64(b);
    if (n > cur_left(p)) {
        parser_fail(p, "%s length %" PRIu64 " exceeds remaining %zu bytes", what, n, cur_left(p));
        return s;
    }
    s.ptr = (const char *)cur_take(p, n, what);
    s.len = n;
    return s;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF) and no NUL: names
 * are handed out and looked up as C strings. Returns NULL or what is wrong, with the
 * offending byte offset in *at. */
static const char *utf8_check(const char *str, uint64_t n, uint64_t *at) {
    const uint8_t *s = (const uint8_t *)str;
    for (uint64_t i = 0; i < n;) {
        uint8_t c = s[i];
        *at = i;
        if (c == 0) return "contains a NUL byte";
        if (c < 0x80) {
            i++;
            continue;
        }
        /* Lead byte 110xxxxx, 1110xxxx or 11110xxx: sequence length, then the smallest code
         * point that length may encode (anything less is an overlong form). */
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        uint64_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (len == 0 || n - i < len) return "is not valid UTF-8";
        uint32_t cp = c & (0x7fu >> len);
        for (uint64_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return "is not valid UTF-8";
            cp = cp << 6 | (s[i + k] & 0x3fu);
        }
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return "is not valid UTF-8";
        i += len;
    }
    return NULL;
}

/* A key or tensor name: non-empty, valid UTF-8, no NUL. `what` names it in the message. */
static int name_valid(gguf_parser *p, gguf_str name, const char *what) {
    uint64_t at = 0;
    const char *bad = name.len == 0 ? NULL : utf8_check(name.ptr, name.len, &at);
    if (name.len == 0)
        parser_fail(p, "%s is empty", what);
    else if (bad)
        parser_fail(p, "%s %s (byte %" PRIu64 ")", what, bad, at);
    return !p->failed;
}

/* ---------------------------------------------------------------------------------------
 * Metadata values
 * ------------------------------------------------------------------------------------- */

static int vtype_valid(uint32_t t) {
    return t <= GGUF_VT_F64;
}

/* Bytes of one fixed-size value; 0 for STRING, ARRAY and unknown types. */
static uint64_t vtype_size(uint32_t t) {
    static const uint8_t sizes[] = {
        [GGUF_VT_U8] = 1,  [GGUF_VT_I8] = 1,  [GGUF_VT_U16] = 2, [GGUF_VT_I16] = 2,
        [GGUF_VT_U32] = 4, [GGUF_VT_I32] = 4, [GGUF_VT_F32] = 4, [GGUF_VT_BOOL] = 1,
        [GGUF_VT_U64] = 8, [GGUF_VT_I64] = 8, [GGUF_VT_F64] = 8,
    };
    return t < sizeof sizes ? sizes[t] : 0;
}

const char *ls_gguf_vtype_name(uint32_t t) {
    static const char *names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return vtype_valid(t) ? names[t] : "?";
}

/* Decode one fixed-size little-endian value at b (any alignment). */
static void scalar_decode(uint32_t t, const uint8_t *b, gguf_value *out) {
    out->type = (gguf_vtype)t;
    switch (t) {
    case GGUF_VT_U8: out->v.u = b[0]; break;
    case GGUF_VT_I8: out->v.i = (int8_t)b[0]; break;
    case GGUF_VT_U16: out->v.u = le16(b); break;
    case GGUF_VT_I16: out->v.i = (int16_t)le16(b); break;
    case GGUF_VT_U32: out->v.u = le32(b); break;
    case GGUF_VT_I32: out->v.i = (int32_t)le32(b); break;
    case GGUF_VT_U64: out->v.u = le64(b); break;
    case GGUF_VT_I64: out->v.i = (int64_t)le64(b); break;
    case GGUF_VT_BOOL: /* llama.cpp accepts any byte as a bool; so do we */ out->v.u = b[0] != 0; break;
    case GGUF_VT_F32: {
        uint32_t bits = le32(b);
        float x;
        memcpy(&x, &bits, sizeof x);
        out->v.f = x;
        break;
    }
    case GGUF_VT_F64: {
        uint64_t bits = le64(b);
        memcpy(&out->v.f, &bits, sizeof out->v.f);
        break;
    }
    default: break;
    }
}

/* `count` decoded items from the arena (pass 2), or just count them (pass 1: NULL). */
static gguf_value *arena_take(gguf_parser *p, uint64_t count) {
    if (!p->items) {
        p->n_items += count;
        return NULL;
    }
    if (count > p->cap_items - p->n_items) { /* only if the bytes changed between passes */
        parser_fail(p, "metadata changed while being read");
        return NULL;
    }
    gguf_value *r = p->items + p->n_items;
    p->n_items += count;
    return r;
}

static void value_parse(gguf_parser *p, uint32_t type, int depth, gguf_value *out);

/* An array value at nesting `depth` (1 for a key's own array). Counts are checked against
 * the remaining bytes before any loop or allocation, so a count of 2^60 fails at once. */
static void array_parse(gguf_parser *p, int depth, gguf_value *out) {
    if (depth > GGUF_MAX_ARRAY_DEPTH) {
        parser_fail(p, "arrays nested deeper than %d", GGUF_MAX_ARRAY_DEPTH);
        return;
    }
    uint32_t elem = cur_u32(p, "array element type");
    uint64_t count = cur_u64(p, "array count");
    if (p->failed) return;
    if (!vtype_valid(elem)) {
        parser_fail(p, "unknown array element type %" PRIu32, elem);
        return;
    }
    uint64_t min = elem == GGUF_VT_STRING ? 8 : elem == GGUF_VT_ARRAY ? GGUF_MIN_ARRAY_SIZE : vtype_size(elem);
    if (count > cur_left(p) / min) {
        parser_fail(p, "array count %" PRIu64 " of %s too large for remaining %zu bytes", count,
                    ls_gguf_vtype_name(elem), cur_left(p));
        return;
    }
    const uint8_t *data = p->base + p->pos;
    gguf_value *items = NULL;
    if (elem == GGUF_VT_STRING || elem == GGUF_VT_ARRAY) {
        items = arena_take(p, count);
        for (uint64_t j = 0; j < count && !p->failed; j++) {
            p->depth = depth;
            p->path[depth - 1] = j;
            value_parse(p, elem, depth, items ? &items[j] : NULL);
        }
        if (!p->failed) p->depth = depth - 1;
    } else {
        cur_take(p, count * min, "array data");
    }
    if (out && !p->failed) {
        out->type = GGUF_VT_ARRAY;
        out->v.arr.elem = (gguf_vtype)elem;
        out->v.arr.count = count;
        out->v.arr.data = data;
        out->v.arr.items = items;
    }
}

/* One value of `type`; decoded into *out when out is non-NULL (pass 2). */
static void value_parse(gguf_parser *p, uint32_t type, int depth, gguf_value *out) {
    if (type == GGUF_VT_STRING) {
        gguf_str s = cur_str(p, "string");
        if (out && !p->failed) {
            out->type = GGUF_VT_STRING;
            out->v.s = s;
        }
    } else if (type == GGUF_VT_ARRAY) {
        array_parse(p, depth + 1, out);
    } else if (vtype_valid(type)) {
        const uint8_t *b = cur_take(p, vtype_size(type), ls_gguf_vtype_name(type));
        if (out && b) scalar_decode(type, b, out);
    } else {
        parser_fail(p, "unknown value type %" PRIu32, type);
    }
}

/* All key/value pairs from the cursor: pass 1 with kvs == NULL, pass 2 with kvs[n_kv]. */
static void kvs_parse(gguf_parser *p, uint64_t n_kv, gguf_kv *kvs) {
    for (uint64_t i = 0; i < n_kv && !p->failed; i++) {
        p->at = AT_KV;
        p->index = i;
        p->name.ptr = NULL;
        p->depth = 0;
        gguf_str key = cur_str(p, "key");
        if (p->failed) return;
        p->name = key;
        if (!name_valid(p, key, "key")) return;
        uint32_t type = cur_u32(p, "value type");
        if (p->failed) return;
        if (kvs) kvs[i].key = key;
        value_parse(p, type, 0, kvs ? &kvs[i].value : NULL);
    }
}

/* ---------------------------------------------------------------------------------------
 * Sorted name indexes
 * ------------------------------------------------------------------------------------- */

static int name_cmp(const char *a, uint64_t alen, const char *b, uint64_t blen) {
    uint64_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, (size_t)n) : 0;
    if (c) return c;
    return (alen > blen) - (alen < blen);
}

/* By name, then by index, so the first of two duplicates sorts first. */
static int ref_cmp(const void *pa, const void *pb) {
    const gguf_ref *a = pa, *b = pb;
    int c = name_cmp(a->ptr, a->len, b->ptr, b->len);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static const gguf_ref *ref_find(const gguf_ref *refs, uint64_t n, const char *name) {
    if (!name) return NULL;
    uint64_t len = strlen(name), lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = name_cmp(refs[mid].ptr, refs[mid].len, name, len);
        if (c == 0) return &refs[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Sort refs[n]; returns the index into refs of a later duplicate, or n if none. */
static uint64_t refs_sort(gguf_ref *refs, uint64_t n) {
    if (n > 1) qsort(refs, (size_t)n, sizeof *refs, ref_cmp);
    for (uint64_t i = 1; i < n; i++)
        if (name_cmp(refs[i - 1].ptr, refs[i - 1].len, refs[i].ptr, refs[i].len) == 0) return i;
    return n;
}

/* calloc with an overflow-checked size, never 0 bytes (so NULL always means failure). */
static void *array_alloc(gguf_parser *p, uint64_t n, size_t elem, const char *what) {
    uint64_t bytes;
    void *r = NULL;
    if (!__builtin_mul_overflow(n ? n : 1, (uint64_t)elem, &bytes) && bytes <= SIZE_MAX) r = calloc(1, (size_t)bytes);
    if (!r) parser_fail(p, "out of memory (%" PRIu64 " %s)", n, what);
    return r;
}

/* ---------------------------------------------------------------------------------------
 * Header and metadata section
 * ------------------------------------------------------------------------------------- */

static void header_parse(gguf_parser *p, gguf_file *f) {
    if (p->size >= 4 && memcmp(p->base, "GGUF", 4) != 0) {
        parser_fail(p, "not a GGUF file (bad magic)");
        return;
    }
    if (p->size < 8) {
        parser_fail(p, "truncated header (%zu bytes, need %d)", p->size, GGUF_HEADER_SIZE);
        return;
    }
    uint32_t v = le32(p->base + 4);
    if (v != 2 && v != 3) {
        uint32_t swapped = __builtin_bswap32(v);
        if (swapped == 2 || swapped == 3)
            parser_fail(p, "big-endian GGUF v%" PRIu32 " is not supported", swapped);
        else
            parser_fail(p, "unsupported GGUF version %" PRIu32 " (supported: 2, 3)", v);
        return;
    }
    if (p->size < GGUF_HEADER_SIZE) {
        parser_fail(p, "truncated header (%zu bytes, need %d)", p->size, GGUF_HEADER_SIZE);
        return;
    }
    f->version = v;
    f->n_tensors = le64(p->base + 8);
    f->n_kv = le64(p->base + 16);
    p->pos = GGUF_HEADER_SIZE;
    if (f->n_kv > cur_left(p) / GGUF_MIN_KV_SIZE)
        parser_fail(p, "metadata key count %" PRIu64 " too large for remaining %zu bytes", f->n_kv, cur_left(p));
    else if (f->n_tensors > cur_left(p) / GGUF_MIN_TENSOR_INFO)
        parser_fail(p, "tensor count %" PRIu64 " too large for remaining %zu bytes", f->n_tensors, cur_left(p));
}

/* general.alignment: u32, a nonzero power of two; 32 when absent. */
static void alignment_parse(gguf_parser *p, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_value *a = ls_gguf_find(f, "general.alignment");
    if (!a) return;
    if (a->type != GGUF_VT_U32)
        parser_fail(p, "general.alignment has type %s, expected u32", ls_gguf_vtype_name(a->type));
    else if (a->v.u == 0 || (a->v.u & (a->v.u - 1)) != 0)
        parser_fail(p, "general.alignment = %" PRIu64 " is not a nonzero power of two", a->v.u);
    else
        f->alignment = (uint32_t)a->v.u;
}

/* Both metadata passes, then the key index (which also finds duplicate keys). */
static void metadata_parse(gguf_parser *p, gguf_file *f) {
    size_t start = p->pos;
    kvs_parse(p, f->n_kv, NULL); /* pass 1: validate, count items */
    if (p->failed) return;
    f->kvs = array_alloc(p, f->n_kv, sizeof *f->kvs, "metadata keys");
    f->items = array_alloc(p, p->n_items, sizeof *f->items, "array items");
    f->kv_index = array_alloc(p, f->n_kv, sizeof *f->kv_index, "metadata keys");
    if (p->failed) return;
    p->cap_items = p->n_items;
    p->n_items = 0;
    p->items = f->items;
    p->pos = start;
    kvs_parse(p, f->n_kv, f->kvs); /* pass 2: decode */
    if (p->failed) return;
    p->at = AT_FILE;
    p->depth = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) f->kv_index[i] = (gguf_ref){f->kvs[i].key.ptr, f->kvs[i].key.len, i};
    uint64_t dup = refs_sort(f->kv_index, f->n_kv);
    if (dup < f->n_kv) {
        p->at = AT_KV;
        p->index = f->kv_index[dup].idx;
        p->name = f->kvs[p->index].key;
        parser_fail(p, "duplicate key (first defined as metadata key #%" PRIu64 ")", f->kv_index[dup - 1].idx);
        return;
    }
    alignment_parse(p, f);
}

/* ---------------------------------------------------------------------------------------
 * Tensor infos
 * ------------------------------------------------------------------------------------- */

/* Type, block, element count and byte size of a tensor whose dims were read into t. */
static void tensor_shape_check(gguf_parser *p, gguf_tensor *t) {
    const ls_type_traits *tt = ls_type_get(t->type);
    if (!tt) {
        parser_fail(p, "unknown ggml type %" PRIu32, t->type);
        return;
    }
    if (t->ne[0] % tt->blck != 0) {
        parser_fail(p, "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, t->ne[0], tt->name,
                    tt->blck);
        return;
    }
    int64_t nel = 1, rows = 1;
    for (int d = 0; d < 4; d++) {
        if (__builtin_mul_overflow(nel, t->ne[d], &nel) || (d > 0 && __builtin_mul_overflow(rows, t->ne[d], &rows))) {
            parser_fail(p, "element count overflows (ne = %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 ")",
                        t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
            return;
        }
    }
    size_t row = ls_row_size(t->type, t->ne[0]);
    uint64_t nbytes;
    if (row == 0 || __builtin_mul_overflow((uint64_t)row, (uint64_t)rows, &nbytes) || nbytes > SIZE_MAX) {
        parser_fail(p, "byte size overflows (ne = %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 " of %s)",
                    t->ne[0], t->ne[1], t->ne[2], t->ne[3], tt->name);
        return;
    }
    t->nbytes = nbytes;
}

/* One tensor info into t; its name (still in the mapping) into *ref. */
static void tensor_info_parse(gguf_parser *p, const gguf_file *f, uint64_t i, gguf_tensor *t, gguf_ref *ref) {
    p->at = AT_TENSOR;
    p->index = i;
    p->name.ptr = NULL;
    gguf_str name = cur_str(p, "name");
    if (p->failed) return;
    p->name = name;
    *ref = (gguf_ref){name.ptr, name.len, i};
    if (!name_valid(p, name, "name")) return;
    uint32_t n_dims = cur_u32(p, "n_dims");
    if (!p->failed && (n_dims < 1 || n_dims > 4)) {
        parser_fail(p, "n_dims %" PRIu32 " out of range 1..4", n_dims);
        return;
    }
    t->n_dims = (int)n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims && !p->failed; d++) {
        uint64_t ne = cur_u64(p, "ne");
        if (!p->failed && (ne == 0 || ne > INT64_MAX))
            parser_fail(p, "ne[%" PRIu32 "] = %" PRIu64 " out of range (must be 1..2^63-1)", d, ne);
        t->ne[d] = (int64_t)ne;
    }
    t->type = cur_u32(p, "type");
    t->offset = cur_u64(p, "offset");
    if (p->failed) return;
    tensor_shape_check(p, t);
    if (!p->failed && t->offset % f->alignment != 0)
        parser_fail(p, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32, t->offset, f->alignment);
}

typedef struct {
    uint64_t start, end, idx;
} gguf_span;

static int span_cmp(const void *pa, const void *pb) {
    const gguf_span *a = pa, *b = pb;
    if (a->start != b->start) return (a->start > b->start) - (a->start < b->start);
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static void tensor_at(gguf_parser *p, const gguf_file *f, uint64_t i) {
    p->at = AT_TENSOR;
    p->index = i;
    p->name = (gguf_str){f->tensors[i].name, strlen(f->tensors[i].name)};
}

/* Every tensor's data inside the file after the data section, and no two overlapping. */
static void tensors_place(gguf_parser *p, gguf_file *f) {
    gguf_span *spans = array_alloc(p, f->n_tensors, sizeof *spans, "tensors");
    if (!spans) return;
    for (uint64_t i = 0; i < f->n_tensors && !p->failed; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t start, end;
        tensor_at(p, f, i);
        if (__builtin_add_overflow(f->data_offset, t->offset, &start) ||
            __builtin_add_overflow(start, t->nbytes, &end)) {
            parser_fail(p, "data offset %" PRIu64 " + size %" PRIu64 " overflows", t->offset, t->nbytes);
        } else if (end > p->size) {
            parser_fail(p, "data ends at %" PRIu64 ", past end of file (size %zu)", end, p->size);
        } else {
            t->data = p->base + start;
            spans[i] = (gguf_span){start, end, i};
        }
    }
    if (!p->failed && f->n_tensors > 1) {
        qsort(spans, (size_t)f->n_tensors, sizeof *spans, span_cmp);
        for (uint64_t i = 1; i < f->n_tensors; i++) {
            const gguf_span *a = &spans[i - 1], *b = &spans[i];
            if (a->end <= b->start) continue;
            char other[LS_NAME_QUOTED];
            ls_name_quote(other, sizeof other, f->tensors[a->idx].name, strlen(f->tensors[a->idx].name));
            tensor_at(p, f, b->idx);
            parser_fail(p, "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64 ", %" PRIu64 ")", b->start,
                        b->end, other, a->start, a->end);
            break;
        }
    }
    free(spans);
}

/* Tensor infos, names copied into one block, name index, data placement. */
static void tensors_parse(gguf_parser *p, gguf_file *f) {
    uint64_t n = f->n_tensors;
    p->at = AT_FILE;
    if (n > cur_left(p) / GGUF_MIN_TENSOR_INFO) {
        parser_fail(p, "tensor count %" PRIu64 " too large for remaining %zu bytes", n, cur_left(p));
        return;
    }
    f->tensors = array_alloc(p, n, sizeof *f->tensors, "tensors");
    f->tensor_index = array_alloc(p, n, sizeof *f->tensor_index, "tensors");
    for (uint64_t i = 0; i < n && !p->failed; i++) tensor_info_parse(p, f, i, &f->tensors[i], &f->tensor_index[i]);
    if (p->failed) return;

    /* Names were validated in the mapping; copy them once, NUL-terminated, for callers. */
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += f->tensor_index[i].len + 1; /* <= file size + n */
    f->names = array_alloc(p, total, 1, "bytes of tensor names");
    if (p->failed) return;
    char *dst = f->names;
    for (uint64_t i = 0; i < n; i++) {
        gguf_ref *r = &f->tensor_index[i];
        memcpy(dst, r->ptr, (size_t)r->len);
        dst[r->len] = 0;
        f->tensors[i].name = dst;
        r->ptr = dst;
        dst += r->len + 1;
    }
    uint64_t dup = refs_sort(f->tensor_index, n);
    if (dup < n) {
        tensor_at(p, f, f->tensor_index[dup].idx);
        parser_fail(p, "duplicate tensor name (also tensor #%" PRIu64 ")", f->tensor_index[dup - 1].idx);
        return;
    }
    /* The data section starts at the next alignment boundary after the infos. */
    f->data_offset = ((uint64_t)p->pos + f->alignment - 1) / f->alignment * f->alignment;
    tensors_place(p, f);
}

/* ---------------------------------------------------------------------------------------
 * Open / close
 * ------------------------------------------------------------------------------------- */

int ls_gguf_open_memory(const void *data, size_t size, gguf_file **out, char *err, size_t errlen) {
    static const uint8_t empty[1];
    *out = NULL;
    if (err && errlen) err[0] = 0;
    gguf_parser p = {.base = data ? data : empty, .size = data ? size : 0, .err = err, .errlen = errlen};
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        parser_fail(&p, "out of memory");
        return -1;
    }
    f->base = p.base;
    f->size = p.size;
    header_parse(&p, f);
    if (!p.failed) metadata_parse(&p, f);
    if (!p.failed) tensors_parse(&p, f);
    if (p.failed) {
        ls_gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int ls_gguf_open(const char *path, gguf_file **out, char *err, size_t errlen) {
    return ls_gguf_open_ex(path, 0, out, err, errlen);
}

int ls_gguf_open_ex(const char *path, int flags, gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err && errlen) snprintf(err, errlen, "gguf: cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (err && errlen) snprintf(err, errlen, "gguf: '%s' is not a regular file", path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size, map_len = 0;
    /* huge pages for a weight stream (core/hugemap.h); else the file mapping */
    void *map = size > 0 && (flags & LS_GGUF_OPEN_HUGE) ? ls_hugemap_read(fd, size, &map_len) : NULL;
    if (size > 0 && !map) { /* mmap rejects length 0; an empty file fails as a truncated header */
        map_len = size;
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            if (err && errlen)
                snprintf(err, errlen, "gguf: cannot map '%s' (%zu bytes): %s", path, size, strerror(errno));
            close(fd);
            return -1;
        }
    }
    close(fd); /* the mapping keeps the file */
    if (ls_gguf_open_memory(map, size, out, err, errlen) != 0) {
        if (map) munmap(map, map_len);
        return -1;
    }
    (*out)->map = map;
    (*out)->map_len = map_len;
    return 0;
}

void ls_gguf_mapping(const gguf_file *f, const void **base, size_t *size) {
    *base = f->base;
    *size = f->size;
}

void ls_gguf_close(gguf_file *f) {
    if (!f) return;
    free(f->kvs);
    free(f->items);
    free(f->kv_index);
    free(f->tensors);
    free(f->tensor_index);
    free(f->names);
    if (f->map) munmap(f->map, f->map_len);
    free(f);
}

/* ---------------------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------------------- */

uint32_t ls_gguf_version(const gguf_file *f) {
    return f->version;
}
uint32_t ls_gguf_alignment(const gguf_file *f) {
    return f->alignment;
}
uint64_t ls_gguf_data_offset(const gguf_file *f) {
    return f->data_offset;
}
uint64_t ls_gguf_n_kv(const gguf_file *f) {
    return f->n_kv;
}
uint64_t ls_gguf_n_tensors(const gguf_file *f) {
    return f->n_tensors;
}

const gguf_kv *ls_gguf_kv_at(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? &f->kvs[i] : NULL;
}
const gguf_tensor *ls_gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_value *ls_gguf_find(const gguf_file *f, const char *key) {
    const gguf_ref *r = ref_find(f->kv_index, f->n_kv, key);
    return r ? &f->kvs[r->idx].value : NULL;
}

const gguf_tensor *ls_gguf_find_tensor(const gguf_file *f, const char *name) {
    const gguf_ref *r = ref_find(f->tensor_index, f->n_tensors, name);
    return r ? &f->tensors[r->idx] : NULL;
}

static int is_uint(gguf_vtype t) {
    return t == GGUF_VT_U8 || t == GGUF_VT_U16 || t == GGUF_VT_U32 || t == GGUF_VT_U64;
}
static int is_sint(gguf_vtype t) {
    return t == GGUF_VT_I8 || t == GGUF_VT_I16 || t == GGUF_VT_I32 || t == GGUF_VT_I64;
}

/* Value conversions shared by the key getters and the array element getters. */
static int value_i64(const gguf_value *v, int64_t *out) {
    if (is_sint(v->type))
        *out = v->v.i;
    else if (is_uint(v->type) && v->v.u <= INT64_MAX)
        *out = (int64_t)v->v.u;
    else
        return -2;
    return 0;
}

static int value_f32(const gguf_value *v, float *out) {
    if (v->type == GGUF_VT_F32 || v->type == GGUF_VT_F64) {
        if (isfinite(v->v.f) && fabs(v->v.f) > FLT_MAX) return -2; /* f64 out of float range */
        *out = (float)v->v.f;
    } else if (is_sint(v->type)) {
        *out = (float)v->v.i;
    } else if (is_uint(v->type)) {
        *out = (float)v->v.u;
    } else {
        return -2;
    }
    return 0;
}

int ls_gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_value *v = ls_gguf_find(f, key);
    if (!v) return -1;
    if (is_uint(v->type) && v->v.u <= UINT32_MAX)
        *out = (uint32_t)v->v.u;
    else if (is_sint(v->type) && v->v.i >= 0 && v->v.i <= (int64_t)UINT32_MAX)
        *out = (uint32_t)v->v.i;
    else
        return -2;
    return 0;
}

int ls_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_value *v = ls_gguf_find(f, key);
    return v ? value_i64(v, out) : -1;
}

int ls_gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_value *v = ls_gguf_find(f, key);
    return v ? value_f32(v, out) : -1;
}

int ls_gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_value *v = ls_gguf_find(f, key);
    if (!v) return -1;
    if (v->type != GGUF_VT_BOOL) return -2;
    *out = (int)v->v.u;
    return 0;
}

int ls_gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_value *v = ls_gguf_find(f, key);
    if (!v) return -1;
    if (v->type != GGUF_VT_STRING) return -2;
    *out = v->v.s;
    return 0;
}

int ls_gguf_get_arr(const gguf_file *f, const char *key, const gguf_value **out) {
    const gguf_value *v = ls_gguf_find(f, key);
    if (!v) return -1;
    if (v->type != GGUF_VT_ARRAY) return -2;
    *out = v;
    return 0;
}

/* Element i of a fixed-size array, decoded; -1 out of range, -2 not a fixed-size array. */
static int arr_elem(const gguf_value *arr, uint64_t i, gguf_value *out) {
    if (!arr || arr->type != GGUF_VT_ARRAY || i >= arr->v.arr.count) return -1;
    uint64_t size = vtype_size(arr->v.arr.elem);
    if (size == 0) return -2;
    scalar_decode(arr->v.arr.elem, arr->v.arr.data + i * size, out);
    return 0;
}

int ls_gguf_arr_str(const gguf_value *arr, uint64_t i, gguf_str *out) {
    if (!arr || arr->type != GGUF_VT_ARRAY || i >= arr->v.arr.count) return -1;
    if (arr->v.arr.elem != GGUF_VT_STRING) return -2;
    *out = arr->v.arr.items[i].v.s;
    return 0;
}

int ls_gguf_arr_sub(const gguf_value *arr, uint64_t i, const gguf_value **out) {
    if (!arr || arr->type != GGUF_VT_ARRAY || i >= arr->v.arr.count) return -1;
    if (arr->v.arr.elem != GGUF_VT_ARRAY) return -2;
    *out = &arr->v.arr.items[i];
    return 0;
}

int ls_gguf_arr_i64(const gguf_value *arr, uint64_t i, int64_t *out) {
    gguf_value v;
    int rc = arr_elem(arr, i, &v);
    return rc ? rc : value_i64(&v, out);
}

int ls_gguf_arr_f32(const gguf_value *arr, uint64_t i, float *out) {
    gguf_value v;
    int rc = arr_elem(arr, i, &v);
    return rc ? rc : value_f32(&v, out);
}
