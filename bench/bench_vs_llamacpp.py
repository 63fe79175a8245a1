#!/usr/bin/env python3
"""Side-by-side throughput: `lockstep bench` vs llama.cpp (llama-cpp-python) on the same GGUF,
same thread count, in one run. Prefill = 512 tokens in one batch, decode = 128 single-token
steps, median of N repetitions, peak RSS of each engine's process. Prints a markdown table
for docs/benchmarks.md.

usage: python3 bench/bench_vs_llamacpp.py [--lockstep build/release/lockstep] [--model PATH]
                                           [--threads 2] [--reps 5]
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys

LLAMA_CHILD = r"""
import json, random, resource, sys, time
from llama_cpp import Llama
model, threads, reps, n_pp, n_tg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = Llama(model_path=model, n_ctx=n_pp + n_tg + 16, n_batch=n_pp, n_ubatch=n_pp, n_threads=threads,
            n_threads_batch=threads, verbose=False)
random.seed(1)
toks = [2] + [random.randint(1000, 250000) for _ in range(n_pp - 1)]
pp, tg = [], []
for _ in range(reps):
    llm.reset(); llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
    t0 = time.perf_counter(); llm.eval(toks); pp.append(n_pp / (time.perf_counter() - t0))
    llm.reset(); llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
    t0 = time.perf_counter()
    for i in range(n_tg):
        llm.eval([toks[i % n_pp]])
    tg.append(n_tg / (time.perf_counter() - t0))
pp.sort(); tg.sort()
print(json.dumps({"pp": pp[len(pp) // 2], "tg": tg[len(tg) // 2],
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
"""


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockstep", default="build/release/lockstep")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("--n-gen", type=int, default=128)
    a = ap.parse_args()

    out = subprocess.run([a.lockstep, "bench", "-m", a.model, "-t", str(a.threads), "-r", str(a.reps),
                          "-p", str(a.n_prompt), "-n", str(a.n_gen)], check=True, capture_output=True, text=True).stdout
    kv = dict(re.findall(r"(\w+)=([^\s]+)", out))
    ls = {"pp": float(kv["prefill_tok_s"]), "tg": float(kv["decode_tok_s"]), "rss_mib": float(kv["peak_rss_mib"])}

    try:
        res = subprocess.run([sys.executable, "-c", LLAMA_CHILD, a.model, str(a.threads), str(a.reps),
                              str(a.n_prompt), str(a.n_gen)], check=True, capture_output=True, text=True)
        lc = json.loads(res.stdout.strip().splitlines()[-1])
    except (subprocess.CalledProcessError, FileNotFoundError, json.JSONDecodeError) as e:
        print(f"llama.cpp run failed: {e}", file=sys.stderr)
        lc = None

    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; threads={a.threads}; reps={a.reps} (median); "
          f"lockstep backend={kv.get('backend')}")
    print()
    print("| engine | prefill pp%d tok/s | decode tg%d tok/s | peak RSS MiB |" % (a.n_prompt, a.n_gen))
    print("|---|---|---|---|")
    print(f"| lockstep | {ls['pp']:.1f} | {ls['tg']:.1f} | {ls['rss_mib']:.0f} |")
    if lc:
        import llama_cpp
        print(f"| llama.cpp (llama-cpp-python {llama_cpp.__version__}) | {lc['pp']:.1f} | {lc['tg']:.1f} | "
              f"{lc['rss_mib']:.0f} |")
        print(f"| ratio lockstep / llama.cpp | {ls['pp'] / lc['pp']:.2f}x | {ls['tg'] / lc['tg']:.2f}x | |")


if __name__ == "__main__":
    main()
