/* Process-wide settings of the CLI (docs/settings.md): the options every subcommand takes
 * (--device, --isa, --no-cuda-graphs, --no-probe-cache, --verbose: entries of the option
 * table, options.c, marked common) and the documented environment variables, mapped onto ls_test_control. The library
 * reads no environment variable; this file is where the CLI and the server read them. Command-line options win over the
 * environment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

cli_settings cli_cfg = {.isa = "auto", .cuda_graphs = true, .probe_cache = true};

static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static bool env_off(const char *name) {
    const char *v = getenv(name);
    return v && !strcmp(v, "0");
}

/* LOCKSTEP_TEST_FAULT: LAYER:STAGE (the exactness probe's verify blocks) or
 * alloc:SITE[:COUNT] (allocation failures; COUNT defaults to 1). */
static bool parse_fault(const char *v) {
    static char stage[32], site[32];
    if (!strncmp(v, "alloc:", 6)) {
        int n = 1, used = 0;
        const char *rest = v + 6;
        if (sscanf(rest, "%31[a-z]%n", site, &used) != 1) return false;
        if (rest[used] == ':' && (sscanf(rest + used + 1, "%d%n", &n, &used) != 1 || n < 1)) return false;
        cli_cfg.fault_alloc_site = site;
        cli_cfg.fault_alloc_count = n;
        return true;
    }
    int layer, end = 0;
    if (sscanf(v, "%d:%31[a-z-]%n", &layer, stage, &end) != 2 || v[end]) return false;
    cli_cfg.fault_layer = layer;
    cli_cfg.fault_stage = stage;
    return true;
}

static bool settings_from_env(void) {
    const char *isa = getenv("LOCKSTEP_ISA");
    if (isa && (!strcmp(isa, "scalar") || !strcmp(isa, "avx2"))) cli_cfg.isa = isa;
    if (env_off("LOCKSTEP_CUDA_GRAPHS")) cli_cfg.cuda_graphs = false;
    /* the CUDA decode-step launch merging, piece by piece (docs/cuda.md 2b; A/B runs) */
    if (env_off("LOCKSTEP_CUDA_MERGE")) cli_cfg.cuda_off |= LS_CUDA_OFF_MERGE;
    if (env_off("LOCKSTEP_CUDA_PDL")) cli_cfg.cuda_off |= LS_CUDA_OFF_PDL;
    if (env_off("LOCKSTEP_CUDA_ATTN_FINISH")) cli_cfg.cuda_off |= LS_CUDA_OFF_ATTN_FINISH;
    if (env_off("LOCKSTEP_CUDA_ATTN_SPLIT")) cli_cfg.cuda_off |= LS_CUDA_OFF_ATTN_SPLIT;
    if (env_off("LOCKSTEP_CUDA_GEMV")) cli_cfg.cuda_off |= LS_CUDA_OFF_GEMV;
    if (env_off("LOCKSTEP_CUDA_NARROW")) cli_cfg.cuda_off |= LS_CUDA_OFF_NARROW;
    if (env_off("LOCKSTEP_CUDA_KQ")) cli_cfg.cuda_off |= LS_CUDA_OFF_KQ;
    if (env_off("LOCKSTEP_CUDA_SEGMENT")) cli_cfg.cuda_off |= LS_CUDA_OFF_SEGMENT;
    if (env_off("LOCKSTEP_CUDA_ROW1_WARP")) cli_cfg.cuda_off |= LS_CUDA_OFF_ROW1_WARP;
    if (env_off("LOCKSTEP_PROBE_CACHE")) cli_cfg.probe_cache = false;
    cli_cfg.probe_trace = env_on("LOCKSTEP_PROBE_TRACE");
    const char *fault = getenv("LOCKSTEP_TEST_FAULT");
    if (fault && *fault && !parse_fault(fault)) {
        fprintf(stderr, "lockstep: LOCKSTEP_TEST_FAULT must be LAYER:STAGE or alloc:SITE[:COUNT], got '%s'\n", fault);
        return false;
    }
    /* The probe memo's default folder: $XDG_CACHE_HOME/lockstep/probe, else
     * ~/.cache/lockstep/probe; none when neither variable is set. */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(cli_cfg.probe_cache_dir, sizeof cli_cfg.probe_cache_dir, "%s/lockstep/probe", xdg);
    else if (home && *home)
        snprintf(cli_cfg.probe_cache_dir, sizeof cli_cfg.probe_cache_dir, "%s/.cache/lockstep/probe", home);
    return true;
}

int cli_settings_init(int *argc, char **argv) {
    if (!settings_from_env()) return -1;
    cli_opts o = {0};
    if (!cli_opts_take_common(argc, argv, &o)) return -1;
    if (o.given[OPT_DEVICE]) cli_cfg.device = o.v[OPT_DEVICE].s;
    if (o.given[OPT_ISA]) cli_cfg.isa = o.v[OPT_ISA].s;
    if (o.given[OPT_NO_CUDA_GRAPHS]) cli_cfg.cuda_graphs = false;
    if (o.given[OPT_NO_PROBE_CACHE]) cli_cfg.probe_cache = false;
    if (o.given[OPT_VERBOSE]) cli_cfg.verbose = true;
    /* Applied now, before any model, session or kernel exists (the ISA is chosen once). */
    if (ls_test_control(LS_TESTCTL_ISA, cli_cfg.isa) != LS_OK) {
        fprintf(stderr, "lockstep: could not set the ISA to '%s'\n", cli_cfg.isa);
        return -1;
    }
    ls_test_control(LS_TESTCTL_CUDA_GRAPHS, (int)cli_cfg.cuda_graphs);
    ls_test_control(LS_TESTCTL_CUDA_OFF, cli_cfg.cuda_off);
    if (ls_test_control(LS_TESTCTL_PROBE_MEMO_DIR, cli_cfg.probe_cache ? cli_cfg.probe_cache_dir : NULL) != LS_OK) {
        fprintf(stderr, "lockstep: probe cache folder '%s' is too long\n", cli_cfg.probe_cache_dir);
        return -1;
    }
    cli_set_probe_trace(cli_cfg.probe_trace);
    if (cli_cfg.fault_stage) {
        if (ls_test_control(LS_TESTCTL_FAULT_PROBE, cli_cfg.fault_layer, cli_cfg.fault_stage) != LS_OK) {
            fprintf(stderr,
                    "lockstep: LOCKSTEP_TEST_FAULT: unknown stage '%s' (attention, mlp, layer-output, final-norm, "
                    "lm-head)\n",
                    cli_cfg.fault_stage);
            return -1;
        }
        fprintf(stderr, "lockstep: TEST FAULT INJECTION: layer %d %s in the verify-block path\n", cli_cfg.fault_layer,
                cli_cfg.fault_stage);
    }
    if (cli_cfg.fault_alloc_site) {
        if (ls_test_control(LS_TESTCTL_FAULT_ALLOC, cli_cfg.fault_alloc_site, cli_cfg.fault_alloc_count) != LS_OK) {
            fprintf(stderr, "lockstep: LOCKSTEP_TEST_FAULT: unknown allocation site '%s' (sampler, model)\n",
                    cli_cfg.fault_alloc_site);
            return -1;
        }
        fprintf(stderr, "lockstep: TEST FAULT INJECTION: %d allocation failure(s) at '%s'\n", cli_cfg.fault_alloc_count,
                cli_cfg.fault_alloc_site);
    }
    return 0;
}

void cli_set_probe_trace(bool on) {
    cli_cfg.probe_trace = on;
    ls_test_control(LS_TESTCTL_PROBE_TRACE, (int)on);
}

void cli_print_settings(void) {
    static bool printed;
    if (!cli_cfg.verbose || printed) return;
    printed = true;
    char line[1400];
    ls_test_control(LS_TESTCTL_DESCRIBE, line, sizeof line);
    fprintf(stderr, "lockstep settings: device=%s %s\n", cli_cfg.device ? cli_cfg.device : "auto", line);
}
