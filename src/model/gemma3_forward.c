/* Gemma 3 text forward pass over a block of n rows (prefill chunk, decode step or verify
 * block), per ../shared/specs/gemma.md: embedding * sqrt(d), then per layer
 *   x += post_attn_norm(attn(attn_norm(x)))   (q/k RMS-normed per head, NeoX RoPE:
 *                                               theta 10k on sliding layers, 1M on full)
 *   x += post_ffw_norm(down(gelu_tanh(gate(h)) * up(h))), h = ffn_norm(x)
 * then output_norm and the tied LM head. GGUF norm weights already include the +1.
 * Every op is row-independent (backend.h), so row r's bits do not depend on n. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/f16.h"
#include "core/log.h"
#include "model/session.h"

static void store_kv(ls_kv_layer *c, const float *k, const float *v, int32_t pos0, int32_t n) {
    for (int32_t r = 0; r < n; r++) {
        uint16_t *kd = ls_kv_k(c, pos0 + r), *vd = ls_kv_v(c, pos0 + r);
        const float *ks = k + (int64_t)r * c->row, *vs = v + (int64_t)r * c->row;
        for (int32_t i = 0; i < c->row; i++) {
            kd[i] = ls_f32_to_f16(ks[i]);
            vd[i] = ls_f32_to_f16(vs[i]);
        }
    }
}

const char *ls_stage_name(ls_stage st) {
    static const char *names[] = {"attention", "mlp", "layer-output", "final-norm", "lm-head"};
    return st < LS_STAGE_COUNT ? names[st] : "?";
}

/* Probe hook: fault injection (blocks only) then capture. The fault changes one element of
 * the block's last row by at least 1 and at least its own magnitude: a one-ulp flip would
 * be absorbed downstream (int8 activation quantization, f16 KV, the next RMSNorm), the
 * logits would not change and the probe would never see it. */
static void stage_done(ls_session *s, int32_t layer, ls_stage st, float *rows, int32_t n, int64_t width, int32_t pos0) {
    if (s->fault_on && n > 1 && layer == s->fault_layer && st == s->fault_stage) {
        float *x = rows + (int64_t)(n - 1) * width; /* last row of the block */
        x[0] += 1.0f + fabsf(x[0]);
    }
    if (s->capture) s->capture(s->capture_ud, layer, st, rows, n, width, pos0);
}

static void attention_block(ls_session *s, const ls_layer *l, ls_kv_layer *c, int32_t pos0, int32_t n) {
    const ls_config *cfg = &s->model->cfg;
    ls_backend *be = s->be;
    const ls_backend_ops *op = be->ops;
    int32_t hd = cfg->head_dim, nh = cfg->n_head, nkv = cfg->n_head_kv;
    float base = l->sliding ? cfg->rope_base_sliding : cfg->rope_base_full;

    op->matmul(be, &l->wq, s->xn, n, s->q);
    op->matmul(be, &l->wk, s->xn, n, s->k);
    op->matmul(be, &l->wv, s->xn, n, s->v);
    op->rmsnorm(be, s->q, l->q_norm, (int64_t)n * nh, hd, cfg->eps);
    op->rmsnorm(be, s->k, l->k_norm, (int64_t)n * nkv, hd, cfg->eps);
    op->rope(be, s->q, n, nh, hd, hd, s->positions, base);
    op->rope(be, s->k, n, nkv, hd, hd, s->positions, base);
    store_kv(c, s->k, s->v, pos0, n);
    ls_kv_commit(c, pos0 + n);

    ls_attn_args a = {
        .q = s->q,
        .out = s->att,
        .k = c->k,
        .v = c->v,
        .m = n,
        .n_head = nh,
        .n_kv = nkv,
        .hd = hd,
        .q_pos = s->positions,
        .first_pos = c->first_pos,
        .n_slots = c->n,
        .window = l->sliding ? cfg->sliding_window : 0,
        .scale = cfg->attn_scale,
    };
    op->attention(be, &a);
    op->matmul(be, &l->wo, s->att, n, s->tmp);
}

int ls_gemma3_forward(ls_session *s, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
                      size_t errlen) {
    ls_model *m = s->model;
    const ls_config *cfg = &m->cfg;
    ls_backend *be = s->be;
    const ls_backend_ops *op = be->ops;
    int32_t pos0 = s->pos;
    int64_t d = cfg->n_embd;

    if (n <= 0 || n > s->n_batch) {
        snprintf(err, errlen, "eval: %d rows (must be 1..%d)", n, s->n_batch);
        return LS_ERR_ARG;
    }
    if (pos0 + n > s->n_ctx) {
        snprintf(err, errlen, "context full: %d + %d tokens exceed the context length %d", pos0, n, s->n_ctx);
        return LS_ERR_CONTEXT;
    }
    for (int32_t r = 0; r < n; r++) {
        if (tokens[r] < 0 || tokens[r] >= cfg->n_vocab) {
            snprintf(err, errlen, "eval: token id %d out of range [0, %d)", tokens[r], cfg->n_vocab);
            return LS_ERR_ARG;
        }
        s->positions[r] = pos0 + r;
    }
    for (int i = 0; i < cfg->n_layer; i++) {
        if (ls_kv_reserve(&s->kv[i], n) != 0) {
            snprintf(err, errlen, "eval: KV cache of layer %d cannot take %d rows", i, n);
            return LS_ERR_CONTEXT;
        }
    }

    op->get_rows(be, &m->tok_embd, tokens, n, s->x);
    for (int64_t i = 0; i < n * d; i++) s->x[i] *= cfg->embd_scale;

    for (int i = 0; i < cfg->n_layer; i++) {
        const ls_layer *l = &m->layers[i];
        memcpy(s->xn, s->x, sizeof(float) * (size_t)(n * d));
        op->rmsnorm(be, s->xn, l->attn_norm, n, d, cfg->eps);
        attention_block(s, l, &s->kv[i], pos0, n);
        stage_done(s, i, LS_STAGE_ATTENTION, s->tmp, n, d, pos0);
        op->rmsnorm(be, s->tmp, l->post_attn_norm, n, d, cfg->eps);
        op->add(be, s->x, s->tmp, n * d);

        memcpy(s->xn, s->x, sizeof(float) * (size_t)(n * d));
        op->rmsnorm(be, s->xn, l->ffn_norm, n, d, cfg->eps);
        op->matmul(be, &l->w_gate, s->xn, n, s->gate);
        op->matmul(be, &l->w_up, s->xn, n, s->up);
        op->gelu_mul(be, s->gate, s->up, (int64_t)n * cfg->n_ff);
        op->matmul(be, &l->w_down, s->gate, n, s->tmp);
        stage_done(s, i, LS_STAGE_MLP, s->tmp, n, d, pos0);
        op->rmsnorm(be, s->tmp, l->post_ffw_norm, n, d, cfg->eps);
        op->add(be, s->x, s->tmp, n * d);
        stage_done(s, i, LS_STAGE_LAYER_OUTPUT, s->x, n, d, pos0);
    }
    s->pos = pos0 + n;

    if (logits && logits_from < n) {
        if (logits_from < 0) logits_from = 0;
        int32_t nl = n - logits_from;
        float *h = s->x + (int64_t)logits_from * d;
        op->rmsnorm(be, h, m->output_norm, nl, d, cfg->eps);
        stage_done(s, -1, LS_STAGE_FINAL_NORM, h, nl, d, pos0 + logits_from);
        op->matmul(be, &m->tok_embd, h, nl, logits);
        stage_done(s, -1, LS_STAGE_LM_HEAD, logits, nl, cfg->n_vocab, pos0 + logits_from);
    }
    return LS_OK;
}
