/* libFuzzer target for the tokenizer.json loader: parse arbitrary bytes with
 * ls_tokenizer_from_json_mem (the first 0x00 byte, if any, splits the input into
 * tokenizer.json | tokenizer_config.json so the config parser is reached too), then, when
 * the file was accepted, tokenize a few short strings from the input's tail in both
 * parse_special modes and decode the ids again. Checks the loader's promises (a failure
 * leaves *out NULL and a "tokenizer.json: " message; ids are in range; the count does not
 * depend on the buffer) and traps when one is broken; ASan/UBSan catch the rest.
 *
 * Built with clang -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt, LS_FUZZ=ON), and with any
 * compiler next to corpus_runner.c, which replays tests/fuzz/corpus/tokenizer_json/ as a
 * regression test (tests/fuzz/regression.cmake). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_tokenizer_json: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

static void exercise(const ls_tokenizer *t, const char *text, size_t len) {
    int32_t ids[256], ids2[4];
    int32_t nv = ls_tokenizer_n_vocab(t);
    for (int ps = 0; ps < 2; ps++) {
        int64_t n = ls_tokenize(t, text, len, ls_tokenizer_add_bos(t), ps == 1, ids, 256);
        CHECK(n >= 0);
        int64_t n2 = ls_tokenize(t, text, len, ls_tokenizer_add_bos(t), ps == 1, ids2, 4);
        CHECK(n2 == n);
        int64_t m = n < 256 ? n : 256;
        ls_detok_state stt = {0};
        char buf[512];
        for (int64_t i = 0; i < m; i++) {
            CHECK(ids[i] >= 0 && ids[i] < nv);
            CHECK(ls_token_to_bytes(t, ids[i], true, buf, (int)sizeof buf) >= 0);
            int k = ls_detok_push(t, &stt, ids[i], ps == 1, buf, (int)sizeof buf);
            CHECK(k >= -1);
        }
        CHECK(ls_detok_flush(&stt, buf, (int)sizeof buf) >= 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    const char *nul = memchr(p, 0, size);
    size_t jlen = nul ? (size_t)(nul - p) : size;
    const char *cfg = nul ? nul + 1 : NULL;
    size_t clen = nul ? size - jlen - 1 : 0;
    ls_tokenizer *t = (ls_tokenizer *)&t;
    char err[256] = "";
    int rc = ls_tokenizer_from_json_mem(p, jlen, cfg, clen, &t, err, sizeof err);
    if (rc != 0) {
        CHECK(t == NULL);
        CHECK(strncmp(err, "tokenizer", 9) == 0);
        return 0;
    }
    CHECK(t != NULL);
    static const char *const fixed[] = {"",        " ", "a b  c\n\n\td", "<bos>x<eos>", "\xE2\x96\x81\xE2\x96\x81",
                                        "\xFF\xC3"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) exercise(t, fixed[i], strlen(fixed[i]));
    size_t tail = size < 48 ? size : 48; /* raw input bytes as text: specials, invalid UTF-8 */
    exercise(t, p + size - tail, tail);
    char chat_err[128];
    ls_chat_msg m[] = {{"user", "hi"}};
    char *s = ls_chat_render(t, m, 1, NULL, chat_err, sizeof chat_err);
    free(s);
    ls_tokenizer_free(t);
    return 0;
}
