/* lockstep probe: run the exactness probe (verify block vs single-token chain) for one
 * block size or, by default, K = 2..8. Exit 0 when every K passes, 1 otherwise.
 * LOCKSTEP_TEST_FAULT=LAYER:STAGE (test-only, docs/settings.md) perturbs one sub-op of the
 * block path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_probe(int argc, char **argv) {
    cli_opts o;
    memset(&o, 0, sizeof o);
    int pr = cli_opts_parse(CLI_CMD_PROBE, argc, argv, &o);
    if (pr != CLI_CONTINUE) return pr;
    if (o.v[OPT_TRACE].on) cli_set_probe_trace(true);
    cli_common c = {.model = o.v[OPT_MODEL].s, .n_threads = o.v[OPT_THREADS].i};
    int32_t k = o.v[OPT_DRAFT_BLOCK_SIZE].i; /* 0: K = 2..8 */
    ls_probe_params pp = {.n_threads = c.n_threads,
                          .tensor_parallel = o.given[OPT_TENSOR_PARALLEL] ? o.v[OPT_TENSOR_PARALLEL].i : 0};
    ls_model *m = cli_open_model(c.model);
    if (!m) return CLI_FAIL;
    int rc = CLI_OK;
    int32_t k0 = k ? k : 2, k1 = k ? k : 8;
    for (int32_t kk = k0; kk <= k1; kk++) {
        pp.block_size = kk;
        char msg[600], err[256];
        bool passed;
        if (ls_probe(m, &pp, &passed, msg, sizeof msg, err, sizeof err) != LS_OK) {
            fprintf(stderr, "lockstep: probe K=%d could not run: %s\n", kk, err);
            rc = CLI_FAIL;
            break;
        }
        if (passed)
            fprintf(stderr, "lockstep INFO: %s\n", msg);
        else {
            fprintf(stderr, "lockstep WARN: exactness probe failed for K=%d: %s\n", kk, msg);
            rc = CLI_FAIL;
        }
    }
    ls_model_close(m);
    return rc;
}
