/* Structured output (docs/structured_output.md): schema compile errors name the keyword and
 * its JSON pointer, the automaton accepts and rejects byte strings, the token mask on a tiny
 * made-up vocabulary equals feeding each token separately, and with the default model a
 * constrained generation is byte-identical with and without a drafter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decode/grammar.h"
#include "lockstep.h"

static ls_grammar *compile(const char *schema, char *err, size_t errlen) {
    return ls_grammar_json_schema(schema, strlen(schema), err, errlen);
}

static void expect_error(const char *schema, const char *want) {
    char err[256] = "";
    ls_grammar *g = compile(schema, err, sizeof err);
    if (g || !strstr(err, want)) fail_msg("schema %s: got '%s', want '%s'", schema, err, want);
}

static void test_compile_errors(void **st) {
    (void)st;
    expect_error("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}",
                 "unsupported keyword 'pattern' at #/properties/a");
    expect_error("{\"$ref\":\"#/x\"}", "unsupported keyword '$ref' at #");
    expect_error("{\"type\":\"array\",\"items\":{\"oneOf\":[]}}", "unsupported keyword 'oneOf' at #/items");
    expect_error("{\"type\":\"string\",\"format\":\"date\"}", "unsupported keyword 'format'");
    expect_error("{\"type\":\"wat\"}", "unknown type 'wat'");
    expect_error("{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "required property 'x'");
    expect_error("{\"type\":[\"number\",\"integer\"]}", "distinct characters");
    expect_error("not json", "not valid JSON");
}

static bool accepts(ls_grammar *g, const char *text, bool complete) {
    ls_gstate s;
    ls_gstate_init(g, &s);
    if (!ls_gstate_feed(g, &s, text, strlen(text))) return false;
    return !complete || ls_gstate_accepting(g, &s);
}

static const char *person =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bc\",1,12]},"
    "\"maxItems\":2},\"ok\":{\"type\":[\"boolean\",\"null\"]},\"x\":{\"type\":\"number\"}},"
    "\"required\":[\"name\",\"age\"]}";

static void test_automaton(void **st) {
    (void)st;
    char err[256];
    ls_grammar *g = compile(person, err, sizeof err);
    assert_non_null(g);
    assert_true(accepts(g, "{\"name\":\"bob\",\"age\":42}", true));
    assert_true(accepts(g, "{ \"name\": \"b\\u00e9\", \"age\": -7, \"tags\": [12, \"bc\"], \"ok\": null}", true));
    assert_true(accepts(g, "{\"name\":\"\",\"age\":0,\"x\":-1.5e+3}", true));
    assert_true(accepts(g, "{\"name\":\"\xc3\xa9t\xc3\xa9\",\"age\":1,\"ok\":true}", true));
    assert_true(accepts(g, "{\"name\":\"bo", false));
    assert_false(accepts(g, "{\"name\":\"bo", true));
    assert_false(accepts(g, "{\"age\":1}", false));                                /* required first */
    assert_false(accepts(g, "{\"name\":\"abcdef\"", false));                       /* maxLength */
    assert_false(accepts(g, "{\"name\":\"a\",\"age\":01", false));                 /* leading zero */
    assert_false(accepts(g, "{\"name\":\"a\",\"age\":1.5", false));                /* integer */
    assert_false(accepts(g, "{\"name\":\"a\",\"age\":1,\"tags\":[1,1,1]", false)); /* maxItems */
    assert_false(accepts(g, "{\"name\":\"a\",\"age\":1,\"tags\":[13]", false));    /* enum */
    assert_false(accepts(g, "{\"name\":\"a\",\"age\":1,\"zz\":1", false));         /* extra key */
    assert_false(accepts(g, "{\"name\":\"a\",\"age\":1}x", false));                /* after the end */
    assert_false(accepts(g, "{\"name\":\"\xc3\"", false));                         /* bad UTF-8 */
    assert_false(accepts(g, "{\"name\":\"\\ud800\"", false));                      /* surrogate escape */
    assert_false(accepts(g, "{   \"name\"", false));                               /* whitespace bound */
    assert_false(accepts(g, "{\"name\":\"a\",\"age\":1,}", false));                /* trailing comma */
    ls_grammar_free(g);
    g = ls_grammar_json_object(err, sizeof err);
    assert_non_null(g);
    assert_true(accepts(g, "{\"a\":[1,{\"b\":null}],\"c\":\"d\",\"e\":-0.5}", true));
    assert_true(accepts(g, "{}", true));
    assert_false(accepts(g, "[1]", false));
    assert_false(accepts(g, "{\"a\":tru}", false));
    ls_grammar_free(g);
    g = compile("{\"type\":\"integer\"}", err, sizeof err);
    assert_true(accepts(g, "123", true));
    assert_false(accepts(g, "-", true));
    ls_grammar_free(g);
}

/* The trie walk's mask equals feeding every token on its own. */
static void test_mask_tiny_vocab(void **st) {
    (void)st;
    static const char *const toks[] = {"{",    "}",   "\"",    "\"name", "\":",   "\":\"", "bob", " ",    "\n",
                                       "ag",   "age", "\"age", "\":1",   "1",     "12",    "0",   "}\n",  ",",
                                       "\",",  "\"}", "a\"",   "",       "<eos>", "{\"",   "[",   "true", "\xc3",
                                       "\xa9", "n",   "na",    "name",   "\"na",  "1}",    "-",   "x",    "\""};
    int32_t n = (int32_t)(sizeof toks / sizeof toks[0]);
    size_t lens[64];
    bool eog[64];
    for (int32_t i = 0; i < n; i++) {
        lens[i] = strcmp(toks[i], "<eos>") == 0 ? 0 : strlen(toks[i]);
        eog[i] = strcmp(toks[i], "<eos>") == 0;
    }
    ls_gvocab *v = ls_gvocab_new(n, toks, lens, eog);
    assert_non_null(v);
    char err[256];
    ls_grammar *g = compile(person, err, sizeof err);
    ls_gstate *walk = malloc(sizeof(ls_gstate) * (size_t)(ls_gvocab_max_len(v) + 1));
    uint8_t allow[64];
    const char *prefixes[] = {
        "",  "{", "{\"name\":\"b", "{\"name\":\"bob\",\"age\":1", "{\"name\":\"bob\",\"age\":1}", "{\"name\":\"\xc3",
        "{ "};
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
        ls_gstate s;
        ls_gstate_init(g, &s);
        assert_true(ls_gstate_feed(g, &s, prefixes[p], strlen(prefixes[p])));
        int32_t count = ls_grammar_mask(g, v, &s, walk, allow), want = 0;
        for (int32_t t = 0; t < n; t++) {
            ls_gstate c = s;
            bool ok = eog[t] ? ls_gstate_accepting(g, &s) : lens[t] > 0 && ls_gstate_feed(g, &c, toks[t], lens[t]);
            if (ok != (allow[t] != 0))
                fail_msg("prefix '%s' token '%s': mask %d, feed %d", prefixes[p], toks[t], allow[t], ok);
            want += ok;
        }
        assert_int_equal(count, want);
    }
    free(walk);
    ls_grammar_free(g);
    ls_gvocab_free(v);
}

/* On the default model's 262k-token vocabulary: the mask (trie walk, and inside strings the
 * plain-text fast path) equals feeding every token on its own, at states of every kind. */
static void test_mask_model_vocab(void **st) {
    (void)st;
    const char *path = getenv("LOCKSTEP_MODEL");
    ls_model *m = NULL;
    char err[256];
    if (!path || ls_model_open(path, &m, err, sizeof err) != LS_OK) skip();
    const ls_gvocab *v = ls_gvocab_of_model(m);
    assert_non_null(v);
    int32_t nv = ls_gvocab_n_vocab(v);
    uint8_t *allow = malloc((size_t)nv);
    ls_gstate *walk = malloc(sizeof(ls_gstate) * (size_t)(ls_gvocab_max_len(v) + 1));
    ls_grammar *g = compile(person, err, sizeof err);
    const char *prefixes[] = {"",
                              "{\"name\":\"",
                              "{\"name\":\"ab",
                              "{\"name\":\"abcd",
                              "{\"name\":\"\xc3",
                              "{\"name\":\"a\\",
                              "{\"name\":\"a\",\"age\":1",
                              "{\"name\":\"a\",\"age\":1}"};
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
        ls_gstate s;
        ls_gstate_init(g, &s);
        assert_true(ls_gstate_feed(g, &s, prefixes[p], strlen(prefixes[p])));
        int32_t count = ls_grammar_mask(g, v, &s, walk, allow), want = 0;
        for (int32_t t = 0; t < nv; t++) {
            ls_gstate c = s;
            bool ok = ls_token_is_eog(m, t) ? ls_gstate_accepting(g, &s)
                                            : ls_gstate_feed_token(g, v, &c, t) && memcmp(&c, &s, sizeof c) != 0;
            if (ok != (allow[t] != 0)) fail_msg("prefix '%s' token %d: mask %d, feed %d", prefixes[p], t, allow[t], ok);
            want += ok;
        }
        assert_int_equal(count, want);
    }
    ls_grammar_free(g);
    free(walk);
    free(allow);
    ls_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compile_errors),
        cmocka_unit_test(test_automaton),
        cmocka_unit_test(test_mask_tiny_vocab),
        cmocka_unit_test(test_mask_model_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
