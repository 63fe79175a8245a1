/* Collectives between the ranks of a tensor-parallel group (docs/design.md,
 * "Tensor parallelism").
 *
 * A group has n ranks; rank r runs on its own thread with its own backend instance, and
 * every rank calls each collective in the same order with the same sizes (the ranks run the
 * same op sequence on their shards). A call returns when this rank's result is in its
 * buffer (host) or queued on its backend's queue ahead of its next op (NCCL).
 *
 * all_reduce replaces buf [m][d] (the rank's backend memory) by the sum over ranks. Mode
 * LS_REDUCE_EXACT (the default) is an all-gather of the n partial buffers followed by a sum
 * of each element over ranks in rank order 0..n-1, starting from rank 0's value (not from
 * 0.0f: 0 + -0 would turn a negative zero positive): the order of the additions of one
 * element never depends on m, d or where the element lies in the message, so a row's bits
 * are the same whatever other rows travel with it, the batch-invariance contract of
 * docs/speculative.md section 1. Every rank computes the same sums, so the replicas stay
 * bit-identical. LS_REDUCE_PLAIN is the library's own all-reduce (ncclAllReduce; on the host
 * an emulation of a ring: the message cut into n chunks by size, chunk c summed starting
 * from rank c + 1), kept to measure what the exact form costs: with n >= 3 its order, and so
 * a row's bits, depend on the message size (with n = 2 every order is the same: a + b ==
 * b + a in IEEE arithmetic). */
#ifndef LS_KERNELS_COLLECTIVE_H
#define LS_KERNELS_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LS_REDUCE_EXACT = 0, LS_REDUCE_PLAIN = 1 } ls_reduce_mode;

enum { LS_MAX_RANKS = 8 };

typedef struct ls_collective ls_collective;
struct ls_collective {
    const char *name; /* "host" or "nccl" */
    int n_ranks;
    ls_reduce_mode mode;
    int64_t max_elems; /* most floats of one all_reduce (m * d) */
    void (*all_reduce)(ls_collective *c, int rank, float *buf, int64_t m, int64_t d);
    void (*free)(ls_collective *c);
};

/* Host ranks (CPU backend instances, whose buffers are host memory): threads meeting at a
 * barrier over one shared gather buffer [n][max_elems]. NULL when out of memory. */
ls_collective *ls_collective_host_create(int n_ranks, int64_t max_elems, ls_reduce_mode mode);

/* NCCL ranks over CUDA backend instances be[0..n-1] on devices 0..n-1 (one communicator per
 * rank, made with ncclCommInitAll in this process). NCCL is loaded at run time
 * (dlopen("libnccl.so.2")): a build needs no NCCL, and a machine without it gets a clear
 * error here. NULL with err on failure. Only in builds with LOCKSTEP_CUDA. */
ls_collective *ls_collective_nccl_create(int n_ranks, ls_backend **be, int64_t max_elems, ls_reduce_mode mode,
                                         char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
