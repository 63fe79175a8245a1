/* The host collective (kernels/collective.h): ranks are threads of one process whose
 * backends keep their buffers in host memory (the CPU backend), so the all-gather is a copy
 * into a shared buffer and the sum is done by every rank over that buffer. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/collective.h"

typedef struct {
    ls_collective base;
    pthread_barrier_t bar;
    float *gather; /* [n_ranks][count] of the current call, count <= max_elems */
} host_coll;

/* Element i of the n partials: rank-order sum, starting from rank 0's value. */
static void sum_exact(float *out, const float *g, int n, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float acc = g[i];
        for (int r = 1; r < n; r++) acc += g[(int64_t)r * count + i];
        out[i] = acc;
    }
}

/* A ring all-reduce's order (for cost comparison only): the message is cut into n chunks by
 * size and chunk c is summed starting from rank c + 1, so which order an element gets
 * depends on its index in the message, i.e. on m. */
static void sum_ring(float *out, const float *g, int n, int64_t count) {
    int64_t chunk = (count + n - 1) / n;
    for (int64_t i = 0; i < count; i++) {
        int c = (int)(i / chunk), r0 = (c + 1) % n;
        float acc = g[(int64_t)r0 * count + i];
        for (int k = 1; k < n; k++) acc += g[(int64_t)((r0 + k) % n) * count + i];
        out[i] = acc;
    }
}

static void host_all_reduce(ls_collective *base, int rank, float *buf, int64_t m, int64_t d) {
    host_coll *h = (host_coll *)base;
    int n = base->n_ranks;
    int64_t count = m * d;
    LS_ASSERT(rank >= 0 && rank < n && count >= 0 && count <= base->max_elems);
    if (n == 1 && base->mode == LS_REDUCE_EXACT) return; /* the sum of one partial is itself */
    memcpy(h->gather + (int64_t)rank * count, buf, sizeof(float) * (size_t)count);
    pthread_barrier_wait(&h->bar); /* every partial is in */
    if (base->mode == LS_REDUCE_EXACT)
        sum_exact(buf, h->gather, n, count);
    else
        sum_ring(buf, h->gather, n, count);
    pthread_barrier_wait(&h->bar); /* nobody overwrites a partial another rank still reads */
}

static void host_free(ls_collective *base) {
    host_coll *h = (host_coll *)base;
    if (!h) return;
    pthread_barrier_destroy(&h->bar);
    free(h->gather);
    free(h);
}

ls_collective *ls_collective_host_create(int n_ranks, int64_t max_elems, ls_reduce_mode mode) {
    if (n_ranks < 1 || n_ranks > LS_MAX_RANKS || max_elems < 1) return NULL;
    host_coll *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->gather = malloc(sizeof(float) * (size_t)n_ranks * (size_t)max_elems);
    if (!h->gather || pthread_barrier_init(&h->bar, NULL, (unsigned)n_ranks) != 0) {
        free(h->gather);
        free(h);
        return NULL;
    }
    h->base = (ls_collective){.name = "host",
                              .n_ranks = n_ranks,
                              .mode = mode,
                              .max_elems = max_elems,
                              .all_reduce = host_all_reduce,
                              .free = host_free};
    return &h->base;
}
