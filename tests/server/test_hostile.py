"""Hostile clients against `lockstep serve` (run by tests/cli_server_hostile.sh, which starts the
server with the default model: --parallel 2 -c 1024 --api-key KEY --header-timeout 2
--queue-timeout 2, and sets LOCKSTEP_SERVER_URL / LOCKSTEP_SERVER_KEY; under the asan-ubsan
preset that server is the ASan + UBSan build and the script fails on any sanitizer report in
its log). Python standard library and raw sockets only, loopback only; every loop and wait is
bounded. The answers asserted here are the documented ones (docs/server_http.md).

Covered (issue 11; graceful shutdown and --queue-timeout's interplay with --timeout have
their own suite, tests/server/test_shutdown.py):
- HTTP framing: malformed Content-Length (negative, not a number, a list, above 2^64),
  conflicting or repeated Content-Length, Content-Length with Transfer-Encoding, codings other
  than chunked, Transfer-Encoding in HTTP/1.0, bad chunks, malformed request lines (GARBAGE,
  HTTP/0.9, bad versions, spaces and control bytes in the target, too long), malformed header
  lines, Host missing or repeated, oversized headers, and the same on a kept-alive connection
  after a good request: exactly one response, 400 (413 / 414 / 431 / 501 / 505 where stated)
  with a JSON error body, connection closed after it;
- idle connections (500 sockets) do not lock others out; a request that does not arrive within
  --header-timeout is closed, also when its request line, header lines or body are dribbled a
  byte at a time (an absolute deadline, for a kept-alive connection's next request too); a
  queued request past --queue-timeout gets 503;
- a NUL byte in a header value: the documented behaviour (the value is cut, the request served);
- U+0000 in JSON strings (escaped or raw) refused with 400; duplicate JSON keys: the last wins;
- Authorization scheme case-insensitive; HEAD /health; a system-only chat; content: null; a
  10000-deep JSON names the nesting limit;
- the malformed JSON bodies, wrong methods, unknown paths and oversized bodies handled before.
After every case a normal request (/health, an authorized /tokenize) is answered.
"""
import json
import os
import select
import socket
import threading
import time
from urllib.parse import urlparse

import pytest

URL = os.environ.get("LOCKSTEP_SERVER_URL", "")
KEY = os.environ.get("LOCKSTEP_SERVER_KEY", "")
HEADER_TIMEOUT = float(os.environ.get("LOCKSTEP_SERVER_HEADER_TIMEOUT", "2"))
QUEUE_TIMEOUT = float(os.environ.get("LOCKSTEP_SERVER_QUEUE_TIMEOUT", "2"))

pytestmark = pytest.mark.skipif(not URL, reason="LOCKSTEP_SERVER_URL not set (run tests/cli_server_hostile.sh)")

HOST, PORT = (urlparse(URL).hostname, urlparse(URL).port) if URL else ("127.0.0.1", 0)
AUTH = ("Authorization: Bearer %s\r\n" % KEY).encode()
H = b"Host: x\r\n"
TOK = b'{"content":"hi"}'


# ---- raw HTTP ----------------------------------------------------------------------------

def connect(timeout=10):
    return socket.create_connection((HOST, PORT), timeout=timeout)


def exchange(raw, timeout=10):
    """Send raw bytes, read until the server closes. Returns (bytes, closed): closed is False
    when the server kept the connection open for `timeout` seconds."""
    s = connect(timeout)
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before reading everything: read what it sent
        buf = b""
        while True:
            try:
                c = s.recv(65536)
            except socket.timeout:
                return buf, False
            except ConnectionResetError:
                return buf, True
            if not c:
                return buf, True
            buf += c
    finally:
        s.close()


def parse_responses(buf, head=False):
    """Split a byte stream into whole HTTP/1.1 responses [(status, {name: [values]}, body)];
    fails on anything else (a second header block inside a body, a truncated body, junk)."""
    out = []
    while buf:
        assert buf.startswith(b"HTTP/1.1 "), buf[:200]
        hdr, sep, rest = buf.partition(b"\r\n\r\n")
        assert sep, buf[:200]
        lines = hdr.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        fields = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            fields.setdefault(k.strip().lower().decode(), []).append(v.strip().decode())
        if status < 200:
            buf = rest
            continue
        assert "transfer-encoding" not in fields, fields
        assert len(fields.get("content-length", [])) == 1, fields
        n = 0 if head else int(fields["content-length"][0])
        assert len(rest) >= n, (status, fields, rest[:200])
        out.append((status, fields, rest[:n]))
        buf = rest[n:]
    return out


def assert_json_error(resp, status, code=None):
    st, fields, body = resp
    assert st == status, (st, body)
    assert fields.get("content-type", [""])[0].startswith("application/json"), fields
    err = json.loads(body)["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error"), err
    if code is not None:
        assert err["code"] == code, err
    return err


def request(method, path, body=None, headers=b"", auth=True, timeout=60):
    """One request on its own connection (Connection: close). Returns (status, fields, body)."""
    raw = ("%s %s HTTP/1.1\r\n" % (method, path)).encode() + H + (AUTH if auth else b"") + headers
    if body is not None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        raw += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    raw += b"Connection: close\r\n\r\n" + (body or b"")
    buf, closed = exchange(raw, timeout)
    assert closed
    resps = parse_responses(buf, head=method == "HEAD")
    assert len(resps) == 1, resps
    return resps[0]


def post(path, body, **kw):
    return request("POST", path, body, **kw)


def body_json(resp):
    return json.loads(resp[2])


def assert_serving():
    """The normal requests that must work after every hostile case."""
    st, _, body = request("GET", "/health", auth=False, timeout=30)
    assert st == 200 and json.loads(body)["status"] == "ok", body
    st, _, body = post("/tokenize", {"content": "Hello world"}, timeout=30)
    assert st == 200 and json.loads(body)["tokens"], body


# ---- HTTP framing: exactly one JSON error, then the connection is closed ----------------------

def req(line=b"POST /tokenize HTTP/1.1", fields=b"", body=TOK, host=True):
    return line + b"\r\n" + (H if host else b"") + fields + b"\r\n" + body


CHUNKED = b"10\r\n" + TOK + b"\r\n0\r\n\r\n"

FRAMING = [
    # (name, raw request, status, error code)
    ("cl_negative", req(fields=b"Content-Length: -5\r\n"), 400, "invalid_content_length"),
    ("cl_not_a_number", req(fields=b"Content-Length: abc\r\n"), 400, "invalid_content_length"),
    ("cl_plus_sign", req(fields=b"Content-Length: +16\r\n"), 400, "invalid_content_length"),
    ("cl_empty", req(fields=b"Content-Length: \r\n"), 400, "invalid_content_length"),
    ("cl_list", req(fields=b"Content-Length: 16, 16\r\n"), 400, "invalid_content_length"),
    ("cl_above_2_64", req(fields=b"Content-Length: 99999999999999999999999\r\n"), 413, "request_too_large"),
    ("cl_conflicting", req(fields=b"Content-Length: 16\r\nContent-Length: 3\r\n"), 400, "invalid_content_length"),
    ("cl_repeated", req(fields=b"Content-Length: 16\r\nContent-Length: 16\r\n"), 400, "invalid_content_length"),
    ("cl_and_te", req(fields=b"Content-Length: 16\r\nTransfer-Encoding: chunked\r\n", body=CHUNKED), 400,
     "invalid_content_length"),
    ("cl_over_body_limit", req(fields=b"Content-Length: %d\r\n" % (9 << 20)), 413, "request_too_large"),
    ("te_gzip", req(fields=b"Transfer-Encoding: gzip\r\n"), 400, "invalid_transfer_encoding"),
    ("te_chunked_not_last", req(fields=b"Transfer-Encoding: chunked, gzip\r\n", body=CHUNKED), 400,
     "invalid_transfer_encoding"),
    ("te_chunked_twice", req(fields=b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", body=CHUNKED),
     400, "invalid_transfer_encoding"),
    ("te_gzip_then_chunked", req(fields=b"Transfer-Encoding: gzip, chunked\r\n", body=CHUNKED), 501,
     "unsupported_transfer_encoding"),
    ("te_in_http10", req(line=b"POST /tokenize HTTP/1.0", fields=b"Transfer-Encoding: chunked\r\n", body=CHUNKED),
     400, "invalid_transfer_encoding"),
    ("chunk_size_not_hex", req(fields=b"Transfer-Encoding: chunked\r\n", body=b"zz\r\n" + TOK + b"\r\n0\r\n\r\n"),
     400, "invalid_chunked_body"),
    ("chunk_size_huge", req(fields=b"Transfer-Encoding: chunked\r\n",
                            body=b"fffffffffffffffffffff\r\n" + TOK + b"\r\n0\r\n\r\n"), 413, "request_too_large"),
    ("line_garbage", b"GARBAGE\r\n\r\n", 400, "invalid_request_line"),
    ("line_method_only", b"GET\r\n\r\n", 400, "invalid_request_line"),
    ("line_http09", b"GET /health\r\n\r\n", 400, "invalid_request_line"),
    ("line_leading_space", b" GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_two_spaces", b"GET  /health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_space_in_target", b"GET /he alth HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_nul_in_target", b"GET /hea\x00lth HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_ctl_in_target", b"GET /hea\x1blth HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_bad_version", b"GET /health FOO\r\nHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_lowercase_version", b"GET /health http/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_bare_cr", b"GET /health HTTP/1.1\rHost: x\r\n\r\n", 400, "invalid_request_line"),
    ("line_http2", b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"),
    ("line_http99", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"),
    ("line_too_long", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
    ("line_cut_off", b"GET /health HTT", None, None),  # see test_request_line_cut_off
    ("header_no_colon", b"GET /health HTTP/1.1\r\nHost: x\r\nBadHeader\r\n\r\n", 400, "malformed_request"),
    ("header_space_before_colon", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n", 400, "invalid_header"),
    ("header_space_in_name", b"GET /health HTTP/1.1\r\nHost: x\r\nX A: 1\r\n\r\n", 400, "invalid_header"),
    ("header_too_large", b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 40000 + b"\r\n\r\n", 431,
     "headers_too_large"),
    ("host_missing", b"GET /health HTTP/1.1\r\n\r\n", 400, "invalid_host"),
    ("host_twice", b"GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, "invalid_host"),
]


@pytest.mark.parametrize("name,raw,status,code", [c for c in FRAMING if c[2]], ids=[c[0] for c in FRAMING if c[2]])
def test_framing(name, raw, status, code):
    buf, closed = exchange(raw)
    assert closed, (name, buf[:300])
    resps = parse_responses(buf)
    assert len(resps) == 1, (name, resps)
    assert_json_error(resps[0], status, code)
    assert resps[0][1].get("connection") == ["close"], resps[0][1]
    assert_serving()


def test_request_line_cut_off():
    # a started request line and then end of file: 400, connection closed
    s = connect()
    try:
        s.sendall(b"GET /health HTT")
        s.shutdown(socket.SHUT_WR)
        buf = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
    finally:
        s.close()
    resps = parse_responses(buf)
    assert len(resps) == 1
    assert_json_error(resps[0], 400, "invalid_request_line")
    assert_serving()


# The same problems in the second request of a kept-alive connection: the first is answered,
# then the error, then the connection is closed.
GOOD = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
KEEPALIVE = [
    ("cl_not_a_number", GOOD + req(fields=b"Content-Length: abc\r\n"), 400, "invalid_content_length"),
    ("cl_conflicting", GOOD + req(fields=b"Content-Length: 16\r\nContent-Length: 3\r\n"), 400,
     "invalid_content_length"),
    ("te_gzip", GOOD + req(fields=b"Transfer-Encoding: gzip\r\n"), 400, "invalid_transfer_encoding"),
    ("chunk_size_not_hex", GOOD + req(fields=b"Transfer-Encoding: chunked\r\n", body=b"zz\r\n\r\n"), 400,
     "invalid_chunked_body"),
    ("line_bad_version", GOOD + b"GET /health FOO\r\nHost: x\r\n\r\n", 400, "malformed_request"),
    ("line_http2", GOOD + b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"),
    ("header_no_colon", GOOD + b"GET /health HTTP/1.1\r\nHost: x\r\nBadHeader\r\n\r\n", 400, "malformed_request"),
    ("host_missing", GOOD + b"GET /health HTTP/1.1\r\n\r\n", 400, "invalid_host"),
    # libmicrohttpd closes a kept-alive connection whose next request line has no space (or
    # starts with one) without any hook running: no answer, just the close (documented).
    ("line_garbage", GOOD + b"GARBAGE\r\n\r\n", None, None),
]


@pytest.mark.parametrize("name,raw,status,code", KEEPALIVE, ids=[c[0] for c in KEEPALIVE])
def test_framing_after_a_good_request(name, raw, status, code):
    buf, closed = exchange(raw)
    assert closed, (name, buf[-300:])
    resps = parse_responses(buf)
    assert resps[0][0] == 200, resps[0]
    if status is None:
        assert len(resps) == 1, resps
    else:
        assert len(resps) == 2, resps
        assert_json_error(resps[1], status, code)
    assert_serving()


def test_pipelined_and_tolerated():
    # pipelined requests are answered in order; empty lines before a request line, a bare LF
    # and an obsolete folded header line are tolerated (RFC 9112 2.2, 5.2)
    raw = (b"\r\nGET /health HTTP/1.1\nHost: x\n\n" + b"GET /health HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n" +
           b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n\r\n" + CHUNKED +
           b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Connection: close\r\n\r\n")
    buf, closed = exchange(raw)
    assert closed
    resps = parse_responses(buf)
    assert [r[0] for r in resps] == [200, 200, 200, 200], resps
    assert json.loads(resps[2][2])["tokens"]
    assert json.loads(resps[3][2])["object"] == "list"


def test_expect_100_continue():
    s = connect()
    try:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Expect: 100-continue\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(TOK))
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first
        s.sendall(TOK)
        buf = first
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
    finally:
        s.close()
    resps = parse_responses(buf)
    assert len(resps) == 1 and resps[0][0] == 200


# ---- connections: idle, slow, queued --------------------------------------------------------

def test_idle_connections_do_not_lock_out():
    # 500 sockets that each send one byte and then nothing (bounded, loopback only): /health
    # and a normal request must still be answered at once
    socks = []
    try:
        for _ in range(500):
            k = connect()
            k.sendall(b"P")
            socks.append(k)
        t0 = time.time()
        assert request("GET", "/health", auth=False, timeout=10)[0] == 200
        assert time.time() - t0 < 1.0, time.time() - t0
        st, _, body = post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0})
        assert st == 200, body
        assert time.time() - t0 < 30
    finally:
        for k in socks:
            k.close()


@pytest.mark.parametrize("partial", [b"", b"GET /hea", b"GET /health HTTP/1.1\r\nHost: x\r\n"],
                         ids=["nothing", "part_of_the_request_line", "headers_not_ended"])
def test_header_timeout_closes(partial):
    # a request that does not arrive within --header-timeout: closed (no answer)
    s = connect(timeout=HEADER_TIMEOUT + 10)
    t0 = time.time()
    try:
        if partial:
            s.sendall(partial)
        buf = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
    except ConnectionResetError:
        buf = b""
    finally:
        s.close()
    took = time.time() - t0
    assert buf == b"", buf
    assert HEADER_TIMEOUT - 0.5 <= took <= HEADER_TIMEOUT + 4, took
    assert_serving()


def test_request_line_dribble_is_bounded():
    # one byte of the request line every 0.4 s: the connection is still closed at
    # --header-timeout (an absolute deadline for the request line, not an idle timeout)
    s = connect(timeout=HEADER_TIMEOUT + 10)
    t0 = time.time()
    closed = False
    try:
        for ch in b"GET /health HTTP/1.1\r\n"[:-2]:
            try:
                s.sendall(bytes([ch]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.4)
            if time.time() - t0 > HEADER_TIMEOUT + 4:
                break
        if not closed:
            s.settimeout(5)
            try:
                closed = s.recv(65536) == b""
            except ConnectionResetError:
                closed = True
    finally:
        s.close()
    assert closed and time.time() - t0 <= HEADER_TIMEOUT + 5


def _dribble(first, rest, interval=0.4, limit=None):
    """Send `first`, then `rest` one byte every `interval` s (each byte well inside the idle
    timeout) until the server answers or closes. Returns (bytes read, seconds from the first
    byte to the close; None when still open after `limit` s)."""
    limit = HEADER_TIMEOUT + 6 if limit is None else limit
    s = connect(timeout=limit + 5)
    t0 = time.time()
    buf = b""
    try:
        s.sendall(first)
        for ch in rest:
            r, _, _ = select.select([s], [], [], interval)
            if r or time.time() - t0 > limit:
                break
            try:
                s.sendall(bytes([ch]))
            except (BrokenPipeError, ConnectionResetError):
                return buf, time.time() - t0
        s.settimeout(max(0.5, limit - (time.time() - t0)))
        while True:
            try:
                c = s.recv(65536)
            except socket.timeout:
                return buf, None
            except ConnectionResetError:
                return buf, time.time() - t0
            if not c:
                return buf, time.time() - t0
            buf += c
    finally:
        s.close()


DRIBBLE = [
    # (name, sent at once, then one byte at a time, responses before the close)
    ("header_lines", b"GET /health HTTP/1.1\r\n", b"Host: x\r\nX-Slow: " + b"a" * 100, 0),
    ("body", b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Length: 100\r\n\r\n", b"a" * 100, 0),
    ("chunked_body", b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n\r\n",
     b"1\r\na\r\n" * 30, 0),
    ("after_a_good_request", GOOD + b"GET /health HTTP/1.1\r\n", b"Host: x\r\nX-Slow: " + b"a" * 100, 1),
]


@pytest.mark.parametrize("name,first,rest,n_before", DRIBBLE, ids=[c[0] for c in DRIBBLE])
def test_dribbled_request_is_bounded(name, first, rest, n_before):
    # header lines or a body sent one byte every 0.4 s (the idle timeout never fires): the
    # request must still be complete within --header-timeout, else the connection is closed
    # without an answer (docs/server_http.md); a kept-alive connection's next request has
    # --header-timeout from the end of the previous response
    buf, took = _dribble(first, rest)
    assert took is not None, (name, buf[-300:])
    assert took <= HEADER_TIMEOUT + 1.5, (name, took)
    resps = parse_responses(buf)
    assert len(resps) == n_before, (name, resps)
    assert all(r[0] == 200 for r in resps), resps
    assert_serving()


def test_first_request_deadline_counts_from_the_connection():
    # request line and header lines dribbled every 0.05 s: the line is complete after ~1.1 s,
    # but the deadline stays --header-timeout from the connection (not from the line's end)
    buf, took = _dribble(b"", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200, interval=0.05)
    assert buf == b"" and took is not None, buf[-300:]
    assert HEADER_TIMEOUT - 0.5 <= took <= HEADER_TIMEOUT + 0.8, took
    assert_serving()


def test_kept_alive_connection_idle_timeout():
    # after a response the next request has --header-timeout (not --timeout): an idle
    # kept-alive connection is closed quietly
    buf, took = _dribble(GOOD, b"", limit=HEADER_TIMEOUT + 6)
    assert took is not None and took <= HEADER_TIMEOUT + 1.5, took
    assert [r[0] for r in parse_responses(buf)] == [200]


def test_nul_in_header_value():
    # libmicrohttpd keeps header values as C strings: a NUL byte cuts the value there and the
    # rest of the line is dropped (docs/server_http.md says why this is not refused); the
    # request is otherwise served, and the bytes after the NUL never count as a header
    buf, closed = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\nConnection: close\r\n\r\n")
    assert closed
    resps = parse_responses(buf)
    assert len(resps) == 1 and resps[0][0] == 200, resps
    assert_serving()


def _open_stream(body):
    s = connect(timeout=120)
    payload = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + AUTH +
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
    return s


def _health():
    return json.loads(request("GET", "/health", auth=False)[2])


def test_queue_timeout_503():
    # both slots held by long streams: a queued request gets 503 after --queue-timeout
    held = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            h = _health()
            if h["slots"]["processing"] == h["slots"]["total"]:
                break
            if len(held) < 6 and h["slots"]["processing"] + h["queue"]["depth"] < h["slots"]["total"]:
                held.append(_open_stream({"prompt": "Once upon a time", "max_tokens": 1000, "stream": True,
                                          "ignore_eos": True}))
            time.sleep(0.1)
        assert h["slots"]["processing"] == h["slots"]["total"], h
        t0 = time.time()
        st, fields, body = post("/v1/completions", {"prompt": "queued", "max_tokens": 2})
        took = time.time() - t0
        err = assert_json_error((st, fields, body), 503)
        assert "queue" in err["message"] or err["code"], err
        assert QUEUE_TIMEOUT - 0.5 <= took <= QUEUE_TIMEOUT + 5, took
    finally:
        for s in held:
            s.close()
    deadline = time.time() + 30
    while time.time() < deadline and _health()["slots"]["processing"]:
        time.sleep(0.1)
    assert _health()["slots"]["processing"] == 0
    assert_serving()


# ---- request bodies ----------------------------------------------------------------------------

BAD_JSON = [
    # (path, raw body, status, param, code)
    ("/v1/chat/completions", b'{"messages": [', 400, None, "invalid_json"),
    ("/v1/chat/completions", b"", 400, None, "invalid_json"),
    ("/v1/chat/completions", b"[1,2]", 400, None, "invalid_json"),
    ("/v1/chat/completions", b'{"messages": []}', 400, "messages", None),
    ("/v1/chat/completions", b'{"messages": "hi"}', 400, "messages", "invalid_type"),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, "messages[0].role", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 7}]}', 400, "messages[0].content", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": null}]}', 400, "messages[0].content",
     None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400,
     "max_tokens", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}', 400,
     "max_tokens", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000000000}', 400,
     "max_tokens", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "8"}', 400,
     "max_tokens", "invalid_type"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', 400,
     "temperature", "invalid_type"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "top_p": 3}', 400, "top_p", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "n": 2}', 400, "n", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "stop": 5}', 400, "stop", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400,
     "stream", None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400,
     "messages[0].content", "invalid_utf8"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "messages": 5}', 400, "messages",
     None),  # duplicate keys: the last one wins
    ("/v1/completions", b'{"prompt": "\xc0\xaf"}', 400, "prompt", "invalid_utf8"),
    ("/v1/completions", b'{"prompt": ""}', 400, "prompt", None),
    ("/v1/completions", b'{"prompt": 12}', 400, "prompt", "invalid_type"),
    ("/v1/completions", b'{"max_tokens": 4}', 400, "prompt", None),
    ("/v1/completions", b'{"prompt": "a\\u0000b", "max_tokens": 1}', 400, "prompt", None),
    ("/v1/completions", b'{"prompt": "a\x00b", "max_tokens": 1}', 400, None, None),  # a raw NUL byte
    ("/v1/completions", b'{"prompt": "ab", "max_tokens": 1, "stop": ["x\\u0000"]}', 400, None, None),
    ("/v1/completions", b'{"prompt": "ab", "max_tokens": 1, "a\\u0000b": 1}', 400, None, None),  # in a key
    ("/v1/completions", b"[" * 10000 + b"]" * 10000, 400, None, None),
    ("/tokenize", b'{"content": "a\\u0000b c d e"}', 400, "content", None),
    ("/tokenize", b'{"content": 5}', 400, "content", None),
    ("/detokenize", b'{"tokens": [1, "a"]}', 400, "tokens", None),
    ("/detokenize", b'{"tokens": [99999999]}', 400, "tokens", None),
]


@pytest.mark.parametrize("path,raw,status,param,code", BAD_JSON)
def test_malformed_bodies(path, raw, status, param, code):
    err = assert_json_error(post(path, raw), status, code)
    if param is not None:
        assert err["param"] == param, err
    if b"\\u0000" in raw or b"\x00" in raw:
        assert "U+0000" in err["message"], err  # refused, never truncated
    if raw.startswith(b"[" * 100):
        assert "nest" in err["message"], err  # the nesting limit is named
    assert_serving()


def test_duplicate_keys_last_wins():
    st, _, body = post("/tokenize", {"content": "b c"})
    want = json.loads(body)["tokens"]
    st, _, body = post("/tokenize", b'{"content": "a", "content": "b c"}')
    assert st == 200 and json.loads(body)["tokens"] == want
    st, _, body = post("/v1/completions", b'{"prompt": "Once upon a time", "max_tokens": 1, "max_tokens": 3, '
                                          b'"ignore_eos": true, "temperature": 0}')
    assert st == 200 and json.loads(body)["usage"]["completion_tokens"] == 3, body


def test_system_only_chat():
    st, _, body = post("/v1/chat/completions", {"messages": [{"role": "system", "content": "Say hi."}],
                                                "max_tokens": 1})
    assert st == 200, body
    assert json.loads(body)["choices"][0]["message"]["role"] == "assistant"


def test_body_too_large():
    # announced: 413 before reading it (connection closed: the body is not read)
    assert_json_error(post("/v1/completions", None, headers=b"Content-Length: %d\r\n" % (9 << 20)), 413,
                      "request_too_large")
    # chunked (no Content-Length): counted while reading
    s = connect(timeout=60)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n"
                  b"Connection: close\r\n\r\n")
        chunk = b"a" * (1 << 20)
        try:
            for _ in range(9):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
    finally:
        s.close()
    resps = parse_responses(buf)
    assert len(resps) == 1
    assert_json_error(resps[0], 413, "request_too_large")
    assert_serving()


# ---- methods, paths, authorization ----------------------------------------------------------------

def test_paths_methods_and_keys():
    assert_json_error(request("GET", "/v1/nope"), 404, "not_found")
    assert_json_error(request("GET", "/v1/chat/completions"), 405, "method_not_allowed")
    assert_json_error(request("DELETE", "/v1/models"), 405, "method_not_allowed")
    assert_json_error(post("/health", {}), 405, "method_not_allowed")
    # the key: missing or wrong is 401; the scheme is case-insensitive (RFC 9110), the key not
    assert_json_error(request("GET", "/v1/models", auth=False), 401, "invalid_api_key")
    for bad in ("Bearer " + KEY[:-1], "Bearer " + KEY + "x", KEY, "Basic " + KEY, "Bearer " + KEY.upper()):
        resp = request("GET", "/v1/models", auth=False, headers=("Authorization: %s\r\n" % bad).encode())
        assert_json_error(resp, 401, "invalid_api_key")
    for good in ("Bearer " + KEY, "bearer " + KEY, "BEARER  " + KEY):
        st, _, body = request("GET", "/v1/models", auth=False, headers=("Authorization: %s\r\n" % good).encode())
        assert st == 200 and json.loads(body)["object"] == "list", good
    # HEAD /health: the headers of GET, no body, and the connection stays usable
    buf, closed = exchange(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n"
                           b"Connection: close\r\n\r\n")
    assert closed
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    resps = parse_responses(rest)
    assert len(resps) == 1 and resps[0][0] == 200 and json.loads(resps[0][2])["status"] == "ok"
    assert_serving()
