/* Chronological KV cache; see kv_cache.h for the layout and why it is rollback-safe. */
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static size_t elem_size(const ls_kv_layer *c) {
    return c->f32 ? sizeof(float) : sizeof(uint16_t);
}

uint64_t ls_kv_bytes_t(int32_t cap, int32_t row, bool f32) {
    return 2ull * (uint64_t)cap * (uint64_t)row * (f32 ? sizeof(float) : sizeof(uint16_t));
}

int ls_kv_init(ls_kv_layer *c, int32_t cap, int32_t row, int32_t window) {
    return ls_kv_init_t(c, cap, row, window, false);
}

int ls_kv_init_t(ls_kv_layer *c, int32_t cap, int32_t row, int32_t window, bool f32) {
    return ls_kv_init_be(c, NULL, cap, row, window, f32);
}

int ls_kv_init_be(ls_kv_layer *c, ls_backend *be, int32_t cap, int32_t row, int32_t window, bool f32) {
    memset(c, 0, sizeof *c);
    c->f32 = f32;
    c->be = be;
    size_t half = (size_t)cap * (size_t)row * elem_size(c);
    if (half == 0) half = 1; /* keep non-NULL pointers for empty caches */
    c->k = be ? be->ops->alloc(be, half) : malloc(half);
    c->v = be ? be->ops->alloc(be, half) : malloc(half);
    if (!c->k || !c->v) {
        ls_kv_free(c);
        return -1;
    }
    c->cap = cap;
    c->row = row;
    c->window = window;
    return 0;
}

void ls_kv_free(ls_kv_layer *c) {
    if (c->be) {
        if (c->k) c->be->ops->release(c->be, c->k);
        if (c->v) c->be->ops->release(c->be, c->v);
    } else {
        free(c->k);
        free(c->v);
    }
    c->k = c->v = NULL;
}

int ls_kv_reserve(ls_kv_layer *c, int32_t m) {
    if (c->n + m <= c->cap) return 0;
    if (c->window <= 0) return -1;
    /* The first new row (position end) sees keys from end - window + 1 on; later rows see
     * strictly later keys. Everything before that can go. */
    int32_t end = ls_kv_end(c);
    int32_t keep_from = end - c->window + 1;
    if (keep_from < c->first_pos) keep_from = c->first_pos;
    int32_t drop = keep_from - c->first_pos;
    if (c->n - drop + m > c->cap) return -1;
    if (drop > 0) {
        size_t rowb = (size_t)c->row * elem_size(c);
        size_t keep = (size_t)(c->n - drop) * rowb;
        if (c->be) {
            c->be->ops->copy(c->be, c->k, (char *)c->k + (size_t)drop * rowb, keep);
            c->be->ops->copy(c->be, c->v, (char *)c->v + (size_t)drop * rowb, keep);
            c->be->ops->sync(c->be); /* the step that appends may run on another backend */
        } else {
            memmove(c->k, (char *)c->k + (size_t)drop * rowb, keep);
            memmove(c->v, (char *)c->v + (size_t)drop * rowb, keep);
        }
        c->first_pos += drop;
        c->n -= drop;
    }
    return 0;
}

void *ls_kv_k(ls_kv_layer *c, int32_t pos) {
    LS_ASSERT(pos >= c->first_pos && pos - c->first_pos < c->cap);
    return (char *)c->k + (size_t)(pos - c->first_pos) * (size_t)c->row * elem_size(c);
}

void *ls_kv_v(ls_kv_layer *c, int32_t pos) {
    LS_ASSERT(pos >= c->first_pos && pos - c->first_pos < c->cap);
    return (char *)c->v + (size_t)(pos - c->first_pos) * (size_t)c->row * elem_size(c);
}

void ls_kv_commit(ls_kv_layer *c, int32_t end) {
    LS_ASSERT(end >= c->first_pos && end - c->first_pos <= c->cap);
    c->n = end - c->first_pos;
}

bool ls_kv_can_truncate(const ls_kv_layer *c, int32_t pos) {
    if (pos >= ls_kv_end(c) || pos == 0) return true; /* nothing to forget, or a full reset */
    /* The next row (position pos) reads keys from pos - window + 1 on: they must still be
     * here. (A rollback after a verify block always passes: compaction keeps the window
     * before the block's first row. Resuming further back, as prefix reuse may ask, needs
     * keys compaction may have dropped.) */
    int32_t need = c->window > 0 ? pos - c->window + 1 : 0;
    if (need < 0) need = 0;
    return pos >= c->first_pos && need >= c->first_pos;
}

int ls_kv_truncate(ls_kv_layer *c, int32_t pos) {
    if (pos >= ls_kv_end(c)) return 0;
    if (!ls_kv_can_truncate(c, pos)) return -1;
    if (pos == 0) c->first_pos = 0;
    c->n = pos - c->first_pos;
    return 0;
}
