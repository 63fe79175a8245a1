#!/usr/bin/env python3
"""Gemma 4 assistant drafting vs classic decoding on the tiny checkpoints in tests/data/hf.

The fixtures have random weights, so the assistant's drafts are almost never accepted and
assisted decoding cannot be faster here; what this measures is the MECHANICS: for each block
size K (fixed, --no-adaptive), the cost of one verify forward of K rows in classic-step units
(verify_ms per round / classic ms per token), the drafter's cost per draft token in the same
units, the acceptance rate, and the resulting tok/s next to classic decoding. Every assisted
run's text is checked byte-identical to the classic run's.

Each configuration runs `lockstep run ... -n N --ignore-eos --stats` --reps times (median of
the per-run numbers from the --stats line: decode_tok_s, verify_ms / rounds, draft_ms /
proposed).

usage: python3 bench/bench_assistant.py [--lockstep build/release/lockstep] [--threads 2]
          [--tokens 256] [--reps 5] [--blocks 2,4,8]
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = [("gemma4_dense", "gemma4_dense_assistant", "dense tied head"),
         ("gemma4_ple", "gemma4_ple_assistant", "centroid head; target with PLE + KV sharing")]
PROMPT = "The tiny model says"


def run(a, args):
    p = subprocess.run([a.lockstep, "run", "-p", PROMPT, "-n", str(a.tokens), "--ignore-eos", "--temp", "0",
                        "--seed", "1", "-t", str(a.threads), "--stats", *args],
                       capture_output=True, text=True, check=True)
    m = re.search(r"(prompt_tokens=.*)", p.stderr)
    kv = dict(x.split("=", 1) for x in m.group(1).split() if "=" in x)
    return p.stdout, kv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockstep", default=os.path.join(ROOT, "build/release/lockstep"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--blocks", default="2,4,8")
    a = ap.parse_args()
    hf = os.path.join(ROOT, "tests/data/hf")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print("machine: %s, %d cores; threads %d; %d tokens; median of %d runs" %
          (cpu, os.cpu_count(), a.threads, a.tokens, a.reps))
    print("| target | assistant | K | tok/s | vs classic | acceptance | verify cost (classic steps) |"
          " draft cost per token (classic steps) | identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tgt, asst, what in PAIRS:
        base = ["-m", os.path.join(hf, tgt)]
        classic = [run(a, base) for _ in range(a.reps)]
        text0 = classic[0][0]
        c_tps = statistics.median(float(kv["decode_tok_s"]) for _, kv in classic)
        c_step = 1e3 / c_tps
        print("| %s | (classic) | 1 | %.1f | 1.00x | - | 1.00 | - | - |" % (tgt, c_tps))
        for k in [int(x) for x in a.blocks.split(",")]:
            rs = [run(a, base + ["--draft", "assistant", "--model-draft", os.path.join(hf, asst),
                                 "--draft-block-size", str(k), "--no-adaptive"]) for _ in range(a.reps)]
            same = all(t == text0 for t, _ in rs)
            tps = statistics.median(float(kv["decode_tok_s"]) for _, kv in rs)
            acc = statistics.median(float(kv["acceptance_rate"]) for _, kv in rs)
            ver = statistics.median(float(kv["verify_ms"]) / max(1, int(kv["rounds"])) for _, kv in rs)
            dra = statistics.median(float(kv["draft_ms"]) / max(1, int(kv["proposed"])) for _, kv in rs)
            print("| %s | %s (%s) | %d | %.1f | %.2fx | %.3f | %.2f | %.2f | %s |" %
                  (tgt, asst, what, k, tps, tps / c_tps, acc, ver / c_step, dra / c_step,
                   "yes" if same else "NO"))
            if not same:
                sys.exit("assisted output differs from classic for %s K=%d" % (tgt, k))


if __name__ == "__main__":
    main()
