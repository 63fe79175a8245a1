/* Shards of a model for tensor parallelism (model/tp.h; docs/design.md,
 * "Tensor parallelism"). Rank r of n gets
 *   - q heads [r nh/n, (r+1) nh/n): rows of wq, columns of wo (row-parallel);
 *   - the KV heads those q heads read: [r nkv/n, (r+1) nkv/n) when n divides nkv, else (n a
 *     multiple of nkv, e.g. Gemma 3 270M's single KV head) the one head r nkv/n, replicated
 *     over the n/nkv ranks that share it (as vLLM does); its KV cache holds only those heads;
 *   - MLP columns [r ff/n, (r+1) ff/n): rows of w_gate / w_up, columns of w_down;
 *   - vocabulary rows [r V/n, (r+1) V/n) of the tied embedding as its LM head (tp_session.c).
 * Column-parallel slices are row ranges of the weight: a pointer offset. Row-parallel slices
 * (wo, w_down) are column ranges: whole quantization blocks (or MLX groups) of every row,
 * repacked into a host copy of the slice (the CPU matmul takes no row stride; the strided
 * weight the plan names is future work). Norm vectors are per head dim or per model width:
 * shared. The embedding table is read whole by every rank (get_rows reads m rows). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/tp.h"

static size_t sb_size(ls_type t) {
    return t == LS_TYPE_F32 ? 4 : 2;
}

/* Bytes of the first `cols` columns of a row, or 0 when that cuts a block / group. */
static size_t col_bytes(const ls_weight *w, int64_t cols) {
    if (w->type == LS_TYPE_MLX_AFFINE) return cols % w->group ? 0 : (size_t)(cols * w->bits / 8);
    return ls_row_size(w->type, cols);
}

static bool col_split_ok(const ls_weight *w, int n) {
    return w->cols % n == 0 && col_bytes(w, w->cols / n) > 0;
}

static const char *layer_check(const ls_model *m, const ls_layer *l, int n) {
    int32_t nkv = l->n_kv;
    if (nkv % n != 0 && n % nkv != 0) return "the KV heads and the rank count do not divide one another";
    if (l->n_ff % n != 0) return "the MLP width is not a multiple of the rank count";
    if (!col_split_ok(&l->wo, n) || !col_split_ok(&l->w_down, n))
        return "a row-parallel slice (wo / w_down columns) would cut a quantization block";
    (void)m;
    return NULL;
}

int ls_tp_check(const ls_model *m, int n, char *err, size_t errlen) {
    const ls_config *c = &m->cfg;
    const char *why = NULL;
    if (n < 1 || n > LS_MAX_RANKS)
        why = "the rank count is out of range";
    else if (c->n_expert > 0)
        why = "MoE models are not supported yet";
    else if (c->ple_dim > 0)
        why = "per-layer-embedding (PLE) models are not supported yet";
    else if (c->n_head % n != 0)
        why = "the attention heads are not a multiple of the rank count";
    else if (c->n_vocab < n)
        why = "the vocabulary is smaller than the rank count";
    for (int i = 0; !why && i < c->n_layer; i++) why = layer_check(m, &m->layers[i], n);
    if (!why) return 0;
    snprintf(err, errlen, "--tensor-parallel %d: %s (%d heads, vocabulary %d; docs/design.md, \"Tensor parallelism\")",
             n, why, c->n_head, c->n_vocab);
    return -1;
}

/* Rows [r0, r0 + nrows) of w. */
static ls_weight row_slice(const ls_weight *w, int64_t r0, int64_t nrows) {
    ls_weight s = *w;
    s.data = (const char *)w->data + r0 * (int64_t)w->row_bytes;
    s.rows = nrows;
    if (w->type == LS_TYPE_MLX_AFFINE) {
        size_t per_row = (size_t)(w->cols / w->group) * sb_size(w->sb_type);
        s.scales = (const char *)w->scales + r0 * (int64_t)per_row;
        s.biases = (const char *)w->biases + r0 * (int64_t)per_row;
    }
    return s;
}

static void *own(ls_tp_shard *sh, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return NULL;
    sh->owned[sh->n_owned] = p;
    sh->owned_bytes[sh->n_owned++] = bytes;
    return p;
}

/* Copies `width` bytes at byte `from` of each of `rows` rows of `row` bytes. */
static void *slice_copy(ls_tp_shard *sh, const void *src, int64_t rows, size_t row, size_t from, size_t width) {
    char *dst = own(sh, (size_t)rows * width);
    if (!dst) return NULL;
    for (int64_t i = 0; i < rows; i++)
        memcpy(dst + i * (int64_t)width, (const char *)src + i * (int64_t)row + from, width);
    return dst;
}

/* Columns [c0, c0 + ncols) of w, repacked. 0 or -1 (out of memory). */
static int col_slice(ls_tp_shard *sh, ls_weight *out, const ls_weight *w, int64_t c0, int64_t ncols) {
    *out = *w;
    out->cols = ncols;
    out->row_bytes = col_bytes(w, ncols);
    out->data = slice_copy(sh, w->data, w->rows, w->row_bytes, col_bytes(w, c0), out->row_bytes);
    if (!out->data) return -1;
    if (w->type == LS_TYPE_MLX_AFFINE) {
        size_t e = sb_size(w->sb_type), row = (size_t)(w->cols / w->group) * e;
        size_t from = (size_t)(c0 / w->group) * e, width = (size_t)(ncols / w->group) * e;
        out->scales = slice_copy(sh, w->scales, w->rows, row, from, width);
        out->biases = out->scales ? slice_copy(sh, w->biases, w->rows, row, from, width) : NULL;
        if (!out->biases) return -1;
    }
    return 0;
}

static int shard_layer(ls_tp_shard *sh, ls_layer *l, const ls_layer *src, int nh, int r, int n) {
    int64_t hd = src->head_dim, nh_r = nh / n;
    int32_t nkv_r = src->n_kv >= n ? src->n_kv / n : 1, kv0 = (int32_t)((int64_t)r * src->n_kv / n);
    int64_t ff_r = src->n_ff / n;
    *l = *src;
    l->n_kv = nkv_r;
    l->n_ff = (int32_t)ff_r;
    l->wq = row_slice(&src->wq, r * nh_r * hd, nh_r * hd);
    /* KV-shared layers (Gemma 4) have no K / V projection of their own */
    if (src->wk.data) l->wk = row_slice(&src->wk, kv0 * hd, nkv_r * hd);
    if (src->wv.data && !src->k_eq_v) l->wv = row_slice(&src->wv, kv0 * hd, nkv_r * hd);
    l->w_gate = row_slice(&src->w_gate, r * ff_r, ff_r);
    l->w_up = row_slice(&src->w_up, r * ff_r, ff_r);
    if (n == 1) return 0; /* the whole weights: nothing to repack */
    if (col_slice(sh, &l->wo, &src->wo, r * nh_r * hd, nh_r * hd) != 0) return -1;
    return col_slice(sh, &l->w_down, &src->w_down, r * ff_r, ff_r);
}

/* The shard's buffer maxima (model.h ls_config), recomputed over its layers. */
static void shard_geometry(ls_config *c, const ls_layer *layers) {
    c->max_q = c->max_kv = c->max_ff = 0;
    for (int i = 0; i < c->n_layer; i++) {
        const ls_layer *l = &layers[i];
        if (c->n_head * l->head_dim > c->max_q) c->max_q = c->n_head * l->head_dim;
        if (l->n_kv * l->head_dim > c->max_kv) c->max_kv = l->n_kv * l->head_dim;
        if (l->n_ff > c->max_ff) c->max_ff = l->n_ff;
    }
    c->n_head_kv = layers[0].n_kv;
    c->n_ff = layers[0].n_ff;
}

int ls_tp_shard_init(ls_tp_shard *sh, const ls_model *m, const ls_device_kind *kind, int r, int n, char *err,
                     size_t errlen) {
    memset(sh, 0, sizeof *sh);
    sh->m = *m;
    sh->kind = kind;
    int nl = m->cfg.n_layer, slots = 6 * nl; /* wo, w_down: data, scales, biases */
    sh->m.layers = calloc((size_t)nl, sizeof(ls_layer));
    sh->owned = calloc((size_t)slots, sizeof(void *));
    sh->owned_bytes = calloc((size_t)slots, sizeof(size_t));
    if (!sh->m.layers || !sh->owned || !sh->owned_bytes) goto nomem;
    for (int i = 0; i < nl; i++)
        if (shard_layer(sh, &sh->m.layers[i], &m->layers[i], m->cfg.n_head, r, n) != 0) goto nomem;
    sh->m.cfg.n_head = m->cfg.n_head / n;
    shard_geometry(&sh->m.cfg, sh->m.layers);
    for (int i = 0; i < sh->n_owned; i++)
        if (kind->map_const(sh->owned[i], sh->owned_bytes[i], err, errlen) != 0) {
            for (int j = 0; j < i; j++) kind->unmap_const(sh->owned[j]);
            sh->kind = NULL; /* nothing mapped any more */
            ls_tp_shard_free(sh);
            return -1;
        }
    return 0;
nomem:
    snprintf(err, errlen, "--tensor-parallel %d: out of memory building the shard of rank %d", n, r);
    sh->kind = NULL;
    ls_tp_shard_free(sh);
    return -1;
}

void ls_tp_shard_free(ls_tp_shard *sh) {
    for (int i = 0; i < sh->n_owned; i++) {
        if (sh->kind) sh->kind->unmap_const(sh->owned[i]);
        free(sh->owned[i]);
    }
    free(sh->owned);
    free(sh->owned_bytes);
    free(sh->m.layers);
    memset(sh, 0, sizeof *sh);
}
