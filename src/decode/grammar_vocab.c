/* The token mask (docs/structured_output.md section 4): the vocabulary's byte strings as a
 * trie in preorder with subtree sizes; a walk feeds each trie edge's byte to a copy of the
 * parent's state and skips a whole subtree at the first byte the grammar rejects, so tokens
 * sharing a rejected prefix cost one step. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "decode/grammar.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    uint8_t byte;
    uint16_t depth; /* bytes from the root */
    uint32_t size;  /* nodes in the subtree, itself included */
    int32_t tok;    /* a token spelled by the path here (more in next_same), or -1 */
} tnode;

typedef struct {
    tnode *nodes;
    int32_t n_nodes;
    int32_t *next_same; /* [n_vocab] */
} trie;

struct ls_gvocab {
    int32_t n_vocab, max_len;
    uint32_t *off, *len; /* [n_vocab] token bytes in `bytes` */
    uint8_t *bytes;
    int32_t *eog; /* end-of-generation tokens */
    int32_t n_eog;
    trie all;
    /* Inside a string: the tokens that are string text (complete UTF-8, no quote, backslash
     * or control byte) only add characters; `rest` is the trie of the others. */
    int32_t *plain, n_plain; /* token ids */
    uint32_t *plain_chars;   /* [n_plain] their characters */
    trie rest;
};

enum { MAX_TOKEN_BYTES = 1024 };

static const ls_gvocab *sort_vocab;

static int cmp_tok(const void *a, const void *b) {
    const ls_gvocab *v = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y], l = lx < ly ? lx : ly;
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], l);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : 1;
}

/* Preorder trie over the sorted non-empty tokens. */
static bool build_trie(ls_gvocab *v, trie *tr, int32_t *ids, int32_t n) {
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&sort_mu);
    sort_vocab = v;
    qsort(ids, (size_t)n, sizeof(int32_t), cmp_tok);
    pthread_mutex_unlock(&sort_mu);
    size_t total = 1;
    for (int32_t i = 0; i < n; i++) total += v->len[ids[i]];
    tr->nodes = malloc(sizeof(tnode) * total);
    tr->next_same = malloc(sizeof(int32_t) * (size_t)v->n_vocab);
    int32_t *path = malloc(sizeof(int32_t) * (MAX_TOKEN_BYTES + 1));
    if (!tr->nodes || !tr->next_same || !path) {
        free(path);
        return false;
    }
    tnode *nodes = tr->nodes;
    nodes[0] = (tnode){0, 0, 0, -1};
    tr->n_nodes = 1;
    path[0] = 0;
    int32_t open = 0; /* depth of the deepest open node on the path */
    for (int32_t i = 0; i < n; i++) {
        int32_t t = ids[i];
        const uint8_t *b = v->bytes + v->off[t];
        uint32_t len = v->len[t], lcp = 0;
        if (i > 0) {
            int32_t p = ids[i - 1];
            const uint8_t *pb = v->bytes + v->off[p];
            while (lcp < len && lcp < v->len[p] && pb[lcp] == b[lcp]) lcp++;
        }
        for (; open > (int32_t)lcp; open--) nodes[path[open]].size = (uint32_t)(tr->n_nodes - path[open]);
        for (uint32_t d = lcp; d < len; d++) {
            path[++open] = tr->n_nodes;
            nodes[tr->n_nodes++] = (tnode){b[d], (uint16_t)(d + 1), 0, -1};
        }
        tnode *end = &nodes[path[len]];
        tr->next_same[t] = end->tok;
        end->tok = t;
    }
    for (; open >= 0; open--) nodes[path[open]].size = (uint32_t)(tr->n_nodes - path[open]);
    free(path);
    return true;
}

/* One UTF-8 sequence of n bytes at b is valid by the string frame's rules (grammar_pda.c):
 * no overlongs, surrogates or code points above U+10FFFF. */
static bool utf8_seq_ok(const uint8_t *b, uint32_t n) {
    uint8_t c = b[0], lo = 0x80, hi = 0xBF;
    if (n == 2 && !(c >= 0xC2 && c <= 0xDF)) return false;
    if (n == 3) {
        if (c < 0xE0 || c > 0xEF) return false;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    }
    if (n == 4) {
        if (c < 0xF0 || c > 0xF4) return false;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    }
    if (b[1] < lo || b[1] > hi) return false;
    for (uint32_t i = 2; i < n; i++)
        if (b[i] < 0x80 || b[i] > 0xBF) return false;
    return true;
}

/* Characters of a token that is plain string text, or -1 (a quote, a backslash, a control
 * byte, or incomplete / invalid UTF-8). */
static int64_t plain_chars(const uint8_t *b, uint32_t n) {
    int64_t chars = 0;
    for (uint32_t i = 0; i < n; chars++) {
        uint8_t c = b[i];
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\') return -1;
            i++;
            continue;
        }
        uint32_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (i + need > n || !utf8_seq_ok(b + i, need)) return -1;
        i += need;
    }
    return chars;
}

/* Split the tokens of the full trie into plain string text and the rest (trie `rest`). */
static bool build_plain(ls_gvocab *v, const int32_t *ids, int32_t n) {
    v->plain = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    v->plain_chars = malloc(sizeof(uint32_t) * (size_t)(n ? n : 1));
    int32_t *rest = malloc(sizeof(int32_t) * (size_t)(n ? n : 1)), m = 0;
    if (!v->plain || !v->plain_chars || !rest) {
        free(rest);
        return false;
    }
    for (int32_t i = 0; i < n; i++) {
        int64_t c = plain_chars(v->bytes + v->off[ids[i]], v->len[ids[i]]);
        if (c > 0) {
            v->plain[v->n_plain] = ids[i];
            v->plain_chars[v->n_plain++] = (uint32_t)c;
        } else {
            rest[m++] = ids[i];
        }
    }
    bool ok = build_trie(v, &v->rest, rest, m);
    free(rest);
    return ok;
}

ls_gvocab *ls_gvocab_new(int32_t n, const char *const *bytes, const size_t *lens, const bool *eog) {
    ls_gvocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n_vocab = n;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += lens[i] > MAX_TOKEN_BYTES ? 0 : lens[i];
    v->off = malloc(sizeof(uint32_t) * (size_t)n);
    v->len = malloc(sizeof(uint32_t) * (size_t)n);
    v->bytes = malloc(total + 1);
    v->eog = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    bool ok = v->off && v->len && v->bytes && v->eog && ids;
    int32_t m = 0;
    size_t o = 0;
    for (int32_t i = 0; ok && i < n; i++) {
        size_t l = lens[i] > MAX_TOKEN_BYTES ? 0 : lens[i]; /* longer tokens: never allowed */
        v->off[i] = (uint32_t)o;
        v->len[i] = (uint32_t)l;
        if (l) memcpy(v->bytes + o, bytes[i], l);
        o += l;
        if (eog[i])
            v->eog[v->n_eog++] = i;
        else if (l)
            ids[m++] = i;
        if ((int32_t)l > v->max_len) v->max_len = (int32_t)l;
    }
    ok = ok && build_trie(v, &v->all, ids, m) && build_plain(v, ids, m);
    free(ids);
    if (!ok) {
        ls_gvocab_free(v);
        return NULL;
    }
    return v;
}

void ls_gvocab_free(ls_gvocab *v) {
    if (!v) return;
    free(v->off);
    free(v->len);
    free(v->bytes);
    free(v->eog);
    free(v->all.nodes);
    free(v->all.next_same);
    free(v->rest.nodes);
    free(v->rest.next_same);
    free(v->plain);
    free(v->plain_chars);
    free(v);
}

int32_t ls_gvocab_max_len(const ls_gvocab *v) {
    return v->max_len;
}

int32_t ls_gvocab_n_vocab(const ls_gvocab *v) {
    return v->n_vocab;
}

static ls_gvocab *model_vocab(const ls_model *m) {
    int32_t n = ls_tokenizer_n_vocab(m->tok);
    char **bytes = calloc((size_t)n, sizeof(char *));
    size_t *lens = calloc((size_t)n, sizeof(size_t));
    bool *eog = calloc((size_t)n, sizeof(bool));
    ls_gvocab *v = NULL;
    bool ok = bytes && lens && eog;
    for (int32_t i = 0; ok && i < n; i++) {
        int need = ls_token_to_bytes(m->tok, i, false, NULL, 0);
        eog[i] = ls_tokenizer_is_eog(m->tok, i);
        if (need <= 0) continue;
        bytes[i] = malloc((size_t)need);
        ok = bytes[i] && ls_token_to_bytes(m->tok, i, false, bytes[i], need) == need;
        lens[i] = (size_t)need;
    }
    if (ok) v = ls_gvocab_new(n, (const char *const *)bytes, lens, eog);
    for (int32_t i = 0; bytes && i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    free(eog);
    return v;
}

const ls_gvocab *ls_gvocab_of_model(const ls_model *m) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    ls_model *mm = (ls_model *)m; /* a cache of derived data: the weights stay immutable */
    if (!mm->gvocab) mm->gvocab = model_vocab(m);
    const ls_gvocab *v = mm->gvocab;
    pthread_mutex_unlock(&mu);
    return v;
}

bool ls_gstate_feed_token(const ls_grammar *g, const ls_gvocab *v, ls_gstate *s, int32_t tok) {
    if (tok < 0 || tok >= v->n_vocab) return false;
    return ls_gstate_feed(g, s, (const char *)v->bytes + v->off[tok], v->len[tok]);
}

static void copy_state(ls_gstate *dst, const ls_gstate *src) {
    dst->depth = src->depth;
    dst->ws = src->ws;
    memcpy(dst->f, src->f, sizeof(ls_gframe) * (size_t)src->depth);
}

static int32_t walk(const ls_grammar *g, const trie *tr, const ls_gstate *s, ls_gstate *scratch, uint8_t *allow) {
    int32_t n = 0;
    copy_state(&scratch[0], s);
    for (int32_t i = 1; i < tr->n_nodes;) {
        const tnode *t = &tr->nodes[i];
        ls_gstate *st = &scratch[t->depth];
        copy_state(st, &scratch[t->depth - 1]);
        if (!ls_gstate_step(g, st, t->byte)) {
            i += (int32_t)t->size;
            continue;
        }
        for (int32_t k = t->tok; k >= 0; k = tr->next_same[k], n++) allow[k] = 1;
        i++;
    }
    return n;
}

int32_t ls_grammar_mask(const ls_grammar *g, const ls_gvocab *v, const ls_gstate *s, ls_gstate *scratch,
                        uint8_t *allow) {
    memset(allow, 0, (size_t)v->n_vocab);
    int32_t n = 0;
    int64_t room = ls_gstate_string_room(g, s);
    if (room == -2) {
        n = walk(g, &v->all, s, scratch, allow);
    } else { /* inside a string: plain text tokens by their length, the trie for the rest */
        for (int32_t i = 0; i < v->n_plain; i++)
            if (room < 0 || v->plain_chars[i] <= room) {
                allow[v->plain[i]] = 1;
                n++;
            }
        n += walk(g, &v->rest, s, scratch, allow);
    }
    if (ls_gstate_accepting(g, s))
        for (int32_t i = 0; i < v->n_eog; i++, n++) allow[v->eog[i]] = 1;
    return n;
}
