/* The option table shared by every subcommand (docs/settings.md, "The option table"), its
 * parser and the usage texts generated from it. Spellings follow llama-server / llama-cli
 * where those have the option; every spelling lockstep had before stays an alias. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"

enum {
    RUN = CLI_CMD_RUN,
    TOK = CLI_CMD_TOKENIZE,
    LOG = CLI_CMD_LOGITS,
    BEN = CLI_CMD_BENCH,
    PRO = CLI_CMD_PROBE,
    SRV = CLI_CMD_SERVE,
    ALL = CLI_CMD_ALL
};
#define I24 16777216.0 /* 1 << 24 */
#define DAY 86400.0

/* clang-format off */
const cli_opt cli_opt_table[] = {
    {OPT_MODEL, "--model", {"-m"}, OPT_T_STR, "PATH", 0, 0, ALL, false,
     "GGUF file or Hugging Face / MLX checkpoint directory (default: the model scripts/setup.sh installs, "
     "or $LOCKSTEP_MODEL)"},
    {OPT_PROMPT, "--prompt", {"-p"}, OPT_T_STR, "TEXT", 0, 0, RUN | TOK | LOG, false, "prompt text"},
    {OPT_FILE, "--file", {"-f"}, OPT_T_STR, "FILE", 0, 0, RUN | TOK | LOG, false, "read the prompt from FILE"},
    {OPT_TOKENS, "--tokens", {0}, OPT_T_STR, "ID,ID,...", 0, 0, LOG, false, "token ids instead of a prompt"},
    {OPT_MODE, "--mode", {0}, OPT_T_STR, "prefill|chain|prefill:CHUNK", 0, 0, LOG, false,
     "prefill: the prompt as one batch (default); chain: one token at a time; prefill:CHUNK: batches of "
     "CHUNK rows"},
    {OPT_OUTPUT, "--output", {"-o"}, OPT_T_STR, "FILE", 0, 0, LOG, false, "write the logits to FILE (default: stdout)"},
    {OPT_N_PREDICT, "--n-predict", {"-n"}, OPT_T_INT, "N", -1, I24, RUN, false,
     "tokens to generate (default 256; -1: until end of text or the context is full)"},
    {OPT_THREADS, "--threads", {"-t"}, OPT_T_INT, "N", 1, 512, RUN | LOG | BEN | PRO | SRV, false,
     "threads of the forward steps (default: all cores)"},
    {OPT_CTX_SIZE, "--ctx-size", {"-c"}, OPT_T_INT, "N", 1, I24, RUN | LOG | SRV, false,
     "context length, per slot in serve (default: the model's training context; logits: 4096 or the "
     "prompt length)"},
    {OPT_BATCH_SIZE, "--batch-size", {"-b"}, OPT_T_INT, "N", 1, CLI_MAX_BATCH, RUN | SRV, false,
     "most rows of one forward step (run: default 512; serve: the prompt chunk of one request per step, "
     "default 64, so a long prompt does not stall the other streams); a smaller batch than "
     "--draft-block-size caps K, and 1 turns speculation off"},
    {OPT_CHAT, "--chat", {0}, OPT_T_FLAG, NULL, 0, 0, RUN, false, "wrap the prompt in the model's chat template"},
    {OPT_TEMP, "--temp", {0}, OPT_T_FLOAT, "T", 0, 100, RUN, false, "temperature (default 0.8; 0: greedy)"},
    {OPT_TOP_K, "--top-k", {0}, OPT_T_INT, "K", 0, I24, RUN, false, "top-k sampling (default 40; 0: off)"},
    {OPT_TOP_P, "--top-p", {0}, OPT_T_FLOAT, "P", 0, 1, RUN, false, "top-p sampling (default 0.95)"},
    {OPT_MIN_P, "--min-p", {0}, OPT_T_FLOAT, "P", 0, 1, RUN, false, "min-p sampling (default 0.05)"},
    {OPT_REPEAT_PENALTY, "--repeat-penalty", {0}, OPT_T_FLOAT, "R", 0, 100, RUN, false,
     "repetition penalty (default 1.0: off)"},
    {OPT_REPEAT_LAST_N, "--repeat-last-n", {0}, OPT_T_INT, "N", -1, I24, RUN, false,
     "tokens the penalties look back over (default 64; -1: the context)"},
    {OPT_FREQUENCY_PENALTY, "--frequency-penalty", {0}, OPT_T_FLOAT, "F", -100, 100, RUN, false,
     "frequency penalty (default 0)"},
    {OPT_PRESENCE_PENALTY, "--presence-penalty", {0}, OPT_T_FLOAT, "P", -100, 100, RUN, false,
     "presence penalty (default 0)"},
    {OPT_SEED, "--seed", {"-s"}, OPT_T_U64, "S", 0, 0, RUN, false, "sampling seed (default: random)"},
    {OPT_JSON_SCHEMA, "--json-schema", {"-j"}, OPT_T_STR, "SCHEMA", 0, 0, RUN, false,
     "constrain the output to JSON valid against this JSON schema (docs/structured_output.md)"},
    {OPT_JSON_SCHEMA_FILE, "--json-schema-file", {"-jf"}, OPT_T_STR, "FILE", 0, 0, RUN, false,
     "the same, with the schema read from FILE"},
    {OPT_IGNORE_EOS, "--ignore-eos", {0}, OPT_T_FLAG, NULL, 0, 0, RUN, false, "go on past end-of-text tokens"},
    {OPT_STATS, "--stats", {0}, OPT_T_FLAG, NULL, 0, 0, RUN, false, "timings and speculation counts on stderr"},
    {OPT_DRAFT, "--draft", {0}, OPT_T_ENUM, "ngram|model|assistant", 0, 0, RUN | SRV, false,
     "speculative decoding with this drafter (docs/speculative.md)"},
    {OPT_MODEL_DRAFT, "--model-draft", {"-md"}, OPT_T_STR, "PATH", 0, 0, RUN | SRV, false,
     "the draft model (GGUF or checkpoint directory); a gemma4_assistant directory selects the assistant "
     "drafter by itself"},
    {OPT_DRAFT_BLOCK_SIZE, "--draft-block-size", {0}, OPT_T_INT, "K", 2, LS_SPEC_MAX_BLOCK, RUN | PRO | SRV, false,
     "verify block rows K (default 4; probe: K = 2..8 without it)"},
    {OPT_DRAFT_NGRAM_MIN, "--draft-ngram-min", {0}, OPT_T_INT, "N", 1, 64, RUN, false,
     "shortest n-gram the ngram drafter matches (default 1)"},
    {OPT_DRAFT_NGRAM_MAX, "--draft-ngram-max", {0}, OPT_T_INT, "N", 1, 64, RUN, false,
     "longest n-gram the ngram drafter matches (default 6)"},
    {OPT_SPEC_SAMPLING, "--spec-sampling", {0}, OPT_T_ENUM, "exact|rejection", 0, 0, RUN, false,
     "exact: byte-identical to plain decoding with the same seed (default); rejection: same distribution"},
    {OPT_NO_ADAPTIVE, "--no-adaptive", {0}, OPT_T_FLAG, NULL, 0, 0, RUN, false,
     "pin the block width to --draft-block-size"},
    {OPT_ALLOW_INEXACT, "--allow-inexact", {0}, OPT_T_FLAG, NULL, 0, 0, RUN | SRV, false,
     "keep speculating when the exactness probe fails (LOCKSTEP_ALLOW_INEXACT=1)"},
    {OPT_TRACE, "--trace", {0}, OPT_T_FLAG, NULL, 0, 0, RUN | PRO, false,
     "log the exactness probe's per-layer results (LOCKSTEP_PROBE_TRACE=1)"},
    {OPT_NO_BOS, "--no-bos", {0}, OPT_T_FLAG, NULL, 0, 0, TOK, false, "do not add the BOS token"},
    {OPT_NO_SPECIAL, "--no-special", {0}, OPT_T_FLAG, NULL, 0, 0, TOK, false,
     "tokenize special-token text as plain text"},
    {OPT_N_PROMPT, "--n-prompt", {"-p"}, OPT_T_INT, "N", 1, 16384, BEN, false, "prefill tokens (default 512)"},
    {OPT_N_GEN, "--n-gen", {"-n"}, OPT_T_INT, "N", 1, 16384, BEN, false, "decoded tokens (default 128)"},
    {OPT_REPS, "--reps", {"-r", "--repetitions"}, OPT_T_INT, "N", 1, 100, BEN, false,
     "repetitions, the median is reported (default 5)"},
    {OPT_VERIFY, "--verify", {"-k"}, OPT_T_INT, "K", 2, 16, BEN, false,
     "rows of the timed verify block (default 4)"},
    {OPT_N_DEPTH, "--n-depth", {"-d"}, OPT_T_INT, "N", 0, 65536, BEN, false,
     "tokens in the context before the timed prefill, decode and verify blocks, as llama-bench's -d (default 0)"},
    {OPT_AB_CUDA_OFF, "--ab-cuda-off", {0}, OPT_T_INT, "BITS", 1, 447, BEN, false,
     "also time a second session whose CUDA backend leaves off these LS_CUDA_OFF_* bits, its steps and "
     "verify blocks alternated with the first's on the same weights (ab_* fields; docs/settings.md)"},
    {OPT_HOST, "--host", {0}, OPT_T_STR, "ADDR", 0, 0, SRV, false, "address to listen on (default 127.0.0.1)"},
    {OPT_PORT, "--port", {0}, OPT_T_INT, "PORT", 0, 65535, SRV, false,
     "port to listen on (default 8080; 0 picks a free one, printed on stderr)"},
    {OPT_PARALLEL, "--parallel", {"-np"}, OPT_T_INT, "N", 1, 256, SRV, false,
     "slots: sequences decoded concurrently, each with its own KV cache (default 1); up to 2*N more "
     "requests wait in a queue, beyond that 503 + Retry-After"},
    {OPT_API_KEY, "--api-key", {0}, OPT_T_STR, "KEY", 0, 0, SRV, false,
     "require 'Authorization: Bearer KEY' (not for /health)"},
    {OPT_TIMEOUT, "--timeout", {"-to"}, OPT_T_INT, "S", 1, DAY, SRV, false,
     "the longest a generation may run, counted from its start (then finish_reason \"length\"), and the "
     "idle limit once a request is in (default 600)"},
    {OPT_ALIAS, "--alias", {"-a"}, OPT_T_STR, "NAME", 0, 0, SRV, false,
     "model id in /v1/models and responses (default: the model file name)"},
    {OPT_QUEUE_TIMEOUT, "--queue-timeout", {0}, OPT_T_INT, "S", 1, DAY, SRV, false,
     "a request still waiting for a slot after S seconds gets 503 (default 600)"},
    {OPT_SHUTDOWN_TIMEOUT, "--shutdown-timeout", {0}, OPT_T_INT, "S", 0, DAY, SRV, false,
     "on SIGTERM/SIGINT: stop accepting, answer queued requests 503, let running generations go on for "
     "up to S seconds (default 10), then end them with finish_reason \"length\" and exit 0; a second "
     "signal exits at once"},
    {OPT_HEADER_TIMEOUT, "--header-timeout", {0}, OPT_T_INT, "S", 1, DAY, SRV, false,
     "a connection must send its whole request (line, headers, body) within S seconds of connecting "
     "or of its previous response, or it is closed (default 10)"},
    {OPT_NO_WEBUI, "--no-webui", {0}, OPT_T_FLAG, NULL, 0, 0, SRV, false,
     "no chat page at / (by default GET / serves it, embedded in the binary; docs/webui.md)"},
    {OPT_TENSOR_PARALLEL, "--tensor-parallel", {"-tp"}, OPT_T_INT, "N", 1, 8, RUN | LOG | BEN | PRO | SRV, false,
     "split the model over N ranks (cpu: threads; cuda: GPUs 0..N-1 through NCCL, N = 1 today), meeting in an "
     "exact all-reduce; default: off (docs/design.md, \"Tensor parallelism\")"},
    {OPT_TP_REDUCE, "--tp-reduce", {0}, OPT_T_ENUM, "exact|plain", 0, 0, LOG | BEN, false,
     "all-reduce of --tensor-parallel: exact (all-gather, rank-order sum; default) or plain (ncclAllReduce: to "
     "measure the cost; not batch-invariant at N >= 3)"},
    {OPT_DEVICE, "--device", {0}, OPT_T_ENUM, "cpu|cuda|auto", 0, 0, ALL, true,
     "where the model runs (default: cuda when built with CUDA and a GPU is present, else cpu)"},
    {OPT_ISA, "--isa", {0}, OPT_T_ENUM, "auto|avx2|scalar", 0, 0, ALL, true,
     "CPU kernels (avx2: no AVX-512 kernels; scalar: the reference kernels; same bits; LOCKSTEP_ISA)"},
    {OPT_NO_CUDA_GRAPHS, "--no-cuda-graphs", {0}, OPT_T_FLAG, NULL, 0, 0, ALL, true,
     "launch CUDA ops directly (LOCKSTEP_CUDA_GRAPHS=0)"},
    {OPT_NO_PROBE_CACHE, "--no-probe-cache", {0}, OPT_T_FLAG, NULL, 0, 0, ALL, true,
     "do not remember passing exactness-probe verdicts in $XDG_CACHE_HOME/lockstep/probe or "
     "~/.cache/lockstep/probe (LOCKSTEP_PROBE_CACHE=0)"},
    {OPT_VERBOSE, "--verbose", {0}, OPT_T_FLAG, NULL, 0, 0, ALL, true, "print the effective settings on stderr"},
    {OPT_HELP, "--help", {"-h"}, OPT_T_FLAG, NULL, 0, 0, ALL, false, "print this help and exit"},
};
/* clang-format on */
const int cli_opt_count = (int)(sizeof cli_opt_table / sizeof cli_opt_table[0]);

typedef struct {
    cli_cmd cmd;
    const char *name, *args, *summary, *notes;
} cli_cmd_info;

static const cli_cmd_info cmd_info[] = {
    {CLI_CMD_RUN, "run", "[options]", "generate text",
     "Without -p/-f a default story prompt is used. Generated text only on stdout.\n"
     "Speculative decoding (--draft) gives byte-identical output to plain decoding with the same seed\n"
     "(--spec-sampling exact, the default); an exactness probe checks this at start-up.\n"},
    {CLI_CMD_TOKENIZE, "tokenize", "[options] (-p TEXT | -f FILE)", "print token ids", NULL},
    {CLI_CMD_LOGITS, "logits", "[options] (--tokens ID,ID,... | -p TEXT | -f FILE)", "dump float32 logits",
     "Writes float32 little-endian [positions x vocab]; every --mode gives identical bytes.\n"},
    {CLI_CMD_BENCH, "bench", "[options]", "prefill/decode tok/s", NULL},
    {CLI_CMD_PROBE, "probe", "[options]", "exactness probe", "Without --draft-block-size, probes K = 2..8.\n"},
    {CLI_CMD_SERVE, "serve", "[options]", "OpenAI-compatible server",
     "Endpoints: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize;\n"
     "           GET /v1/models, /health, /metrics.\n"},
};
enum { N_CMDS = (int)(sizeof cmd_info / sizeof cmd_info[0]) };

const char *cli_cmd_name(cli_cmd cmd) {
    for (int i = 0; i < N_CMDS; i++)
        if (cmd_info[i].cmd == cmd) return cmd_info[i].name;
    return "?";
}

static bool spelled(const cli_opt *e, const char *s) {
    if (!strcmp(e->name, s)) return true;
    for (int k = 0; k < 3 && e->alias[k]; k++)
        if (!strcmp(e->alias[k], s)) return true;
    return false;
}

/* The entry spelled s that `cmd` takes; NULL with *other set to an entry spelled s that only
 * other subcommands take. */
static const cli_opt *find_opt(const char *s, cli_cmd cmd, const cli_opt **other) {
    *other = NULL;
    for (int i = 0; i < cli_opt_count; i++) {
        const cli_opt *e = &cli_opt_table[i];
        if (!spelled(e, s)) continue;
        if (e->cmds & (unsigned)cmd) return e;
        if (!*other) *other = e;
    }
    return NULL;
}

/* "ngram|model|assistant" -> "ngram, model or assistant" */
static void choices_text(const char *meta, char *buf, size_t n) {
    size_t k = 0;
    const char *last = strrchr(meta, '|');
    for (const char *p = meta; *p && k + 5 < n; p++) {
        if (*p != '|') {
            buf[k++] = *p;
            continue;
        }
        const char *sep = p == last ? " or " : ", ";
        for (; *sep && k + 1 < n; sep++) buf[k++] = *sep;
    }
    buf[k] = 0;
}

static bool enum_ok(const char *meta, const char *v) {
    size_t n = strlen(v);
    for (const char *p = meta; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

/* Stores val for entry e, spelled `as` on the command line (errors name that spelling). */
static bool set_value(const cli_opt *e, const char *as, const char *val, cli_opts *o) {
    bool ok = true;
    switch (e->type) {
    case OPT_T_FLAG: o->v[e->id].on = true; break;
    case OPT_T_INT: ok = cli_parse_i32(as, val, (int32_t)e->lo, (int32_t)e->hi, &o->v[e->id].i); break;
    case OPT_T_FLOAT: ok = cli_parse_f32(as, val, (float)e->lo, (float)e->hi, &o->v[e->id].f); break;
    case OPT_T_U64: ok = cli_parse_u64(as, val, &o->v[e->id].u); break;
    case OPT_T_STR: o->v[e->id].s = val; break;
    case OPT_T_ENUM:
        ok = enum_ok(e->meta, val);
        if (ok) {
            o->v[e->id].s = val;
        } else {
            char ch[128];
            choices_text(e->meta, ch, sizeof ch);
            fprintf(stderr, "lockstep: %s must be %s, got '%s'\n", as, ch, val);
        }
        break;
    }
    if (ok) o->given[e->id] = true;
    return ok;
}

/* Which subcommands take e, for the error about an option of another subcommand. */
static void cmds_text(unsigned cmds, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < N_CMDS; i++)
        if (cmds & (unsigned)cmd_info[i].cmd)
            k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s", k ? ", " : "", cmd_info[i].name);
}

/* Matches argv[*i] (and its value) against the options `cmd` takes. Returns 1 when matched and
 * stored, 0 when argv[*i] is no option of `cmd` (nothing printed: *other says whether another
 * subcommand takes it), -1 after printing an error. `--name=value` and `-xVALUE` are accepted
 * as getopt did. */
static int match_arg(cli_cmd cmd, int argc, char **argv, int *i, cli_opts *o, const cli_opt **other) {
    const char *a = argv[*i], *val = NULL;
    char name[64];
    snprintf(name, sizeof name, "%s", a);
    const char *eq = strchr(a, '=');
    if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) {
        name[eq - a] = 0;
        val = eq + 1;
    }
    const cli_opt *e = find_opt(name, cmd, other);
    if (!e && !*other && a[0] == '-' && a[1] && a[1] != '-' && a[2]) { /* -n5 */
        const cli_opt *o2;
        char sh[3] = {a[0], a[1], 0};
        e = find_opt(sh, cmd, &o2);
        if (e && e->type == OPT_T_FLAG) e = NULL;
        if (e) {
            snprintf(name, sizeof name, "%s", sh);
            val = a + 2;
        }
    }
    if (!e) return 0;
    if (e->type == OPT_T_FLAG) {
        if (val) {
            fprintf(stderr, "lockstep: %s takes no value\n", name);
            return -1;
        }
        return set_value(e, name, NULL, o) ? 1 : -1;
    }
    if (!val) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "lockstep: %s needs a value (%s)\n", name, e->meta);
            return -1;
        }
        val = argv[++*i];
    }
    return set_value(e, name, val, o) ? 1 : -1;
}

int cli_opts_parse(cli_cmd cmd, int argc, char **argv, cli_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) { /* the end of the options: anything after it is unexpected */
            if (i + 1 >= argc) break;
            a = argv[i + 1];
        }
        if (a[0] != '-' || !a[1] || a != argv[i]) {
            fprintf(stderr, "lockstep: unexpected argument '%s'\n", a);
            cli_usage(cmd, stderr);
            return CLI_USAGE;
        }
        const cli_opt *other;
        int r = match_arg(cmd, argc, argv, &i, o, &other);
        if (r < 0) return CLI_USAGE;
        if (r == 0) {
            int len = a[1] == '-' ? (int)strcspn(a, "=") : (int)strlen(a); /* the name of --name=value */
            if (other) {
                char c[128];
                cmds_text(other->cmds, c, sizeof c);
                fprintf(stderr, "lockstep: %.*s is not an option of '%s' (only of: %s)\n", len, a, cli_cmd_name(cmd),
                        c);
            } else {
                fprintf(stderr, "lockstep: unknown option '%.*s'\n", len, a);
            }
            cli_usage(cmd, stderr);
            return CLI_USAGE;
        }
        if (o->given[OPT_HELP]) {
            cli_usage(cmd, stdout);
            return CLI_OK;
        }
    }
    return CLI_CONTINUE;
}

/* Removes argv[i] and the n values after it. */
static void drop_args(int *argc, char **argv, int i, int n) {
    for (int j = i; j + n + 1 <= *argc; j++) argv[j] = argv[j + n + 1];
    *argc -= n + 1;
}

bool cli_opts_take_common(int *argc, char **argv, cli_opts *o) {
    for (int i = 1; i < *argc; i++) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(argv[i], "="), argv[i]);
        const cli_opt *other, *e = find_opt(name, CLI_CMD_ALL, &other);
        if (!e || !e->common) continue; /* the subcommand parses it */
        int j = i;
        if (match_arg(CLI_CMD_ALL, *argc, argv, &j, o, &other) < 0) return false;
        drop_args(argc, argv, i, j - i);
        i--;
    }
    return true;
}

/* Prints text from column `col` on, wrapped before column 110; the first line continues
 * where the caller left off at column `at`. */
static void wrap(FILE *f, const char *text, int col, int at) {
    const int width = 110;
    const char *p = text;
    while (*p) {
        int room = width - (at > col ? at : col);
        if (at < col) fprintf(f, "%*s", col - at, "");
        int len = (int)strlen(p);
        if (len > room) {
            int cut = room;
            while (cut > 0 && (p[cut] != ' ' || p[cut - 1] == ',')) cut--; /* keep "[1, 4096]" whole */
            if (cut == 0) cut = (int)strcspn(p, " ");
            len = cut;
        }
        fprintf(f, "%.*s\n", len, p);
        p += len;
        while (*p == ' ') p++;
        at = 0;
    }
}

static const char *type_name(cli_opt_type t) {
    static const char *names[] = {"flag", "int", "float", "u64", "string", "enum"};
    return names[t];
}

/* One option's usage line(s): "  -m, --model PATH   help [range]". */
static void usage_line(FILE *f, const cli_opt *e) {
    const char *sp[4];
    int n = 0;
    for (int a = 0; a < 3 && e->alias[a]; a++) /* short spellings, the canonical one, long aliases */
        if (e->alias[a][1] != '-') sp[n++] = e->alias[a];
    sp[n++] = e->name;
    for (int a = 0; a < 3 && e->alias[a]; a++)
        if (e->alias[a][1] == '-') sp[n++] = e->alias[a];
    char left[160], help[600];
    int k = snprintf(left, sizeof left, " ");
    for (int j = 0; j < n; j++) k += snprintf(left + k, sizeof left - (size_t)k, "%s %s", j ? "," : "", sp[j]);
    if (e->meta) snprintf(left + k, sizeof left - (size_t)k, " %s", e->meta);
    if (e->type == OPT_T_INT)
        snprintf(help, sizeof help, "%s [%.0f, %.0f]", e->help, e->lo, e->hi);
    else if (e->type == OPT_T_FLOAT)
        snprintf(help, sizeof help, "%s [%g, %g]", e->help, e->lo, e->hi);
    else
        snprintf(help, sizeof help, "%s", e->help);
    const int col = 34;
    fputs(left, f);
    int at = (int)strlen(left);
    if (at + 1 >= col) { /* a long left column: the help starts on the next line */
        fputc('\n', f);
        at = 0;
    }
    wrap(f, help, col, at);
}

static const char *COMMON_HEAD = "common options (any subcommand, before or after it; docs/settings.md):\n";

void cli_usage(cli_cmd cmd, FILE *f) {
    const cli_cmd_info *ci = NULL;
    for (int i = 0; i < N_CMDS; i++)
        if (cmd_info[i].cmd == cmd) ci = &cmd_info[i];
    if (!ci) return;
    fprintf(f, "usage: lockstep %s %s\noptions:\n", ci->name, ci->args);
    for (int i = 0; i < cli_opt_count; i++)
        if ((cli_opt_table[i].cmds & (unsigned)cmd) && !cli_opt_table[i].common) usage_line(f, &cli_opt_table[i]);
    fputs(COMMON_HEAD, f);
    for (int i = 0; i < cli_opt_count; i++)
        if ((cli_opt_table[i].cmds & (unsigned)cmd) && cli_opt_table[i].common) usage_line(f, &cli_opt_table[i]);
    if (ci->notes) fputs(ci->notes, f);
}

void cli_main_usage(FILE *f) {
    fprintf(f, "usage: lockstep <command> [options]\ncommands:\n");
    for (int i = 0; i < N_CMDS; i++) {
        char help[64];
        snprintf(help, sizeof help, "(lockstep %s -h)", cmd_info[i].name);
        fprintf(f, "  %-9s %-24s %s\n", cmd_info[i].name, cmd_info[i].summary, help);
    }
    fprintf(f, "  %-9s %s\n  %-9s %s\n", "options", "print the option table (tab-separated)", "version",
            "print the version");
    fputs(COMMON_HEAD, f);
    for (int i = 0; i < cli_opt_count; i++)
        if (cli_opt_table[i].common) usage_line(f, &cli_opt_table[i]);
}

void cli_opts_dump(FILE *f) {
    fprintf(f, "name\taliases\ttype\tvalue\tmin\tmax\tcommands\tcommon\n");
    for (int i = 0; i < cli_opt_count; i++) {
        const cli_opt *e = &cli_opt_table[i];
        char al[96] = "-", cm[128];
        for (int a = 0, k = 0; a < 3 && e->alias[a]; a++)
            k += snprintf(al + k, sizeof al - (size_t)k, "%s%s", a ? "," : "", e->alias[a]);
        cmds_text(e->cmds, cm, sizeof cm);
        for (char *p = cm; *p; p++)
            if (*p == ' ') memmove(p, p + 1, strlen(p));
        bool num = e->type == OPT_T_INT || e->type == OPT_T_FLOAT;
        fprintf(f, "%s\t%s\t%s\t%s\t", e->name, al, type_name(e->type), e->meta ? e->meta : "-");
        if (num)
            fprintf(f, "%.17g\t%.17g\t", e->lo, e->hi);
        else
            fprintf(f, "-\t-\t");
        fprintf(f, "%s\t%s\n", cm, e->common ? "yes" : "no");
    }
}
