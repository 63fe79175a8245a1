/* Sampler internals shared with the speculative loop (rejection-sampling mode needs the
 * filtered distribution, not just the drawn token). */
#ifndef LS_DECODE_SAMPLER_H
#define LS_DECODE_SAMPLER_H

#include <stdint.h>

#include "lockstep.h"

typedef struct {
    int32_t id;
    float logit;
    float p;
} ls_cand;

int32_t ls_sample_dist(const ls_sampling *sp, const float *logits, int32_t n_vocab, const int32_t *history, int32_t pos,
                       ls_cand **out, int32_t *greedy_tok);
int32_t ls_cand_draw(const ls_cand *c, int32_t n, float u, int32_t skip);

#endif
