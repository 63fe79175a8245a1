/* Private to src/tokenizer/: the tokenizer struct and the hooks between tokenizer.c (vocab,
 * special-token partition, decoding), spm.c, bpe.c (merge-rank BPE and the HF
 * normalizer/pre-tokenizer steps), tokenizer_gguf.c (GGUF metadata loader) and tokenizer_json.c
 * (HF tokenizer.json loader). The
 * struct lives here, not in tokenizer.c, because bpe.c walks the merge table and the
 * per-fragment pipeline options directly on the hot path. */
#ifndef LS_TOKENIZER_TOK_INTERNAL_H
#define LS_TOKENIZER_TOK_INTERNAL_H

#include "tokenizer/tokenizer.h"

#define TOK_MAX_VOCAB    (1 << 24) /* far above any real vocab; bounds the allocations */
#define TOK_MAX_EOG      16
#define TOK_MAX_PIPELINE 8 /* normalizer / pre-tokenizer steps kept (Gemma uses 1 each) */

typedef struct {
    int32_t id;
    uint32_t h;
} tok_slot;

/* All special texts of one length: the first bytes they start with, as a 256-bit set. */
typedef struct {
    uint32_t len;
    uint64_t first[4];
} tok_len_class;

/* One BPE merge "a b": a and b are stored back to back in the merge blob, so the pair's
 * joined text is one span, exactly like two adjacent symbols in the text being encoded. */
typedef struct {
    uint32_t off;    /* a starts at merge_blob + off, b right after it */
    uint32_t la, lb; /* byte lengths of a and b */
    uint32_t h;      /* pair hash (tok_pair_hash) */
} tok_merge;

/* HF normalizer / pre-tokenizer steps that tokenizer_json.c understands. */
enum { TOK_NORM_REPLACE = 1, TOK_NORM_PREPEND = 2 };
enum {
    TOK_SPLIT_REMOVED = 1,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
};
typedef struct {
    int kind;      /* TOK_NORM_* or TOK_SPLIT_* */
    char *a, *b;   /* Replace: a -> b; Prepend: b; Split: a = the literal pattern */
    size_t la, lb; /* byte lengths */
} tok_step;

struct ls_tokenizer {
    int model; /* LS_TOKENIZER_MODEL_* */
    int32_t n_vocab;
    char *blob;     /* all token texts, each followed by a NUL: [sum(len + 1)] */
    uint32_t *offs; /* [n_vocab] start of each text in blob */
    uint32_t *lens; /* [n_vocab] text length */
    float *scores;  /* [n_vocab] */
    uint8_t *types; /* [n_vocab] LS_TOKEN_* (after the EOG override) */

    /* text -> id, open addressing with linear probing: [hash_mask + 1] slots, id -1 = empty.
     * Each slot keeps the full 32-bit hash so that probing past other entries compares
     * integers instead of fetching their texts (one cache miss per lookup, not three). */
    tok_slot *hash;
    uint32_t hash_mask;

    /* Special (CONTROL/USER_DEFINED/UNKNOWN) texts -> ids: [sp_mask + 1] slots, -1 = none.
     * sp_any holds every special id, sp_user the same id if it is USER_DEFINED (the only
     * kind matched when parse_special is false), else -1. */
    int32_t *sp_any;
    int32_t *sp_user;
    uint32_t sp_mask;
    /* Length classes of special texts, longest first: [n_sp_cls]; _user: USER_DEFINED only. */
    tok_len_class *sp_cls, *sp_cls_user;
    int n_sp_cls, n_sp_cls_user;

    int32_t byte_tok[256]; /* byte-fallback token per byte value, -1 = none */
    int32_t byte_hex[256]; /* the "<0xXX>" token only (BPE byte fallback knows no other) */
    int32_t bos, eos, unk, pad, eot, eom;
    int32_t eog[TOK_MAX_EOG];
    int n_eog;
    bool add_bos, add_space_prefix;

    /* ---- BPE (model == LS_TOKENIZER_MODEL_BPE) ---- */
    char *merge_blob;
    tok_merge *merges; /* [n_merges], index = rank */
    int32_t n_merges;
    int32_t *merge_hash; /* [merge_mask + 1] merge index, -1 = empty */
    uint32_t merge_mask;
    bool ignore_merges; /* a word that is a token is emitted whole (HF BPE ignore_merges) */

    /* HF tokenizers semantics (tokenizer.json) instead of llama.cpp's (GGUF). */
    bool hf;
    bool byte_fallback; /* HF: characters outside the vocab become <0xXX> tokens (else <unk>) */
    bool fuse_unk;      /* HF: consecutive unknown characters become one <unk> */
    bool unescape_user; /* HF decoder Replace(U+2581 -> ' ') also applies to added tokens */
    tok_step norm[TOK_MAX_PIPELINE], pre[TOK_MAX_PIPELINE];
    int n_norm, n_pre;
};

/* FNV-1a based hashes shared by the vocab and merge tables. */
uint32_t ls_tok_hash(const char *s, size_t n);
static inline uint32_t tok_pair_hash(const char *s, uint32_t la, uint32_t lb) {
    return ls_tok_hash(s, (size_t)la + lb) ^ (la * 0x9E3779B1u);
}

/* Sets the special ids, add_bos / add_space_prefix and the end-of-generation set of t from d
 * (as ls_tokenizer_create does): lets the JSON loader resolve specials by text on the built
 * tokenizer instead of building it twice. 0, or -1 + message for an id out of range. */
int ls_tok_set_specials(ls_tokenizer *t, const ls_tokenizer_desc *d, char *err, size_t errlen);
/* Builds the merge table from desc (called by ls_tokenizer_create). 0, or -1 / LS_ERR_NOMEM
 * + message. */
int ls_tok_bpe_build(ls_tokenizer *t, const ls_tokenizer_desc *d, char *err, size_t errlen);
void ls_tok_bpe_free(ls_tokenizer *t);
/* Rank of the merge (a = s[0..la), b = s[la..la+lb)), or -1. */
int32_t ls_tok_bpe_rank(const ls_tokenizer *t, const char *s, uint32_t la, uint32_t lb);
/* Encodes one plain-text fragment (between special tokens) with the BPE pipeline: llama.cpp
 * gemma4 (escape spaces, split newline runs) or HF (normalizer, pre-tokenizer). Same
 * output convention as ls_spm_encode. */
int64_t ls_tok_bpe_encode_fragment(const ls_tokenizer *t, const char *text, size_t len, int32_t *out, int64_t cap,
                                   int64_t n);

#endif
