"""Load test of `lockstep serve` (run by tests/cli_server_load.sh, which starts the server with
--parallel 2 -c 2048 and sets LOCKSTEP_SERVER_URL and LOCKSTEP_SERVER_PID).

8 concurrent clients send 200 requests in total (env LOCKSTEP_LOAD_REQUESTS /
LOCKSTEP_LOAD_CLIENTS): /v1/chat/completions and /v1/completions, streaming and not, half
through the official `openai` client and half through raw http.client / urllib / sockets,
max_tokens 8..24; about 10% of the streaming requests disconnect after their first chunk.
With --parallel 2 the server holds 2 running + 4 queued requests, so 8 clients regularly get
`503` + `Retry-After`: the client waits that long and retries (bounded), and these answers
are counted separately.

Asserted: no 5xx but the queue's 503 (also cross-checked against /metrics); every request
completes or was an intentional disconnect; every response is well-formed (JSON shape, SSE
framing ending in `data: [DONE]`, usage consistent with the prompt, the text and max_tokens,
timings matching usage); requests with equal (prompt, max_tokens, temperature, seed) give
the same text whatever the concurrency or the transport; the server is alive and healthy at
the end; its VmRSS after the load + 2 s idle is within LOCKSTEP_LOAD_RSS_SLACK_MIB (32) of
the warm idle value measured after a warm-up (one request per slot).
"""
import http.client
import json
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import openai
import pytest

URL = os.environ.get("LOCKSTEP_SERVER_URL", "")
PID = int(os.environ.get("LOCKSTEP_SERVER_PID", "0") or 0)
N_REQUESTS = int(os.environ.get("LOCKSTEP_LOAD_REQUESTS", "200"))
N_CLIENTS = int(os.environ.get("LOCKSTEP_LOAD_CLIENTS", "8"))
RSS_SLACK_MIB = float(os.environ.get("LOCKSTEP_LOAD_RSS_SLACK_MIB", "32"))
DEADLINE_S = float(os.environ.get("LOCKSTEP_LOAD_DEADLINE_S", "420"))  # whole load phase
REQ_TIMEOUT_S = float(os.environ.get("LOCKSTEP_LOAD_REQUEST_TIMEOUT_S", "120"))  # one HTTP exchange
MAX_RETRIES = 200  # 503 retries of one request (each waits Retry-After >= 1 s): bounded by DEADLINE_S too
DISCONNECT_FRACTION = 0.10

pytestmark = pytest.mark.skipif(not URL, reason="LOCKSTEP_SERVER_URL not set (run tests/cli_server_load.sh)")

HOST, PORT = (urlparse(URL).hostname, urlparse(URL).port) if URL else ("127.0.0.1", 0)

SYSTEM = "You are a terse assistant."
CHAT_PROMPTS = [
    "Write one sentence about the sea.",
    "Name three colours.",
    "What is the capital of France?",
    "Count from one to five.",
    "Describe a cat in a few words.",
    "Give me a short greeting in Spanish.",
]
COMPLETION_PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "The three most important things about bread are",
    "def fibonacci(n):\n    ",
    "Q: What is 2 + 2?\nA:",
    "The history of the bicycle begins",
    "Dear diary, today I",
]
MAX_TOKENS = (8, 16, 24)
TEMPERATURES = (0.0, 0.8)


# ---- plumbing ------------------------------------------------------------------------------

class Busy(Exception):
    """The server answered 503 (queue full); retry after `delay` seconds."""

    def __init__(self, delay, body):
        super().__init__("503")
        self.delay = delay
        self.body = body


def _retry_after(value):
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return -1.0


def check_busy(status, headers_get, text):
    """Validate a 503 answer and raise Busy; any other non-200 is a failure."""
    if status == 503:
        body = json.loads(text)
        err = body["error"]
        assert err["type"] == "server_error" and err["code"] == "server_busy", body
        delay = _retry_after(headers_get("Retry-After"))
        assert delay >= 1, ("503 without a usable Retry-After", headers_get("Retry-After"))
        raise Busy(delay, body)
    raise AssertionError("HTTP %d: %s" % (status, text[:500]))


def parse_sse(raw):
    """SSE text -> list of payloads (dicts, then the string "[DONE]"); checks the framing."""
    assert raw.endswith("data: [DONE]\n\n"), "stream does not end with data: [DONE]: %r" % raw[-200:]
    events = []
    for block in raw.split("\n\n")[:-1]:
        assert block.startswith("data: "), repr(block[:200])
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    return events


def chat_template(messages):
    """Gemma 3 chat template as rendered by src/tokenizer/chat_template.c (for prompt_tokens)."""
    out, sys_text = "<bos>", None
    for m in messages:
        if m["role"] == "system":
            sys_text = m["content"]
            continue
        out += "<start_of_turn>%s\n" % ("model" if m["role"] == "assistant" else "user")
        if sys_text is not None:
            out += sys_text + "\n\n"
            sys_text = None
        out += m["content"].strip() + "<end_of_turn>\n"
    return out + "<start_of_turn>model\n"


AUX_CALLS = Counter()  # answers to this file's own helper calls, by status (for /metrics deltas)


def http_json(method, path, body=None, timeout=30):
    req = urllib.request.Request(URL + path, data=None if body is None else json.dumps(body).encode(),
                                 method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    AUX_CALLS[status] += 1
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def metrics():
    st, text = http_json("GET", "/metrics")
    assert st == 200
    out = {}
    for name, labels, value in re.findall(r"^(\w+)(\{[^}]*\})? ([0-9.e+-]+)$", text, re.M):
        out[name + (labels or "")] = float(value)
    return out


def status_counts(m):
    return {int(k[len('lockstep_requests_total{status="'):-2]): int(v) for k, v in m.items()
            if k.startswith("lockstep_requests_total{")}


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def wait_idle(timeout=60):
    deadline = time.time() + timeout
    h = None
    while time.time() < deadline:
        st, h = http_json("GET", "/health")
        if st == 200 and h["slots"]["processing"] == 0 and h["queue"]["depth"] == 0:
            return h
        time.sleep(0.1)
    raise AssertionError("server did not become idle: %r" % (h,))


# ---- the request mix -------------------------------------------------------------------------

# transport, endpoint, stream
KINDS = [
    ("openai", "chat", False), ("openai", "chat", True), ("openai", "completion", False),
    ("openai", "completion", True),
    ("httpclient", "chat", False), ("httpclient", "chat", True), ("urllib", "completion", False),
    ("httpclient", "completion", True),
]


def build_plan(n, seed=20261129):
    rng = random.Random(seed)
    plan = []
    for i in range(n):
        transport, endpoint, stream = KINDS[i % len(KINDS)]
        p = rng.randrange(6)
        mt = rng.choice(MAX_TOKENS)
        temp = rng.choice(TEMPERATURES)
        req = {"max_tokens": mt, "temperature": temp, "seed": 1000 + p}
        if endpoint == "chat":
            msgs = [{"role": "user", "content": CHAT_PROMPTS[p]}]
            if p % 3 == 0:
                msgs.insert(0, {"role": "system", "content": SYSTEM})
            req["messages"] = msgs
        else:
            req["prompt"] = COMPLETION_PROMPTS[p]
        if stream and rng.random() < 0.5:
            req["stream_options"] = {"include_usage": True}
        plan.append({"i": i, "transport": transport, "endpoint": endpoint, "stream": stream, "req": req,
                     "disconnect": False})
    streaming = [e for e in plan if e["stream"]]
    k = max(1, round(DISCONNECT_FRACTION * len(streaming))) if streaming else 0
    for e in rng.sample(streaming, k):
        e["disconnect"] = True
        e["req"]["max_tokens"] = 64  # long enough that the server usually notices the close
        if e["transport"] != "openai":
            e["transport"] = "socket"
    return plan


def group_key(e):
    r = e["req"]
    what = json.dumps(r.get("messages") or r.get("prompt"))
    return (e["endpoint"], what, r["max_tokens"], r["temperature"], r["seed"])


# ---- clients ---------------------------------------------------------------------------------

_local = threading.local()


def oai():
    if not hasattr(_local, "client"):  # one client (own connection pool) per client thread
        _local.client = openai.OpenAI(base_url=URL + "/v1", api_key="none", max_retries=0, timeout=REQ_TIMEOUT_S)
    return _local.client


def run_openai(e):
    r = dict(e["req"])
    c = oai()
    try:
        if e["endpoint"] == "chat":
            call = c.chat.completions.create
            args = dict(model="x", messages=r.pop("messages"), **r)
        else:
            call = c.completions.create
            args = dict(model="x", prompt=r.pop("prompt"), **r)
        if not e["stream"]:
            return {"kind": "full", "body": call(**args).model_dump()}
        stream = call(stream=True, **args)
        chunks = []
        try:
            for ch in stream:
                chunks.append(ch.model_dump())
                if e["disconnect"]:
                    break
        finally:
            stream.close()
        if e["disconnect"]:
            assert chunks, "no first chunk before the disconnect"
            return {"kind": "disconnected", "chunks": chunks}
        return {"kind": "stream", "events": chunks + ["[DONE]"], "raw": None}
    except openai.APIStatusError as ex:
        check_busy(ex.status_code, ex.response.headers.get, ex.response.text)


def run_httpclient(e):
    path = "/v1/chat/completions" if e["endpoint"] == "chat" else "/v1/completions"
    body = dict(e["req"], stream=e["stream"])
    conn = http.client.HTTPConnection(HOST, PORT, timeout=REQ_TIMEOUT_S)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode()
        if resp.status != 200:
            check_busy(resp.status, resp.getheader, text)
        ctype = resp.getheader("Content-Type", "")
    finally:
        conn.close()
    if e["stream"]:
        assert ctype.startswith("text/event-stream"), ctype
        return {"kind": "stream", "events": parse_sse(text), "raw": text}
    assert ctype.startswith("application/json"), ctype
    return {"kind": "full", "body": json.loads(text)}


def run_urllib(e):
    path = "/v1/chat/completions" if e["endpoint"] == "chat" else "/v1/completions"
    req = urllib.request.Request(URL + path, data=json.dumps(dict(e["req"], stream=False)).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=REQ_TIMEOUT_S) as r:
            return {"kind": "full", "body": json.loads(r.read().decode())}
    except urllib.error.HTTPError as ex:
        check_busy(ex.code, ex.headers.get, ex.read().decode())


def run_socket_disconnect(e):
    """Raw streaming request; close the socket as soon as the first SSE event arrived."""
    path = "/v1/chat/completions" if e["endpoint"] == "chat" else "/v1/completions"
    payload = json.dumps(dict(e["req"], stream=True)).encode()
    s = socket.create_connection((HOST, PORT), timeout=REQ_TIMEOUT_S)
    try:
        s.sendall(("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % (path, HOST, PORT, len(payload))).encode() + payload)
        buf = b""
        deadline = time.time() + REQ_TIMEOUT_S
        while time.time() < deadline:
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                if head.startswith(b"HTTP/1.1 200"):
                    if b"\n\n" in rest:  # the first SSE event is complete
                        break
                else:
                    m = re.search(rb"(?im)^content-length: *(\d+)", head)
                    if m and len(rest) >= int(m.group(1)):
                        break
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    head, sep, rest = buf.partition(b"\r\n\r\n")
    assert sep, "no response head: %r" % buf[:200]
    status = int(head.split(b" ", 2)[1])
    if status != 200:
        hdrs = {k.lower(): v for k, v in (l.split(": ", 1) for l in head.decode().split("\r\n")[1:] if ": " in l)}
        check_busy(status, lambda k: hdrs.get(k.lower()), rest.decode(errors="replace"))
    assert b"text/event-stream" in head, head
    return {"kind": "disconnected", "raw_first": rest}


RUNNERS = {"openai": run_openai, "httpclient": run_httpclient, "urllib": run_urllib, "socket": run_socket_disconnect}


# ---- validation ------------------------------------------------------------------------------

def check_usage(e, usage, text, finish, expected_prompt, timings=None):
    mt = e["req"]["max_tokens"]
    assert usage["prompt_tokens"] == expected_prompt, (usage, expected_prompt, e)
    c = usage["completion_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + c, usage
    assert 0 <= c <= mt, (usage, mt)
    assert finish in ("stop", "length"), finish
    if finish == "length":
        assert c == mt, (finish, usage, mt)
    if text:
        assert c >= 1, (text, usage)
    if timings is not None:
        assert timings["predicted_n"] == c and timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"], (timings, usage)
    return c


def validate(e, res, expected_prompt):
    """Checks one completed response; returns (text, completion_tokens)."""
    chat = e["endpoint"] == "chat"
    if res["kind"] == "full":
        b = res["body"]
        assert b["object"] == ("chat.completion" if chat else "text_completion"), b
        assert isinstance(b["id"], str) and b["id"].startswith("chatcmpl-" if chat else "cmpl-"), b
        assert isinstance(b["created"], int) and isinstance(b["model"], str) and b["model"], b
        assert len(b["choices"]) == 1 and b["choices"][0]["index"] == 0, b
        ch = b["choices"][0]
        if chat:
            assert ch["message"]["role"] == "assistant" and isinstance(ch["message"]["content"], str), ch
            text = ch["message"]["content"]
        else:
            text = ch["text"]
            assert isinstance(text, str), ch
        timings = b.get("timings") or (b.get("model_extra") or {}).get("timings")
        if timings is None and e["transport"] != "openai":
            raise AssertionError("no timings: %r" % b)
        c = check_usage(e, b["usage"], text, ch["finish_reason"], expected_prompt, timings)
        return text, c

    events = res["events"]
    assert events[-1] == "[DONE]"
    objs = events[:-1]
    assert objs, "empty stream"
    ids = {o["id"] for o in objs}
    assert len(ids) == 1, ids
    want_obj = "chat.completion.chunk" if chat else "text_completion"
    assert all(o["object"] == want_obj for o in objs), [o["object"] for o in objs]
    include_usage = bool(e["req"].get("stream_options", {}).get("include_usage"))
    if include_usage:
        last = objs[-1]
        assert last["choices"] == [] and last.get("usage"), last
        usage, objs = last["usage"], objs[:-1]
    else:
        assert all(not o.get("usage") for o in objs), objs
        usage = None
    assert all(len(o["choices"]) == 1 for o in objs), objs
    finishes = [o["choices"][0]["finish_reason"] for o in objs]
    assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1]), finishes
    if chat:
        assert objs[0]["choices"][0]["delta"].get("role") == "assistant", objs[0]
        parts = [o["choices"][0]["delta"].get("content") or "" for o in objs]
    else:
        parts = [o["choices"][0]["text"] or "" for o in objs]
    text = "".join(parts)
    fin = objs[-1]
    timings = fin.get("timings")
    if timings is None and e["transport"] != "openai":
        raise AssertionError("final chunk without timings: %r" % fin)
    n_content = sum(1 for p in parts if p)
    if usage is None:  # no usage chunk: the final chunk's timings carry the counts
        if timings is None:
            return text, None
        n_prompt = timings["prompt_n"] + timings["cache_n"]
        usage = {"prompt_tokens": n_prompt, "completion_tokens": timings["predicted_n"],
                 "total_tokens": n_prompt + timings["predicted_n"]}
    c = check_usage(e, usage, text, finishes[-1], expected_prompt, timings)
    assert n_content <= c, ("more content chunks than tokens", n_content, usage)
    return text, c


# ---- the test ----------------------------------------------------------------------------------

def expected_prompt_tokens():
    exp = {}
    for p in COMPLETION_PROMPTS:
        st, r = http_json("POST", "/tokenize", {"content": p, "add_special": True, "parse_special": True})
        assert st == 200
        exp[("completion", json.dumps(p))] = len(r["tokens"])
    for p in CHAT_PROMPTS:
        for msgs in ([{"role": "user", "content": p}],
                     [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}]):
            st, r = http_json("POST", "/tokenize", {"content": chat_template(msgs), "add_special": False,
                                                    "parse_special": True})
            assert st == 200
            exp[("chat", json.dumps(msgs))] = len(r["tokens"])
    return exp


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def test_load():
    st, h = http_json("GET", "/health")
    assert st == 200 and h["status"] == "ok", h
    n_slots = h["slots"]["total"]
    exp_prompt = expected_prompt_tokens()

    # Warm-up: one request per slot (concurrently), so each slot's first-use allocations are in.
    def warm(i):
        st, r = http_json("POST", "/v1/completions", {"prompt": COMPLETION_PROMPTS[i % 6], "max_tokens": 8,
                                                      "temperature": 0}, timeout=REQ_TIMEOUT_S)
        assert st == 200, r
    with ThreadPoolExecutor(n_slots) as ex:
        list(ex.map(warm, range(n_slots)))
    wait_idle()
    time.sleep(2)
    rss_idle = vm_rss_kib(PID) if PID else None

    plan = build_plan(N_REQUESTS)
    m0 = metrics()
    AUX_CALLS.clear()
    AUX_CALLS[200] = 1  # the /metrics call above is counted after its own snapshot
    t_start = time.time()
    deadline = t_start + DEADLINE_S
    results = [None] * len(plan)
    lock = threading.Lock()
    stats = Counter()

    def one(e):
        tries = 0
        while True:
            tries += 1
            try:
                t0 = time.time()
                res = RUNNERS[e["transport"]](e)
                res["latency"] = time.time() - t0
                res["tries"] = tries
                results[e["i"]] = res
                return
            except Busy as b:
                with lock:
                    stats["503"] += 1
                if tries >= MAX_RETRIES or time.time() + b.delay > deadline:
                    results[e["i"]] = {"kind": "gave_up", "tries": tries}
                    return
                time.sleep(b.delay)
            except Exception as ex:  # noqa: BLE001 - recorded and asserted below
                results[e["i"]] = {"kind": "error", "error": "%s: %s" % (type(ex).__name__, ex), "tries": tries}
                return

    with ThreadPoolExecutor(N_CLIENTS) as ex:
        list(ex.map(one, plan))
    elapsed = time.time() - t_start

    # -- per-request checks
    failures, texts = [], defaultdict(list)
    gen_tokens = completed = disconnected = 0
    for e, res in zip(plan, results):
        if res is None or res["kind"] in ("error", "gave_up"):
            failures.append((e["i"], e["transport"], e["endpoint"], e["stream"], res))
            continue
        if res["kind"] == "disconnected":
            assert e["disconnect"], (e, res)
            first = res["chunks"][0] if "chunks" in res else json.loads(
                res["raw_first"].split(b"data: ", 1)[1].split(b"\n\n", 1)[0])
            assert first["object"] == ("chat.completion.chunk" if e["endpoint"] == "chat" else "text_completion"), \
                first
            disconnected += 1
            continue
        assert not e["disconnect"]
        key = (e["endpoint"], json.dumps(e["req"].get("messages") or e["req"].get("prompt")))
        try:
            text, c = validate(e, res, exp_prompt[key])
        except AssertionError as ex:
            failures.append((e["i"], e["transport"], e["endpoint"], e["stream"], "invalid: %s" % ex))
            continue
        completed += 1
        gen_tokens += c or 0
        texts[group_key(e)].append((text, e["i"], e["transport"], e["stream"], c))
    assert not failures, "%d failed requests, first ones: %r" % (len(failures), failures[:5])
    assert completed + disconnected == len(plan)
    assert disconnected == sum(e["disconnect"] for e in plan)

    # -- completion_tokens vs the text: re-tokenizing the text must not need more tokens than were
    # generated (+1 for a token that a sampled, non-canonical split may add); special tokens
    # such as <start_of_turn> detokenize to nothing, so fewer is fine.
    retok = Counter()
    for (endpoint, *_), answers in texts.items():
        text, c = answers[0][0], answers[0][4]
        if not text or c is None:
            continue
        st, r = http_json("POST", "/tokenize", {"content": text, "add_special": False, "parse_special": False})
        assert st == 200, r
        n = len(r["tokens"])
        retok[n - c] += 1
        assert n <= c + 1, ("text needs more tokens than completion_tokens", text, c, n)

    # -- the same (prompt, max_tokens, temperature, seed) gives the same text under any load/transport
    mismatched = {k: v for k, v in texts.items() if len({t for t, *_ in v}) > 1}
    assert not mismatched, "different texts for equal requests: %r" % list(mismatched.items())[:2]

    # -- the server's own counters agree with what the clients saw
    wait_idle()
    aux = dict(AUX_CALLS)
    m1 = metrics()
    s0, s1 = status_counts(m0), status_counts(m1)
    delta = {k: s1.get(k, 0) - s0.get(k, 0) for k in set(s0) | set(s1)}
    server_5xx = {k: v for k, v in delta.items() if k >= 500 and v}
    assert set(server_5xx) <= {503}, "5xx other than 503: %r" % server_5xx
    assert delta.get(503, 0) == stats["503"], (delta, stats)
    # 200s: every load request once, plus this file's own /metrics and /health calls
    assert delta.get(200, 0) == len(plan) + aux.get(200, 0), (delta, aux)
    assert not {k: v for k, v in delta.items() if k not in (200, 503) and v}, (delta, aux)
    assert m1["lockstep_generated_tokens_total"] - m0["lockstep_generated_tokens_total"] >= gen_tokens
    cancelled = m1["lockstep_requests_cancelled_total"] - m0["lockstep_requests_cancelled_total"]
    assert cancelled <= disconnected, (cancelled, disconnected)
    assert m1["lockstep_slots_active"] == 0 and m1["lockstep_queue_depth"] == 0

    # -- alive, healthy, memory back to idle
    if PID:
        os.kill(PID, 0)
    st, h = http_json("GET", "/health")
    assert st == 200 and h["status"] == "ok", h
    time.sleep(2)
    rss_after = vm_rss_kib(PID) if PID else None

    lat = sorted(r["latency"] for r in results if r["kind"] != "disconnected")
    retried = sum(1 for r in results if r["tries"] > 1)
    log("\nload: %d requests from %d clients in %.1f s: %d completed, %d disconnected early "
        "(server cancelled %d), 503 answers %d (requests retried: %d, most tries %d)"
        % (len(plan), N_CLIENTS, elapsed, completed, disconnected, cancelled, stats["503"], retried,
           max(r["tries"] for r in results)))
    log("load: %d completion tokens; latency p50 %.2f s, p99 %.2f s; %d distinct request keys, %d with >1 answer"
        % (gen_tokens, lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], len(texts),
           sum(1 for v in texts.values() if len(v) > 1)))
    log("load: status deltas %s; re-tokenized text minus completion_tokens: %s"
        % (dict(sorted(delta.items())), dict(sorted(retok.items()))))
    if PID:
        log("load: VmRSS warm idle %.1f MiB, after load + 2 s idle %.1f MiB (delta %+.1f MiB, limit +%.0f MiB)"
            % (rss_idle / 1024, rss_after / 1024, (rss_after - rss_idle) / 1024, RSS_SLACK_MIB))
        assert rss_after - rss_idle <= RSS_SLACK_MIB * 1024, (rss_idle, rss_after)
