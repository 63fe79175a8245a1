/* lockstep-gen-model: tokenizer.json / tokenizer_config.json for the synthetic Gemma 4
 * checkpoints.
 *
 * Ids 0..511 are exactly those of the test fixtures' tokenizer (tests/data/hf/README.md,
 * "Common shape of all fixtures"): Gemma 4's special tokens at their real ids (<pad> 0, <eos> 1, <bos> 2,
 * <unk> 3, <mask> 4, [multimodal] 5, <|tool> 46 .. <|"|> 52, <|think|> 98, <|channel> 100,
 * <channel|> 101, <|turn> 105, <turn|> 106; other ids below 107 special <unusedN>), "\n"
 * 107, byte-fallback pieces <0x00>..<0xFF> 108..363, 74 single characters and 74 learned
 * merges 364..511. Ids 512..262143 pad the vocabulary to the real size with normal vocab
 * entries "<unused{id-6}>" (continuing the fixture's numbering; no merge produces them, so
 * text never encodes to them, but generated ids decode to readable names). The loader
 * needs tokenizer n_vocab <= embedding rows; we make it equal, as in the real release. */
#include <stdio.h>
#include <string.h>

#include "gen_model.h"

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

static const char *const CHARS_AND_MERGED[148] = {
    SP,      "a",         "b",     "c",        "d",    "e",    "f",    "g",    "h",      "i",     "j",
    "k",     "l",         "m",     "n",        "o",    "p",    "q",    "r",    "s",      "t",     "u",
    "v",     "w",         "x",     "y",        "z",    "A",    "B",    "C",    "D",      "E",     "F",
    "G",     "H",         "I",     "J",        "K",    "L",    "M",    "N",    "O",      "P",     "Q",
    "R",     "S",         "T",     "U",        "V",    "W",    "X",    "Y",    "Z",      "0",     "1",
    "2",     "3",         "4",     "5",        "6",    "7",    "8",    "9",    ".",      ",",     "!",
    "?",     "'",         "-",     ":",        ";",    "(",    ")",    "\"",   SP "t",   "he",    SP "a",
    SP "w",  SP "the",    "en",    SP "o",     SP "s", SP "i", "al",   "er",   "ok",     SP "b",  "nd",
    "oken",  "ro",        SP "l",  SP "token", "de",   "es",   "ke",   "re",   SP "T",   SP "m",  SP "and",
    SP "is", SP "of",     SP "wi", "ac",       "an",   "all",  "di",   "ers",  "ll",     "ne",    "ng",
    "ode",   "ps",        "th",    "ti",       "ts",   "ver",  SP "d", SP "f", SP "The", SP "at", SP "it",
    SP "la", SP "tokens", SP "we", SP "with",  "af",   "ar",   "as",   "ack",  "alu",    "alues", "ding",
    "gh",    "hi",        "hen",   "igh",      "le",   "mall", "mb",   "ny",   "odel",   "pt",    "raf",
    "st",    "values",    "xt",    "yers",     SP "c",
};

static const char *const MERGES[74][2] = {
    {SP, "t"},      {"h", "e"},      {SP, "a"},      {SP, "w"},        {SP "t", "he"}, {"e", "n"},    {SP, "o"},
    {SP, "s"},      {SP, "i"},       {"a", "l"},     {"e", "r"},       {"o", "k"},     {SP, "b"},     {"n", "d"},
    {"ok", "en"},   {"r", "o"},      {SP, "l"},      {SP "t", "oken"}, {"d", "e"},     {"e", "s"},    {"k", "e"},
    {"r", "e"},     {SP, "T"},       {SP, "m"},      {SP "a", "nd"},   {SP "i", "s"},  {SP "o", "f"}, {SP "w", "i"},
    {"a", "c"},     {"a", "n"},      {"al", "l"},    {"d", "i"},       {"er", "s"},    {"l", "l"},    {"n", "e"},
    {"n", "g"},     {"o", "de"},     {"p", "s"},     {"t", "h"},       {"t", "i"},     {"t", "s"},    {"v", "er"},
    {SP, "d"},      {SP, "f"},       {SP "T", "he"}, {SP "a", "t"},    {SP "i", "t"},  {SP "l", "a"}, {SP "token", "s"},
    {SP "w", "e"},  {SP "wi", "th"}, {"a", "f"},     {"a", "r"},       {"a", "s"},     {"ac", "k"},   {"al", "u"},
    {"alu", "es"},  {"di", "ng"},    {"g", "h"},     {"h", "i"},       {"he", "n"},    {"i", "gh"},   {"l", "e"},
    {"m", "all"},   {"m", "b"},      {"n", "y"},     {"ode", "l"},     {"p", "t"},     {"r", "af"},   {"s", "t"},
    {"v", "alues"}, {"x", "t"},      {"y", "ers"},   {SP, "c"},
};

static const struct {
    int id;
    const char *text;
} SPECIALS[] = {
    {0, "<pad>"},
    {1, "<eos>"},
    {2, "<bos>"},
    {3, "<unk>"},
    {4, "<mask>"},
    {5, "[multimodal]"},
    {46, "<|tool>"},
    {47, "<tool|>"},
    {48, "<|tool_call>"},
    {49, "<tool_call|>"},
    {50, "<|tool_response>"},
    {51, "<tool_response|>"},
    {52, "<|\"|>"},
    {98, "<|think|>"},
    {100, "<|channel>"},
    {101, "<channel|>"},
    {105, "<|turn>"},
    {106, "<turn|>"},
};

/* Text of token id (buf for generated names). */
static const char *token_text(int id, char *buf, size_t cap) {
    for (size_t k = 0; k < sizeof SPECIALS / sizeof SPECIALS[0]; k++)
        if (SPECIALS[k].id == id) return SPECIALS[k].text;
    if (id == 107) return "\n";
    if (id >= 108 && id < 364) {
        snprintf(buf, cap, "<0x%02X>", id - 108);
        return buf;
    }
    if (id >= 364 && id < 512) return CHARS_AND_MERGED[id - 364];
    snprintf(buf, cap, "<unused%d>", id - 6);
    return buf;
}

static const char TOKENIZER_CONFIG[] = "{\n"
                                       "  \"backend\": \"tokenizers\",\n"
                                       "  \"bos_token\": \"<bos>\",\n"
                                       "  \"clean_up_tokenization_spaces\": false,\n"
                                       "  \"eos_token\": \"<eos>\",\n"
                                       "  \"eot_token\": \"<turn|>\",\n"
                                       "  \"is_local\": true,\n"
                                       "  \"local_files_only\": false,\n"
                                       "  \"mask_token\": \"<mask>\",\n"
                                       "  \"model_max_length\": 1000000000000000019884624838656,\n"
                                       "  \"model_specific_special_tokens\": {\n"
                                       "    \"eot_token\": \"<turn|>\",\n"
                                       "    \"sot_token\": \"<|turn>\"\n"
                                       "  },\n"
                                       "  \"pad_token\": \"<pad>\",\n"
                                       "  \"padding_side\": \"left\",\n"
                                       "  \"sot_token\": \"<|turn>\",\n"
                                       "  \"spaces_between_special_tokens\": false,\n"
                                       "  \"tokenizer_class\": \"GemmaTokenizer\",\n"
                                       "  \"unk_token\": \"<unk>\"\n"
                                       "}";

int gm_write_tokenizer_files(const char *dir, int32_t vocab) {
    if (vocab < 512) {
        fprintf(stderr, "lockstep-gen-model: vocab %d < 512\n", vocab);
        return -1;
    }
    gm_buf b = {0};
    char tmp[32];
    gm_buf_printf(&b,
                  "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [\n");
    for (int id = 0; id < 107; id++) {
        gm_buf_printf(&b, "    {\n      \"id\": %d,\n      \"content\": ", id);
        gm_buf_json_str(&b, token_text(id, tmp, sizeof tmp));
        gm_buf_printf(&b,
                      ",\n      \"single_word\": false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n"
                      "      \"normalized\": false,\n      \"special\": true\n    }%s\n",
                      id + 1 < 107 ? "," : "");
    }
    gm_buf_printf(
        &b, "  ],\n"
            "  \"normalizer\": {\n    \"type\": \"Replace\",\n    \"pattern\": {\n      \"String\": \" \"\n    },\n"
            "    \"content\": \"" SP "\"\n  },\n"
            "  \"pre_tokenizer\": {\n    \"type\": \"Split\",\n    \"pattern\": {\n      \"String\": \" \"\n    },\n"
            "    \"behavior\": \"MergedWithPrevious\",\n    \"invert\": false\n  },\n"
            "  \"post_processor\": {\n    \"type\": \"TemplateProcessing\",\n"
            "    \"single\": [\n      {\n        \"SpecialToken\": {\n          \"id\": \"<bos>\",\n"
            "          \"type_id\": 0\n        }\n      },\n      {\n        \"Sequence\": {\n"
            "          \"id\": \"A\",\n          \"type_id\": 0\n        }\n      }\n    ],\n"
            "    \"pair\": [\n      {\n        \"SpecialToken\": {\n          \"id\": \"<bos>\",\n"
            "          \"type_id\": 0\n        }\n      },\n      {\n        \"Sequence\": {\n"
            "          \"id\": \"A\",\n          \"type_id\": 0\n        }\n      },\n      {\n"
            "        \"Sequence\": {\n          \"id\": \"B\",\n          \"type_id\": 0\n        }\n      }\n"
            "    ],\n"
            "    \"special_tokens\": {\n      \"<bos>\": {\n        \"id\": \"<bos>\",\n        \"ids\": [\n"
            "          2\n        ],\n        \"tokens\": [\n          \"<bos>\"\n        ]\n      }\n    }\n"
            "  },\n"
            "  \"decoder\": {\n    \"type\": \"Sequence\",\n    \"decoders\": [\n      {\n"
            "        \"type\": \"Replace\",\n        \"pattern\": {\n          \"String\": \"" SP "\"\n"
            "        },\n        \"content\": \" \"\n      },\n      {\n        \"type\": \"ByteFallback\"\n"
            "      },\n      {\n        \"type\": \"Fuse\"\n      }\n    ]\n  },\n"
            "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": \"<unk>\",\n"
            "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
            "    \"fuse_unk\": true,\n    \"byte_fallback\": true,\n    \"ignore_merges\": false,\n"
            "    \"vocab\": {\n");
    for (int id = 0; id < vocab; id++) {
        gm_buf_put(&b, "      ", 6);
        gm_buf_json_str(&b, token_text(id, tmp, sizeof tmp));
        gm_buf_printf(&b, ": %d%s\n", id, id + 1 < vocab ? "," : "");
    }
    gm_buf_printf(&b, "    },\n    \"merges\": [\n");
    for (int k = 0; k < 74; k++) {
        gm_buf_put(&b, "      [\n        ", 16);
        gm_buf_json_str(&b, MERGES[k][0]);
        gm_buf_put(&b, ",\n        ", 10);
        gm_buf_json_str(&b, MERGES[k][1]);
        gm_buf_printf(&b, "\n      ]%s\n", k + 1 < 74 ? "," : "");
    }
    gm_buf_printf(&b, "    ]\n  }\n}");
    int rc = b.oom ? -1 : gm_write_text_file(dir, "tokenizer.json", b.p, b.len);
    gm_buf_free(&b);
    if (rc == 0) rc = gm_write_text_file(dir, "tokenizer_config.json", TOKENIZER_CONFIG, strlen(TOKENIZER_CONFIG));
    return rc;
}
