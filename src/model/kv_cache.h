/* KV cache for one attention layer, in chronological order.
 *
 * Full-attention layers: append-only, capacity = context length; rollback moves the
 * length back. Sliding-window layers: capacity = window + the largest block of rows one
 * forward may append (prefill chunk or verify block). When an append would overflow, the
 * front is compacted (memmove) down to the keys the new rows can still see. Keys stay in
 * position order, so a query reads the same keys in the same order whether it runs alone,
 * in a verify block, or after a rollback (docs/speculative.md section 3). A ring buffer that a
 * block could wrap would not be rollback-safe. Slot s holds absolute position first_pos+s. */
#ifndef LS_MODEL_KV_CACHE_H
#define LS_MODEL_KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/backend.h"

typedef struct {
    /* Backend whose memory k and v are (docs/cuda.md 3); NULL: plain host memory. */
    ls_backend *be;
    void *k;           /* [cap][row] f16 (uint16_t), or f32 when f32 */
    void *v;           /* [cap][row] same type as k */
    bool f32;          /* element type: float instead of f16 */
    int32_t cap;       /* slots */
    int32_t row;       /* n_kv * head_dim */
    int32_t window;    /* 0 = full attention */
    int32_t first_pos; /* absolute position of slot 0 */
    int32_t n;         /* filled slots: positions [first_pos, first_pos + n) */
} ls_kv_layer;

/* Bytes ls_kv_init_t / ls_kv_init_be will allocate for this geometry. */
uint64_t ls_kv_bytes_t(int32_t cap, int32_t row, bool f32);
/* An f16 cache (ls_kv_init_t: f16 or f32). */
int ls_kv_init(ls_kv_layer *c, int32_t cap, int32_t row, int32_t window);
int ls_kv_init_t(ls_kv_layer *c, int32_t cap, int32_t row, int32_t window, bool f32);
/* The same in backend memory: compaction then moves rows with be's copy op. */
int ls_kv_init_be(ls_kv_layer *c, ls_backend *be, int32_t cap, int32_t row, int32_t window, bool f32);
void ls_kv_free(ls_kv_layer *c);

/* Position just past the last stored key. */
static inline int32_t ls_kv_end(const ls_kv_layer *c) {
    return c->first_pos + c->n;
}

/* Make room to append m rows at positions [ls_kv_end, +m). Sliding layers compact; returns
 * -1 if it cannot fit (full layer past capacity, or m larger than the slack). */
int ls_kv_reserve(ls_kv_layer *c, int32_t m);
/* Pointers to the K / V row of absolute position pos (must be inside the stored range or
 * the reserved append range): uint16_t * (f16) or float * (f32), in the cache's memory
 * (backend memory when be is set: never dereferenced by model code). */
void *ls_kv_k(ls_kv_layer *c, int32_t pos);
void *ls_kv_v(ls_kv_layer *c, int32_t pos);
/* Mark positions up to end (exclusive) as filled after the rows were written. */
void ls_kv_commit(ls_kv_layer *c, int32_t end);
/* Whether ls_kv_truncate(c, pos) would succeed (checked for every layer before any is cut). */
bool ls_kv_can_truncate(const ls_kv_layer *c, int32_t pos);
/* Forget positions >= pos. Returns -1 (and changes nothing) if a row at pos would need keys
 * that compaction already dropped: pos - window + 1 before what a sliding layer holds. */
int ls_kv_truncate(ls_kv_layer *c, int32_t pos);

#endif
