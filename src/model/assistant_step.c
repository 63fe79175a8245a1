/* Gemma 4 assistant (MTP drafter): one drafter step and the drafting loop, on the scratch
 * bound to the step's backend. Loading is in assistant_load.c. See assistant.h and
 * docs/gemma.md 5.
 *
 * Sliding-window keys. docs/gemma.md 5.4 and mlx-vlm (masks.py: dist < window) let the draft
 * query at position P see the target's keys k in [P-W+1, P-1] (W-1 keys); the backend's
 * attention with strictly_before and window W gives exactly that range. transformers 5.x
 * (create_bidirectional_sliding_window_mask, |q - kv| <= W, then flipped) sees
 * k in [P-W-1, P-1] (W+1 keys) instead. The two agree while P < W and on full layers
 * (all k < P); we follow docs/gemma.md / mlx-vlm (tests/test_assistant.c checks both: mlx-vlm on
 * every round, transformers where they agree). */
#include "model/assistant_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "format/hf_config.h"
#include "format/safetensors.h"
#include "kernels/backend.h"
#include "kernels/host_buffer.h"

/* ---------------------------------------------------------------------------------------
 * Scratch: backend buffers, made for the backend of the first step (and remade if a later
 * step comes with another one)
 * ------------------------------------------------------------------------------------- */

void ls_asst_scratch_release(ls_assistant *a) {
    if (!a->be) return;
    void *bufs[] = {a->x,    a->h,      a->a,      a->t,     a->q,       a->att,  a->gate, a->up,   a->emb,
                    a->hcur, a->logits, a->cscore, a->crows, a->clogits, a->qpos, a->tok,  a->dcand};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) a->be->ops->release(a->be, bufs[i]);
    ls_host_buffer_free(a->h_io);
    a->h_io = NULL;
    a->x = a->h = a->a = a->t = a->q = a->att = a->gate = a->up = a->emb = a->hcur = a->logits = NULL;
    a->cscore = a->crows = a->clogits = NULL;
    a->qpos = a->tok = a->dcand = NULL;
    a->be = NULL;
}

static int scratch_bind(ls_assistant *a, ls_backend *be) {
    if (a->be == be) return 0;
    ls_asst_scratch_release(a);
    a->be = be;
    int64_t mx = a->hidden > a->bb ? a->hidden : a->bb, nc = (int64_t)a->top_k * a->per_cluster;
    bool fail = false;
#define SALLOC(ptr, n)                                                                                                 \
    do {                                                                                                               \
        if ((n) > 0 && !((ptr) = be->ops->alloc(be, sizeof(*(ptr)) * (size_t)(n)))) fail = true;                       \
    } while (0)
    SALLOC(a->x, 2 * (int64_t)a->bb);
    SALLOC(a->h, a->hidden);
    SALLOC(a->a, a->hidden);
    SALLOC(a->t, mx);
    SALLOC(a->q, a->max_qdim);
    SALLOC(a->att, a->max_qdim);
    SALLOC(a->gate, a->max_inter);
    SALLOC(a->up, a->max_inter);
    SALLOC(a->emb, a->bb);
    SALLOC(a->hcur, a->bb);
    SALLOC(a->logits, a->vocab);
    SALLOC(a->qpos, 1);
    SALLOC(a->tok, 1);
    if (a->centroid_head) {
        SALLOC(a->cscore, a->n_centroids);
        SALLOC(a->crows, nc * a->hidden);
        SALLOC(a->clogits, nc);
        SALLOC(a->dcand, nc);
    }
#undef SALLOC
    /* a draft token uploads its position and its token: from page-locked memory those small
     * copies skip the driver's staging (src/kernels/host_buffer.c) */
    if (!(a->h_io = ls_host_buffer_alloc(be, 2 * sizeof(int32_t)))) fail = true;
    if (fail) {
        ls_asst_scratch_release(a);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * One step
 * ------------------------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static int serr(ls_assistant *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof a->err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *ls_assistant_error(const ls_assistant *a) {
    return a->err;
}

void ls_assistant_override_window(ls_assistant *a, int32_t window) {
    a->window = window;
}

static int kv_check(ls_assistant *a, const ls_asst_kv *kv, bool sliding, int32_t hd, int32_t nkv, int32_t P) {
    const char *ty = sliding ? "sliding" : "full";
    if (!kv || !kv->k || !kv->v) return serr(a, "assistant step: no %s-attention K/V given", ty);
    if (kv->head_dim != hd || kv->n_kv != nkv)
        return serr(a, "assistant step: %s K/V has %d heads of %d (expected %d of %d)", ty, kv->n_kv, kv->head_dim, nkv,
                    hd);
    int32_t lo = 0, hi = P - 1;
    if (sliding && P - a->window + 1 > lo) lo = P - a->window + 1;
    if (hi >= lo && (kv->first_pos > lo || kv->first_pos + (int64_t)kv->n_slots <= hi))
        return serr(a, "assistant step: %s K/V holds positions [%d, %lld) but position %d needs [%d, %d]", ty,
                    kv->first_pos, (long long)kv->first_pos + kv->n_slots, P, lo, hi);
    return 0;
}

/* The sparse centroid head (docs/gemma.md 5.5): cluster scores on the backend, the top-k clusters'
 * candidate ids on the host, then the candidates' logits on the backend; the full row
 * (candidates, and a fill value below the smallest elsewhere) is built on the host. */
static void centroid_head(ls_assistant *a, ls_backend *be, const float *h, float *logits) {
    const ls_backend_ops *op = be->ops;
    op->matmul(be, &a->centroids, h, 1, a->cscore);
    op->download(be, a->h_cscore, a->cscore, sizeof(float) * (size_t)a->n_centroids);
    const float *cs = a->h_cscore;
    /* top-k clusters by score, highest first, lowest index on ties (NaN never wins) */
    for (int32_t k = 0; k < a->top_k; k++) {
        int32_t best = -1;
        for (int32_t c = 0; c < a->n_centroids; c++) {
            bool taken = false;
            for (int32_t j = 0; j < k && !taken; j++) taken = a->csel[j] == c;
            if (taken) continue;
            if (best < 0 || cs[c] > cs[best] || (isnan(cs[best]) && !isnan(cs[c]))) best = c;
        }
        a->csel[k] = best;
    }
    int32_t nc = a->top_k * a->per_cluster;
    for (int32_t k = 0; k < a->top_k; k++)
        memcpy(a->cand + (int64_t)k * a->per_cluster, a->ordering + (int64_t)a->csel[k] * a->per_cluster,
               sizeof(int32_t) * (size_t)a->per_cluster);
    /* candidate logits: gather the candidate rows (dequantized) and one f32 matmul over
     * them (a weight made at run time, in backend memory) */
    op->upload(be, a->dcand, a->cand, sizeof(int32_t) * (size_t)nc);
    op->get_rows(be, &a->embd, a->dcand, nc, a->crows);
    ls_weight cw = {.type = LS_TYPE_F32,
                    .data = a->crows,
                    .rows = nc,
                    .cols = a->hidden,
                    .row_bytes = (uint64_t)a->hidden * sizeof(float),
                    .in_backend = true};
    op->matmul(be, &cw, h, 1, a->clogits);
    op->download(be, a->h_clogits, a->clogits, sizeof(float) * (size_t)nc);
    float mn = INFINITY;
    for (int32_t i = 0; i < nc; i++)
        if (a->h_clogits[i] < mn) mn = a->h_clogits[i];
    float fill = mn - 1.0f;
    for (int32_t i = 0; i < a->vocab; i++) logits[i] = fill;
    for (int32_t i = 0; i < nc; i++) logits[a->cand[i]] = a->h_clogits[i];
}

int ls_assistant_step(ls_assistant *a, ls_backend *be, const float *tok_embd_scaled, const float *hprev, int32_t P,
                      const ls_asst_kv *kv_sliding, const ls_asst_kv *kv_full, float *logits, float *hnext) {
    const ls_backend_ops *op = be->ops;
    if (P < 0) return serr(a, "assistant step: negative position %d", P);
    if (a->hd_s && kv_check(a, kv_sliding, true, a->hd_s, a->kv_s, P)) return -1;
    if (a->hd_f && kv_check(a, kv_full, false, a->hd_f, a->kv_f, P)) return -1;
    if (scratch_bind(a, be) != 0) return serr(a, "assistant step: out of memory for its buffers on %s", op->name);
    int64_t H = a->hidden;
    op->copy(be, a->x, tok_embd_scaled, sizeof(float) * (size_t)a->bb);
    op->copy(be, a->x + a->bb, hprev, sizeof(float) * (size_t)a->bb);
    a->h_io[0] = P;
    op->upload(be, a->qpos, &a->h_io[0], sizeof P);
    op->matmul(be, &a->pre, a->x, 1, a->h);
    /* Fused ops (backend.h; the same bits as the sequences they replace): every residual add
     * carries the norm before it and the next norm after it, so a->a always holds the next
     * block's normed input, and after the last layer the output norm of h. */
    if (a->n_layers > 0) op->rmsnorm_to(be, a->a, a->h, a->layers[0].in_ln, 1, H, a->eps);
    for (int32_t l = 0; l < a->n_layers; l++) {
        const asst_layer *ly = &a->layers[l];
        const ls_asst_kv *kv = ly->sliding ? kv_sliding : kv_full;
        /* attention: q only; K/V are the target's; a->a = in_ln(h) */
        op->matmul(be, &ly->q, a->a, 1, a->q);
        /* q_norm and the target's rope op, so the query rotates exactly like the target's keys
         * (docs/gemma.md 3.4: pairs (j, j + hd/2), full layers proportional with the exponent over the
         * full dim) */
        op->norm_rope(be, a->q, ly->q_norm, 1, a->n_heads, ly->hd, a->eps, ly->n_rot_pairs, a->qpos, ly->theta,
                      ly->freq_scale);
        ls_attn_args args = {.q = a->q,
                             .out = a->att,
                             .k = kv->k,
                             .v = kv->v,
                             .kv_f32 = kv->f32,
                             .strictly_before = true,
                             .m = 1,
                             .n_head = a->n_heads,
                             .n_kv = kv->n_kv,
                             .hd = ly->hd,
                             .q_pos = a->qpos,
                             .first_pos = kv->first_pos,
                             .n_slots = kv->n_slots,
                             .window = ly->sliding ? a->window : 0,
                             .scale = 1.0f};
        op->attention(be, &args);
        op->matmul(be, &ly->o, a->att, 1, a->t);
        /* h += post_attn_ln(t); a->a = pre_ff_ln(h) */
        op->add_rmsnorm(be, a->h, a->t, ly->post_attn_ln, 1.0f, a->a, ly->pre_ff_ln, 1, H, a->eps);
        /* MLP */
        op->matmul(be, &ly->gate, a->a, 1, a->gate);
        op->matmul(be, &ly->up, a->a, 1, a->up);
        op->gelu_mul(be, a->gate, a->up, ly->inter);
        op->matmul(be, &ly->down, a->gate, 1, a->t);
        /* h = (h + post_ff_ln(t)) * scalar (a scalar of 1 multiplies exactly: backend.h); a->a =
         * the next layer's in_ln(h), or the output norm after the last layer */
        const float *w_next = l + 1 < a->n_layers ? a->layers[l + 1].in_ln : a->norm;
        op->add_rmsnorm(be, a->h, a->t, ly->post_ff_ln, ly->scalar, a->a, w_next, 1, H, a->eps);
    }
    /* hf: the output-normed hidden state, in a->a (written above unless there is no layer) */
    float *hf = a->a;
    if (a->n_layers == 0) op->rmsnorm_to(be, hf, a->h, a->norm, 1, H, a->eps);
    if (hnext) op->matmul(be, &a->post, hf, 1, hnext);
    if (logits) {
        if (a->centroid_head) {
            centroid_head(a, be, hf, logits);
        } else {
            op->matmul(be, &a->embd, hf, 1, a->logits); /* tied dense head, no softcap */
            op->download(be, logits, a->logits, sizeof(float) * (size_t)a->vocab);
        }
    }
    op->sync(be);
    return 0;
}

int ls_assistant_draft(ls_assistant *a, ls_backend *be, const ls_asst_embd *embd, int32_t bonus, const float *hprev,
                       int32_t P, const ls_asst_kv *kv_sliding, const ls_asst_kv *kv_full, int32_t k,
                       ls_asst_choose_fn choose, void *ud, float *logits, int32_t *out) {
    if (!embd || !embd->table || embd->table->cols != a->bb || embd->table->rows < a->vocab)
        return serr(a, "assistant draft: target embedding table must be [>= %d, %d]", a->vocab, a->bb);
    if (k < 0) return serr(a, "assistant draft: negative draft count %d", k);
    if (scratch_bind(a, be) != 0) return serr(a, "assistant draft: out of memory for its buffers on %s", be->ops->name);
    const ls_backend_ops *op = be->ops;
    op->copy(be, a->hcur, hprev, sizeof(float) * (size_t)a->bb);
    int32_t tok = bonus, cnt = 0;
    while (cnt < k) {
        if (tok < 0 || tok >= embd->table->rows)
            return serr(a, "assistant draft: token %d outside the target vocabulary", tok);
        a->h_io[1] = tok;
        op->upload(be, a->tok, &a->h_io[1], sizeof tok);
        op->get_rows(be, embd->table, a->tok, 1, a->emb);
        op->scale(be, a->emb, embd->scale, a->bb);
        /* hprev is consumed at the start of the step, so hnext may land in hcur itself */
        if (ls_assistant_step(a, be, a->emb, a->hcur, P, kv_sliding, kv_full, logits, a->hcur) != 0) return -1;
        tok = choose(ud, cnt, logits, a->hcur);
        if (tok < 0) break;
        out[cnt++] = tok;
    }
    return cnt;
}
