/* The grammar's pushdown automaton over bytes (docs/structured_output.md section 3): one
 * frame per open value; containers push a frame for each member value and the frame pops
 * itself when its value ends (a number or a literal that may continue ends at the first byte
 * that does not continue it, which then goes to the container). Whitespace: at most
 * LS_GRAMMAR_MAX_WS bytes (space, \n, \t) between structural tokens, none elsewhere. */
#include <string.h>

#include "decode/grammar.h"

enum { R_REJ, R_OK, R_AGAIN, R_WS };
enum { O_OPEN, O_BEGIN, O_KEY, O_COLON, O_VALUE, O_AFTER, O_NEXT };
enum { A_OPEN, A_BEGIN, A_AFTER, A_NEXT };
enum { S_OPEN, S_BODY, S_ESC, S_HEX, S_UTF };
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { MAX_INT_DIGITS = 15, MAX_FRAC_DIGITS = 9, MAX_EXP_DIGITS = 3 };

static bool is_ws(uint8_t b) {
    return b == ' ' || b == '\n' || b == '\t';
}

static bool has_first(const ls_gnode *n, uint8_t b) {
    return (n->first_bytes[b >> 3] >> (b & 7)) & 1;
}

static bool push(const ls_grammar *g, ls_gstate *s, int32_t node) {
    if (s->depth >= LS_GRAMMAR_MAX_DEPTH) return false;
    ls_gframe *f = &s->f[s->depth++];
    memset(f, 0, sizeof *f);
    f->node = (uint16_t)node;
    const ls_gnode *n = &g->nodes[node];
    if (n->kind == GN_LIT) f->alive = n->n >= 64 ? ~0ull : (1ull << n->n) - 1;
    return true;
}

static int pop(ls_gstate *s) {
    s->depth--;
    return R_OK;
}

/* Object properties j >= idx that may come next (all before j optional). */
static uint64_t obj_candidates(const ls_grammar *g, const ls_gnode *n, uint32_t idx) {
    uint64_t m = 0;
    for (int32_t j = (int32_t)idx; j < n->n; j++) {
        m |= 1ull << j;
        if (g->props[n->first + j].required) break;
    }
    return m;
}

static bool obj_can_close(const ls_grammar *g, const ls_gnode *n, uint32_t idx) {
    if (n->generic) return true;
    for (int32_t j = (int32_t)idx; j < n->n; j++)
        if (g->props[n->first + j].required) return false;
    return true;
}

static int key_byte(const ls_grammar *g, const ls_gnode *n, ls_gframe *f, uint8_t b) {
    uint64_t a = 0;
    for (int32_t j = 0; j < n->n; j++) {
        const ls_gprop *p = &g->props[n->first + j];
        if ((f->alive >> j & 1) && f->len < p->keylen && (uint8_t)p->key[f->len] == b) a |= 1ull << j;
    }
    if (!a) return R_REJ;
    f->alive = a;
    f->len++;
    for (int32_t j = 0; j < n->n; j++)
        if ((a >> j & 1) && g->props[n->first + j].keylen == f->len) {
            f->idx = (uint16_t)(j + 1);
            f->phase = O_COLON;
        }
    return R_OK;
}

static int step_object(const ls_grammar *g, ls_gstate *s, ls_gframe *f, const ls_gnode *n, uint8_t b) {
    bool ws = is_ws(b);
    switch (f->phase) {
    case O_OPEN:
        if (b != '{') return R_REJ;
        f->phase = O_BEGIN;
        return R_OK;
    case O_BEGIN:
    case O_NEXT:
        if (ws) return R_WS;
        if (b == '}' && f->phase == O_BEGIN && obj_can_close(g, n, f->idx)) return pop(s);
        if (b != '"') return R_REJ;
        if (n->generic) {
            f->phase = O_COLON;
            return push(g, s, g->str) ? R_AGAIN : R_REJ;
        }
        f->alive = obj_candidates(g, n, f->idx);
        f->phase = O_KEY;
        f->len = 0;
        return key_byte(g, n, f, b);
    case O_KEY: return key_byte(g, n, f, b);
    case O_COLON:
        if (ws) return R_WS;
        if (b != ':') return R_REJ;
        f->phase = O_VALUE;
        return R_OK;
    case O_VALUE:
        if (ws) return R_WS;
        f->phase = O_AFTER;
        return push(g, s, n->generic ? g->any : g->props[n->first + f->idx - 1].node) ? R_AGAIN : R_REJ;
    default: /* O_AFTER */
        if (ws) return R_WS;
        if (b == ',' && (n->generic || obj_candidates(g, n, f->idx))) {
            f->phase = O_NEXT;
            return R_OK;
        }
        if (b == '}' && obj_can_close(g, n, f->idx)) return pop(s);
        return R_REJ;
    }
}

static int step_array(const ls_grammar *g, ls_gstate *s, ls_gframe *f, const ls_gnode *n, uint8_t b) {
    bool ws = is_ws(b);
    switch (f->phase) {
    case A_OPEN:
        if (b != '[') return R_REJ;
        f->phase = A_BEGIN;
        return R_OK;
    case A_BEGIN:
        if (ws) return R_WS;
        if (b == ']' && n->min == 0) return pop(s);
        if (n->max == 0) return R_REJ;
        f->idx = 1;
        f->phase = A_AFTER;
        return push(g, s, n->child) ? R_AGAIN : R_REJ;
    case A_NEXT:
        if (ws) return R_WS;
        if (f->idx < UINT16_MAX) f->idx++; /* saturates: only bounds up to 65535 are compared */
        f->phase = A_AFTER;
        return push(g, s, n->child) ? R_AGAIN : R_REJ;
    default: /* A_AFTER */
        if (ws) return R_WS;
        if (b == ',' && (n->max < 0 || f->idx < n->max)) {
            f->phase = A_NEXT;
            return R_OK;
        }
        if (b == ']' && f->idx >= n->min) return pop(s);
        return R_REJ;
    }
}

/* A UTF-8 lead byte: the continuation bytes it needs and the range of the first. */
static bool utf8_lead(ls_gframe *f, uint8_t b) {
    f->lo = 0x80;
    f->hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        f->aux = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        f->aux = 2;
        if (b == 0xE0) f->lo = 0xA0;
        if (b == 0xED) f->hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        f->aux = 3;
        if (b == 0xF0) f->lo = 0x90;
        if (b == 0xF4) f->hi = 0x8F;
    } else {
        return false;
    }
    f->phase = S_UTF;
    return true;
}

static int step_string(ls_gstate *s, ls_gframe *f, const ls_gnode *n, uint8_t b) {
    bool room = n->max < 0 || f->len < n->max;
    switch (f->phase) {
    case S_OPEN:
        if (b != '"') return R_REJ;
        f->phase = S_BODY;
        return R_OK;
    case S_BODY:
        if (b == '"') return f->len >= n->min ? pop(s) : R_REJ;
        if (b < 0x20 || !room) return R_REJ;
        f->len++;
        if (b == '\\') {
            f->phase = S_ESC;
            return R_OK;
        }
        return b < 0x80 || utf8_lead(f, b) ? R_OK : R_REJ;
    case S_ESC:
        if (b == 'u') {
            f->phase = S_HEX;
            f->aux = 4;
            f->lo = 0;
            return R_OK;
        }
        if (!strchr("\"\\/bfnrt", b) || b == 0) return R_REJ;
        f->phase = S_BODY;
        return R_OK;
    case S_HEX: {
        bool hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
        if (!hex) return R_REJ;
        /* No surrogate escapes (\uD800-\uDFFF): every string stays valid UTF-8. */
        if (f->aux == 4) f->lo = b == 'd' || b == 'D';
        if (f->aux == 3 && f->lo && !(b >= '0' && b <= '7')) return R_REJ;
        if (--f->aux == 0) f->phase = S_BODY;
        return R_OK;
    }
    default: /* S_UTF */
        if (b < f->lo || b > f->hi) return R_REJ;
        f->lo = 0x80;
        f->hi = 0xBF;
        if (--f->aux == 0) f->phase = S_BODY;
        return R_OK;
    }
}

static bool num_final(uint8_t phase) {
    return phase == N_ZERO || phase == N_INT || phase == N_FRAC || phase == N_EXP;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? with bounded digits; integers: no . or e. */
static int step_number(ls_gstate *s, ls_gframe *f, const ls_gnode *n, uint8_t b) {
    bool digit = b >= '0' && b <= '9', real = n->kind == GN_NUMBER;
    uint8_t next = 255;
    switch (f->phase) {
    case N_START:
    case N_MINUS:
        if (b == '-' && f->phase == N_START) next = N_MINUS;
        if (digit) next = b == '0' ? N_ZERO : N_INT;
        break;
    case N_ZERO:
    case N_INT:
        if (digit && f->phase == N_INT && f->len < MAX_INT_DIGITS) next = N_INT;
        if (real && b == '.') next = N_DOT;
        if (real && (b == 'e' || b == 'E')) next = N_E;
        break;
    case N_DOT:
        if (digit) next = N_FRAC;
        break;
    case N_FRAC:
        if (digit && f->len < MAX_FRAC_DIGITS) next = N_FRAC;
        if (b == 'e' || b == 'E') next = N_E;
        break;
    case N_E:
        if (b == '+' || b == '-') next = N_ESIGN;
        if (digit) next = N_EXP;
        break;
    case N_ESIGN:
        if (digit) next = N_EXP;
        break;
    default: /* N_EXP */
        if (digit && f->len < MAX_EXP_DIGITS) next = N_EXP;
        break;
    }
    if (next == 255) {
        if (!num_final(f->phase)) return R_REJ;
        pop(s);
        return R_AGAIN; /* the byte belongs to the container */
    }
    f->len = next == f->phase ? f->len + 1 : 1;
    f->phase = next;
    return R_OK;
}

static bool lit_complete(const ls_grammar *g, const ls_gnode *n, const ls_gframe *f) {
    for (int32_t i = 0; i < n->n; i++)
        if ((f->alive >> i & 1) && g->lits[n->first + i].len == f->len) return true;
    return false;
}

static int step_lit(const ls_grammar *g, ls_gstate *s, ls_gframe *f, const ls_gnode *n, uint8_t b) {
    uint64_t a = 0;
    bool longer = false;
    for (int32_t i = 0; i < n->n; i++) {
        const ls_glit *l = &g->lits[n->first + i];
        if ((f->alive >> i & 1) && f->len < l->len && (uint8_t)l->s[f->len] == b) {
            a |= 1ull << i;
            longer |= l->len > f->len + 1;
        }
    }
    if (!a) {
        if (!lit_complete(g, n, f)) return R_REJ;
        pop(s);
        return R_AGAIN;
    }
    f->alive = a;
    f->len++;
    if (!longer) pop(s); /* nothing can continue it: done */
    return R_OK;
}

static int step_union(const ls_grammar *g, ls_gframe *f, const ls_gnode *n, uint8_t b) {
    for (int32_t i = 0; i < n->n; i++) {
        int32_t m = g->members[n->first + i];
        if (!has_first(&g->nodes[m], b)) continue;
        memset(f, 0, sizeof *f);
        f->node = (uint16_t)m;
        const ls_gnode *mn = &g->nodes[m];
        if (mn->kind == GN_LIT) f->alive = mn->n >= 64 ? ~0ull : (1ull << mn->n) - 1;
        return R_AGAIN;
    }
    return R_REJ;
}

static bool step(const ls_grammar *g, ls_gstate *s, uint8_t b) {
    for (;;) {
        if (s->depth == 0) return false;
        ls_gframe *f = &s->f[s->depth - 1];
        const ls_gnode *n = &g->nodes[f->node];
        int r;
        switch (n->kind) {
        case GN_OBJECT: r = step_object(g, s, f, n, b); break;
        case GN_ARRAY: r = step_array(g, s, f, n, b); break;
        case GN_STRING: r = step_string(s, f, n, b); break;
        case GN_NUMBER:
        case GN_INTEGER: r = step_number(s, f, n, b); break;
        case GN_LIT: r = step_lit(g, s, f, n, b); break;
        default: r = step_union(g, f, n, b); break;
        }
        if (r == R_AGAIN) continue;
        if (r == R_WS) {
            if (s->ws >= LS_GRAMMAR_MAX_WS) return false;
            s->ws++;
            return true;
        }
        s->ws = 0;
        return r == R_OK;
    }
}

void ls_gstate_init(const ls_grammar *g, ls_gstate *s) {
    s->depth = 0;
    s->ws = 0;
    push(g, s, g->root);
}

bool ls_gstate_feed(const ls_grammar *g, ls_gstate *s, const char *bytes, size_t n) {
    ls_gstate t = *s;
    for (size_t i = 0; i < n; i++)
        if (!step(g, &t, (uint8_t)bytes[i])) return false;
    *s = t;
    return true;
}

int64_t ls_gstate_string_room(const ls_grammar *g, const ls_gstate *s) {
    if (s->depth == 0) return -2;
    const ls_gframe *f = &s->f[s->depth - 1];
    const ls_gnode *n = &g->nodes[f->node];
    if (n->kind != GN_STRING || f->phase != S_BODY) return -2;
    return n->max < 0 ? -1 : n->max - (int64_t)f->len;
}

bool ls_gstate_accepting(const ls_grammar *g, const ls_gstate *s) {
    if (s->depth == 0) return true;
    if (s->depth > 1) return false;
    const ls_gframe *f = &s->f[0];
    const ls_gnode *n = &g->nodes[f->node];
    if (n->kind == GN_NUMBER || n->kind == GN_INTEGER) return num_final(f->phase);
    return n->kind == GN_LIT && lit_complete(g, n, f);
}

bool ls_gstate_step(const ls_grammar *g, ls_gstate *s, uint8_t b) {
    return step(g, s, b);
}
