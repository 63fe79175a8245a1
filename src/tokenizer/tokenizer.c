/* Tokenizer vocab: construction from arrays (GGUF metadata: tokenizer_gguf.c), text -> id lookup, special
 * token matching, and the top-level ls_tokenize that splits raw text around special tokens
 * and hands the plain pieces to the SentencePiece encoder in spm.c.
 *
 * Semantics follow llama.cpp's "llama" (SPM) vocab exactly, because the golden test pins
 * our ids to llama.cpp's (see docs/tokenizer.md):
 *  - Special-token partition (llama.cpp tokenizer_st_partition): every CONTROL, USER_DEFINED
 *    and UNKNOWN token is a candidate; tokens are taken longest text first, and for each
 *    token every non-overlapping occurrence, left to right, inside text not yet claimed by
 *    an earlier token becomes that token. USER_DEFINED tokens (Gemma: runs of spaces,
 *    newlines and tabs, HTML tags) are matched even when parse_special is false; CONTROL
 *    and UNKNOWN only when it is true.
 *  - Tokens whose text llama.cpp recognises as EOT/EOM/FIM/end-of-generation markers are
 *    forced to CONTROL, as llama.cpp does. For Gemma 3 this changes exactly one token:
 *    "</s>" (212, USER_DEFINED in the file) is then matched only with parse_special and
 *    rendered only with render_special. (llama.cpp also makes it end generation; we do not:
 *    Gemma 3 stops on <eos> and <end_of_turn> only, see ls_tokenizer_is_eog.)
 *  - As in llama.cpp, an empty token text is renamed "[EMPTY_<id>]" and duplicate texts are
 *    an error (llama.cpp asserts on them).
 *  - Decoding: NORMAL tokens with U+2581 read as space, BYTE tokens as their byte,
 *    USER_DEFINED verbatim, CONTROL/UNKNOWN only when rendering specials, others nothing.
 *
 * llama.cpp walks the special tokens one by one (O(n_special * len), 6.4k tokens for
 * Gemma); we make one pass per distinct special text length instead (~40 for Gemma),
 * longest first, looking up each unclaimed position in a hash of special texts. Within a
 * length, candidates go by ascending id, then left to right (llama.cpp's order among equal
 * lengths is unspecified; it only matters if two equal-length special texts overlap, which
 * no Gemma texts do). Because every span claimed so far is at least as long as the current
 * candidate, a candidate overlaps a claimed span iff one of its two end bytes is claimed:
 * the overlap test is O(1), and a run of 10k spaces costs ~1 ms rather than ~50. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

#define TOK_MAX_BLOB (1ull << 31)      /* total bytes of all token texts */
#define TOK_MAX_TEXT ((size_t)1 << 28) /* ls_tokenize input limit (escaping triples it) */

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* FNV-1a, 64-bit, folded: texts are short (median ~6 bytes), so a simple byte loop is
 * as fast as anything fancier and has no alignment concerns. */
uint32_t ls_tok_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static bool tok_text_eq(const ls_tokenizer *t, int32_t id, const char *s, size_t n) {
    return t->lens[id] == n && memcmp(t->blob + t->offs[id], s, n) == 0;
}

int32_t ls_tokenizer_find_n(const ls_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len)) return -1;
    uint32_t h = ls_tok_hash(text, len);
    for (uint32_t i = h & t->hash_mask;; i = (i + 1) & t->hash_mask) {
        tok_slot sl = t->hash[i];
        if (sl.id < 0) return -1;
        if (sl.h == h && tok_text_eq(t, sl.id, text, len)) return sl.id;
    }
}

int32_t ls_tokenizer_find(const ls_tokenizer *t, const char *text) {
    if (!text) return -1;
    return ls_tokenizer_find_n(t, text, strlen(text));
}

/* Slot of a special text in the special table (its sp_any is -1 if absent). */
static uint32_t sp_slot(const ls_tokenizer *t, const char *s, size_t n) {
    for (uint32_t i = ls_tok_hash(s, n) & t->sp_mask;; i = (i + 1) & t->sp_mask) {
        int32_t id = t->sp_any[i];
        if (id < 0 || tok_text_eq(t, id, s, n)) return i;
    }
}

static bool is_special_type(int type) {
    return type == LS_TOKEN_CONTROL || type == LS_TOKEN_USER_DEFINED || type == LS_TOKEN_UNKNOWN;
}

/* ---------------------------------------------------------------------------------------
 * Construction
 * --------------------------------------------------------------------------------------- */

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return (uint32_t)c;
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x > y ? -1 : x < y;
}

/* Length classes (longest first) of the special tokens, or of the USER_DEFINED ones only. */
static int build_len_classes(const ls_tokenizer *t, bool user_only, tok_len_class **out, int *n_out) {
    size_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        n += is_special_type(t->types[i]) && (!user_only || t->types[i] == LS_TOKEN_USER_DEFINED);
    uint32_t *ls = malloc((n ? n : 1) * sizeof *ls);
    tok_len_class *cls = calloc(n ? n : 1, sizeof *cls);
    if (!ls || !cls) {
        free(ls);
        free(cls);
        return -1;
    }
    n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->types[i]) && (!user_only || t->types[i] == LS_TOKEN_USER_DEFINED)) ls[n++] = t->lens[i];
    qsort(ls, n, sizeof *ls, cmp_u32_desc);
    int m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || cls[m - 1].len != ls[i]) cls[m++].len = ls[i];
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!is_special_type(t->types[i]) || (user_only && t->types[i] != LS_TOKEN_USER_DEFINED)) continue;
        int lo = 0, hi = m - 1; /* binary search in descending lengths */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (cls[mid].len > t->lens[i])
                lo = mid + 1;
            else
                hi = mid;
        }
        uint8_t b = (uint8_t)t->blob[t->offs[i]];
        cls[lo].first[b >> 6] |= 1ull << (b & 63);
    }
    free(ls);
    *out = cls;
    *n_out = m;
    return 0;
}

/* Texts llama.cpp (llama-vocab.cpp, load) forces to CONTROL when the file says otherwise:
 * its EOT, EOM, FIM and EOG auto-detection lists. (llama.cpp stops at the first text found
 * per FIM/EOT role; a vocab with two spellings of one role would differ. No SPM vocab we
 * know of has that.) */
static const char *const control_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<end_of_utterance>",
    "<|eom_id|>",
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<MID>",
    "<|code_middle|>",
    "<|middle|>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "</s>",
    "[EOS]",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
};

/* Texts that end generation: llama.cpp's EOG list minus "</s>", which llama.cpp added for
 * PaddleOCR and which, matched by text, would make Gemma 3 stop on the HTML tag "</s>". */
static const char *const eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    /* Gemma: <eos> (a tokenizer_config.json may name <end_of_turn> as EOS instead), and Gemma 4's
     * generation_config stop ids <turn|> and <|tool_response>. */
    "<eos>",
    "<turn|>",
    "<|tool_response>",
};

static void add_eog(ls_tokenizer *t, int32_t id) {
    if (id < 0 || t->n_eog >= TOK_MAX_EOG) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog[t->n_eog++] = id;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Byte value of a "<0xXX>" text, or -1. */
static int parse_byte_text(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int check_id(int32_t id, int32_t n_vocab, const char *what, char *err, size_t errlen) {
    if (id < -1 || id >= n_vocab) {
        set_err(err, errlen, "tokenizer: %s id %d out of range [0, %d)", what, id, n_vocab);
        return -1;
    }
    return 0;
}

static int check_specials(const ls_tokenizer_desc *d, int32_t n, char *err, size_t errlen) {
    if (check_id(d->bos, n, "BOS", err, errlen) || check_id(d->eos, n, "EOS", err, errlen) ||
        check_id(d->unk, n, "UNK", err, errlen) || check_id(d->pad, n, "PAD", err, errlen) ||
        check_id(d->eot, n, "EOT", err, errlen) || check_id(d->eom, n, "EOM", err, errlen))
        return -1;
    if (d->add_bos && d->bos < 0) {
        set_err(err, errlen, "tokenizer: add_bos_token is set but there is no BOS token");
        return -1;
    }
    return 0;
}

/* Every check on d, before anything large is allocated; *total = bytes of the text blob. */
static int validate_desc(const ls_tokenizer_desc *d, uint64_t *total_out, char *err, size_t errlen) {
    int32_t n = d->n_vocab;
    if (n < 1 || n > TOK_MAX_VOCAB) {
        set_err(err, errlen, "tokenizer: vocab size %d out of range [1, %d]", n, TOK_MAX_VOCAB);
        return -1;
    }
    if (!d->texts || !d->lens) {
        set_err(err, errlen, "tokenizer: no token texts");
        return -1;
    }
    if (check_specials(d, n, err, errlen)) return -1;
    if (d->model != LS_TOKENIZER_MODEL_SPM && d->model != LS_TOKENIZER_MODEL_BPE) {
        set_err(err, errlen, "tokenizer: unknown model %d", d->model);
        return -1;
    }
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (d->lens[i] > 0 && !d->texts[i]) {
            set_err(err, errlen, "tokenizer: token %d has no text", i);
            return -1;
        }
        if (d->lens[i] >= TOK_MAX_BLOB || (total += (d->lens[i] ? d->lens[i] : 24) + 1) > TOK_MAX_BLOB) {
            /* (empty texts are renamed "[EMPTY_<id>]": 24 bytes is plenty) */
            set_err(err, errlen, "tokenizer: token texts too large (token %d)", i);
            return -1;
        }
        int type = d->types ? d->types[i] : LS_TOKEN_NORMAL;
        if (type < LS_TOKEN_UNDEFINED || type > LS_TOKEN_BYTE) {
            set_err(err, errlen, "tokenizer: token %d has invalid type %d", i, type);
            return -1;
        }
        if (type == LS_TOKEN_BYTE && parse_byte_text(d->texts[i], d->lens[i]) < 0) {
            set_err(err, errlen, "tokenizer: byte token %d is not of the form <0xXX>", i);
            return -1;
        }
        if (d->scores && isnan(d->scores[i])) {
            set_err(err, errlen, "tokenizer: token %d has a NaN score", i);
            return -1;
        }
    }
    *total_out = total;
    return 0;
}

/* Copies texts, scores and types into t and builds the text -> id hash. 0, or -1 /
 * LS_ERR_NOMEM + message. */
static int build_vocab(ls_tokenizer *t, const ls_tokenizer_desc *d, uint64_t total, char *err, size_t errlen) {
    int32_t n = d->n_vocab;
    t->n_vocab = n;
    t->blob = ls_fault_malloc(LS_FAULT_TOKENIZER, total);
    t->offs = malloc((size_t)n * sizeof *t->offs);
    t->lens = malloc((size_t)n * sizeof *t->lens);
    t->scores = malloc((size_t)n * sizeof *t->scores);
    t->types = malloc((size_t)n);
    t->hash_mask = pow2_at_least((uint64_t)n * 2) - 1;
    t->hash = malloc(((size_t)t->hash_mask + 1) * sizeof *t->hash);
    uint32_t *hv = malloc((size_t)n * sizeof *hv); /* [n_vocab] text hashes, only during construction */
    if (!t->blob || !t->offs || !t->lens || !t->scores || !t->types || !t->hash || !hv) {
        free(hv);
        set_err(err, errlen, "tokenizer: out of memory");
        return LS_ERR_NOMEM;
    }
    memset(t->hash, 0xff, ((size_t)t->hash_mask + 1) * sizeof *t->hash);

    uint64_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = (size_t)d->lens[i];
        if (len)
            memcpy(t->blob + pos, d->texts[i], len);
        else
            len = (size_t)snprintf(t->blob + pos, 25, "[EMPTY_%d]", (int)i); /* as llama.cpp names it */
        t->blob[pos + len] = '\0';
        t->offs[i] = (uint32_t)pos;
        t->lens[i] = (uint32_t)len;
        pos += len + 1;
        t->scores[i] = d->scores ? d->scores[i] : 0.0f;
        t->types[i] = (uint8_t)(d->types ? d->types[i] : LS_TOKEN_NORMAL);
        hv[i] = ls_tok_hash(t->blob + t->offs[i], len);
    }
    /* Insert in a second pass so the slot of a token a few ids ahead can be prefetched: the
     * table (4 MiB for Gemma) is far larger than cache and random access dominates load. */
    for (int32_t i = 0; i < n; i++) {
        if (i + 16 < n) __builtin_prefetch(&t->hash[hv[i + 16] & t->hash_mask]);
        uint32_t h = hv[i], k = h & t->hash_mask;
        while (t->hash[k].id >= 0 &&
               !(t->hash[k].h == h && tok_text_eq(t, t->hash[k].id, t->blob + t->offs[i], t->lens[i])))
            k = (k + 1) & t->hash_mask;
        if (t->hash[k].id >= 0) {
            /* One text, two ids: the text -> id map would be ambiguous (llama.cpp asserts). */
            set_err(err, errlen, "tokenizer: tokens %d and %d have the same text", t->hash[k].id, i);
            free(hv);
            return -1;
        }
        t->hash[k] = (tok_slot){i, h};
    }
    free(hv);
    return 0;
}

int ls_tok_set_specials(ls_tokenizer *t, const ls_tokenizer_desc *d, char *err, size_t errlen) {
    if (check_specials(d, t->n_vocab, err, errlen)) return -1;
    t->bos = d->bos;
    t->eos = d->eos;
    t->unk = d->unk;
    t->pad = d->pad;
    t->eot = d->eot;
    t->eom = d->eom;
    t->add_bos = d->add_bos;
    t->add_space_prefix = d->add_space_prefix;
    /* End-of-generation set. */
    t->n_eog = 0;
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, t->eom);
    for (size_t k = 0; k < sizeof eog_texts / sizeof *eog_texts; k++) add_eog(t, ls_tokenizer_find(t, eog_texts[k]));
    return 0;
}

/* llama.cpp's type override for EOG-looking tokens (GGUF only: HF has no such overrides,
 * its added tokens carry their own special flag). */
static void apply_llama_type_overrides(ls_tokenizer *t) {
    if (t->hf) return;
    for (size_t k = 0; k < sizeof control_texts / sizeof *control_texts; k++) {
        int32_t id = ls_tokenizer_find(t, control_texts[k]);
        if (id >= 0) t->types[id] = LS_TOKEN_CONTROL;
    }
    /* llama.cpp's Gemma 4 workaround: with <|tool_response> present, "</s>" is plain text. */
    if (ls_tokenizer_find(t, "<|tool_response>") >= 0) {
        int32_t id = ls_tokenizer_find(t, "</s>");
        if (id >= 0) t->types[id] = LS_TOKEN_NORMAL;
    }
}

/* Byte fallback table: "<0xXX>" first, else the 1-byte text (llama.cpp byte_to_token). */
static void build_byte_tables(ls_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char buf[7];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        int32_t id = ls_tokenizer_find_n(t, buf, 6);
        t->byte_hex[b] = id;
        if (id < 0) {
            char c = (char)b;
            id = ls_tokenizer_find_n(t, &c, 1);
        }
        t->byte_tok[b] = id;
    }
}

/* Special-token matcher (texts are never empty here: empty ones were renamed). 0, or -1 when
 * out of memory. */
static int build_special_matcher(ls_tokenizer *t) {
    int32_t n = t->n_vocab, n_sp = 0;
    for (int32_t i = 0; i < n; i++) n_sp += is_special_type(t->types[i]);
    t->sp_mask = pow2_at_least((uint64_t)n_sp * 2) - 1;
    t->sp_any = malloc(((size_t)t->sp_mask + 1) * sizeof *t->sp_any);
    t->sp_user = malloc(((size_t)t->sp_mask + 1) * sizeof *t->sp_user);
    if (!t->sp_any || !t->sp_user) return -1;
    memset(t->sp_any, 0xff, ((size_t)t->sp_mask + 1) * sizeof *t->sp_any);
    memset(t->sp_user, 0xff, ((size_t)t->sp_mask + 1) * sizeof *t->sp_user);
    for (int32_t i = 0; i < n; i++) {
        if (!is_special_type(t->types[i])) continue;
        uint32_t slot = sp_slot(t, t->blob + t->offs[i], t->lens[i]);
        t->sp_any[slot] = i; /* texts are unique */
        if (t->types[i] == LS_TOKEN_USER_DEFINED) t->sp_user[slot] = i;
    }
    if (build_len_classes(t, false, &t->sp_cls, &t->n_sp_cls) ||
        build_len_classes(t, true, &t->sp_cls_user, &t->n_sp_cls_user))
        return -1;
    return 0;
}

int ls_tokenizer_create(const ls_tokenizer_desc *d, ls_tokenizer **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!d || !out) {
        set_err(err, errlen, "tokenizer: NULL argument");
        return -1;
    }
    uint64_t total;
    if (validate_desc(d, &total, err, errlen)) return -1;
    ls_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        set_err(err, errlen, "tokenizer: out of memory");
        return LS_ERR_NOMEM;
    }
    t->model = d->model;
    t->hf = d->hf;
    t->byte_fallback = true;
    t->ignore_merges = d->ignore_merges;
    int rc;
    if ((rc = build_vocab(t, d, total, err, errlen)) != 0 || (rc = ls_tok_set_specials(t, d, err, errlen)) != 0)
        goto fail;
    apply_llama_type_overrides(t);
    if (t->model == LS_TOKENIZER_MODEL_BPE && (rc = ls_tok_bpe_build(t, d, err, errlen)) != 0) goto fail;
    build_byte_tables(t);
    if (build_special_matcher(t)) {
        set_err(err, errlen, "tokenizer: out of memory");
        rc = LS_ERR_NOMEM;
        goto fail;
    }
    *out = t;
    return 0;
fail:
    ls_tokenizer_free(t);
    return rc;
}

void ls_tokenizer_free(ls_tokenizer *t) {
    if (!t) return;
    ls_tok_bpe_free(t);
    free(t->blob);
    free(t->offs);
    free(t->lens);
    free(t->scores);
    free(t->types);
    free(t->hash);
    free(t->sp_any);
    free(t->sp_user);
    free(t->sp_cls);
    free(t->sp_cls_user);
    free(t);
}

/* ---------------------------------------------------------------------------------------
 * Accessors
 * --------------------------------------------------------------------------------------- */

static bool valid_id(const ls_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab;
}

int32_t ls_tokenizer_n_vocab(const ls_tokenizer *t) {
    return t ? t->n_vocab : 0;
}
int32_t ls_tokenizer_bos(const ls_tokenizer *t) {
    return t ? t->bos : -1;
}
int32_t ls_tokenizer_eos(const ls_tokenizer *t) {
    return t ? t->eos : -1;
}
bool ls_tokenizer_add_bos(const ls_tokenizer *t) {
    return t && t->add_bos;
}

bool ls_tokenizer_is_eog(const ls_tokenizer *t, int32_t id) {
    if (!valid_id(t, id)) return false;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

int ls_tokenizer_token_type(const ls_tokenizer *t, int32_t id) {
    return valid_id(t, id) ? t->types[id] : -1;
}
float ls_tokenizer_token_score(const ls_tokenizer *t, int32_t id) {
    return valid_id(t, id) ? t->scores[id] : 0.0f;
}

const char *ls_tokenizer_token_text(const ls_tokenizer *t, int32_t id, size_t *len) {
    if (!valid_id(t, id)) return NULL;
    if (len) *len = t->lens[id];
    return t->blob + t->offs[id];
}

int32_t ls_tokenizer_byte_token(const ls_tokenizer *t, uint8_t byte) {
    return t ? t->byte_tok[byte] : -1;
}

/* ---------------------------------------------------------------------------------------
 * Decoding
 * --------------------------------------------------------------------------------------- */

int ls_token_piece(const ls_tokenizer *t, int32_t id, bool render_special, const char **p, size_t *n, bool *unescape) {
#define B4(x)  x, x + 1, x + 2, x + 3
#define B16(x) B4(x), B4(x + 4), B4(x + 8), B4(x + 12)
#define B64(x) B16(x), B16(x + 16), B16(x + 32), B16(x + 48)
    static const unsigned char byte_chars[256] = {B64(0), B64(64), B64(128), B64(192)};
#undef B4
#undef B16
#undef B64
    if (!valid_id(t, id) || !p || !n || !unescape) return -1;
    const char *s = t->blob + t->offs[id];
    *p = s;
    *n = 0;
    *unescape = false;
    switch (t->types[id]) {
    case LS_TOKEN_NORMAL:
        *n = t->lens[id];
        *unescape = true;
        break;
    case LS_TOKEN_USER_DEFINED:
        *n = t->lens[id];
        *unescape = t->unescape_user; /* HF's decoder replaces U+2581 in added tokens too */
        break;
    case LS_TOKEN_CONTROL:
    case LS_TOKEN_UNKNOWN:
        if (render_special) *n = t->lens[id];
        break;
    case LS_TOKEN_BYTE:
        *p = (const char *)&byte_chars[parse_byte_text(s, t->lens[id])]; /* validated at load */
        *n = 1;
        break;
    default: /* UNDEFINED, UNUSED: llama.cpp renders nothing */ break;
    }
    return 0;
}

int ls_token_to_bytes(const ls_tokenizer *t, int32_t id, bool render_special, char *buf, int cap) {
    const char *p;
    size_t n;
    bool unescape;
    if (ls_token_piece(t, id, render_special, &p, &n, &unescape) != 0 || cap < 0) return -1;
    /* Needed size: each 3-byte U+2581 shrinks to one space. */
    size_t need = 0;
    for (size_t i = 0; i < n; i++, need++)
        if (unescape && i + 3 <= n && memcmp(p + i, "\xE2\x96\x81", 3) == 0) i += 2;
    if (need > (size_t)INT32_MAX) return -1;
    if (need > (size_t)cap || (need > 0 && !buf)) return (int)need;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (unescape && i + 3 <= n && memcmp(p + i, "\xE2\x96\x81", 3) == 0) {
            buf[o++] = ' ';
            i += 2;
        } else {
            buf[o++] = p[i];
        }
    }
    return (int)o;
}

/* ---------------------------------------------------------------------------------------
 * Encoding: special-token partition, then SPM on the plain pieces
 * --------------------------------------------------------------------------------------- */

typedef struct {
    size_t pos;
    uint32_t len;
    int32_t id;
} tok_match;

static int cmp_match_id_pos(const void *a, const void *b) {
    const tok_match *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int cmp_match_pos(const void *a, const void *b) {
    const tok_match *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int push_match(tok_match **a, size_t *n, size_t *cap, tok_match m) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        tok_match *na = realloc(*a, nc * sizeof **a);
        if (!na) return -1;
        *a = na;
        *cap = nc;
    }
    (*a)[(*n)++] = m;
    return 0;
}

/* Finds the special-token occurrences llama.cpp's partition would take, sorted by
 * position. Returns their count (*out malloc'ed, NULL when 0) or -1 on allocation failure. */
static int64_t tok_partition(const ls_tokenizer *t, const char *text, size_t len, bool parse_special, tok_match **out) {
    const tok_len_class *cls = parse_special ? t->sp_cls : t->sp_cls_user;
    int n_cls = parse_special ? t->n_sp_cls : t->n_sp_cls_user;
    const int32_t *ids = parse_special ? t->sp_any : t->sp_user;
    *out = NULL;
    if (n_cls == 0 || len == 0) return 0;
    uint8_t *claimed = calloc(len, 1); /* [len] 1 = inside an accepted special token */
    tok_match *acc = NULL, *cand = NULL;
    size_t na = 0, cap_a = 0, cap_c = 0;
    if (!claimed) return -1;
    for (int k = 0; k < n_cls; k++) {
        const uint32_t L = cls[k].len;
        if (L > len) continue;
        /* Gather this length's candidates at positions no longer token has claimed. */
        size_t nc = 0;
        bool multi = false;
        for (size_t p = 0; p + L <= len; p++) {
            uint8_t b = (uint8_t)text[p];
            if (!((cls[k].first[b >> 6] >> (b & 63)) & 1) || claimed[p] || claimed[p + L - 1]) continue;
            int32_t id = ids[sp_slot(t, text + p, L)];
            if (id < 0) continue;
            multi |= nc > 0 && cand[0].id != id;
            if (push_match(&cand, &nc, &cap_c, (tok_match){p, L, id})) goto oom;
        }
        /* One token at a time (ascending id), each left to right, as llama.cpp's loop. */
        if (multi) qsort(cand, nc, sizeof *cand, cmp_match_id_pos);
        for (size_t i = 0; i < nc; i++) {
            size_t p = cand[i].pos;
            if (claimed[p] || claimed[p + L - 1]) continue;
            memset(claimed + p, 1, L);
            if (push_match(&acc, &na, &cap_a, cand[i])) goto oom;
        }
    }
    free(cand);
    free(claimed);
    if (na > 1) qsort(acc, na, sizeof *acc, cmp_match_pos);
    *out = acc;
    return (int64_t)na;
oom:
    free(cand);
    free(acc);
    free(claimed);
    return -1;
}

/* HF tokenizers' added-token split (AddedVocabulary::split_with_indices): one leftmost-longest
 * scan over all added tokens (CONTROL = special, USER_DEFINED = not). Without parse_special
 * (encode_special_tokens = True) a special match is still consumed by the scan but stays
 * plain text, exactly as HF skips it after the automaton found it. Same return convention
 * as tok_partition. */
static int64_t tok_partition_hf(const ls_tokenizer *t, const char *text, size_t len, bool parse_special,
                                tok_match **out) {
    *out = NULL;
    if (t->n_sp_cls == 0 || len == 0) return 0;
    tok_match *acc = NULL;
    size_t na = 0, cap_a = 0;
    for (size_t p = 0; p < len;) {
        uint8_t b = (uint8_t)text[p];
        int32_t id = -1;
        uint32_t L = 0;
        for (int k = 0; k < t->n_sp_cls && id < 0; k++) { /* longest first */
            L = t->sp_cls[k].len;
            if (L > len - p || !((t->sp_cls[k].first[b >> 6] >> (b & 63)) & 1)) continue;
            id = t->sp_any[sp_slot(t, text + p, L)];
        }
        if (id < 0) {
            p++;
            continue;
        }
        if (parse_special || t->types[id] != LS_TOKEN_CONTROL) {
            if (push_match(&acc, &na, &cap_a, (tok_match){p, L, id})) {
                free(acc);
                return -1;
            }
        }
        p += L;
    }
    *out = acc;
    return (int64_t)na;
}

int64_t ls_tokenize(const ls_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special, int32_t *out,
                    int64_t cap) {
    if (!t || (!text && len) || cap < 0 || (!out && cap > 0) || len > TOK_MAX_TEXT) return -1;
    int64_t n = 0;
    if (add_bos) {
        if (t->bos < 0) return -1;
        if (n < cap) out[n] = t->bos;
        n++;
    }
    if (len == 0) return n; /* llama.cpp: no fragments at all, not even a space prefix */

    tok_match *m;
    int64_t nm =
        t->hf ? tok_partition_hf(t, text, len, parse_special, &m) : tok_partition(t, text, len, parse_special, &m);
    if (nm < 0) return -1;
    /* Fragments in order: plain text between matches goes through SPM. llama.cpp adds the
     * space prefix (if enabled) to a plain fragment at the start or after a special. */
    bool prev_special = true;
    size_t p = 0;
    for (int64_t i = 0; i <= nm && n >= 0; i++) {
        size_t end = i < nm ? m[i].pos : len;
        if (end > p) {
            if (t->model == LS_TOKENIZER_MODEL_BPE)
                n = ls_tok_bpe_encode_fragment(t, text + p, end - p, out, cap, n);
            else
                n = ls_spm_encode(t, text + p, end - p, t->add_space_prefix && prev_special, out, cap, n);
            prev_special = false;
        }
        if (i < nm && n >= 0) {
            if (n < cap) out[n] = m[i].id;
            n++;
            prev_special = true;
            p = m[i].pos + m[i].len;
        }
    }
    free(m);
    return n;
}
