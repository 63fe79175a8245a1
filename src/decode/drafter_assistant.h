/* Gemma 4 assistant (MTP) drafter: the drafter interface (drafter.h) over model/assistant.h.
 * Declared here until the lead moves it to include/lockstep.h next to the other drafters. */
#ifndef LS_DECODE_DRAFTER_ASSISTANT_H
#define LS_DECODE_DRAFTER_ASSISTANT_H

#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

/* Load the gemma4_assistant checkpoint directory `dir` and check it against `target` (a
 * Gemma 4 model: backbone = hidden size, vocabulary, head dims / KV heads of the target's
 * last non-shared sliding and full layers, sliding window). n_ctx bounds the positions it
 * will draft at; n_threads 0 = 1 (the drafter's matmuls are small). Returns LS_OK, or an
 * error code with a message naming the mismatch. */
int ls_drafter_assistant_create(const char *dir, const ls_model *target, int32_t n_ctx, int32_t n_threads,
                                ls_drafter **out, char *err, size_t errlen);

#endif
