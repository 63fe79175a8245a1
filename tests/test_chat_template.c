/* Gemma 3 chat template: byte-exact against the HF template rendered by jinja2
 * (tests/data/tokenizer/chat_golden.txt, tools/gen_tokenizer_golden.py), our error cases,
 * and (with the default model) that the rendering tokenizes to the expected turn markers.
 * Gemma 4: byte-exact against jinja2 on the template stored in llama.cpp's Gemma 4 vocab GGUF
 * (tests/data/tokenizer_bpe/chat4_golden.txt, tools/gen_chat_template_golden.py), thinking
 * off and on, plus the template choice by vocabulary (ls_chat_style_of / ls_chat_render). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a hex field into a fresh NUL-terminated string. */
static char *unhex(const char *h) {
    size_t n = strcspn(h, "\r\n") / 2;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);
        assert_true(hi >= 0 && lo >= 0);
        s[i] = (char)(hi * 16 + lo);
    }
    s[n] = '\0';
    return s;
}

static void test_golden_renderings(void **st) {
    (void)st;
    const char *dir = getenv("LOCKSTEP_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/chat_golden.txt", dir ? dir : "tests/data");
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "cannot open %s\n", path);
        fail();
    }
    char line[65536];
    int cases = 0, ok = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        char name[128];
        int gen, nmsg;
        assert_int_equal(sscanf(line, "case %127s %d %d", name, &gen, &nmsg), 3);
        assert_true(nmsg > 0 && nmsg < 64);
        ls_chat_msg msgs[64];
        char *roles[64], *contents[64];
        for (int i = 0; i < nmsg; i++) {
            assert_non_null(fgets(line, sizeof line, fp));
            char role[32];
            int off = 0;
            assert_int_equal(sscanf(line, "msg %31s %n", role, &off), 1);
            roles[i] = strdup(role);
            contents[i] = unhex(line + off);
            msgs[i] = (ls_chat_msg){roles[i], contents[i]};
        }
        assert_non_null(fgets(line, sizeof line, fp));
        assert_int_equal(strncmp(line, "expect ", 7), 0);
        char *want = unhex(line + 7);
        char err[256] = "";
        char *got = ls_chat_render_gemma3(msgs, nmsg, gen != 0, err, sizeof err);
        cases++;
        if (got && strcmp(got, want) == 0)
            ok++;
        else
            fprintf(stderr, "chat case %s: %s\n  got:  [%s]\n  want: [%s]\n", name, got ? "differs" : err,
                    got ? got : "", want);
        free(got);
        free(want);
        for (int i = 0; i < nmsg; i++) {
            free(roles[i]);
            free(contents[i]);
        }
    }
    fclose(fp);
    fprintf(stderr, "chat template: %d/%d renderings equal the HF template\n", ok, cases);
    assert_true(cases >= 10);
    assert_int_equal(ok, cases);
}

static void expect_error(const ls_chat_msg *m, int n, const char *needle) {
    char err[256] = "";
    char *s = ls_chat_render_gemma3(m, n, true, err, sizeof err);
    if (s || !strstr(err, needle)) {
        fprintf(stderr, "expected error containing '%s', got %s '%s'\n", needle, s ? "output" : "error", s ? s : err);
        free(s);
        fail();
    }
}

static void test_errors(void **st) {
    (void)st;
    ls_chat_msg unknown[] = {{"user", "hi"}, {"robot", "beep"}};
    expect_error(unknown, 2, "unknown role 'robot'");
    ls_chat_msg late_system[] = {{"user", "hi"}, {"model", "yo"}, {"system", "be nice"}};
    expect_error(late_system, 3, "system message 2 must be the first");
    expect_error(NULL, 0, "no messages");
    ls_chat_msg one[] = {{"user", "hi"}};
    expect_error(one, 0, "no messages");
    /* only a system message: rendered as the system text folded into an empty user turn */
    ls_chat_msg only_system[] = {{"system", "be nice"}};
    char e0[256];
    char *r0 = ls_chat_render_gemma3(only_system, 1, true, e0, sizeof e0);
    assert_non_null(r0);
    assert_string_equal(r0, "<bos><start_of_turn>user\nbe nice\n\n<end_of_turn>\n<start_of_turn>model\n");
    free(r0);
    ls_chat_msg two_users[] = {{"user", "a"}, {"user", "b"}};
    expect_error(two_users, 2, "alternate");
    ls_chat_msg model_first[] = {{"system", "s"}, {"assistant", "a"}};
    expect_error(model_first, 2, "alternate");
    ls_chat_msg null_content[] = {{"user", NULL}};
    expect_error(null_content, 1, "no content");
    ls_chat_msg null_role[] = {{NULL, "x"}};
    expect_error(null_role, 1, "unknown role");
    /* No err buffer: still a clean NULL. */
    assert_null(ls_chat_render_gemma3(unknown, 2, true, NULL, 0));
}

static void test_roles_and_trim(void **st) {
    (void)st;
    ls_chat_msg m[] = {{"system", " S "}, {"user", "\t q \n"}, {"assistant", "a"}, {"user", "b"}, {"model", "c"}};
    char err[256];
    char *s = ls_chat_render_gemma3(m, 5, false, err, sizeof err);
    assert_non_null(s);
    assert_string_equal(s, "<bos><start_of_turn>user\n S \n\nq<end_of_turn>\n"
                           "<start_of_turn>model\na<end_of_turn>\n"
                           "<start_of_turn>user\nb<end_of_turn>\n"
                           "<start_of_turn>model\nc<end_of_turn>\n");
    free(s);
    /* Invalid UTF-8 in content is kept byte for byte (and stops trimming). */
    ls_chat_msg bad[] = {{"user", " \xFF "}};
    s = ls_chat_render_gemma3(bad, 1, true, err, sizeof err);
    assert_string_equal(s, "<bos><start_of_turn>user\n\xFF<end_of_turn>\n<start_of_turn>model\n");
    free(s);
}

static void test_tokenized_prompt(void **st) {
    (void)st;
    const char *path = getenv("LOCKSTEP_MODEL");
    gguf_file *f = NULL;
    char err[256];
    if (!path || ls_gguf_open(path, &f, err, sizeof err) != 0) skip();
    ls_tokenizer *t = NULL;
    assert_int_equal(ls_tokenizer_from_gguf(f, &t, err, sizeof err), 0);
    ls_chat_msg m[] = {{"user", "Hi"}};
    char *s = ls_chat_render_gemma3(m, 1, true, err, sizeof err);
    int32_t ids[64];
    /* The rendering carries its own <bos>: tokenize with add_bos off, specials on. */
    int64_t n = ls_tokenize(t, s, strlen(s), false, true, ids, 64);
    /* <bos> <start_of_turn> user \n Hi <end_of_turn> \n <start_of_turn> model \n */
    const int32_t want[] = {2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107};
    assert_int_equal(n, 10);
    for (int i = 0; i < 10; i++) {
        if (i == 4) continue; /* the id of "Hi" is the vocab's business; checked via text below */
        assert_int_equal(ids[i], want[i]);
    }
    char piece[16];
    int k = ls_token_to_bytes(t, ids[4], false, piece, sizeof piece);
    assert_int_equal(k, 2);
    assert_memory_equal(piece, "Hi", 2);
    free(s);
    ls_tokenizer_free(t);
    ls_gguf_close(f);
}

static void test_gemma4_golden(void **st) {
    (void)st;
    const char *dir = getenv("LOCKSTEP_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_bpe/chat4_golden.txt", dir ? dir : "tests/data");
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "cannot open %s\n", path);
        fail();
    }
    char line[65536];
    int cases = 0, ok = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        char name[128];
        int gen, think, nmsg;
        assert_int_equal(sscanf(line, "case %127s %d %d %d", name, &gen, &think, &nmsg), 4);
        assert_true(nmsg > 0 && nmsg < 64);
        ls_chat_msg msgs[64];
        char *roles[64], *contents[64];
        for (int i = 0; i < nmsg; i++) {
            assert_non_null(fgets(line, sizeof line, fp));
            char role[32];
            int off = 0;
            assert_int_equal(sscanf(line, "msg %31s %n", role, &off), 1);
            roles[i] = strdup(role);
            contents[i] = unhex(line + off);
            msgs[i] = (ls_chat_msg){roles[i], contents[i]};
        }
        assert_non_null(fgets(line, sizeof line, fp));
        assert_int_equal(strncmp(line, "expect ", 7), 0);
        char *want = unhex(line + 7);
        char err[256] = "";
        ls_chat_opts o = ls_chat_opts_default();
        o.add_generation_prompt = gen != 0;
        o.enable_thinking = think != 0;
        char *got = ls_chat_render_gemma4(msgs, nmsg, &o, err, sizeof err);
        cases++;
        if (got && strcmp(got, want) == 0)
            ok++;
        else
            fprintf(stderr, "gemma4 chat case %s: %s\n  got:  [%s]\n  want: [%s]\n", name, got ? "differs" : err,
                    got ? got : "", want);
        free(got);
        free(want);
        for (int i = 0; i < nmsg; i++) {
            free(roles[i]);
            free(contents[i]);
        }
    }
    fclose(fp);
    fprintf(stderr, "gemma4 chat template: %d/%d renderings equal the HF template\n", ok, cases);
    assert_true(cases >= 10);
    assert_int_equal(ok, cases);
}

static void test_gemma4_options_and_errors(void **st) {
    (void)st;
    char err[256];
    ls_chat_msg m[] = {{"user", "Hi"}};
    /* E2B/E4B-style: no empty thought after the generation prompt. */
    ls_chat_opts o = ls_chat_opts_default();
    o.empty_thought = false;
    char *s = ls_chat_render_gemma4(m, 1, &o, err, sizeof err);
    assert_string_equal(s, "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
    free(s);
    s = ls_chat_render_gemma4(m, 1, NULL, err, sizeof err); /* defaults: the 31B-style template */
    assert_string_equal(s, "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    free(s);
    ls_chat_msg late_system[] = {{"user", "hi"}, {"system", "x"}};
    assert_null(ls_chat_render_gemma4(late_system, 2, NULL, err, sizeof err));
    assert_non_null(strstr(err, "must be the first"));
    ls_chat_msg robot[] = {{"robot", "x"}};
    assert_null(ls_chat_render_gemma4(robot, 1, NULL, err, sizeof err));
    assert_non_null(strstr(err, "unknown role 'robot'"));
    ls_chat_msg null_content[] = {{"user", NULL}};
    assert_null(ls_chat_render_gemma4(null_content, 1, NULL, err, sizeof err));
    assert_null(ls_chat_render_gemma4(NULL, 0, NULL, err, sizeof err));
    assert_non_null(strstr(err, "no messages"));
    /* Unterminated thinking in a model turn: everything from "<|channel>" on is dropped. */
    ls_chat_msg open_think[] = {{"user", "q"}, {"model", "ans<|channel>half"}};
    o.add_generation_prompt = false;
    s = ls_chat_render_gemma4(open_think, 2, &o, err, sizeof err);
    assert_string_equal(s, "<bos><|turn>user\nq<turn|>\n<|turn>model\nans<turn|>\n");
    free(s);
}

/* The template follows the vocabulary's turn tokens. */
static void test_style_by_vocab(void **st) {
    (void)st;
    static const char *const g4[] = {"<pad>", "<eos>", "<bos>", "<|turn>", "<turn|>"};
    static const char *const g3[] = {"<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"};
    static const char *const none[] = {"<pad>", "<eos>", "<bos>", "a", "b"};
    const char *const *sets[] = {g4, g3, none};
    const ls_chat_style want[] = {LS_CHAT_GEMMA4, LS_CHAT_GEMMA3, LS_CHAT_UNKNOWN};
    const char *prefix[] = {"<bos><|turn>user\n", "<bos><start_of_turn>user\n", NULL};
    for (int k = 0; k < 3; k++) {
        uint64_t lens[5];
        int32_t types[5] = {3, 3, 3, 3, 3};
        for (int i = 0; i < 5; i++) lens[i] = strlen(sets[k][i]);
        ls_tokenizer_desc d = {.n_vocab = 5,
                               .texts = sets[k],
                               .lens = lens,
                               .types = types,
                               .bos = 2,
                               .eos = 1,
                               .unk = -1,
                               .pad = 0,
                               .eot = -1,
                               .eom = -1};
        ls_tokenizer *t = NULL;
        char err[256];
        assert_int_equal(ls_tokenizer_create(&d, &t, err, sizeof err), 0);
        assert_int_equal(ls_chat_style_of(t), want[k]);
        ls_chat_msg m[] = {{"user", "Hi"}};
        char *s = ls_chat_render(t, m, 1, NULL, err, sizeof err);
        if (prefix[k]) {
            assert_non_null(s);
            assert_int_equal(strncmp(s, prefix[k], strlen(prefix[k])), 0);
        } else {
            assert_null(s);
            assert_non_null(strstr(err, "turn tokens"));
        }
        free(s);
        ls_tokenizer_free(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_renderings), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_roles_and_trim),    cmocka_unit_test(test_tokenized_prompt),
        cmocka_unit_test(test_gemma4_golden),     cmocka_unit_test(test_gemma4_options_and_errors),
        cmocka_unit_test(test_style_by_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
