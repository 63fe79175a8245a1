/* Server request validation (src/server/request.c) and stop-sequence detection across chunk
 * boundaries (src/server/stop.c): pure functions, no model needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/request.h"
#include "server/stop.h"

static int parse(ls_req_kind k, const char *json, ls_request *r, ls_req_error *e) {
    return ls_req_parse(k, json, strlen(json), r, e);
}

static void expect_error(ls_req_kind k, const char *json, int status, const char *param) {
    ls_request r;
    ls_req_error e;
    assert_int_equal(parse(k, json, &r, &e), -1);
    assert_int_equal(e.status, status);
    assert_string_equal(e.param, param);
    assert_true(e.message[0] != 0);
}

static void test_valid_chat(void **state) {
    (void)state;
    ls_request r;
    ls_req_error e;
    const char *j = "{\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
                    "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                    "\"max_completion_tokens\":7,\"temperature\":0,\"seed\":-1,\"stop\":\"x\",\"stream\":true,"
                    "\"stream_options\":{\"include_usage\":true},\"unknown\":{\"any\":[1]},\"n\":1,\"top_p\":null}";
    assert_int_equal(parse(LSR_CHAT, j, &r, &e), 0);
    assert_int_equal(r.n_messages, 2);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[1].content, "ab");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.temperature_set && r.temperature == 0.0f);
    assert_false(r.top_p_set);
    assert_true(r.seed_set && r.seed == UINT64_MAX);
    assert_int_equal(r.n_stop, 1);
    assert_true(r.stream && r.include_usage);
    ls_request_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    expect_error(LSR_CHAT, "{\"messages\":[", 400, "");
    expect_error(LSR_CHAT, "", 400, "");
    expect_error(LSR_CHAT, "[]", 400, "");
    expect_error(LSR_CHAT, "{} x", 400, "");
    expect_error(LSR_CHAT, "{}", 400, "messages");
    expect_error(LSR_CHAT, "{\"messages\":[]}", 400, "messages");
    expect_error(LSR_CHAT, "{\"messages\":\"hi\"}", 400, "messages");
    expect_error(LSR_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", 400, "messages[0].role");
    /* a tool message needs the id of a call it answers (docs/tool_calls.md section 1) */
    expect_error(LSR_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "messages[0].tool_call_id");
    expect_error(LSR_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content");
    expect_error(LSR_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content");
    const char *u = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    char buf[256];
#define E(extra, param)                                                                                                \
    do {                                                                                                               \
        snprintf(buf, sizeof buf, "%s%s}", u, extra);                                                                  \
        expect_error(LSR_CHAT, buf, 400, param);                                                                       \
    } while (0)
    E("\"max_tokens\":0", "max_tokens");
    E("\"max_tokens\":-3", "max_tokens");
    E("\"max_tokens\":2.5", "max_tokens");
    E("\"max_tokens\":\"10\"", "max_tokens");
    E("\"max_tokens\":1e30", "max_tokens");
    E("\"temperature\":3", "temperature");
    E("\"temperature\":\"hot\"", "temperature");
    E("\"top_p\":1.5", "top_p");
    E("\"n\":2", "n");
    E("\"stop\":5", "stop");
    E("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop");
    E("\"stream\":\"yes\"", "stream");
    E("\"stream_options\":{\"include_usage\":1}", "stream_options.include_usage");
    E("\"seed\":0.5", "seed");
#undef E
    expect_error(LSR_COMPLETION, "{\"prompt\":\"\"}", 400, "prompt");
    expect_error(LSR_COMPLETION, "{\"prompt\":[1,2]}", 400, "prompt");
    expect_error(LSR_COMPLETION, "{\"prompt\":\"\xff\"}", 400, "prompt");
    expect_error(LSR_COMPLETION, "{\"prompt\":\"\xed\xa0\x80\"}", 400, "prompt"); /* encoded surrogate */
    expect_error(LSR_COMPLETION, "{\"prompt\":\"\xc0\xaf\"}", 400, "prompt");     /* overlong */
}

/* logprobs (docs/logprobs.md): chat `logprobs` bool + `top_logprobs` 0..20 (needs logprobs
 * true), completions `logprobs` int 0..20; null = absent. */
static void test_logprobs_fields(void **state) {
    (void)state;
    ls_request r;
    ls_req_error e;
#define CHAT(x) "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" x "}"
#define CMPL(x) "{\"prompt\":\"hi\"" x "}"
    assert_int_equal(parse(LSR_CHAT, CHAT(""), &r, &e), 0);
    assert_false(r.logprobs);
    ls_request_free(&r);
    assert_int_equal(parse(LSR_CHAT, CHAT(",\"logprobs\":true"), &r, &e), 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 0);
    ls_request_free(&r);
    assert_int_equal(parse(LSR_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":20"), &r, &e), 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 20);
    ls_request_free(&r);
    assert_int_equal(parse(LSR_CHAT, CHAT(",\"logprobs\":false,\"top_logprobs\":null"), &r, &e), 0);
    assert_false(r.logprobs);
    ls_request_free(&r);
    assert_int_equal(parse(LSR_COMPLETION, CMPL(",\"logprobs\":5"), &r, &e), 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 5);
    ls_request_free(&r);
    assert_int_equal(parse(LSR_COMPLETION, CMPL(",\"logprobs\":0"), &r, &e), 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 0);
    ls_request_free(&r);
    assert_int_equal(parse(LSR_COMPLETION, CMPL(",\"logprobs\":null"), &r, &e), 0);
    assert_false(r.logprobs);
    ls_request_free(&r);
    expect_error(LSR_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":21"), 400, "top_logprobs");
    expect_error(LSR_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":-1"), 400, "top_logprobs");
    expect_error(LSR_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":2.5"), 400, "top_logprobs");
    expect_error(LSR_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":\"3\""), 400, "top_logprobs");
    expect_error(LSR_CHAT, CHAT(",\"top_logprobs\":3"), 400, "top_logprobs");
    expect_error(LSR_CHAT, CHAT(",\"logprobs\":false,\"top_logprobs\":0"), 400, "top_logprobs");
    expect_error(LSR_CHAT, CHAT(",\"logprobs\":1"), 400, "logprobs");
    expect_error(LSR_CHAT, CHAT(",\"logprobs\":\"true\""), 400, "logprobs");
    expect_error(LSR_COMPLETION, CMPL(",\"logprobs\":21"), 400, "logprobs");
    expect_error(LSR_COMPLETION, CMPL(",\"logprobs\":-1"), 400, "logprobs");
    expect_error(LSR_COMPLETION, CMPL(",\"logprobs\":true"), 400, "logprobs");
    expect_error(LSR_COMPLETION, CMPL(",\"logprobs\":1.5"), 400, "logprobs");
#undef CHAT
#undef CMPL
}

static void test_tokenize_parsers(void **state) {
    (void)state;
    ls_req_tokenize t;
    ls_req_detokenize d;
    ls_req_error e;
    const char *a = "{\"content\":\"hi\",\"add_special\":true}";
    assert_int_equal(ls_req_parse_tokenize(a, strlen(a), &t, &e), 0);
    assert_string_equal(t.content, "hi");
    assert_true(t.add_special && t.parse_special);
    ls_req_tokenize_free(&t);
    const char *b = "{\"content\":3}";
    assert_int_equal(ls_req_parse_tokenize(b, strlen(b), &t, &e), -1);
    assert_int_equal(e.status, 400);
    const char *c = "{\"tokens\":[1,2,3]}";
    assert_int_equal(ls_req_parse_detokenize(c, strlen(c), &d, &e), 0);
    assert_int_equal(d.n_tokens, 3);
    assert_int_equal(d.tokens[2], 3);
    ls_req_detokenize_free(&d);
    const char *f = "{\"tokens\":[1,-2]}";
    assert_int_equal(ls_req_parse_detokenize(f, strlen(f), &d, &e), -1);
    assert_string_equal(e.param, "tokens");
}

/* Like expect_error, with an explicit length (0: strlen; for bodies with raw NUL bytes) and
 * a check that the message contains `needle`. */
static void expect_error_n(ls_req_kind k, const char *json, size_t len, const char *param, const char *needle) {
    ls_request r;
    ls_req_error e;
    assert_int_equal(ls_req_parse(k, json, len ? len : strlen(json), &r, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, param);
    assert_non_null(strstr(e.message, needle));
}

/* cJSON keeps C strings, so a NUL (escaped \u0000 or a raw byte) would silently truncate the
 * value: every body that contains one is refused, naming the field. */
static void test_nul_refused(void **state) {
    (void)state;
    ls_req_tokenize t;
    ls_req_detokenize d;
    ls_req_error e;
    const char *a = "{\"content\":\"a\\u0000b c\"}";
    assert_int_equal(ls_req_parse_tokenize(a, strlen(a), &t, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "content");
    assert_non_null(strstr(e.message, "U+0000"));
    assert_null(t.content);
    /* An escaped backslash followed by "u0000" is six ordinary characters. */
    const char *b = "{\"content\":\"a\\\\u0000b\"}";
    assert_int_equal(ls_req_parse_tokenize(b, strlen(b), &t, &e), 0);
    assert_string_equal(t.content, "a\\u0000b");
    ls_req_tokenize_free(&t);
    /* ... but an escaped backslash followed by an escaped NUL is refused. */
    const char *c = "{\"content\":\"a\\\\\\u0000\"}";
    assert_int_equal(ls_req_parse_tokenize(c, strlen(c), &t, &e), -1);
    assert_string_equal(e.param, "content");
    /* Anywhere in the body, unknown fields and keys included. */
    const char *f = "{\"tokens\":[1],\"x\":{\"y\":[\"\",\"\\u0000\"]}}";
    assert_int_equal(ls_req_parse_detokenize(f, strlen(f), &d, &e), -1);
    assert_string_equal(e.param, "x.y[1]");
    assert_null(d.tokens);
    const char *g = "{\"tokens\\u0000x\":[1]}";
    assert_int_equal(ls_req_parse_detokenize(g, strlen(g), &d, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "U+0000"));
    expect_error_n(LSR_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":[{"
                   "\"type\":\"text\",\"text\":\"x\\u0000\"}]}]}",
                   0, "messages[1].content[0].text", "U+0000");
    expect_error_n(LSR_COMPLETION, "{\"prompt\":\"ok\",\"stop\":[\"\\u0000\"]}", 0, "stop[0]", "U+0000");
    expect_error_n(LSR_COMPLETION, "{\"model\":\"m\\u0000\",\"prompt\":\"x\"}", 0, "model", "U+0000");
    /* A raw NUL byte inside a string is refused the same way. */
    static const char raw[] = "{\"prompt\":\"a\0b\"}";
    expect_error_n(LSR_COMPLETION, raw, sizeof raw - 1, "prompt", "U+0000");
}

/* Duplicate keys: the last one wins (like Python, JavaScript and llama-server). */
static void test_duplicate_keys_last_wins(void **state) {
    (void)state;
    ls_request r;
    ls_req_error e;
    const char *a = "{\"messages\":[{\"role\":\"tool\",\"role\":\"user\",\"content\":5,\"content\":\"x\"}],"
                    "\"max_tokens\":4,\"max_tokens\":7,\"stream\":\"no\",\"stream\":true}";
    assert_int_equal(parse(LSR_CHAT, a, &r, &e), 0);
    assert_int_equal(r.max_tokens, 7);
    assert_string_equal(r.messages[0].role, "user");
    assert_string_equal(r.messages[0].content, "x");
    assert_true(r.stream);
    ls_request_free(&r);
    expect_error(LSR_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"messages\":5}", 400, "messages");
    expect_error(LSR_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":4,\"max_tokens\":0}",
                 400, "max_tokens");
    /* Text parts: validated and joined from the same (last) "text". */
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5,\"text\":\"ok\"}]}]}";
    assert_int_equal(parse(LSR_CHAT, b, &r, &e), 0);
    assert_string_equal(r.messages[0].content, "ok");
    ls_request_free(&r);
    expect_error(LSR_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ok\",\"text\":5}]}]}",
                 400, "messages[0].content");
    ls_req_tokenize t;
    const char *c = "{\"content\":\"first\",\"content\":\"second\"}";
    assert_int_equal(ls_req_parse_tokenize(c, strlen(c), &t, &e), 0);
    assert_string_equal(t.content, "second");
    ls_req_tokenize_free(&t);
    ls_req_detokenize d;
    const char *f = "{\"tokens\":[1,2],\"tokens\":\"x\"}";
    assert_int_equal(ls_req_parse_detokenize(f, strlen(f), &d, &e), -1);
    assert_string_equal(e.param, "tokens");
}

/* content: null is only accepted on assistant messages (as empty). */
static void test_null_content(void **state) {
    (void)state;
    expect_error(LSR_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", 400, "messages[0].content");
    expect_error(LSR_CHAT,
                 "{\"messages\":[{\"role\":\"system\",\"content\":null},{\"role\":\"user\",\"content\":\"x\"}]}", 400,
                 "messages[0].content");
    ls_request r;
    ls_req_error e;
    const char *a = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null},"
                    "{\"role\":\"user\",\"content\":\"y\"}]}";
    assert_int_equal(parse(LSR_CHAT, a, &r, &e), 0);
    assert_string_equal(r.messages[1].content, "");
    ls_request_free(&r);
}

/* Too deep a body names the nesting limit, not a byte offset. */
/* Structured output (docs/structured_output.md section 6): the grammar is compiled while
 * parsing; an unsupported schema or a GBNF grammar is a 400 naming the field. */
static void test_response_format(void **state) {
    (void)state;
    static const char *const ok[] = {
        "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_object\"}}",
        "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
        "\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}}",
        "{\"prompt\":\"a\",\"json_schema\":{\"type\":\"array\",\"items\":{\"enum\":[1,2]}}}",
        "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"string\"}}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ls_request r;
        ls_req_error e;
        if (parse(LSR_COMPLETION, ok[i], &r, &e) != 0) fail_msg("%s: %s", ok[i], e.message);
        assert_non_null(r.grammar);
        ls_request_free(&r);
    }
    ls_request r;
    ls_req_error e;
    assert_int_equal(parse(LSR_COMPLETION, "{\"prompt\":\"a\",\"response_format\":{\"type\":\"text\"}}", &r, &e), 0);
    assert_null(r.grammar);
    ls_request_free(&r);
    expect_error(LSR_COMPLETION, "{\"prompt\":\"a\",\"grammar\":\"root ::= x\"}", 400, "grammar");
    expect_error(LSR_COMPLETION, "{\"prompt\":\"a\",\"response_format\":{\"type\":\"yaml\"}}", 400, "response_format");
    expect_error(LSR_COMPLETION, "{\"prompt\":\"a\",\"response_format\":\"json\"}", 400, "response_format");
    expect_error(LSR_COMPLETION, "{\"prompt\":\"a\",\"json_schema\":{\"oneOf\":[]}}", 400, "json_schema");
    expect_error(LSR_COMPLETION, "{\"prompt\":\"a\",\"json_schema\":{},\"response_format\":{\"type\":\"text\"}}", 400,
                 "json_schema");
    assert_int_equal(parse(LSR_COMPLETION,
                           "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                           "\"schema\":{\"properties\":{\"n\":{\"type\":\"string\",\"format\":\"date\"}}}}}}",
                           &r, &e),
                     -1);
    assert_string_equal(e.param, "response_format.json_schema.schema");
    assert_string_equal(e.code, "unsupported_schema");
    assert_non_null(strstr(e.message, "'format' at #/properties/n"));
}

static void test_nesting_limit(void **state) {
    (void)state;
    enum { DEEP = 10000 };
    static char buf[2 * DEEP + 64];
    size_t n = 0;
    n += (size_t)snprintf(buf, sizeof buf, "{\"messages\":");
    for (int i = 0; i < DEEP; i++) buf[n++] = '[';
    for (int i = 0; i < DEEP; i++) buf[n++] = ']';
    buf[n++] = '}';
    expect_error_n(LSR_CHAT, buf, n, "", "nested deeper than");
    ls_req_tokenize t;
    ls_req_error e;
    assert_int_equal(ls_req_parse_tokenize(buf, n, &t, &e), -1);
    assert_non_null(strstr(e.message, "nested deeper than"));
    /* Brackets inside a string do not count; this one is merely truncated. */
    n = (size_t)snprintf(buf, sizeof buf, "{\"content\":\"");
    for (int i = 0; i < DEEP; i++) buf[n++] = '[';
    expect_error_n(LSR_CHAT, buf, n, "", "malformed JSON");
    /* Depth within the limit is fine. */
    n = (size_t)snprintf(buf, sizeof buf, "{\"content\":\"x\",\"y\":");
    for (int i = 0; i < 100; i++) buf[n++] = '[';
    for (int i = 0; i < 100; i++) buf[n++] = ']';
    buf[n++] = '}';
    assert_int_equal(ls_req_parse_tokenize(buf, n, &t, &e), 0);
    ls_req_tokenize_free(&t);
}

/* Feed `chunks` one by one; return what was released (sent) and whether a stop hit. */
static void run_stop(const char *const *chunks, int n, char *const *stops, int n_stop, char *out, bool *hit) {
    ls_stopbuf b;
    ls_stop_init(&b);
    size_t sent = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(ls_stop_append(&b, chunks[i], strlen(chunks[i]), stops, n_stop), 0);
        assert_true(b.sent >= sent && b.sent <= b.len);
        strncat(out, b.text + sent, b.sent - sent);
        sent = b.sent;
        if (b.hit) break;
    }
    if (!b.hit) ls_stop_finish(&b);
    strncat(out, b.text + sent, b.sent - sent);
    *hit = b.hit;
    ls_stop_free(&b);
}

static void test_stop_across_chunks(void **state) {
    (void)state;
    char out[256];
    bool hit;
    char *stops[] = {"END", "\n\n"};
    const char *c1[] = {"Hello E", "N", "D tail"};
    run_stop(c1, 3, stops, 2, out, &hit);
    assert_true(hit);
    assert_string_equal(out, "Hello ");
    const char *c2[] = {"a\n", "\nb"};
    run_stop(c2, 2, stops, 2, out, &hit);
    assert_true(hit);
    assert_string_equal(out, "a");
    const char *c3[] = {"EN", "d E", "N"}; /* near misses are released, the partial tail at the end too */
    run_stop(c3, 3, stops, 2, out, &hit);
    assert_false(hit);
    assert_string_equal(out, "ENd EN");
    const char *c4[] = {"xx", "END"}; /* earliest match wins even when two stops match */
    char *stops2[] = {"D", "EN"};
    run_stop(c4, 2, stops2, 2, out, &hit);
    assert_true(hit);
    assert_string_equal(out, "xx");
    const char *c5[] = {"no stops at all"};
    run_stop(c5, 1, NULL, 0, out, &hit);
    assert_false(hit);
    assert_string_equal(out, "no stops at all");
}

static void test_stop_holds_back_only_prefixes(void **state) {
    (void)state;
    ls_stopbuf b;
    ls_stop_init(&b);
    char *stops[] = {"<end>"};
    assert_int_equal(ls_stop_append(&b, "abc<e", 5, stops, 1), 0);
    assert_int_equal(b.sent, 3); /* "<e" might start "<end>" */
    assert_int_equal(ls_stop_append(&b, "x", 1, stops, 1), 0);
    assert_int_equal(b.sent, 6); /* no longer a prefix: released */
    ls_stop_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_chat),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_tokenize_parsers),
        cmocka_unit_test(test_nul_refused),
        cmocka_unit_test(test_duplicate_keys_last_wins),
        cmocka_unit_test(test_null_content),
        cmocka_unit_test(test_response_format),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_stop_across_chunks),
        cmocka_unit_test(test_stop_holds_back_only_prefixes),
        cmocka_unit_test(test_logprobs_fields), /* docs/logprobs.md */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
