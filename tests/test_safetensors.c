/* Tests for the safetensors reader (src/format/safetensors.c).
 *
 * (a) A valid file written here (F32 / BF16 / I64 scalar / empty U8, __metadata__, a
 *     space-padded header): every tensor's dtype, shape and bytes read back, through the
 *     file, a directory with model.safetensors, a directory with one other *.safetensors,
 *     and a sharded directory with model.safetensors.index.json.
 * (b) Malformed headers, each rejected by ls_st_validate_buffer (and ls_st_open_file for
 *     the file-level ones) with a message containing an expected substring; every prefix
 *     of the valid file is rejected; single-byte corruptions never crash.
 * (c) Broken checkpoint directories: bad index, missing tensors or shards, path traversal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/safetensors.h"

/* ---------------------------------------------------------------------------------------
 * Building files
 * ------------------------------------------------------------------------------------- */

typedef struct {
    uint8_t *b;
    size_t n;
} image;

/* u64 LE header length | header padded with spaces to `align` | data */
static image image_make(const char *header, size_t align, const void *data, size_t n) {
    size_t h = strlen(header), hp = align ? (h + align - 1) / align * align : h;
    image im = {malloc(8 + hp + n + 1), 8 + hp + n};
    assert_non_null(im.b);
    for (int i = 0; i < 8; i++) im.b[i] = (uint8_t)((uint64_t)hp >> (8 * i));
    memcpy(im.b + 8, header, h);
    memset(im.b + 8 + h, ' ', hp - h);
    if (n) memcpy(im.b + 8 + hp, data, n);
    return im;
}

static void file_write(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void image_write(const char *path, image im) {
    file_write(path, im.b, im.n);
    free(im.b);
}

static char g_dir[64];

static void dir_path(char *out, size_t cap, const char *sub, const char *name) {
    snprintf(out, cap, "%s/%s%s%s", g_dir, sub, sub[0] ? "/" : "", name);
}

static void rm_rf(const char *path) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* A fresh empty subdirectory of the test directory. */
static void subdir(const char *sub) {
    char p[256];
    dir_path(p, sizeof p, sub, "");
    rm_rf(p);
    assert_int_equal(mkdir(p, 0700), 0);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ls_st_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_dir);
    return 0;
}

/* The valid file: a = F32 [2,3] 0..5, b = BF16 [4] (1, -2, 0.5, 3), c = I64 scalar -7, e =
 * U8 [0, 5] empty. Tensors are listed out of offset order on purpose. */
static const char good_header[] = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                                  "\"__metadata__\":{\"format\":\"pt\"},"
                                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                                  "\"e\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[32,32]},"
                                  "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}";

static void good_data(uint8_t d[40]) {
    for (int i = 0; i < 6; i++) {
        float x = (float)i;
        memcpy(d + 4 * i, &x, 4);
    }
    static const uint16_t bf[4] = {0x3f80, 0xc000, 0x3f00, 0x4040};
    memcpy(d + 24, bf, 8);
    int64_t c = -7;
    memcpy(d + 32, &c, 8);
}

static image good_image(void) {
    uint8_t d[40];
    good_data(d);
    return image_make(good_header, 8, d, sizeof d);
}

static float bf16_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static void check_good(const ls_st_set *s, int32_t file) {
    assert_int_equal(ls_st_count(s), 4);
    const ls_st_tensor *a = ls_st_find(s, "a"), *b = ls_st_find(s, "b"), *c = ls_st_find(s, "c");
    const ls_st_tensor *e = ls_st_find(s, "e");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(e);
    assert_null(ls_st_find(s, "__metadata__"));
    assert_null(ls_st_find(s, "d"));
    assert_null(ls_st_find(s, ""));
    assert_string_equal(a->name, "a");
    assert_int_equal(a->dtype, LS_ST_F32);
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->shape[1], 3);
    assert_int_equal(a->nbytes, 24);
    assert_int_equal(ls_st_nelem(a), 6);
    assert_int_equal(a->file, file);
    for (int i = 0; i < 6; i++) {
        float x;
        memcpy(&x, (const uint8_t *)a->data + 4 * i, 4);
        assert_true(x == (float)i);
    }
    assert_int_equal(b->dtype, LS_ST_BF16);
    assert_int_equal(ls_st_nelem(b), 4);
    static const float want[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    for (int i = 0; i < 4; i++) {
        uint16_t u;
        memcpy(&u, (const uint8_t *)b->data + 2 * i, 2);
        assert_true(bf16_f32(u) == want[i]);
    }
    assert_ptr_equal((const uint8_t *)b->data, (const uint8_t *)a->data + 24);
    assert_int_equal(c->dtype, LS_ST_I64);
    assert_int_equal(c->n_dims, 0);
    assert_int_equal(ls_st_nelem(c), 1);
    int64_t v;
    memcpy(&v, c->data, 8);
    assert_int_equal(v, -7);
    assert_int_equal(e->nbytes, 0);
    assert_int_equal(ls_st_nelem(e), 0);
    assert_int_equal(e->n_dims, 2);
    /* ls_st_at walks every tensor exactly once */
    int seen = 0;
    for (int64_t i = 0; i < ls_st_count(s); i++) seen |= 1 << (ls_st_at(s, i)->name[0] - 'a');
    assert_int_equal(seen, 0x17);
    assert_null(ls_st_at(s, 4));
    assert_null(ls_st_at(s, -1));
}

/* ---------------------------------------------------------------------------------------
 * Valid files and directories
 * ------------------------------------------------------------------------------------- */

static void test_dtypes(void **state) {
    (void)state;
    assert_int_equal(ls_st_dtype_size(LS_ST_F64), 8);
    assert_int_equal(ls_st_dtype_size(LS_ST_BF16), 2);
    assert_int_equal(ls_st_dtype_size(LS_ST_U32), 4);
    assert_int_equal(ls_st_dtype_size(LS_ST_BOOL), 1);
    assert_int_equal(ls_st_dtype_size(LS_ST_F8_E5M2), 1);
    assert_int_equal(ls_st_dtype_size(LS_ST_DTYPE_COUNT), 0);
    assert_string_equal(ls_st_dtype_name(LS_ST_F8_E4M3), "F8_E4M3");
    assert_string_equal(ls_st_dtype_name(LS_ST_I16), "I16");
    assert_string_equal(ls_st_dtype_name(LS_ST_DTYPE_COUNT), "?");
}

static void test_good_file(void **state) {
    (void)state;
    char path[256], err[512] = "";
    dir_path(path, sizeof path, "", "good.safetensors");
    image im = good_image();
    assert_int_equal(ls_st_validate_buffer(im.b, im.n, err, sizeof err), 0);
    image_write(path, im);
    ls_st_set *s = NULL;
    int rc = ls_st_open_file(path, &s, err, sizeof err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, 0);
    check_good(s, 0);
    ls_st_close(s);
    /* unpadded header, and all dtypes */
    uint8_t d[40];
    good_data(d);
    im = image_make(good_header, 0, d, sizeof d);
    assert_int_equal(ls_st_validate_buffer(im.b, im.n, err, sizeof err), 0);
    free(im.b);
    static const char *names[] = {"F64", "F32", "F16", "BF16", "I64",  "I32",     "I16",    "I8",
                                  "U8",  "U16", "U32", "U64",  "BOOL", "F8_E4M3", "F8_E5M2"};
    for (int i = 0; i < LS_ST_DTYPE_COUNT; i++) {
        char h[160];
        size_t sz = ls_st_dtype_size((ls_st_dtype)i);
        snprintf(h, sizeof h, "{\"t\":{\"dtype\":\"%s\",\"shape\":[2],\"data_offsets\":[0,%zu]}}", names[i], 2 * sz);
        im = image_make(h, 8, d, 2 * sz);
        s = NULL;
        dir_path(path, sizeof path, "", "dt.safetensors");
        image_write(path, im);
        assert_int_equal(ls_st_open_file(path, &s, err, sizeof err), 0);
        assert_int_equal(ls_st_find(s, "t")->dtype, i);
        assert_string_equal(ls_st_dtype_name((ls_st_dtype)i), names[i]);
        ls_st_close(s);
    }
}

static void test_dir_single(void **state) {
    (void)state;
    char path[256], err[512] = "";
    ls_st_set *s = NULL;
    subdir("single");
    dir_path(path, sizeof path, "single", "");
    assert_int_equal(ls_st_open_dir(path, &s, err, sizeof err), -1);
    assert_null(s);
    assert_non_null(strstr(err, "no .safetensors file"));
    /* one file with another name */
    char f1[256], f2[256];
    dir_path(f1, sizeof f1, "single", "weights.safetensors");
    image_write(f1, good_image());
    assert_int_equal(ls_st_open_dir(path, &s, err, sizeof err), 0);
    check_good(s, 0);
    ls_st_close(s);
    /* two: ambiguous without an index */
    dir_path(f2, sizeof f2, "single", "other.safetensors");
    image_write(f2, good_image());
    assert_int_equal(ls_st_open_dir(path, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "2 .safetensors files but no model.safetensors.index.json"));
    /* model.safetensors wins */
    dir_path(f2, sizeof f2, "single", "model.safetensors");
    image_write(f2, good_image());
    assert_int_equal(ls_st_open_dir(path, &s, err, sizeof err), 0);
    check_good(s, 0);
    ls_st_close(s);
    /* a broken model.safetensors is reported with its path */
    file_write(f2, "\x03\0\0\0\0\0\0\0{}x", 11);
    assert_int_equal(ls_st_open_dir(path, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, f2));
    assert_non_null(strstr(err, "trailing bytes"));
    assert_int_equal(ls_st_open_dir("/nonexistent/dir", &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open directory"));
}

/* Shard 1: x F32 [2] and y I32 [1]; shard 2: z F16 [3]. */
static void write_shards(const char *sub) {
    char p[256];
    float x[2] = {1.5f, -2.5f};
    int32_t y = 42;
    uint8_t d1[12];
    memcpy(d1, x, 8);
    memcpy(d1 + 8, &y, 4);
    dir_path(p, sizeof p, sub, "model-00001-of-00002.safetensors");
    image_write(p, image_make("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"y\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                              8, d1, sizeof d1));
    uint16_t z[3] = {0x3c00, 0x4000, 0xc000};
    dir_path(p, sizeof p, sub, "model-00002-of-00002.safetensors");
    image_write(p, image_make("{\"__metadata__\":{\"format\":\"mlx\"},"
                              "\"z\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}",
                              8, z, sizeof z));
}

static void write_index(const char *sub, const char *weight_map) {
    char p[256], text[1024];
    dir_path(p, sizeof p, sub, "model.safetensors.index.json");
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 26}, \"weight_map\": %s}\n", weight_map);
    file_write(p, text, strlen(text));
}

static const char good_map[] = "{\"x\": \"model-00001-of-00002.safetensors\", \"z\": "
                               "\"model-00002-of-00002.safetensors\", \"y\": \"model-00001-of-00002.safetensors\"}";

static void test_dir_sharded(void **state) {
    (void)state;
    char dir[256], err[512] = "";
    subdir("sharded");
    write_shards("sharded");
    write_index("sharded", good_map);
    dir_path(dir, sizeof dir, "sharded", "");
    ls_st_set *s = NULL;
    int rc = ls_st_open_dir(dir, &s, err, sizeof err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(ls_st_count(s), 3);
    const ls_st_tensor *x = ls_st_find(s, "x"), *y = ls_st_find(s, "y"), *z = ls_st_find(s, "z");
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(z);
    assert_int_equal(x->file, y->file);
    assert_int_not_equal(x->file, z->file);
    float xv[2];
    memcpy(xv, x->data, 8);
    assert_true(xv[0] == 1.5f && xv[1] == -2.5f);
    int32_t yv;
    memcpy(&yv, y->data, 4);
    assert_int_equal(yv, 42);
    uint16_t zv[3];
    memcpy(zv, z->data, 6);
    assert_int_equal(zv[2], 0xc000);
    assert_int_equal(z->dtype, LS_ST_F16);
    ls_st_close(s);
}

/* ---------------------------------------------------------------------------------------
 * Malformed images
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const char *header;
    size_t data_len;
    const char *expect;
} bad_header;

static const bad_header bad_headers[] = {
    {"{", 0, "header is not valid JSON"},
    {"", 0, "header is not valid JSON"},
    {"[]", 0, "header is not a JSON object"},
    {"\"x\"", 0, "header is not a JSON object"},
    {"{} x", 0, "header has trailing bytes after the JSON"},
    {"{}{}", 0, "header has trailing bytes after the JSON"},
    {"{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16, "tensor 'a': unknown dtype 'F128'"},
    {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': unknown dtype 'f32'"},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': unknown dtype '(not a string)'"},
    {"{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype '(not a string)'"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'a': 'shape' missing or not an array"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, "'shape' missing or not an array"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,-1],\"data_offsets\":[0,4]}}", 4,
     "shape[1] is not a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0] is not a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "shape[0] is not a non-negative"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, "shape[0] is not a non-negative"},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "9 dimensions, at most 8"},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,1]}}", 1,
     "element count overflows at shape[1]"},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,1073741824,4],\"data_offsets\":[0,1]}}", 1,
     "element count overflows at shape[2]"},
    {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1125899906842624,4096],\"data_offsets\":[0,8]}}", 8,
     "4611686018427387904 elements of F64: byte size overflows"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
     "tensor 'a': 6 elements of F32 need 24 bytes but data_offsets [0, 20) hold 20"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,4]}}", 4, "0 elements of F32 need 0 bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 16,
     "tensor 'a': data_offsets [0, 24) outside the data section (16 bytes)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}", 16, "outside the data section"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551612,0]}}", 16,
     "'data_offsets' are not non-negative integers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 16, "data_offsets [8, 4) end before begin"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 16,
     "'data_offsets' missing or not [begin, end]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 16, "'data_offsets' missing or not"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 16, "'data_offsets' missing or not"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 16, "'data_offsets' are not non-negative"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     16, "tensor 'b': data overlaps tensor 'a'"},
    {"{\"big\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
     "\"in\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
     "\"after\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
     16, "data overlaps tensor 'big'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     16, "tensor 'a': name appears twice in the header"},
    {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16, "empty tensor name"},
    {"{\"a\":5}", 16, "tensor 'a': entry is not an object"},
    {"{\"a\\u0001'\":5}", 16, "tensor 'a\\x01\\x27': entry is not an object"},
    {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
    {"{\"__metadata__\":{\"format\":1}}", 0, "__metadata__ value of 'format' is not a string"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice"},
};

static void test_bad_headers(void **state) {
    (void)state;
    static uint8_t zeros[64];
    char path[256];
    dir_path(path, sizeof path, "", "bad.safetensors");
    int n = (int)(sizeof bad_headers / sizeof bad_headers[0]);
    for (int i = 0; i < n; i++) {
        const bad_header *k = &bad_headers[i];
        image im = image_make(k->header, 8, zeros, k->data_len);
        char err[512] = "";
        int rc = ls_st_validate_buffer(im.b, im.n, err, sizeof err);
        if (rc == 0 || !strstr(err, k->expect))
            print_error("case %d %s: rc %d \"%s\", want \"%s\"\n", i, k->header, rc, err, k->expect);
        assert_int_equal(rc, -1);
        assert_non_null(strstr(err, k->expect));
        assert_non_null(strstr(err, "safetensors: <memory>: "));
        /* the same through a file: the message names it */
        image_write(path, im);
        ls_st_set *s = (ls_st_set *)&n;
        assert_int_equal(ls_st_open_file(path, &s, err, sizeof err), -1);
        assert_null(s);
        assert_non_null(strstr(err, k->expect));
        assert_non_null(strstr(err, path));
    }
    /* Accepted edge cases: empty header object, adjacent and empty tensors, holes, extra data. */
    static const char *ok[] = {
        "{}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
        "\"c\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
        "\"d\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[2,2]},"
        "\"e\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[12,13]}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        image im = image_make(ok[i], 8, zeros, 16);
        char err[512] = "";
        int rc = ls_st_validate_buffer(im.b, im.n, err, sizeof err);
        if (rc) print_error("ok case %zu: %s\n", i, err);
        assert_int_equal(rc, 0);
        free(im.b);
    }
}

static void expect_bad_buffer(const uint8_t *b, size_t n, const char *expect) {
    char err[512] = "";
    assert_int_equal(ls_st_validate_buffer(b, n, err, sizeof err), -1);
    if (!strstr(err, expect)) print_error("got \"%s\", want \"%s\"\n", err, expect);
    assert_non_null(strstr(err, expect));
}

static void test_bad_length(void **state) {
    (void)state;
    uint8_t b[32] = {0};
    expect_bad_buffer(NULL, 0, "file of 0 bytes is too small");
    expect_bad_buffer(b, 7, "file of 7 bytes is too small");
    b[0] = 25; /* 25 > 32 - 8 */
    expect_bad_buffer(b, 32, "header length 25 exceeds the file (32 bytes)");
    memset(b, 0xff, 8);
    expect_bad_buffer(b, 32, "header length 18446744073709551615 exceeds the file");
    /* header length over the limit in a file big enough to hold it (zero pages, not touched) */
    size_t big = 100000016;
    uint8_t *z = calloc(1, big);
    assert_non_null(z);
    uint64_t n = 100000001;
    for (int i = 0; i < 8; i++) z[i] = (uint8_t)(n >> (8 * i));
    expect_bad_buffer(z, big, "header length 100000001 is larger than the limit 100000000");
    free(z);
    /* a NUL inside the header, even inside a string */
    memcpy(b, "\x0c\0\0\0\0\0\0\0{\"a\0\":1}   ", 20);
    expect_bad_buffer(b, 20, "header contains a NUL byte");
    /* zero-length header */
    memset(b, 0, 8);
    expect_bad_buffer(b, 8, "header is not valid JSON");
}

/* Every proper prefix of the valid file fails; every single-byte change either fails or
 * still yields a consistent file (ASan checks the reads). */
static void test_prefixes_and_corruption(void **state) {
    (void)state;
    image im = good_image();
    char err[512];
    for (size_t n = 0; n < im.n; n++) {
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, im.b, n);
        assert_int_equal(ls_st_validate_buffer(p, n, err, sizeof err), -1);
        free(p);
    }
    static const uint8_t vals[] = {0, '"', '[', ']', '{', '}', ',', ':', '0', '9', '-', ' ', 0x80, 0xff};
    int accepted = 0, rejected = 0;
    for (size_t i = 0; i < im.n; i++)
        for (size_t v = 0; v < sizeof vals; v++) {
            uint8_t *p = malloc(im.n);
            memcpy(p, im.b, im.n);
            p[i] = vals[v];
            if (ls_st_validate_buffer(p, im.n, err, sizeof err) == 0)
                accepted++;
            else
                rejected++;
            free(p);
        }
    assert_true(accepted > 0 && rejected > 0);
    free(im.b);
}

/* ---------------------------------------------------------------------------------------
 * Broken directories
 * ------------------------------------------------------------------------------------- */

static void expect_bad_dir(const char *sub, const char *expect, const char *expect2) {
    char dir[256], err[512] = "";
    dir_path(dir, sizeof dir, sub, "");
    ls_st_set *s = (ls_st_set *)dir;
    int rc = ls_st_open_dir(dir, &s, err, sizeof err);
    if (rc == 0 || !strstr(err, expect) || (expect2 && !strstr(err, expect2)))
        print_error("rc %d \"%s\", want \"%s\" and \"%s\"\n", rc, err, expect, expect2 ? expect2 : "");
    assert_int_equal(rc, -1);
    assert_null(s);
    assert_non_null(strstr(err, expect));
    if (expect2) assert_non_null(strstr(err, expect2));
}

static void test_bad_index(void **state) {
    (void)state;
    static const struct {
        const char *map;
        const char *expect, *expect2;
    } cases[] = {
        {"{\"x\": \"model-00001-of-00002.safetensors\", \"w\": \"model-00002-of-00002.safetensors\"}",
         "tensor 'w': listed in weight_map for model-00002-of-00002.safetensors but not found in it",
         "model.safetensors.index.json"},
        {"{\"x\": \"model-00002-of-00002.safetensors\", \"z\": \"model-00001-of-00002.safetensors\"}",
         "tensor 'x': listed in weight_map for model-00002-of-00002.safetensors but stored in "
         "model-00001-of-00002.safetensors",
         NULL},
        {"{\"x\": \"model-00003-of-00003.safetensors\"}", "model-00003-of-00003.safetensors: cannot open", NULL},
        {"{\"x\": \"../sharded/model-00001-of-00002.safetensors\"}",
         "tensor 'x': weight_map file name contains a path separator", NULL},
        {"{\"x\": \"/etc/passwd\"}", "weight_map file name contains a path separator", NULL},
        {"{\"x\": \"..\"}", "weight_map file name contains '..'", NULL},
        {"{\"x\": \"a\\\\..\\\\b\"}", "weight_map file name contains a path separator", NULL},
        {"{\"x\": \"\"}", "weight_map file name is empty", NULL},
        {"{\"x\": 1}", "tensor 'x': weight_map file name is not a string", NULL},
        {"{}", "'weight_map' missing, empty or not an object", NULL},
        {"[]", "'weight_map' missing, empty or not an object", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        subdir("badidx");
        write_shards("badidx");
        write_index("badidx", cases[i].map);
        expect_bad_dir("badidx", cases[i].expect, cases[i].expect2);
    }
    /* index itself broken */
    char p[256];
    subdir("badidx");
    write_shards("badidx");
    dir_path(p, sizeof p, "badidx", "model.safetensors.index.json");
    file_write(p, "{\"weight_map\": {", 16);
    expect_bad_dir("badidx", "index is not valid JSON", p);
    file_write(p, "", 0);
    expect_bad_dir("badidx", "index is empty", NULL);
    file_write(p, "{\"weight_map\": {}} {", 20);
    expect_bad_dir("badidx", "index has trailing bytes", NULL);
    /* the same tensor in two shards */
    subdir("dup");
    write_shards("dup");
    write_index("dup", good_map);
    dir_path(p, sizeof p, "dup", "model-00002-of-00002.safetensors");
    uint8_t d[8] = {0};
    image_write(p, image_make("{\"z\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
                              "\"y\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                              8, d, sizeof d));
    expect_bad_dir("dup", "tensor 'y': also present in", "model-00001-of-00002.safetensors");
    /* a broken shard is named */
    subdir("badshard");
    write_shards("badshard");
    write_index("badshard", good_map);
    dir_path(p, sizeof p, "badshard", "model-00002-of-00002.safetensors");
    image_write(p, image_make("{\"z\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 8, d, 4));
    expect_bad_dir("badshard", "model-00002-of-00002.safetensors: tensor 'z': data_offsets [0, 6) outside", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_good_file),
        cmocka_unit_test(test_dir_single),
        cmocka_unit_test(test_dir_sharded),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_bad_length),
        cmocka_unit_test(test_prefixes_and_corruption),
        cmocka_unit_test(test_bad_index),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
