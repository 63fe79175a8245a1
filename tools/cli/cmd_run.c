/* lockstep run: generate text. Generated text only on stdout; with --stats, timings on
 * stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* The default model (Gemma 3 270M) is a base model: a completion prompt suits it better
 * than a chat turn. */
static const char *DEFAULT_PROMPT = "Once upon a time, in a small village by the sea,";

static bool write_out(const char *text, size_t len, void *ud) {
    (void)ud;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* The options of `run` (options.c) into the common fields, the generation parameters and
 * the drafter settings; the table's ranges are already checked. */
static void run_params(const cli_opts *o, cli_common *c, ls_gen_params *gp) {
    c->model = o->v[OPT_MODEL].s;
    c->prompt = o->v[OPT_PROMPT].s;
    c->file = o->v[OPT_FILE].s;
    c->n_threads = o->v[OPT_THREADS].i;
    c->n_ctx = o->v[OPT_CTX_SIZE].i;
    gp->n_predict = o->v[OPT_N_PREDICT].i;
    gp->sampling.temperature = o->v[OPT_TEMP].f;
    gp->sampling.top_k = o->v[OPT_TOP_K].i;
    gp->sampling.top_p = o->v[OPT_TOP_P].f;
    gp->sampling.min_p = o->v[OPT_MIN_P].f;
    gp->sampling.repeat_penalty = o->v[OPT_REPEAT_PENALTY].f;
    gp->sampling.repeat_last_n = o->v[OPT_REPEAT_LAST_N].i;
    gp->sampling.frequency_penalty = o->v[OPT_FREQUENCY_PENALTY].f;
    gp->sampling.presence_penalty = o->v[OPT_PRESENCE_PENALTY].f;
    gp->sampling.seed = o->v[OPT_SEED].u;
    gp->ignore_eos = o->v[OPT_IGNORE_EOS].on;
    gp->block_size = o->v[OPT_DRAFT_BLOCK_SIZE].i;
    gp->spec_sampling = !strcmp(o->v[OPT_SPEC_SAMPLING].s, "rejection") ? LS_SPEC_REJECTION : LS_SPEC_EXACT;
    if (o->v[OPT_NO_ADAPTIVE].on) gp->adaptive = false;
    if (o->v[OPT_ALLOW_INEXACT].on) gp->allow_inexact = true;
    if (o->v[OPT_TRACE].on) cli_set_probe_trace(true);
}

/* --json-schema / --json-schema-file: the compiled grammar, or NULL with *ok false. */
static ls_grammar *run_grammar(const cli_opts *o, bool *ok) {
    *ok = true;
    const char *inline_schema = o->v[OPT_JSON_SCHEMA].s, *file = o->v[OPT_JSON_SCHEMA_FILE].s;
    if (!inline_schema && !file) return NULL;
    *ok = false;
    if (inline_schema && file) {
        fprintf(stderr, "lockstep: give --json-schema or --json-schema-file, not both\n");
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "lockstep: --json-schema-file: cannot open %s\n", file);
            return NULL;
        }
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            char *t = realloc(text, len + n + 1);
            if (!t) break;
            text = t;
            memcpy(text + len, buf, n);
            len += n;
        }
        fclose(f);
    }
    char err[512];
    ls_grammar *g = ls_grammar_json_schema(file ? (text ? text : "") : inline_schema,
                                           file ? len : strlen(inline_schema), err, sizeof err);
    free(text);
    if (!g) fprintf(stderr, "lockstep: %s: %s\n", file ? "--json-schema-file" : "--json-schema", err);
    *ok = g != NULL;
    return g;
}

/* The table's values start at the library's defaults, which `run -h` documents. */
static void run_defaults(cli_opts *o, const ls_gen_params *gp) {
    memset(o, 0, sizeof *o);
    o->v[OPT_N_PREDICT].i = gp->n_predict;
    o->v[OPT_TEMP].f = gp->sampling.temperature;
    o->v[OPT_TOP_K].i = gp->sampling.top_k;
    o->v[OPT_TOP_P].f = gp->sampling.top_p;
    o->v[OPT_MIN_P].f = gp->sampling.min_p;
    o->v[OPT_REPEAT_PENALTY].f = gp->sampling.repeat_penalty;
    o->v[OPT_REPEAT_LAST_N].i = gp->sampling.repeat_last_n;
    o->v[OPT_FREQUENCY_PENALTY].f = gp->sampling.frequency_penalty;
    o->v[OPT_PRESENCE_PENALTY].f = gp->sampling.presence_penalty;
    o->v[OPT_DRAFT_BLOCK_SIZE].i = gp->block_size;
    o->v[OPT_DRAFT_NGRAM_MIN].i = LS_NGRAM_DEFAULT_MIN;
    o->v[OPT_DRAFT_NGRAM_MAX].i = LS_NGRAM_DEFAULT_MAX;
    o->v[OPT_SPEC_SAMPLING].s = gp->spec_sampling == LS_SPEC_REJECTION ? "rejection" : "exact";
}

int cmd_run(int argc, char **argv) {
    cli_common c = {0};
    ls_gen_params gp = ls_gen_default_params();
    const char *ai = getenv("LOCKSTEP_ALLOW_INEXACT");
    gp.allow_inexact = ai && *ai && strcmp(ai, "0") != 0;
    cli_opts o;
    run_defaults(&o, &gp);
    int pr = cli_opts_parse(CLI_CMD_RUN, argc, argv, &o);
    if (pr != CLI_CONTINUE) return pr;
    run_params(&o, &c, &gp);
    bool chat = o.v[OPT_CHAT].on, stats = o.v[OPT_STATS].on, seed_set = o.given[OPT_SEED];
    const char *draft_kind = o.v[OPT_DRAFT].s, *draft_path = o.v[OPT_MODEL_DRAFT].s;
    int32_t ng_min = o.v[OPT_DRAFT_NGRAM_MIN].i, ng_max = o.v[OPT_DRAFT_NGRAM_MAX].i;
    int32_t n_batch = o.v[OPT_BATCH_SIZE].i;
    if (c.prompt && c.file) {
        fprintf(stderr, "lockstep: give -p or -f, not both\n");
        return CLI_USAGE;
    }
    bool draft_ok;
    draft_kind = cli_resolve_draft(draft_kind, draft_path, &draft_ok);
    if (!draft_ok) return CLI_USAGE;
    if (ng_min > ng_max) {
        fprintf(stderr, "lockstep: --draft-ngram-min must not exceed --draft-ngram-max\n");
        return CLI_USAGE;
    }
    bool grammar_ok;
    ls_grammar *grammar = run_grammar(&o, &grammar_ok);
    if (!grammar_ok) return CLI_USAGE;
    gp.grammar = grammar;
    if (!seed_set) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        gp.sampling.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    size_t len = 0;
    char *text;
    if (c.prompt || c.file) {
        text = cli_read_prompt(&c, &len);
        if (!text) {
            ls_grammar_free(grammar);
            return CLI_USAGE;
        }
    } else {
        text = strdup(DEFAULT_PROMPT);
        len = strlen(text);
    }
    ls_model *m = cli_open_model(c.model);
    if (!m) {
        free(text);
        ls_grammar_free(grammar);
        return CLI_FAIL;
    }
    int rc = CLI_FAIL;
    char err[512];
    int32_t *ids = NULL, n_ids = 0;
    ls_session *s = NULL;
    ls_model *dm = NULL;
    ls_drafter *drafter = NULL;
    if (chat) {
        ls_message msg = {"user", text};
        char *rendered = ls_chat_apply(m, &msg, 1, err, sizeof err);
        if (!rendered) {
            fprintf(stderr, "lockstep: chat template: %s\n", err);
            goto done;
        }
        ids = cli_tokenize(m, rendered, strlen(rendered), false, true, &n_ids);
        free(rendered);
    } else {
        ids = cli_tokenize(m, text, len, true, true, &n_ids);
    }
    if (!ids) goto done;
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = c.n_ctx;
    sp.n_threads = c.n_threads;
    if (n_batch) sp.n_batch = n_batch;
    cli_session_tp(&o, &sp);
    if (ls_session_create(m, &sp, &s, err, sizeof err) != LS_OK) {
        fprintf(stderr, "lockstep: %s\n", err);
        goto done;
    }
    if (draft_kind &&
        !(drafter = cli_make_drafter(draft_kind, draft_path, m, ls_session_n_ctx(s), c.n_threads, ng_min, ng_max, &dm)))
        goto done;
    gp.drafter = drafter;
    ls_gen_stats st;
    if (ls_generate(s, ids, n_ids, &gp, write_out, NULL, &st, err, sizeof err) != LS_OK) {
        fprintf(stderr, "\nlockstep: generation failed: %s\n", err);
        goto done;
    }
    printf("\n");
    if (stats) {
        char line[2048];
        ls_gen_stats_format(&st, line, sizeof line);
        fprintf(stderr, "lockstep stats: %s drafter=%s threads=%d seed=%llu device=%s backend=%s\n", line,
                ls_drafter_name(drafter), ls_session_n_threads(s), (unsigned long long)gp.sampling.seed,
                ls_session_device(s), ls_device_name_of(ls_session_device(s)));
    }
    rc = CLI_OK;
done:
    ls_drafter_free(drafter);
    ls_model_close(dm);
    ls_session_free(s);
    free(ids);
    free(text);
    ls_grammar_free(grammar);
    ls_model_close(m);
    return rc;
}
