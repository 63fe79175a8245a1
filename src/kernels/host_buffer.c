/* Host buffers for what the backends download every step (logits rows of the target, of a
 * draft model, of the assistant). Why: on a GPU a copy into pageable memory goes through the
 * driver's staging buffer; into page-locked memory it runs at the bus's rate (H200: a
 * 262,144-entry f32 logits row in 27 us against 142 us, four rows in 83 against 440,
 * docs/cuda.md 3), and a verify block downloads K rows every round. A 64-byte header in
 * front of the buffer records how to free it, so the free needs no backend. */
#include "kernels/host_buffer.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    void (*host_free)(void *p); /* NULL: the buffer came from aligned_alloc */
    void *base;
} host_header;

enum { HEADER_BYTES = 64 };
_Static_assert(sizeof(host_header) <= HEADER_BYTES, "the header fits in front of the buffer");

void *ls_host_buffer_alloc(ls_backend *be, size_t bytes) {
    if (bytes == 0 || bytes > SIZE_MAX - 2 * HEADER_BYTES) return NULL;
    size_t total = (HEADER_BYTES + bytes + 63) / 64 * 64;
    void *base = NULL;
    void (*release)(void *) = NULL;
    if (be && be->ops->host_alloc && be->ops->host_free) {
        base = be->ops->host_alloc(be, total);
        release = base ? be->ops->host_free : NULL;
    }
    /* no page-locked memory (or none left: a limit on locked pages): plain memory still works */
    if (!base) base = aligned_alloc(64, total);
    if (!base) return NULL;
    host_header *h = base;
    h->host_free = release;
    h->base = base;
    return (char *)base + HEADER_BYTES;
}

void ls_host_buffer_free(void *p) {
    if (!p) return;
    host_header *h = (host_header *)((char *)p - HEADER_BYTES);
    if (h->host_free)
        h->host_free(h->base);
    else
        free(h->base);
}
