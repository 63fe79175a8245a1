"""End-to-end tests of `lockstep serve` (run by tests/cli_server.sh, which starts the main
server and sets LOCKSTEP_SERVER_URL; extra servers with --draft / --api-key are started here).

Everything is loopback-only, every loop is bounded, and max_tokens stays small so the whole
file runs in a few minutes on 2 cores.
"""
import http.client
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import openai
import pytest

URL = os.environ.get("LOCKSTEP_SERVER_URL", "")
CLI = os.environ.get("LOCKSTEP_CLI", "")
MODEL = os.environ.get("LOCKSTEP_MODEL", "")
CTX = int(os.environ.get("LOCKSTEP_SERVER_CTX", "2048"))
LONG_GEN = min(1500, CTX - 64)  # max_tokens of a generation that runs until the test ends it

pytestmark = pytest.mark.skipif(not URL, reason="LOCKSTEP_SERVER_URL not set (run tests/cli_server.sh)")

STORY = "Once upon a time, in a small village by the sea,"


# ---- helpers ---------------------------------------------------------------------------

def request(method, url, body=None, headers=None, timeout=120, raw=None):
    """Returns (status, headers, parsed JSON or text)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, text = r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        status, hdrs, text = e.code, dict(e.headers), e.read().decode()
    try:
        return status, hdrs, json.loads(text)
    except ValueError:
        return status, hdrs, text


def post(path, body, base=None, **kw):
    return request("POST", (base or URL) + path, body, **kw)


def get(path, base=None, **kw):
    return request("GET", (base or URL) + path, **kw)


def assert_error(status, body, want_status, param=None, code=None):
    assert status == want_status, (status, body)
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] == ("invalid_request_error" if want_status < 500 else "server_error")
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err


def sse_events(base, path, body, headers=None, timeout=120):
    """Raw SSE: returns (status, list of decoded data payloads, raw text)."""
    u = urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        raw = r.read().decode()
        status = r.status
        ctype = r.getheader("Content-Type", "")
    finally:
        conn.close()
    if status != 200:
        return status, [], raw
    assert ctype.startswith("text/event-stream"), ctype
    events = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), repr(block)
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert raw.endswith("data: [DONE]\n\n")
    return status, events, raw


def client(base=None, key="none"):
    return openai.OpenAI(base_url=(base or URL) + "/v1", api_key=key, max_retries=0, timeout=120)


def chat_body(content="Write one sentence about the sea.", **kw):
    b = {"messages": [{"role": "user", "content": content}], "max_tokens": 24}
    b.update(kw)
    return b


def completion_text(base, body):
    st, _, r = post("/v1/completions", body, base=base)
    assert st == 200, r
    return r["choices"][0]["text"], r


def wait_idle(base, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, _, h = get("/health", base=base)
        if st == 200 and h["slots"]["processing"] == 0 and h["queue"]["depth"] == 0:
            return h
        time.sleep(0.1)
    raise AssertionError("server did not become idle: %r" % (h,))


class Server:
    """A `lockstep serve` child on a free loopback port (--port 0); always killed."""

    def __init__(self, *args):
        if not CLI:
            pytest.skip("LOCKSTEP_CLI not set")
        self.log = tempfile.NamedTemporaryFile(prefix="lockstep-serve-", suffix=".log", delete=False)
        cmd = [CLI, "serve", "--host", "127.0.0.1", "--port", "0", "-c", str(CTX), *args]
        if MODEL:
            cmd[2:2] = ["-m", MODEL]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        self.url = None
        deadline = time.time() + 120
        while time.time() < deadline and self.proc.poll() is None:
            with open(self.log.name) as f:
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", f.read())
            if m:
                self.url = m.group(1)
                try:
                    if get("/health", base=self.url, timeout=5)[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError("server did not start: " + open(self.log.name).read())

    def stop(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def logtext(self):
        with open(self.log.name) as f:
            return f.read()


@pytest.fixture(scope="module")
def ngram_server():
    s = Server("--parallel", "4", "--draft", "ngram", "--draft-block-size", "4")
    yield s
    s.stop()
    os.unlink(s.log.name)


@pytest.fixture(scope="module")
def key_server():
    # --shutdown-timeout 2: test_sigterm_cancels_and_exits_zero's stream is cut after 2 s
    s = Server("--parallel", "1", "-t", "1", "--api-key", "s3cret", "--shutdown-timeout", "2")
    yield s
    s.stop()
    os.unlink(s.log.name)


# ---- basic endpoints -------------------------------------------------------------------

def test_health_and_models():
    st, _, h = get("/health")
    assert st == 200 and h["status"] == "ok"
    st, _, body = request("HEAD", URL + "/health")
    assert st == 200 and body == "", (st, body)
    assert h["backend"] and h["model"] and h["slots"]["total"] == 4
    assert h["speculation"]["state"] == "off" and h["speculation"]["drafter"] == "none"
    models = client().models.list()
    assert [m.id for m in models.data] == [h["model"]]


def test_chat_non_streaming_openai_client():
    r = client().chat.completions.create(model="x", messages=[{"role": "system", "content": "Be brief."},
                                                              {"role": "user", "content": "Name a colour."}],
                                         max_tokens=16, temperature=0, seed=3)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 16
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    t = r.model_extra["timings"]
    assert t["prompt_n"] + t["cache_n"] == u.prompt_tokens and t["predicted_n"] == u.completion_tokens
    assert set(t) >= {"prompt_ms", "prompt_per_second", "predicted_ms", "predicted_per_second", "draft_n",
                      "draft_n_accepted"}


def test_chat_streaming_openai_client_matches_non_streaming():
    kw = dict(model="x", messages=[{"role": "user", "content": "Tell me about boats."}], max_tokens=16,
              temperature=0.8, seed=11)
    full = client().chat.completions.create(**kw)
    chunks = list(client().chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == full.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_completion_openai_client_stream_and_not():
    kw = dict(model="x", prompt=STORY, max_tokens=16, temperature=0, seed=1)
    r = client().completions.create(**kw)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"
    text = "".join(c.choices[0].text for c in client().completions.create(stream=True, **kw) if c.choices)
    assert text == r.choices[0].text


def test_raw_sse_shape():
    st, ev, raw = sse_events(URL, "/v1/chat/completions", chat_body(stream=True, max_tokens=8, seed=5,
                                                                     stream_options={"include_usage": True}))
    assert st == 200 and ev[-1] == "[DONE]"
    objs = ev[:-1]
    assert all(o["object"] == "chat.completion.chunk" and o["id"] == objs[0]["id"] for o in objs)
    assert objs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] <= 8
    fin = objs[-2]
    assert fin["choices"][0]["finish_reason"] in ("stop", "length") and "timings" in fin
    # without include_usage there is no usage chunk
    st, ev, _ = sse_events(URL, "/v1/completions", {"prompt": STORY, "max_tokens": 4, "stream": True})
    assert st == 200 and all("usage" not in o for o in ev[:-1])
    assert ev[-2]["choices"][0]["finish_reason"] == "length"


def test_tokenize_detokenize_roundtrip():
    st, _, t = post("/tokenize", {"content": "Hello world"})
    assert st == 200 and t["tokens"] and all(isinstance(i, int) for i in t["tokens"])
    st, _, t2 = post("/tokenize", {"content": "Hello world", "add_special": True})
    assert st == 200 and len(t2["tokens"]) == len(t["tokens"]) + 1
    st, _, d = post("/detokenize", {"tokens": t["tokens"]})
    assert st == 200 and d["content"] == "Hello world"


def test_metrics():
    st, _, text = get("/metrics")
    assert st == 200 and isinstance(text, str)
    for name in ("lockstep_requests_total{status=\"200\"}", "lockstep_prompt_tokens_total",
                 "lockstep_generated_tokens_total", "lockstep_slots_active", "lockstep_queue_depth",
                 "lockstep_spec_drafts_total", "lockstep_spec_draft_tokens_total",
                 "lockstep_spec_accepted_tokens_total", "lockstep_tokens_per_second",
                 "lockstep_batch_steps_total", "lockstep_batch_rows_total", "lockstep_batch_segments_total",
                 "lockstep_batch_max_segments", "lockstep_batch_busy_seconds_total"):
        assert name in text, name


def _metric(name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), get("/metrics")[2], re.M)
    assert m, name
    return float(m.group(1))


def test_decode_steps_batched_across_slots():
    """4 concurrent requests on --parallel 4: forward steps carry several sequences at once
    (the batcher), and every response reports the longest step that served it."""
    wait_idle(URL)
    steps0, segs0 = _metric("lockstep_batch_steps_total"), _metric("lockstep_batch_segments_total")
    bodies = [{"prompt": STORY, "max_tokens": 24 + 8 * i, "temperature": 0, "seed": i, "ignore_eos": True}
              for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda b: post("/v1/completions", b), bodies))
    for st, _, o in outs:
        assert st == 200
        t = o["timings"]
        assert t["max_step_ms"] > 0 and t["predicted_n"] == o["usage"]["completion_tokens"]
    steps, segs = _metric("lockstep_batch_steps_total") - steps0, _metric("lockstep_batch_segments_total") - segs0
    assert _metric("lockstep_batch_max_segments") >= 3
    # 4 sequences of 24..48 tokens: far fewer steps than requests x tokens when batched
    assert segs / steps > 1.5, (steps, segs)


def test_long_prompt_does_not_stall_other_streams():
    """While one request prefills a long prompt (in -b chunks), a stream already running keeps
    getting tokens: its longest gap stays far below the whole prefill's time."""
    wait_idle(URL)
    prompt = (STORY + " ") * 150
    while len(post("/tokenize", {"content": prompt})[2]["tokens"]) > CTX - 64:
        prompt = prompt[: len(prompt) * 3 // 4]
    t0 = time.time()
    # generous timeouts: a ~2000-token prefill under the sanitizers on a loaded 2-core machine
    st, _, o = post("/v1/completions", {"prompt": "Alone: " + prompt, "max_tokens": 1, "temperature": 0},
                    timeout=900)
    full = time.time() - t0
    assert st == 200 and o["usage"]["prompt_tokens"] >= 1000
    s, buf = _open_stream(URL, {"prompt": STORY, "max_tokens": 400, "stream": True, "temperature": 0,
                                "ignore_eos": True})
    stamps = []
    long_done = threading.Event()

    def long_request():
        post("/v1/completions", {"prompt": "Meanwhile: " + prompt, "max_tokens": 1, "temperature": 0}, timeout=900)
        long_done.set()

    th = threading.Thread(target=long_request)
    th.start()
    s.settimeout(300)
    while not long_done.is_set():
        chunk = s.recv(65536)
        if not chunk:
            break
        stamps.append(time.time())
    th.join()
    s.close()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert len(stamps) > 5, stamps
    assert max(gaps) < full / 3, (max(gaps), full)


@pytest.fixture(scope="module")
def single_slot_server():
    s = Server("--parallel", "1")
    yield s
    s.stop()
    os.unlink(s.log.name)


def test_prefix_reuse_is_exact(single_slot_server, ngram_server):
    """A follow-up request that extends the previous one reuses the slot's cache for the
    shared prefix (usage.prompt_tokens_details.cached_tokens, timings.cache_n) and returns
    exactly the text a server with nothing cached returns."""
    base = single_slot_server.url
    first = {"prompt": STORY, "max_tokens": 24, "temperature": 0, "seed": 3}
    st, _, r1 = post("/v1/completions", first, base=base)
    assert st == 200
    n1 = r1["usage"]["prompt_tokens"]
    assert r1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # the same prompt again: all but the last prompt token come from the cache
    st, _, r2 = post("/v1/completions", first, base=base)
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == n1 - 1
    assert r2["timings"]["cache_n"] == n1 - 1 and r2["timings"]["prompt_n"] == 1
    m = re.search(r"^lockstep_prompt_tokens_cached_total (\d+)$", get("/metrics", base=base)[2], re.M)
    assert m and int(m.group(1)) == n1 - 1
    assert r2["choices"][0]["text"] == r1["choices"][0]["text"]
    # a continuation of prompt + answer, at T=0 and T=0.8
    for temp in (0, 0.8):
        follow = {"prompt": STORY + r1["choices"][0]["text"] + " Then", "max_tokens": 24, "temperature": temp,
                  "seed": 11}
        st, _, r3 = post("/v1/completions", follow, base=base)
        assert st == 200
        cached = r3["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= n1, (cached, n1)
        # another server (other slots, drafter on, its own cache state)
        st, _, ref = post("/v1/completions", follow, base=ngram_server.url)
        assert st == 200
        assert r3["choices"][0]["text"] == ref["choices"][0]["text"]


def test_follow_up_lands_on_the_slot_with_its_prefix():
    """--parallel 4, all idle: a follow-up that extends an earlier request is picked up by the
    slot whose cache holds that request (3 conversations in a row; by chance alone 1/64)."""
    for i in range(3):
        wait_idle(URL)
        first = {"prompt": "Conversation %d. %s" % (i, STORY), "max_tokens": 8, "temperature": 0}
        st, _, r1 = post("/v1/completions", first)
        assert st == 200
        wait_idle(URL)
        follow = {"prompt": first["prompt"] + r1["choices"][0]["text"] + " And", "max_tokens": 8,
                  "temperature": 0}
        st, _, r2 = post("/v1/completions", follow)
        assert st == 200
        assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= r1["usage"]["prompt_tokens"], (r1, r2)


def test_disconnect_during_prefill_frees_slot():
    """A client that leaves while its long prompt is being prefilled frees the slot after at
    most one prompt chunk, not after the whole prompt."""
    wait_idle(URL)
    prompt = (STORY + " ") * 150
    n_prompt = post("/tokenize", {"content": prompt})[2]["tokens"]
    while len(n_prompt) > CTX - 64:
        prompt = prompt[: len(prompt) * 3 // 4]
        n_prompt = post("/tokenize", {"content": prompt})[2]["tokens"]
    t0 = time.time()
    # a ~1000-token prefill: minutes under ASan on a loaded 2-core machine (timed out at 120 s there)
    st, _, o = post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0}, timeout=900)
    full = time.time() - t0
    assert st == 200 and o["usage"]["prompt_tokens"] >= 1000, o["usage"]
    before = _metric("lockstep_requests_cancelled_total")
    u = urlparse(URL)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    # a different first word: no prefix of it is in any slot's cache (prefix reuse)
    payload = json.dumps({"prompt": "Again, " + prompt, "max_tokens": 8, "temperature": 0}).encode()
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n" % len(payload)).encode() + payload)
    time.sleep(min(0.3, full / 8))
    s.close()
    t1 = time.time()
    wait_idle(URL, timeout=60)
    freed = time.time() - t1
    assert _metric("lockstep_requests_cancelled_total") == before + 1
    # the whole prefill took `full`; the cancelled one must stop well before that
    assert freed < full / 2, (freed, full)


# ---- stop sequences ----------------------------------------------------------------------

def test_stop_sequences_across_tokens():
    body = {"prompt": STORY, "max_tokens": 24, "temperature": 0, "seed": 1}
    full, _ = completion_text(URL, body)
    assert len(full) > 12
    # a stop string that starts mid-text and (almost surely) spans a token boundary
    stop = full[6:11]
    want = full[:full.index(stop)]
    text, r = completion_text(URL, dict(body, stop=[stop, "\u0001never"]))
    assert text == want and r["choices"][0]["finish_reason"] == "stop"
    st, ev, _ = sse_events(URL, "/v1/completions", dict(body, stop=stop, stream=True))
    assert "".join(o["choices"][0]["text"] for o in ev[:-1] if o["choices"]) == want
    assert ev[-2]["choices"][0]["finish_reason"] == "stop"


# ---- determinism ---------------------------------------------------------------------------

DET_REQUESTS = [
    {"prompt": STORY, "max_tokens": 24, "temperature": 0, "seed": 1},
    {"prompt": STORY, "max_tokens": 24, "temperature": 0.8, "seed": 1234},
]


N_NOISE = 7  # other requests in flight: the servers run --parallel 4 (4 slots + a queue of 8)


def _with_background_load(base, fn):
    """Run fn() while 7 other requests of different lengths are in flight on the same server."""
    stop = threading.Event()

    def noise(i):
        while not stop.is_set():
            post("/v1/completions", {"prompt": "The weather today %d" % i, "max_tokens": 4 + 3 * i,
                                     "temperature": 0.9, "seed": i}, base=base)

    with ThreadPoolExecutor(N_NOISE) as ex:
        futs = [ex.submit(noise, i) for i in range(N_NOISE)]
        time.sleep(0.3)
        try:
            return fn()
        finally:
            stop.set()
            for f in futs:
                f.result()


@pytest.fixture(scope="module")
def reference_texts():
    return [completion_text(URL, b)[0] for b in DET_REQUESTS]


@pytest.mark.parametrize("i", range(len(DET_REQUESTS)))
def test_determinism_under_concurrency(reference_texts, i):
    body = DET_REQUESTS[i]
    assert completion_text(URL, body)[0] == reference_texts[i]
    assert _with_background_load(URL, lambda: completion_text(URL, body)[0]) == reference_texts[i]
    # chat too, alone vs loaded
    cb = chat_body(temperature=body["temperature"], seed=body["seed"], max_tokens=16)
    alone = post("/v1/chat/completions", cb)[2]["choices"][0]["message"]["content"]
    loaded = _with_background_load(URL, lambda: post("/v1/chat/completions", cb)[2])
    assert loaded["choices"][0]["message"]["content"] == alone


@pytest.mark.parametrize("i", range(len(DET_REQUESTS)))
def test_determinism_with_ngram_drafter(ngram_server, reference_texts, i):
    st, _, h = get("/health", base=ngram_server.url)
    assert h["speculation"]["drafter"] == "ngram"
    assert h["speculation"]["state"] in ("passed", "declined"), h
    body = DET_REQUESTS[i]
    text, r = completion_text(ngram_server.url, body)
    assert text == reference_texts[i]  # speculative serving changes no byte
    loaded = _with_background_load(ngram_server.url, lambda: completion_text(ngram_server.url, body)[0])
    assert loaded == reference_texts[i]
    if h["speculation"]["state"] == "passed":
        assert r["timings"]["draft_n"] >= r["timings"]["draft_n_accepted"] >= 0
        st, _, m = get("/metrics", base=ngram_server.url)
        assert re.search(r"^lockstep_spec_requests_total [1-9]", m, re.M), m


# ---- malformed input (the hostile-client cases are in test_hostile.py) -------------------------

def test_prompt_longer_than_context():
    st, _, body = post("/v1/completions", {"prompt": "word " * (CTX + 100), "max_tokens": 4})
    assert_error(st, body, 400, "prompt", "context_length_exceeded")
    st, _, body = post("/v1/completions", {"prompt": STORY, "max_tokens": CTX})
    assert_error(st, body, 400, "max_tokens", "context_length_exceeded")


def test_unknown_fields_ignored():
    st, _, r = post("/v1/completions", {"prompt": STORY, "max_tokens": 1, "logit_bias": {"1": 2}, "user": 5,
                                        "whatever": [None, {"a": 1}]})
    assert st == 200 and r["usage"]["completion_tokens"] == 1


# ---- scheduling and robustness -----------------------------------------------------------

def _open_stream(base, body, headers=None):
    """Start a streaming request; return the socket after the first event arrived."""
    u = urlparse(base)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    payload = json.dumps(body).encode()
    hdr = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
               "Content-Length: %d\r\n\r\n" % (hdr, len(payload))).encode() + payload)
    buf = b""
    while b"data: " not in buf:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return s, buf


def test_client_disconnect_frees_slot():
    wait_idle(URL)
    before = int(re.search(r"^lockstep_requests_cancelled_total (\d+)", get("/metrics")[2], re.M).group(1))
    s, buf = _open_stream(URL, {"prompt": STORY, "max_tokens": LONG_GEN, "stream": True, "temperature": 0.9,
                                "seed": 9})
    assert buf.startswith(b"HTTP/1.1 200")
    st, _, h = get("/health")
    assert h["slots"]["processing"] >= 1
    s.close()
    t0 = time.time()
    wait_idle(URL, timeout=10)
    assert time.time() - t0 < 5
    after = int(re.search(r"^lockstep_requests_cancelled_total (\d+)", get("/metrics")[2], re.M).group(1))
    assert after == before + 1


def test_load_mixed_clients():
    """40 requests from 4 concurrent clients: streaming, non-streaming, early disconnects."""
    wait_idle(URL)

    def one(i):
        kind = i % 4
        if kind == 0:
            st, _, r = post("/v1/completions", {"prompt": "Item %d:" % i, "max_tokens": 8, "seed": i})
            assert st == 200 and r["choices"][0]["finish_reason"] in ("stop", "length"), r
            return st
        if kind == 1:
            st, ev, _ = sse_events(URL, "/v1/chat/completions", chat_body("Count to %d." % i, max_tokens=8,
                                                                          stream=True, seed=i))
            assert st == 200 and ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"]
            return st
        if kind == 2:
            s, buf = _open_stream(URL, {"prompt": "Disconnect %d" % i, "max_tokens": 200, "stream": True})
            s.close()
            st = int(buf.split(b" ", 2)[1])
            assert st == 200, buf[:200]
            return st
        r = client().chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi %d" % i}],
                                             max_tokens=8, seed=i)
        assert r.choices[0].message.content is not None
        return 200

    def server_errors():  # 5xx answers so far (/health's 503 while loading counts too)
        m = get("/metrics")[2]
        return sum(int(n) for n in re.findall(r'^lockstep_requests_total\{status="5\d\d"\} (\d+)', m, re.M))

    errors_before = server_errors()
    with ThreadPoolExecutor(4) as ex:
        statuses = list(ex.map(one, range(40)))
    assert statuses == [200] * 40
    wait_idle(URL, timeout=20)
    assert server_errors() == errors_before
    assert get("/health")[0] == 200


# ---- api key, queue limit, shutdown (own server, --parallel 1) ----------------------------

def test_api_key(key_server):
    base = key_server.url
    assert get("/health", base=base)[0] == 200  # stays open
    st, hdrs, body = get("/v1/models", base=base)
    assert_error(st, body, 401, code="invalid_api_key")
    for bad in ("Bearer s3cre", "Bearer s3cret2", "s3cret", "Bearer S3CRET", "Basic s3cret"):
        st, _, body = get("/v1/models", base=base, headers={"Authorization": bad})
        assert_error(st, body, 401)
    # the scheme is case-insensitive (RFC 9110), the key is not
    for good in ("Bearer s3cret", "bearer s3cret", "BEARER  s3cret"):
        st, _, body = get("/v1/models", base=base, headers={"Authorization": good})
        assert st == 200 and body["object"] == "list", good
    with pytest.raises(openai.AuthenticationError):
        client(base, key="wrong").completions.create(model="x", prompt="a", max_tokens=1)
    r = client(base, key="s3cret").completions.create(model="x", prompt=STORY, max_tokens=2)
    assert r.usage.completion_tokens == 2


def _send_only(base, body, headers=None):
    """Send a request and return the socket without reading the response."""
    u = urlparse(base)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    payload = json.dumps(body).encode()
    hdr = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
               "Content-Length: %d\r\n\r\n" % (hdr, len(payload))).encode() + payload)
    return s


def test_queue_full_503(key_server):
    base = key_server.url
    auth = {"Authorization": "Bearer s3cret"}
    wait_idle(base)

    def count_503():  # /health's 503 while loading counts too
        m = get("/metrics", base=base, headers=auth)[2]
        found = re.search(r'^lockstep_requests_total\{status="503"\} (\d+)$', m, re.M)
        return int(found.group(1)) if found else 0

    before = count_503()
    held = []
    try:
        # 1 slot + 2 queue places: long streams fill them, then one more request gets 503. A
        # held stream may end early (EOS) on a slow (sanitizer) build, so keep topping up until
        # /health shows the slot busy and the queue full.
        deadline = time.time() + 60
        h = None
        while time.time() < deadline:
            h = get("/health", base=base)[2]
            if h["slots"]["processing"] == 1 and h["queue"]["depth"] == 2:
                break
            if h["slots"]["processing"] + h["queue"]["depth"] < 3 and len(held) < 24:
                held.append(_send_only(base, {"prompt": STORY, "max_tokens": 1000, "stream": True}, auth))
            time.sleep(0.2)
        assert h["slots"]["processing"] == 1 and h["queue"]["depth"] == 2, h
        st, hdrs, body = post("/v1/completions", {"prompt": STORY, "max_tokens": 4}, base=base, headers=auth)
        assert_error(st, body, 503, code="server_busy")
        assert int(hdrs.get("Retry-After", "0")) >= 1
    finally:
        for s in held:
            s.close()
    # the running one is cancelled, the queued ones are dropped: all within a few seconds
    wait_idle(base, timeout=10)
    assert count_503() >= before + 1


def test_sigterm_cancels_and_exits_zero(key_server):
    base = key_server.url
    s, buf = _open_stream(base, {"prompt": STORY, "max_tokens": LONG_GEN, "stream": True},
                          {"Authorization": "Bearer s3cret"})
    assert buf.startswith(b"HTTP/1.1 200")
    t0 = time.time()
    rc = key_server.stop(signal.SIGTERM)
    assert rc == 0, key_server.logtext()
    assert time.time() - t0 < 10
    s.settimeout(5)
    rest = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            rest += c
    except OSError:
        pass
    s.close()
    assert "shutting down" in key_server.logtext()
    # Graceful: the running stream ends (after the 2 s grace) with a final chunk and [DONE].
    assert b'"finish_reason":"length"' in buf + rest and b"data: [DONE]" in buf + rest, (buf + rest)[-500:]
