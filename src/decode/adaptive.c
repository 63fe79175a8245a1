/* Adaptive block width: see adaptive.h. */
#include "decode/adaptive.h"

#include <string.h>

enum { EXPLORE_MIN = 8, EXPLORE_MAX = 512 };

void ls_adapt_init(ls_adapt *a, int32_t kmax) {
    memset(a, 0, sizeof *a);
    a->kmax = kmax < 1 ? 1 : (kmax > LS_SPEC_MAX_BLOCK ? LS_SPEC_MAX_BLOCK : kmax);
    a->explore_every = EXPLORE_MIN;
    a->last = a->kmax;
}

/* Acceptance at draft position i, smoothed towards the previous position's estimate
 * (weight 2; 1/2 before the first): acceptance is strongly correlated along a block, and
 * a deeper position that was never reached must not look worse than the evidence says. */
static double accept_p(const ls_adapt *a, int32_t i) {
    double prior = 0.5;
    for (int32_t j = 0; j <= i; j++) prior = (a->accepted[j] + 2.0 * prior) / (a->reached[j] + 2.0);
    return prior;
}

/* Round cost for k rows: measured when we have it, else extrapolated from the nearest
 * measured width assuming each extra row costs 35% of a single-row step. */
static double cost(const ls_adapt *a, int32_t k) {
    if (a->cost_n[k]) return a->cost_ms[k];
    for (int32_t d = 1; d <= LS_SPEC_MAX_BLOCK; d++) {
        int32_t lo = k - d, hi = k + d;
        if (lo >= 1 && a->cost_n[lo]) {
            double unit = a->cost_ms[lo] / (1.0 + 0.35 * (lo - 1));
            return unit * (1.0 + 0.35 * (k - 1));
        }
        if (hi <= LS_SPEC_MAX_BLOCK && a->cost_n[hi]) {
            double unit = a->cost_ms[hi] / (1.0 + 0.35 * (hi - 1));
            return unit * (1.0 + 0.35 * (k - 1));
        }
    }
    return 1.0 + 0.35 * (k - 1);
}

double ls_adapt_rate(const ls_adapt *a, int32_t k) {
    double e = 1.0, p = 1.0;
    for (int32_t j = 1; j < k; j++) {
        p *= accept_p(a, j - 1);
        e += p;
    }
    return e / cost(a, k);
}

int32_t ls_adapt_choose(ls_adapt *a) {
    a->rounds++;
    if (a->kmax <= 1) return a->last = 1;
    /* Start speculating at full width; measure a single-row step once early on. */
    if (a->rounds == 2 && !a->cost_n[1]) return a->last = 1;
    int32_t best = 1, best_spec = 2;
    for (int32_t k = 2; k <= a->kmax; k++) {
        if (ls_adapt_rate(a, k) > ls_adapt_rate(a, best_spec)) best_spec = k;
    }
    best = ls_adapt_rate(a, best_spec) > ls_adapt_rate(a, 1) ? best_spec : 1;
    if (best == 1) {
        if (a->rounds >= a->next_explore) { /* re-try speculation, then back off further */
            a->next_explore = a->rounds + a->explore_every;
            if (a->explore_every < EXPLORE_MAX) a->explore_every *= 2;
            return a->last = best_spec;
        }
    } else {
        a->explore_every = EXPLORE_MIN;
        /* Speculating: every EXPLORE_MIN rounds measure one width deeper than the best, so
         * its real cost and the acceptance of deeper drafts replace the extrapolations. */
        if (a->rounds >= a->next_explore) {
            a->next_explore = a->rounds + EXPLORE_MIN;
            if (best < a->kmax) return a->last = best + 1;
        }
    }
    return a->last = best;
}

void ls_adapt_observe(ls_adapt *a, int32_t rows, int32_t accepted, double ms) {
    if (rows < 1 || rows > LS_SPEC_MAX_BLOCK) return;
    if (ms <= 0) ms = 1e-3;
    a->cost_ms[rows] = a->cost_n[rows] ? 0.8 * a->cost_ms[rows] + 0.2 * ms : ms;
    a->cost_n[rows]++;
    for (int32_t j = 0; j < rows - 1; j++) {
        if (j > accepted) break;
        a->reached[j] += 1;
        if (j < accepted) a->accepted[j] += 1;
    }
}
