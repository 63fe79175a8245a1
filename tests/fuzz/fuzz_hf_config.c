/* libFuzzer target for config.json parsing: arbitrary bytes through ls_hf_config_parse. On
 * success it checks the promises model code relies on (every per-layer array consistent:
 * positive dims, KV heads dividing the query heads, KV sources earlier non-shared layers
 * of the same type and geometry, or -1 for the assistant; bits and group sizes in the
 * supported sets) and queries ls_hf_quant_for with every override path; then frees. On
 * failure the message must start with "config: " and nothing may be left allocated.
 *
 * Built with clang -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt, LS_FUZZ=ON) and, with any
 * compiler, next to corpus_runner.c to replay tests/fuzz/corpus/hf_config/. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_hf_config: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);                 \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

static int bits_ok(int32_t b) {
    return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8;
}
static int group_ok(int32_t g) {
    return g == 32 || g == 64 || g == 128;
}

static void check_layer(const ls_hf_config *c, int32_t i) {
    int32_t kv = c->layer_kv_heads[i], src = c->layer_kv_source[i];
    CHECK(c->layer_head_dim[i] > 0 && c->layer_head_dim[i] % 2 == 0);
    CHECK(kv > 0 && c->n_heads % kv == 0);
    CHECK(c->layer_intermediate[i] > 0);
    CHECK(!c->layer_k_eq_v[i] || !c->layer_sliding[i]);
    if (c->arch == LS_ARCH_GEMMA4_ASSISTANT) {
        CHECK(src == -1);
        return;
    }
    CHECK(src >= 0 && src <= i);
    if (src == i) return;
    CHECK(src < c->n_layers - c->num_kv_shared_layers);
    CHECK(c->layer_sliding[src] == c->layer_sliding[i]);
    CHECK(c->layer_head_dim[src] == c->layer_head_dim[i] && c->layer_kv_heads[src] == kv);
}

static void check_config(const ls_hf_config *c) {
    CHECK(c->arch == LS_ARCH_GEMMA3 || c->arch == LS_ARCH_GEMMA4 || c->arch == LS_ARCH_GEMMA4_ASSISTANT);
    CHECK(c->n_layers >= 1 && c->n_layers <= LS_HF_MAX_LAYERS);
    CHECK(c->vocab_size > 0 && c->hidden_size > 0 && c->n_heads > 0 && c->sliding_window > 0);
    CHECK(c->n_eos >= 0 && c->n_eos <= 8);
    for (int32_t k = 0; k < c->n_eos; k++) CHECK(c->eos_token_ids[k] >= 0 && c->eos_token_ids[k] < c->vocab_size);
    CHECK(c->bos_token_id >= 0 && c->bos_token_id < c->vocab_size);
    if (c->arch != LS_ARCH_GEMMA3) CHECK(!c->layer_sliding[c->n_layers - 1]);
    for (int32_t i = 0; i < c->n_layers; i++) check_layer(c, i);
    CHECK(c->rope_partial_full > 0 && c->rope_partial_full <= 1 && c->rope_scaling_full > 0);
    const ls_hf_quant *q = &c->quant;
    if (!q->present) {
        int32_t b, g;
        CHECK(q->n_overrides == 0 && !ls_hf_quant_for(c, "model.layers.0.mlp.gate_proj", &b, &g));
        return;
    }
    CHECK(bits_ok(q->bits) && group_ok(q->group_size));
    for (int32_t k = 0; k < q->n_overrides; k++) {
        const ls_hf_quant_override *ov = &q->overrides[k];
        int32_t b = 0, g = 0;
        CHECK(ov->path && ov->path[0]);
        CHECK(ls_hf_quant_for(c, ov->path, &b, &g) == ov->quantized);
        if (ov->quantized) CHECK(bits_ok(b) && group_ok(g) && b == ov->bits && g == ov->group_size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ls_hf_config *c = malloc(sizeof *c); /* heap, so ASan sees overruns of the arrays */
    char err[512];
    CHECK(c);
    int rc = ls_hf_config_parse((const char *)data, size, c, err, sizeof err);
    CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        check_config(c);
    } else {
        CHECK(strncmp(err, "config: ", 8) == 0);
        CHECK(!c->quant.present && c->quant.overrides == NULL && c->quant.n_overrides == 0);
    }
    ls_hf_config_free(c);
    free(c);
    return 0;
}
