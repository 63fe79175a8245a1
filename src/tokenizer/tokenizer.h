/* Tokenizer: SentencePiece-style (GGUF tokenizer.ggml.model = "llama", as Gemma 3 ships it)
 * and merge-rank BPE (GGUF "gemma4", or a HF tokenizer.json of Gemma 3 / Gemma 4), with byte
 * fallback and special tokens, plus a streaming detokenizer that never emits half a UTF-8
 * code point, and the Gemma 3 / Gemma 4 chat templates. */
#ifndef LS_TOKENIZER_TOKENIZER_H
#define LS_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "lockstep.h" /* LS_ERR_NOMEM */

typedef struct ls_tokenizer ls_tokenizer;

/* The constructors below return 0, LS_ERR_NOMEM (-2) when memory runs out (the message says
 * so), or -1 with a message for anything else. */

/* Build from GGUF metadata (tokenizer.ggml.*): model "llama" (SentencePiece, Gemma 3) or
 * "gemma4" (merge-rank BPE over U+2581-escaped UTF-8, Gemma 4). Non-zero + message on
 * bad/missing data. Ids equal llama.cpp's (docs/tokenizer.md). */
int ls_tokenizer_from_gguf(const gguf_file *f, ls_tokenizer **out, char *err, size_t errlen);
/* Build from a Hugging Face tokenizer.json with a BPE model (Gemma 3 / Gemma 4 ship one):
 * vocab, merges ("a b" strings or ["a", "b"] pairs), added tokens (special: true ->
 * control, else user-defined), byte_fallback, the normalizer (Replace / Prepend) and
 * pre-tokenizer (Split on a literal). BOS/EOS/add_bos come from tokenizer_config.json
 * next to it (same directory, "tokenizer_config.json" or "<prefix>tokenizer_config.json"
 * for "<prefix>tokenizer.json") when present, else from the post-processor and the
 * "<bos>"/"<eos>" tokens. Ids equal HF `tokenizers` (parse_special = true: its default;
 * false: encode_special_tokens = True). Non-zero + message on malformed or unsupported input. */
int ls_tokenizer_from_json(const char *tokenizer_json_path, ls_tokenizer **out, char *err, size_t errlen);
/* Same from memory (config may be NULL). Used by the fuzzer and tests. */
int ls_tokenizer_from_json_mem(const char *json, size_t len, const char *config_json, size_t config_len,
                               ls_tokenizer **out, char *err, size_t errlen);
void ls_tokenizer_free(ls_tokenizer *t);

int32_t ls_tokenizer_n_vocab(const ls_tokenizer *t);
int32_t ls_tokenizer_bos(const ls_tokenizer *t);
int32_t ls_tokenizer_eos(const ls_tokenizer *t);
bool ls_tokenizer_add_bos(const ls_tokenizer *t);
/* True for tokens that end generation: EOS and the EOS/EOT/EOM ids of the file, plus <eos>,
 * <end_of_turn> (Gemma 3), <turn|> and <|tool_response> (Gemma 4) by text. */
bool ls_tokenizer_is_eog(const ls_tokenizer *t, int32_t id);
/* Id of a token by its exact text (e.g. "<end_of_turn>"), or -1. */
int32_t ls_tokenizer_find(const ls_tokenizer *t, const char *text);

/* Encode len bytes of text. add_bos prepends BOS. parse_special: text such as "<start_of_turn>"
 * that spells a control token becomes that token (otherwise it is plain text). User-defined
 * tokens (Gemma: runs of spaces/newlines/tabs, HTML tags, <start_of_image>) are matched in
 * either mode, exactly as llama.cpp does (docs/tokenizer.md).
 * Writes up to cap ids to out and returns the total count (may exceed cap: call again with a
 * larger buffer), or -1 on error. */
int64_t ls_tokenize(const ls_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special, int32_t *out,
                    int64_t cap);

/* The raw bytes a token stands for (byte-fallback tokens give their single byte; control
 * tokens give their text only if render_special, else nothing). Returns byte count written
 * (<= cap), or the needed size if cap is too small (nothing written then), -1 on bad id. */
int ls_token_to_bytes(const ls_tokenizer *t, int32_t id, bool render_special, char *buf, int cap);

/* Streaming detokenizer: push token ids, get only complete UTF-8 sequences out.
 * Zero-initialize the state before the first push; it never allocates. */
typedef struct {
    char pending[8];
    int n_pending;
} ls_detok_state;
/* Appends the newly completed text for `id` to out (cap bytes) and returns bytes written
 * (-1 if cap too small). Incomplete UTF-8 sequences are held back until complete; invalid
 * sequences are flushed as U+FFFD. */
int ls_detok_push(const ls_tokenizer *t, ls_detok_state *st, int32_t id, bool render_special, char *out, int cap);
/* Flush whatever is held back at end of stream (invalid tail -> U+FFFD). */
int ls_detok_flush(ls_detok_state *st, char *out, int cap);

/* Chat template. Roles: "system", "user", "assistant" (or "model"). */
typedef struct {
    const char *role;
    const char *content;
} ls_chat_msg;
/* Renders the Gemma 3 template (system text folded into the first user turn) with the
 * generation prompt "<start_of_turn>model\n" appended when add_generation_prompt. Returns
 * a malloc'ed NUL-terminated string (caller frees), NULL + message on error. Includes "<bos>". */
char *ls_chat_render_gemma3(const ls_chat_msg *msgs, int n, bool add_generation_prompt, char *err, size_t errlen);

/* Gemma 4 template options. */
typedef struct {
    bool add_generation_prompt; /* append "<|turn>model\n" */
    bool enable_thinking;       /* "<|think|>" opens a system turn; no empty thought */
    bool empty_thought;         /* thinking off: append "<|channel>thought\n<channel|>" after the generation
                                 * prompt, as the large-model (26B/31B) template does; the E2B/E4B
                                 * templates do not */
} ls_chat_opts;
/* Generation prompt on, thinking off, empty thought on (the 31B-style template). */
ls_chat_opts ls_chat_opts_default(void);
/* Renders the Gemma 4 template, byte-identical to jinja2 on the HF template (without tools):
 *   <bos>[<|turn>system\n[<|think|>]{system | trim}<turn|>\n]            (system turn only if
 *                                      thinking is on or the first message is system/developer)
 *   per message: <|turn>{user|model}\n{content | trim}<turn|>\n   (model content: thinking
 *                                      "<|channel>...<channel|>" stripped first)
 *   [<|turn>model\n[<|channel>thought\n<channel|>]]
 * Roles: "system"/"developer" (first message only), "user", "assistant"/"model". opts NULL =
 * ls_chat_opts_default(). Malloc'ed string or NULL + message. */
char *ls_chat_render_gemma4(const ls_chat_msg *msgs, int n, const ls_chat_opts *opts, char *err, size_t errlen);

/* Tool use in the Gemma 4 template's native format, pre-rendered (src/server/tools.c,
 * docs/tool_calls.md): `tools` ("<|tool>declaration:...<tool|>" for each tool) is put at the end
 * of the system turn (which it opens if needed); per message i, calls[i]
 * ("<|tool_call>call:NAME{...}<tool_call|>"...) and responses[i]
 * ("<|tool_response>response:NAME{...}<tool_response|>"...) go before its content, and a turn
 * with responses and empty content is left open (no "<turn|>"; if it is the last one, the
 * generation prompt does not open a model turn either). Any member may be NULL. */
typedef struct {
    const char *tools;
    const char *const *calls;
    const char *const *responses;
} ls_chat_tool_text;
char *ls_chat_render_gemma4_tools(const ls_chat_msg *msgs, int n, const ls_chat_opts *opts, const ls_chat_tool_text *tt,
                                  char *err, size_t errlen);

typedef enum { LS_CHAT_UNKNOWN = 0, LS_CHAT_GEMMA3 = 3, LS_CHAT_GEMMA4 = 4 } ls_chat_style;
/* Which template a vocabulary speaks: Gemma 4 if it has "<|turn>" and "<turn|>", Gemma 3 if
 * it has "<start_of_turn>" and "<end_of_turn>", else unknown. */
ls_chat_style ls_chat_style_of(const ls_tokenizer *t);
/* Renders with the template ls_chat_style_of picks (Gemma 3 uses only add_generation_prompt). */
char *ls_chat_render(const ls_tokenizer *t, const ls_chat_msg *msgs, int n, const ls_chat_opts *opts, char *err,
                     size_t errlen);

/* ---- Lower level: construction from arrays, vocab access, the SPM core ----------------------
 * Used by ls_tokenizer_from_gguf, the other tokenizer files, tests and fuzzers. */

/* GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    LS_TOKEN_UNDEFINED = 0,
    LS_TOKEN_NORMAL = 1,
    LS_TOKEN_UNKNOWN = 2,
    LS_TOKEN_CONTROL = 3,
    LS_TOKEN_USER_DEFINED = 4,
    LS_TOKEN_UNUSED = 5,
    LS_TOKEN_BYTE = 6,
};

/* Everything a tokenizer is built from. The arrays are copied (nothing is kept referenced).
 * Special ids are -1 when absent. */
typedef struct {
    int32_t n_vocab;
    const char *const *texts; /* [n_vocab] token texts, NOT NUL-terminated */
    const uint64_t *lens;     /* [n_vocab] byte lengths of texts */
    const float *scores;      /* [n_vocab], or NULL: all 0 */
    const int32_t *types;     /* [n_vocab] LS_TOKEN_*, or NULL: all normal */
    int32_t bos, eos, unk, pad, eot, eom;
    bool add_bos;
    bool add_space_prefix; /* SentencePiece "dummy prefix": a space before each text fragment */

    /* Zero-initialized = the SPM model above. For LS_TOKENIZER_MODEL_BPE: merges in rank
     * order (merge i joins merge_a[i] and merge_b[i], neither NUL-terminated); a pair listed
     * twice keeps its first (lowest) rank, as llama.cpp and HF do. */
    int model;
    int64_t n_merges;
    const char *const *merge_a;
    const char *const *merge_b;
    const uint64_t *merge_la, *merge_lb;
    bool ignore_merges; /* HF BPE ignore_merges: a word that is itself a token skips merging */
    /* HF tokenizers semantics (tokenizer.json) instead of llama.cpp's (GGUF): added tokens
     * matched leftmost-longest, no llama.cpp type overrides by text. Set by the JSON loader. */
    bool hf;
} ls_tokenizer_desc;

/* ls_tokenizer_desc.model */
enum { LS_TOKENIZER_MODEL_SPM = 0, LS_TOKENIZER_MODEL_BPE = 1 };
int ls_tokenizer_create(const ls_tokenizer_desc *d, ls_tokenizer **out, char *err, size_t errlen);

/* Vocab access; bad ids give -1 / NULL. */
int ls_tokenizer_token_type(const ls_tokenizer *t, int32_t id);
float ls_tokenizer_token_score(const ls_tokenizer *t, int32_t id);
const char *ls_tokenizer_token_text(const ls_tokenizer *t, int32_t id, size_t *len);
/* Id of the token whose text is exactly text[0..len) (texts are unique: a vocab with
 * duplicates is rejected at load), or -1. */
int32_t ls_tokenizer_find_n(const ls_tokenizer *t, const char *text, size_t len);
/* Byte-fallback token for one byte ("<0xXX>", else the 1-byte text), or -1. */
int32_t ls_tokenizer_byte_token(const ls_tokenizer *t, uint8_t byte);

/* The bytes a token stands for, without copying: *p and *n point into the vocab (or a static
 * table for byte tokens); *unescape says that U+2581 in them is to be read as a space.
 * Same rules as ls_token_to_bytes. Returns 0, or -1 on a bad id. */
int ls_token_piece(const ls_tokenizer *t, int32_t id, bool render_special, const char **p, size_t *n, bool *unescape);

/* SentencePiece-encode one plain-text fragment (no special-token matching, no BOS):
 * spaces become U+2581 (plus one leading U+2581 if space_prefix), then symbols merge by
 * score. Ids go to out[n..cap); returns the new total count, or -1 (missing byte token,
 * allocation failure). */
int64_t ls_spm_encode(const ls_tokenizer *t, const char *text, size_t len, bool space_prefix, int32_t *out, int64_t cap,
                      int64_t n);

#endif
