#!/usr/bin/env python3
"""Golden renderings of tool use in the Gemma 4 chat template, for tests/test_tool_calls.c.

The template is the real one: the `tokenizer.chat_template` of llama.cpp's Gemma 4 vocab GGUF
(tests/data/tokenizer_bpe/ggml-vocab-gemma-4.gguf.xz), rendered by jinja2 like
tools/gen_chat_template_golden.py does (sandboxed, trim_blocks, lstrip_blocks, bos "<bos>",
add_generation_prompt, thinking off). Each case is an OpenAI-style chat request; it is given to
the template the way docs/tool_calls.md section 3 says lockstep does: `arguments` strings
parsed into objects, tool messages folded into the assistant message whose call they answer
as `tool_responses` ({"name", "response"}: the content parsed when it is a JSON object, else the
string).

Output: tests/data/tokenizer_bpe/chat4_tools_golden.txt
  "case NAME" / "request HEX" (the request JSON) / "expect HEX"

Usage (from the repository root): python3 tools/gen_tool_call_golden.py
Reference versions: Jinja2 3.1.6.
"""
import json
import lzma
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "Limit": {"type": "integer", "description": "How many", "nullable": True},
        "filters": {"type": "object", "description": "Filters", "properties": {
            "site": {"type": "string"}, "after": {"type": "string", "description": "date"}},
            "required": ["site"]},
        "tags": {"type": "array", "items": {"type": "string", "description": "a tag"}},
        "exact": {"type": "boolean"}},
        "required": ["query", "exact"]}}}
NOPARAMS = {"type": "function", "function": {"name": "now", "description": "The time"}}


def cases():
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"unit": "celsius", "city": "Paris"})}}
    call2 = {"id": "call_2", "type": "function",
             "function": {"name": "search", "arguments": json.dumps(
                 {"query": "x \"y\"", "exact": False, "Limit": 3, "tags": ["a", "b"], "filters": {"site": "e.org"},
                  "score": 0.25, "none": None})}}
    return [
        ("tools_only", {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}),
        ("tools_system", {"messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Find x"}],
                          "tools": [WEATHER, SEARCH, NOPARAMS]}),
        ("call_and_result", {"messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp": 21, "sky": "clear"})}],
            "tools": [WEATHER]}),
        ("two_calls_text_result", {"messages": [
            {"role": "user", "content": "Do both"},
            {"role": "assistant", "content": None, "tool_calls": [call, call2]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "[1, 2]"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "Thanks"}],
            "tools": [WEATHER, SEARCH]}),
        ("history_without_tools", {"messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "assistant", "content": "Rain."},
            {"role": "user", "content": "ok"}]}),
    ]


def template_messages(req):
    out = []
    for m in req["messages"]:
        m = dict(m)
        if m["role"] == "tool":
            target = next(x for x in reversed(out) if x.get("tool_calls"))
            name = next(c["function"]["name"] for c in target["tool_calls"] if c["id"] == m["tool_call_id"])
            try:
                resp = json.loads(m["content"])
            except ValueError:
                resp = None
            if not isinstance(resp, dict):
                resp = m["content"]
            target.setdefault("tool_responses", []).append({"name": name, "response": resp})
            continue
        if m.get("tool_calls"):
            m["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in m["tool_calls"]]
        if m.get("content") is None:
            m["content"] = ""
        out.append(m)
    return out


def read_template():
    with lzma.open(os.path.join(ROOT, "tests", "data", "tokenizer_bpe", "ggml-vocab-gemma-4.gguf.xz")) as f:
        d = f.read()
    key = b"tokenizer.chat_template"
    i = d.find(key) + len(key)
    assert struct.unpack("<I", d[i:i + 4])[0] == 8  # a GGUF string
    n = struct.unpack("<Q", d[i + 4:i + 12])[0]
    return d[i + 12:i + 12 + n].decode()


def main():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    tmpl = env.from_string(read_template())
    path = os.path.join(ROOT, "tests", "data", "tokenizer_bpe", "chat4_tools_golden.txt")
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("# Gemma 4 tool renderings by jinja2 of the template in ggml-vocab-gemma-4.gguf "
                "(tools/gen_tool_call_golden.py). Do not edit.\n")
        for name, req in cases():
            out = tmpl.render(messages=template_messages(req), tools=req.get("tools"), bos_token="<bos>",
                              add_generation_prompt=True)
            f.write("case %s\nrequest %s\nexpect %s\n" % (name, json.dumps(req).encode().hex(), out.encode().hex()))
    print("wrote", path)


if __name__ == "__main__":
    main()
