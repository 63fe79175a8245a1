#!/usr/bin/env python3
"""Server throughput and time-to-first-token: `lockstep serve` vs llama.cpp's C++ `llama-server`
on the same GGUF, the same number of slots and the same device, in one run. Python standard
library only. Each server is started by this script on a free loopback port, waited for (GET
/health until 200; both answer 503 while loading), measured, and always stopped (SIGTERM to its
process group, then SIGKILL), one server at a time.

Workload, per concurrency level C in --levels (default 1,4,8): C client threads send R
streaming POST /v1/completions requests in total (R = --requests, default max(24, 3*C); a fixed
prompt set, cycled; max_tokens --max-tokens, temperature 0, seed 1, ignore_eos true so that
every request generates exactly max_tokens tokens on both servers, unless --no-ignore-eos), each
client taking the next request as soon as its previous one finished. Before the timed part, one
untimed warm-up round: C concurrent requests of 8 tokens.

  aggregate tok/s = generated tokens of all R requests / wall time of the level (first send to
                    last byte)
  TTFT            = send -> first SSE event carrying text; p50 / p99 over the level's requests
                    (nearest rank; with ~24 requests p99 is in effect the maximum)

Generated tokens of a request: the stream's `usage.completion_tokens` (both servers are sent
stream_options.include_usage; llama-server's /v1/completions stream carries `usage` in its final
chunk), else `timings.predicted_n`, else the number of chunks carrying text.

Slots: per level, N = the --ls-parallel policy (comma separated; "minK" = min(C, K), or a fixed
number; default "min4"); several policies giving distinct N add rows. For every (C, N) both
servers are started fresh with N slots:

  lockstep serve --device D -m MODEL --host 127.0.0.1 --port P --parallel N -c CTX [-t T]
  llama-server   -m MODEL --host 127.0.0.1 --port P -np N -c N*CTX -ngl 99 --no-webui [-t T]

CTX = --ctx is the context of ONE slot: lockstep's -c is per slot, llama-server divides -c among
its slots, hence N*CTX. With --device cpu, llama-server gets -ngl 0 (and -dev none when its
--help lists --device, so that a GPU build offloads nothing either). -t T: --threads T (default
2); --threads 0 passes no -t to either server (each uses its own default). Flags the given
llama-server build does not list in its --help (--no-webui, -dev) are left out.

Output: per level a table (server, slots, clients, aggregate tok/s, TTFT p50/p99, tokens, wall)
with the ratio lockstep / llama-server of aggregate tok/s, then the exact command line of every
server run; --json OUT writes the same numbers. Exit status 1 when any run failed (the other
runs are still reported).

usage: python3 bench/bench_server.py [--lockstep build/release/lockstep] [--llama-server PATH]
          [--model GGUF] [--device cpu|cuda] [--threads 2] [--levels 1,4,8] [--requests R]
          [--max-tokens 64] [--ctx 2048] [--ls-parallel min4] [--no-llama] [--json OUT]

  32 concurrent streams with 32 slots on both servers (GPU; llama-server from
  scripts/build-llama-cuda.sh, which scripts/test-cuda.sh --llama DIR runs this way):
  python3 bench/bench_server.py --device cuda --lockstep build/cuda/lockstep \\
          --llama-server build/llama-cuda/llama-server --model GGUF \\
          --levels 32 --ls-parallel 32 --threads 0 --json server-32.json
"""
import argparse
import http.client
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_name  # noqa: E402

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


def gpu_name():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip().replace("\n", "; ") if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get_json(port, path, timeout=10):
    """(status, parsed JSON or None) of GET path."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        try:
            return r.status, json.loads(body)
        except ValueError:
            return r.status, None
    finally:
        c.close()


def tool_output(cmd, timeout=120):
    """stdout + stderr of a short command (`--help`, `--version`); "" when it cannot run."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                           stdin=subprocess.DEVNULL)
        return r.stdout + r.stderr
    except (OSError, subprocess.SubprocessError):
        return ""


class Server:
    """A server child in its own process group. start() returns once GET /health answers 200
    (or raises); stop() is always safe to call and always ends the whole group."""

    def __init__(self, name, cmd, port):
        self.name, self.cmd, self.port = name, cmd, port
        self.proc = None
        self.log = tempfile.NamedTemporaryFile(prefix="bench-server-%s-" % name, suffix=".log", delete=False)

    def start(self, timeout):
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # own process group: killpg ends it all
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with status %d before it was ready: %s\n%s"
                                   % (self.name, self.proc.returncode, shlex.join(self.cmd), self.tail()))
            try:
                status, body = http_get_json(self.port, "/health", timeout=5)
                if status == 200:
                    return body
            except (OSError, http.client.HTTPException):
                pass  # not listening yet
            time.sleep(0.25)
        raise RuntimeError("%s not ready (GET /health != 200) within %d s: %s\n%s"
                           % (self.name, timeout, shlex.join(self.cmd), self.tail()))

    def tail(self, n=3000):
        try:
            with open(self.log.name, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None:
            pid = self.proc.pid  # == the process group id (start_new_session)
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(pid, signal.SIGKILL)  # whatever is left of the group
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def stream_one(port, prompt, max_tokens, ignore_eos, timeout=600):
    """One streaming /v1/completions request. Returns (ttft_s, total_s, n_tokens)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": 1, "stream": True,
            "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    for _ in range(1000):  # 503 + Retry-After (lockstep's bounded queue): wait and retry
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            t0 = time.perf_counter()
            conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status == 503:
                delay = float(r.getheader("Retry-After", "1"))
                r.read()
                time.sleep(delay)
                continue
            if r.status != 200:
                raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
            ttft = None
            last = None
            gaps = []  # seconds between consecutive text chunks (inter-token latency as seen)
            usage = None
            predicted_n = None
            text_chunks = 0
            done = False
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if line.startswith(b"error:"):
                    raise RuntimeError("stream error: %s" % line[:300])
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                o = json.loads(payload)
                if "error" in o:
                    raise RuntimeError("stream error: %s" % payload[:300])
                if o.get("usage"):
                    usage = o["usage"]
                if isinstance(o.get("timings"), dict) and "predicted_n" in o["timings"]:
                    predicted_n = o["timings"]["predicted_n"]
                for ch in o.get("choices") or []:
                    if ch.get("text"):
                        text_chunks += 1
                        now = time.perf_counter()
                        if ttft is None:
                            ttft = now - t0
                        else:
                            gaps.append(now - last)
                        last = now
            total = time.perf_counter() - t0
        finally:
            conn.close()
        if not done:
            raise RuntimeError("stream ended without [DONE]")
        if usage and usage.get("completion_tokens") is not None:
            n = usage["completion_tokens"]
        elif predicted_n is not None:
            n = predicted_n
        else:
            n = text_chunks
        return (ttft if ttft is not None else total), total, n, gaps
    raise RuntimeError("503 retries exhausted")


def run_clients(port, clients, n_requests, max_tokens, ignore_eos):
    """C client threads share n_requests; returns (results, wall_s). Raises if any failed."""
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
                res = stream_one(port, PROMPTS[i % len(PROMPTS)], max_tokens, ignore_eos)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                results.append(res)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("%d of %d requests failed: %s" % (len(errors), n_requests, errors[:3]))
    return results, wall


def pct(sorted_vals, p):
    """Nearest-rank percentile."""
    k = max(1, math.ceil(p / 100.0 * len(sorted_vals)))
    return sorted_vals[min(k, len(sorted_vals)) - 1]


def measure(port, clients, n_requests, max_tokens, ignore_eos):
    run_clients(port, clients, clients, 8, ignore_eos)  # warm-up round, untimed
    results, wall = run_clients(port, clients, n_requests, max_tokens, ignore_eos)
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[2] for r in results)
    gaps = sorted(g for r in results for g in r[3]) or [0.0]
    return {"tok_s": tokens / wall, "tokens": tokens, "wall_s": wall, "requests": len(results),
            "ttft_p50_ms": pct(ttfts, 50) * 1e3, "ttft_p99_ms": pct(ttfts, 99) * 1e3,
            "itl_p50_ms": pct(gaps, 50) * 1e3, "itl_p99_ms": pct(gaps, 99) * 1e3}


def parallel_for(policy, clients):
    if policy.startswith("min"):
        return max(1, min(clients, int(policy[3:])))
    return int(policy)


def has_flag(help_text, flag):
    """Whether a --help text lists flag as a whole word (--device, not --device-draft)."""
    return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(flag), help_text) is not None


def lockstep_cmd(a, port, slots):
    cmd = [a.lockstep, "serve", "--device", a.device, "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
           "--parallel", str(slots), "-c", str(a.ctx)]
    if a.threads > 0:
        cmd += ["-t", str(a.threads)]
    if a.spec:
        cmd += ["--draft", "ngram", "--draft-block-size", str(a.spec_k)]
    return cmd


def llama_server_cmd(a, help_text, port, slots):
    cmd = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
           "-np", str(slots), "-c", str(slots * a.ctx)]  # llama-server splits -c among its slots
    if a.device == "cuda":
        cmd += ["-ngl", "99"]
    else:
        cmd += ["-ngl", "0"]
        if has_flag(help_text, "--device"):
            cmd += ["-dev", "none"]
    if has_flag(help_text, "--no-webui"):
        cmd += ["--no-webui"]
    if a.threads > 0:
        cmd += ["-t", str(a.threads)]
    if a.spec:
        cmd += ["--spec-type", "ngram-simple", "--spec-draft-n-max", str(a.spec_k)]
    return cmd


def run_server(name, cmd, port, a, clients, n_requests):
    """Start, check, measure, stop. Returns the run's record (with "error" when it failed)."""
    rec = {"server": name, "cmd": cmd, "cmd_line": shlex.join(cmd), "clients": clients, "requests": n_requests}
    srv = Server(name, cmd, port)
    try:
        health = srv.start(a.startup_timeout)
        rec["health"] = health
        if name == "lockstep" and isinstance(health, dict) and \
                str(health.get("device", a.device)).split(":")[0] != a.device:
            raise RuntimeError("lockstep runs on device %r, asked for %r" % (health.get("device"), a.device))
        if name == "llama-server":
            try:  # slots and per-slot context as the server sees them (best effort)
                status, props = http_get_json(port, "/props")
                if status == 200 and isinstance(props, dict):
                    rec["props"] = {"total_slots": props.get("total_slots"), "build_info": props.get("build_info"),
                                    "n_ctx_per_slot": (props.get("default_generation_settings") or {}).get("n_ctx")}
            except (OSError, http.client.HTTPException):
                pass
        rec.update(measure(port, clients, n_requests, a.max_tokens, not a.no_ignore_eos))
    except Exception as e:  # noqa: BLE001  (reported; the other runs go on)
        rec["error"] = str(e)
    finally:
        srv.stop()
    return rec


def fmt_row(server, slots, clients, r):
    if "error" in r:
        return "| %s | %d | %d | failed: %s | | | | | |" % (server, slots, clients, r["error"].splitlines()[0][:120])
    return "| %s | %d | %d | %.1f | %.0f | %.0f | %.1f | %d | %.2f |" % (
        server, slots, clients, r["tok_s"], r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p99_ms"], r["tokens"],
        r["wall_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lockstep", default="build/release/lockstep")
    ap.add_argument("--llama-server", metavar="PATH", help="llama.cpp's C++ llama-server binary")
    ap.add_argument("--no-llama", action="store_true", help="lockstep only")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="lockstep serve --device; llama-server -ngl 99 (cuda) or -ngl 0 (cpu)")
    ap.add_argument("--threads", type=int, default=2, help="-t for both servers; 0: pass none (server defaults)")
    ap.add_argument("--levels", default="1,4,8", help="comma separated client counts")
    ap.add_argument("--requests", type=int, default=None, help="requests per level (default max(24, 3*clients))")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=2048, help="context of one slot")
    ap.add_argument("--ls-parallel", default="min4", help="slots per level, comma separated: minK = min(clients, K), "
                                                          "or a number; the same N for both servers")
    ap.add_argument("--no-ignore-eos", action="store_true", help="do not send ignore_eos (outputs may stop early)")
    ap.add_argument("--startup-timeout", type=int, default=300, help="seconds to wait for GET /health == 200")
    ap.add_argument("--json", metavar="OUT", help="write the numbers as JSON")
    ap.add_argument("--spec", action="store_true",
                    help="n-gram drafting on both: lockstep --draft ngram --draft-block-size K, llama-server "
                         "--spec-type ngram-simple --spec-draft-n-max K")
    ap.add_argument("--spec-k", type=int, default=4, help="draft tokens per round with --spec (default 4)")
    a = ap.parse_args()

    try:
        levels = [int(x) for x in a.levels.split(",")]
        policies = a.ls_parallel.split(",")
        for pol in policies:
            parallel_for(pol, 1)
    except ValueError:
        ap.error("--levels: integers; --ls-parallel: minK or integers")
    if min(levels) < 1 or any(parallel_for(p, c) < 1 for p in policies for c in levels):
        ap.error("clients and slots must be >= 1")
    if not a.no_llama and not a.llama_server:
        ap.error("--llama-server PATH is required (or --no-llama)")
    if not a.no_llama and not os.access(a.llama_server, os.X_OK):
        ap.error("--llama-server %s: not an executable" % a.llama_server)
    if not os.access(a.lockstep, os.X_OK):
        ap.error("--lockstep %s: not an executable" % a.lockstep)
    if not os.path.isfile(a.model):
        ap.error("--model %s: no such file" % a.model)

    # SIGTERM/SIGHUP to this script: unwind through the finally blocks, which stop the servers
    def on_term(sig, frame):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    help_text = "" if a.no_llama else tool_output([a.llama_server, "--help"])
    if not a.no_llama and not help_text:
        print("warning: `%s --help` printed nothing; starting it with every flag" % a.llama_server, file=sys.stderr)
        help_text = "--no-webui --device"

    runs = []
    for c in levels:
        n_req = a.requests if a.requests else max(24, 3 * c)
        if n_req < c:
            print("warning: %d requests < %d clients: at most %d streams at once" % (n_req, c, n_req), file=sys.stderr)
        for n in sorted(set(parallel_for(pol, c) for pol in policies)):
            for name in ("lockstep",) if a.no_llama else ("lockstep", "llama-server"):
                port = free_port()
                cmd = lockstep_cmd(a, port, n) if name == "lockstep" else llama_server_cmd(a, help_text, port, n)
                rec = run_server(name, cmd, port, a, c, n_req)
                rec["slots"] = n
                runs.append(rec)
                print("%s slots=%d clients=%d: %s" % (name, n, c, rec.get("error") or
                      "%.1f tok/s, TTFT p50 %.0f ms" % (rec["tok_s"], rec["ttft_p50_ms"])), file=sys.stderr, flush=True)

    ls_ver = tool_output([a.lockstep, "--version"]).strip()
    ll_ver = "" if a.no_llama else " ".join(
        ln.strip() for ln in tool_output([a.llama_server, "--version"]).splitlines() if ln.startswith(("version", "built")))
    gpu = gpu_name() if a.device == "cuda" else None
    print()
    print("machine: %s, %d cores%s; device %s; threads %s; streaming /v1/completions, max_tokens %d, temperature 0, "
          "ignore_eos %s; per-slot ctx %d"
          % (cpu_name(), os.cpu_count(), "; GPU " + gpu if gpu else "", a.device,
             a.threads if a.threads > 0 else "server default", a.max_tokens, not a.no_ignore_eos, a.ctx))
    print("n-gram drafting: %s" % ("on, %d tokens a round (lockstep --draft ngram; llama-server --spec-type "
                                   "ngram-simple)" % a.spec_k if a.spec else "off"))
    print("lockstep: %s" % (ls_ver or "?"))
    if not a.no_llama:
        print("llama-server: %s" % (ll_ver or "?"))

    ratios = []
    for c in levels:
        level_runs = [r for r in runs if r["clients"] == c]
        print()
        print("clients = %d (%d requests)" % (c, level_runs[0]["requests"]))
        print()
        print("| server | slots | clients | aggregate tok/s | TTFT p50 ms | TTFT p99 ms | ITL p99 ms | tokens | wall s |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in sorted(set(r["slots"] for r in level_runs)):
            by = {r["server"]: r for r in level_runs if r["slots"] == n}
            for name in ("lockstep", "llama-server"):
                if name in by:
                    print(fmt_row(name, n, c, by[name]))
            ls, ll = by.get("lockstep"), by.get("llama-server")
            if ls and ll and "error" not in ls and "error" not in ll:
                ratio = ls["tok_s"] / ll["tok_s"]
                ratios.append({"clients": c, "slots": n, "lockstep_tok_s": ls["tok_s"],
                               "llama_server_tok_s": ll["tok_s"], "ratio": ratio})
                print("| **lockstep / llama-server** | %d | %d | **%.2fx** | | | | | |" % (n, c, ratio))

    print()
    print("command lines:")
    for r in runs:
        print("  %s (slots %d, clients %d): %s" % (r["server"], r["slots"], r["clients"], r["cmd_line"]))

    if a.json:
        out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "gpu": gpu},
               "settings": {"model": a.model, "device": a.device, "threads": a.threads, "levels": levels,
                            "ls_parallel": policies, "max_tokens": a.max_tokens, "ctx_per_slot": a.ctx,
                            "ignore_eos": not a.no_ignore_eos, "temperature": 0, "seed": 1,
                            "endpoint": "/v1/completions", "stream": True},
               "versions": {"lockstep": ls_ver, "llama_server": ll_ver or None},
               "runs": runs, "ratios": ratios}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print("\nwrote %s" % a.json)

    failed = [r for r in runs if "error" in r]
    for r in failed:
        print("\nFAILED %s slots=%d clients=%d: %s" % (r["server"], r["slots"], r["clients"], r["error"]),
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
