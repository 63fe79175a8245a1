/* Gemma 3 chat template: byte-exact against the HF template rendered by jinja2
 * (tests/data/tokenizer/chat_golden.txt, tools/gen_tokenizer_golden.py), our error cases,
 * and (with the default model) that the rendering tokenizes to the expected turn markers. */
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
    ls_chat_msg only_system[] = {{"system", "be nice"}};
    expect_error(only_system, 1, "needs a following user message");
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
    if (!path || gguf_open(path, &f, err, sizeof err) != 0) skip();
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
    gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_renderings),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_roles_and_trim),
        cmocka_unit_test(test_tokenized_prompt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
