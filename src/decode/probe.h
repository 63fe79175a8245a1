/* The start-up exactness probe (speculative.md section 6): a safety net that checks, on
 * throw-away caches, that a K-row verify block produces byte-identical logits to K
 * single-token steps, for short random prompts and one longer than the sliding window.
 * On failure (or on request) it reruns with per-layer capture of every sub-op in both
 * arms and names the first divergence in execution order. */
#ifndef LS_DECODE_PROBE_H
#define LS_DECODE_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "lockstep.h"
#include "model/session.h"

typedef struct {
    int32_t block_size; /* K */
    int32_t n_threads;  /* 0: all cores */
    bool trace;         /* always run the localization pass and log per-layer results */
    /* Test-only fault injection into the block arm (see ls_session_set_fault). */
    bool fault_on;
    int32_t fault_layer;
    ls_stage fault_stage;
} ls_probe_options;

typedef struct {
    bool passed;
    int32_t block_row;    /* first differing verify-block row (failures) */
    int64_t diff_bytes, total_bytes;
    int32_t layer;        /* first divergence: layer (-1 for final-norm / lm-head) */
    bool layer_sliding;
    ls_stage stage;
    int32_t position;     /* absolute position of the first divergence */
    bool localized;
    char message[512];
} ls_probe_result;

/* Runs the probe on fresh sessions of `model`. Returns LS_OK when the probe could run
 * (passed or not; see res), an error code if it could not (e.g. out of memory). */
int ls_probe_run(ls_model *model, const ls_probe_options *opt, ls_probe_result *res, char *err, size_t errlen);

/* Memoized per (model, drafter, K, threads, backend): the probe runs once per process for
 * each combination. Uses the session's model and thread count. */
void ls_probe_run_cached(ls_session *s, const char *drafter, int32_t block_size, ls_probe_result *res);

/* Test-only: inject a fault into every probe that ls_probe_run_cached runs from now on
 * (and forget memoized verdicts), to test the decline path of generation. */
void ls_probe_set_test_fault(bool on, int32_t layer, ls_stage stage);

#endif
