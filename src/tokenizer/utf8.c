/* UTF-8 helpers and the streaming detokenizer.
 *
 * Byte-fallback tokens split one code point over several tokens (an emoji is often four
 * <0xXX> tokens), so text streamed token by token must hold back an unfinished sequence
 * until its last byte arrives; otherwise a client would see a broken character (or a
 * JSON encoder would choke on it). The decoder below is a small state machine over
 * `pending` (the bytes of the unfinished sequence, at most 3): the allowed range of the
 * second byte depends on the lead (E0: A0..BF excludes overlongs, ED: 80..9F excludes
 * surrogates, F0: 90..BF, F4: 80..8F caps at U+10FFFF), later bytes are 80..BF. When a
 * byte cannot continue the sequence, the pending bytes become one U+FFFD and the byte is
 * looked at again as a new lead: that is the "maximal subpart" rule of Unicode ch. 3 /
 * WHATWG, the same replacement Python's bytes.decode(errors="replace") performs. */
#include "tokenizer/utf8.h"

#include <string.h>

#include "tokenizer/tokenizer.h"

size_t ls_utf8_lead_len(uint8_t lead) {
    /* llama.cpp unicode_len_utf8: indexed by the high nibble. */
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

/* Expected total length for a valid lead byte, 0 for bytes that can never start one
 * (continuations 80..BF, overlong leads C0/C1, F5..FF). */
static int utf8_need(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Is b acceptable as byte number `pos` (1-based after the lead) of a sequence led by `lead`? */
static bool utf8_cont_ok(uint8_t lead, int pos, uint8_t b) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (pos == 1) {
        if (lead == 0xE0)
            lo = 0xA0;
        else if (lead == 0xED)
            hi = 0x9F;
        else if (lead == 0xF0)
            lo = 0x90;
        else if (lead == 0xF4)
            hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

int ls_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    const uint8_t *u = (const uint8_t *)s;
    int need = utf8_need(u[0]);
    if (need == 0 || (size_t)need > n) return 0;
    if (need == 1) {
        *cp = u[0];
        return 1;
    }
    uint32_t c = u[0] & (0x7Fu >> need);
    for (int i = 1; i < need; i++) {
        if (!utf8_cont_ok(u[0], i, u[i])) return 0;
        c = (c << 6) | (u[i] & 0x3Fu);
    }
    *cp = c;
    return need;
}

bool ls_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = ls_utf8_decode(s + i, n - i, &cp);
        if (k == 0) return false;
        i += (size_t)k;
    }
    return true;
}

bool ls_utf8_is_py_space(uint32_t cp) {
    /* Exactly the code points for which Python 3's str.isspace() is true (checked by
     * enumerating all of Unicode); Jinja's `trim` filter is str.strip(). */
    if (cp >= 0x09 && cp <= 0x0D) return true;
    if (cp >= 0x1C && cp <= 0x20) return true;
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680) return true;
    if (cp >= 0x2000 && cp <= 0x200A) return true;
    return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- incremental decoder ---- */

static const char utf8_replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

static void emit(char *out, int64_t *pos, const char *p, size_t n) {
    if (out) memcpy(out + *pos, p, n);
    *pos += (int64_t)n;
}

/* One byte through the state machine. */
static void stream_byte(char pending[8], int *n_pending, uint8_t b, char *out, int64_t *pos) {
    if (*n_pending > 0) {
        uint8_t lead = (uint8_t)pending[0];
        if (utf8_cont_ok(lead, *n_pending, b)) {
            pending[(*n_pending)++] = (char)b;
            if (*n_pending == utf8_need(lead)) {
                emit(out, pos, pending, (size_t)*n_pending);
                *n_pending = 0;
            }
            return;
        }
        /* The unfinished sequence is dead: replace it, then treat b as a new lead. */
        emit(out, pos, utf8_replacement, 3);
        *n_pending = 0;
    }
    int need = utf8_need(b);
    if (need == 1) {
        char c = (char)b;
        emit(out, pos, &c, 1);
    } else if (need == 0) {
        emit(out, pos, utf8_replacement, 3);
    } else {
        pending[0] = (char)b;
        *n_pending = 1;
    }
}

int64_t ls_utf8_stream_feed(char pending[8], int *n_pending, const char *in, size_t n, bool unescape_spaces,
                            char *out) {
    if (*n_pending < 0 || *n_pending > 3) return -1;
    if (*n_pending > 0 && (utf8_need((uint8_t)pending[0]) <= *n_pending)) return -1;
    int64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        /* SentencePiece's word-boundary marker U+2581 stands for a space in normal tokens. */
        if (unescape_spaces && i + 3 <= n && memcmp(in + i, "\xE2\x96\x81", 3) == 0) {
            stream_byte(pending, n_pending, ' ', out, &pos);
            i += 2;
            continue;
        }
        stream_byte(pending, n_pending, (uint8_t)in[i], out, &pos);
    }
    return pos;
}

int64_t ls_utf8_stream_flush(char pending[8], int *n_pending, char *out) {
    (void)pending; /* whatever is held back is replaced as a whole */
    if (*n_pending < 0 || *n_pending > 3) return -1;
    int64_t pos = 0;
    if (*n_pending > 0) emit(out, &pos, utf8_replacement, 3);
    *n_pending = 0;
    return pos;
}

/* ---- streaming detokenizer (API in tokenizer.h) ---- */

int ls_detok_push(const ls_tokenizer *t, ls_detok_state *st, int32_t id, bool render_special, char *out, int cap) {
    const char *p;
    size_t n;
    bool unescape;
    if (!st || cap < 0 || ls_token_piece(t, id, render_special, &p, &n, &unescape) != 0) return -1;
    /* Counting pass on a copy of the state, so a too-small buffer leaves *st untouched. */
    char pend[8];
    int np = st->n_pending;
    memcpy(pend, st->pending, sizeof pend);
    int64_t need = ls_utf8_stream_feed(pend, &np, p, n, unescape, NULL);
    if (need < 0 || need > cap) return -1;
    if (need > 0 && !out) return -1;
    int64_t got = ls_utf8_stream_feed(st->pending, &st->n_pending, p, n, unescape, need > 0 ? out : NULL);
    return (int)got;
}

int ls_detok_flush(ls_detok_state *st, char *out, int cap) {
    if (!st || st->n_pending < 0 || st->n_pending > 3) return -1;
    int need = st->n_pending > 0 ? 3 : 0;
    if (need > cap || (need > 0 && !out)) return -1;
    return (int)ls_utf8_stream_flush(st->pending, &st->n_pending, out);
}
