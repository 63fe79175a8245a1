/* HTTP/1.1 framing checks for `lockstep serve` that libmicrohttpd 0.9.75 makes wrongly, not at
 * all, or answers with an HTML page (docs/server_http.md): the request line (checked before
 * the connection is handed to libmicrohttpd), Content-Length / Transfer-Encoding / Host and
 * header names (checked when the headers are in), the mapping of libmicrohttpd's own error
 * answers to ours, and the text of an error answer (one response, JSON body, connection
 * closed). Pure functions (no I/O, no globals besides cJSON's allocator): unit-tested in
 * tests/test_server_framing.c and fuzzed with the whole HTTP path (tests/fuzz/fuzz_http.c). */
#ifndef LS_SERVER_HTTP_FRAMING_H
#define LS_SERVER_HTTP_FRAMING_H

#include <stdbool.h>
#include <stddef.h>

/* A request line (and the empty lines before it) longer than this is refused (414 or 400). */
enum { LS_HTTP_LINE_MAX = 8192 };

typedef struct {
    int status;          /* 400, 413, 414, 431, 501, 505, ... */
    const char *message; /* static text */
    const char *code;    /* OpenAI-style error code */
} ls_http_problem;

typedef enum {
    LS_HTTP_LINE_MORE = 0,  /* valid so far, not complete: wait for more bytes */
    LS_HTTP_LINE_OK = 1,    /* a complete, valid request line */
    LS_HTTP_LINE_BAD = -1,  /* invalid (already, or at its end): *p says how to answer */
    LS_HTTP_LINE_EMPTY = 2, /* eof before any request byte (empty lines aside): close quietly */
} ls_http_line;

/* The request line at the start of buf[0, n): empty lines before it are skipped (RFC 9112
 * 2.2); then method SP request-target SP HTTP/1.x and CRLF (or a bare LF). The method is a
 * token, the target has no control byte and no space, single spaces only; HTTP/d.d with a
 * major version other than 1 is 505. `eof`: no more bytes will come (the peer closed its end). */
ls_http_line ls_http_check_request_line(const char *buf, size_t n, bool eof, ls_http_problem *p);

/* What the framing check needs from a request's header fields. */
typedef struct {
    int http_minor;                /* 0 for HTTP/1.0, 1 for HTTP/1.1 (and 1.2-1.9) */
    int n_content_length;          /* Content-Length field lines */
    int n_transfer_encoding;       /* Transfer-Encoding field lines */
    int n_host;                    /* Host field lines */
    const char *transfer_encoding; /* every Transfer-Encoding value joined with "," (NULL if none) */
    bool bad_field_name;           /* a field name that is not a token (e.g. "Name :") */
} ls_http_fields;

/* RFC 9112 framing rules libmicrohttpd does not enforce: at most one Content-Length; not
 * both Content-Length and Transfer-Encoding; Transfer-Encoding only in HTTP/1.1 and exactly
 * "chunked" (other codings before a final chunked: 501; chunked missing, not last or twice:
 * 400); HTTP/1.1 needs exactly one Host; field names are tokens. Returns 0, or -1 and *p. */
int ls_http_check_fields(const ls_http_fields *f, ls_http_problem *p);

/* libmicrohttpd answered a request itself (its log line "Error processing request (HTTP
 * response code is STATUS ('BODY'))"): our status, message and code for the same problem. */
void ls_http_problem_from_mhd(unsigned status, const char *mhd_body, ls_http_problem *p);

/* The JSON body of an error answer: {"error":{"message","type","param","code"}} (type is
 * server_error for 5xx, else invalid_request_error; empty or NULL param/code are null).
 * Returns a string to free with cJSON_free, or NULL when out of memory. */
char *ls_http_error_body(int status, const char *message, const char *param, const char *code);

/* A whole error response (status line, Content-Type: application/json, Content-Length,
 * Connection: close, the JSON body) in buf[0, cap). Returns its length, or 0 if it does not
 * fit or memory ran out. */
size_t ls_http_error_response(const ls_http_problem *p, char *buf, size_t cap);

/* The reason phrase of a status the server sends ("Bad Request", ...; "Error" if unknown). */
const char *ls_http_reason(int status);

#endif
