/* Structured output (docs/structured_output.md): a JSON schema compiled into a pushdown
 * automaton over bytes, and the token mask it gives over a model's vocabulary.
 *
 * The automaton state is a small stack of frames, one per open JSON value. A token is allowed
 * at a position when every one of its bytes is accepted from the state reached by the text
 * emitted before that position: the mask depends on that text only, so classic decoding and
 * every speculative schedule see the same mask for the same position. */
#ifndef LS_DECODE_GRAMMAR_H
#define LS_DECODE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

enum { LS_GRAMMAR_MAX_DEPTH = 32, LS_GRAMMAR_MAX_WS = 1 };

typedef struct {
    uint16_t node;
    uint8_t phase, aux;
    uint8_t lo, hi; /* UTF-8: the range of the next continuation byte */
    uint16_t idx;   /* object: next property; array: items so far */
    uint32_t len;   /* string: characters; number: digits of the part; literal/key: bytes */
    uint64_t alive; /* literal / key candidates */
} ls_gframe;

typedef struct {
    int32_t depth; /* open frames; 0 = the value is complete */
    int32_t ws;    /* consecutive whitespace bytes */
    ls_gframe f[LS_GRAMMAR_MAX_DEPTH];
} ls_gstate;

/* Compiled schema: nodes refer to each other by index (props, lits and members of one node
 * are contiguous in their arrays). */
typedef enum { GN_OBJECT, GN_ARRAY, GN_STRING, GN_NUMBER, GN_INTEGER, GN_LIT, GN_UNION } ls_gn_kind;
typedef struct {
    uint8_t kind;
    bool generic;     /* object: any keys, any values */
    int32_t child;    /* array: the items' node */
    int32_t n, first; /* props / lits / members: count and first index */
    int64_t min, max; /* minItems/maxItems or minLength/maxLength; max < 0: none */
    uint8_t first_bytes[32];
} ls_gnode;
typedef struct {
    char *key; /* JSON-encoded, with its quotes */
    uint32_t keylen;
    int32_t node;
    bool required;
} ls_gprop;
typedef struct {
    char *s; /* JSON text of the value */
    uint32_t len;
} ls_glit;
struct ls_grammar {
    ls_gnode *nodes;
    int32_t n_nodes, cap_nodes;
    ls_gprop *props;
    int32_t n_props, cap_props;
    ls_glit *lits;
    int32_t n_lits, cap_lits;
    int32_t *members;
    int32_t n_members, cap_members;
    int32_t root, any, str; /* any: any JSON value; str: any string (-1 until needed) */
};

/* The vocabulary as a byte trie (preorder, subtree sizes) plus every token's bytes. */
typedef struct ls_gvocab ls_gvocab;

/* Build from n token byte strings; eog[i] marks end-of-generation tokens (allowed only when
 * the value is complete). NULL when out of memory. */
ls_gvocab *ls_gvocab_new(int32_t n, const char *const *bytes, const size_t *lens, const bool *eog);
void ls_gvocab_free(ls_gvocab *v);
/* The model's vocabulary, built on first use and kept with the model (thread-safe). */
const ls_gvocab *ls_gvocab_of_model(const ls_model *m);
int32_t ls_gvocab_max_len(const ls_gvocab *v);
int32_t ls_gvocab_n_vocab(const ls_gvocab *v);

void ls_gstate_init(const ls_grammar *g, ls_gstate *s);
/* Feed bytes; false (state unchanged) if one is not allowed. */
bool ls_gstate_feed(const ls_grammar *g, ls_gstate *s, const char *bytes, size_t n);
/* The text so far is a complete value (end of generation allowed). */
bool ls_gstate_accepting(const ls_grammar *g, const ls_gstate *s);
/* Inside a string's text (not in an escape or a UTF-8 sequence): the characters it may still
 * take (-1: no bound); -2 elsewhere. */
int64_t ls_gstate_string_room(const ls_grammar *g, const ls_gstate *s);
/* One byte, in place (s is garbage after false): the mask's trie walk works on copies. */
bool ls_gstate_step(const ls_grammar *g, ls_gstate *s, uint8_t b);
/* Advance by a token's bytes (an end-of-generation token leaves the state as it is). */
bool ls_gstate_feed_token(const ls_grammar *g, const ls_gvocab *v, ls_gstate *s, int32_t tok);

/* allow[t] = 1 for the tokens allowed after state s, else 0 (allow: n_vocab bytes). scratch:
 * ls_gvocab_max_len(v) + 1 states. Returns the number allowed. */
int32_t ls_grammar_mask(const ls_grammar *g, const ls_gvocab *v, const ls_gstate *s, ls_gstate *scratch,
                        uint8_t *allow);

#endif
