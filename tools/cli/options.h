/* The option table of the lockstep CLI and server (options.c, docs/settings.md): one entry per
 * option with its spellings, value type, range, help text and the subcommands that take it.
 * One parser walks argv against it for a subcommand, and every usage text is generated from
 * it. */
#ifndef LS_CLI_OPTIONS_H
#define LS_CLI_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Subcommands, as bits of cli_opt.cmds. */
typedef enum {
    CLI_CMD_RUN = 1 << 0,
    CLI_CMD_TOKENIZE = 1 << 1,
    CLI_CMD_LOGITS = 1 << 2,
    CLI_CMD_BENCH = 1 << 3,
    CLI_CMD_PROBE = 1 << 4,
    CLI_CMD_SERVE = 1 << 5,
    CLI_CMD_ALL = (1 << 6) - 1
} cli_cmd;

typedef enum {
    OPT_MODEL,
    OPT_PROMPT,
    OPT_FILE,
    OPT_TOKENS,
    OPT_MODE,
    OPT_OUTPUT,
    OPT_N_PREDICT,
    OPT_THREADS,
    OPT_CTX_SIZE,
    OPT_BATCH_SIZE,
    OPT_CHAT,
    OPT_TEMP,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_REPEAT_PENALTY,
    OPT_REPEAT_LAST_N,
    OPT_FREQUENCY_PENALTY,
    OPT_PRESENCE_PENALTY,
    OPT_SEED,
    OPT_IGNORE_EOS,
    OPT_JSON_SCHEMA,
    OPT_JSON_SCHEMA_FILE,
    OPT_STATS,
    OPT_DRAFT,
    OPT_MODEL_DRAFT,
    OPT_DRAFT_BLOCK_SIZE,
    OPT_DRAFT_NGRAM_MIN,
    OPT_DRAFT_NGRAM_MAX,
    OPT_SPEC_SAMPLING,
    OPT_NO_ADAPTIVE,
    OPT_ALLOW_INEXACT,
    OPT_TRACE,
    OPT_NO_BOS,
    OPT_NO_SPECIAL,
    OPT_N_PROMPT,
    OPT_N_GEN,
    OPT_REPS,
    OPT_VERIFY,
    OPT_N_DEPTH,
    OPT_AB_CUDA_OFF,
    OPT_HOST,
    OPT_PORT,
    OPT_PARALLEL,
    OPT_API_KEY,
    OPT_TIMEOUT,
    OPT_ALIAS,
    OPT_QUEUE_TIMEOUT,
    OPT_SHUTDOWN_TIMEOUT,
    OPT_HEADER_TIMEOUT,
    OPT_NO_WEBUI,
    OPT_TENSOR_PARALLEL,
    OPT_TP_REDUCE,
    OPT_DEVICE,
    OPT_ISA,
    OPT_NO_CUDA_GRAPHS,
    OPT_NO_PROBE_CACHE,
    OPT_VERBOSE,
    OPT_HELP,
    OPT__COUNT
} cli_opt_id;

typedef enum { OPT_T_FLAG, OPT_T_INT, OPT_T_FLOAT, OPT_T_U64, OPT_T_STR, OPT_T_ENUM } cli_opt_type;

/* The most rows of one forward step that -b may ask for, in `run` and `serve` alike: a
 * session's activations grow with it, and the server's batcher holds -b plus K rows per slot
 * (at most 256 slots x K 16) under its limit of 65536 rows (docs/settings.md). */
enum { CLI_MAX_BATCH = 4096 };

typedef struct {
    cli_opt_id id;
    const char *name;     /* canonical spelling, e.g. "--ctx-size" */
    const char *alias[3]; /* other spellings (llama-server's first), NULL-terminated */
    cli_opt_type type;
    const char *meta; /* value placeholder in usage; for OPT_T_ENUM the choices "a|b|c" */
    double lo, hi;    /* inclusive range of OPT_T_INT / OPT_T_FLOAT */
    unsigned cmds;    /* cli_cmd bits of the subcommands that take it */
    bool common;      /* taken out of argv before dispatch, wherever it stands (cli_settings.c) */
    const char *help;
} cli_opt;

extern const cli_opt cli_opt_table[];
extern const int cli_opt_count;

/* Parsed values, indexed by cli_opt_id; `given` says which options were on the command line.
 * A subcommand fills in its defaults before parsing. */
typedef struct {
    union {
        const char *s;
        int32_t i;
        float f;
        uint64_t u;
        bool on;
    } v[OPT__COUNT];
    bool given[OPT__COUNT];
} cli_opts;

/* What cli_opts_parse returns when the subcommand goes on; anything else is its exit code
 * (0 after -h, 2 after a usage error, which has been printed). */
enum { CLI_CONTINUE = -1 };
int cli_opts_parse(cli_cmd cmd, int argc, char **argv, cli_opts *o);
/* Takes the common options (--device, --isa, ...) out of argv wherever they appear, storing
 * them into *o. Returns false after printing an error. */
bool cli_opts_take_common(int *argc, char **argv, cli_opts *o);
/* The subcommand's usage text, generated from the table. */
void cli_usage(cli_cmd cmd, FILE *f);
/* `lockstep` without a subcommand: the commands and the common options. */
void cli_main_usage(FILE *f);
/* `lockstep options`: the table as tab-separated lines (for scripts and tests/cli_options.sh). */
void cli_opts_dump(FILE *f);
/* "run", "serve", ... for a cli_cmd bit. */
const char *cli_cmd_name(cli_cmd cmd);

#endif
