/* Per-sequence state: KV cache, position, activation buffers sized at creation, and the
 * backend (with its thread pool). Nothing on the forward path allocates. */
#ifndef LS_MODEL_SESSION_H
#define LS_MODEL_SESSION_H

#include <stdint.h>

#include "decode/sampler.h"
#include "kernels/backend.h"
#include "lockstep.h"
#include "model/kv_cache.h"
#include "model/model.h"

/* Sub-op stages the exactness probe captures and compares, in execution order per layer
 * (the last two once per forward, after all layers). */
typedef enum {
    LS_STAGE_ATTENTION = 0, /* attention block output (after the output projection) */
    LS_STAGE_MLP,           /* MLP output (after the down projection) */
    LS_STAGE_LAYER_OUTPUT,  /* residual stream after the layer */
    LS_STAGE_FINAL_NORM,    /* output-normed hidden rows */
    LS_STAGE_LM_HEAD,       /* logits rows */
    LS_STAGE_COUNT
} ls_stage;
const char *ls_stage_name(ls_stage st);

/* Called with the rows of one stage: rows [n][width], row r at absolute position pos0 + r.
 * layer is -1 for the final-norm and lm-head stages. */
typedef void (*ls_capture_fn)(void *ud, int32_t layer, ls_stage st, const float *rows, int32_t n, int64_t width,
                              int32_t pos0);

/* Activation buffers for forwards of up to `cap` rows, in the memory of backend `be`
 * (never dereferenced by model code), plus the h_* host buffers of the host-side steps. A
 * session owns one for its own evals; a batcher owns a larger one for the shared steps of
 * many sessions. */
typedef struct {
    ls_backend *be;
    int32_t cap;        /* rows */
    float *x;           /* [cap][n_embd] residual stream */
    float *xn;          /* [cap][n_embd] normed input of a sub-block */
    float *tmp;         /* [cap][n_embd] sub-block output */
    float *q;           /* [cap][n_head * head_dim] */
    float *k;           /* [cap][n_head_kv * head_dim] */
    float *v;           /* [cap][n_head_kv * head_dim] */
    float *att;         /* [cap][n_head * head_dim] */
    float *gate;        /* [cap][n_ff] */
    float *up;          /* [cap][n_ff] */
    int32_t *positions; /* [cap] */
    int32_t *tokens;    /* [cap], followed by positions in the same buffer */
    /* Per-layer embeddings (PLE models): inputs and token part [cap][n_layer * ple_dim],
     * one layer's slice [cap][ple_dim]. */
    float *ple, *ple_tok, *ple_tmp;
    /* MoE (moe.c): router scores [cap][n_expert], the chosen experts' weights and ids
     * [cap][n_expert_used], gathered expert inputs / outputs and the per-row sums
     * [cap][n_embd], and the row list of one expert [cap]. */
    float *moe_scores, *moe_w, *moe_in, *moe_out, *moe_acc;
    int32_t *moe_src; /* one expert's rows */
    /* Host side: positions, router scores/choices/weights, one expert's row lists and
     * weights, and a probe capture buffer [cap][n_embd]. */
    int32_t *h_ids; /* host staging of tokens [cap] then positions [cap] */
    int32_t *h_moe_idx, *h_moe_src;
    float *h_moe_scores, *h_moe_w, *h_moe_wsel, *h_capture;
    /* Logits of a multi-segment step, copied out to each segment afterwards (one LM-head
     * matmul for every row of the step): [logit_cap][n_vocab]; 0 rows for a session's own. */
    float *logits;
    int32_t logit_cap;
    /* Tensor-parallel rank this workspace's forwards run as (model/tp.h); NULL = no TP. */
    const struct ls_tp_rank *tp;
} ls_workspace;

uint64_t ls_workspace_bytes(const ls_model *m, int32_t rows, int32_t logit_rows);
/* Widest matmul input of the model (what a backend's max_cols must cover). */
int64_t ls_model_max_cols(const ls_model *m);
int ls_workspace_init(ls_workspace *ws, ls_backend *be, const ls_model *m, int32_t rows, int32_t logit_rows);
void ls_workspace_free(ls_workspace *ws);

struct ls_batcher;

struct ls_session {
    ls_model *model;
    const ls_device_kind *kind; /* the device it runs on */
    ls_backend *be;
    int32_t n_ctx, n_batch, n_threads;
    int32_t pos; /* tokens in the cache */
    /* [n_layer]; a KV-shared layer (layers[i].kv_src != i) has an empty cache of its own
     * and reads kv[layers[i].kv_src]. Element type: kv[i].f32. */
    ls_kv_layer *kv;
    /* Final-normed hidden rows (the LM-head input, before the head and the softcap) of the
     * rows of the last eval that produced logits: [n_batch][n_embd] in backend memory,
     * n_hidden rows, row 0 at absolute position hidden_pos0. See ls_session_hidden. */
    float *hidden;
    int32_t n_hidden, hidden_pos0;
    ls_workspace ws; /* n_batch rows */
    /* When attached, evals run inside the batcher's shared forward steps (batcher.c). */
    struct ls_batcher *batcher;
    bool batch_idle;     /* guarded by the batcher's mutex: not expected back soon */
    double last_step_ms; /* wall time of the forward step that served the last eval */
    float *h_logits;     /* ls_session_logits_buffer: host rows, page-locked on a GPU */
    int32_t h_logits_rows;
    /* Scratch of the sampler that ls_generate chooses this session's tokens with (sized by
     * the vocabulary at creation: choosing a token allocates nothing). */
    ls_sampler sampler;
    /* Exactness-probe hooks (NULL / off in normal operation; never set on a request path). */
    ls_capture_fn capture;
    void *capture_ud;
    /* Test-only fault injection, set by the exactness probe on its block arm only (the
     * fault comes from ls_test_control LS_TESTCTL_FAULT_PROBE): when on, forwards of more
     * than one row perturb one element of the last row of `fault_stage` in layer
     * `fault_layer` (enough to reach the logits), so tests can check the probe names exactly
     * that layer and sub-op. */
    bool fault_on;
    int32_t fault_layer;
    ls_stage fault_stage;
    /* Tensor parallelism (model/tp.h): this session is a facade over the group's rank
     * sessions (it has no KV cache, workspace or backend of its own). NULL = no TP. */
    struct ls_tp_group *tp;
};

/* Most segments (sessions) in one forward step. */
enum { LS_MAX_SEGS = 64 };

/* One session's part of a forward step: n tokens at its positions pos..pos+n-1; logits for
 * rows [logits_from, n) into `logits` (NULL: none). */
typedef struct {
    ls_session *s;
    const int32_t *tokens;
    int32_t n, logits_from;
    float *logits;
} ls_fwd_seg;

/* ---- For the Gemma 4 assistant drafter (docs/speculative.md / docs/gemma.md 5.4) ----
 * Final-normed hidden row `row` of the last eval (or batcher step) of this session that
 * produced logits: row 0 is the first logits row (position hidden_pos0 = the position of
 * the token whose next-token logits it gave), up to ls_session_n_hidden rows. This is
 * exactly the vector multiplied by the tied embedding to give those logits (before the
 * final softcap). NULL if row is out of range. Overwritten by the next eval with logits;
 * ls_session_truncate does not clear it. Backend memory of the session's device. */
const float *ls_session_hidden(const ls_session *s, int32_t row);
int32_t ls_session_n_hidden(const ls_session *s);
/* The KV cache a drafter reads for layer type `sliding`: the LAST non-shared layer of that
 * type (docs/gemma.md 5.4). Returns the layer index (or -1 if the model has none) and its cache
 * in *kv: K after k_norm + RoPE, V after v_norm (Gemma 4), slot s = absolute position
 * kv->first_pos + s, kv->n filled slots, kv->row = n_kv * head_dim floats (kv->f32) or f16
 * values; heads and head dim in *n_kv / *head_dim, the window in kv->window (0 = full).
 * The cache holds every row evaluated so far (after a verify, rejected rows too until
 * ls_session_truncate). */
int32_t ls_session_kv_source(const ls_session *s, bool sliding, const ls_kv_layer **kv, int32_t *n_kv,
                             int32_t *head_dim);

/* Internal controls of the probe (capture of every stage's rows; the fault above). */
void ls_session_set_capture(ls_session *s, ls_capture_fn fn, void *ud);
void ls_session_set_fault(ls_session *s, bool on, int32_t layer, ls_stage stage);

/* Check a segment (row count, token ids, context) and make room in its KV caches.
 * Returns LS_OK or an error code with a message; a failed segment changes nothing the
 * session's next eval depends on. */
int ls_fwd_prepare(const ls_fwd_seg *g, int32_t max_rows, char *err, size_t errlen);
/* The forward pass (gemma_forward.c) over the segments of one step, rows concatenated in
 * `ws` (total rows <= ws->cap). Segments must be prepared. Every row's bits are those of a
 * forward of its segment alone (batch-invariant ops). More than one segment with logits
 * needs ws->logit_cap >= the total logit rows. */
void ls_gemma_forward(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg);
/* Former name (Gemma 3 only), kept for callers. */
void ls_gemma3_forward(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg);
/* The MoE block of layer `layer` (moe.c) over n rows: reads the residual ws->x, adds
 * post_norm_2(experts(...)) into out [n][n_embd]. Row-independent: each row's experts are
 * summed in ascending expert order whatever the batch. */
void ls_moe_forward(ls_backend *be, ls_workspace *ws, const ls_model *m, int layer, int32_t n, float *out);

/* Batcher internals used by session.c / generate.c. */
int ls_batcher_eval(struct ls_batcher *b, ls_fwd_seg *seg, char *err, size_t errlen);
void ls_batcher_idle(struct ls_batcher *b, ls_session *s);
/* Tests: hold the batcher before its next step (on) until released (off), so that evals
 * queued meanwhile share one step; and the number of queued evals. */
void ls_batcher_hold(struct ls_batcher *b, bool on);
int ls_batcher_n_queued(struct ls_batcher *b);

#endif
