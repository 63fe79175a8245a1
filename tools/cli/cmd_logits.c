/* lockstep logits: float32 logits of every position, raw little-endian [positions x vocab],
 * to stdout or -o FILE. --mode prefill runs the prompt as one batch, chain one token at a
 * time, prefill:CHUNK in chunks of CHUNK rows. All modes must give identical bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int32_t *parse_tokens(const char *s, int32_t *n) {
    int32_t cap = 16, k = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    const char *p = s;
    while (ids && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > (1L << 30)) {
            fprintf(stderr, "lockstep: --tokens expects comma-separated non-negative ids, got '%s'\n", s);
            free(ids);
            return NULL;
        }
        if (k == cap) {
            int32_t *nb = realloc(ids, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!nb) break;
            ids = nb;
        }
        ids[k++] = (int32_t)v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p) {
            fprintf(stderr, "lockstep: --tokens: unexpected '%c'\n", *p);
            free(ids);
            return NULL;
        }
    }
    if (!ids || k == 0) {
        fprintf(stderr, "lockstep: --tokens is empty\n");
        free(ids);
        return NULL;
    }
    *n = k;
    return ids;
}

int cmd_logits(int argc, char **argv) {
    cli_opts o;
    memset(&o, 0, sizeof o);
    o.v[OPT_MODE].s = "prefill";
    int pr = cli_opts_parse(CLI_CMD_LOGITS, argc, argv, &o);
    if (pr != CLI_CONTINUE) return pr;
    cli_common c = {.model = o.v[OPT_MODEL].s,
                    .prompt = o.v[OPT_PROMPT].s,
                    .file = o.v[OPT_FILE].s,
                    .n_threads = o.v[OPT_THREADS].i,
                    .n_ctx = o.v[OPT_CTX_SIZE].i};
    const char *tokens_arg = o.v[OPT_TOKENS].s, *mode = o.v[OPT_MODE].s, *outp = o.v[OPT_OUTPUT].s;
    int given = !!tokens_arg + !!c.prompt + !!c.file;
    if (given != 1) {
        cli_usage(CLI_CMD_LOGITS, stderr);
        return CLI_USAGE;
    }
    int32_t chunk = 0; /* 0 = whole prompt in one batch */
    if (!strcmp(mode, "chain"))
        chunk = 1;
    else if (!strncmp(mode, "prefill:", 8)) {
        if (!cli_parse_i32("--mode prefill:CHUNK", mode + 8, 1, 1 << 20, &chunk)) return CLI_USAGE;
    } else if (strcmp(mode, "prefill") != 0) {
        fprintf(stderr, "lockstep: --mode must be prefill, chain or prefill:CHUNK, got '%s'\n", mode);
        return CLI_USAGE;
    }
    int32_t n = 0, *ids = NULL;
    char *text = NULL;
    if (tokens_arg) {
        ids = parse_tokens(tokens_arg, &n);
        if (!ids) return CLI_USAGE;
    } else {
        size_t len;
        text = cli_read_prompt(&c, &len);
        if (!text) return CLI_USAGE;
    }
    ls_model *m = cli_open_model(c.model);
    if (!m) {
        free(ids);
        free(text);
        return CLI_FAIL;
    }
    int rc = CLI_FAIL;
    FILE *out = NULL;
    float *logits = NULL;
    ls_session *s = NULL;
    char err[512];
    if (text) {
        ids = cli_tokenize(m, text, strlen(text), true, true, &n);
        if (!ids) goto done;
    }
    if (chunk == 0 || chunk > n) chunk = n;
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = c.n_ctx ? c.n_ctx : (n < 4096 ? 4096 : n);
    sp.n_threads = c.n_threads;
    sp.n_batch = chunk;
    cli_session_tp(&o, &sp);
    if (ls_session_create(m, &sp, &s, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: %s\n", err);
        goto done;
    }
    int32_t nv = ls_session_n_vocab(s);
    logits = ls_session_logits_buffer(s, chunk); /* s's: freed with it */
    out = outp ? fopen(outp, "wb") : stdout;
    if (!logits || !out) {
        fprintf(stderr, "lockstep: %s\n", !logits ? "out of memory" : "cannot open output file");
        goto done;
    }
    for (int32_t i = 0; i < n; i += chunk) {
        int32_t k = n - i < chunk ? n - i : chunk;
        if (ls_session_eval(s, ids + i, k, 0, logits, err, sizeof err) != LS_OK) {
            fprintf(stderr, "lockstep: %s\n", err);
            goto done;
        }
        if (fwrite(logits, sizeof(float) * (size_t)nv, (size_t)k, out) != (size_t)k) {
            fprintf(stderr, "lockstep: write failed\n");
            goto done;
        }
    }
    rc = CLI_OK;
done:
    if (out && out != stdout && fclose(out) != 0) rc = CLI_FAIL;
    if (out == stdout) fflush(stdout);
    ls_session_free(s);
    free(ids);
    free(text);
    ls_model_close(m);
    return rc;
}
