/* libFuzzer target for the HTTP request path of `lockstep serve` beyond the JSON body: the
 * bytes of one connection (request line, header fields, Content-Length / chunked framing,
 * pipelined requests) go through the real front end (tools/server/http.c: the accept loop's
 * request-line check, libmicrohttpd 0.9.75 with the server's options and hooks, the request
 * handler's framing checks), driven without a network: the server starts with no listening
 * socket and is handed one end of a socketpair (srv_http_adopt), the input is written to the
 * other end, which is then shut for writing, and everything the server sends back is read until
 * it closes. No model is loaded (the server is "loading"), so generation endpoints answer 503
 * once the body is read; the JSON body parsers have their own target (fuzz_request.c).
 *
 * Checked on every input: the server closes the connection within 10 s; what it sent is a
 * sequence of whole HTTP/1.1 responses (status line, header block, exactly Content-Length body
 * bytes; 1xx interim responses allowed), so a response with two header blocks or a truncated
 * one fails; every 4xx/5xx carries Content-Type: application/json and an OpenAI-style error
 * body; and, when the first request line is malformed, one such error is the whole answer.
 * (Inputs containing "HEAD" are only checked for crashes and hangs: a HEAD response announces
 * a body it does not send.)
 *
 * Built with clang -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt, LS_FUZZ=ON), and next to
 * corpus_runner.c, which replays tests/fuzz/corpus/http/ as the fuzz_http_regression test
 * (tests/fuzz/regression.cmake; the server sources and libmicrohttpd are added by
 * tests/fuzz/regression_request.cmake). Run it with -max_len=16384 or so. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "http_framing.h"
#include "server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the server sent for the current input, shown when a check fails. */
static const char *g_out;
static size_t g_out_len;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_http: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
            if (g_out) fprintf(stderr, "server output (%zu bytes):\n%.*s\n", g_out_len, (int)g_out_len, g_out);        \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

enum { MAX_INPUT = 16 << 10, MAX_OUTPUT = 4 << 20 };

static srv_server g_s;
static bool g_up;

static void stop_server(void) {
    srv_http_stop(&g_s);
}

static void start_server(void) {
    signal(SIGPIPE, SIG_IGN);
    g_s.cfg.host = "127.0.0.1";
    g_s.cfg.port = -1; /* no listening socket: connections come from srv_http_adopt */
    g_s.cfg.parallel = 1;
    g_s.cfg.timeout_s = 5;
    g_s.cfg.header_timeout_s = 5;
    g_s.cfg.queue_cap = 2;
    pthread_mutex_init(&g_s.mu, NULL);
    pthread_cond_init(&g_s.cv, NULL);
    char err[256];
    if (srv_http_start(&g_s, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        abort();
    }
    atexit(stop_server);
    g_up = true;
}

static bool has_token(const char *s, size_t n, const char *t) {
    size_t tn = strlen(t);
    for (size_t i = 0; i + tn <= n; i++)
        if (!memcmp(s + i, t, tn)) return true;
    return false;
}

/* A header field's value in [h, end) (case-insensitive name); NULL if absent. */
static const char *field(const char *h, const char *end, const char *name, size_t *len) {
    size_t nn = strlen(name);
    for (const char *p = h; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        if ((size_t)(eol - p) > nn && !strncasecmp(p, name, nn) && p[nn] == ':') {
            const char *v = p + nn + 1;
            while (v < eol && *v == ' ') v++;
            *len = (size_t)(eol - v) - (eol > v && eol[-1] == '\r');
            return v;
        }
        p = eol + 1;
    }
    return NULL;
}

static void check_error_body(int status, const char *body, size_t n) {
    char *copy = malloc(n + 1);
    CHECK(copy);
    memcpy(copy, body, n);
    copy[n] = 0;
    cJSON *o = cJSON_Parse(copy);
    CHECK(o != NULL);
    cJSON *e = cJSON_GetObjectItem(o, "error");
    if (status == 503 && !e) { /* /health while loading: {"status": "loading model", ...} */
        CHECK(cJSON_IsString(cJSON_GetObjectItem(o, "status")));
    } else {
        CHECK(cJSON_IsObject(e));
        CHECK(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
        CHECK(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    }
    cJSON_Delete(o);
    free(copy);
}

/* Everything the server sent: whole responses only. Returns how many final (non-1xx) ones. */
static int check_output(const char *out, size_t n, bool lenient) {
    size_t pos = 0;
    int finals = 0;
    while (pos < n) {
        const char *r = out + pos;
        size_t left = n - pos;
        CHECK(left >= 13 && !memcmp(r, "HTTP/1.1 ", 9));
        int status = (r[9] - '0') * 100 + (r[10] - '0') * 10 + (r[11] - '0');
        CHECK(status >= 100 && status < 600 && r[12] == ' ');
        const char *hend = NULL;
        for (size_t i = 0; i + 4 <= left; i++)
            if (!memcmp(r + i, "\r\n\r\n", 4)) {
                hend = r + i + 4;
                break;
            }
        CHECK(hend != NULL); /* a whole header block */
        if (status < 200) {  /* 100 Continue: no body */
            pos += (size_t)(hend - r);
            continue;
        }
        finals++;
        if (lenient) return finals; /* a HEAD response has no body: the framing cannot be followed */
        size_t vl = 0;
        CHECK(field(r, hend, "Transfer-Encoding", &vl) == NULL); /* no streams without a model */
        const char *cl = field(r, hend, "Content-Length", &vl);
        CHECK(cl != NULL);
        char num[32];
        CHECK(vl > 0 && vl < sizeof num);
        memcpy(num, cl, vl);
        num[vl] = 0;
        char *endp;
        unsigned long long body_len = strtoull(num, &endp, 10);
        CHECK(*endp == 0);
        size_t hdr_len = (size_t)(hend - r);
        CHECK(body_len <= left - hdr_len); /* the whole body */
        if (status >= 400) {
            const char *ct = field(r, hend, "Content-Type", &vl);
            CHECK(ct && vl >= 16 && !strncmp(ct, "application/json", 16));
            check_error_body(status, hend, (size_t)body_len);
        }
        pos += hdr_len + (size_t)body_len;
    }
    return finals;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > MAX_INPUT) return 0;
    if (!g_up) start_server();
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    int bufsz = 4 * MAX_INPUT;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
    for (size_t off = 0; off < size;) {
        ssize_t w = write(sv[0], data + off, size - off);
        CHECK(w > 0);
        off += (size_t)w;
    }
    shutdown(sv[0], SHUT_WR);
    CHECK(srv_http_adopt(sv[1]) == 0);
    char *out = malloc(MAX_OUTPUT);
    CHECK(out);
    size_t n = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct pollfd pfd = {.fd = sv[0], .events = POLLIN};
        int pr = poll(&pfd, 1, 1000);
        clock_gettime(CLOCK_MONOTONIC, &t);
        CHECK(t.tv_sec - t0.tv_sec < 10);       /* the server answers and closes within 10 s */
        if (pr < 0 && errno == EINTR) continue; /* libFuzzer's -timeout alarm */
        if (pr <= 0) continue;
        ssize_t r = read(sv[0], out + n, MAX_OUTPUT - n);
        if (r == 0) break;
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r < 0) break; /* reset: what came so far is checked */
        n += (size_t)r;
        CHECK(n < MAX_OUTPUT);
    }
    close(sv[0]);
    g_out = out, g_out_len = n;
    bool lenient = has_token((const char *)data, size, "HEAD");
    int finals = check_output(out, n, lenient);
    /* a malformed first request line: exactly one error response (the check's own verdict) */
    ls_http_problem p;
    if (ls_http_check_request_line((const char *)data, size, true, &p) == LS_HTTP_LINE_BAD) {
        CHECK(finals == 1);
        CHECK(n >= 12 && atoi(out + 9) == p.status);
    }
    g_out = NULL;
    free(out);
    return 0;
}
