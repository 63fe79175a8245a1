/* Option helpers shared by the CLI subcommands. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *cli_default_model_path(void) {
    static char path[4096];
    const char *env = getenv("LOCKSTEP_MODEL");
    if (env && *env) return env;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(path, sizeof path, "%s/lockstep/gemma-3-270m-q4_k_m.gguf", xdg);
    else
        snprintf(path, sizeof path, "%s/.cache/lockstep/gemma-3-270m-q4_k_m.gguf", home ? home : ".");
    return path;
}

ls_model *cli_open_model(const char *path) {
    cli_print_settings();
    if (!path) path = cli_default_model_path();
    char err[512];
    ls_model *m = NULL;
    if (ls_model_open(path, &m, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: cannot load model '%s': %s\n", path, err);
        if (!getenv("LOCKSTEP_MODEL") && strstr(path, ".cache/lockstep"))
            fprintf(stderr, "lockstep: install the default model with: bash scripts/setup.sh\n");
        return NULL;
    }
    if (ls_model_set_device(m, cli_cfg.device, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: %s\n", err);
        ls_model_close(m);
        return NULL;
    }
    return m;
}

const char *cli_resolve_draft(const char *kind, const char *path, bool *ok) {
    *ok = true;
    if (kind && strcmp(kind, "ngram") && strcmp(kind, "model") && strcmp(kind, "assistant")) {
        fprintf(stderr, "lockstep: --draft must be ngram, model or assistant, got '%s'\n", kind);
        *ok = false;
        return NULL;
    }
    if (kind && strcmp(kind, "ngram") && !path) {
        fprintf(stderr, "lockstep: --draft %s needs --model-draft PATH\n", kind);
        *ok = false;
        return NULL;
    }
    if (path && kind && !strcmp(kind, "ngram")) {
        fprintf(stderr, "lockstep: --model-draft does not go with --draft ngram\n");
        *ok = false;
        return NULL;
    }
    if (path && ls_is_assistant_checkpoint(path)) return "assistant";
    if (path && !kind) return "model";
    return kind;
}

ls_drafter *cli_make_drafter(const char *kind, const char *path, ls_model *target, int32_t n_ctx, int32_t n_threads,
                             int32_t ng_min, int32_t ng_max, ls_model **dm) {
    char err[512];
    ls_drafter *d = NULL;
    *dm = NULL;
    if (!kind) return NULL;
    if (!strcmp(kind, "ngram")) {
        if (ls_drafter_ngram_create(ng_min, ng_max, &d, err, sizeof err) != LS_OK)
            fprintf(stderr, "lockstep: %s\n", err);
    } else if (!strcmp(kind, "assistant")) {
        if (ls_drafter_assistant_create(path, target, n_ctx, n_threads, &d, err, sizeof err) != LS_OK)
            fprintf(stderr, "lockstep: assistant drafter '%s': %s\n", path, err);
    } else {
        if (!(*dm = cli_open_model(path))) return NULL;
        if (ls_drafter_model_create(*dm, target, n_ctx, n_threads, &d, err, sizeof err) != LS_OK)
            fprintf(stderr, "lockstep: draft model: %s\n", err);
    }
    return d;
}

char *cli_read_prompt(const cli_common *c, size_t *len) {
    if (c->prompt) {
        *len = strlen(c->prompt);
        return strdup(c->prompt);
    }
    if (!c->file) return NULL;
    FILE *f = fopen(c->file, "rb");
    if (!f) {
        fprintf(stderr, "lockstep: cannot open prompt file '%s': %s\n", c->file, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r < 4096) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "lockstep: cannot read prompt file '%s'\n", c->file);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

bool cli_parse_i32(const char *flag, const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "lockstep: %s expects an integer in [%d, %d], got '%s'\n", flag, lo, hi, s);
        return false;
    }
    *out = (int32_t)v;
    return true;
}

bool cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "lockstep: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "lockstep: %s expects a non-negative integer, got '%s'\n", flag, s);
        return false;
    }
    *out = v;
    return true;
}

int32_t *cli_tokenize(const ls_model *m, const char *text, size_t len, bool add_bos, bool parse_special, int32_t *n) {
    int32_t *ids = ls_model_tokenize_alloc(m, text, len, add_bos, parse_special, n);
    if (!ids) fprintf(stderr, "lockstep: tokenization failed\n");
    return ids;
}

void cli_session_tp(const cli_opts *o, ls_session_params *sp) {
    sp->tensor_parallel = o->given[OPT_TENSOR_PARALLEL] ? o->v[OPT_TENSOR_PARALLEL].i : 0;
    sp->tp_reduce = o->given[OPT_TP_REDUCE] && !strcmp(o->v[OPT_TP_REDUCE].s, "plain");
}
