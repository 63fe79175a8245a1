/* libFuzzer target for the safetensors header validator: arbitrary bytes as a whole file
 * image through ls_st_validate_buffer. ASan/UBSan catch any read outside the image, and the
 * target checks the validator's promises (a result of 0 or -1; a failure always comes with
 * a "safetensors: " message; a success leaves the message empty) and traps when one breaks.
 * A valid image is also validated a second time to catch state kept between calls.
 *
 * Built with clang -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt, LS_FUZZ=ON) and, with any
 * compiler, next to corpus_runner.c to replay tests/fuzz/corpus/safetensors/. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_safetensors: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    memset(err, 'x', sizeof err);
    int rc = ls_st_validate_buffer(data, size, err, sizeof err);
    CHECK(rc == 0 || rc == -1);
    CHECK(memchr(err, 0, sizeof err) != NULL);
    if (rc != 0) {
        CHECK(strncmp(err, "safetensors: ", 13) == 0);
        return 0;
    }
    CHECK(err[0] == 0);
    CHECK(ls_st_validate_buffer(data, size, NULL, 0) == 0);
    return 0;
}
