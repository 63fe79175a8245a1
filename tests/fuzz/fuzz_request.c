/* libFuzzer target for the server's request parser (src/server/request.c): feed arbitrary
 * bytes to every parser (chat, completion, tokenize, detokenize) and check its promises: a
 * failure is a 4xx/5xx with a message and leaves nothing allocated; a success yields valid
 * UTF-8 strings, known roles, values inside their documented ranges. The first byte picks
 * nothing: every parser sees every input.
 *
 * Built with clang -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt, LS_FUZZ=ON), and next to
 * corpus_runner.c, which replays tests/fuzz/corpus/request/ as the fuzz_request_regression
 * test (tests/fuzz/regression.cmake; the server library is linked by
 * tests/fuzz/regression_request.cmake). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "server/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_request: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

static void check_error(const ls_req_error *e) {
    CHECK(e->status >= 400 && e->status < 600);
    CHECK(e->message[0] != 0);
    CHECK(memchr(e->message, 0, sizeof e->message) != NULL);
}

static void check_str(const char *s) {
    CHECK(s != NULL);
    CHECK(ls_req_utf8_valid(s, strlen(s)));
}

static void check_request(const ls_request *r) {
    if (r->kind == LSR_CHAT) {
        CHECK(r->n_messages > 0 && r->n_messages <= LSR_MAX_MESSAGES && r->messages);
        for (int i = 0; i < r->n_messages; i++) {
            const char *role = r->messages[i].role;
            CHECK(!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant") ||
                  !strcmp(role, "tool"));
            check_str(r->messages[i].content);
        }
        CHECK(r->prompt == NULL);
    } else {
        check_str(r->prompt);
        CHECK(r->prompt[0] != 0);
        CHECK(r->messages == NULL);
    }
    if (r->model) check_str(r->model);
    CHECK(r->max_tokens == -1 || (r->max_tokens >= 1 && r->max_tokens <= LSR_MAX_TOKENS));
    CHECK(r->temperature >= 0 && r->temperature <= 2);
    CHECK(r->top_p >= 0 && r->top_p <= 1);
    CHECK(r->min_p >= 0 && r->min_p <= 1);
    CHECK(r->top_k >= 0);
    CHECK(r->presence_penalty >= -2 && r->presence_penalty <= 2);
    CHECK(r->frequency_penalty >= -2 && r->frequency_penalty <= 2);
    CHECK(r->n_stop >= 0 && r->n_stop <= LSR_MAX_STOP);
    CHECK(r->top_logprobs >= 0 && r->top_logprobs <= LSR_MAX_TOP_LOGPROBS);
    CHECK(r->logprobs || r->top_logprobs == 0);
    for (int i = 0; i < r->n_stop; i++) {
        check_str(r->stop[i]);
        CHECK(r->stop[i][0] != 0 && strlen(r->stop[i]) <= LSR_MAX_STOP_LEN);
    }
}

/* Tool calls (docs/tool_calls.md): an accepted request renders in both conventions (or fails
 * with a message) and the output parser takes the request's own text. */
static void check_tools(const ls_request *r) {
    if (!r->tools) return;
    for (int style = 3; style <= 4; style++) {
        char err[256] = "";
        char *p = ls_tools_prompt(style, r, err, sizeof err);
        CHECK(p || err[0]);
        ls_tool_output o;
        int rc = ls_tools_parse_output(style, r, r->n_messages ? r->messages[r->n_messages - 1].content : "", "c", &o);
        CHECK(rc >= -1 && rc <= 1 && (rc != 1 || o.n_calls > 0) && (rc != -1 || o.error[0]));
        for (int i = 0; rc == 1 && i < o.n_calls; i++) check_str(o.calls[i].arguments);
        ls_tool_output_free(&o);
        free(p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The parsers take (pointer, length): no terminator is promised. */
    const char *json = (const char *)data;
    ls_req_error e;
    for (int k = 0; k < 2; k++) {
        ls_request r;
        if (ls_req_parse(k ? LSR_COMPLETION : LSR_CHAT, json, size, &r, &e) == 0) {
            check_request(&r);
            check_tools(&r);
            ls_request_free(&r);
        } else {
            check_error(&e);
            CHECK(r.messages == NULL && r.prompt == NULL && r.n_stop == 0 && r.model == NULL && r.tools == NULL);
        }
    }
    ls_req_tokenize t;
    if (ls_req_parse_tokenize(json, size, &t, &e) == 0) {
        check_str(t.content);
        ls_req_tokenize_free(&t);
    } else {
        check_error(&e);
        CHECK(t.content == NULL);
    }
    ls_req_detokenize d;
    if (ls_req_parse_detokenize(json, size, &d, &e) == 0) {
        CHECK(d.n_tokens >= 0 && (d.n_tokens == 0 || d.tokens));
        for (int i = 0; i < d.n_tokens; i++) CHECK(d.tokens[i] >= 0);
        ls_req_detokenize_free(&d);
    } else {
        check_error(&e);
        CHECK(d.tokens == NULL);
    }
    /* UTF-8 validator on the raw bytes: must not read out of bounds (ASan) and must agree
     * with itself on prefixes that end at a character boundary. */
    (void)ls_req_utf8_valid(json, size);
    return 0;
}
