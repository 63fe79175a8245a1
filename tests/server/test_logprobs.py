#!/usr/bin/env python3
"""Logprobs through `lockstep serve` (docs/logprobs.md), run by tests/cli_server_logprobs.sh.

Starts two servers on the default model: a plain one (--parallel 1) and a speculative one
(--draft ngram --parallel 2), sends both the same seeded requests (chat and completions,
streaming and not, T 0 and T 0.8, top 5 alternatives, one with a stop sequence; the
speculative server gets four at a time, so they share its forward steps) and checks:

  - the logprobs JSON is byte-identical between the two servers (the raw bytes of every
    `logprobs` value, not just the parsed numbers), and so is the text;
  - the speculative server accepted drafts (its tokens came from verify rows);
  - the tokens' bytes concatenate to the content, offsets add up, top lists are sorted, at
    T 0 the chosen token is the first alternative, a stream carries the same logprobs as the
    non-streaming response and each chunk the logprobs of its own text;
  - bad values (top_logprobs 21, -1, 2.5, "3"; logprobs non-bool; top_logprobs without
    logprobs; completions logprobs 21, -1, true) get 400 with an OpenAI-style error, and the
    server keeps serving;
  - a generation cut by --timeout has the logprobs of exactly its text;
  - through the official openai client's typed objects, when the package is installed (else
    those checks are skipped with a message; the raw-HTTP checks above always run).

Standard library only, besides the optional openai package. Exit 0 when everything passed.
"""
import http.client
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

CLI = os.environ.get("LOCKSTEP_CLI", "")
MODEL = os.environ.get("LOCKSTEP_MODEL", "")
TOP = 5
MAX_TOKENS = 40

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


# ---- servers -----------------------------------------------------------------------------


class Server:
    def __init__(self, name, *args):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"lockstep-lp-{name}.", suffix=".log", delete=False)
        if "--timeout" not in args:
            args += ("--timeout", "300")
        self.proc = subprocess.Popen([CLI, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0",
                                      "-c", "2048", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None

    def text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=300):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited:\n{self.text()}")
            if self.port is None:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
                if m:
                    self.port = int(m.group(1))
            if self.port is not None:
                try:
                    st, _, body = request(self, "GET", "/health")
                    if st == 200:
                        return json.loads(body)
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} server not healthy in {timeout} s:\n{self.text()}")

    def stop(self):
        """SIGTERM; True when it exited 0 and logged no sanitizer report."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return check(False, f"{self.name} server ignored SIGTERM")
        log = self.text()
        ok = check(self.proc.returncode == 0, f"{self.name} server exit status {self.proc.returncode}")
        ok &= check(not re.search(r"ERROR: (Address|Leak|Thread)Sanitizer|runtime error:", log),
                    f"{self.name} server: sanitizer report:\n{log[-4000:]}")
        os.unlink(self.log.name)
        return ok


def request(srv, method, path, body=None, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, data, {"Content-Type": "application/json"} if data is not None else {})
        r = c.getresponse()
        return r.status, r.getheader("Content-Type", ""), r.read().decode()
    finally:
        c.close()


# ---- raw logprobs ----------------------------------------------------------------------------


def raw_logprobs(text):
    """The raw bytes of choices[0]'s "logprobs" value in a response or chunk printed by the
    server (cJSON, unformatted: the value is followed by ,"finish_reason")."""
    i = text.index(',"logprobs":') + len(',"logprobs":')
    return text[i:text.index(',"finish_reason":', i)]


def run(srv, path, body):
    """Returns dict(text, logprobs (merged over chunks), raw, chunks, timings, finish)."""
    st, ctype, text = request(srv, "POST", path, body)
    if st != 200:
        raise RuntimeError(f"{srv.name} {path}: HTTP {st} {text[:400]}")
    chat = path.endswith("chat/completions")
    if not body.get("stream"):
        j = json.loads(text)
        ch = j["choices"][0]
        return dict(text=ch["message"]["content"] if chat else ch["text"], logprobs=ch["logprobs"],
                    raw=raw_logprobs(text), chunks=None, timings=j["timings"], finish=ch["finish_reason"])
    assert ctype.startswith("text/event-stream"), ctype
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    chunks, raws, timings, finish = [], [], None, None
    for block in text.split("\n\n"):
        if not block or block == "data: [DONE]":
            continue
        assert block.startswith("data: "), block
        payload = block[6:]
        j = json.loads(payload)
        if "error" in j:
            raise RuntimeError(f"{srv.name}: stream error {payload}")
        if not j["choices"]:
            continue
        ch = j["choices"][0]
        piece = ch["delta"].get("content", "") if chat else ch["text"]
        chunks.append((piece or "", ch["logprobs"]))
        raws.append(raw_logprobs(payload))
        timings = j.get("timings", timings)
        finish = ch["finish_reason"] or finish
    merged = None
    if any(lp is not None for _, lp in chunks):
        if chat:
            merged = {"content": [e for _, lp in chunks if lp for e in lp["content"]]}
        else:
            merged = {k: [e for _, lp in chunks if lp for e in lp[k]]
                      for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    return dict(text="".join(p for p, _ in chunks), logprobs=merged, raw="\n".join(raws), chunks=chunks,
                timings=timings, finish=finish)


def token_bytes(tok):
    """A completions token string back to bytes ("bytes:\\xNN..." for a partial UTF-8 token)."""
    if tok.startswith("bytes:"):
        return bytes(int(h, 16) for h in re.findall(r"\\x([0-9a-f]{2})", tok[6:]))
    return tok.encode()


# ---- shape and consistency checks of one response --------------------------------------------


def check_shape(what, r, chat, temp, stop):
    lp = r["logprobs"]
    if not check(isinstance(lp, dict), f"{what}: logprobs missing: {lp!r}"):
        return
    content = r["text"].encode()
    if chat:
        items = lp["content"]
        check(len(items) > 0, f"{what}: no tokens")
        joined = b"".join(bytes(e["bytes"]) for e in items)
        for e in items:
            check(set(e) == {"token", "logprob", "bytes", "top_logprobs"}, f"{what}: keys {sorted(e)}")
            check(isinstance(e["logprob"], float) and e["logprob"] <= 0, f"{what}: logprob {e['logprob']}")
            b = bytes(e["bytes"])
            try:
                check(e["token"] == b.decode(), f"{what}: token {e['token']!r} vs bytes {b!r}")
            except UnicodeDecodeError:
                check(e["token"].startswith("bytes:"), f"{what}: partial token {e['token']!r}")
            tops = e["top_logprobs"]
            check(len(tops) == TOP, f"{what}: {len(tops)} alternatives")
            check(all(set(t) == {"token", "logprob", "bytes"} for t in tops), f"{what}: top keys")
            vals = [t["logprob"] for t in tops]
            check(vals == sorted(vals, reverse=True), f"{what}: top not sorted {vals}")
            check(sum(math.exp(v) for v in vals) <= 1 + 1e-6, f"{what}: top mass {vals}")
            check(e["logprob"] <= vals[0], f"{what}: chosen {e['logprob']} above the best {vals[0]}")
            for t in tops:
                if t["bytes"] == e["bytes"]:
                    check(t["logprob"] == e["logprob"], f"{what}: chosen token's logprob differs in the top list")
            if temp == 0:
                check(tops[0]["bytes"] == e["bytes"] and tops[0]["logprob"] == e["logprob"],
                      f"{what}: greedy token {e['token']!r} is not the first alternative {tops[0]['token']!r}")
    else:
        toks, lps, tops, offs = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]
        check(len(toks) == len(lps) == len(tops) == len(offs) > 0, f"{what}: lengths")
        joined = b"".join(token_bytes(t) for t in toks)
        off = 0
        for i, t in enumerate(toks):
            check(offs[i] == off, f"{what}: text_offset[{i}] {offs[i]} != {off}")
            off += len(token_bytes(t))
            check(isinstance(lps[i], float) and lps[i] <= 0, f"{what}: logprob {lps[i]}")
            vals = list(tops[i].values())
            check(0 < len(vals) <= TOP, f"{what}: {len(vals)} alternatives")
            check(vals == sorted(vals, reverse=True), f"{what}: top not sorted")
            if temp == 0:
                check(vals[0] == lps[i], f"{what}: greedy token is not the first alternative")
    if stop:
        # The token in which the stop sequence starts is kept when it added text before it.
        check(joined.startswith(content) and len(joined) - len(content) < 64,
              f"{what}: tokens {joined!r} vs content {content!r}")
    else:
        check(joined == content, f"{what}: tokens {joined!r} != content {content!r}")
    if r["chunks"] is not None and chat and not stop:
        for piece, clp in r["chunks"]:
            if clp:
                cb = b"".join(bytes(e["bytes"]) for e in clp["content"])
                check(cb == piece.encode(), f"{what}: chunk text {piece!r} vs its tokens {cb!r}")


# ---- the tests --------------------------------------------------------------------------------

CHAT_PROMPT = "Repeat this list three times, exactly: red, green, blue, yellow, red, green, blue, yellow."
STORY = "Repeat exactly: the cat sat on the mat. the cat sat on the mat. the cat sat on the mat."


def cases():
    out = []
    for chat in (True, False):
        for stream in (False, True):
            for temp in (0, 0.8):
                b = {"max_tokens": MAX_TOKENS, "temperature": temp, "seed": 7, "stream": stream}
                if chat:
                    b.update(messages=[{"role": "user", "content": CHAT_PROMPT}], logprobs=True, top_logprobs=TOP)
                else:
                    b.update(prompt=STORY, logprobs=TOP)
                out.append((f"{'chat' if chat else 'completions'} stream={stream} T={temp}", chat, temp, False, b))
        # a stop sequence inside the text (streaming and not must agree)
        for stream in (False, True):
            b = {"max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream, "stop": ["mat"]}
            if chat:
                b.update(messages=[{"role": "user", "content": "Write: the cat sat on the mat."}], logprobs=True,
                         top_logprobs=TOP)
            else:
                b.update(prompt=STORY, logprobs=TOP)
            out.append((f"{'chat' if chat else 'completions'} stream={stream} stop", chat, 0, True, b))
    return out


def test_identical(plain, spec):
    cs = cases()
    path = lambda chat: "/v1/chat/completions" if chat else "/v1/completions"
    ref = [run(plain, path(c[1]), c[4]) for c in cs]
    # Four at a time on the speculative server (2 slots, 2 waiting): shared forward steps.
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda c: run(spec, path(c[1]), c[4]), cs))
    accepted = 0
    for (what, chat, temp, stop, body), a, b in zip(cs, ref, got):
        check(a["raw"] == b["raw"], f"{what}: logprobs bytes differ between plain and --draft ngram:\n"
                                    f"  plain {a['raw'][:300]}\n  spec  {b['raw'][:300]}")
        check(a["logprobs"] == b["logprobs"], f"{what}: parsed logprobs differ")
        check(a["text"] == b["text"], f"{what}: text differs: {a['text']!r} vs {b['text']!r}")
        check(a["finish"] == b["finish"], f"{what}: finish_reason differs")
        check_shape(what + " (plain)", a, chat, temp, stop)
        check_shape(what + " (spec)", b, chat, temp, stop)
        if b["timings"]:
            accepted += b["timings"]["draft_n_accepted"]
    check(accepted > 0, "the --draft ngram server accepted no draft: nothing was verified in blocks")
    # a stream carries the same logprobs as the response (same server, same seed)
    for i, (what, _, _, _, body) in enumerate(cs):
        if body["stream"]:
            j = next(k for k, c in enumerate(cs) if c[4] == dict(body, stream=False))
            check(ref[i]["logprobs"] == ref[j]["logprobs"], f"{what}: stream vs non-stream logprobs differ")
            check(ref[i]["text"] == ref[j]["text"], f"{what}: stream vs non-stream text differs")
    print(f"identical: {len(cs)} requests x 2 servers, logprobs byte-identical, {accepted} drafts accepted",
          flush=True)
    return ref


def test_held_back_tail(srv, ref):
    """A stream whose text ends with the start of a stop sequence (held back in case the rest
    follows) sends that tail, with its tokens' logprobs, when generation ends by length."""
    at = {c[0]: k for k, c in enumerate(cases())}
    for chat in (False, True):
        if chat:
            body = {"messages": [{"role": "user", "content": CHAT_PROMPT}], "logprobs": True, "top_logprobs": TOP}
            text = ref[at["chat stream=False T=0"]]["text"]
        else:
            body = {"prompt": STORY, "logprobs": TOP}
            text = ref[at["completions stream=False T=0"]]["text"]
        body.update(max_tokens=MAX_TOKENS, temperature=0, seed=7, stop=[text[-3:] + "\u0001"])
        path = "/v1/chat/completions" if chat else "/v1/completions"
        a = run(srv, path, dict(body, stream=False))
        b = run(srv, path, dict(body, stream=True))
        check(a["text"] == text, f"held-back tail: non-stream text {a['text'][-20:]!r} vs {text[-20:]!r}")
        check(b["text"] == text, f"held-back tail (chat={chat}): stream text ends {b['text'][-20:]!r}, "
                                 f"want {text[-20:]!r}")
        check(a["logprobs"] == b["logprobs"], f"held-back tail (chat={chat}): stream logprobs differ")
    print("held-back tail: streams send the text a stop prefix held back, with its logprobs", flush=True)


def test_deadline(srv):
    """A generation cut by --timeout (1 s here) ends with finish_reason "length"; the token being
    computed when the deadline passed is the last one, in both the text and the logprobs (it is
    counted in usage). So every response has text, even one that reached its deadline before its
    first token on a loaded machine."""
    nonempty = 0
    for chat in (False, True):
        for stream in (False, True):
            body = {"max_tokens": 1500, "temperature": 0.8, "seed": 3, "stream": stream, "ignore_eos": True}
            if chat:
                body.update(messages=[{"role": "user", "content": "Tell a long story."}], logprobs=True,
                            top_logprobs=1)
            else:
                body.update(prompt=STORY, logprobs=1)
            r = run(srv, "/v1/chat/completions" if chat else "/v1/completions", body)
            what = f"deadline chat={chat} stream={stream}"
            check(r["finish"] == "length", f"{what}: finish_reason {r['finish']}")
            if chat:
                joined = b"".join(bytes(e["bytes"]) for e in r["logprobs"]["content"])
            else:
                joined = b"".join(token_bytes(t) for t in r["logprobs"]["tokens"])
            check(joined == r["text"].encode(),
                  f"{what}: tokens {joined[-40:]!r} vs content {r['text'].encode()[-40:]!r}")
            n_lp = len(r["logprobs"]["content"] if chat else r["logprobs"]["tokens"])
            check(n_lp == r["timings"]["predicted_n"],
                  f"{what}: {n_lp} tokens in the logprobs, {r['timings']['predicted_n']} counted")
            nonempty += len(joined) > 0
    check(nonempty == 4, f"deadline: {4 - nonempty} of 4 responses have no text (the deadline dropped a token)")
    print("deadline: a generation cut by --timeout has the logprobs of exactly its text", flush=True)


def test_absent(srv):
    st, _, t = request(srv, "POST", "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    check(st == 200 and json.loads(t)["choices"][0]["logprobs"] is None, f"logprobs not asked: {t[:300]}")
    st, _, t = request(srv, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 3, "stream": True})
    evs = [json.loads(b[6:]) for b in t.split("\n\n") if b.startswith("data: {")]
    check(st == 200 and all(e["choices"][0]["logprobs"] is None for e in evs if e["choices"]),
          "stream without logprobs carries logprobs")


def test_errors(srv):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    bad = [
        ("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=21), "top_logprobs"),
        ("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=-1), "top_logprobs"),
        ("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=2.5), "top_logprobs"),
        ("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs="3"), "top_logprobs"),
        ("/v1/chat/completions", dict(chat, top_logprobs=3), "top_logprobs"),
        ("/v1/chat/completions", dict(chat, logprobs="yes"), "logprobs"),
        ("/v1/chat/completions", dict(chat, logprobs=1), "logprobs"),
        ("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=21, stream=True), "top_logprobs"),
        ("/v1/completions", {"prompt": "hi", "logprobs": 21}, "logprobs"),
        ("/v1/completions", {"prompt": "hi", "logprobs": -1}, "logprobs"),
        ("/v1/completions", {"prompt": "hi", "logprobs": True}, "logprobs"),
        ("/v1/completions", {"prompt": "hi", "logprobs": 2.5}, "logprobs"),
    ]
    for path, body, param in bad:
        st, ctype, t = request(srv, "POST", path, body)
        try:
            err = json.loads(t)["error"]
        except (ValueError, KeyError, TypeError):
            err = {}
        check(st == 400 and ctype.startswith("application/json") and err.get("type") == "invalid_request_error"
              and err.get("param") == param and err.get("message") and "code" in err,
              f"{path} {json.dumps(body)} -> {st} {t[:300]}")
    st, _, t = request(srv, "POST", "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=20))
    ok = st == 200 and len(json.loads(t)["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 20
    check(ok, f"after the 400s: {st} {t[:300]}")
    check(request(srv, "GET", "/health")[0] == 200, "health after the 400s")
    print(f"errors: {len(bad)} bad requests answered 400 on {srv.name}; it still serves", flush=True)


def test_openai_client(plain, ref):
    try:
        import openai
    except ImportError:
        print("skip: the openai package is not installed: typed-client checks skipped "
              "(pip install openai); the raw-HTTP checks ran", flush=True)
        return
    cl = openai.OpenAI(base_url=f"http://127.0.0.1:{plain.port}/v1", api_key="none", max_retries=0, timeout=300)
    cs = cases()
    at = {c[0]: i for i, c in enumerate(cs)}
    # chat, non-streaming, T 0 and T 0.8 seeded
    for i in (at["chat stream=False T=0"], at["chat stream=False T=0.8"]):
        what, _, temp, _, body = cs[i]
        r = cl.chat.completions.create(model="x", messages=body["messages"], max_tokens=MAX_TOKENS, temperature=temp,
                                       seed=7, logprobs=True, top_logprobs=TOP)
        content = r.choices[0].logprobs.content
        want = ref[i]["logprobs"]["content"]
        check(len(content) == len(want), f"openai {what}: {len(content)} tokens vs {len(want)}")
        for e, w in zip(content, want):
            check(e.token == w["token"] and e.logprob == w["logprob"] and e.bytes == w["bytes"],
                  f"openai {what}: {e.token!r} {e.logprob} vs {w['token']!r} {w['logprob']}")
            check([(t.token, t.logprob, t.bytes) for t in e.top_logprobs] ==
                  [(t["token"], t["logprob"], t["bytes"]) for t in w["top_logprobs"]], f"openai {what}: top")
        check(r.choices[0].message.content == ref[i]["text"], f"openai {what}: text")
    # chat, streaming T 0
    i = at["chat stream=True T=0"]
    what, _, _, _, body = cs[i]
    got = []
    for ch in cl.chat.completions.create(model="x", messages=body["messages"], max_tokens=MAX_TOKENS, temperature=0,
                                         seed=7, logprobs=True, top_logprobs=TOP, stream=True):
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            got += [(e.token, e.logprob, e.bytes) for e in ch.choices[0].logprobs.content]
    want = [(e["token"], e["logprob"], e["bytes"]) for e in ref[i]["logprobs"]["content"]]
    check(got == want, f"openai {what}: streamed logprobs differ")
    # completions, non-streaming T 0
    i = at["completions stream=False T=0"]
    what, _, _, _, body = cs[i]
    r = cl.completions.create(model="x", prompt=body["prompt"], max_tokens=MAX_TOKENS, temperature=0, seed=7,
                              logprobs=TOP)
    lp, want = r.choices[0].logprobs, ref[i]["logprobs"]
    check(lp.tokens == want["tokens"] and lp.token_logprobs == want["token_logprobs"] and
          lp.text_offset == want["text_offset"] and lp.top_logprobs == want["top_logprobs"],
          f"openai {what}: logprobs differ")
    check(r.choices[0].text == ref[i]["text"], f"openai {what}: text")
    # a 400 is a BadRequestError
    try:
        cl.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                   logprobs=True, top_logprobs=21)
        check(False, "openai: top_logprobs 21 accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400, f"openai: status {e.status_code}")
    print("openai client: chat (T 0, T 0.8, stream) and completions logprobs match the raw responses; "
          "top_logprobs 21 raises BadRequestError", flush=True)


def main():
    if not CLI or not MODEL:
        print("LOCKSTEP_CLI and LOCKSTEP_MODEL must be set", file=sys.stderr)
        return 2
    plain = Server("plain", "--parallel", "1", "-t", "1")
    spec = Server("spec", "--parallel", "2", "-t", "1", "--draft", "ngram")
    short = Server("short", "--parallel", "1", "-t", "1", "--timeout", "1")
    ok = True
    try:
        plain.wait_ready()
        short.wait_ready()
        h = spec.wait_ready()
        check(h.get("speculation", {}).get("state") == "passed", f"spec server: speculation {h.get('speculation')}")
        ref = test_identical(plain, spec)
        test_held_back_tail(plain, ref)
        test_deadline(short)
        test_absent(spec)
        test_errors(spec)
        test_errors(plain)
        test_openai_client(plain, ref)
    except Exception as e:  # a crash is a failure, with the servers' logs
        check(False, f"{type(e).__name__}: {e}")
        for s in (plain, spec, short):
            print(f"--- {s.name} server log (tail) ---\n{s.text()[-3000:]}")
    finally:
        for s in (plain, spec, short):
            ok &= s.stop()
    if FAILS or not ok:
        print(f"{len(FAILS)} check(s) failed")
        return 1
    print("all logprobs checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
