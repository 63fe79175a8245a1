/* Grouped attention over an f16 cache (AVX2 and up): the work of one ls_attention call cut
 * into items of up to LS_ATTN_ENT queries that share one KV head, a block of consecutive query
 * rows times a run of that head's query heads, so each key and value row is read once per item
 * (attn_group_avx2.c, attn_group_avx512.c). Every (row, head) gets the bits of attn_one in backend_cpu.c: the same
 * scores (computed over the union of the block's key ranges; a row uses only its own), the
 * same sequential max, exps and sum over its own keys (expf.h), the same value chains over its
 * own keys. The plan only decides which queries travel together, never a bit. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/attn_group.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/expf.h"

/* Relative cost of reading the key / value rows once per item, in units of one query's
 * arithmetic over them (a guess between an L2-resident cache, where the arithmetic dominates,
 * and a long one streamed from memory). */
enum { AB_LOAD_COST = 2 };

static long ab_items(const ls_attn_args *a, int rows, int heads) {
    const int32_t group = a->n_head / a->n_kv;
    return (long)((a->m + rows - 1) / rows) * a->n_kv * ((group + heads - 1) / heads);
}

/* Item t's block: rows [*r0, *r0 + *nr), heads [*h0, *h0 + *nh) (one KV head). */
static void ab_item(const ls_attn_args *a, const ls_attn_plan *p, long t, int64_t *r0, int *nr, int32_t *h0, int *nh) {
    const int32_t group = a->n_head / a->n_kv, runs = (group + p->heads - 1) / p->heads;
    const int64_t b = t / ((long)a->n_kv * runs);
    const int32_t kvh = (int32_t)(t / runs % a->n_kv), run = (int32_t)(t % runs);
    *r0 = b * p->rows;
    *nr = a->m - *r0 < p->rows ? (int)(a->m - *r0) : p->rows;
    *h0 = kvh * group + run * p->heads;
    *nh = group - run * p->heads < p->heads ? group - run * p->heads : p->heads;
}

/* The largest thread's share when items are dealt round-robin (ls_attn_block's order). With
 * many items per thread the deal is even to within an item: then the total / nth. */
static long ab_cost(const ls_attn_args *a, const ls_attn_plan *p, int nth) {
    const long n = ab_items(a, p->rows, p->heads);
    if (n >= 16L * nth) return (n * AB_LOAD_COST + (long)a->m * a->n_head + nth - 1) / nth;
    long load[16 * 64] = {0}, worst = 0; /* n < 16 nth items: at most that many threads busy */
    for (long t = 0; t < n; t++) {
        int64_t r0;
        int nr, nh;
        int32_t h0;
        ab_item(a, p, t, &r0, &nr, &h0, &nh);
        long *l = &load[t % nth % (16 * 64)];
        *l += AB_LOAD_COST + nr * nh;
        worst = *l > worst ? *l : worst;
    }
    return worst;
}

void ls_attn_plan_make(const ls_attn_args *a, int nth, ls_attn_plan *p) {
    const int32_t group = a->n_head / a->n_kv;
    ls_attn_plan best = {1, 1};
    long best_cost = -1;
    /* heads first: a row's heads see exactly the same keys, rows only nearly */
    for (int heads = group < LS_ATTN_ENT ? group : LS_ATTN_ENT; heads >= 1; heads--)
        for (int rows = 1; rows <= a->m && rows * heads <= LS_ATTN_ENT; rows++) {
            const ls_attn_plan c = {rows, heads};
            const long cost = ab_cost(a, &c, nth);
            /* ties: more queries per item (fewer passes over the cache) */
            if (best_cost < 0 || cost < best_cost || (cost == best_cost && rows * heads > best.rows * best.heads)) {
                best = c;
                best_cost = cost;
            }
        }
    *p = best;
}

long ls_attn_plan_items(const ls_attn_args *a, const ls_attn_plan *p) {
    return ab_items(a, p->rows, p->heads);
}

/* Row r's keys [*lo, *hi], absolute positions (attn_one's range); false when it sees none. */
static bool ab_range(const ls_attn_args *a, int64_t r, int32_t *lo, int32_t *hi) {
    *hi = a->q_pos[r] - (a->strictly_before ? 1 : 0);
    *lo = 0;
    if (a->window > 0 && a->q_pos[r] - a->window + 1 > *lo) *lo = a->q_pos[r] - a->window + 1;
    if (*hi < *lo) return false;
    LS_ASSERT(*lo >= a->first_pos && *hi - a->first_pos < a->n_slots);
    return true;
}

void ls_attn_block(const ls_attn_args *a, const ls_attn_plan *p, long t, float *scores, int64_t s_stride) {
    int64_t r0;
    int nr, nh;
    int32_t h0;
    ab_item(a, p, t, &r0, &nr, &h0, &nh);
    const int32_t hd = a->hd, kvh = h0 / (a->n_head / a->n_kv);
    const float *q[LS_ATTN_ENT];
    float *out[LS_ATTN_ENT];
    int32_t lo[LS_ATTN_ENT], hi[LS_ATTN_ENT], row_lo[LS_ATTN_ENT], row_hi[LS_ATTN_ENT];
    int32_t u_lo = INT32_MAX, u_hi = INT32_MIN;
    int E = 0, rows = 0;
    for (int i = 0; i < nr; i++) {
        const int64_t r = r0 + i;
        float *o = a->out + (r * a->n_head + h0) * (int64_t)hd;
        if (!ab_range(a, r, &row_lo[rows], &row_hi[rows])) { /* nothing visible: a zero row */
            memset(o, 0, sizeof(float) * (size_t)hd * (size_t)nh);
            continue;
        }
        u_lo = row_lo[rows] < u_lo ? row_lo[rows] : u_lo;
        u_hi = row_hi[rows] > u_hi ? row_hi[rows] : u_hi;
        for (int h = 0; h < nh; h++, E++) {
            q[E] = a->q + (r * a->n_head + h0 + h) * (int64_t)hd;
            out[E] = o + (int64_t)h * hd;
        }
        rows++;
    }
    if (!E) return;
    const int32_t n = u_hi - u_lo + 1; /* the union of the rows' ranges: scores for all of it */
    LS_ASSERT(n <= s_stride);
    const int64_t kv_stride = (int64_t)a->n_kv * hd;
    const int64_t base = (int64_t)(u_lo - a->first_pos) * kv_stride + (int64_t)kvh * hd;
    const bool z = ls_cpu_isa() >= LS_ISA_AVX512; /* the 512-bit kernels: same bits, fewer instructions */
    (z ? ls_attn_group_scores_avx512 : ls_attn_group_scores_avx2)(E, (const uint16_t *)a->k + base, kv_stride, n, q, hd,
                                                                  a->scale, scores, s_stride);
    float sum[LS_ATTN_ENT];
    for (int i = 0; i < rows; i++) {
        const int32_t off = row_lo[i] - u_lo, len = row_hi[i] - row_lo[i] + 1;
        float mx[LS_ATTN_ENT];
        for (int h = 0; h < nh; h++) {
            const int e = i * nh + h;
            const float *s = scores + e * s_stride + off;
            mx[h] = -INFINITY;
            for (int32_t k = 0; k < len; k++)
                if (s[k] > mx[h]) mx[h] = s[k];
            lo[e] = off, hi[e] = off + len;
        }
        /* the row's heads: their sums run side by side */
        ls_softmax_exp(ls_cpu_isa(), nh, scores + (int64_t)i * nh * s_stride + off, s_stride, len, mx, sum + i * nh);
    }
    (z ? ls_attn_group_values_avx512 : ls_attn_group_values_avx2)(E, (const uint16_t *)a->v + base, kv_stride, lo, hi,
                                                                  scores, s_stride, hd, out);
    for (int e = 0; e < E; e++) {
        const float inv = 1.0f / sum[e];
        for (int32_t d = 0; d < hd; d++) out[e][d] *= inv;
    }
}
