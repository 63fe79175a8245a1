#!/usr/bin/env python3
"""Classic vs speculative decoding on the default model, same run: tok/s (median of N),
acceptance_rate and emitted_per_verify, for an edit task (a ~300-token code file returned
with one change), a summarize-and-quote task and free prose. Also checks that speculative
stdout is byte-identical to classic stdout for every task. Prints a markdown table.

With --llama DIR (a folder holding llama.cpp's C++ `llama-lookup`, e.g. the one bench/bench_cpu.py
builds, ~/.cache/lockstep/llama-cpu-avx512), llama.cpp's prompt-lookup decoding runs the same
prompt file, token count, draft length, temperature and thread count in the same run, and the
table gains its decode tok/s (median) and lockstep speculative / llama-lookup.

usage: python3 bench/bench_speculative.py [--lockstep build/release/lockstep] [--reps 3]
          [--threads 2] [--n 256] [--draft ngram] [--block 4] [--temp 0] [--llama DIR]
          [--model PATH]
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


def run_lookup(llama, model, prompt_file, args):
    """llama-lookup's decode tok/s ("decoded N tokens in S seconds, speed: X t/s")."""
    cmd = [os.path.join(llama, "llama-lookup"), "-m", model, "-f", prompt_file, "-n", str(args.n),
           "--spec-draft-n-max", str(args.block), "--temp", str(args.temp), "--seed", "42", "-t", str(args.threads),
           "--ignore-eos", "-c", "4096"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", p.stdout + p.stderr)
    if not m:
        raise SystemExit("llama-lookup printed no decode speed:\n" + (p.stdout + p.stderr)[-2000:])
    return float(m.group(3))


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
    ap.add_argument("--llama", help="folder with llama.cpp's llama-lookup (same prompt, n, K, temp, threads)")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf"),
                    help="GGUF for llama-lookup (lockstep uses its default model)")
    a = ap.parse_args()
    spec_args = ["--draft", a.draft, "--draft-block-size", str(a.block)] + (["--no-adaptive"] if a.no_adaptive else [])
    print(f"threads={a.threads} n={a.n} temp={a.temp} reps={a.reps} (median) draft={a.draft} "
          f"block={a.block} adaptive={not a.no_adaptive}")
    print()
    lk = " llama-lookup tok/s | speculative / llama-lookup |" if a.llama else ""
    print("| task | classic tok/s | speculative tok/s | speedup | acceptance_rate | emitted_per_verify | "
          "final K | identical |" + lk)
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if a.llama else ""))
    for name, fn in TASKS:
        path = os.path.join(HERE, "prompts", fn)
        c_tps, s_tps, l_tps, last = [], [], [], None
        identical = True
        for _ in range(a.reps):
            out_c, st_c = run(a.lockstep, path, a, [])
            out_s, st_s = run(a.lockstep, path, a, spec_args)
            if a.llama:
                l_tps.append(run_lookup(a.llama, a.model, path, a))
            identical &= out_c == out_s
            c_tps.append(float(st_c["decode_tok_s"]))
            s_tps.append(float(st_s["decode_tok_s"]))
            last = st_s
        c, s = statistics.median(c_tps), statistics.median(s_tps)
        lcol = ""
        if a.llama:
            lm = statistics.median(l_tps)
            lcol = f" {lm:.1f} | {s / lm:.2f}x |"
        print(f"| {name} | {c:.1f} | {s:.1f} | {s / c:.2f}x | {last.get('acceptance_rate', '-')} | "
              f"{last.get('emitted_per_verify', '-')} | {last.get('final_block_size', '-')} | "
              f"{'yes' if identical else 'NO'} |" + lcol)


if __name__ == "__main__":
    main()
