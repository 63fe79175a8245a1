/* The drafter interface: anything that proposes tokens for the target to verify.
 *
 * The speculative loop owns the token history hist[0..n): the prompt, every emitted token,
 * and last the bonus token (emitted but not yet run through the target). A drafter
 * proposes up to `max` tokens that would follow hist[n-1]; after verification the loop
 * calls `rollback` with the new history length, and the drafter drops any state beyond it
 * (its own KV cache, for a draft model). `target` gives drafters that read the target's
 * state (the Gemma 4 assistant reads its hidden state and K/V) access to it. */
#ifndef LS_DECODE_DRAFTER_H
#define LS_DECODE_DRAFTER_H

#include <stdint.h>

#include "lockstep.h"

typedef struct {
    const char *name;
    /* Propose up to max tokens after hist[0..n); returns the count (0..max). sp is the
     * target's sampling (greedy: temperature 0): a drafter that picks its tokens with the
     * target's position-keyed sampler raises acceptance. */
    int32_t (*propose)(ls_drafter *d, ls_session *target, const int32_t *hist, int32_t n, int32_t max,
                       const ls_sampling *sp, bool greedy, int32_t *out);
    /* History is now hist[0..n): forget anything beyond. */
    void (*rollback)(ls_drafter *d, int32_t n);
    void (*free)(ls_drafter *d);
} ls_drafter_ops;

struct ls_drafter {
    const ls_drafter_ops *ops;
    void *impl;
};

#endif
