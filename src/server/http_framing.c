/* HTTP/1.1 framing checks for `lockstep serve` (see http_framing.h). */
#include "http_framing.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static void set(ls_http_problem *p, int status, const char *message, const char *code) {
    p->status = status;
    p->message = message;
    p->code = code;
}

static ls_http_line bad_line(ls_http_problem *p, const char *message) {
    set(p, 400, message, "invalid_request_line");
    return LS_HTTP_LINE_BAD;
}

ls_http_line ls_http_check_request_line(const char *buf, size_t n, bool eof, ls_http_problem *p) {
    static const char version[] = "HTTP/1.1"; /* shape; the digits are checked apart */
    size_t i = 0;
    /* empty lines before the request line: ignored */
    while (i < n && i < LS_HTTP_LINE_MAX) {
        if (buf[i] == '\n')
            i++;
        else if (buf[i] == '\r' && i + 1 < n && buf[i + 1] == '\n')
            i += 2;
        else if (buf[i] == '\r' && i + 1 == n && !eof)
            return LS_HTTP_LINE_MORE; /* maybe the start of an empty line */
        else
            break;
    }
    if (i >= LS_HTTP_LINE_MAX) return bad_line(p, "malformed request line: too many empty lines before it");
    size_t start = i;
    if (start == n) return eof ? LS_HTTP_LINE_EMPTY : LS_HTTP_LINE_MORE;
    /* method SP target SP version [CR] LF, byte by byte: an error is reported as soon as the
     * bytes so far cannot start a valid line */
    enum { METHOD, TARGET, VERSION, CR } state = METHOD;
    size_t field = 0; /* bytes in the current part */
    for (; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (i - start >= LS_HTTP_LINE_MAX) {
            if (state == TARGET) {
                set(p, 414, "the request line is too long (request-target)", "uri_too_long");
                return LS_HTTP_LINE_BAD;
            }
            return bad_line(p, "malformed request line: too long");
        }
        switch (state) {
        case METHOD:
            if (c == ' ') {
                if (!field) return bad_line(p, "malformed request line: no method");
                state = TARGET, field = 0;
            } else if (c == '\r' || c == '\n') {
                return bad_line(p, "malformed request line (expected: METHOD /path HTTP/1.1)");
            } else if (!is_tchar(c)) {
                return bad_line(p, "malformed request line: the method is not a token (expected: METHOD "
                                   "/path HTTP/1.1)");
            } else {
                field++;
            }
            break;
        case TARGET:
            if (c == ' ') {
                if (!field) return bad_line(p, "malformed request line: no request-target (or two spaces)");
                state = VERSION, field = 0;
            } else if (c == '\r' || c == '\n') {
                return bad_line(p, "malformed request line: no HTTP version (expected: METHOD /path HTTP/1.1)");
            } else if (c < 0x21 || c == 0x7F) {
                return bad_line(p, "malformed request line: a control byte or space in the request-target "
                                   "(expected: METHOD /path HTTP/1.1)");
            } else {
                field++;
            }
            break;
        case VERSION:
            if (field == 8) {
                if (c == '\r') {
                    state = CR;
                    break;
                }
                if (c == '\n') goto complete;
                return bad_line(p, "malformed request line: the HTTP version is not HTTP/d.d");
            }
            if ((field == 5 || field == 7) ? (c < '0' || c > '9') : c != (unsigned char)version[field])
                return bad_line(p, "malformed request line (expected: METHOD /path HTTP/1.1; no space in the path)");
            field++;
            break;
        case CR:
            if (c != '\n') return bad_line(p, "malformed request line: a bare CR");
            goto complete;
        }
    }
    if (eof) return bad_line(p, "incomplete request line (the connection was closed)");
    return LS_HTTP_LINE_MORE;
complete : {
    /* buf[i] is the LF; the version is the 8 bytes before it (and its CR) */
    const char *v = buf + i - (state == CR ? 9 : 8);
    if (v[5] != '1') {
        set(p, 505, "HTTP version not supported (use HTTP/1.1)", "http_version_not_supported");
        return LS_HTTP_LINE_BAD;
    }
    return LS_HTTP_LINE_OK;
}
}

/* Transfer-Encoding: the codings of a comma-separated list (empty elements ignored). */
static int check_transfer_encoding(const char *te, ls_http_problem *p) {
    int n = 0, n_chunked = 0;
    bool last_chunked = false;
    for (const char *s = te; *s;) {
        while (*s == ' ' || *s == '\t' || *s == ',') s++;
        if (!*s) break;
        const char *e = s;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
        bool chunked = (size_t)(t - s) == 7 && !strncasecmp(s, "chunked", 7);
        n++;
        n_chunked += chunked;
        last_chunked = chunked;
        s = e;
    }
    if (n == 1 && last_chunked) return 0;
    if (last_chunked && n_chunked == 1) {
        set(p, 501, "unsupported transfer coding (only Transfer-Encoding: chunked is accepted)",
            "unsupported_transfer_encoding");
        return -1;
    }
    set(p, 400,
        n_chunked > 1 ? "malformed Transfer-Encoding: chunked more than once"
                      : "malformed Transfer-Encoding: the body length cannot be determined (chunked must be the "
                        "last coding)",
        "invalid_transfer_encoding");
    return -1;
}

int ls_http_check_fields(const ls_http_fields *f, ls_http_problem *p) {
    if (f->bad_field_name) {
        set(p, 400, "malformed header field name (a token with no space before the colon)", "invalid_header");
        return -1;
    }
    if (f->n_transfer_encoding) {
        if (f->http_minor == 0) {
            set(p, 400, "Transfer-Encoding in an HTTP/1.0 request", "invalid_transfer_encoding");
            return -1;
        }
        if (f->n_content_length) {
            set(p, 400, "both Content-Length and Transfer-Encoding", "invalid_content_length");
            return -1;
        }
        if (check_transfer_encoding(f->transfer_encoding ? f->transfer_encoding : "", p) != 0) return -1;
    }
    if (f->n_content_length > 1) {
        set(p, 400, "more than one Content-Length header", "invalid_content_length");
        return -1;
    }
    if (f->http_minor >= 1 && f->n_host != 1) {
        set(p, 400, f->n_host ? "more than one Host header" : "an HTTP/1.1 request needs a Host header",
            "invalid_host");
        return -1;
    }
    return 0;
}

void ls_http_problem_from_mhd(unsigned status, const char *mhd_body, ls_http_problem *p) {
    const char *b = mhd_body ? mhd_body : "";
    switch (status) {
    case 400:
        if (strstr(b, "Content-Length"))
            set(p, 400, "malformed Content-Length header (it must be a decimal number)", "invalid_content_length");
        else if (strstr(b, "chunked"))
            set(p, 400, "malformed chunked request body", "invalid_chunked_body");
        else if (strstr(b, "Host"))
            set(p, 400, "an HTTP/1.1 request needs a Host header", "invalid_host");
        else
            set(p, 400, "malformed request (request line or header syntax)", "malformed_request");
        return;
    case 413:
        if (strstr(b, "chunk"))
            set(p, 413, "chunk size too large", "request_too_large");
        else
            set(p, 413, "Content-Length too large (limit 8 MiB)", "request_too_large");
        return;
    case 414: set(p, 414, "the request line is too long (request-target)", "uri_too_long"); return;
    case 431: set(p, 431, "request header fields too large", "headers_too_large"); return;
    case 505: set(p, 505, "HTTP version not supported (use HTTP/1.1)", "http_version_not_supported"); return;
    default:
        if (status >= 500 && status < 600)
            set(p, (int)status, "internal error while reading the request", NULL);
        else if (status >= 400 && status < 500)
            set(p, (int)status, "malformed request", "malformed_request");
        else
            set(p, 400, "malformed request", "malformed_request");
    }
}

char *ls_http_error_body(int status, const char *message, const char *param, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = o ? cJSON_AddObjectToObject(o, "error") : NULL;
    char *txt = NULL;
    if (e && cJSON_AddStringToObject(e, "message", message ? message : "error") &&
        cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error") &&
        (param && *param ? cJSON_AddStringToObject(e, "param", param) : cJSON_AddNullToObject(e, "param")) &&
        (code && *code ? cJSON_AddStringToObject(e, "code", code) : cJSON_AddNullToObject(e, "code")))
        txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

size_t ls_http_error_response(const ls_http_problem *p, char *buf, size_t cap) {
    char *body = ls_http_error_body(p->status, p->message, NULL, p->code);
    if (!body) return 0;
    size_t bn = strlen(body);
    int n = snprintf(buf, cap,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: "
                     "close\r\n\r\n%s",
                     p->status, ls_http_reason(p->status), bn, body);
    cJSON_free(body);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

const char *ls_http_reason(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}
