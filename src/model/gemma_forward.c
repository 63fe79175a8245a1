/* Gemma 3 / Gemma 4 text forward pass over a block of rows (prefill chunk, decode step or
 * verify block), per docs/gemma.md 3: embedding * embd_scale (+ PLE inputs),
 * then per layer
 *   x += post_attn_norm(attn(attn_norm(x)))     q/k RMS-normed per head (v too on Gemma 4),
 *                                               NeoX RoPE with per-layer rotated pairs
 *   x += post_ffw_norm(mlp(ffn_norm(x)) [+ MoE]) gelu_tanh MLP; Gemma 4 MoE next to it
 *   x += post_ple_norm(proj(gelu(gate x) * ple))  (PLE models)
 *   x *= layer_scalar                            (Gemma 4)
 * then the output norm, the tied LM head and the optional final softcap. Gemma 3 is the
 * special case with no value norm, scalar, PLE, MoE or softcap (its 1 + w norms are
 * folded in at load). KV-shared layers compute only Q and attend over their source
 * layer's cache, which already holds this step's rows (the source comes earlier).
 *
 * Every op is row-independent (backend.h), so row r's bits do not depend on n, nor on the
 * other segments of a step: the rows of several sessions run through every matmul
 * together (one read of the weights for all of them), and only KV writes and attention
 * are done per segment, against that segment's own cache.
 *
 * Everything is a backend op over backend memory (docs/cuda.md 3): this file never reads
 * an activation, a cache row or a logit; it uploads token ids and positions, and downloads
 * only the logits rows asked for and (for the probe) captured stages. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/f16.h"
#include "core/log.h"
#include "model/session.h"
#include "model/tp.h"

/* Tensor parallelism (model/tp.h): after a row-parallel projection (wo, w_down) each rank
 * holds a partial sum of the [n][d] rows; the exact all-reduce makes them the whole sum, the
 * same bits on every rank whatever n (kernels/collective.h). No-op without TP. */
static void tp_reduce(ls_workspace *ws, float *rows, int32_t n, int64_t d) {
    if (ws->tp) ws->tp->coll->all_reduce(ws->tp->coll, ws->tp->rank, rows, n, d);
}

/* Rows pos0..pos0+n-1 are consecutive slots of the chronological cache (K and V in one op). */
static void store_kv(ls_backend *be, ls_kv_layer *c, const float *k, const float *v, int32_t pos0, int32_t n) {
    be->ops->kv_store2(be, ls_kv_k(c, pos0), ls_kv_v(c, pos0), c->f32, k, v, (int64_t)n * c->row);
}

const char *ls_stage_name(ls_stage st) {
    static const char *names[] = {"attention", "mlp", "layer-output", "final-norm", "lm-head"};
    return st < LS_STAGE_COUNT ? names[st] : "?";
}

/* Probe hook: fault injection (blocks only) then capture. The fault changes one element of
 * the block's last row by at least 1 and at least its own magnitude: a one-ulp flip would
 * be absorbed downstream (int8 activation quantization, f16 KV, the next RMSNorm), the
 * logits would not change and the probe would never see it. */
static void stage_done_seg(ls_backend *be, ls_workspace *ws, ls_session *s, int32_t layer, ls_stage st, float *rows,
                           bool rows_on_host, int32_t n, int64_t width, int32_t pos0) {
    bool host = rows_on_host || be->ops->host_memory;
    if (s->fault_on && n > 1 && layer == s->fault_layer && st == s->fault_stage) {
        float *x = rows + (int64_t)(n - 1) * width, v; /* first element of the block's last row */
        if (host) {
            x[0] += 1.0f + fabsf(x[0]);
        } else {
            be->ops->download(be, &v, x, sizeof v);
            v += 1.0f + fabsf(v);
            be->ops->upload(be, x, &v, sizeof v);
        }
    }
    if (!s->capture) return;
    if (host) {
        s->capture(s->capture_ud, layer, st, rows, n, width, pos0);
        return;
    }
    /* one row at a time through the [cap][n_embd] host buffer */
    LS_ASSERT(width <= s->model->cfg.n_embd);
    be->ops->download(be, ws->h_capture, rows, sizeof(float) * (size_t)(n * width));
    s->capture(s->capture_ud, layer, st, ws->h_capture, n, width, pos0);
}

/* The probe hooks, per segment: rows of segment j start at row off[j] of `rows`. Only
 * sessions with a hook set pay for the loop's checks. */
static void stage_done(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg, const int32_t *off, int32_t layer,
                       ls_stage st, float *rows, int64_t width) {
    for (int j = 0; j < nseg; j++) {
        ls_session *s = segs[j].s;
        if (s->fault_on || s->capture)
            stage_done_seg(be, ws, s, layer, st, rows + (int64_t)off[j] * width, false, segs[j].n, width, s->pos);
    }
}

int ls_fwd_prepare(const ls_fwd_seg *g, int32_t max_rows, char *err, size_t errlen) {
    ls_session *s = g->s;
    const ls_model *m = s->model;
    const ls_config *cfg = &m->cfg;
    int32_t n = g->n;
    if (n <= 0 || n > s->n_batch || n > max_rows) {
        snprintf(err, errlen, "eval: %d rows (must be 1..%d)", n, s->n_batch < max_rows ? s->n_batch : max_rows);
        return LS_ERR_ARG;
    }
    if (s->pos + n > s->n_ctx) {
        snprintf(err, errlen, "context full: %d + %d tokens exceed the context length %d", s->pos, n, s->n_ctx);
        return LS_ERR_CONTEXT;
    }
    for (int32_t r = 0; r < n; r++) {
        if (g->tokens[r] < 0 || g->tokens[r] >= cfg->n_vocab) {
            snprintf(err, errlen, "eval: token id %d out of range [0, %d)", g->tokens[r], cfg->n_vocab);
            return LS_ERR_ARG;
        }
    }
    for (int i = 0; i < cfg->n_layer; i++) {
        if (m->layers[i].kv_src != i) continue; /* shared: no cache of its own */
        if (ls_kv_reserve(&s->kv[i], n) != 0) {
            snprintf(err, errlen, "eval: KV cache of layer %d cannot take %d rows", i, n);
            return LS_ERR_CONTEXT;
        }
    }
    return LS_OK;
}

static void attention_block(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg, const int32_t *off, int32_t n,
                            int layer) {
    const ls_model *m = segs[0].s->model;
    const ls_config *cfg = &m->cfg;
    const ls_layer *l = &m->layers[layer];
    const ls_backend_ops *op = be->ops;
    int32_t hd = l->head_dim, nh = cfg->n_head, nkv = l->n_kv;
    int64_t qd = (int64_t)nh * hd, kvd = (int64_t)nkv * hd;
    bool own_kv = l->kv_src == layer;

    /* the projections first, back to back on one input (a device backend may run them as one
     * launch); then per-head norm and RoPE of q and k, one fused op each (backend.h norm_rope) */
    {
        const ls_weight *w[3] = {&l->wq, &l->wk, &l->wv};
        float *y[3] = {ws->q, ws->k, ws->v};
        ls_backend_matmul_n(be, own_kv ? (l->k_eq_v ? 2 : 3) : 1, w, ws->xn, n, y);
    }
    /* k_eq_v: V is the raw K projection (before k_norm and RoPE). Copied first, so that the q
     * and k norm_rope, the value norm and the cache store follow each other with nothing in
     * between: a device backend may run those four as one launch (backend.h). */
    if (own_kv && l->k_eq_v) op->copy(be, ws->v, ws->k, sizeof(float) * (size_t)(n * kvd));
    op->norm_rope(be, ws->q, l->q_norm, n, nh, hd, cfg->eps, l->rope_pairs, ws->positions, l->rope_base,
                  l->rope_freq_scale);
    if (own_kv) {
        op->norm_rope(be, ws->k, l->k_norm, n, nkv, hd, cfg->eps, l->rope_pairs, ws->positions, l->rope_base,
                      l->rope_freq_scale);
        if (l->v_norm) op->rmsnorm(be, ws->v, NULL, (int64_t)n * nkv, hd, cfg->eps);
    }
    for (int j = 0; j < nseg; j++) {
        ls_session *s = segs[j].s;
        ls_kv_layer *c = &s->kv[l->kv_src];
        if (own_kv) {
            store_kv(be, c, ws->k + off[j] * kvd, ws->v + off[j] * kvd, s->pos, segs[j].n);
            ls_kv_commit(c, s->pos + segs[j].n);
        }
        ls_attn_args a = {
            .q = ws->q + off[j] * qd,
            .out = ws->att + off[j] * qd,
            .k = c->k,
            .v = c->v,
            .kv_f32 = c->f32,
            .m = segs[j].n,
            .n_head = nh,
            .n_kv = nkv,
            .hd = hd,
            .q_pos = ws->positions + off[j],
            .first_pos = c->first_pos,
            .n_slots = c->n,
            .window = l->sliding ? cfg->sliding_window : 0,
            .scale = cfg->attn_scale,
        };
        op->attention(be, &a);
    }
    op->matmul(be, &l->wo, ws->att, n, ws->tmp);
    tp_reduce(ws, ws->tmp, n, cfg->n_embd);
}

/* PLE inputs of every row (docs/gemma.md 3.1), from the scaled embeddings in ws->x:
 * ple = (RMSNorm_w(W_plmp h0 * H^-0.5) per layer + E_ple[token] * sqrt(P)) * 2^-0.5. */
static void ple_inputs(ls_backend *be, ls_workspace *ws, const ls_model *m, int32_t n) {
    const ls_config *cfg = &m->cfg;
    const ls_backend_ops *op = be->ops;
    int64_t lp = (int64_t)cfg->n_layer * cfg->ple_dim;
    float proj_scale = 1.0f / sqrtf((float)cfg->n_embd), tok_scale = sqrtf((float)cfg->ple_dim);
    float mix = (float)(1.0 / sqrt(2.0));
    op->matmul(be, &m->ple_model_proj, ws->x, n, ws->ple);
    op->scale(be, ws->ple, proj_scale, n * lp);
    op->rmsnorm(be, ws->ple, m->ple_proj_norm, (int64_t)n * cfg->n_layer, cfg->ple_dim, cfg->eps);
    op->get_rows(be, &m->ple_embd, ws->tokens, n, ws->ple_tok);
    op->axpby(be, ws->ple, ws->ple_tok, tok_scale, mix, n * lp);
}

/* PLE block of one layer: x += post_norm(proj(gelu_tanh(gate x) * ple[layer])), then
 * x *= s and, with xn, xn = rmsnorm_{w_next}(x): the end of the layer (see the layer loop). */
static void ple_block(ls_backend *be, ls_workspace *ws, const ls_model *m, int layer, int32_t n, float s, float *xn,
                      const float *w_next) {
    const ls_config *cfg = &m->cfg;
    const ls_layer *l = &m->layers[layer];
    const ls_backend_ops *op = be->ops;
    int64_t p = cfg->ple_dim, lp = (int64_t)cfg->n_layer * p, d = cfg->n_embd;
    op->matmul(be, &l->ple_gate, ws->x, n, ws->gate);
    op->copy_rows(be, ws->ple_tmp, p, ws->ple + layer * p, lp, p, n);
    op->gelu_mul(be, ws->gate, ws->ple_tmp, (int64_t)n * p);
    op->matmul(be, &l->ple_proj, ws->gate, n, ws->tmp);
    op->add_rmsnorm(be, ws->x, ws->tmp, l->ple_post_norm, s, xn, w_next, n, d, cfg->eps);
}

/* Final norm and the tied LM head over the rows that want logits, gathered so one matmul
 * serves every segment. The normed rows are kept per session (ls_session_hidden). On a
 * host-memory backend a single segment's head writes straight into its logits buffer;
 * otherwise the rows are computed in ws->logits and downloaded (after step_end).
 * normed_in_xn: the last layer's add_rmsnorm already wrote the final norm of every row into
 * ws->xn (the same bits as norming ws->x here); the rows wanted move down to the front of
 * ws->xn (copy is a memmove, and a segment's rows never lie below where they go). */
static int32_t lm_head_rows(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg, const int32_t *off,
                            bool normed_in_xn) {
    const ls_model *m = segs[0].s->model;
    const ls_config *cfg = &m->cfg;
    const ls_backend_ops *op = be->ops;
    int64_t d = cfg->n_embd;
    int32_t nl = 0;
    for (int j = 0; j < nseg; j++) {
        ls_fwd_seg *g = &segs[j];
        if (!g->logits || g->logits_from >= g->n) continue;
        int32_t from = g->logits_from < 0 ? 0 : g->logits_from, rows = g->n - from;
        float *h = (normed_in_xn ? ws->xn : ws->x) + (int64_t)(off[j] + from) * d;
        if (!normed_in_xn) op->rmsnorm(be, h, m->output_norm, rows, d, cfg->eps);
        if (g->s->fault_on || g->s->capture)
            stage_done_seg(be, ws, g->s, -1, LS_STAGE_FINAL_NORM, h, false, rows, d, g->s->pos + from);
        if (g->s->hidden) {
            op->copy(be, g->s->hidden, h, sizeof(float) * (size_t)(rows * d));
            g->s->n_hidden = rows;
            g->s->hidden_pos0 = g->s->pos + from;
        }
        if (ws->xn + (int64_t)nl * d != h)
            op->copy(be, ws->xn + (int64_t)nl * d, h, sizeof(float) * (size_t)(rows * d));
        nl += rows;
    }
    return nl;
}

/* The head matmul itself; returns the segment written directly (host memory), or -1. */
static int lm_head_matmul(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg, int32_t nl) {
    const ls_model *m = segs[0].s->model;
    const ls_config *cfg = &m->cfg;
    const ls_backend_ops *op = be->ops;
    int64_t nv = cfg->n_vocab;
    int with = 0, only = 0;
    if (ws->tp) { /* this rank's vocabulary slice, into its own buffer (lm_head_out gathers) */
        LS_ASSERT(nl <= ws->tp->logit_cap);
        op->matmul(be, &ws->tp->head, ws->xn, nl, ws->tp->logits);
        if (cfg->final_softcap > 0) op->softcap(be, ws->tp->logits, cfg->final_softcap, (int64_t)nl * ws->tp->nv);
        return -1;
    }
    for (int j = 0; j < nseg; j++)
        if (segs[j].logits && segs[j].logits_from < segs[j].n) with++, only = j;
    if (with == 1 && op->host_memory) {
        float *out = segs[only].logits;
        op->matmul(be, &m->tok_embd, ws->xn, nl, out);
        if (cfg->final_softcap > 0) op->softcap(be, out, cfg->final_softcap, (int64_t)nl * nv);
        return only;
    }
    LS_ASSERT(nl <= ws->logit_cap);
    op->matmul(be, &m->tok_embd, ws->xn, nl, ws->logits);
    if (cfg->final_softcap > 0) op->softcap(be, ws->logits, cfg->final_softcap, (int64_t)nl * nv);
    return -1;
}

/* Tensor parallelism: this rank's columns [v0, v0 + nv) of each logits row (one download when
 * the slice is the whole row). The probe's lm-head hooks run on the gathered rows
 * (tp_session.c). */
static void lm_head_out_tp(ls_backend *be, const ls_tp_rank *tp, ls_fwd_seg *segs, int nseg) {
    int64_t V = segs[0].s->model->cfg.n_vocab;
    int32_t at = 0;
    for (int j = 0; j < nseg; j++) {
        ls_fwd_seg *g = &segs[j];
        if (!g->logits || g->logits_from >= g->n) continue;
        int32_t from = g->logits_from < 0 ? 0 : g->logits_from, rows = g->n - from;
        if (tp->nv == V)
            be->ops->download(be, g->logits, tp->logits + (int64_t)at * V, sizeof(float) * (size_t)(rows * V));
        else
            for (int32_t r = 0; r < rows; r++)
                be->ops->download(be, g->logits + r * V + tp->v0, tp->logits + (int64_t)(at + r) * tp->nv,
                                  sizeof(float) * (size_t)tp->nv);
        at += rows;
    }
}

/* Copy each segment's logits rows out (unless written directly) and run the probe hooks. */
static void lm_head_out(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg, int direct) {
    int64_t nv = segs[0].s->model->cfg.n_vocab;
    int32_t at = 0;
    if (ws->tp) {
        lm_head_out_tp(be, ws->tp, segs, nseg);
        return;
    }
    for (int j = 0; j < nseg; j++) {
        ls_fwd_seg *g = &segs[j];
        if (!g->logits || g->logits_from >= g->n) continue;
        int32_t from = g->logits_from < 0 ? 0 : g->logits_from, rows = g->n - from;
        if (j != direct)
            be->ops->download(be, g->logits, ws->logits + (int64_t)at * nv, sizeof(float) * (size_t)(rows * nv));
        if (g->s->fault_on || g->s->capture)
            stage_done_seg(be, ws, g->s, -1, LS_STAGE_LM_HEAD, g->logits, true, rows, nv, g->s->pos + from);
        at += rows;
    }
}

void ls_gemma_forward(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg) {
    const ls_model *m = segs[0].s->model;
    const ls_config *cfg = &m->cfg;
    const ls_backend_ops *op = be->ops;
    int64_t d = cfg->n_embd;
    int32_t off[LS_MAX_SEGS], n = 0;
    bool hooks = false;
    int32_t n_logit_rows = 0;
    LS_ASSERT(nseg >= 1 && nseg <= LS_MAX_SEGS);
    for (int j = 0; j < nseg; j++) {
        off[j] = n;
        LS_ASSERT(n + segs[j].n <= ws->cap);
        for (int32_t r = 0; r < segs[j].n; r++) {
            ws->h_ids[n + r] = segs[j].tokens[r];
            ws->h_ids[ws->cap + n + r] = segs[j].s->pos + r;
        }
        n += segs[j].n;
        hooks |= segs[j].s->fault_on || segs[j].s->capture;
        if (segs[j].logits && segs[j].logits_from < segs[j].n)
            n_logit_rows += segs[j].n - (segs[j].logits_from < 0 ? 0 : segs[j].logits_from);
    }
    /* tokens and positions in one upload (one wait on device backends, whatever nseg) */
    op->upload(be, ws->tokens, ws->h_ids, sizeof(int32_t) * (size_t)(ws->cap + n));
    /* One step = one recorded launch sequence where the backend records them (CUDA graphs):
     * not when the probe hooks or MoE routing read values back mid-step. */
    bool captured = op->step_begin && !hooks && cfg->n_expert == 0 && !ws->tp; /* collectives: not in a graph */
    if (captured) op->step_begin(be, ((int64_t)n << 32) | ((int64_t)nseg << 20) | n_logit_rows);

    op->get_rows(be, &m->tok_embd, ws->tokens, n, ws->x);
    op->scale(be, ws->x, cfg->embd_scale, n * d);
    if (cfg->ple_dim > 0) ple_inputs(be, ws, m, n);

    /* Fused ops (backend.h; bit-identical to the op sequences they replace, so the logits do
     * not depend on which form runs): each residual add carries the output norm before it and
     * the input norm after it (add_rmsnorm), so a layer is
     *   [xn = attn_norm(x)]  attention  x += post_attn_norm(.), xn = ffn_norm(x)
     *   MLP  x += post_ffw_norm(.) [PLE block: x += post_ple_norm(.)], x *= layer_scalar,
     *        xn = the next layer's attn_norm(x), or the output norm after the last layer.
     * The last part runs fused only when no probe hook is set in the step: the layer-output
     * hook may change x (fault injection) after the add and before the next norm reads it, so
     * with hooks x is normed on its own after the hook (rmsnorm_to, the same bits). */
    bool xn_ready = false; /* ws->xn already holds the next norm of x (attn_norm; output norm at the end) */
    for (int i = 0; i < cfg->n_layer; i++) {
        const ls_layer *l = &m->layers[i];
        bool last = i + 1 == cfg->n_layer;
        if (!xn_ready) op->rmsnorm_to(be, ws->xn, ws->x, l->attn_norm, n, d, cfg->eps);
        attention_block(be, ws, segs, nseg, off, n, i);
        stage_done(be, ws, segs, nseg, off, i, LS_STAGE_ATTENTION, ws->tmp, d);
        op->add_rmsnorm(be, ws->x, ws->tmp, l->post_attn_norm, 1.0f, ws->xn, l->ffn_norm, n, d, cfg->eps);

        {
            const ls_weight *w[2] = {&l->w_gate, &l->w_up};
            float *y[2] = {ws->gate, ws->up};
            ls_backend_matmul_n(be, 2, w, ws->xn, n, y);
        }
        op->gelu_mul(be, ws->gate, ws->up, (int64_t)n * l->n_ff);
        op->matmul(be, &l->w_down, ws->gate, n, ws->tmp);
        tp_reduce(ws, ws->tmp, n, d);
        if (l->moe) {
            /* m = post_norm_1(mlp) + post_norm_2(experts); both read the residual x */
            op->rmsnorm(be, ws->tmp, l->moe->post_norm_1, n, d, cfg->eps);
            ls_moe_forward(be, ws, m, i, n, ws->tmp);
        }
        stage_done(be, ws, segs, nseg, off, i, LS_STAGE_MLP, ws->tmp, d);
        /* the next norm: the next layer's attn_norm, or the output norm (when logits are wanted) */
        xn_ready = !hooks && (!last || n_logit_rows > 0);
        float *xn_next = xn_ready ? ws->xn : NULL;
        const float *w_next = !xn_ready ? NULL : last ? m->output_norm : m->layers[i + 1].attn_norm;
        if (cfg->ple_dim > 0) {
            op->add_rmsnorm(be, ws->x, ws->tmp, l->post_ffw_norm, 1.0f, NULL, NULL, n, d, cfg->eps);
            ple_block(be, ws, m, i, n, l->layer_scalar, xn_next, w_next);
        } else {
            op->add_rmsnorm(be, ws->x, ws->tmp, l->post_ffw_norm, l->layer_scalar, xn_next, w_next, n, d, cfg->eps);
        }
        stage_done(be, ws, segs, nseg, off, i, LS_STAGE_LAYER_OUTPUT, ws->x, d);
    }
    int32_t nl = lm_head_rows(be, ws, segs, nseg, off, xn_ready);
    int direct = nl > 0 ? lm_head_matmul(be, ws, segs, nseg, nl) : -1;
    if (captured) op->step_end(be);
    if (nl > 0) lm_head_out(be, ws, segs, nseg, direct);
    /* Later users of this step's caches and hidden rows may be other backend instances
     * (a session's own compaction, the assistant drafter): finish before returning. */
    op->sync(be);
    for (int j = 0; j < nseg; j++) segs[j].s->pos += segs[j].n;
}

void ls_gemma3_forward(ls_backend *be, ls_workspace *ws, ls_fwd_seg *segs, int nseg) {
    ls_gemma_forward(be, ws, segs, nseg);
}
