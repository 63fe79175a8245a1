/* Request parsing and validation for `lockstep serve`: JSON text -> a validated request
 * struct, or an OpenAI-style error (HTTP status, message, param, code). Pure functions (no
 * model, no I/O, no globals besides cJSON's allocator), so they can be fuzzed
 * (tests/fuzz/fuzz_request.c). Checks that need the model (prompt length against the
 * context, token ids against the vocabulary) are done by the server afterwards.
 *
 * Every parser here: duplicate keys, the last one wins; a NUL in any string or key (escaped
 * \u0000 or a raw byte) is a 400 naming the field; nesting past cJSON's limit is a 400
 * saying so. */
#ifndef LS_SERVER_REQUEST_H
#define LS_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

enum {
    LSR_MAX_TOP_LOGPROBS = 20, /* like OpenAI's chat top_logprobs (= LS_MAX_TOP_LOGPROBS) */
    LSR_MAX_STOP = 4,          /* like OpenAI */
    LSR_MAX_STOP_LEN = 256,    /* bytes per stop sequence */
    LSR_MAX_TOKENS = 1 << 24,  /* max_tokens upper bound (the context bounds it further) */
    LSR_MAX_MESSAGES = 4096,
};

typedef enum { LSR_CHAT = 0, LSR_COMPLETION = 1 } ls_req_kind;

typedef struct {
    ls_req_kind kind;
    /* LSR_CHAT: messages (role is one of "system", "user", "assistant", "tool"; "developer" maps
     * to "system"); strings owned by the struct. */
    ls_message *messages;
    int n_messages;
    /* LSR_COMPLETION: the prompt text. */
    char *prompt;
    char *model;        /* NULL if absent (informational only) */
    int32_t max_tokens; /* -1 = not given */
    /* Sampling: *_set says the client gave the field; otherwise the server's defaults apply. */
    bool temperature_set, top_p_set, top_k_set, min_p_set, seed_set;
    float temperature, top_p, min_p, presence_penalty, frequency_penalty, repeat_penalty;
    bool repeat_penalty_set;
    int32_t top_k;
    uint64_t seed;
    char *stop[LSR_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    bool ignore_eos;
    /* Log-probabilities (docs/logprobs.md): chat `logprobs: true` with `top_logprobs` 0..20
     * (top_logprobs needs logprobs true); completions `logprobs: N`, N in 0..20. */
    bool logprobs;
    int32_t top_logprobs;
    /* Structured output (response_format json_object / json_schema, json_schema): owned,
     * NULL when the output is free text. */
    ls_grammar *grammar;
    /* Tool calls (src/server/tools.h, docs/tool_calls.md): NULL when the request has no
     * `tools`, `tool_choice`, assistant `tool_calls` or tool messages. */
    struct ls_tool_req *tools;
} ls_request;

typedef struct {
    int status; /* HTTP status: 400, ... */
    char message[256];
    char param[64]; /* "" = null */
    char code[64];  /* "" = null */
} ls_req_error;

/* Parse and validate a /v1/chat/completions (LSR_CHAT) or /v1/completions body. Returns 0
 * and fills *out (free with ls_request_free), or -1 and fills *err (out is left empty). */
int ls_req_parse(ls_req_kind kind, const char *json, size_t len, ls_request *out, ls_req_error *err);
void ls_request_free(ls_request *r);

/* /tokenize: {"content": string, "add_special": bool (false), "parse_special": bool (true)}. */
typedef struct {
    char *content;
    bool add_special, parse_special;
} ls_req_tokenize;
int ls_req_parse_tokenize(const char *json, size_t len, ls_req_tokenize *out, ls_req_error *err);
void ls_req_tokenize_free(ls_req_tokenize *t);

/* /detokenize: {"tokens": [int, ...]} (ids >= 0; the vocabulary bound is checked later). */
typedef struct {
    int32_t *tokens;
    int n_tokens;
} ls_req_detokenize;
int ls_req_parse_detokenize(const char *json, size_t len, ls_req_detokenize *out, ls_req_error *err);
void ls_req_detokenize_free(ls_req_detokenize *d);

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
bool ls_req_utf8_valid(const char *s, size_t len);

/* Fill an error (printf-style message). Returns -1. */
int ls_req_fail(ls_req_error *err, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
