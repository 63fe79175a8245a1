#!/usr/bin/env python3
"""Classic vs speculative decoding on the default model, same run: tok/s (median of N),
acceptance_rate and emitted_per_verify, for an edit task (a ~300-token code file returned
with one change), a summarize-and-quote task and free prose. Also checks that speculative
stdout is byte-identical to classic stdout for every task. Prints a markdown table.

usage: python3 bench/bench_speculative.py [--lockstep build/release/lockstep] [--reps 3]
          [--threads 2] [--n 256] [--draft ngram] [--block 4] [--temp 0]
"""
import argparse
import os
import re
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = [("edit (code file, one rename)", "edit_code.txt"),
         ("summarize-and-quote", "summarize_quote.txt"),
         ("free prose", "free_prose.txt")]


def run(cli, prompt_file, args, extra):
    cmd = [cli, "run", "-f", prompt_file, "-n", str(args.n), "--temp", str(args.temp), "--seed", "42",
           "-t", str(args.threads), "--ignore-eos", "--stats"] + extra
    p = subprocess.run(cmd, capture_output=True, check=True)
    stats = dict(re.findall(r"(\w+)=([^\s]+)", p.stderr.decode(errors="replace").split("lockstep stats:")[-1]))
    return p.stdout, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockstep", default="build/release/lockstep")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--no-adaptive", action="store_true")
    a = ap.parse_args()
    spec_args = ["--draft", a.draft, "--draft-block-size", str(a.block)] + (["--no-adaptive"] if a.no_adaptive else [])
    print(f"threads={a.threads} n={a.n} temp={a.temp} reps={a.reps} (median) draft={a.draft} "
          f"block={a.block} adaptive={not a.no_adaptive}")
    print()
    print("| task | classic tok/s | speculative tok/s | speedup | acceptance_rate | emitted_per_verify | "
          "final K | identical |")
    print("|---|---|---|---|---|---|---|---|")
    for name, fn in TASKS:
        path = os.path.join(HERE, "prompts", fn)
        c_tps, s_tps, last = [], [], None
        identical = True
        for _ in range(a.reps):
            out_c, st_c = run(a.lockstep, path, a, [])
            out_s, st_s = run(a.lockstep, path, a, spec_args)
            identical &= out_c == out_s
            c_tps.append(float(st_c["decode_tok_s"]))
            s_tps.append(float(st_s["decode_tok_s"]))
            last = st_s
        c, s = statistics.median(c_tps), statistics.median(s_tps)
        print(f"| {name} | {c:.1f} | {s:.1f} | {s / c:.2f}x | {last.get('acceptance_rate', '-')} | "
              f"{last.get('emitted_per_verify', '-')} | {last.get('final_block_size', '-')} | "
              f"{'yes' if identical else 'NO'} |")


if __name__ == "__main__":
    main()
