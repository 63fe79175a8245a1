/* Stop-sequence detection over streamed text for `lockstep serve`. Generated text arrives in
 * chunks that need not align with stop sequences; the buffer holds back the shortest tail
 * that could still be the start of a stop sequence, so a stop sequence split across tokens
 * is found and never sent. Pure (no I/O), unit-tested in tests/test_server_stop.c. */
#ifndef LS_SERVER_STOP_H
#define LS_SERVER_STOP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *text; /* everything accepted so far (NUL-terminated); trimmed at a stop match */
    size_t len, cap;
    size_t sent; /* text[0, sent) is final and may be sent to the client */
    bool hit;    /* a stop sequence was found: text ends where it started */
} ls_stopbuf;

void ls_stop_init(ls_stopbuf *b);
void ls_stop_free(ls_stopbuf *b);
/* Append a chunk and advance `sent` as far as is safe. After a hit further input is ignored.
 * Returns 0, or -1 when out of memory. */
int ls_stop_append(ls_stopbuf *b, const char *s, size_t n, char *const *stops, int n_stop);
/* Generation ended without a stop match: everything held back becomes final. */
void ls_stop_finish(ls_stopbuf *b);

#endif
