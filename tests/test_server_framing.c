/* HTTP framing checks of `lockstep serve` (src/server/http_framing.c): the request line, the
 * Content-Length / Transfer-Encoding / Host rules, libmicrohttpd's own answers mapped to ours,
 * the raw error response. Pure functions, no model, no sockets (the end-to-end cases are in
 * tests/server/test_hostile.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "server/http_framing.h"

static ls_http_line line(const char *s, bool eof, ls_http_problem *p) {
    return ls_http_check_request_line(s, strlen(s), eof, p);
}

static void test_request_line_valid(void **state) {
    (void)state;
    ls_http_problem p;
    const char *ok[] = {
        "GET /health HTTP/1.1\r\n",
        "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\n\r\n",
        "GET /health HTTP/1.1\n",                    /* a bare LF ends a line (RFC 9112 2.2) */
        "\r\n\r\nGET /health HTTP/1.1\r\n",          /* empty lines before it are ignored */
        "\nGET /x?a=%20b HTTP/1.9\r\n",              /* HTTP/1.x is 1.1-compatible */
        "OPTIONS * HTTP/1.1\r\n",                    /* any target without space or control byte */
        "M-SEARCH http://a:1/\x80\xff HTTP/1.1\r\n", /* a token method; bytes >= 0x80 allowed */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) assert_int_equal(line(ok[i], false, &p), LS_HTTP_LINE_OK);
}

static void test_request_line_incomplete(void **state) {
    (void)state;
    ls_http_problem p;
    const char *more[] = {
        "", "\r", "\r\n", "G", "GARBAGE", "GET ", "GET /x", "GET /x HTTP/1.", "GET /x HTTP/1.1", "GET /x HTTP/1.1\r"};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        assert_int_equal(line(more[i], false, &p), LS_HTTP_LINE_MORE);
        ls_http_line at_eof = line(more[i], true, &p);
        if (!more[i][0] || !strcmp(more[i], "\r\n")) {
            assert_int_equal(at_eof, LS_HTTP_LINE_EMPTY); /* nothing was sent: close quietly */
        } else {
            assert_int_equal(at_eof, LS_HTTP_LINE_BAD); /* a started line cut off: 400 */
            assert_int_equal(p.status, 400);
        }
    }
}

static void test_request_line_bad(void **state) {
    (void)state;
    static const struct {
        const char *line;
        int status;
    } bad[] = {
        {"GARBAGE\r\n\r\n", 400}, /* libmicrohttpd closed these silently */
        {"GET\r\n", 400},
        {"GET /health\r\n", 400},           /* HTTP/0.9: no version */
        {" GET /health HTTP/1.1\r\n", 400}, /* no method */
        {"GET  /health HTTP/1.1\r\n", 400}, /* two spaces */
        {"GET /he alth HTTP/1.1\r\n", 400}, /* a space in the target */
        {"GET /health HTTP/1.1 \r\n", 400},
        {"GET /health FOO\r\n", 400},
        {"GET /health http/1.1\r\n", 400},
        {"GET /health HTTP/1.10\r\n", 400},
        {"GET /health HTTP/1.1\rX\n", 400}, /* a bare CR */
        {"GET /hea\x01lth HTTP/1.1\r\n", 400},
        {"G\x7f /health HTTP/1.1\r\n", 400},
        {"GE(T /health HTTP/1.1\r\n", 400}, /* not a token */
        {"GET /health HTTP/9.9\r\n", 505},
        {"GET /health HTTP/2.0\r\n", 505},
        {"GET /health HTTP/0.9\r\n", 505},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ls_http_problem p = {0};
        assert_int_equal(line(bad[i].line, false, &p), LS_HTTP_LINE_BAD);
        assert_int_equal(p.status, bad[i].status);
        assert_non_null(p.message);
        assert_non_null(p.code);
    }
    /* a NUL inside the line */
    ls_http_problem p;
    assert_int_equal(ls_http_check_request_line("GET /a\0b HTTP/1.1\r\n", 19, false, &p), LS_HTTP_LINE_BAD);
    /* an error shows as soon as the bytes so far cannot start a valid line */
    assert_int_equal(line("GE(", false, &p), LS_HTTP_LINE_BAD);
    assert_int_equal(line("GET /x HTTP/2", false, &p), LS_HTTP_LINE_MORE); /* 505 only once complete */
    assert_int_equal(line("GET /x HTTX", false, &p), LS_HTTP_LINE_BAD);
}

static void test_request_line_limits(void **state) {
    (void)state;
    ls_http_problem p;
    size_t n = 2 * LS_HTTP_LINE_MAX + 4;
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    /* a target longer than the limit: 414 */
    memcpy(buf, "GET /", 5);
    memset(buf + 5, 'a', n - 5);
    assert_int_equal(ls_http_check_request_line(buf, n, false, &p), LS_HTTP_LINE_BAD);
    assert_int_equal(p.status, 414);
    /* a method longer than the limit: 400 */
    memset(buf, 'A', n);
    assert_int_equal(ls_http_check_request_line(buf, n, false, &p), LS_HTTP_LINE_BAD);
    assert_int_equal(p.status, 400);
    /* endless empty lines: 400, never "wait for more" on a full buffer */
    for (size_t i = 0; i + 1 < n; i += 2) buf[i] = '\r', buf[i + 1] = '\n';
    assert_int_equal(ls_http_check_request_line(buf, n, false, &p), LS_HTTP_LINE_BAD);
    /* just under the limit is fine */
    memcpy(buf, "GET /", 5);
    memset(buf + 5, 'a', LS_HTTP_LINE_MAX - 20);
    memcpy(buf + 5 + LS_HTTP_LINE_MAX - 20, " HTTP/1.1\r\n", 11);
    assert_int_equal(ls_http_check_request_line(buf, LS_HTTP_LINE_MAX - 4, false, &p), LS_HTTP_LINE_OK);
    free(buf);
}

static int fields(int minor, int n_cl, int n_te, const char *te, int n_host, ls_http_problem *p) {
    ls_http_fields f = {.http_minor = minor,
                        .n_content_length = n_cl,
                        .n_transfer_encoding = n_te,
                        .transfer_encoding = te,
                        .n_host = n_host};
    memset(p, 0, sizeof *p);
    return ls_http_check_fields(&f, p);
}

static void test_fields(void **state) {
    (void)state;
    ls_http_problem p;
    assert_int_equal(fields(1, 0, 0, NULL, 1, &p), 0);
    assert_int_equal(fields(1, 1, 0, NULL, 1, &p), 0);
    assert_int_equal(fields(0, 1, 0, NULL, 0, &p), 0); /* HTTP/1.0 needs no Host */
    assert_int_equal(fields(1, 0, 1, "chunked", 1, &p), 0);
    assert_int_equal(fields(1, 0, 1, "Chunked", 1, &p), 0);
    assert_int_equal(fields(1, 0, 1, " , chunked ,", 1, &p), 0); /* empty list elements are ignored */
    /* conflicting or duplicated framing: 400 */
    assert_int_equal(fields(1, 2, 0, NULL, 1, &p), -1);
    assert_int_equal(p.status, 400);
    assert_string_equal(p.code, "invalid_content_length");
    assert_int_equal(fields(1, 1, 1, "chunked", 1, &p), -1);
    assert_int_equal(p.status, 400);
    assert_int_equal(fields(0, 0, 1, "chunked", 1, &p), -1); /* Transfer-Encoding in HTTP/1.0 */
    assert_int_equal(p.status, 400);
    assert_int_equal(fields(1, 0, 1, "gzip", 1, &p), -1); /* length unknown */
    assert_int_equal(p.status, 400);
    assert_int_equal(fields(1, 0, 2, "chunked,chunked", 1, &p), -1);
    assert_int_equal(p.status, 400);
    assert_int_equal(fields(1, 0, 1, "chunked, gzip", 1, &p), -1);
    assert_int_equal(p.status, 400);
    assert_int_equal(fields(1, 0, 1, "", 1, &p), -1);
    assert_int_equal(p.status, 400);
    assert_string_equal(p.code, "invalid_transfer_encoding");
    /* a coding we do not implement before a final chunked: 501 */
    assert_int_equal(fields(1, 0, 1, "gzip, chunked", 1, &p), -1);
    assert_int_equal(p.status, 501);
    /* Host: exactly one in HTTP/1.1 */
    assert_int_equal(fields(1, 0, 0, NULL, 0, &p), -1);
    assert_int_equal(p.status, 400);
    assert_int_equal(fields(1, 0, 0, NULL, 2, &p), -1);
    assert_string_equal(p.code, "invalid_host");
    ls_http_fields f = {.http_minor = 1, .n_host = 1, .bad_field_name = true};
    assert_int_equal(ls_http_check_fields(&f, &p), -1);
    assert_string_equal(p.code, "invalid_header");
}

static void test_from_mhd(void **state) {
    (void)state;
    ls_http_problem p;
    ls_http_problem_from_mhd(400, "<html>... wrong value for <b>Content-Length</b> header.</html>", &p);
    assert_int_equal(p.status, 400);
    assert_string_equal(p.code, "invalid_content_length");
    ls_http_problem_from_mhd(413, "<html>... too large value for <b>Content-Length</b> header.</html>", &p);
    assert_int_equal(p.status, 413);
    ls_http_problem_from_mhd(400, "Your HTTP chunked encoding was syntactically incorrect.", &p);
    assert_string_equal(p.code, "invalid_chunked_body");
    ls_http_problem_from_mhd(400, "Your HTTP request was syntactically incorrect.", &p);
    assert_string_equal(p.code, "malformed_request");
    ls_http_problem_from_mhd(431, NULL, &p);
    assert_int_equal(p.status, 431);
    ls_http_problem_from_mhd(414, "", &p);
    assert_int_equal(p.status, 414);
    ls_http_problem_from_mhd(505, "", &p);
    assert_int_equal(p.status, 505);
    ls_http_problem_from_mhd(500, "", &p);
    assert_int_equal(p.status, 500);
    assert_null(p.code);
    ls_http_problem_from_mhd(200, "", &p); /* never an error answer with a success status */
    assert_int_equal(p.status, 400);
}

static void test_error_response(void **state) {
    (void)state;
    ls_http_problem p = {400, "bad \"quoted\" thing", "invalid_request_line"};
    char buf[1024];
    size_t n = ls_http_error_response(&p, buf, sizeof buf);
    assert_true(n > 0 && n < sizeof buf);
    buf[n] = 0;
    assert_true(!strncmp(buf, "HTTP/1.1 400 Bad Request\r\n", 26));
    assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(buf, "\r\nContent-Type: application/json\r\n"));
    const char *body = strstr(buf, "\r\n\r\n") + 4;
    size_t cl = 0;
    assert_int_equal(sscanf(strstr(buf, "Content-Length: "), "Content-Length: %zu", &cl), 1);
    assert_int_equal(cl, strlen(body));
    cJSON *o = cJSON_Parse(body);
    assert_non_null(o);
    cJSON *e = cJSON_GetObjectItem(o, "error");
    assert_string_equal(cJSON_GetObjectItem(e, "message")->valuestring, "bad \"quoted\" thing");
    assert_string_equal(cJSON_GetObjectItem(e, "type")->valuestring, "invalid_request_error");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(e, "param")));
    assert_string_equal(cJSON_GetObjectItem(e, "code")->valuestring, "invalid_request_line");
    cJSON_Delete(o);
    assert_int_equal(ls_http_error_response(&p, buf, 40), 0); /* does not fit: nothing */
    ls_http_problem q = {505, "v", NULL};
    n = ls_http_error_response(&q, buf, sizeof buf);
    buf[n] = 0;
    assert_non_null(strstr(buf, "\"type\":\"server_error\""));
    assert_non_null(strstr(buf, "\"code\":null"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_line_valid),
        cmocka_unit_test(test_request_line_incomplete),
        cmocka_unit_test(test_request_line_bad),
        cmocka_unit_test(test_request_line_limits),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_from_mhd),
        cmocka_unit_test(test_error_response),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
