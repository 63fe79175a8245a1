/* The start-up exactness probe (docs/speculative.md section 6): a safety net that checks, on
 * throw-away caches, that a K-row verify block produces byte-identical logits to K
 * single-token steps, for short random prompts and one longer than the sliding window.
 * On failure (or on request) it reruns with per-layer capture of every sub-op in both
 * arms and names the first divergence in execution order. */
#ifndef LS_DECODE_PROBE_H
#define LS_DECODE_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"
#include "model/session.h"

typedef struct {
    int32_t block_size;      /* K */
    int32_t n_threads;       /* 0: all cores */
    const char *device;      /* "cpu" / "cuda"; NULL: the model's device */
    int32_t tensor_parallel; /* ranks of the probed sessions (ls_session_params; 0 = off) */
    bool trace;              /* always run the localization pass and log per-layer results (or
                              * when the process-wide trace switch is on) */
} ls_probe_options;

typedef struct {
    bool passed;
    int32_t block_row; /* first differing verify-block row (failures) */
    int64_t diff_bytes, total_bytes;
    int32_t layer; /* first divergence: layer (-1 for final-norm / lm-head) */
    bool layer_sliding;
    ls_stage stage;
    int32_t position; /* absolute position of the first divergence */
    bool localized;
    char message[512];
} ls_probe_result;

/* Runs the probe on fresh sessions of `model`. Returns LS_OK when the probe could run
 * (passed or not; see res), an error code if it could not (e.g. out of memory). The
 * process-wide probe fault (ls_probe_set_fault) perturbs the block arm, if set. */
int ls_probe_run(ls_model *model, const ls_probe_options *opt, ls_probe_result *res, char *err, size_t errlen);

/* Memoized per (model, device kind, drafter, K, threads): the probe runs once per process for
 * each combination, on the session's device; when a memo folder is set
 * (ls_probe_set_memo_dir), passing verdicts are also kept on disk, keyed on the model file
 * (path, size, mtime), the engine version and build identity (ls_build_id), the backend, the
 * device kind and name, the drafter, K and the thread count (disk_cache_path in probe.c). */
void ls_probe_run_cached(ls_session *s, const char *drafter, int32_t block_size, ls_probe_result *res);

/* ---- Process-wide switches (set through ls_test_control, include/lockstep.h) ---- */
void ls_probe_set_trace(bool on);
bool ls_probe_trace(void);
/* Folder of the on-disk verdict memo; NULL or "" = none. LS_ERR_ARG if too long. */
int ls_probe_set_memo_dir(const char *dir);
/* The folder into out ("" = none). */
void ls_probe_memo_dir(char *out, size_t cap);
/* Fault injection: every probe from now on perturbs sub-op `stage` (an ls_stage_name) of
 * `layer` (ignored, -1, for the final stages) in its verify blocks; stage NULL turns it off.
 * Forgets the memoized verdicts either way. LS_ERR_ARG for an unknown stage. */
int ls_probe_set_fault(int32_t layer, const char *stage);
/* "off" or "LAYER:STAGE" into out. */
void ls_probe_fault_describe(char *out, size_t cap);

/* ---- Localization (used by ls_probe_run; exposed so tests can feed hand-made rows) ----
 * The rows every (layer, stage) produced for the K block positions of one probe case, from
 * both arms: arm 0 = the single-token chain, arm 1 = the verify block. */
typedef struct {
    int32_t n_layer, k; /* layers; block rows */
    int64_t width;      /* floats kept per row (a prefix of wider rows, e.g. logits) */
    int32_t p0;         /* absolute position of block row 0 */
    float *rows[2];     /* [arm][(n_layer + 1) * LS_STAGE_COUNT][k][width], slot layer + 1 */
    bool *have[2];      /* [arm][(n_layer + 1) * LS_STAGE_COUNT][k] */
} ls_probe_capture;

int ls_probe_capture_init(ls_probe_capture *c, int32_t n_layer, int32_t k, int64_t width);
void ls_probe_capture_free(ls_probe_capture *c);
/* Forget every recorded row; block row 0 is at absolute position p0. */
void ls_probe_capture_reset(ls_probe_capture *c, int32_t p0);
/* Record n rows of one stage for `arm`: row r ([width] floats, rows width apart) is at
 * absolute position pos0 + r; rows outside [p0, p0 + k) (prefill) are ignored. layer is -1
 * for the final-norm and lm-head stages. */
void ls_probe_capture_rows(ls_probe_capture *c, int arm, int32_t layer, ls_stage st, const float *rows, int32_t n,
                           int64_t width, int32_t pos0);

typedef struct {
    int32_t layer; /* -1 for final-norm / lm-head */
    ls_stage stage;
    int32_t position; /* absolute */
} ls_probe_divergence;
/* Compare the arms row by row (bytes) in the forward's execution order: layers 0..n-1
 * (attention, mlp, layer-output each), then final-norm, lm-head; within a stage, block rows
 * in order. Rows recorded in only one arm are skipped. Returns true and the first
 * differing (layer, stage, position) if any row differs; the order in which rows were
 * recorded does not matter. */
bool ls_probe_capture_compare(const ls_probe_capture *c, ls_probe_divergence *first);
/* Number of block rows of (layer, stage) that differ between the arms. */
int32_t ls_probe_capture_diff_rows(const ls_probe_capture *c, int32_t layer, ls_stage st);

#endif
