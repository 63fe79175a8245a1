/* Test fixture: a tiny random-weight Gemma 3 GGUF written from C.
 *
 * Shapes: vocab 512 (Gemma-like layout: <pad> <eos> <bos> <unk> <mask>, <unused*>,
 * <start_of_turn>=105, <end_of_turn>=106, 256 byte tokens <0x00>..<0xFF>, then normal
 * SentencePiece pieces), d=128, ff=256, 2 query heads and 1 KV head of 64, sliding
 * window 16 (so short test prompts already exceed it), every 6th layer full attention.
 * Weights are random (seeded) in a mix of types so every matmul kernel family runs:
 * Q8_0, Q5_0, Q4_0, Q4_1, Q5_1, F16, F32, BF16 on the 128-column tensors and Q4_K, Q6_K,
 * Q5_K on ffn_down (K = 256), made with the reference quantizers (quant_ref.c).
 * Tensors are drawn from one seeded stream in file order (token_embd, output_norm, then
 * layer by layer), so the same seed with fewer layers gives exactly the target's
 * embedding and first layers: a truncated target, a drafter with real acceptance.
 *
 * The test files include fixture_model.c directly (tests/CMakeLists.txt builds each
 * tests/test_*.c on its own). */
#ifndef LS_TESTS_FIXTURE_MODEL_H
#define LS_TESTS_FIXTURE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

enum {
    FIXTURE_N_VOCAB = 512,
    FIXTURE_N_EMBD = 128,
    FIXTURE_N_FF = 256,
    FIXTURE_N_HEAD = 2,
    FIXTURE_N_HEAD_KV = 1,
    FIXTURE_HEAD_DIM = 64,
    FIXTURE_BOS = 2,
    FIXTURE_EOS = 1,
    FIXTURE_FIRST_BYTE = 107,    /* <0x00> */
    FIXTURE_FIRST_PIECE = 363,   /* first normal piece */
    FIXTURE_VARIANT_TOKEN = 400, /* the token whose text differs in the vocab variant */
};

typedef struct {
    uint64_t seed;          /* weights */
    int32_t n_layer;        /* e.g. 6 (layer 5 full, others sliding) or 2 for a draft model */
    int32_t sliding_window; /* 16 */
    int32_t n_ctx_train;    /* gemma3.context_length, 4096 */
    bool vocab_variant;     /* change the text of FIXTURE_VARIANT_TOKEN (vocabulary mismatch) */
    float embd_std;         /* token embedding std (also the tied LM head) */
    float weight_gain;      /* matrix std = gain / sqrt(K) */
    float out_norm;         /* output_norm weight (sets the logit scale) */
    int32_t embd_type;      /* token_embd type id: Q8_0 (8, default) or F16 (1), ... */
} fixture_params;

fixture_params fixture_default_params(void);
/* Write the GGUF to `path`. 0 on success, -1 + message. */
int fixture_write(const fixture_params *p, const char *path, char *err, size_t errlen);
/* Write to a temporary file, open it as a model and unlink the file (the mapping keeps it).
 * LS_OK or an error code + message. */
int fixture_open(const fixture_params *p, ls_model **out, char *err, size_t errlen);

#endif
