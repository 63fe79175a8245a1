/* Tests for the GGUF reader (src/format/gguf.c).
 *
 * (a) A valid file built byte by byte here, with every value type, nested arrays, arrays
 *     of strings, eight tensors of different types and general.alignment = 64: every
 *     value, getter and tensor field is checked; also through ls_gguf_open (mmap).
 * (b) Malformed variants, each of which must fail with a message containing an expected
 *     substring; every prefix of the valid file must fail cleanly; every single-byte
 *     corruption must either fail or yield a file whose every pointer is in bounds.
 * (c) The real model (LOCKSTEP_MODEL), skipped when the file is absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "format/gguf.h"
#include "kernels/types.h"

/* ---------------------------------------------------------------------------------------
 * Byte builder
 * ------------------------------------------------------------------------------------- */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->b = realloc(b->b, b->cap);
        assert_non_null(b->b);
    }
    if (n) memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put_le(buf *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        put(b, &c, 1);
    }
}
static void put_u8(buf *b, uint8_t v) {
    put_le(b, v, 1);
}
static void put_u16(buf *b, uint16_t v) {
    put_le(b, v, 2);
}
static void put_u32(buf *b, uint32_t v) {
    put_le(b, v, 4);
}
static void put_u64(buf *b, uint64_t v) {
    put_le(b, v, 8);
}
static void put_f32(buf *b, float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    put_u32(b, u);
}
static void put_f64(buf *b, double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    put_u64(b, u);
}
static void put_strn(buf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void put_str(buf *b, const char *s) {
    put_strn(b, s, strlen(s));
}
static void put_key(buf *b, const char *key, uint32_t type) {
    put_str(b, key);
    put_u32(b, type);
}
static void put_arr(buf *b, uint32_t elem, uint64_t count) {
    put_u32(b, elem);
    put_u64(b, count);
}
static void put_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
static void put_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) put_u64(b, ne[d]);
    put_u32(b, type);
    put_u64(b, off);
}
static void put_pad(buf *b, size_t align) {
    while (b->n % align) put_u8(b, 0);
}
/* Deterministic data bytes: the byte at file offset k is (k * 7 + 3) & 255. */
static void put_data(buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) put_u8(b, (uint8_t)((b->n * 7 + 3) & 255));
}

/* ---------------------------------------------------------------------------------------
 * The full valid fixture
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t nbytes;
} tensor_spec;

static const tensor_spec k_tensors[] = {
    {"tok.weight", LS_TYPE_Q8_0, 2, {64, 3, 1, 1}, 2 * 34 * 3},
    {"f32.weight", LS_TYPE_F32, 2, {5, 2, 1, 1}, 40},
    {"q4k.weight", LS_TYPE_Q4_K, 2, {256, 2, 1, 1}, 2 * 144},
    {"f16.weight", LS_TYPE_F16, 1, {3, 1, 1, 1}, 6},
    {"q6k.weight", LS_TYPE_Q6_K, 1, {512, 1, 1, 1}, 2 * 210},
    {"bf16.weight", LS_TYPE_BF16, 4, {2, 2, 2, 2}, 32},
    {"q4_0.weight", LS_TYPE_Q4_0, 3, {32, 1, 3, 1}, 3 * 18},
    {"blk.0.attn_q.weight", LS_TYPE_Q5_0, 2, {64, 2, 1, 1}, 2 * 2 * 22},
};
#define N_TENSORS (sizeof k_tensors / sizeof k_tensors[0])
#define N_KVS     26
#define ALIGN     64

/* Offsets are assigned in reverse info order, so the data section is not sorted like the
 * infos (exercises the overlap check's sort). Offset of tensor i within the data section. */
static uint64_t fixture_offset(size_t i) {
    uint64_t off = 0;
    for (size_t j = N_TENSORS - 1; j > i; j--) off += (k_tensors[j].nbytes + ALIGN - 1) / ALIGN * ALIGN;
    return off;
}

static void put_full_kvs(buf *b) {
    put_key(b, "general.alignment", GGUF_VT_U32), put_u32(b, ALIGN);
    put_key(b, "t.u8", GGUF_VT_U8), put_u8(b, 200);
    put_key(b, "t.i8", GGUF_VT_I8), put_u8(b, (uint8_t)-100);
    put_key(b, "t.u16", GGUF_VT_U16), put_u16(b, 60000);
    put_key(b, "t.i16", GGUF_VT_I16), put_u16(b, (uint16_t)-30000);
    put_key(b, "t.u32", GGUF_VT_U32), put_u32(b, 4000000000u);
    put_key(b, "t.i32", GGUF_VT_I32), put_u32(b, (uint32_t)-2000000000);
    put_key(b, "t.f32", GGUF_VT_F32), put_f32(b, 1.5f);
    put_key(b, "t.bool", GGUF_VT_BOOL), put_u8(b, 1);
    put_key(b, "t.str", GGUF_VT_STRING), put_str(b, "hello");
    put_key(b, "t.u64", GGUF_VT_U64), put_u64(b, 0x8000000000000005ull);
    put_key(b, "t.i64", GGUF_VT_I64), put_u64(b, (uint64_t)(-(INT64_C(1) << 62)));
    put_key(b, "t.f64", GGUF_VT_F64), put_f64(b, 3.25);
    put_key(b, "t.arr.u8", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_U8, 3), put_u8(b, 1), put_u8(b, 2), put_u8(b, 3);
    put_key(b, "t.arr.i16", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_I16, 2), put_u16(b, (uint16_t)-1), put_u16(b, 2);
    put_key(b, "t.arr.f32", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_F32, 3);
    put_f32(b, 0.5f), put_f32(b, -2.0f), put_f32(b, 1e30f);
    put_key(b, "t.arr.bool", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_BOOL, 2), put_u8(b, 1), put_u8(b, 0);
    put_key(b, "t.arr.str", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_STRING, 3);
    put_str(b, "a"), put_str(b, ""), put_str(b, "\xc3\xbcn\xc3\xaf");
    /* [[1, 2], [3], []] of i32 */
    put_key(b, "t.arr.nested", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_ARRAY, 3);
    put_arr(b, GGUF_VT_I32, 2), put_u32(b, 1), put_u32(b, 2);
    put_arr(b, GGUF_VT_I32, 1), put_u32(b, 3);
    put_arr(b, GGUF_VT_I32, 0);
    /* [[["x", "yz"]]] */
    put_key(b, "t.arr.deep", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_ARRAY, 1), put_arr(b, GGUF_VT_ARRAY, 1);
    put_arr(b, GGUF_VT_STRING, 2), put_str(b, "x"), put_str(b, "yz");
    put_key(b, "t.arr.empty", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_U64, 0);
    put_key(b, "t.arr.u64", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_U64, 2);
    put_u64(b, UINT64_C(1) << 40), put_u64(b, 0x8000000000000001ull);
    put_key(b, "t.arr.f64", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_F64, 2), put_f64(b, 2.5), put_f64(b, 1e300);
    put_key(b, "t.empty.str", GGUF_VT_STRING), put_str(b, "");
    put_key(b, "t.utf8.\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", GGUF_VT_U8), put_u8(b, 7);
    /* 8 levels of nesting, the limit: [[[[[[[[7]]]]]]]] of u8 */
    put_key(b, "t.arr.depth8", GGUF_VT_ARRAY);
    for (int d = 0; d < GGUF_MAX_ARRAY_DEPTH - 1; d++) put_arr(b, GGUF_VT_ARRAY, 1);
    put_arr(b, GGUF_VT_U8, 1), put_u8(b, 7);
}

/* The whole file ends exactly where the last tensor's data ends, so every proper prefix
 * must be rejected. */
static void build_full(buf *b, uint32_t version) {
    put_header(b, version, N_TENSORS, N_KVS);
    put_full_kvs(b);
    for (size_t i = 0; i < N_TENSORS; i++) {
        const tensor_spec *t = &k_tensors[i];
        put_tensor(b, t->name, t->n_dims, t->ne, t->type, fixture_offset(i));
    }
    put_pad(b, ALIGN);
    size_t data = b->n;
    uint64_t end = fixture_offset(0) + k_tensors[0].nbytes;
    put_data(b, end);
    assert_int_equal(b->n, data + end);
}

/* ---------------------------------------------------------------------------------------
 * (a) valid file
 * ------------------------------------------------------------------------------------- */

static void check_str(gguf_str s, const char *want) {
    assert_int_equal(s.len, strlen(want));
    if (s.len) assert_memory_equal(s.ptr, want, s.len);
}

static const gguf_value *arr_of(const gguf_file *f, const char *key, gguf_vtype elem, uint64_t count) {
    const gguf_value *a = NULL;
    assert_int_equal(ls_gguf_get_arr(f, key, &a), 0);
    assert_int_equal(a->type, GGUF_VT_ARRAY);
    assert_int_equal(a->v.arr.elem, elem);
    assert_int_equal(a->v.arr.count, count);
    return a;
}

static void check_scalars(const gguf_file *f) {
    uint32_t u32;
    int64_t i64;
    float f32;
    int bl;
    gguf_str s;
    assert_int_equal(ls_gguf_find(f, "t.u8")->v.u, 200);
    assert_int_equal(ls_gguf_find(f, "t.i8")->v.i, -100);
    assert_int_equal(ls_gguf_find(f, "t.u16")->v.u, 60000);
    assert_int_equal(ls_gguf_find(f, "t.i16")->v.i, -30000);
    assert_int_equal(ls_gguf_find(f, "t.u32")->v.u, 4000000000u);
    assert_int_equal(ls_gguf_find(f, "t.i32")->v.i, -2000000000);
    assert_true(ls_gguf_find(f, "t.f32")->v.f == 1.5);
    assert_int_equal(ls_gguf_find(f, "t.bool")->v.u, 1);
    assert_true(ls_gguf_find(f, "t.u64")->v.u == 0x8000000000000005ull);
    assert_true(ls_gguf_find(f, "t.i64")->v.i == -(INT64_C(1) << 62));
    assert_true(ls_gguf_find(f, "t.f64")->v.f == 3.25);
    assert_int_equal(ls_gguf_find(f, "t.utf8.\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87")->v.u, 7);
    assert_null(ls_gguf_find(f, "t.absent"));
    assert_null(ls_gguf_find(f, "t.u"));   /* prefix of a key */
    assert_null(ls_gguf_find(f, "t.u88")); /* key is a prefix of it */

    /* u32: any integer type whose value fits. */
    assert_int_equal(ls_gguf_get_u32(f, "t.u8", &u32), 0), assert_int_equal(u32, 200);
    assert_int_equal(ls_gguf_get_u32(f, "t.u32", &u32), 0), assert_int_equal(u32, 4000000000u);
    assert_int_equal(ls_gguf_get_u32(f, "t.i8", &u32), -2);  /* negative */
    assert_int_equal(ls_gguf_get_u32(f, "t.u64", &u32), -2); /* too large */
    assert_int_equal(ls_gguf_get_u32(f, "t.str", &u32), -2);
    assert_int_equal(ls_gguf_get_u32(f, "t.bool", &u32), -2);
    assert_int_equal(ls_gguf_get_u32(f, "t.absent", &u32), -1);
    /* i64 */
    assert_int_equal(ls_gguf_get_i64(f, "t.i32", &i64), 0), assert_true(i64 == -2000000000);
    assert_int_equal(ls_gguf_get_i64(f, "t.u32", &i64), 0), assert_true(i64 == 4000000000);
    assert_int_equal(ls_gguf_get_i64(f, "t.u64", &i64), -2);
    assert_int_equal(ls_gguf_get_i64(f, "t.f32", &i64), -2);
    /* f32: floats and integers */
    assert_int_equal(ls_gguf_get_f32(f, "t.f32", &f32), 0), assert_true(f32 == 1.5f);
    assert_int_equal(ls_gguf_get_f32(f, "t.f64", &f32), 0), assert_true(f32 == 3.25f);
    assert_int_equal(ls_gguf_get_f32(f, "t.i16", &f32), 0), assert_true(f32 == -30000.0f);
    assert_int_equal(ls_gguf_get_f32(f, "t.bool", &f32), -2);
    assert_int_equal(ls_gguf_get_f32(f, "t.str", &f32), -2);
    /* bool, str, arr */
    assert_int_equal(ls_gguf_get_bool(f, "t.bool", &bl), 0), assert_int_equal(bl, 1);
    assert_int_equal(ls_gguf_get_bool(f, "t.u8", &bl), -2);
    assert_int_equal(ls_gguf_get_str(f, "t.str", &s), 0), check_str(s, "hello");
    assert_int_equal(ls_gguf_get_str(f, "t.empty.str", &s), 0), assert_int_equal(s.len, 0);
    assert_int_equal(ls_gguf_get_str(f, "t.u8", &s), -2);
    assert_int_equal(ls_gguf_get_str(f, "t.absent", &s), -1);
    const gguf_value *a;
    assert_int_equal(ls_gguf_get_arr(f, "t.u8", &a), -2);
    assert_int_equal(ls_gguf_get_arr(f, "t.absent", &a), -1);
}

static void check_arrays(const gguf_file *f) {
    int64_t i64;
    float f32;
    gguf_str s;
    const gguf_value *a = arr_of(f, "t.arr.u8", GGUF_VT_U8, 3), *sub, *sub2;
    assert_memory_equal(a->v.arr.data, "\1\2\3", 3);
    assert_null(a->v.arr.items);
    assert_int_equal(ls_gguf_arr_i64(a, 2, &i64), 0), assert_int_equal(i64, 3);
    assert_int_equal(ls_gguf_arr_i64(a, 3, &i64), -1);
    assert_int_equal(ls_gguf_arr_str(a, 0, &s), -2);
    assert_int_equal(ls_gguf_arr_sub(a, 0, &sub), -2);

    a = arr_of(f, "t.arr.i16", GGUF_VT_I16, 2);
    assert_int_equal(ls_gguf_arr_i64(a, 0, &i64), 0), assert_int_equal(i64, -1);
    assert_int_equal(ls_gguf_arr_f32(a, 1, &f32), 0), assert_true(f32 == 2.0f);
    a = arr_of(f, "t.arr.f32", GGUF_VT_F32, 3);
    assert_int_equal(ls_gguf_arr_f32(a, 0, &f32), 0), assert_true(f32 == 0.5f);
    assert_int_equal(ls_gguf_arr_f32(a, 1, &f32), 0), assert_true(f32 == -2.0f);
    assert_int_equal(ls_gguf_arr_f32(a, 2, &f32), 0), assert_true(f32 == 1e30f);
    assert_int_equal(ls_gguf_arr_i64(a, 0, &i64), -2);
    a = arr_of(f, "t.arr.bool", GGUF_VT_BOOL, 2);
    assert_memory_equal(a->v.arr.data, "\1\0", 2);
    a = arr_of(f, "t.arr.u64", GGUF_VT_U64, 2);
    assert_int_equal(ls_gguf_arr_i64(a, 0, &i64), 0), assert_true(i64 == INT64_C(1) << 40);
    assert_int_equal(ls_gguf_arr_i64(a, 1, &i64), -2); /* > INT64_MAX */
    a = arr_of(f, "t.arr.f64", GGUF_VT_F64, 2);
    assert_int_equal(ls_gguf_arr_f32(a, 0, &f32), 0), assert_true(f32 == 2.5f);
    assert_int_equal(ls_gguf_arr_f32(a, 1, &f32), -2); /* 1e300 out of float range */
    arr_of(f, "t.arr.empty", GGUF_VT_U64, 0);

    a = arr_of(f, "t.arr.str", GGUF_VT_STRING, 3);
    assert_non_null(a->v.arr.items);
    assert_int_equal(a->v.arr.items[0].type, GGUF_VT_STRING);
    check_str(a->v.arr.items[0].v.s, "a");
    assert_int_equal(ls_gguf_arr_str(a, 1, &s), 0), assert_int_equal(s.len, 0);
    assert_int_equal(ls_gguf_arr_str(a, 2, &s), 0), check_str(s, "\xc3\xbcn\xc3\xaf");
    assert_int_equal(ls_gguf_arr_str(a, 3, &s), -1);
    assert_int_equal(ls_gguf_arr_i64(a, 0, &i64), -2);

    a = arr_of(f, "t.arr.nested", GGUF_VT_ARRAY, 3);
    static const int64_t want[3][2] = {{1, 2}, {3, 0}, {0, 0}};
    static const uint64_t counts[3] = {2, 1, 0};
    for (uint64_t i = 0; i < 3; i++) {
        assert_int_equal(ls_gguf_arr_sub(a, i, &sub), 0);
        assert_ptr_equal(sub, &a->v.arr.items[i]);
        assert_int_equal(sub->type, GGUF_VT_ARRAY);
        assert_int_equal(sub->v.arr.elem, GGUF_VT_I32);
        assert_int_equal(sub->v.arr.count, counts[i]);
        for (uint64_t j = 0; j < counts[i]; j++)
            assert_int_equal(ls_gguf_arr_i64(sub, j, &i64), 0), assert_true(i64 == want[i][j]);
    }
    assert_int_equal(ls_gguf_arr_sub(a, 3, &sub), -1);

    a = arr_of(f, "t.arr.deep", GGUF_VT_ARRAY, 1);
    assert_int_equal(ls_gguf_arr_sub(a, 0, &sub), 0);
    assert_int_equal(sub->v.arr.elem, GGUF_VT_ARRAY);
    assert_int_equal(ls_gguf_arr_sub(sub, 0, &sub2), 0);
    assert_int_equal(sub2->v.arr.elem, GGUF_VT_STRING);
    assert_int_equal(sub2->v.arr.count, 2);
    assert_int_equal(ls_gguf_arr_str(sub2, 1, &s), 0), check_str(s, "yz");

    a = arr_of(f, "t.arr.depth8", GGUF_VT_ARRAY, 1);
    for (int d = 0; d < GGUF_MAX_ARRAY_DEPTH - 1; d++) assert_int_equal(ls_gguf_arr_sub(a, 0, &a), 0);
    assert_int_equal(a->v.arr.elem, GGUF_VT_U8);
    assert_int_equal(ls_gguf_arr_i64(a, 0, &i64), 0), assert_int_equal(i64, 7);
}

static void check_tensors(const gguf_file *f, const uint8_t *base) {
    assert_int_equal(ls_gguf_n_tensors(f), N_TENSORS);
    assert_int_equal(ls_gguf_alignment(f), ALIGN);
    uint64_t data = ls_gguf_data_offset(f);
    assert_int_equal(data % ALIGN, 0);
    for (size_t i = 0; i < N_TENSORS; i++) {
        const tensor_spec *want = &k_tensors[i];
        const gguf_tensor *t = ls_gguf_tensor_at(f, i);
        assert_non_null(t);
        assert_string_equal(t->name, want->name);
        assert_ptr_equal(ls_gguf_find_tensor(f, want->name), t);
        assert_int_equal(t->type, want->type);
        assert_int_equal(t->n_dims, want->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], want->ne[d]);
        assert_int_equal(t->nbytes, want->nbytes);
        assert_int_equal(t->nbytes, ls_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]));
        assert_int_equal(t->offset, fixture_offset(i));
        assert_ptr_equal(t->data, base + data + t->offset);
        uint64_t k = data + t->offset; /* first data byte follows the put_data pattern */
        assert_int_equal(((const uint8_t *)t->data)[0], (uint8_t)((k * 7 + 3) & 255));
    }
    assert_null(ls_gguf_tensor_at(f, N_TENSORS));
    assert_null(ls_gguf_find_tensor(f, "nope"));
    assert_null(ls_gguf_find_tensor(f, "tok.weigh"));
}

static void check_full(const gguf_file *f, const uint8_t *base, uint32_t version) {
    assert_int_equal(ls_gguf_version(f), version);
    assert_int_equal(ls_gguf_n_kv(f), N_KVS);
    const gguf_kv *kv = ls_gguf_kv_at(f, 1);
    check_str(kv->key, "t.u8");
    assert_ptr_equal(&kv->value, ls_gguf_find(f, "t.u8"));
    assert_null(ls_gguf_kv_at(f, N_KVS));
    for (uint64_t i = 0; i < N_KVS; i++) { /* every key finds its own entry */
        kv = ls_gguf_kv_at(f, i);
        char key[64];
        assert_true(kv->key.len < sizeof key);
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        assert_ptr_equal(ls_gguf_find(f, key), &kv->value);
    }
    check_scalars(f);
    check_arrays(f);
    check_tensors(f, base);
}

static void test_valid_memory(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        buf b = {0};
        build_full(&b, version);
        gguf_file *f = NULL;
        char err[256];
        int rc = ls_gguf_open_memory(b.b, b.n, &f, err, sizeof err);
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, 0);
        assert_string_equal(err, "");
        check_full(f, b.b, version);
        ls_gguf_close(f);
        free(b.b);
    }
}

static void test_valid_file(void **state) {
    (void)state;
    buf b = {0};
    build_full(&b, 3);
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.b, b.n), (ssize_t)b.n);
    close(fd);
    gguf_file *f = NULL;
    char err[256];
    assert_int_equal(ls_gguf_open(path, &f, err, sizeof err), 0);
    const gguf_tensor *t = ls_gguf_tensor_at(f, 0);
    /* Same layout as in memory: tensor 0's data equals the bytes at the same offset. */
    const uint8_t *base = (const uint8_t *)t->data - ls_gguf_data_offset(f) - t->offset;
    check_full(f, base, 3);
    assert_memory_equal(t->data, b.b + ls_gguf_data_offset(f) + t->offset, t->nbytes);
    ls_gguf_close(f);

    /* Empty file, directory, missing file. */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    close(fd);
    assert_int_not_equal(ls_gguf_open(path, &f, err, sizeof err), 0);
    assert_null(f);
    assert_non_null(strstr(err, "truncated header"));
    assert_int_not_equal(ls_gguf_open("/tmp", &f, err, sizeof err), 0);
    assert_non_null(strstr(err, "not a regular file"));
    unlink(path);
    assert_int_not_equal(ls_gguf_open(path, &f, err, sizeof err), 0);
    assert_non_null(strstr(err, "cannot open"));
    free(b.b);
}

/* ---------------------------------------------------------------------------------------
 * (b) malformed files
 * ------------------------------------------------------------------------------------- */

/* Header + one key "k" (u32 1) + tensors; the caller writes the tensor infos and data. */
static void small_begin(buf *b, uint64_t n_tensors) {
    put_header(b, 3, n_tensors, 1);
    put_key(b, "k", GGUF_VT_U32), put_u32(b, 1);
}

static const uint64_t NE8[] = {8}, NE16[] = {16}, NE32x2[] = {32, 2};

/* Valid: tensor a (F32 [8]) at 0, tensor b (Q8_0 [32 x 2]) at 32, alignment 32. */
static void mk_small(buf *b) {
    small_begin(b, 2);
    put_tensor(b, "a", 1, NE8, LS_TYPE_F32, 0);
    put_tensor(b, "b", 2, NE32x2, LS_TYPE_Q8_0, 32);
    put_pad(b, 32);
    put_data(b, 32 + 68);
}

static void mk_bad_magic(buf *b) {
    mk_small(b), b->b[0] = 'X';
}
static void mk_version1(buf *b) {
    mk_small(b), b->b[4] = 1;
}
static void mk_version4(buf *b) {
    mk_small(b), b->b[4] = 4;
}
static void mk_big_endian(buf *b) {
    mk_small(b), b->b[4] = 0, b->b[7] = 3;
}
static void mk_short_header(buf *b) {
    mk_small(b), b->n = 20;
}
static void mk_tiny(buf *b) {
    put(b, "GG", 2);
}
static void mk_huge_kv_count(buf *b) {
    put_header(b, 3, 0, UINT64_C(1) << 60), put_key(b, "k", GGUF_VT_U8), put_u8(b, 1);
}
static void mk_huge_tensor_count(buf *b) {
    put_header(b, 3, UINT64_C(1) << 60, 0);
}
static void mk_more_kvs_than_present(buf *b) {
    put_header(b, 3, 0, 2), put_key(b, "k", GGUF_VT_U32), put_u32(b, 1), put_str(b, "zzzz"); /* no type */
}
static void mk_huge_key_len(buf *b) {
    put_header(b, 3, 0, 1), put_u64(b, UINT64_C(1) << 62), put_u32(b, 0), put_u8(b, 0);
}
static void mk_huge_string(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "a", GGUF_VT_STRING), put_u64(b, 1000000000000000000ull), put_u8(b, 0);
}
static void mk_huge_array(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "a", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_U32, UINT64_C(1) << 60);
}
static void mk_huge_str_array(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "a", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_STRING, UINT64_C(1) << 60);
}
static void mk_huge_nested_array(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "a", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_ARRAY, 2);
    put_arr(b, GGUF_VT_U8, 1), put_u8(b, 1), put_arr(b, GGUF_VT_U64, UINT64_C(1) << 61);
}
static void mk_huge_string_in_array(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "toks", GGUF_VT_ARRAY), put_arr(b, GGUF_VT_STRING, 3);
    put_str(b, "ok"), put_str(b, "ok2"), put_u64(b, UINT64_C(1) << 40), put_u64(b, 0);
}
static void mk_too_deep(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "deep", GGUF_VT_ARRAY);
    for (int d = 0; d < GGUF_MAX_ARRAY_DEPTH; d++) put_arr(b, GGUF_VT_ARRAY, 1);
    put_arr(b, GGUF_VT_U8, 1), put_u8(b, 7);
}
static void mk_bad_vtype(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "a", 13), put_u64(b, 0);
}
static void mk_bad_elem_type(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "a", GGUF_VT_ARRAY), put_arr(b, 77, 0);
}
static void mk_dup_key(buf *b) {
    put_header(b, 3, 0, 3), put_key(b, "x", GGUF_VT_U8), put_u8(b, 1), put_key(b, "y", GGUF_VT_U8), put_u8(b, 1);
    put_key(b, "x", GGUF_VT_STRING), put_str(b, "again");
}
static void mk_key_bad_utf8(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "ab\xff", GGUF_VT_U8), put_u8(b, 1);
}
static void mk_key_overlong(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "\xc0\xaf", GGUF_VT_U8), put_u8(b, 1);
}
static void mk_key_surrogate(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "\xed\xa0\x80", GGUF_VT_U8), put_u8(b, 1);
}
static void mk_key_cut_utf8(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "k\xe2\x82", GGUF_VT_U8), put_u8(b, 1);
}
static void mk_key_nul(buf *b) {
    put_header(b, 3, 0, 1), put_strn(b, "a\0b", 3), put_u32(b, GGUF_VT_U8), put_u8(b, 1);
}
static void mk_key_empty(buf *b) {
    put_header(b, 3, 0, 1), put_key(b, "", GGUF_VT_U8), put_u8(b, 1);
}
static void mk_align(buf *b, uint32_t type, uint64_t v) {
    put_header(b, 3, 0, 1), put_key(b, "general.alignment", type), put_le(b, v, type == GGUF_VT_U64 ? 8 : 4);
}
static void mk_align0(buf *b) {
    mk_align(b, GGUF_VT_U32, 0);
}
static void mk_align3(buf *b) {
    mk_align(b, GGUF_VT_U32, 3);
}
static void mk_align_u64(buf *b) {
    mk_align(b, GGUF_VT_U64, 64);
}
static void mk_align_i32(buf *b) {
    mk_align(b, GGUF_VT_I32, 64);
}

/* One tensor "t" with the given shape/type/offset, and `data` bytes of data section. */
static void mk_one(buf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off, size_t data) {
    small_begin(b, 1);
    put_tensor(b, "t", n_dims, ne, type, off);
    put_pad(b, 32);
    put_data(b, data);
}
static void mk_ndims0(buf *b) {
    mk_one(b, 0, NE8, LS_TYPE_F32, 0, 32);
}
static void mk_ndims5(buf *b) {
    static const uint64_t ne[5] = {1, 1, 1, 1, 1};
    mk_one(b, 5, ne, LS_TYPE_F32, 0, 32);
}
static void mk_ne_zero(buf *b) {
    static const uint64_t ne[2] = {8, 0};
    mk_one(b, 2, ne, LS_TYPE_F32, 0, 32);
}
static void mk_ne_negative(buf *b) {
    static const uint64_t ne[2] = {8, (uint64_t)-1};
    mk_one(b, 2, ne, LS_TYPE_F32, 0, 32);
}
static void mk_not_block(buf *b) {
    static const uint64_t ne[1] = {33};
    mk_one(b, 1, ne, LS_TYPE_Q4_0, 0, 64);
}
static void mk_kquant_not_block(buf *b) {
    static const uint64_t ne[1] = {128};
    mk_one(b, 1, ne, LS_TYPE_Q4_K, 0, 144);
}
static void mk_nel_overflow(buf *b) {
    static const uint64_t ne[2] = {UINT64_C(1) << 32, UINT64_C(1) << 32};
    mk_one(b, 2, ne, LS_TYPE_F32, 0, 32);
}
static void mk_nel_overflow4(buf *b) {
    static const uint64_t ne[4] = {1 << 16, 1 << 16, 1 << 16, 1 << 16};
    mk_one(b, 4, ne, LS_TYPE_F32, 0, 32);
}
static void mk_bytes_overflow(buf *b) {
    static const uint64_t ne[1] = {UINT64_C(1) << 62};
    mk_one(b, 1, ne, LS_TYPE_F32, 0, 32);
}
static void mk_bad_type(buf *b) {
    mk_one(b, 1, NE8, 99, 0, 32);
}
static void mk_removed_type(buf *b) {
    mk_one(b, 1, NE32x2, 4, 0, 64);
} /* Q4_2, gone from ggml */
static void mk_unaligned(buf *b) {
    mk_one(b, 1, NE8, LS_TYPE_F32, 8, 64);
}
static void mk_past_end(buf *b) {
    mk_one(b, 1, NE8, LS_TYPE_F32, 1024, 32);
}
static void mk_one_byte_short(buf *b) {
    mk_one(b, 1, NE8, LS_TYPE_F32, 0, 31);
}
static void mk_no_data(buf *b) {
    small_begin(b, 1), put_tensor(b, "t", 1, NE8, LS_TYPE_F32, 0);
}
static void mk_offset_overflow(buf *b) {
    mk_one(b, 1, NE8, LS_TYPE_F32, UINT64_MAX - 31, 32);
}
static void mk_overlap(buf *b) {
    small_begin(b, 2);
    put_tensor(b, "big", 1, NE16, LS_TYPE_F32, 0);  /* [0, 64) */
    put_tensor(b, "late", 1, NE8, LS_TYPE_F32, 32); /* [32, 64) */
    put_pad(b, 32);
    put_data(b, 64);
}
static void mk_same_offset(buf *b) {
    small_begin(b, 2);
    put_tensor(b, "x", 1, NE8, LS_TYPE_F32, 0);
    put_tensor(b, "y", 1, NE8, LS_TYPE_F32, 0);
    put_pad(b, 32);
    put_data(b, 32);
}
static void mk_dup_tensor(buf *b) {
    small_begin(b, 3);
    put_tensor(b, "w", 1, NE8, LS_TYPE_F32, 0);
    put_tensor(b, "v", 1, NE8, LS_TYPE_F32, 32);
    put_tensor(b, "w", 1, NE8, LS_TYPE_F32, 64);
    put_pad(b, 32);
    put_data(b, 96);
}
static void mk_tensor_bad_utf8(buf *b) {
    small_begin(b, 1), put_tensor(b, "blk.\x80", 1, NE8, LS_TYPE_F32, 0), put_pad(b, 32), put_data(b, 32);
}
static void mk_tensor_empty_name(buf *b) {
    small_begin(b, 1), put_tensor(b, "", 1, NE8, LS_TYPE_F32, 0), put_pad(b, 32), put_data(b, 32);
}
static void mk_tensor_huge_name(buf *b) {
    small_begin(b, 1), put_u64(b, UINT64_C(1) << 50);
    for (int i = 0; i < 4; i++) put_u64(b, 0);
}
static void mk_tensor_cut(buf *b) { /* cut inside ne[0] (a long name passes the count check) */
    small_begin(b, 1), put_tensor(b, "blk.0.attn_q.weight", 1, NE8, LS_TYPE_F32, 0);
    b->n = 24 + 17 + 8 + 19 + 4 + 3;
}

typedef struct {
    const char *name;
    void (*make)(buf *b);
    const char *want; /* substring of the error message */
} bad_case;

static const bad_case k_bad[] = {
    {"bad magic", mk_bad_magic, "gguf: not a GGUF file (bad magic)"},
    {"version 1", mk_version1, "unsupported GGUF version 1"},
    {"version 4", mk_version4, "unsupported GGUF version 4"},
    {"big-endian", mk_big_endian, "big-endian"},
    {"short header", mk_short_header, "gguf: truncated header"},
    {"two bytes", mk_tiny, "gguf: truncated header"},
    {"huge kv count", mk_huge_kv_count, "metadata key count 1152921504606846976 too large"},
    {"huge tensor count", mk_huge_tensor_count, "tensor count 1152921504606846976 too large"},
    {"missing kv", mk_more_kvs_than_present, "metadata key #1 'zzzz': truncated: value type needs 4 bytes"},
    {"huge key length", mk_huge_key_len, "metadata key #0: key length 4611686018427387904 exceeds remaining"},
    {"huge string", mk_huge_string,
     "gguf: metadata key #0 'a': string length 1000000000000000000 exceeds remaining 1 bytes"},
    {"huge array", mk_huge_array, "metadata key #0 'a': array count 1152921504606846976 of u32 too large"},
    {"huge string array", mk_huge_str_array, "array count 1152921504606846976 of string too large"},
    {"huge nested array", mk_huge_nested_array, "'a'[1]: array count 2305843009213693952 of u64"},
    {"huge string in array", mk_huge_string_in_array, "'toks'[2]: string length 1099511627776 exceeds"},
    {"nested too deep", mk_too_deep, "'deep'[0][0][0][0][0][0][0][0]: arrays nested deeper than 8"},
    {"unknown value type", mk_bad_vtype, "metadata key #0 'a': unknown value type 13"},
    {"unknown element type", mk_bad_elem_type, "unknown array element type 77"},
    {"duplicate key", mk_dup_key, "metadata key #2 'x': duplicate key (first defined as metadata key #0)"},
    {"key not utf-8", mk_key_bad_utf8, "key is not valid UTF-8 (byte 2)"},
    {"key overlong utf-8", mk_key_overlong, "key is not valid UTF-8"},
    {"key surrogate", mk_key_surrogate, "key is not valid UTF-8"},
    {"key cut utf-8", mk_key_cut_utf8, "key is not valid UTF-8 (byte 1)"},
    {"key with NUL", mk_key_nul, "key contains a NUL byte"},
    {"empty key", mk_key_empty, "metadata key #0: key is empty"},
    {"alignment 0", mk_align0, "general.alignment = 0 is not a nonzero power of two"},
    {"alignment 3", mk_align3, "general.alignment = 3 is not a nonzero power of two"},
    {"alignment u64", mk_align_u64, "general.alignment has type u64, expected u32"},
    {"alignment i32", mk_align_i32, "general.alignment has type i32, expected u32"},
    {"n_dims 0", mk_ndims0, "tensor 't': n_dims 0 out of range 1..4"},
    {"n_dims 5", mk_ndims5, "tensor 't': n_dims 5 out of range 1..4"},
    {"ne 0", mk_ne_zero, "tensor 't': ne[1] = 0 out of range"},
    {"ne negative", mk_ne_negative, "ne[1] = 18446744073709551615 out of range"},
    {"ne[0] not block multiple", mk_not_block, "ne[0] = 33 is not a multiple of the"},
    {"k-quant not block multiple", mk_kquant_not_block, "ne[0] = 128 is not a multiple of the"},
    {"element count overflow", mk_nel_overflow, "element count overflows"},
    {"element count overflow 4d", mk_nel_overflow4, "element count overflows"},
    {"byte size overflow", mk_bytes_overflow, "byte size overflows"},
    {"unknown type", mk_bad_type, "tensor 't': unknown ggml type 99"},
    {"removed type", mk_removed_type, "unknown ggml type 4"},
    {"unaligned offset", mk_unaligned, "tensor 't': offset 8 is not a multiple of the alignment 32"},
    {"data past end", mk_past_end, "tensor 't': data ends at "},
    {"data one byte short", mk_one_byte_short, "past end of file"},
    {"no data section", mk_no_data, "past end of file"},
    {"offset overflow", mk_offset_overflow, "overflows"},
    {"overlap", mk_overlap, "tensor 'late': data [160, 192) overlaps tensor 'big' [128, 192)"},
    {"same offset", mk_same_offset, "tensor 'y': data [128, 160) overlaps tensor 'x' [128, 160)"},
    {"duplicate tensor", mk_dup_tensor, "tensor 'w': duplicate tensor name (also tensor #0)"},
    {"tensor name not utf-8", mk_tensor_bad_utf8, "name is not valid UTF-8 (byte 4)"},
    {"tensor name empty", mk_tensor_empty_name, "tensor #0: name is empty"},
    {"tensor name huge", mk_tensor_huge_name, "tensor #0: name length 1125899906842624 exceeds"},
    {"tensor info cut", mk_tensor_cut, "tensor 'blk.0.attn_q.weight': truncated: ne needs 8 bytes at offset 72"},
};

/* Open a heap copy of exactly n bytes (so ASan sees any read past the end). */
static int open_copy(const uint8_t *p, size_t n, gguf_file **f, char *err, size_t errlen) {
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, p, n);
    int rc = ls_gguf_open_memory(copy, n, f, err, errlen);
    if (rc == 0) ls_gguf_close(*f), *f = NULL;
    free(copy);
    return rc;
}

static void test_malformed(void **state) {
    (void)state;
    buf b = {0};
    gguf_file *f = NULL;
    char err[512];
    mk_small(&b); /* the base the byte-patched cases start from must itself be valid */
    assert_int_equal(ls_gguf_open_memory(b.b, b.n, &f, err, sizeof err), 0);
    ls_gguf_close(f);
    free(b.b);
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        const bad_case *c = &k_bad[i];
        b = (buf){0};
        c->make(&b);
        f = (gguf_file *)&b; /* must be reset to NULL */
        err[0] = 0;
        int rc = open_copy(b.b, b.n, &f, err, sizeof err);
        if (rc == 0 || !strstr(err, c->want) || strncmp(err, "gguf: ", 6) != 0)
            fail_msg("case '%s': rc %d, message '%s', expected to contain '%s'", c->name, rc, err, c->want);
        assert_null(f);
        free(b.b);
    }
}

/* Messages are truncated, not overflowed, in small buffers; NULL buffers are allowed. */
static void test_error_buffers(void **state) {
    (void)state;
    buf b = {0};
    mk_dup_tensor(&b);
    gguf_file *f = NULL;
    char err[9];
    memset(err, 'Z', sizeof err);
    assert_int_not_equal(ls_gguf_open_memory(b.b, b.n, &f, err, 8), 0);
    assert_string_equal(err, "gguf: t");
    assert_int_equal(err[8], 'Z');
    assert_int_not_equal(ls_gguf_open_memory(b.b, b.n, &f, NULL, 0), 0);
    assert_int_not_equal(ls_gguf_open_memory(NULL, 0, &f, err, sizeof err), 0);
    free(b.b);
}

/* Every proper prefix of the full fixture fails cleanly (its last tensor ends at EOF). */
static void test_every_prefix(void **state) {
    (void)state;
    buf b = {0};
    build_full(&b, 3);
    gguf_file *f = NULL;
    char err[512];
    for (size_t n = 0; n < b.n; n++) {
        err[0] = 0;
        if (open_copy(b.b, n, &f, err, sizeof err) == 0) fail_msg("prefix of %zu bytes opened", n);
        if (strncmp(err, "gguf: ", 6) != 0) fail_msg("prefix %zu: message '%s'", n, err);
        assert_null(f);
    }
    assert_int_equal(open_copy(b.b, b.n, &f, err, sizeof err), 0);
    free(b.b);
}

static volatile uint8_t g_sink;

static void touch(const void *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) g_sink ^= ((const uint8_t *)p)[i];
}

static void touch_value(const gguf_value *v) {
    if (v->type == GGUF_VT_STRING) touch(v->v.s.ptr, v->v.s.len);
    if (v->type != GGUF_VT_ARRAY) return;
    if (v->v.arr.items)
        for (uint64_t i = 0; i < v->v.arr.count; i++) touch_value(&v->v.arr.items[i]);
    else
        for (uint64_t i = 0; i < v->v.arr.count; i++) {
            float x;
            ls_gguf_arr_f32(v, i, &x);
            g_sink ^= (uint8_t)(x == x);
        }
}

/* Each byte of the full fixture replaced by a few values: no crash, and when the result
 * opens, every value and tensor it hands out is readable (ASan checks the bounds). */
static void test_every_byte_corrupted(void **state) {
    (void)state;
    buf b = {0};
    build_full(&b, 3);
    static const uint8_t xors[] = {0x01, 0x80, 0xff, 0x40};
    gguf_file *f = NULL;
    char err[512];
    int opened = 0;
    for (size_t i = 0; i < b.n; i++) {
        for (size_t k = 0; k < sizeof xors; k++) {
            uint8_t *copy = malloc(b.n);
            memcpy(copy, b.b, b.n);
            copy[i] ^= xors[k];
            if (ls_gguf_open_memory(copy, b.n, &f, err, sizeof err) == 0) {
                opened++;
                for (uint64_t j = 0; j < ls_gguf_n_kv(f); j++) touch_value(&ls_gguf_kv_at(f, j)->value);
                for (uint64_t j = 0; j < ls_gguf_n_tensors(f); j++)
                    touch(ls_gguf_tensor_at(f, j)->data, ls_gguf_tensor_at(f, j)->nbytes);
                ls_gguf_close(f);
            } else {
                assert_null(f);
                assert_int_equal(strncmp(err, "gguf: ", 6), 0);
            }
            free(copy);
        }
    }
    assert_true(opened > 0); /* flips inside data or string values stay valid */
    free(b.b);
}

/* ---------------------------------------------------------------------------------------
 * (c) the real model
 * ------------------------------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_real_model(void **state) {
    (void)state;
    const char *path = getenv("LOCKSTEP_MODEL");
    if (!path || access(path, R_OK) != 0) {
        print_message("LOCKSTEP_MODEL not set or unreadable; skipping\n");
        skip();
    }
    gguf_file *f = NULL;
    char err[512];
    double t0 = now_ms();
    int rc = ls_gguf_open(path, &f, err, sizeof err);
    double ms = now_ms() - t0;
    if (rc) fail_msg("%s", err);
    print_message("opened %s in %.1f ms\n", path, ms);
    assert_true(ms < 1000); /* ~ms in release; loose so sanitizer builds pass */

    uint32_t u;
    gguf_str s;
    float x;
    int64_t i64;
    assert_int_equal(ls_gguf_version(f), 3);
    assert_int_equal(ls_gguf_get_str(f, "general.architecture", &s), 0), check_str(s, "gemma3");
    assert_int_equal(ls_gguf_get_u32(f, "gemma3.block_count", &u), 0), assert_int_equal(u, 18);
    assert_int_equal(ls_gguf_get_u32(f, "gemma3.embedding_length", &u), 0), assert_int_equal(u, 640);
    assert_int_equal(ls_gguf_get_f32(f, "gemma3.rope.freq_base", &x), 0), assert_true(x == 1e6f);
    const gguf_value *tok = NULL;
    assert_int_equal(ls_gguf_get_arr(f, "tokenizer.ggml.tokens", &tok), 0);
    assert_int_equal(tok->v.arr.elem, GGUF_VT_STRING);
    assert_int_equal(tok->v.arr.count, 262144);
    assert_int_equal(ls_gguf_arr_str(tok, 0, &s), 0), check_str(s, "<pad>");
    assert_int_equal(ls_gguf_arr_str(tok, 2, &s), 0), check_str(s, "<bos>");
    const gguf_value *scores = NULL, *types = NULL;
    assert_int_equal(ls_gguf_get_arr(f, "tokenizer.ggml.scores", &scores), 0);
    assert_int_equal(scores->v.arr.count, 262144);
    assert_int_equal(ls_gguf_arr_f32(scores, 0, &x), 0), assert_true(x == -1000.0f);
    assert_int_equal(ls_gguf_get_arr(f, "tokenizer.ggml.token_type", &types), 0);
    assert_int_equal(ls_gguf_arr_i64(types, 0, &i64), 0), assert_true(i64 == 3);

    assert_int_equal(ls_gguf_n_tensors(f), 236);
    assert_int_equal(ls_gguf_alignment(f), 32);
    const gguf_tensor *t = ls_gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, LS_TYPE_Q8_0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 640);
    assert_int_equal(t->ne[1], 262144);
    assert_int_equal(t->nbytes, 640 / 32 * 34 * 262144);
    /* Cross-checked with the python gguf package: output_norm.weight's data is at 6525120. */
    t = ls_gguf_find_tensor(f, "output_norm.weight");
    assert_non_null(t);
    assert_int_equal(ls_gguf_data_offset(f) + t->offset, 6525120);
    t = ls_gguf_find_tensor(f, "blk.0.attn_q.weight");
    assert_non_null(t);
    assert_int_equal(t->type, LS_TYPE_Q5_0);
    for (int i = 0; i < 18; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", i);
        assert_non_null(ls_gguf_find_tensor(f, name));
    }
    ls_gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_memory), cmocka_unit_test(test_valid_file),
        cmocka_unit_test(test_malformed),    cmocka_unit_test(test_error_buffers),
        cmocka_unit_test(test_every_prefix), cmocka_unit_test(test_every_byte_corrupted),
        cmocka_unit_test(test_real_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
