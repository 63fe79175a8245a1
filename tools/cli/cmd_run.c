/* lockstep run: generate text. Generated text only on stdout; with --stats, timings on
 * stderr. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* The default model (Gemma 3 270M) is a base model: a completion prompt suits it better
 * than a chat turn. */
static const char *DEFAULT_PROMPT = "Once upon a time, in a small village by the sea,";

static void run_usage(FILE *f) {
    fprintf(f, "usage: lockstep run [-m MODEL] [-p TEXT | -f FILE] [-n N] [--chat] [--temp T] [--top-k K]\n"
               "                    [--top-p P] [--min-p M] [--repeat-penalty R] [--repeat-last-n N]\n"
               "                    [--frequency-penalty F] [--presence-penalty P] [--seed S] [-t N] [-c N]\n"
               "                    [-b N] [--ignore-eos] [--stats]\n"
               "                    [--draft ngram|model|assistant] [--model-draft PATH] [--draft-block-size K]\n"
               "                    [--draft-ngram-min N] [--draft-ngram-max N] [--spec-sampling exact|rejection]\n"
               "                    [--no-adaptive] [--allow-inexact] [--trace]\n"
               "  -m and --model-draft take a GGUF file or a Hugging Face / MLX checkpoint directory; a\n"
               "  gemma4_assistant directory as --model-draft selects the assistant drafter by itself.\n"
               "  Without -p/-f a default story prompt is used.\n"
               "  Defaults: -n 256, --temp 0.8, --top-k 40, --top-p 0.95, --min-p 0.05, seed random.\n"
               "  Speculative decoding (--draft) gives byte-identical output to plain decoding with the same\n"
               "  seed (--spec-sampling exact, the default); an exactness probe checks this at start-up.\n");
}

static bool write_out(const char *text, size_t len, void *ud) {
    (void)ud;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

int cmd_run(int argc, char **argv) {
    enum {
        O_CHAT = 256,
        O_TEMP,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_REPN,
        O_FREQ,
        O_PRES,
        O_SEED,
        O_IGN,
        O_STATS,
        O_DRAFT,
        O_MDRAFT,
        O_DBS,
        O_NGMIN,
        O_NGMAX,
        O_SPECS,
        O_NOADAPT,
        O_INEXACT,
        O_TRACE
    };
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"file", required_argument, 0, 'f'},
                                         {"n-predict", required_argument, 0, 'n'},
                                         {"threads", required_argument, 0, 't'},
                                         {"ctx-size", required_argument, 0, 'c'},
                                         {"batch-size", required_argument, 0, 'b'},
                                         {"chat", no_argument, 0, O_CHAT},
                                         {"temp", required_argument, 0, O_TEMP},
                                         {"top-k", required_argument, 0, O_TOPK},
                                         {"top-p", required_argument, 0, O_TOPP},
                                         {"min-p", required_argument, 0, O_MINP},
                                         {"repeat-penalty", required_argument, 0, O_REP},
                                         {"repeat-last-n", required_argument, 0, O_REPN},
                                         {"frequency-penalty", required_argument, 0, O_FREQ},
                                         {"presence-penalty", required_argument, 0, O_PRES},
                                         {"seed", required_argument, 0, O_SEED},
                                         {"ignore-eos", no_argument, 0, O_IGN},
                                         {"stats", no_argument, 0, O_STATS},
                                         {"draft", required_argument, 0, O_DRAFT},
                                         {"model-draft", required_argument, 0, O_MDRAFT},
                                         {"draft-block-size", required_argument, 0, O_DBS},
                                         {"draft-ngram-min", required_argument, 0, O_NGMIN},
                                         {"draft-ngram-max", required_argument, 0, O_NGMAX},
                                         {"spec-sampling", required_argument, 0, O_SPECS},
                                         {"no-adaptive", no_argument, 0, O_NOADAPT},
                                         {"allow-inexact", no_argument, 0, O_INEXACT},
                                         {"trace", no_argument, 0, O_TRACE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_common c = {0};
    ls_gen_params gp = ls_gen_default_params();
    bool chat = false, stats = false, seed_set = false;
    const char *draft_kind = NULL, *draft_path = NULL;
    int32_t ng_min = LS_NGRAM_DEFAULT_MIN, ng_max = LS_NGRAM_DEFAULT_MAX;
    const char *ai = getenv("LOCKSTEP_ALLOW_INEXACT");
    gp.allow_inexact = ai && *ai && strcmp(ai, "0") != 0;
    int32_t n_batch = 0;
    optind = 1;
    opterr = 1;
    int o;
    while ((o = getopt_long(argc, argv, "m:p:f:n:t:c:b:h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'm': c.model = optarg; break;
        case 'p': c.prompt = optarg; break;
        case 'f': c.file = optarg; break;
        case 'n': ok = cli_parse_i32("-n", optarg, -1, 1 << 24, &gp.n_predict); break;
        case 't': ok = cli_parse_i32("-t", optarg, 1, 512, &c.n_threads); break;
        case 'c': ok = cli_parse_i32("-c", optarg, 1, 1 << 24, &c.n_ctx); break;
        case 'b': ok = cli_parse_i32("-b", optarg, 1, 1 << 16, &n_batch); break;
        case O_CHAT: chat = true; break;
        case O_TEMP: ok = cli_parse_f32("--temp", optarg, 0, 100, &gp.sampling.temperature); break;
        case O_TOPK: ok = cli_parse_i32("--top-k", optarg, 0, 1 << 24, &gp.sampling.top_k); break;
        case O_TOPP: ok = cli_parse_f32("--top-p", optarg, 0, 1, &gp.sampling.top_p); break;
        case O_MINP: ok = cli_parse_f32("--min-p", optarg, 0, 1, &gp.sampling.min_p); break;
        case O_REP: ok = cli_parse_f32("--repeat-penalty", optarg, 0, 100, &gp.sampling.repeat_penalty); break;
        case O_REPN: ok = cli_parse_i32("--repeat-last-n", optarg, -1, 1 << 24, &gp.sampling.repeat_last_n); break;
        case O_FREQ:
            ok = cli_parse_f32("--frequency-penalty", optarg, -100, 100, &gp.sampling.frequency_penalty);
            break;
        case O_PRES: ok = cli_parse_f32("--presence-penalty", optarg, -100, 100, &gp.sampling.presence_penalty); break;
        case O_SEED:
            ok = cli_parse_u64("--seed", optarg, &gp.sampling.seed);
            seed_set = true;
            break;
        case O_IGN: gp.ignore_eos = true; break;
        case O_STATS: stats = true; break;
        case O_DRAFT: draft_kind = optarg; break;
        case O_MDRAFT: draft_path = optarg; break;
        case O_DBS: ok = cli_parse_i32("--draft-block-size", optarg, 2, LS_SPEC_MAX_BLOCK, &gp.block_size); break;
        case O_NGMIN: ok = cli_parse_i32("--draft-ngram-min", optarg, 1, 64, &ng_min); break;
        case O_NGMAX: ok = cli_parse_i32("--draft-ngram-max", optarg, 1, 64, &ng_max); break;
        case O_SPECS:
            if (!strcmp(optarg, "exact"))
                gp.spec_sampling = LS_SPEC_EXACT;
            else if (!strcmp(optarg, "rejection"))
                gp.spec_sampling = LS_SPEC_REJECTION;
            else {
                fprintf(stderr, "lockstep: --spec-sampling must be exact or rejection\n");
                ok = false;
            }
            break;
        case O_NOADAPT: gp.adaptive = false; break;
        case O_INEXACT: gp.allow_inexact = true; break;
        case O_TRACE: cli_set_probe_trace(true); break;
        case 'h': run_usage(stdout); return CLI_OK;
        default: run_usage(stderr); return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    if (optind < argc) {
        fprintf(stderr, "lockstep: unexpected argument '%s'\n", argv[optind]);
        run_usage(stderr);
        return CLI_USAGE;
    }
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
    if (!seed_set) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        gp.sampling.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    size_t len = 0;
    char *text;
    if (c.prompt || c.file) {
        text = cli_read_prompt(&c, &len);
        if (!text) return CLI_USAGE;
    } else {
        text = strdup(DEFAULT_PROMPT);
        len = strlen(text);
    }
    ls_model *m = cli_open_model(c.model);
    if (!m) {
        free(text);
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
    ls_model_close(m);
    return rc;
}
