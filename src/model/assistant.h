/* The Gemma 4 assistant (multi-token-prediction drafter, docs/gemma.md 5).
 *
 * A small Gemma 4 text stack whose layers are all KV-shared with the TARGET: it has no KV
 * cache of its own and reads the K/V of the target's last non-shared sliding and full
 * layers. One step maps (token embedding from the target's table, recurrent vector hprev
 * [backbone]) at the fixed position P (the bonus token's) to draft logits and the next
 * recurrent vector hnext (docs/gemma.md 5.3):
 *
 *   x = concat(E_target[tok] * s_emb_target, hprev); h = pre_projection @ x
 *   per layer: sandwich-normed attention (q only; q_norm; RoPE at P; scale 1.0; GQA over the
 *              target's keys k < P, sliding layers k in [P-W+1, P-1]) and MLP, * layer_scalar
 *   h = norm(h); logits = h @ E_draft^T (dense tied) or the centroid head (5.5), no softcap
 *   hnext = post_projection @ h
 *
 * Weights: bf16 / f16 / f32, or MLX affine-quantized (iff <name>.scales exists). Every op is
 * a single-row backend op, so a step's bits depend only on its inputs. */
#ifndef LS_MODEL_ASSISTANT_H
#define LS_MODEL_ASSISTANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

typedef struct ls_assistant ls_assistant;

/* What the assistant needs to know about the target it drafts for. */
typedef struct {
    int32_t hidden;                          /* target hidden size (= assistant backbone_hidden_size) */
    int32_t vocab;                           /* target vocabulary */
    int32_t head_dim_sliding, head_dim_full; /* target head dims per layer type */
    int32_t kv_heads_sliding, kv_heads_full; /* target KV heads of the shared layers, per type */
    int32_t sliding_window;                  /* target sliding window */
} ls_asst_target_geom;

/* One target layer's K/V, chronological: slot s holds absolute position first_pos + s, each
 * slot n_kv * head_dim elements (head-major), f16 or (f32 = true) f32. K after k_norm + RoPE,
 * V after the value norm, exactly as the target's attention reads them. */
typedef struct {
    const void *k, *v;
    bool f32;
    int32_t n_kv, head_dim, first_pos, n_slots;
} ls_asst_kv;

/* The target's token embedding: row tok of `table` times `scale` (the target's embedding
 * scale, docs/gemma.md 3.1). */
typedef struct {
    const ls_weight *table;
    float scale;
} ls_asst_embd;

typedef struct {
    int32_t hidden, backbone, vocab, n_layers, n_heads;
    int32_t head_dim_sliding, head_dim_full, kv_heads_sliding, kv_heads_full;
    int32_t sliding_window, intermediate;
    bool centroid_head;
    int32_t n_centroids, centroid_top_k;
    bool quantized; /* any MLX affine weight */
} ls_assistant_info;

/* Load a gemma4_assistant checkpoint directory (config.json + model.safetensors or shards).
 * Every tensor's presence, dtype and shape is checked against the config; errors name the
 * tensor or field. Returns 0, or -1 with a message in err. */
int ls_assistant_load(const char *dir, ls_assistant **out, char *err, size_t errlen);
/* Its scratch buffers live in the memory of the backend of the last step: free the
 * assistant before that backend. */
void ls_assistant_free(ls_assistant *a);
void ls_assistant_get_info(const ls_assistant *a, ls_assistant_info *info);

/* 0 if the assistant can draft for a target of geometry t; else -1 with a message naming the
 * first mismatch (backbone vs target hidden, vocab, head dims / KV heads per layer type,
 * sliding window; a layer type the target lacks). */
int ls_assistant_check_target(const ls_assistant *a, const ls_asst_target_geom *t, char *err, size_t errlen);

/* Bounds for a backend that runs steps: widest matmul input (max_cols) and longest
 * attention reduction for contexts of n_ctx positions. */
int64_t ls_assistant_max_cols(const ls_assistant *a);

/* One drafter step at position P (docs/gemma.md 5.3). tok_embd_scaled: [backbone] target embedding
 * of the input token, already scaled; hprev: [backbone]; both, hnext and the K/V are
 * memory of backend be, logits a host buffer. kv_sliding / kv_full: the target's
 * shared caches (kv_sliding may be NULL when the assistant has no sliding layer, likewise
 * kv_full); they must hold every position the query may see ([P-W+1, P-1] for sliding
 * layers, [0, P-1] for full ones). Outputs logits [vocab] (NULL: skipped) and hnext
 * [backbone] (NULL: skipped). Returns 0, or -1 (bad arguments; ls_assistant_error says why).
 * Not thread-safe on one assistant (it owns the scratch buffers). */
int ls_assistant_step(ls_assistant *a, ls_backend *be, const float *tok_embd_scaled, const float *hprev, int32_t P,
                      const ls_asst_kv *kv_sliding, const ls_asst_kv *kv_full, float *logits, float *hnext);

/* Chooses the draft after a step: logits [vocab] host memory, hnext [backbone] memory of the
 * step's backend, step 0 for the first draft. Returns the token (fed to the next step), or
 * < 0 to stop drafting. */
typedef int32_t (*ls_asst_choose_fn)(void *ud, int32_t step, const float *logits, const float *hnext);

/* The drafting loop (docs/gemma.md 5.6 step 2), the one the assistant drafter runs: step 1 feeds
 * (bonus, hprev), step j > 1 feeds (d_{j-1}, hnext of step j-1), all at position P, and
 * d_j = choose(ud, j - 1, logits of step j, hnext of step j). hprev: [backbone] memory of
 * backend be (the target's final-normed hidden row at P-1); logits: a host buffer of [vocab]
 * floats each step writes. Writes the drafts to out and returns their count (< k when choose
 * stops), or -1 (ls_assistant_error says why). */
int ls_assistant_draft(ls_assistant *a, ls_backend *be, const ls_asst_embd *embd, int32_t bonus, const float *hprev,
                       int32_t P, const ls_asst_kv *kv_sliding, const ls_asst_kv *kv_full, int32_t k,
                       ls_asst_choose_fn choose, void *ud, float *logits, int32_t *out);

/* Tests only: replace the sliding window the drafter's sliding layers use. With W + 2 the
 * visible keys become [P-W-1, P-1], which reproduces transformers 5.x's drafter (see the
 * comment at the top of assistant_step.c); never used by the engine. */
void ls_assistant_override_window(ls_assistant *a, int32_t window);

/* Every constant host range of the assistant (mapped safetensors files, f32 norm vectors),
 * for ls_device_kind.map_const. */
int ls_assistant_for_each_range(const ls_assistant *a, int (*fn)(void *ud, const void *base, size_t bytes), void *ud);

/* Message of the last failed step / draft. */
const char *ls_assistant_error(const ls_assistant *a);

#endif
