/* Shared pieces of the lockstep CLI: common options, model loading, errors. The CLI is a
 * thin client of include/lockstep.h. */
#ifndef LS_CLI_H
#define LS_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "lockstep.h"
#include "options.h"

typedef struct {
    const char *model;  /* -m */
    const char *prompt; /* -p */
    const char *file;   /* -f */
    int32_t n_threads;  /* -t */
    int32_t n_ctx;      /* -c */
} cli_common;

/* -tp / --tp-reduce into session parameters (0 when not given: tensor parallelism off). */
void cli_session_tp(const cli_opts *o, ls_session_params *sp);

/* Exit codes: 0 ok, 1 runtime failure, 2 usage / bad input. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

const char *cli_default_model_path(void);

/* Process-wide settings (cli_settings.c, docs/settings.md): options every subcommand takes,
 * and the documented environment variables they override. */
typedef struct {
    const char *device;         /* --device cpu|cuda|auto; NULL = auto */
    const char *isa;            /* --isa auto|avx2|scalar, LOCKSTEP_ISA */
    bool cuda_graphs;           /* off: --no-cuda-graphs, LOCKSTEP_CUDA_GRAPHS=0 */
    unsigned cuda_off;          /* LS_CUDA_OFF_* bits: LOCKSTEP_CUDA_MERGE / _PDL / .. / _SEGMENT / _KQ=0 */
    bool probe_cache;           /* off: --no-probe-cache, LOCKSTEP_PROBE_CACHE=0 */
    char probe_cache_dir[1024]; /* $XDG_CACHE_HOME/lockstep/probe or ~/.cache/lockstep/probe */
    bool probe_trace;           /* run/probe --trace, LOCKSTEP_PROBE_TRACE */
    bool verbose;               /* --verbose: print the effective settings */
    /* LOCKSTEP_TEST_FAULT (tests): LAYER:STAGE or alloc:SITE[:COUNT] */
    const char *fault_stage;
    int fault_layer;
    const char *fault_alloc_site;
    int fault_alloc_count;
} cli_settings;
extern cli_settings cli_cfg;
/* Reads the environment, takes the common options out of argv (wherever they appear) and
 * applies everything with ls_test_control. Prints an error and returns -1 on a bad value. */
int cli_settings_init(int *argc, char **argv);
/* --trace of run / probe. */
void cli_set_probe_trace(bool on);
/* With --verbose, prints the effective settings on stderr once (cli_open_model calls it). */
void cli_print_settings(void);
/* Opens the model (-m or the default); prints a clear error and returns NULL on failure. */
ls_model *cli_open_model(const char *path);
/* --draft KIND / --model-draft PATH, validated: KIND ngram, model or assistant; a PATH whose
 * config.json says gemma4_assistant makes the kind "assistant" whatever was given, a PATH
 * alone means "model". Returns the resolved kind (NULL = no drafter) and sets *ok = false
 * with a message on a usage error. */
const char *cli_resolve_draft(const char *kind, const char *path, bool *ok);
/* Creates the drafter for a resolved kind (opening the draft model into *dm for "model").
 * NULL + message on failure. */
ls_drafter *cli_make_drafter(const char *kind, const char *path, ls_model *target, int32_t n_ctx, int32_t n_threads,
                             int32_t ng_min, int32_t ng_max, ls_model **dm);
/* Reads -p or -f into a malloc'ed string (NUL-terminated, *len set). NULL + message on error. */
char *cli_read_prompt(const cli_common *c, size_t *len);
/* Parses an integer / float option value; prints an error naming the flag on failure. */
bool cli_parse_i32(const char *flag, const char *s, int32_t lo, int32_t hi, int32_t *out);
bool cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out);
bool cli_parse_u64(const char *flag, const char *s, uint64_t *out);
/* Tokenize (BOS if add_bos); malloc'ed array, *n set; NULL on error. */
int32_t *cli_tokenize(const ls_model *m, const char *text, size_t len, bool add_bos, bool parse_special, int32_t *n);

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_serve(int argc, char **argv); /* tools/server/cmd_serve.c */

#endif
