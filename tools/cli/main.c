/* lockstep CLI: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: lockstep <command> [options]\n"
               "commands:\n"
               "  run       generate text            (lockstep run -h)\n"
               "  tokenize  print token ids          (lockstep tokenize -h)\n"
               "  logits    dump float32 logits      (lockstep logits -h)\n"
               "  bench     prefill/decode tok/s     (lockstep bench -h)\n"
               "  probe     exactness probe          (lockstep probe -h)\n"
               "  serve     OpenAI-compatible server (lockstep serve -h)\n"
               "  version   print the version\n"
               "common options (any subcommand; docs/settings.md):\n"
               "  --device cpu|cuda|auto  where the model runs (default: cuda when built with CUDA and a\n"
               "                          GPU is present, else cpu)\n"
               "  --isa auto|scalar       CPU kernels (scalar: the reference kernels, same bits; LOCKSTEP_ISA)\n"
               "  --no-cuda-graphs        launch CUDA ops directly (LOCKSTEP_CUDA_GRAPHS=0)\n"
               "  --no-probe-cache        do not remember passing exactness-probe verdicts in\n"
               "                          $XDG_CACHE_HOME/lockstep/probe or ~/.cache/lockstep/probe\n"
               "                          (LOCKSTEP_PROBE_CACHE=0)\n"
               "  --verbose               print the effective settings on stderr\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (cli_settings_init(&argc, argv) != 0) return CLI_USAGE;
    if (argc < 2) { /* only common options */
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "probe")) return cmd_probe(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("lockstep %s (%s)\n", ls_version(), ls_backend_name());
        return CLI_OK;
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    fprintf(stderr, "lockstep: unknown command '%s'\n", cmd);
    usage(stderr);
    return CLI_USAGE;
}
