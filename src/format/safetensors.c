/* safetensors reader: maps files read-only and validates every header once.
 *
 * The header is hostile JSON. It is copied out of the mapping into a NUL-terminated buffer
 * before cJSON sees it, so the parser can never read past the header into tensor data or
 * past the end of the file, and a NUL inside the header is an error instead of a silent
 * truncation. Numbers arrive as doubles: only integral values up to 2^53 are accepted, so
 * every offset and dimension is exact before the overflow-checked arithmetic uses it.
 *
 * Tensors of all shards go into one array; one sort by name gives both the lookup index
 * (binary search, no hash-flooding worst case) and the duplicate check across shards. */
#include "format/safetensors.h"
#include "format/name_quote.h"
#include "core/hugemap.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_HEADER_MAX  100000000u /* the reference reader's limit; real headers are < 1 MB */
#define ST_INDEX_MAX   (64u << 20)
#define ST_EXACT_MAX   9007199254740992.0 /* 2^53: larger doubles are not exact integers */
#define ST_QUOTED      LS_NAME_QUOTED
#define ST_INDEX_NAME  "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

typedef struct {
    char *path; /* for messages; "<memory>" for buffers */
    void *map;  /* NULL for empty files and buffers */
    size_t size;
    size_t map_len; /* bytes mapped at map (a huge-page copy is rounded up to 2 MiB) */
} st_file;

struct ls_st_set {
    st_file *files;
    int32_t n_files;
    ls_st_tensor *tensors;
    int64_t n_tensors, cap_tensors;
    const ls_st_tensor **by_name; /* sorted by name */
};

typedef struct {
    char *err;
    size_t errlen;
    int failed;
    size_t huge_left; /* LS_ST_OPEN_HUGE: bytes the shards may still copy (core/hugemap.h); 0: map */
} st_ctx;

static const struct {
    const char *name;
    size_t size;
} dtypes[LS_ST_DTYPE_COUNT] = {
    [LS_ST_F64] = {"F64", 8},   [LS_ST_F32] = {"F32", 4},         [LS_ST_F16] = {"F16", 2},
    [LS_ST_BF16] = {"BF16", 2}, [LS_ST_I64] = {"I64", 8},         [LS_ST_I32] = {"I32", 4},
    [LS_ST_I16] = {"I16", 2},   [LS_ST_I8] = {"I8", 1},           [LS_ST_U8] = {"U8", 1},
    [LS_ST_U16] = {"U16", 2},   [LS_ST_U32] = {"U32", 4},         [LS_ST_U64] = {"U64", 8},
    [LS_ST_BOOL] = {"BOOL", 1}, [LS_ST_F8_E4M3] = {"F8_E4M3", 1}, [LS_ST_F8_E5M2] = {"F8_E5M2", 1},
};

size_t ls_st_dtype_size(ls_st_dtype t) {
    return (unsigned)t < LS_ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *ls_st_dtype_name(ls_st_dtype t) {
    return (unsigned)t < LS_ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

/* Quote a hostile name: printable ASCII kept, everything else as \xNN, long names cut. */
/* First error sticks. `file` and `tensor` (either may be NULL) locate it. */
__attribute__((format(printf, 4, 5))) static void st_fail(st_ctx *c, const char *file, const char *tensor,
                                                          const char *fmt, ...) {
    if (c->failed) return;
    c->failed = 1;
    if (!c->err || c->errlen == 0) return;
    char msg[512], tq[ST_QUOTED];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tq[0] = 0;
    if (tensor) ls_name_quote(tq, sizeof tq, tensor, strlen(tensor));
    snprintf(c->err, c->errlen, "safetensors: %s%s%s%s%s%s", file ? file : "", file ? ": " : "",
             tensor ? "tensor '" : "", tq, tensor ? "': " : "", msg);
}

/* ---------------------------------------------------------------------------------------
 * Set
 * ------------------------------------------------------------------------------------- */

int32_t ls_st_n_files(const ls_st_set *s) {
    return s->n_files;
}

void ls_st_file_mapping(const ls_st_set *s, int32_t i, const void **base, size_t *size) {
    *base = s->files[i].map;
    *size = s->files[i].map ? s->files[i].size : 0;
}

void ls_st_close(ls_st_set *s) {
    if (!s) return;
    for (int64_t i = 0; i < s->n_tensors; i++) free((char *)s->tensors[i].name);
    for (int32_t i = 0; i < s->n_files; i++) {
        if (s->files[i].map) munmap(s->files[i].map, s->files[i].map_len);
        free(s->files[i].path);
    }
    free(s->files);
    free(s->tensors);
    free(s->by_name);
    free(s);
}

static int set_add_file(st_ctx *c, ls_st_set *s, const char *path, void *map, size_t size, size_t map_len) {
    st_file *grown = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *grown);
    char *copy = strdup(path);
    if (grown) s->files = grown;
    if (!grown || !copy) {
        free(copy);
        st_fail(c, path, NULL, "out of memory");
        return -1;
    }
    s->files[s->n_files++] = (st_file){copy, map, size, map_len};
    return 0;
}

static ls_st_tensor *set_new_tensor(st_ctx *c, ls_st_set *s, const char *file) {
    if (s->n_tensors == s->cap_tensors) {
        int64_t cap = s->cap_tensors ? s->cap_tensors * 2 : 64;
        ls_st_tensor *grown = realloc(s->tensors, (size_t)cap * sizeof *grown);
        if (!grown) {
            st_fail(c, file, NULL, "out of memory");
            return NULL;
        }
        s->tensors = grown;
        s->cap_tensors = cap;
    }
    ls_st_tensor *t = &s->tensors[s->n_tensors++];
    memset(t, 0, sizeof *t);
    return t;
}

/* ---------------------------------------------------------------------------------------
 * One file image
 * ------------------------------------------------------------------------------------- */

static uint64_t le64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* A JSON number that is an exact non-negative integer. */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > ST_EXACT_MAX || floor(d) != d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int dtype_parse(const cJSON *v, ls_st_dtype *out) {
    if (!cJSON_IsString(v)) return -1;
    for (int i = 0; i < LS_ST_DTYPE_COUNT; i++)
        if (strcmp(v->valuestring, dtypes[i].name) == 0) {
            *out = (ls_st_dtype)i;
            return 0;
        }
    return -1;
}

/* shape -> t->n_dims, t->shape; returns the element count through *nelem. */
static int shape_parse(st_ctx *c, const char *file, const char *name, const cJSON *shape, ls_st_tensor *t,
                       uint64_t *nelem) {
    if (!cJSON_IsArray(shape)) {
        st_fail(c, file, name, "'shape' missing or not an array");
        return -1;
    }
    int n = cJSON_GetArraySize(shape);
    if (n > LS_ST_MAX_DIMS) {
        st_fail(c, file, name, "%d dimensions, at most %d supported", n, LS_ST_MAX_DIMS);
        return -1;
    }
    uint64_t prod = 1;
    int d = 0;
    for (const cJSON *e = shape->child; e; e = e->next, d++) {
        uint64_t dim;
        if (json_u64(e, &dim) != 0) {
            st_fail(c, file, name, "shape[%d] is not a non-negative integer", d);
            return -1;
        }
        if (__builtin_mul_overflow(prod, dim, &prod) || prod > (uint64_t)INT64_MAX) {
            st_fail(c, file, name, "element count overflows at shape[%d]", d);
            return -1;
        }
        t->shape[d] = (int64_t)dim;
    }
    t->n_dims = d;
    *nelem = prod;
    return 0;
}

static int offsets_parse(st_ctx *c, const char *file, const char *name, const cJSON *offs, uint64_t data_len,
                         uint64_t *begin, uint64_t *end) {
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
        st_fail(c, file, name, "'data_offsets' missing or not [begin, end]");
        return -1;
    }
    if (json_u64(offs->child, begin) != 0 || json_u64(offs->child->next, end) != 0) {
        st_fail(c, file, name, "'data_offsets' are not non-negative integers");
        return -1;
    }
    if (*begin > *end) {
        st_fail(c, file, name, "data_offsets [%llu, %llu) end before begin", (unsigned long long)*begin,
                (unsigned long long)*end);
        return -1;
    }
    if (*end > data_len) {
        st_fail(c, file, name, "data_offsets [%llu, %llu) outside the data section (%llu bytes)",
                (unsigned long long)*begin, (unsigned long long)*end, (unsigned long long)data_len);
        return -1;
    }
    return 0;
}

static int metadata_check(st_ctx *c, const char *file, const cJSON *meta) {
    if (!cJSON_IsObject(meta)) {
        st_fail(c, file, NULL, "__metadata__ is not an object");
        return -1;
    }
    for (const cJSON *e = meta->child; e; e = e->next)
        if (!cJSON_IsString(e)) {
            char q[ST_QUOTED];
            ls_name_quote(q, sizeof q, e->string, strlen(e->string));
            st_fail(c, file, NULL, "__metadata__ value of '%s' is not a string", q);
            return -1;
        }
    return 0;
}

static int tensor_parse(st_ctx *c, const char *file, const cJSON *e, const uint8_t *data, uint64_t data_len,
                        ls_st_tensor *t) {
    const char *name = e->string;
    if (name[0] == 0) {
        st_fail(c, file, NULL, "empty tensor name");
        return -1;
    }
    if (!cJSON_IsObject(e)) {
        st_fail(c, file, name, "entry is not an object");
        return -1;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (dtype_parse(dt, &t->dtype) != 0) {
        char q[ST_QUOTED];
        const char *dts = cJSON_IsString(dt) ? dt->valuestring : "(not a string)";
        ls_name_quote(q, sizeof q, dts, strlen(dts));
        st_fail(c, file, name, "unknown dtype '%s'", q);
        return -1;
    }
    uint64_t nelem, begin, end, nbytes;
    if (shape_parse(c, file, name, cJSON_GetObjectItemCaseSensitive(e, "shape"), t, &nelem) != 0) return -1;
    if (offsets_parse(c, file, name, cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), data_len, &begin, &end))
        return -1;
    if (__builtin_mul_overflow(nelem, (uint64_t)dtypes[t->dtype].size, &nbytes)) {
        st_fail(c, file, name, "%llu elements of %s: byte size overflows", (unsigned long long)nelem,
                dtypes[t->dtype].name);
        return -1;
    }
    if (nbytes != end - begin) {
        st_fail(c, file, name, "%llu elements of %s need %llu bytes but data_offsets [%llu, %llu) hold %llu",
                (unsigned long long)nelem, dtypes[t->dtype].name, (unsigned long long)nbytes, (unsigned long long)begin,
                (unsigned long long)end, (unsigned long long)(end - begin));
        return -1;
    }
    t->name = strdup(name);
    if (!t->name) {
        st_fail(c, file, name, "out of memory");
        return -1;
    }
    t->data = data + begin;
    t->nbytes = nbytes;
    return 0;
}

static int by_begin_cmp(const void *pa, const void *pb) {
    const uint8_t *x = (*(const ls_st_tensor *const *)pa)->data, *y = (*(const ls_st_tensor *const *)pb)->data;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* Tensors [first, s->n_tensors) all lie in one file: sorted by begin, each non-empty one must
 * start at or after the furthest end seen so far. */
static int overlap_check(st_ctx *c, const char *file, const ls_st_set *s, int64_t first) {
    int64_t n = s->n_tensors - first;
    if (n < 2) return 0;
    const ls_st_tensor **order = malloc((size_t)n * sizeof *order);
    if (!order) {
        st_fail(c, file, NULL, "out of memory");
        return -1;
    }
    for (int64_t i = 0; i < n; i++) order[i] = &s->tensors[first + i];
    qsort(order, (size_t)n, sizeof *order, by_begin_cmp);
    const ls_st_tensor *far = NULL; /* the non-empty tensor reaching furthest so far */
    for (int64_t i = 0; i < n && !c->failed; i++) {
        const ls_st_tensor *t = order[i];
        if (t->nbytes == 0) continue;
        const uint8_t *b = t->data, *far_end = far ? (const uint8_t *)far->data + far->nbytes : NULL;
        if (far && b < far_end)
            st_fail(c, file, t->name, "data overlaps tensor '%s'", far->name);
        else if (!far || b + t->nbytes > far_end)
            far = t;
    }
    free(order);
    return c->failed ? -1 : 0;
}

/* JSON text of n bytes (no NUL inside), copied so cJSON sees a NUL-terminated string and can
 * never read past it. Only whitespace may follow the value (writers pad with spaces).
 * Returns NULL and what is wrong in *why. */
static cJSON *json_parse_bytes(const void *bytes, size_t n, const char **why) {
    *why = "contains a NUL byte";
    if (memchr(bytes, 0, n)) return NULL;
    *why = "out of memory";
    char *text = malloc(n + 1);
    if (!text) return NULL;
    memcpy(text, bytes, n);
    text[n] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    *why = "is not valid JSON";
    for (size_t i = root && end ? (size_t)(end - text) : n; i < n; i++)
        if (!strchr(" \t\r\n", text[i])) {
            *why = "has trailing bytes after the JSON";
            cJSON_Delete(root);
            root = NULL;
            break;
        }
    if (root && !cJSON_IsObject(root)) {
        *why = "is not a JSON object";
        cJSON_Delete(root);
        root = NULL;
    }
    free(text);
    return root;
}

/* The header as a JSON object, or NULL with the error set. */
static cJSON *header_parse(st_ctx *c, const char *file, const uint8_t *base, size_t size, uint64_t *hlen) {
    if (size < 8) {
        st_fail(c, file, NULL, "file of %zu bytes is too small for the 8-byte header length", size);
        return NULL;
    }
    uint64_t n = le64(base);
    if (n > size - 8) {
        st_fail(c, file, NULL, "header length %llu exceeds the file (%zu bytes)", (unsigned long long)n, size);
        return NULL;
    }
    if (n > ST_HEADER_MAX) {
        st_fail(c, file, NULL, "header length %llu is larger than the limit %u", (unsigned long long)n, ST_HEADER_MAX);
        return NULL;
    }
    const char *why;
    cJSON *root = json_parse_bytes(base + 8, (size_t)n, &why);
    if (!root) {
        st_fail(c, file, NULL, "header %s", why);
        return NULL;
    }
    *hlen = n;
    return root;
}

/* Parse one file image and append its tensors (shard index `file_idx`). */
static int image_parse(st_ctx *c, ls_st_set *s, const char *file, const uint8_t *base, size_t size, int32_t file_idx) {
    uint64_t hlen = 0;
    cJSON *root = header_parse(c, file, base, size, &hlen);
    if (!root) return -1;
    const uint8_t *data = base + 8 + hlen;
    uint64_t data_len = size - 8 - hlen;
    int64_t first = s->n_tensors;
    int n_meta = 0;
    for (const cJSON *e = root->child; e && !c->failed; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (n_meta++) st_fail(c, file, NULL, "__metadata__ appears twice");
            metadata_check(c, file, e);
            continue;
        }
        ls_st_tensor *t = set_new_tensor(c, s, file);
        if (!t) break;
        t->file = file_idx;
        if (tensor_parse(c, file, e, data, data_len, t) != 0) s->n_tensors--; /* drop the half-made entry */
    }
    cJSON_Delete(root);
    if (!c->failed) overlap_check(c, file, s, first);
    return c->failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------
 * Name index
 * ------------------------------------------------------------------------------------- */

static int by_name_cmp(const void *pa, const void *pb) {
    return strcmp((*(const ls_st_tensor *const *)pa)->name, (*(const ls_st_tensor *const *)pb)->name);
}

static int index_build(st_ctx *c, ls_st_set *s) {
    s->by_name = malloc((size_t)(s->n_tensors ? s->n_tensors : 1) * sizeof *s->by_name);
    if (!s->by_name) {
        st_fail(c, NULL, NULL, "out of memory");
        return -1;
    }
    for (int64_t i = 0; i < s->n_tensors; i++) s->by_name[i] = &s->tensors[i];
    qsort(s->by_name, (size_t)s->n_tensors, sizeof *s->by_name, by_name_cmp);
    for (int64_t i = 1; i < s->n_tensors; i++) {
        const ls_st_tensor *a = s->by_name[i - 1], *b = s->by_name[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->file == b->file)
            st_fail(c, s->files[a->file].path, a->name, "name appears twice in the header");
        else
            st_fail(c, s->files[b->file].path, a->name, "also present in %s", s->files[a->file].path);
        return -1;
    }
    return 0;
}

int64_t ls_st_count(const ls_st_set *s) {
    return s->n_tensors;
}

const ls_st_tensor *ls_st_at(const ls_st_set *s, int64_t i) {
    return i >= 0 && i < s->n_tensors ? &s->tensors[i] : NULL;
}

const ls_st_tensor *ls_st_find(const ls_st_set *s, const char *name) {
    int64_t lo = 0, hi = s->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const ls_st_tensor *t = s->by_name[mid];
        int r = strcmp(t->name, name);
        if (r == 0) return t;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int64_t ls_st_nelem(const ls_st_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->n_dims; d++) n *= t->shape[d]; /* fits: checked when opened */
    return n;
}

/* ---------------------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------------------- */

/* huge: a weight shard, copied into huge-page memory while the shards' sum stays under
 * c->huge_left (core/hugemap.h); else (and for the index) the file mapping. */
static int file_map(st_ctx *c, const char *path, bool huge, void **map, size_t *size, size_t *map_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st_fail(c, path, NULL, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        st_fail(c, path, NULL, "not a regular file");
        close(fd);
        return -1;
    }
    *size = (size_t)st.st_size;
    *map = NULL;
    *map_len = *size;
    if (huge && *size > 0 && *size <= c->huge_left) {
        *map = ls_hugemap_read(fd, *size, map_len);
        if (*map) {
            c->huge_left -= *size;
            close(fd);
            return 0;
        }
        *map_len = *size;
    }
    if (*size > 0) { /* mmap rejects length 0; an empty file fails as too small */
        void *m = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            st_fail(c, path, NULL, "cannot map %zu bytes: %s", *size, strerror(errno));
            close(fd);
            return -1;
        }
        *map = m;
    }
    close(fd); /* the mapping keeps the file */
    return 0;
}

/* Map `path` as shard number s->n_files and parse it. */
static int shard_add(st_ctx *c, ls_st_set *s, const char *path) {
    void *map;
    size_t size, map_len;
    if (file_map(c, path, true, &map, &size, &map_len) != 0) return -1;
    if (set_add_file(c, s, path, map, size, map_len) != 0) {
        if (map) munmap(map, map_len);
        return -1;
    }
    static const uint8_t empty[1];
    return image_parse(c, s, path, map ? map : empty, size, s->n_files - 1);
}

static ls_st_set *set_new(st_ctx *c) {
    ls_st_set *s = calloc(1, sizeof *s);
    if (!s) st_fail(c, NULL, NULL, "out of memory");
    return s;
}

static void ctx_init(st_ctx *c, char *err, size_t errlen) {
    *c = (st_ctx){err, errlen, 0, 0};
    if (err && errlen) err[0] = 0;
}

int ls_st_open_file(const char *path, ls_st_set **out, char *err, size_t errlen) {
    st_ctx c;
    ctx_init(&c, err, errlen);
    *out = NULL;
    ls_st_set *s = set_new(&c);
    if (!s || shard_add(&c, s, path) != 0 || index_build(&c, s) != 0) {
        ls_st_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

int ls_st_validate_buffer(const uint8_t *buf, size_t len, char *err, size_t errlen) {
    static const uint8_t empty[1];
    st_ctx c;
    ctx_init(&c, err, errlen);
    ls_st_set *s = set_new(&c);
    if (s && set_add_file(&c, s, "<memory>", NULL, 0, 0) == 0 &&
        image_parse(&c, s, "<memory>", buf ? buf : empty, buf ? len : 0, 0) == 0)
        index_build(&c, s);
    ls_st_close(s);
    return c.failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------
 * Directories
 * ------------------------------------------------------------------------------------- */

static char *path_join(const char *dir, const char *name) {
    size_t d = strlen(dir), n = d + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s%s", dir, d && dir[d - 1] == '/' ? "" : "/", name);
    return p;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A shard name from the index must stay inside the checkpoint directory. */
static const char *shard_name_problem(const char *name) {
    if (name[0] == 0) return "is empty";
    if (strchr(name, '/') || strchr(name, '\\')) return "contains a path separator";
    if (strstr(name, "..")) return "contains '..'";
    return NULL;
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Distinct shard names of the weight map, sorted (so each shard is opened once). */
static const char **shard_names(st_ctx *c, const char *ipath, const cJSON *wm, int *n_out) {
    int n = cJSON_GetArraySize(wm);
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    if (!names) {
        st_fail(c, ipath, NULL, "out of memory");
        return NULL;
    }
    int i = 0;
    for (const cJSON *e = wm->child; e; e = e->next) {
        const char *bad = cJSON_IsString(e) ? shard_name_problem(e->valuestring) : "is not a string";
        if (bad) {
            st_fail(c, ipath, e->string, "weight_map file name %s", bad);
            free(names);
            return NULL;
        }
        names[i++] = e->valuestring;
    }
    qsort(names, (size_t)i, sizeof *names, str_cmp);
    int k = 0;
    for (int j = 0; j < i; j++)
        if (k == 0 || strcmp(names[k - 1], names[j]) != 0) names[k++] = names[j];
    *n_out = k;
    return names;
}

/* Every weight_map entry names a tensor that is in the shard it names. */
static int weight_map_check(st_ctx *c, const ls_st_set *s, const char *ipath, const cJSON *wm) {
    for (const cJSON *e = wm->child; e; e = e->next) {
        const ls_st_tensor *t = ls_st_find(s, e->string);
        const char *in = t ? strrchr(s->files[t->file].path, '/') + 1 : NULL;
        char q[ST_QUOTED];
        ls_name_quote(q, sizeof q, e->valuestring, strlen(e->valuestring));
        if (!t)
            st_fail(c, ipath, e->string, "listed in weight_map for %s but not found in it", q);
        else if (strcmp(in, e->valuestring) != 0)
            st_fail(c, ipath, e->string, "listed in weight_map for %s but stored in %s", q, in);
        if (c->failed) return -1;
    }
    return 0;
}

static cJSON *index_read(st_ctx *c, const char *ipath) {
    void *map;
    size_t size, map_len;
    if (file_map(c, ipath, false, &map, &size, &map_len) != 0) return NULL;
    cJSON *root = NULL;
    const char *why = "is empty";
    if (size > ST_INDEX_MAX)
        st_fail(c, ipath, NULL, "index of %zu bytes is larger than the limit %u", size, ST_INDEX_MAX);
    else if (!map || !(root = json_parse_bytes(map, size, &why)))
        st_fail(c, ipath, NULL, "index %s", why);
    if (map) munmap(map, map_len);
    return root;
}

static int open_sharded(st_ctx *c, const char *dir, const char *ipath, ls_st_set *s) {
    cJSON *root = index_read(c, ipath);
    if (!root) return -1;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const char **names = NULL;
    int n = 0;
    if (!cJSON_IsObject(wm) || !wm->child)
        st_fail(c, ipath, NULL, "'weight_map' missing, empty or not an object");
    else
        names = shard_names(c, ipath, wm, &n);
    for (int i = 0; i < n && !c->failed; i++) {
        char *p = path_join(dir, names[i]);
        if (!p)
            st_fail(c, ipath, NULL, "out of memory");
        else
            shard_add(c, s, p);
        free(p);
    }
    if (!c->failed) index_build(c, s);
    if (!c->failed) weight_map_check(c, s, ipath, wm);
    free(names);
    cJSON_Delete(root);
    return c->failed ? -1 : 0;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The path of the only *.safetensors file in dir (malloc'd), or NULL with the error set. */
static char *single_file(st_ctx *c, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        st_fail(c, dir, NULL, "cannot open directory: %s", strerror(errno));
        return NULL;
    }
    char *found = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !has_suffix(e->d_name, ".safetensors")) continue;
        char *p = path_join(dir, e->d_name);
        if (p && is_file(p) && n++ == 0) {
            found = p;
            continue;
        }
        free(p);
    }
    closedir(d);
    if (n == 0) st_fail(c, dir, NULL, "no .safetensors file in the directory");
    if (n > 1) st_fail(c, dir, NULL, "%d .safetensors files but no " ST_INDEX_NAME, n);
    if (n != 1) {
        free(found);
        return NULL;
    }
    return found;
}

int ls_st_open_dir(const char *dir, ls_st_set **out, char *err, size_t errlen) {
    return ls_st_open_dir_ex(dir, 0, out, err, errlen);
}

int ls_st_open_dir_ex(const char *dir, int flags, ls_st_set **out, char *err, size_t errlen) {
    st_ctx c;
    ctx_init(&c, err, errlen);
    if (flags & LS_ST_OPEN_HUGE) c.huge_left = ls_hugemap_limit();
    *out = NULL;
    char *ipath = path_join(dir, ST_INDEX_NAME), *single = path_join(dir, ST_SINGLE_NAME);
    ls_st_set *s = ipath && single ? set_new(&c) : NULL;
    if (!s) {
        st_fail(&c, dir, NULL, "out of memory");
    } else if (is_file(ipath)) {
        open_sharded(&c, dir, ipath, s);
    } else {
        char *path = is_file(single) ? strdup(single) : single_file(&c, dir);
        if (path && shard_add(&c, s, path) == 0) index_build(&c, s);
        free(path);
    }
    free(ipath);
    free(single);
    if (c.failed) {
        ls_st_close(s);
        return -1;
    }
    *out = s;
    return 0;
}
