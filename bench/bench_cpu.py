#!/usr/bin/env python3
"""CPU speed, side by side in one run (docs/benchmarks.md): `lockstep bench` vs llama.cpp's own
C++ `llama-bench` on the same GGUF at each thread count, the stream-read bandwidth of this
machine (the decode roofline: weight bytes read per token over that bandwidth), and the cost
of a K-row verify forward over a one-row step at K = 4 and 8.

llama.cpp is built once from the source that the PyPI sdist llama-cpp-python==0.3.36 vendors
(vendor/llama.cpp), by scripts/build-llama-cuda.sh --cpu, into a folder outside the clone
(default ~/.cache/lockstep/llama-cpu-avx512 on a CPU with AVX-512 VNNI, built with it and
without AMX; else ~/.cache/lockstep/llama-cpu-avx2). The sdist comes from --llama-src (the
sdist .tar.gz, its extracted folder, or a llama.cpp tree) or `pip download`.

usage: python3 bench/bench_cpu.py [--build build/release] [--model PATH] [--threads 1,2]
                                  [--reps 5] [--llama DIR] [--llama-src PATH]
Prints a markdown table last.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_name  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.path.expanduser("~/.cache/lockstep")
SDIST = "llama-cpp-python==0.3.36"


def cpu_has_avx512_vnni():
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni"))


def llama_source(src):
    """A llama.cpp source folder: from --llama-src, or the sdist fetched with pip."""
    if src and os.path.isdir(src):
        vend = os.path.join(src, "vendor", "llama.cpp")
        return vend if os.path.isdir(vend) else src
    if not src:
        dl = os.path.join(CACHE, "sdist")
        found = glob.glob(os.path.join(dl, "llama_cpp_python-0.3.36.tar.gz"))
        if not found:
            os.makedirs(dl, exist_ok=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", dl,
                            SDIST], check=True)
            found = glob.glob(os.path.join(dl, "llama_cpp_python-0.3.36.tar.gz"))
        src = found[0]
    out = os.path.join(CACHE, "sdist", "llama_cpp_python-0.3.36")
    if not os.path.isdir(out):
        with tarfile.open(src) as t:
            try:  # the "data" filter refuses links and paths out of the folder (Python >= 3.11.4)
                t.extractall(os.path.dirname(out), filter="data")
            except TypeError:  # older Pythons (Debian 12's 3.11.2): the sdist from PyPI as it is
                t.extractall(os.path.dirname(out))
    return os.path.join(out, "vendor", "llama.cpp")


def llama_bench_binary(a):
    avx512 = cpu_has_avx512_vnni()
    d = a.llama or os.path.join(CACHE, "llama-cpu-avx512" if avx512 else "llama-cpu-avx2")
    lb = os.path.join(d, "llama-bench")
    if not os.access(lb, os.X_OK):
        cmd = ["bash", os.path.join(ROOT, "scripts", "build-llama-cuda.sh"), llama_source(a.llama_src), d, "--cpu",
               "--targets", "llama-bench llama-lookup llama-server"]
        if avx512:
            cmd.append("--avx512")
        print("building llama.cpp once:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
    return lb


def run_llama_bench(lb, model, threads, reps):
    out = subprocess.run([lb, "-m", model, "-t", str(threads), "-r", str(reps), "-p", "512", "-n", "128", "-o",
                          "json"], check=True, capture_output=True, text=True).stdout
    res = {}
    for row in json.loads(out):
        key = "pp" if row["n_prompt"] > 0 else "tg"
        res[key] = float(row["avg_ts"])
    return res


def run_lockstep(ls, model, threads, reps, extra):
    out = subprocess.run([ls, "bench", "--device", "cpu", "-m", model, "-t", str(threads), "-r", str(reps)] + extra,
                         check=True, capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=([^\s]+)", out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--model", default=os.path.join(CACHE, "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--llama", help="folder holding llama-bench (scripts/build-llama-cuda.sh --cpu output)")
    ap.add_argument("--llama-src", help="llama-cpp-python 0.3.36 sdist (.tar.gz or folder) or a llama.cpp tree")
    a = ap.parse_args()
    ls = os.path.join(a.build, "lockstep")
    lb = llama_bench_binary(a)
    threads = [int(t) for t in a.threads.split(",")]

    sr = subprocess.run([os.path.join(a.build, "lockstep-stream-read")] + [str(t) for t in threads], check=True,
                        capture_output=True, text=True).stdout
    bw = {int(t): float(g) for t, g in re.findall(r"threads=(\d+) read_gb_s=([\d.]+)", sr)}

    rows = []
    for t in threads:
        lc = run_llama_bench(lb, a.model, t, a.reps)
        k4 = run_lockstep(ls, a.model, t, a.reps, ["-k", "4"])
        k8 = run_lockstep(ls, a.model, t, a.reps, ["-k", "8", "-p", "64", "-n", "32"])
        wbytes = float(k4["weight_gib"]) * (1 << 30)
        roof = bw[t] * 1e9 / wbytes
        rows.append((t, float(k4["prefill_tok_s"]), lc["pp"], float(k4["decode_tok_s"]), lc["tg"], roof,
                     float(k4["verify_over_step"]), float(k8["verify_over_step"]), bw[t], k4.get("backend")))

    lbv = os.path.realpath(lb)
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; model {os.path.basename(a.model)}; reps={a.reps}; "
          f"llama.cpp: {lbv}; lockstep backend={rows[0][9]}")
    print()
    print("| threads | lockstep pp512 | llama.cpp pp512 | ratio | lockstep tg128 | llama.cpp tg128 | ratio | "
          "stream GB/s | roofline tok/s | lockstep % roofline | llama.cpp % roofline | verify K=4 / step | "
          "verify K=8 / step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t, lpp, cpp, ltg, ctg, roof, v4, v8, b, _ in rows:
        print(f"| {t} | {lpp:.1f} | {cpp:.1f} | {lpp / cpp:.2f}x | {ltg:.1f} | {ctg:.1f} | {ltg / ctg:.2f}x | "
              f"{b:.1f} | {roof:.1f} | {100 * ltg / roof:.0f}% | {100 * ctg / roof:.0f}% | {v4:.2f} | {v8:.2f} |")


if __name__ == "__main__":
    main()
