/* llama-logits: float32 logits of every position of a token sequence, computed by llama.cpp
 * (its C API, llama.h), written raw little-endian [positions x vocab] like `lockstep logits`,
 * so that the same comparison code reads both engines' files.
 *
 * NOT part of lockstep's build: scripts/build-llama-cuda.sh compiles it against a llama.cpp
 * build (cc llama_logits.c -I SRC/include -I SRC/ggml/include -L BUILD/bin -lllama -lggml
 * -lggml-base).
 *
 *   llama-logits -m MODEL (--tokens ID,ID,... | --tokens-file FILE | -p TEXT | -f FILE)
 *                [-o FILE] [-ngl N] [-t N] [-c N] [-b N] [-fa on|off|auto] [--kv f16|f32]
 *                [--print-tokens] [-v]
 *
 * Input: --tokens takes the ids as `lockstep logits --tokens` does (comma separated);
 * --tokens-file reads ids separated by commas and/or white space (the output of `lockstep
 * tokenize` as is), so both engines see IDENTICAL ids. -p / -f tokenize a text with llama.cpp's
 * tokenizer (BOS added when the model adds one, special-token text parsed as special tokens:
 * what `lockstep logits -p` does with its own tokenizer). --print-tokens writes the ids used to
 * stderr (one line, space separated, the `lockstep tokenize` format).
 *
 * Evaluation: teacher-forced, one sequence, positions 0..n-1, logits requested for every
 * position, in llama_decode calls of -b N tokens (default 512; ubatch = batch).
 * -ngl 0 (default) is a pure-CPU reference even on a CUDA build: the model gets NO device
 * (devices = {NULL}, what `llama-server -dev none` passes), so weights, KV cache and every op
 * stay on the CPU backend, and op_offload is off (otherwise ggml may ship large host-weight
 * matmuls to the GPU). -ngl N > 0: all available GPUs, N layers offloaded (99: all + output).
 * Everything else is llama.cpp's default context (f16 KV cache, flash attention auto, ...) unless
 * -fa / --kv say otherwise.
 * Summary line on stderr: positions, vocab, device, decode time. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ggml-backend.h"
#include "llama.h"

static void usage(FILE *f) {
    fprintf(f, "usage: llama-logits -m MODEL (--tokens ID,ID,... | --tokens-file FILE | -p TEXT | -f FILE)\n"
               "                    [-o FILE] [-ngl N] [-t N] [-c N] [-b N] [-fa on|off|auto] [--kv f16|f32]\n"
               "                    [--print-tokens] [-v]\n"
               "  writes float32 logits [positions x vocab], little-endian, to -o FILE or stdout\n"
               "  -ngl 0 (default): CPU only, no device, no op offload; -ngl 99: everything on the GPU\n");
}

static bool g_verbose = false;

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    static enum ggml_log_level last = GGML_LOG_LEVEL_INFO;
    if (level != GGML_LOG_LEVEL_CONT) last = level;
    if (g_verbose || last >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

/* ids separated by commas and/or white space; NULL (with a message) on anything else */
static int32_t *parse_ids(const char *s, const char *what, int32_t *n) {
    size_t cap = 256, k = 0;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    const char *p = s;
    while (ids) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > (1L << 30)) {
            fprintf(stderr, "llama-logits: %s: expected non-negative token ids, got '%.20s'\n", what, p);
            free(ids);
            return NULL;
        }
        if (k == cap) {
            int32_t *nb = realloc(ids, sizeof(int32_t) * (cap *= 2));
            if (!nb) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = nb;
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    if (!ids) {
        fprintf(stderr, "llama-logits: out of memory\n");
        return NULL;
    }
    if (k == 0) {
        fprintf(stderr, "llama-logits: %s: no token ids\n", what);
        free(ids);
        return NULL;
    }
    *n = (int32_t)k;
    return ids;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "llama-logits: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *nb = realloc(buf, (cap *= 2) + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else
            buf = nb;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "llama-logits: cannot read '%s'\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static bool parse_int(const char *flag, const char *s, long lo, long hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "llama-logits: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return false;
    }
    *out = (int32_t)v;
    return true;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *model_path, *tokens_arg, *tokens_file, *prompt, *prompt_file;
    const char *out_path, *fa, *kv;
    int32_t ngl, n_threads, n_ctx, n_batch;
    bool print_tokens;
} options;

/* One option with its value v (NULL when none follows): 1 if v was consumed, 0 if not, -1
 * (message printed) on a bad value, -2 on an unknown option. */
static int parse_opt(options *o, const char *a, const char *v) {
    if (!strcmp(a, "-m") || !strcmp(a, "--model"))
        o->model_path = v;
    else if (!strcmp(a, "--tokens"))
        o->tokens_arg = v;
    else if (!strcmp(a, "--tokens-file"))
        o->tokens_file = v;
    else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
        o->prompt = v;
    else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
        o->prompt_file = v;
    else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
        o->out_path = v;
    else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers"))
        return parse_int(a, v, -1, 100000, &o->ngl) ? 1 : -1;
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        return parse_int(a, v, 1, 1024, &o->n_threads) ? 1 : -1;
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
        return parse_int(a, v, 1, 1 << 24, &o->n_ctx) ? 1 : -1;
    else if (!strcmp(a, "-b") || !strcmp(a, "--batch"))
        return parse_int(a, v, 1, 1 << 20, &o->n_batch) ? 1 : -1;
    else if (!strcmp(a, "-fa") || !strcmp(a, "--flash-attn")) {
        o->fa = v;
        if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) {
            fprintf(stderr, "llama-logits: -fa expects on, off or auto, got '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(a, "--kv")) {
        o->kv = v;
        if (strcmp(v, "f16") && strcmp(v, "f32")) {
            fprintf(stderr, "llama-logits: --kv expects f16 or f32, got '%s'\n", v);
            return -1;
        }
    } else
        return -2;
    return 1;
}

/* -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.fa = "auto", .n_batch = 512};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            g_verbose = true;
            continue;
        } else if (!strcmp(a, "--print-tokens")) {
            o->print_tokens = true;
            continue;
        } else if (!v) {
            fprintf(stderr, "llama-logits: %s: missing value or unknown option\n", a);
            usage(stderr);
            return 2;
        }
        int r = parse_opt(o, a, v);
        if (r == -2) {
            fprintf(stderr, "llama-logits: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (r < 0) return 2;
        i++;
    }
    int given = !!o->tokens_arg + !!o->tokens_file + !!o->prompt + !!o->prompt_file;
    if (!o->model_path || given != 1) {
        usage(stderr);
        return 2;
    }
    if (o->n_threads == 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = nc > 0 ? (int32_t)nc : 4;
    }
    return -1;
}

/* The ids (--tokens, --tokens-file) or the text to tokenize (-p, -f). false (message
 * printed) on failure. */
static bool read_input(const options *o, int32_t **ids, int32_t *n, char **text, size_t *text_len) {
    if (o->tokens_arg) return (*ids = parse_ids(o->tokens_arg, "--tokens", n)) != NULL;
    if (o->tokens_file) {
        char *s = read_file(o->tokens_file, text_len);
        if (!s) return false;
        *ids = parse_ids(s, o->tokens_file, n);
        free(s);
        return *ids != NULL;
    }
    if (o->prompt) {
        *text = strdup(o->prompt);
        *text_len = strlen(o->prompt);
        return true;
    }
    return (*text = read_file(o->prompt_file, text_len)) != NULL;
}

/* The model on the CPU only (-ngl 0) or with ngl layers on the GPUs; NULL (message printed)
 * on failure. dev_desc names the device. */
static struct llama_model *load_model(const options *o, char *dev_desc, size_t cap) {
    struct llama_model_params mp = llama_model_default_params();
    static ggml_backend_dev_t no_devices[1] = {NULL};
    snprintf(dev_desc, cap, "CPU only (no device, no op offload)");
    if (o->ngl == 0) {
        mp.devices = no_devices; /* CPU only: no GPU device at all (llama-server -dev none) */
        mp.n_gpu_layers = 0;
    } else {
        size_t n_gpu = 0;
        for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            enum ggml_backend_dev_type t = ggml_backend_dev_type(d);
            if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) {
                if (n_gpu++ == 0)
                    snprintf(dev_desc, cap, "%s (%s)", ggml_backend_dev_name(d), ggml_backend_dev_description(d));
            }
        }
        if (n_gpu == 0) { /* a CPU build (or no visible GPU) would silently compute on the CPU */
            fprintf(stderr, "llama-logits: -ngl %d but this llama.cpp build sees no GPU device\n", o->ngl);
            return NULL;
        }
        mp.n_gpu_layers = o->ngl;
    }
    struct llama_model *model = llama_model_load_from_file(o->model_path, mp);
    if (!model) fprintf(stderr, "llama-logits: cannot load model '%s'\n", o->model_path);
    return model;
}

/* Tokenizes text (if any: it is freed) and checks the ids. 0, or the exit code. */
static int prepare_ids(const struct llama_vocab *vocab, int32_t n_vocab, char *text, size_t text_len, int32_t **ids,
                       int32_t *n, bool print_tokens) {
    if (text) {
        int32_t cap = (int32_t)text_len + 16;
        *ids = malloc(sizeof(int32_t) * (size_t)cap);
        *n = *ids ? llama_tokenize(vocab, text, (int32_t)text_len, *ids, cap, true, true) : -1;
        if (*n < 0) {
            fprintf(stderr, "llama-logits: tokenization failed (%d)\n", *n);
            return 1;
        }
        free(text);
        if (*n == 0) {
            fprintf(stderr, "llama-logits: the prompt has no tokens\n");
            return 1;
        }
    }
    for (int32_t i = 0; i < *n; i++) {
        if ((*ids)[i] >= n_vocab) {
            fprintf(stderr, "llama-logits: token id %d at %d is outside the vocabulary (%d)\n", (*ids)[i], i, n_vocab);
            return 2;
        }
    }
    if (print_tokens) {
        for (int32_t i = 0; i < *n; i++) fprintf(stderr, i ? " %d" : "%d", (*ids)[i]);
        fprintf(stderr, "\n");
    }
    return 0;
}

/* llama.cpp's default context but for the batch, threads, -fa, --kv and, on the CPU, no
 * offload. NULL with *rc = the exit code on failure. */
static struct llama_context *make_context(struct llama_model *model, const options *o, int32_t n, int32_t n_batch,
                                          int *rc) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(o->n_ctx ? o->n_ctx : n);
    cp.n_batch = (uint32_t)n_batch;
    cp.n_ubatch = (uint32_t)n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = o->n_threads;
    cp.n_threads_batch = o->n_threads;
    cp.no_perf = true;
    cp.flash_attn_type = !strcmp(o->fa, "on")    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : !strcmp(o->fa, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                 : LLAMA_FLASH_ATTN_TYPE_AUTO;
    if (o->kv) cp.type_k = cp.type_v = !strcmp(o->kv, "f32") ? GGML_TYPE_F32 : GGML_TYPE_F16;
    if (o->ngl == 0) {
        cp.op_offload = false;  /* no host-weight op shipped to a GPU */
        cp.offload_kqv = false; /* KV cache on the host (there is no device anyway) */
    }
    if ((int64_t)cp.n_ctx < n) {
        fprintf(stderr, "llama-logits: -c %u < %d tokens\n", cp.n_ctx, n);
        *rc = 2;
        return NULL;
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama-logits: cannot create the context\n");
        *rc = 1;
    }
    return ctx;
}

/* Teacher-forced decode of ids in batches of n_batch, every position's logits to out. 0 or 1. */
static int decode_all(struct llama_context *ctx, const int32_t *ids, int32_t n, int32_t n_batch, int32_t n_vocab,
                      FILE *out) {
    struct llama_batch batch = llama_batch_init(n_batch, 0, 1);
    int rc = 0;
    for (int32_t i = 0; i < n && rc == 0; i += n_batch) {
        int32_t k = n - i < n_batch ? n - i : n_batch;
        batch.n_tokens = k;
        for (int32_t j = 0; j < k; j++) {
            batch.token[j] = ids[i + j];
            batch.pos[j] = i + j;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = 0;
            batch.logits[j] = 1;
        }
        int32_t r = llama_decode(ctx, batch);
        if (r != 0) {
            fprintf(stderr, "llama-logits: llama_decode failed (%d) at position %d\n", r, i);
            rc = 1;
            break;
        }
        for (int32_t j = 0; j < k; j++) {
            const float *row = llama_get_logits_ith(ctx, j);
            if (!row) {
                fprintf(stderr, "llama-logits: no logits for position %d\n", i + j);
                rc = 1;
                break;
            }
            if (fwrite(row, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) {
                fprintf(stderr, "llama-logits: write failed\n");
                rc = 1;
                break;
            }
        }
    }
    llama_batch_free(batch);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;

    int32_t n = 0, *ids = NULL;
    char *text = NULL;
    size_t text_len = 0;
    if (!read_input(&o, &ids, &n, &text, &text_len)) return 2;

    llama_log_set(log_cb, NULL);
    llama_backend_init();
    ggml_backend_load_all(); /* no-op for backends linked in; loads them in a GGML_BACKEND_DL build */

    char dev_desc[256];
    struct llama_model *model = load_model(&o, dev_desc, sizeof dev_desc);
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    if ((rc = prepare_ids(vocab, n_vocab, text, text_len, &ids, &n, o.print_tokens)) != 0) return rc;

    int32_t n_batch = o.n_batch > n ? n : o.n_batch;
    struct llama_context *ctx = make_context(model, &o, n, n_batch, &rc);
    if (!ctx) return rc;

    FILE *out = o.out_path ? fopen(o.out_path, "wb") : stdout;
    if (!out) {
        fprintf(stderr, "llama-logits: cannot open '%s': %s\n", o.out_path, strerror(errno));
        return 1;
    }
    double t0 = now_s();
    rc = decode_all(ctx, ids, n, n_batch, n_vocab, out);
    double dt = now_s() - t0;
    if (out != stdout) {
        if (fclose(out) != 0 && rc == 0) {
            fprintf(stderr, "llama-logits: write failed\n");
            rc = 1;
        }
    } else
        fflush(stdout);
    if (rc == 0) {
        char desc[256];
        llama_model_desc(model, desc, sizeof desc);
        fprintf(stderr, "llama-logits: %d positions x %d vocab, %s, %s, -ngl %d, batch %d, %d threads, %.3f s\n", n,
                n_vocab, desc, dev_desc, o.ngl, n_batch, o.n_threads, dt);
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return rc;
}
