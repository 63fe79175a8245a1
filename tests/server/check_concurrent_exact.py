#!/usr/bin/env python3
"""A seeded request gives the same bytes alone and with N-1 other requests in flight.

Starts `lockstep serve` (extra arguments after `--` go to it, e.g. `--device cuda --parallel 16
--draft assistant --model-draft DIR`), sends request R alone, then R again together with N-1
different requests (other prompts, seeds and temperatures) all at once, and compares R's text
and token count byte for byte. The batcher runs every slot's rows in shared forward steps, so
this checks batch invariance through the whole server on whatever device it runs on.
Standard library only (it runs on GPU machines without extra packages).

usage: check_concurrent_exact.py --lockstep BIN --model PATH [--n 16] [--tokens 128] -- [serve args]
exit 0 when identical, 1 otherwise.
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time


def post(port, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
    j = json.loads(data)
    return j["choices"][0]["text"], j["usage"]["completion_tokens"]


def wait_ready(port, proc, timeout=600):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("server exited during start-up")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            body = r.read()
            c.close()
            if r.status == 200:
                return json.loads(body)
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server not ready in time")


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockstep", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=18431)
    a = ap.parse_args(argv)
    cmd = [a.lockstep, "serve", "-m", a.model, "--port", str(a.port), "--parallel", str(a.n)] + extra
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, start_new_session=True)
    err_lines = []
    threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True).start()
    try:
        health = wait_ready(a.port, proc)
        probe = health.get("speculation") or health.get("probe") or ""
        print(f"server: {' '.join(cmd[1:])}\nhealth: device={health.get('device')} backend={health.get('backend')} {probe}")
        base = {"max_tokens": a.tokens, "ignore_eos": True}
        target = dict(base, prompt="Once upon a time, in a small village by the sea,", seed=42, temperature=0.8)
        alone = post(a.port, target)
        others = []
        for i in range(a.n - 1):
            others.append(dict(base, prompt=f"Request {i}: write about the number {i * 7 + 3} and why it matters.",
                               seed=1000 + i, temperature=0.0 if i % 2 else 0.7))
        results = [None] * a.n
        errors = []

        def worker(j, body):
            try:
                results[j] = post(a.port, body)
            except Exception as e:  # reported below
                errors.append(f"request {j}: {e}")

        threads = [threading.Thread(target=worker, args=(0, target))]
        threads += [threading.Thread(target=worker, args=(j + 1, b)) for j, b in enumerate(others)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            print("FAIL:", "; ".join(errors[:3]))
            return 1
        same = results[0] == alone
        print(f"alone: {alone[1]} tokens; with {a.n - 1} others in flight: {results[0][1]} tokens; "
              f"identical: {same}")
        if not same:
            print("alone:   ", repr(alone[0][:200]))
            print("batched: ", repr(results[0][0][:200]))
        return 0 if same else 1
    except Exception as e:
        print("FAIL:", e)
        print("".join(x.decode(errors="replace") for x in err_lines[-20:]))
        return 1
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
