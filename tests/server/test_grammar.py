"""Structured output of `lockstep serve` (docs/structured_output.md), run by
tests/cli_server_grammar.sh (LOCKSTEP_CLI, LOCKSTEP_MODEL).

Four schemas (nested objects, arrays with minItems/maxItems, enums, required and optional
properties, a type list) x 5 prompts = 20 constrained requests at temperature 0, plus 4 at
temperature 0.8 with seeds, through OpenAI's response_format json_schema and llama-server's
top-level json_schema, some streaming, 4 at a time against a server with --parallel 4 (a
shared batch: under load). Every answer must end with finish_reason "stop" and its content
must be JSON valid against its schema (the `jsonschema` package). The same requests against a
server with `--draft ngram` must give byte-identical content. Schemas that cannot be compiled,
a GBNF grammar and malformed response_format values get 400 with an OpenAI-style error naming
the problem, and the server keeps serving.
"""
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

CLI = os.environ["LOCKSTEP_CLI"]
MODEL = os.environ["LOCKSTEP_MODEL"]
MAX_TOKENS = 200

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "city": {"enum": ["Paris", "London", "Tokyo", "Lima"]},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
BOOK = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 24},
        "author": {
            "type": "object",
            "properties": {"first": {"type": "string", "maxLength": 12}, "last": {"type": "string", "maxLength": 12}},
            "required": ["first", "last"],
            "additionalProperties": False,
        },
        "year": {"type": "integer"},
        "genres": {"type": "array", "items": {"enum": ["fiction", "science", "history", "poetry"]}, "maxItems": 2},
    },
    "required": ["title", "author", "year"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 16}, "qty": {"type": "integer"}},
                "required": ["name", "qty"],
                "additionalProperties": False,
            },
        },
        "paid": {"type": "boolean"},
        "total": {"type": "number"},
        "note": {"type": ["string", "null"], "maxLength": 20},
    },
    "required": ["items", "paid"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "unit": {"enum": ["C", "F"]},
        "temps": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
        "sunny": {"type": "boolean"},
    },
    "required": ["city", "unit", "temps", "sunny"],
    "additionalProperties": False,
}
CASES = [
    (PERSON, ["Describe a software engineer from Paris.", "Invent a retired teacher.", "A young painter who loves music.",
              "Tell me about a chef in Tokyo.", "Describe yourself."]),
    (BOOK, ["A classic novel about the sea.", "A science book for children.", "Recommend a history book.",
            "A poetry collection from 1850.", "Your favourite book."]),
    (ORDER, ["Two coffees and a croissant, paid by card.", "An unpaid order of 3 pencils.", "Order a pizza.",
             "A grocery order: apples, milk, bread.", "One laptop, note: gift wrap."]),
    (WEATHER, ["Weather in Oslo today, in Celsius.", "Forecast for Miami in Fahrenheit.", "Is it sunny in Rome?",
               "Temperatures in Cairo this week.", "The weather in London."]),
]


class Server:
    def __init__(self, *args, load_s=120):
        self.log = tempfile.NamedTemporaryFile(prefix="lockstep-grammar-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([CLI, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = None
        deadline = time.monotonic() + load_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "server exited:\n" + self.text()
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.text())
            if m:
                self.url = m.group(1)
                if self.call("GET", "/health")[0] == 200:
                    return
            time.sleep(0.1)
        raise AssertionError("server not healthy in time:\n" + self.text())

    def text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def call(self, method, path, body=None, timeout=120):
        req = urllib.request.Request(self.url + path, data=None if body is None else json.dumps(body).encode(),
                                     method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return None, ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        os.unlink(self.log.name)
        return rc


def requests():
    """(key, body, schema): 20 greedy requests and 4 sampled ones."""
    out = []
    for ci, (schema, prompts) in enumerate(CASES):
        for pi, prompt in enumerate(prompts):
            msgs = [{"role": "system", "content": "Answer with JSON only."}, {"role": "user", "content": prompt}]
            body = {"messages": msgs, "temperature": 0, "max_tokens": MAX_TOKENS}
            if pi == 4:  # llama-server's form
                body["json_schema"] = schema
            else:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": "case%d" % ci, "strict": True, "schema": schema}}
            body["stream"] = pi == 2
            out.append(("c%d-p%d-t0" % (ci, pi), body, schema))
            if pi == 0:
                b = dict(body, temperature=0.8, seed=1000 + 10 * ci + pi, stream=ci % 2 == 1)
                out.append(("c%d-p%d-t08" % (ci, pi), b, schema))
    return out


DRAFTS = {"checked": 0, "accepted": 0}  # over the non-streaming answers


def content_of(status, text, stream):
    """(content, finish_reason) of a chat completion, streaming or not."""
    assert status == 200, (status, text[:500])
    if not stream:
        body = json.loads(text)
        DRAFTS["checked"] += body["timings"]["draft_n_checked"]
        DRAFTS["accepted"] += body["timings"]["draft_n_accepted"]
        ch = body["choices"][0]
        return ch["message"]["content"], ch["finish_reason"]
    parts, finish = [], None
    for block in text.split("\n\n"):
        if not block.startswith("data: ") or block == "data: [DONE]":
            continue
        ch = json.loads(block[6:])["choices"][0]
        parts.append(ch["delta"].get("content") or "")
        finish = ch["finish_reason"] or finish
    return "".join(parts), finish


def run_all(srv, reqs):
    def one(r):
        key, body, schema = r
        st, text = srv.call("POST", "/v1/chat/completions", body)
        return key, content_of(st, text, body["stream"])

    with ThreadPoolExecutor(4) as ex:
        return dict(ex.map(one, reqs))


BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}}}}},
     "response_format.json_schema.schema", "'pattern' at #/properties/a"),
    ({"json_schema": {"$ref": "#/defs/x"}}, "json_schema", "'$ref' at #"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "array", "items": {"oneOf": [{"type": "string"}]}}}}},
     "response_format.json_schema.schema", "'oneOf' at #/items"),
    ({"json_schema": {"type": "string", "format": "email"}}, "json_schema", "'format'"),
    ({"grammar": "root ::= \"yes\""}, "grammar", "GBNF is not supported"),
    ({"response_format": {"type": "xml"}}, "response_format", "json_schema"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "schema is required"),
    ({"json_schema": {"type": ["number", "integer"]}}, "json_schema", "distinct characters"),
]


def test_structured_output():
    reqs = requests()
    assert len(reqs) == 24
    t0 = time.monotonic()
    plain = Server("--parallel", "4", "-c", "4096")
    try:
        for body, param, want in BAD:
            b = dict(body, messages=[{"role": "user", "content": "hi"}], max_tokens=8)
            st, text = plain.call("POST", "/v1/chat/completions", b)
            assert st == 400, (body, st, text)
            err = json.loads(text)["error"]
            assert err["type"] == "invalid_request_error" and err["param"] == param, err
            assert want in err["message"], err
        got = run_all(plain, reqs)
        # json_object: any object (may be cut by max_tokens like OpenAI's; here checked when complete).
        st, text = plain.call("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "A JSON object with your name."}], "temperature": 0,
            "max_tokens": 60, "response_format": {"type": "json_object"}})
        c, fin = content_of(st, text, False)
        assert c.startswith("{") and (fin != "stop" or isinstance(json.loads(c), dict)), (c, fin)
        assert plain.call("GET", "/health")[0] == 200
    finally:
        assert plain.stop() == 0
    t1 = time.monotonic()
    valid, bad = 0, []
    for key, body, schema in reqs:
        content, finish = got[key]
        try:
            assert finish == "stop", "finish_reason %s" % finish
            jsonschema.validate(json.loads(content), schema)
            valid += 1
        except (AssertionError, ValueError, jsonschema.ValidationError) as e:
            bad.append("%s: %s: %r" % (key, str(e)[:200], content))
    assert not bad, "\n".join(bad)
    print("\n%d constrained answers valid against their schemas (%.1f s)" % (valid, t1 - t0))
    for key, _, _ in reqs[:3]:
        print("  %s: %s" % (key, got[key][0]))
    spec = Server("--parallel", "4", "-c", "4096", "--draft", "ngram")
    DRAFTS.update(checked=0, accepted=0)
    try:
        got2 = run_all(spec, reqs)
        assert spec.call("GET", "/health")[0] == 200
    finally:
        assert spec.stop() == 0
    diff = [k for k, _, _ in reqs if got2[k] != got[k]]
    assert not diff, "--draft ngram changed %s: %r vs %r" % (diff, got[diff[0]], got2[diff[0]])
    # the drafter did take part: some drafts were checked, some accepted
    assert DRAFTS["checked"] > 0 and DRAFTS["accepted"] > 0, DRAFTS
    print("--draft ngram: %d answers byte-identical (%.1f s; drafts accepted/checked %d/%d)" %
          (len(reqs), time.monotonic() - t1, DRAFTS["accepted"], DRAFTS["checked"]))
