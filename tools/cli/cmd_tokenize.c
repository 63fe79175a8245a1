/* lockstep tokenize: token ids of a text, one line, space separated (BOS included when the
 * model adds one; special-token text is parsed as special tokens unless --no-special). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    cli_opts o;
    memset(&o, 0, sizeof o);
    int pr = cli_opts_parse(CLI_CMD_TOKENIZE, argc, argv, &o);
    if (pr != CLI_CONTINUE) return pr;
    cli_common c = {.model = o.v[OPT_MODEL].s, .prompt = o.v[OPT_PROMPT].s, .file = o.v[OPT_FILE].s};
    bool bos = !o.v[OPT_NO_BOS].on, special = !o.v[OPT_NO_SPECIAL].on;
    if ((!c.prompt && !c.file) || (c.prompt && c.file)) {
        cli_usage(CLI_CMD_TOKENIZE, stderr);
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
