/* Tensor parallelism (docs/design.md, "Tensor parallelism"): one model over N ranks
 * of one process, each rank a thread with its own backend instance, its own shard of the
 * weights and its own shard of the KV cache, meeting only in the exact all-reduce of
 * kernels/collective.h.
 *
 * A tensor-parallel session (ls_session.tp != NULL) is a facade: its evals run the same
 * forward (gemma_forward.c) on every rank at once, over the rank's shard model (heads, KV
 * heads and MLP columns split, Megatron style), and the rank's ls_tp_rank in its workspace
 * tells the forward where to all-reduce and which vocabulary rows its LM head computes. */
#ifndef LS_MODEL_TP_H
#define LS_MODEL_TP_H

#include <stdint.h>

#include "core/threads.h"
#include "kernels/collective.h"
#include "model/model.h"

struct ls_session;

/* What one rank's forward needs beyond its shard model (ls_workspace.tp). */
typedef struct ls_tp_rank {
    ls_collective *coll;
    int rank, n_ranks;
    ls_weight head; /* rows [v0, v0 + nv) of the tied embedding: this rank's LM head */
    int64_t v0, nv; /* the vocabulary slice */
    float *logits;  /* [logit_cap][nv] in the rank's backend memory */
    int32_t logit_cap;
    bool own_logits; /* allocated here (else the rank workspace's logits buffer, big enough) */
} ls_tp_rank;

/* A shard of a model for rank r of n: a shallow copy sharing everything with the parent
 * except the layers (sliced weights) and the geometry; row-parallel slices (wo, w_down
 * columns) are repacked into host copies it owns, mapped for `kind`. */
typedef struct {
    ls_model m;
    void **owned; /* repacked weight bytes */
    size_t *owned_bytes;
    int n_owned;
    const ls_device_kind *kind;
} ls_tp_shard;

/* 0 when model m can be split over n ranks, else -1 with the reason (MoE, PLE, heads or
 * widths that do not divide, quantization blocks a slice would cut). */
int ls_tp_check(const ls_model *m, int n, char *err, size_t errlen);
/* Builds shard r of n (ls_tp_check passed). 0, or -1 when out of memory. */
int ls_tp_shard_init(ls_tp_shard *sh, const ls_model *m, const ls_device_kind *kind, int r, int n, char *err,
                     size_t errlen);
void ls_tp_shard_free(ls_tp_shard *sh);

/* The group behind a tensor-parallel session. */
typedef struct ls_tp_group {
    int n;
    ls_collective *coll;
    ls_pool *pool; /* n threads: one per rank */
    ls_tp_shard shard[LS_MAX_RANKS];
    struct ls_session *rank_s[LS_MAX_RANKS];
    ls_tp_rank rank[LS_MAX_RANKS];
} ls_tp_group;

/* Session parameters p with p->tensor_parallel >= 1: a facade session over n rank sessions
 * (session.c calls it). LS_OK or an error code with err. */
int ls_tp_session_create(ls_model *m, const ls_session_params *p, const ls_device_kind *kind, struct ls_session **out,
                         char *err, size_t errlen);
void ls_tp_group_free(ls_tp_group *g);
/* The facade's eval / truncate (session.c dispatches here). */
int ls_tp_eval(struct ls_session *s, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
               size_t errlen);
int ls_tp_truncate(struct ls_session *s, int32_t pos);

#endif
