/* The sampler with its scratch, shared by generation, the speculative loop (rejection mode
 * needs the filtered distribution, not just the drawn token) and the drafters.
 *
 * Scratch is allocated once, sized by the vocabulary (ls_sampler_init, at session or drafter
 * creation), so choosing a token never allocates and cannot fail: a sampler that could not
 * get its memory is an error when it is created, never a silent change of the sampling
 * (no dropped penalties, no greedy fallback). */
#ifndef LS_DECODE_SAMPLER_H
#define LS_DECODE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

typedef struct {
    int32_t id;
    float logit;
    float p;
} ls_cand;

typedef struct {
    int32_t n_vocab;
    float *logits;  /* [n_vocab] the penalized copy of a logits row */
    int32_t *count; /* [n_vocab] occurrences in the penalty window; all zero between calls */
    ls_cand *cand;  /* [n_vocab] candidates */
} ls_sampler;

/* Allocates the scratch for rows of n_vocab logits. LS_OK, or LS_ERR_NOMEM with a message
 * (fault site "sampler"). */
int ls_sampler_init(ls_sampler *s, int32_t n_vocab, char *err, size_t errlen);
void ls_sampler_free(ls_sampler *s);

/* The filtered distribution for one position (logits: s->n_vocab floats): candidates sorted
 * by logit (ties: lower id first) with probabilities after penalties, top-k, top-p, min-p and
 * temperature, in *out (the sampler's scratch: valid until its next call). Returns the count,
 * or 0 for greedy (temperature <= 0; *greedy_tok set). */
int32_t ls_sampler_dist(ls_sampler *s, const ls_sampling *sp, const float *logits, const int32_t *history, int32_t pos,
                        const ls_cand **out, int32_t *greedy_tok);
/* ls_sample with this scratch: the token for position pos. */
int32_t ls_sampler_sample(ls_sampler *s, const ls_sampling *sp, const float *logits, const int32_t *history,
                          int32_t pos);
/* Inverse-CDF draw over n candidates in their fixed order; `skip` (or -1) is excluded and the
 * rest renormalized (the residual distribution of rejection sampling). */
int32_t ls_cand_draw(const ls_cand *c, int32_t n, float u, int32_t skip);

#endif
