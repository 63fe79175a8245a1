#!/usr/bin/env python3
"""Server throughput and time-to-first-token: `lockstep serve` vs llama.cpp's server
(llama-cpp-python, `python3 -m llama_cpp.server`) on the same GGUF, same thread count, in one
run. Both are started on free loopback ports by this script and always stopped.

Workload, per concurrency level C in --levels (default 1,4,8): C client threads send
--requests streaming POST /v1/completions requests in total (a fixed prompt set, cycled;
max_tokens --max-tokens, temperature 0, seed 1), each client taking the next request as soon as
its previous one finished. One untimed warm-up request per level.

  aggregate tok/s = generated tokens of all requests / wall time of the level (first send to
                    last byte)
  TTFT            = send -> first SSE event carrying text; p50 / p99 over the level's requests
                    (nearest rank; with 16-24 requests p99 is in effect the maximum)

Generated tokens: lockstep's `usage` (stream_options.include_usage); llama-cpp-python sends no
usage in streams but one chunk per token, so its chunks without finish_reason are counted.

lockstep is restarted per level with --parallel P (policy --ls-parallel, default
"min4" = min(C, 4), the slot count the issue suggests) and -t T, T = --threads: the forward
steps of all slots run batched on one pool of T threads, so the whole server computes on T
threads. More policies (comma
separated: minN, or a fixed number) add rows. llama-cpp-python's server runs one request at
a time (it serializes requests behind a lock), with --n_threads T and --interrupt_requests
False (by default a new request cuts the running stream short, which would make its output
shorter, not faster); one instance serves all levels.

usage: python3 bench/bench_server.py [--lockstep build/release/lockstep] [--model PATH]
          [--threads 2] [--levels 1,4,8] [--requests 24] [--max-tokens 64] [--ls-parallel min4]
          [--no-llama]
"""
import argparse
import http.client
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "The history of the bicycle begins in the early nineteenth century, when",
    "Here is a short guide to baking sourdough bread at home. First,",
    "The three laws of thermodynamics can be summarized as follows:",
    "def quicksort(items):\n    \"\"\"Sort a list of numbers.\"\"\"\n",
    "Dear diary, today was the strangest day of my life. It started when",
    "A good night's sleep matters because",
    "The city council met on Tuesday to discuss",
]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A server child; always stopped (SIGTERM, then SIGKILL)."""

    def __init__(self, cmd, health_url_path, port, timeout=180, env=None):
        self.log = tempfile.NamedTemporaryFile(prefix="bench-server-", suffix=".log", delete=False)
        self.port = port
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: %s\n%s" % (cmd, self.logtext()[-3000:]))
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", health_url_path)
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server not ready in %d s: %s\n%s" % (timeout, cmd, self.logtext()[-3000:]))

    def logtext(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def stream_one(port, prompt, max_tokens, timeout=300):
    """One streaming /v1/completions request. Returns (ttft_s, total_s, n_tokens)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": 1, "stream": True,
            "stream_options": {"include_usage": True}}
    for attempt in range(100):  # 503 + Retry-After (lockstep's bounded queue): wait and retry
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status == 503:
            delay = float(r.getheader("Retry-After", "1"))
            r.read()
            conn.close()
            time.sleep(delay)
            continue
        if r.status != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
        ttft = None
        usage = None
        chunks = 0
        done = False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            o = json.loads(payload)
            if o.get("usage"):
                usage = o["usage"]
            for ch in o.get("choices") or []:
                if ch.get("finish_reason") is None:
                    chunks += 1
                if ch.get("text") and ttft is None:
                    ttft = time.perf_counter() - t0
        total = time.perf_counter() - t0
        conn.close()
        if not done:
            raise RuntimeError("stream ended without [DONE]")
        n = usage["completion_tokens"] if usage else chunks
        return (ttft if ttft is not None else total), total, n
    raise RuntimeError("503 retries exhausted")


def run_level(port, clients, n_requests, max_tokens):
    stream_one(port, PROMPTS[0], 8)  # warm-up, untimed
    jobs = list(range(n_requests))
    lock = threading.Lock()
    results, errors = [], []

    def client():
        while True:
            with lock:
                if not jobs:
                    return
                i = jobs.pop(0)
            try:
                res = stream_one(port, PROMPTS[i % len(PROMPTS)], max_tokens)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                results.append(res)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("%d requests failed: %s" % (len(errors), errors[:3]))
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[2] for r in results)

    def pct(p):
        return ttfts[min(len(ttfts) - 1, max(0, int(round(p / 100.0 * len(ttfts) + 0.5)) - 1))]

    return {"tok_s": tokens / wall, "tokens": tokens, "wall": wall, "ttft_p50": pct(50), "ttft_p99": pct(99),
            "requests": len(results)}


def parallel_for(policy, clients):
    if policy.startswith("min"):
        return max(1, min(clients, int(policy[3:])))
    return int(policy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockstep", default="build/release/lockstep")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--ls-parallel", default="min4", help="comma separated: minN = min(clients, N), or a number")
    ap.add_argument("--no-llama", action="store_true")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    policies = a.ls_parallel.split(",")

    rows = []  # (engine label, level, result)
    for pol in policies:
        for c in levels:
            par = parallel_for(pol, c)
            port = free_port()
            srv = Proc([a.lockstep, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "--parallel",
                        str(par), "-c", str(a.ctx), "-t", str(a.threads)], "/health", port)
            try:
                res = run_level(port, c, a.requests, a.max_tokens)
            finally:
                srv.stop()
            res["config"] = "--parallel %d -t %d" % (par, a.threads)
            rows.append(("lockstep (%s)" % pol, c, res))
            print("lockstep %s clients=%d: %s" % (pol, c, res), file=sys.stderr, flush=True)

    if not a.no_llama:
        port = free_port()
        try:
            srv = Proc([sys.executable, "-m", "llama_cpp.server", "--model", a.model, "--n_threads", str(a.threads),
                        "--n_ctx", str(a.ctx), "--host", "127.0.0.1", "--port", str(port),
                        "--interrupt_requests", "False"], "/v1/models", port)
        except RuntimeError as e:
            print("llama.cpp server failed to start: %s" % e, file=sys.stderr)
            srv = None
        if srv:
            try:
                for c in levels:
                    res = run_level(port, c, a.requests, a.max_tokens)
                    res["config"] = "--n_threads %d (one request at a time)" % a.threads
                    rows.append(("llama.cpp", c, res))
                    print("llama.cpp clients=%d: %s" % (c, res), file=sys.stderr, flush=True)
            finally:
                srv.stop()

    try:
        import llama_cpp
        lc_ver = llama_cpp.__version__
    except ImportError:
        lc_ver = "n/a"
    ver = subprocess.run([a.lockstep, "--version"], capture_output=True, text=True).stdout.strip()
    print("machine: %s, %d cores; threads=%d; %d streaming /v1/completions requests per level, max_tokens %d, "
          "temperature 0; %s; llama-cpp-python %s"
          % (cpu_name(), os.cpu_count(), a.threads, a.requests, a.max_tokens, ver or "?", lc_ver))
    print()
    print("| clients | engine | server config | aggregate tok/s | TTFT p50 ms | TTFT p99 ms | tokens | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    by = {(e, c): r for e, c, r in rows}
    for c in levels:
        for e, cc, r in rows:
            if cc == c:
                print("| %d | %s | `%s` | %.1f | %.0f | %.0f | %d | %.1f |"
                      % (c, e, r["config"], r["tok_s"], r["ttft_p50"] * 1e3, r["ttft_p99"] * 1e3, r["tokens"],
                         r["wall"]))
        ll = by.get(("llama.cpp", c))
        for pol in policies:
            ls = by.get(("lockstep (%s)" % pol, c))
            if ls and ll:
                print("| %d | **ratio** lockstep (%s) / llama.cpp | | **%.2fx** | %.2fx | %.2fx | | |"
                      % (c, pol, ls["tok_s"] / ll["tok_s"], ls["ttft_p50"] / ll["ttft_p50"],
                         ls["ttft_p99"] / ll["ttft_p99"]))


if __name__ == "__main__":
    main()
