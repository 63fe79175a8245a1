/* Gemma 4 mixture-of-experts block (docs/gemma.md 3.2, HF Gemma4TextRouter / Gemma4TextExperts):
 *   router: x = RMSNormNoScale(r) * scale * H^-0.5; scores = proj x; top-k by score;
 *           weights = softmax over the k chosen scores, times per_expert_scale[expert]
 *   experts: y = sum_k w_k * down_e(gelu_tanh(gate_e x') * up_e x'), x' = pre_norm_2(r)
 *   out += post_norm_2(y)
 * Rows are grouped by expert so each expert's weights are read once per step; the matmul
 * kernels are M-invariant, so a row's expert outputs do not depend on which other rows
 * share the call. Each row sums its experts in ascending expert order (the order HF's
 * index_add loop uses), so its bits do not depend on the batch either. */
#include <math.h>
#include <string.h>

#include "model/session.h"

/* Top-k of one row's scores, best first (ties: lower expert id first), and the softmax of
 * the chosen scores times the per-expert scales. */
static void route_row(const float *scores, int32_t E, int32_t K, const float *per_expert_scale, int32_t *idx,
                      float *w) {
    for (int32_t k = 0; k < K; k++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            bool taken = false;
            for (int32_t j = 0; j < k; j++) taken |= idx[j] == e;
            if (!taken && (best < 0 || scores[e] > scores[best])) best = e;
        }
        idx[k] = best;
    }
    float mx = scores[idx[0]], sum = 0.0f;
    for (int32_t k = 0; k < K; k++) {
        w[k] = expf(scores[idx[k]] - mx);
        sum += w[k];
    }
    for (int32_t k = 0; k < K; k++) w[k] = (w[k] / sum) * per_expert_scale[idx[k]];
}

void ls_moe_forward(ls_backend *be, ls_workspace *ws, const ls_model *m, int layer, int32_t n, float *out) {
    const ls_config *c = &m->cfg;
    const ls_moe *moe = m->layers[layer].moe;
    const ls_backend_ops *op = be->ops;
    int64_t d = c->n_embd;
    int32_t E = c->n_expert, K = c->n_expert_used, I = c->moe_ff;
    float root = 1.0f / sqrtf((float)d); /* HF: hidden_size**-0.5 (python float -> f32) */

    /* Router input, in xn (free here): RMSNormNoScale(r) * scale * H^-0.5. Routing itself
     * (top-k, softmax) runs on the host over the downloaded scores: it is tiny, and the
     * row lists it produces decide how many rows each expert's matmuls get. */
    op->rmsnorm_to(be, ws->xn, ws->x, NULL, n, d, c->eps);
    op->mul_rows(be, ws->xn, moe->router_scale, root, n, d);
    op->matmul(be, &moe->router, ws->xn, n, ws->moe_scores);
    op->download(be, ws->h_moe_scores, ws->moe_scores, sizeof(float) * (size_t)n * (size_t)E);
    for (int32_t r = 0; r < n; r++)
        route_row(ws->h_moe_scores + (int64_t)r * E, E, K, moe->per_expert_scale, ws->h_moe_idx + (int64_t)r * K,
                  ws->h_moe_w + (int64_t)r * K);

    /* Expert input x' = pre_norm_2(r), in xn. */
    op->rmsnorm_to(be, ws->xn, ws->x, moe->pre_norm_2, n, d, c->eps);
    op->fill(be, ws->moe_acc, 0.0f, n * d);
    for (int32_t e = 0; e < E; e++) {
        int32_t cnt = 0;
        for (int32_t r = 0; r < n; r++)
            for (int32_t k = 0; k < K; k++)
                if (ws->h_moe_idx[r * K + k] == e) {
                    ws->h_moe_src[cnt] = r;
                    ws->h_moe_wsel[cnt] = ws->h_moe_w[r * K + k];
                    cnt++;
                }
        if (cnt == 0) continue;
        /* a row picks an expert at most once, so the destination rows are distinct */
        op->upload(be, ws->moe_src, ws->h_moe_src, sizeof(int32_t) * (size_t)cnt);
        op->upload(be, ws->moe_w, ws->h_moe_wsel, sizeof(float) * (size_t)cnt);
        op->gather_rows(be, ws->moe_in, ws->xn, ws->moe_src, cnt, d);
        op->matmul(be, &moe->gate[e], ws->moe_in, cnt, ws->gate);
        op->matmul(be, &moe->up[e], ws->moe_in, cnt, ws->up);
        op->gelu_mul(be, ws->gate, ws->up, (int64_t)cnt * I);
        op->matmul(be, &moe->down[e], ws->gate, cnt, ws->moe_out);
        op->scatter_add(be, ws->moe_acc, ws->moe_out, ws->moe_src, ws->moe_w, cnt, d);
    }
    op->add_rmsnorm(be, out, ws->moe_acc, moe->post_norm_2, 1.0f, NULL, NULL, n, d, c->eps); /* norm, then add */
}
