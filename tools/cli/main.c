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
               "common: --device cpu|cuda|auto  where the model runs (default: cuda when built with\n"
               "        CUDA and a GPU is present, else cpu)\n");
}

/* --device cpu|cuda|auto is taken by every subcommand that runs the model (run, logits,
 * bench, probe, serve): it is removed from argv here and applied when the model opens. */
static int take_device(int *argc, char **argv) {
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--device") != 0) continue;
        if (i + 1 >= *argc) {
            fprintf(stderr, "lockstep: --device needs a value (cpu, cuda or auto)\n");
            return -1;
        }
        const char *v = argv[i + 1];
        if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto")) {
            fprintf(stderr, "lockstep: --device must be cpu, cuda or auto, got '%s'\n", v);
            return -1;
        }
        cli_device = v;
        for (int j = i; j + 2 <= *argc; j++) argv[j] = argv[j + 2];
        *argc -= 2;
        i--;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (take_device(&argc, argv) != 0) return CLI_USAGE;
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
