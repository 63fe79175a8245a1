/* lockstep probe: run the exactness probe (verify block vs single-token chain) for one
 * block size or, by default, K = 2..8. Exit 0 when every K passes, 1 otherwise.
 * LOCKSTEP_TEST_FAULT=LAYER:STAGE (test-only, docs/settings.md) perturbs one sub-op of the
 * block path. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void probe_usage(FILE *f) {
    fprintf(f, "usage: lockstep probe [-m MODEL] [--draft-block-size K] [--trace] [-t N]\n"
               "  Without --draft-block-size, probes K = 2..8.\n");
}

int cmd_probe(int argc, char **argv) {
    enum { O_DBS = 256, O_TRACE };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"draft-block-size", required_argument, 0, O_DBS},
        {"trace", no_argument, 0, O_TRACE},   {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    cli_common c = {0};
    int32_t k = 0;
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "m:t:h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'm': c.model = optarg; break;
        case O_DBS: ok = cli_parse_i32("--draft-block-size", optarg, 2, LS_SPEC_MAX_BLOCK, &k); break;
        case O_TRACE: cli_set_probe_trace(true); break;
        case 't': ok = cli_parse_i32("-t", optarg, 1, 512, &c.n_threads); break;
        case 'h': probe_usage(stdout); return CLI_OK;
        default: probe_usage(stderr); return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    if (optind < argc) {
        probe_usage(stderr);
        return CLI_USAGE;
    }
    ls_probe_params pp = {.n_threads = c.n_threads};
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
