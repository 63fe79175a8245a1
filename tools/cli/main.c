/* lockstep CLI: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    cli_main_usage(f);
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
    if (!strcmp(cmd, "options")) { /* the option table, for scripts and tests/cli_options.sh */
        cli_opts_dump(stdout);
        return CLI_OK;
    }
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
