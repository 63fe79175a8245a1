/* lockstep logits: float32 logits of every position, raw little-endian [positions x vocab],
 * to stdout or -o FILE. --mode prefill runs the prompt as one batch, chain one token at a
 * time, prefill:CHUNK in chunks of CHUNK rows. All modes must give identical bytes. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void logits_usage(FILE *f) {
    fprintf(f, "usage: lockstep logits [-m MODEL] (--tokens ID,ID,... | -p TEXT | -f FILE)\n"
               "                       [--mode prefill|chain|prefill:CHUNK] [-o FILE] [-t N] [-c N]\n");
}

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
    enum { O_TOKENS = 256, O_MODE };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'},    {"tokens", required_argument, 0, O_TOKENS},
        {"mode", required_argument, 0, O_MODE}, {"output", required_argument, 0, 'o'},
        {"threads", required_argument, 0, 't'}, {"ctx-size", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    cli_common c = {0};
    const char *tokens_arg = NULL, *mode = "prefill", *outp = NULL;
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "m:p:f:o:t:c:h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'm': c.model = optarg; break;
        case 'p': c.prompt = optarg; break;
        case 'f': c.file = optarg; break;
        case O_TOKENS: tokens_arg = optarg; break;
        case O_MODE: mode = optarg; break;
        case 'o': outp = optarg; break;
        case 't': ok = cli_parse_i32("-t", optarg, 1, 512, &c.n_threads); break;
        case 'c': ok = cli_parse_i32("-c", optarg, 1, 1 << 24, &c.n_ctx); break;
        case 'h': logits_usage(stdout); return CLI_OK;
        default: logits_usage(stderr); return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    int given = !!tokens_arg + !!c.prompt + !!c.file;
    if (optind < argc || given != 1) {
        logits_usage(stderr);
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
    if (ls_session_create(m, &sp, &s, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: %s\n", err);
        goto done;
    }
    int32_t nv = ls_session_n_vocab(s);
    logits = malloc(sizeof(float) * (size_t)chunk * (size_t)nv);
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
    free(logits);
    ls_session_free(s);
    free(ids);
    free(text);
    ls_model_close(m);
    return rc;
}
