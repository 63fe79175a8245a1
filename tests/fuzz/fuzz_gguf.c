/* libFuzzer target for the GGUF reader: parse arbitrary bytes with ls_gguf_open_memory, then
 * walk every key, value (nested arrays included) and tensor, reading every byte range the
 * reader handed out, so ASan flags any pointer or size the validator should have rejected.
 * It also checks the reader's promises (lookups find their own entry, shapes are sane,
 * tensor data lies inside the input, failures leave *out NULL and a "gguf: " message) and
 * traps when one is broken.
 *
 * Built two ways: with clang -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt, LS_FUZZ=ON), and
 * with any compiler next to corpus_runner.c, which replays tests/fuzz/corpus/gguf/ as a
 * regression test (tests/fuzz/regression.cmake). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_gguf: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

static volatile uint8_t g_sink; /* keeps the reads from being optimized away */

static void touch(const void *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) g_sink ^= ((const uint8_t *)p)[i];
}

static void walk_value(const gguf_value *v, int depth) {
    CHECK(depth <= GGUF_MAX_ARRAY_DEPTH);
    if (v->type == GGUF_VT_STRING) touch(v->v.s.ptr, v->v.s.len);
    if (v->type != GGUF_VT_ARRAY) return;
    gguf_vtype elem = v->v.arr.elem;
    uint64_t n = v->v.arr.count;
    if (elem == GGUF_VT_STRING || elem == GGUF_VT_ARRAY) {
        CHECK(n == 0 || v->v.arr.items);
        for (uint64_t i = 0; i < n; i++) {
            const gguf_value *item = &v->v.arr.items[i];
            CHECK(item->type == elem);
            gguf_str s;
            const gguf_value *sub;
            if (elem == GGUF_VT_STRING)
                CHECK(ls_gguf_arr_str(v, i, &s) == 0 && s.ptr == item->v.s.ptr);
            else
                CHECK(ls_gguf_arr_sub(v, i, &sub) == 0 && sub == item);
            walk_value(item, depth + 1);
        }
        return;
    }
    CHECK(v->v.arr.items == NULL);
    for (uint64_t i = 0; i < n; i++) { /* decode every fixed-size element */
        int64_t x;
        float y;
        int rx = ls_gguf_arr_i64(v, i, &x), ry = ls_gguf_arr_f32(v, i, &y);
        CHECK(rx == 0 || rx == -2);
        CHECK(ry == 0 || ry == -2);
    }
    int64_t x;
    CHECK(ls_gguf_arr_i64(v, n, &x) == -1);
}

/* Every key finds its own entry (keys are unique and NUL-free); getters agree with types. */
static void walk_kv(const gguf_file *f, const gguf_kv *kv) {
    CHECK(kv->key.len > 0);
    char *key = malloc(kv->key.len + 1);
    CHECK(key);
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = 0;
    CHECK(strlen(key) == kv->key.len);
    const gguf_value *v = ls_gguf_find(f, key);
    CHECK(v == &kv->value);
    uint32_t u;
    int64_t i;
    float x;
    int b;
    gguf_str s;
    const gguf_value *a;
    ls_gguf_get_u32(f, key, &u);
    ls_gguf_get_i64(f, key, &i);
    ls_gguf_get_f32(f, key, &x);
    CHECK((ls_gguf_get_bool(f, key, &b) == 0) == (v->type == GGUF_VT_BOOL));
    CHECK((ls_gguf_get_str(f, key, &s) == 0) == (v->type == GGUF_VT_STRING));
    CHECK((ls_gguf_get_arr(f, key, &a) == 0) == (v->type == GGUF_VT_ARRAY));
    free(key);
    walk_value(v, 0);
}

static void walk_tensor(const gguf_file *f, const gguf_tensor *t, const uint8_t *data, size_t size) {
    CHECK(t->n_dims >= 1 && t->n_dims <= 4);
    for (int d = 0; d < 4; d++) CHECK(t->ne[d] >= 1 && (d < t->n_dims || t->ne[d] == 1));
    CHECK(t->nbytes > 0);
    CHECK(t->offset % ls_gguf_alignment(f) == 0);
    const uint8_t *p = t->data;
    CHECK(p >= data + ls_gguf_data_offset(f) && t->nbytes <= size && p - data <= (ptrdiff_t)(size - t->nbytes));
    CHECK(ls_gguf_find_tensor(f, t->name) == t);
    touch(t->data, t->nbytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char not_null;
    gguf_file *f = (gguf_file *)&not_null; /* must come back NULL on failure */
    char err[256];
    if (ls_gguf_open_memory(data, size, &f, err, sizeof err) != 0) {
        CHECK(f == NULL);
        CHECK(strncmp(err, "gguf: ", 6) == 0);
        return 0;
    }
    CHECK(ls_gguf_version(f) == 2 || ls_gguf_version(f) == 3);
    uint32_t align = ls_gguf_alignment(f);
    CHECK(align != 0 && (align & (align - 1)) == 0);
    for (uint64_t i = 0; i < ls_gguf_n_kv(f); i++) walk_kv(f, ls_gguf_kv_at(f, i));
    CHECK(ls_gguf_kv_at(f, ls_gguf_n_kv(f)) == NULL);
    for (uint64_t i = 0; i < ls_gguf_n_tensors(f); i++) walk_tensor(f, ls_gguf_tensor_at(f, i), data, size);
    CHECK(ls_gguf_tensor_at(f, ls_gguf_n_tensors(f)) == NULL);
    ls_gguf_close(f);
    return 0;
}
