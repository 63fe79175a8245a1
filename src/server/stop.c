/* Stop-sequence detection across chunk boundaries (see stop.h). */
#include <stdlib.h>
#include <string.h>

#include "stop.h"

void ls_stop_init(ls_stopbuf *b) {
    memset(b, 0, sizeof *b);
}

void ls_stop_free(ls_stopbuf *b) {
    free(b->text);
    memset(b, 0, sizeof *b);
}

/* First occurrence of needle in hay[0, n), or NULL. */
static const char *find(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, m)) return hay + i;
    return NULL;
}

int ls_stop_append(ls_stopbuf *b, const char *s, size_t n, char *const *stops, int n_stop) {
    if (b->hit) return 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *t = realloc(b->text, cap);
        if (!t) return -1;
        b->text = t;
        b->cap = cap;
    }
    memcpy(b->text + b->len, s, n);
    b->len += n;
    b->text[b->len] = 0;
    /* Any match starts at or after `sent` (text before it could not start a match). The
     * earliest match wins. */
    const char *tail = b->text + b->sent;
    size_t tn = b->len - b->sent;
    const char *best = NULL;
    for (int i = 0; i < n_stop; i++) {
        const char *p = find(tail, tn, stops[i], strlen(stops[i]));
        if (p && (!best || p < best)) best = p;
    }
    if (best) {
        b->len = (size_t)(best - b->text);
        b->text[b->len] = 0;
        b->sent = b->len;
        b->hit = true;
        return 0;
    }
    /* Hold back the longest suffix that is a proper prefix of some stop sequence. */
    size_t hold = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t m = strlen(stops[i]);
        if (m == 0) continue;
        for (size_t k = (m - 1 < tn ? m - 1 : tn); k > hold; k--) {
            if (!memcmp(b->text + b->len - k, stops[i], k)) {
                hold = k;
                break;
            }
        }
    }
    b->sent = b->len - hold;
    return 0;
}

void ls_stop_finish(ls_stopbuf *b) {
    b->sent = b->len;
}
