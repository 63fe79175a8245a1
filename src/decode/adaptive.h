/* Adaptive block width (docs/speculative.md section 8).
 *
 * A cost model chooses the verify width k (1 = a classic single-token step) that maximizes
 * expected emitted tokens per millisecond:
 *   E(k)  = 1 + sum_{j=1}^{k-1} prod_{i<j} a_i   (a_i: P(draft i accepted | draft i reached))
 *   rate  = E(k) / c(k)                          (c(k): measured ms of a round with k rows)
 * Acceptance and costs are running estimates per request. When no width beats a classic
 * step, speculation is effectively off; a speculative width is re-tried now and then with
 * exponential back-off, so a request whose drafts never land pays almost nothing. Only the
 * schedule changes: every emitted token is still the target's own choice. */
#ifndef LS_DECODE_ADAPTIVE_H
#define LS_DECODE_ADAPTIVE_H

#include <stdint.h>

#include "lockstep.h"

typedef struct {
    int32_t kmax;
    double cost_ms[LS_SPEC_MAX_BLOCK + 1]; /* EMA of round time by rows */
    int32_t cost_n[LS_SPEC_MAX_BLOCK + 1];
    double reached[LS_SPEC_MAX_BLOCK], accepted[LS_SPEC_MAX_BLOCK];
    int64_t rounds, next_explore;
    int32_t explore_every;
    int32_t last;
} ls_adapt;

void ls_adapt_init(ls_adapt *a, int32_t kmax);
/* Width for the next round: 1..kmax. */
int32_t ls_adapt_choose(ls_adapt *a);
/* A round ran with `rows` rows (bonus + drafts), `accepted` of rows-1 drafts accepted, in ms. */
void ls_adapt_observe(ls_adapt *a, int32_t rows, int32_t accepted, double ms);
/* Expected emitted tokens per ms at width k under the current estimates (for tests/stats). */
double ls_adapt_rate(const ls_adapt *a, int32_t k);

#endif
