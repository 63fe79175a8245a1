#!/usr/bin/env python3
"""Tool calls through `lockstep serve` (docs/tool_calls.md), run by tests/cli_server_tool_calls.sh.

Starts two servers on the default model (Gemma 3 270M: the ```tool_code prompt convention): a
plain one and a speculative one (--draft ngram --parallel 2), and checks:

  - a tool-using conversation round trip: a request with `tools` and a named `tool_choice`
    gives message.tool_calls (id, type, function name, arguments a JSON object string),
    content null, finish_reason "tool_calls"; the call and its result (role "tool") sent back
    give a final answer; with tool_choice "required" and "auto" too;
  - streaming: the same calls as one delta.tool_calls chunk, finish_reason "tool_calls"; with
    tools offered and a plain answer, the content streams and equals the non-streaming one;
  - the same bytes with and without --draft ngram (every response's `choices`, the call ids'
    request part masked), streaming and not, the speculative server taking them four at a time
    (and accepting drafts);
  - a malformed call (cut by max_tokens) is reported (content, lockstep_tool_call_error), not
    crashed on;
  - bad requests (tools not an array, invalid JSON Schema, a bad or duplicate name, tool_choice
    naming an unknown function or invalid, a tool message without tool_call_id, malformed
    assistant tool_calls) get 400 with an OpenAI-style error, and the server keeps serving;
  - through the official openai client's typed objects, when the package is installed (else
    skipped with a message; the raw-HTTP checks always run).

Standard library only, besides the optional openai package. Exit 0 when everything passed.
"""
import http.client
import json
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
FAILS = []

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The current time in a city",
                                         "parameters": {"type": "object",
                                                        "properties": {"city": {"type": "string"}}}}}
USER = {"role": "user", "content": "What is the weather in Paris?"}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


class Server:
    def __init__(self, name, *args):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"lockstep-tools-{name}.", suffix=".log", delete=False)
        self.proc = subprocess.Popen([CLI, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0",
                                      "-c", "4096", "--timeout", "300", *args],
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
                    if request(self, "GET", "/health")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} server not healthy in {timeout} s:\n{self.text()}")

    def stop(self):
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


def masked(raw):
    """Call ids carry the request id (per server): mask it."""
    return re.sub(r'"call_[0-9a-f]+_(\d+)"', r'"call_X_\1"', raw)


def chat(srv, body):
    """dict(message: {content, tool_calls}, finish, error, raw: the choices' bytes, masked)."""
    st, ctype, text = request(srv, "POST", "/v1/chat/completions", body)
    if not check(st == 200, f"{srv.name}: HTTP {st} {text[:300]}"):
        return None
    if not body.get("stream"):
        j = json.loads(text)
        ch = j["choices"][0]
        raw = text[text.index('"choices":'):text.index(',"usage":')]
        return dict(content=ch["message"].get("content"), tool_calls=ch["message"].get("tool_calls"),
                    finish=ch["finish_reason"], error=ch.get("lockstep_tool_call_error"), raw=masked(raw))
    check(ctype.startswith("text/event-stream") and text.endswith("data: [DONE]\n\n"), f"{srv.name}: stream end")
    content, calls, finish, error, raws, n_call_chunks = None, None, None, None, [], 0
    for block in text.split("\n\n"):
        if not block.startswith("data: {"):
            continue
        j = json.loads(block[6:])
        check("error" not in j, f"{srv.name}: stream error {block[:300]}")
        if not j.get("choices"):
            continue
        ch = j["choices"][0]
        raws.append(masked(json.dumps(ch)))
        d = ch["delta"]
        if d.get("content"):
            content = (content or "") + d["content"]
        if d.get("tool_calls"):
            n_call_chunks += 1
            calls = [{"id": c["id"], "type": c["type"], "function": c["function"]} for c in d["tool_calls"]]
            check([c["index"] for c in d["tool_calls"]] == list(range(len(calls))), f"{srv.name}: indexes")
        finish = ch["finish_reason"] or finish
        error = ch.get("lockstep_tool_call_error", error)
    check(n_call_chunks <= 1, f"{srv.name}: {n_call_chunks} tool_calls chunks")
    return dict(content=content, tool_calls=calls, finish=finish, error=error, raw="\n".join(raws))


def check_call(what, r, name="get_weather"):
    if not r:
        return False
    ok = check(r["finish"] == "tool_calls" and r["content"] is None and bool(r["tool_calls"]), f"{what}: no call: {r}")
    if not ok:
        return False
    c = r["tool_calls"][0]
    ok &= check(c["type"] == "function" and c["function"]["name"] == name and c["id"].startswith("call_"),
                f"{what}: call {c}")
    try:
        ok &= check(isinstance(json.loads(c["function"]["arguments"]), dict), f"{what}: arguments {c}")
    except ValueError:
        ok &= check(False, f"{what}: arguments not JSON: {c}")
    return ok


def conversation():
    """(name, body) of the requests: the turn that calls, and the turn after the result (filled
    in from the plain server's answer)."""
    base = {"messages": [USER], "tools": [WEATHER, TIME], "temperature": 0, "max_tokens": 64, "seed": 3}
    return [
        ("named", dict(base, tool_choice=NAMED)),
        ("required", dict(base, tools=[WEATHER], tool_choice="required")),
        ("required of two", dict(base, tool_choice="required")),
        ("auto", dict(base, tool_choice="auto")),
        ("none", dict(base, tool_choice="none")),
        ("plain question with tools", dict(base, messages=[{"role": "user", "content": "Say hello."}])),
        ("malformed (cut)", dict(base, tool_choice=NAMED, max_tokens=3)),
        ("T 0.8", dict(base, tool_choice=NAMED, temperature=0.8)),
    ]


def follow_up(call_resp):
    call = call_resp["tool_calls"][0]
    return {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": call_resp["tool_calls"]},
                         {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(
                             {"city": "Paris", "temperature_c": 21, "sky": "clear"})}],
            "tools": [WEATHER, TIME], "temperature": 0, "max_tokens": 48}


def test_round_trip(plain, spec):
    reqs = conversation()
    ref = {}
    for name, body in reqs:
        for stream in (False, True):
            ref[(name, stream)] = chat(plain, dict(body, stream=stream))
    for stream in (False, True):
        s = " stream" if stream else ""
        check_call("named" + s, ref[("named", stream)])
        check_call("required" + s, ref[("required", stream)])
        r = ref[("required of two", stream)]  # the model picks the name: a call, or a reported bad one
        check(r and ((r["finish"] == "tool_calls" and r["tool_calls"][0]["function"]["name"] in ("get_weather", "get_time"))
                     or (r["error"] and r["tool_calls"] is None)), f"required of two{s}: {r}")
        r = ref[("none", stream)]
        check(r and r["tool_calls"] is None and r["content"] and r["finish"] in ("stop", "length"), f"none{s}: {r}")
        r = ref[("plain question with tools", stream)]
        check(r and r["finish"] in ("stop", "length", "tool_calls"), f"plain question{s}: {r}")
        r = ref[("malformed (cut)", stream)]
        check(r and r["tool_calls"] is None and r["finish"] == "length" and r["error"] and r["content"],
              f"malformed{s}: {r}")
    for name, _ in reqs:  # streaming gives what the non-streaming response gives
        a, b = ref[(name, False)], ref[(name, True)]
        if a and b:
            strip = lambda calls: [dict(c, id=re.sub(r"call_[0-9a-f]+_", "call_X_", c["id"])) for c in calls or []]
            check((a["content"], strip(a["tool_calls"]), a["finish"], a["error"]) ==
                  (b["content"], strip(b["tool_calls"]), b["finish"], b["error"]),
                  f"{name}: stream differs:\n{a}\n{b}")
    # the result goes back, with the call, for the final answer
    for stream in (False, True):
        r0 = ref[("named", stream)]
        if r0 and r0["tool_calls"]:
            body = follow_up(r0)
            ref[("final", stream)] = r = chat(plain, dict(body, stream=stream))
            check(r and (r["content"] or r["tool_calls"]) and r["finish"] in ("stop", "length", "tool_calls"),
                  f"final answer{' stream' if stream else ''}: {r}")
            reqs.append(("final", body)) if not stream else None
    print("round trip: " + "; ".join(f"{k[0]}{' (stream)' if k[1] else ''}: {v['finish']}"
                                      for k, v in ref.items() if v), flush=True)
    # the same bytes on the speculative server, four requests at a time
    jobs = [(name, stream, body) for name, body in reqs for stream in (False, True)]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda j: chat(spec, dict(j[2], stream=j[1])), jobs))
    same = 0
    for (name, stream, _), g in zip(jobs, got):
        want = ref.get((name, stream))
        if want and g:
            same += check(g["raw"] == want["raw"], f"{name} stream={stream}: --draft ngram differs:\n"
                                                  f"{want['raw'][:600]}\n{g['raw'][:600]}")
    print(f"exactness: {same}/{len(jobs)} responses byte-identical with --draft ngram", flush=True)
    _, _, m = request(spec, "GET", "/metrics")
    acc = re.search(r"^lockstep_spec_accepted_tokens_total (\d+)", m, re.M)
    check(acc and int(acc.group(1)) > 0, "the --draft ngram server accepted no draft token")
    print(f"speculation: {acc.group(1) if acc else '?'} draft tokens accepted on the --draft ngram server", flush=True)
    return ref


def test_errors(srv):
    good = {"messages": [USER], "max_tokens": 2}
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    bad = [
        (dict(good, tools={"type": "function"}), "tools"),
        (dict(good, tools=[{"type": "function", "function": {"description": "x"}}]), "tools[0].function.name"),
        (dict(good, tools=[{"type": "function", "function": {"name": "bad name!"}}]), "tools[0].function.name"),
        (dict(good, tools=[WEATHER, WEATHER]), "tools[1].function.name"),
        (dict(good, tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "strng"}}}]),
         "tools[0].function.parameters"),
        (dict(good, tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "string"}}, "required": "a"}}}]),
         "tools[0].function.parameters"),
        (dict(good, tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": ["a"]}}}]), "tools[0].function.parameters"),
        (dict(good, tools=[{"type": "function", "function": {"name": "f", "parameters": "{}"}}]),
         "tools[0].function.parameters"),
        (dict(good, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_stock"}}),
         "tool_choice"),
        (dict(good, tools=[WEATHER], tool_choice="sometimes"), "tool_choice"),
        (dict(good, tool_choice="required"), "tool_choice"),
        (dict(good, messages=[USER, {"role": "assistant", "tool_calls": [call]},
                              {"role": "tool", "content": "21 C"}]), "messages[2].tool_call_id"),
        (dict(good, messages=[USER, {"role": "assistant", "tool_calls": [call]},
                              {"role": "tool", "tool_call_id": "c9", "content": "21 C"}]), "messages[2].tool_call_id"),
        (dict(good, messages=[USER, {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}]}]),
         "messages[1].tool_calls[0]"),
        (dict(good, messages=[USER, {"role": "assistant", "tool_calls": [{"id": "c1"}]}]),
         "messages[1].tool_calls[0]"),
        (dict(good, messages=[USER, {"role": "assistant", "tool_calls": "c1"}]), "messages[1].tool_calls"),
    ]
    for body in [b for b, _ in bad]:
        body["stream"] = False
    for body, param in bad + [(dict(b, stream=True), p) for b, p in bad[:3]]:
        st, ctype, t = request(srv, "POST", "/v1/chat/completions", body)
        try:
            err = json.loads(t)["error"]
        except (ValueError, KeyError, TypeError):
            err = {}
        check(st == 400 and ctype.startswith("application/json") and err.get("type") == "invalid_request_error"
              and err.get("param") == param and err.get("message") and "code" in err,
              f"{json.dumps(body)[:200]} -> {st} {t[:300]}")
    r = chat(srv, dict(good, tools=[WEATHER], tool_choice=NAMED, max_tokens=64, temperature=0))
    check_call("after the 400s", r)
    check(request(srv, "GET", "/health")[0] == 200, "health after the 400s")
    print(f"errors: {len(bad) + 3} bad requests answered 400 on {srv.name}; it still serves", flush=True)


def test_openai_client(srv, ref):
    try:
        import openai
    except ImportError:
        print("skip: the openai package is not installed: typed-client checks skipped "
              "(pip install openai); the raw-HTTP checks ran", flush=True)
        return
    cl = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none", max_retries=0, timeout=300)
    r = cl.chat.completions.create(model="x", messages=[USER], tools=[WEATHER, TIME], tool_choice=NAMED,
                                   temperature=0, max_tokens=64, seed=3)
    m = r.choices[0].message
    want = ref[("named", False)]
    ok = check(r.choices[0].finish_reason == "tool_calls" and m.content is None and m.tool_calls, f"openai: {r}")
    if not ok:
        return
    tc = m.tool_calls[0]
    check(type(tc).__name__ == "ChatCompletionMessageToolCall" or hasattr(tc, "function"), f"openai: type {type(tc)}")
    check(tc.type == "function" and tc.function.name == "get_weather" and
          tc.function.arguments == want["tool_calls"][0]["function"]["arguments"], f"openai: call {tc}")
    # the typed message goes back as it is, with the tool's result
    r2 = cl.chat.completions.create(model="x", messages=[USER, m, {"role": "tool", "tool_call_id": tc.id,
                                                                   "content": json.dumps({
                                                                       "city": "Paris", "temperature_c": 21,
                                                                       "sky": "clear"})}],
                                    tools=[WEATHER, TIME], temperature=0, max_tokens=48)
    fin = ref.get(("final", False))
    got = (r2.choices[0].message.content, r2.choices[0].finish_reason)
    check(fin is not None and got == (fin["content"], fin["finish"]), f"openai: final answer {got} vs {fin}")
    # streaming: the calls arrive as delta.tool_calls
    calls, finish = {}, None
    for ch in cl.chat.completions.create(model="x", messages=[USER], tools=[WEATHER, TIME], tool_choice=NAMED,
                                         temperature=0, max_tokens=64, seed=3, stream=True):
        if not ch.choices:
            continue
        for d in ch.choices[0].delta.tool_calls or []:
            c = calls.setdefault(d.index, {"name": "", "arguments": ""})
            c["name"] += d.function.name or ""
            c["arguments"] += d.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    check(finish == "tool_calls" and calls.get(0) == {"name": "get_weather", "arguments": tc.function.arguments},
          f"openai stream: {calls} {finish}")
    try:
        cl.chat.completions.create(model="x", messages=[USER], tools=[WEATHER],
                                   tool_choice={"type": "function", "function": {"name": "nope"}})
        check(False, "openai: unknown tool_choice function accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400, f"openai: status {e.status_code}")
    print("openai client: typed tool_calls (plain and streamed), the typed message sent back with a tool "
          "result, BadRequestError on an unknown function", flush=True)


def main():
    if not CLI or not MODEL:
        print("LOCKSTEP_CLI and LOCKSTEP_MODEL must be set", file=sys.stderr)
        return 2
    plain = Server("plain")
    spec = Server("spec", "--draft", "ngram", "--parallel", "2")
    try:
        plain.wait_ready()
        spec.wait_ready()
        ref = test_round_trip(plain, spec)
        test_errors(plain)
        test_errors(spec)
        test_openai_client(plain, ref)
    finally:
        ok = plain.stop()
        ok = spec.stop() and ok
    if FAILS:
        print(f"FAILED: {len(FAILS)} check(s)", flush=True)
        return 1
    print("ok: tool calls", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
