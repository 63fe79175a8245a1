/* lockstep tokenize: token ids of a text, one line, space separated (BOS included when the
 * model adds one; special-token text is parsed as special tokens unless --no-special). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

static void tok_usage(FILE *f) {
    fprintf(f, "usage: lockstep tokenize [-m MODEL] (-p TEXT | -f FILE) [--no-bos] [--no-special]\n");
}

int cmd_tokenize(int argc, char **argv) {
    enum { O_NOBOS = 256, O_NOSPECIAL };
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"file", required_argument, 0, 'f'},
                                         {"no-bos", no_argument, 0, O_NOBOS},
                                         {"no-special", no_argument, 0, O_NOSPECIAL},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_common c = {0};
    bool bos = true, special = true;
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "m:p:f:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': c.model = optarg; break;
        case 'p': c.prompt = optarg; break;
        case 'f': c.file = optarg; break;
        case O_NOBOS: bos = false; break;
        case O_NOSPECIAL: special = false; break;
        case 'h': tok_usage(stdout); return CLI_OK;
        default: tok_usage(stderr); return CLI_USAGE;
        }
    }
    if (optind < argc || (!c.prompt && !c.file) || (c.prompt && c.file)) {
        tok_usage(stderr);
        return CLI_USAGE;
    }
    size_t len;
    char *text = cli_read_prompt(&c, &len);
    if (!text) return CLI_USAGE;
    ls_model *m = cli_open_model(c.model);
    if (!m) {
        free(text);
        return CLI_FAIL;
    }
    int32_t n = 0;
    int32_t *ids = cli_tokenize(m, text, len, bos, special, &n);
    int rc = ids ? CLI_OK : CLI_FAIL;
    for (int32_t i = 0; ids && i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    if (ids) printf("\n");
    free(ids);
    free(text);
    ls_model_close(m);
    return rc;
}
