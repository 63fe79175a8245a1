/* Tool calls (src/server/tools.h, docs/tool_calls.md): request validation (400s naming the
 * field), the Gemma 4 native rendering byte-exact against jinja2 on the real template
 * (tests/data/tokenizer_bpe/chat4_tools_golden.txt, tools/gen_tool_call_golden.py), the Gemma 3
 * prompt convention (golden below), the forcing prefills, the stream hold rule and the output
 * parser (accepted forms, content, malformed calls). Pure functions, no model needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/request.h"
#include "server/tools.h"

#define WEATHER                                                                                                        \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":{"       \
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}"
#define USER "{\"role\":\"user\",\"content\":\"Weather in Paris?\"}"

static int parse(const char *json, ls_request *r, ls_req_error *e) {
    return ls_req_parse(LSR_CHAT, json, strlen(json), r, e);
}

static void expect_400(const char *json, const char *param) {
    ls_request r;
    ls_req_error e;
    if (parse(json, &r, &e) != -1) {
        fprintf(stderr, "accepted: %s\n", json);
        fail();
    }
    assert_int_equal(e.status, 400);
    if (strcmp(e.param, param) != 0) fprintf(stderr, "param '%s' (want '%s'): %s\n", e.param, param, e.message);
    assert_string_equal(e.param, param);
    assert_true(e.message[0] != 0);
}

static void test_validation(void **st) {
    (void)st;
    expect_400("{\"messages\":[" USER "],\"tools\":{}}", "tools");
    expect_400("{\"messages\":[" USER "],\"tools\":[{\"type\":\"function\",\"function\":{}}]}",
               "tools[0].function.name");
    expect_400("{\"messages\":[" USER "],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
               "tools[0].function.name");
    expect_400("{\"messages\":[" USER "],\"tools\":[{\"type\":\"x\",\"function\":{\"name\":\"a\"}}]}", "tools[0]");
    expect_400("{\"messages\":[" USER "],\"tools\":[" WEATHER "," WEATHER "]}", "tools[1].function.name");
    /* invalid JSON Schema */
    const char *bad_schemas[] = {"[]",
                                 "{\"type\":\"strin\"}",
                                 "{\"type\":5}",
                                 "{\"type\":[]}",
                                 "{\"type\":\"object\",\"properties\":[]}",
                                 "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"nope\"}}}",
                                 "{\"type\":\"object\",\"required\":\"a\"}",
                                 "{\"type\":\"object\",\"required\":[1]}",
                                 "{\"type\":\"array\",\"items\":3}",
                                 "{\"enum\":\"a\"}",
                                 "{\"description\":1}"};
    for (size_t i = 0; i < sizeof bad_schemas / sizeof *bad_schemas; i++) {
        char b[512];
        snprintf(b, sizeof b,
                 "{\"messages\":[" USER "],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                 "\"parameters\":%s}}]}",
                 bad_schemas[i]);
        expect_400(b, "tools[0].function.parameters");
    }
    expect_400("{\"messages\":[" USER "],\"tools\":[" WEATHER "],\"tool_choice\":\"always\"}", "tool_choice");
    expect_400("{\"messages\":[" USER "],\"tools\":[" WEATHER
               "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
               "tool_choice");
    expect_400("{\"messages\":[" USER "],\"tool_choice\":\"required\"}", "tool_choice");
    expect_400("{\"messages\":[" USER ",{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
               "messages[1].tool_calls[0]");
    expect_400("{\"messages\":[" USER ",{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
               "messages[1].tool_calls[0]");
    expect_400("{\"messages\":[" USER ",{\"role\":\"assistant\",\"tool_calls\":{}}]}", "messages[1].tool_calls");
    expect_400("{\"messages\":[" USER ",{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[1].tool_call_id");
    expect_400("{\"messages\":[" USER ",{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"d\","
               "\"content\":\"x\"}]}",
               "messages[2].tool_call_id");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages[0].tool_calls");

    /* accepted: no tools at all leaves r.tools NULL; none/auto without tools are fine */
    ls_request r;
    ls_req_error e;
    assert_int_equal(parse("{\"messages\":[" USER "]}", &r, &e), 0);
    assert_null(r.tools);
    ls_request_free(&r);
    assert_int_equal(parse("{\"messages\":[" USER "],\"tool_choice\":\"none\",\"tools\":[" WEATHER "]}", &r, &e), 0);
    assert_non_null(r.tools);
    assert_false(ls_tools_active(&r));
    ls_request_free(&r);
    assert_int_equal(parse("{\"messages\":[" USER "],\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\","
                           "\"function\":{\"name\":\"get_weather\"}}}",
                           &r, &e),
                     0);
    assert_true(ls_tools_forced(&r));
    ls_request_free(&r);
}

static char *unhex(const char *h) {
    size_t n = strcspn(h, "\r\n") / 2;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(h + 2 * i, "%2x", &v), 1);
        s[i] = (char)v;
    }
    s[n] = 0;
    return s;
}

static void test_gemma4_golden(void **st) {
    (void)st;
    const char *dir = getenv("LOCKSTEP_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_bpe/chat4_tools_golden.txt", dir ? dir : "tests/data");
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    static char line[1 << 16];
    char name[128] = "";
    char *req = NULL;
    int cases = 0;
    while (fgets(line, sizeof line, fp)) {
        if (!strncmp(line, "case ", 5)) sscanf(line + 5, "%127s", name);
        if (!strncmp(line, "request ", 8)) req = unhex(line + 8);
        if (strncmp(line, "expect ", 7) != 0) continue;
        char *want = unhex(line + 7);
        ls_request r;
        ls_req_error e;
        assert_int_equal(parse(req, &r, &e), 0);
        char err[256] = "";
        char *got = ls_tools_prompt(4, &r, err, sizeof err);
        if (!got || strcmp(got, want) != 0)
            fprintf(stderr, "case %s (%s):\n got: %s\nwant: %s\n", name, err, got ? got : "(null)", want);
        assert_non_null(got);
        assert_string_equal(got, want);
        free(got), free(want), free(req);
        req = NULL;
        ls_request_free(&r);
        cases++;
    }
    fclose(fp);
    assert_true(cases >= 5);
}

static void test_gemma3_render(void **st) {
    (void)st;
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"}," USER
        ",{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"21 C\"},"
        "{\"role\":\"user\",\"content\":\"And so?\"}],\"tools\":[" WEATHER "]}";
    const char *want =
        "<bos><start_of_turn>user\nBe brief.\n\nYou have access to these functions:\n"
        "{\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}\n\n"
        "To call a function, reply with a ```tool_code block holding {\"name\": <function name>, \"arguments\": <the "
        "arguments as a JSON object>}. The result comes back in a ```tool_output block.\n\n"
        "Weather in Paris?<end_of_turn>\n"
        "<start_of_turn>model\n```tool_code\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```"
        "<end_of_turn>\n"
        "<start_of_turn>user\n```tool_output\n21 C\n```\n\nAnd so?<end_of_turn>\n"
        "<start_of_turn>model\n";
    ls_request r;
    ls_req_error e;
    assert_int_equal(parse(body, &r, &e), 0);
    char err[256];
    char *got = ls_tools_prompt(3, &r, err, sizeof err);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
    ls_request_free(&r);
}

static void test_prefill_and_hold(void **st) {
    (void)st;
    ls_request r;
    ls_req_error e;
    assert_int_equal(parse("{\"messages\":[" USER "],\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\","
                           "\"function\":{\"name\":\"get_weather\"}}}",
                           &r, &e),
                     0);
    char *owned;
    assert_string_equal(ls_tools_prefill(3, &r, &owned),
                        "```tool_code\n{\"name\": \"get_weather\", \"arguments\": {\"");
    free(owned);
    assert_string_equal(ls_tools_prefill(4, &r, &owned), "<|tool_call>call:get_weather{");
    free(owned);
    char err[256];
    char *p = ls_tools_prompt(3, &r, err, sizeof err);
    size_t n = strlen(p);
    const char *tail = "Call the function get_weather now.\n\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\n"
                       "```tool_code\n{\"name\": \"get_weather\", \"arguments\": {\"";
    assert_true(n > strlen(tail) && !strcmp(p + n - strlen(tail), tail));
    free(p);
    p = ls_tools_prompt(4, &r, err, sizeof err);
    n = strlen(p);
    tail = "Weather in Paris?<turn|>\n<|turn>model\n<|channel>thought\n<channel|><|tool_call>call:get_weather{";
    assert_true(n > strlen(tail) && !strcmp(p + n - strlen(tail), tail));
    free(p);
    assert_true(ls_tools_hold(3, &r, "Sure", 4)); /* forced: always held */
    ls_request_free(&r);

    /* required of two tools: the model writes the name */
    assert_int_equal(parse("{\"messages\":[" USER "],\"tools\":[" WEATHER ",{\"type\":\"function\",\"function\":{"
                           "\"name\":\"now\"}}],\"tool_choice\":\"required\"}",
                           &r, &e),
                     0);
    assert_string_equal(ls_tools_prefill(3, &r, &owned), "```tool_code\n{\"name\": \"");
    assert_string_equal(ls_tools_prefill(4, &r, &owned), "<|tool_call>call:");
    ls_tool_output o;
    assert_int_equal(ls_tools_parse_output(3, &r, "now\"}\n```", "c", &o), 1);
    assert_string_equal(o.calls[0].name, "now");
    assert_string_equal(o.calls[0].arguments, "{}");
    ls_tool_output_free(&o);
    assert_int_equal(ls_tools_parse_output(4, &r, "get_weather{city:<|\"|>x<|\"|>}<tool_call|>", "c", &o), 1);
    assert_string_equal(o.calls[0].name, "get_weather");
    ls_tool_output_free(&o);
    assert_int_equal(ls_tools_parse_output(3, &r, "weather\", \"arguments\": {}}", "c", &o), -1);
    ls_request_free(&r);

    assert_int_equal(parse("{\"messages\":[" USER "],\"tools\":[" WEATHER "]}", &r, &e), 0);
    assert_string_equal(ls_tools_prefill(3, &r, &owned), "");
    assert_true(ls_tools_hold(3, &r, "", 0));
    assert_true(ls_tools_hold(3, &r, " \n``", 4));
    assert_true(ls_tools_hold(3, &r, "```tool_code\n{", 14));
    assert_true(ls_tools_hold(3, &r, "{\"na", 4));
    assert_false(ls_tools_hold(3, &r, "```py", 5));
    assert_false(ls_tools_hold(3, &r, "It is", 5));
    assert_true(ls_tools_hold(4, &r, "<|tool", 6));
    assert_false(ls_tools_hold(4, &r, "{", 1));
    ls_request_free(&r);
}

/* Parse `text` for a request with WEATHER (and tool_choice `choice`, JSON or NULL). */
static int out_of(int style, const char *choice, const char *text, ls_tool_output *o) {
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\":[" USER "],\"tools\":[" WEATHER "]%s%s}",
             choice ? ",\"tool_choice\":" : "", choice ? choice : "");
    ls_request r;
    ls_req_error e;
    assert_int_equal(parse(body, &r, &e), 0);
    int rc = ls_tools_parse_output(style, &r, text, "call_x", o);
    ls_request_free(&r);
    return rc;
}

static void expect_call(int style, const char *choice, const char *text, const char *args) {
    ls_tool_output o;
    int rc = out_of(style, choice, text, &o);
    if (rc != 1) fprintf(stderr, "no call (%d: %s) in: %s\n", rc, o.error, text);
    assert_int_equal(rc, 1);
    assert_int_equal(o.n_calls, 1);
    assert_string_equal(o.calls[0].name, "get_weather");
    assert_string_equal(o.calls[0].id, "call_x_0");
    assert_string_equal(o.calls[0].arguments, args);
    ls_tool_output_free(&o);
}

static void expect_rc(int style, const char *choice, const char *text, int want) {
    ls_tool_output o;
    int rc = out_of(style, choice, text, &o);
    if (rc != want) fprintf(stderr, "rc %d (want %d, %s) for: %s\n", rc, want, o.error, text);
    assert_int_equal(rc, want);
    if (want < 0) assert_true(o.error[0] != 0);
    ls_tool_output_free(&o);
}

static void test_parse_gemma3(void **st) {
    (void)st;
    const char *paris = "{\"city\":\"Paris\"}";
    expect_call(3, NULL, "```tool_code\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```", paris);
    expect_call(3, NULL, "  ```json\n{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Paris\"}}\n``` trailing",
                paris);
    expect_call(3, NULL, "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}",
                "{\"city\":\"Paris\"}");
    expect_call(3, NULL, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}", paris);
    expect_call(3, NULL, "[{\"name\": \"get_weather\"}]", "{}");
    /* forced: the prefill is put back in front */
    expect_call(3, "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", "city\": \"Paris\"}}\n```",
                paris);
    /* required with one tool: a call of that tool */
    expect_call(3, "\"required\"", "city\": \"Paris\"}}", paris);
    /* two calls in two blocks */
    ls_tool_output o;
    assert_int_equal(out_of(3, NULL,
                            "```tool_code\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"A\"}}\n```\n"
                            "```tool_code\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"B\"}}\n```",
                            &o),
                     1);
    assert_int_equal(o.n_calls, 2);
    assert_string_equal(o.calls[1].id, "call_x_1");
    assert_string_equal(o.calls[1].arguments, "{\"city\":\"B\"}");
    ls_tool_output_free(&o);
    /* content */
    expect_rc(3, NULL, "It is sunny in Paris.", 0);
    expect_rc(3, NULL, "{\"answer\": 42}", 0);
    expect_rc(3, NULL, "```python\nprint(1)\n```", 0);
    expect_rc(3, NULL, "```json\n{\"temperature\": 21}\n```", 0);
    expect_rc(3, "\"none\"", "{\"name\": \"get_weather\", \"arguments\": {}}", 0);
    /* malformed */
    expect_rc(3, NULL, "```tool_code\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", -1);
    expect_rc(3, NULL, "```tool_code\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n```", -1);
    expect_rc(3, NULL, "{\"name\": \"get_time\", \"arguments\": {}}", -1);
    expect_rc(3, NULL, "{\"name\": \"get_weather\", \"arguments\": [1]}", -1);
    expect_rc(3, NULL, "```tool_code\nget_weather(city='Paris')\n```", -1);
    expect_rc(3, "\"required\"", "x\": 1", -1);
}

static void test_parse_gemma4(void **st) {
    (void)st;
    expect_call(4, NULL, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", "{\"city\":\"Paris\"}");
    expect_call(4, NULL,
                "<|tool_call>call:get_weather{city:<|\"|>a, b {c}<|\"|>,n:-2.5,ok:true,x:None,l:[1,<|\"|>s<|\"|>],"
                "o:{k:false}}",
                "{\"city\":\"a, b {c}\",\"n\":-2.5,\"ok\":true,\"x\":null,\"l\":[1,\"s\"],\"o\":{\"k\":false}}");
    expect_call(4, "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", "city:<|\"|>Paris<|\"|>}",
                "{\"city\":\"Paris\"}");
    expect_call(4, "\"required\"", "}<tool_call|>", "{}");
    expect_rc(4, NULL, "It is sunny.", 0);
    expect_rc(4, NULL, "<|tool_call>call:get_weather{city:Paris}<tool_call|>", -1);
    expect_rc(4, NULL, "<|tool_call>call:get_weather{city:<|\"|>Paris", -1);
    expect_rc(4, NULL, "<|tool_call>call:nope{}<tool_call|>", -1);
    expect_rc(4, NULL, "<|tool_call>get_weather{}", -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation),    cmocka_unit_test(test_gemma4_golden),
        cmocka_unit_test(test_gemma3_render), cmocka_unit_test(test_prefill_and_hold),
        cmocka_unit_test(test_parse_gemma3),  cmocka_unit_test(test_parse_gemma4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
