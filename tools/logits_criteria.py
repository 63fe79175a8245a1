#!/usr/bin/env python3
"""Logits criteria (a) and (b) against llama.cpp: regenerate the committed goldens and measure.

  python3 tools/logits_criteria.py --llama /tmp/llcpu --build build/lc
      [--model ~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf] [--threads 2] [--work DIR] [--keep]
      [--exact-gelu DIR] [--no-write]

--llama DIR: a llama.cpp CPU build made by
  `bash scripts/build-llama-cuda.sh SRC DIR --cpu --targets llama-quantize` (DIR/src, DIR/build,
  DIR/llama-logits; llama-quantize in DIR or DIR/build/bin).
--build DIR: a lockstep build (DIR/lockstep, DIR/lockstep-gguf-f32, DIR/lockstep-logits-criteria;
  the last two are built with the tests, from tools/logits_criteria/).
--exact-gelu DIR: where the exact-GELU variant of that llama.cpp build lives (default
  <--llama>-exact-gelu); made on first use (a copy of DIR/src with `#define GGML_GELU_FP16`
  commented out in ggml/src/ggml-cpu/vec.h, libggml-cpu rebuilt with the same flags, the other
  libraries and llama-logits copied from DIR; ~3 minutes on 2 cores).

Why two llama.cpps. llama.cpp's CPU backend computes GELU by rounding its input to f16 and
reading a 65536-entry f16 table (GGML_GELU_FP16 in vec.h; its CUDA backend computes it in f32).
On the F32 copy that table alone moves llama.cpp's logits by a median relative L2 of ~1e-3 (this
script measures it: "stock vs exact-GELU llama.cpp"), as much as criterion (a)'s whole budget,
while lockstep computes GELU in f32. Criterion (a) is therefore asserted against llama.cpp with
the table compiled out (everything else stock: f16 KV cache, flash attention off); lockstep's
distance to stock llama.cpp is measured, stored and printed beside it.

What it does, in one run (the numbers do not depend on machine load; the times do):
 1. Token ids: the first N_TOKENS ids of tests/data/logits_criteria/prompt.txt (the start of
    docs/design.md) as `lockstep tokenize` gives them (BOS first); both engines get these ids.
 2. The F32 copy: llama.cpp's `llama-quantize --allow-requantize MODEL F32.gguf F32`. Its weights
    digest (lockstep-gguf-f32 --digest) must equal the digest of MODEL's weights dequantized by
    lockstep and of lockstep-gguf-f32's own copy (the one CI makes), so both engines and CI run
    the same float32 weights; the script also says whether the two files are byte identical.
 3. llama.cpp (llama-logits, CPU only, -ngl 0, f16 KV cache): the F32 copy on exact-GELU
    llama.cpp (FA off) and on stock llama.cpp (FA off and on), the quantized model on stock
    llama.cpp (FA off and on).
 4. The golden (tests/data/logits_criteria/golden.bin): the ids, the digest, and per position of
    four of those runs (exact-GELU F32 FA off, quantized FA off, quantized FA on, stock F32 FA
    off) the argmax, runner-up, norm and a 128-bucket count-sketch (README next to the golden).
 5. lockstep logits on its own F32 copy and on the quantized model; exact full-row comparisons
    (`lockstep-logits-criteria compare`) and the CI checks on the new golden
    (`lockstep-logits-criteria check`, what tests/logits_criteria.sh runs); a summary table for
    docs/benchmarks.md.
Python standard library only; the arithmetic is in tools/logits_criteria/logits_criteria.c.
"""
import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "logits_criteria")
N_TOKENS = 1536  # >= 1500 positions, 1024 of them past the 512-token sliding window


def run(cmd, **kw):
    print("+ " + " ".join(cmd if len(" ".join(cmd)) < 400 else cmd[:6] + ["..."]), flush=True)
    t0 = time.time()
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        sys.exit("command failed (%d): %s" % (r.returncode, " ".join(cmd[:6])))
    return r, time.time() - t0


def out(cmd):
    r, _ = run(cmd, stdout=subprocess.PIPE, text=True)
    return r.stdout


def compare(tool, a, b):
    text = out([tool, "compare", a, b])
    print(text, end="")
    m = re.search(r"^result (.*)$", text, re.M)
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def build_exact_gelu(llama, dest):
    """llama.cpp with GGML_GELU_FP16 off: only libggml-cpu differs from the stock build."""
    lib = os.path.join(dest, "bin", "llama-logits")
    if os.path.exists(lib):
        return lib
    src, flags = os.path.join(llama, "src"), os.path.join(llama, "build", ".flags")
    if not (os.path.isdir(src) and os.path.exists(flags)):
        sys.exit("--llama %s is not a scripts/build-llama-cuda.sh folder (no src/ or build/.flags)" % llama)
    with open(flags) as f:
        cmake_flags = f.read().split("\n")[1].split()
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, os.path.join(dest, "src"), symlinks=True)
    vec = os.path.join(dest, "src", "ggml", "src", "ggml-cpu", "vec.h")
    with open(vec) as f:
        text = f.read()
    if "\n#define GGML_GELU_FP16\n" not in text:
        sys.exit(vec + ": no '#define GGML_GELU_FP16' line to turn off")
    with open(vec, "w") as f:
        f.write(text.replace("\n#define GGML_GELU_FP16\n", "\n/* #define GGML_GELU_FP16: off, exact GELU */\n", 1))
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    run(["cmake", "-S", os.path.join(dest, "src"), "-B", os.path.join(dest, "build")] + gen + cmake_flags,
        stdout=subprocess.DEVNULL)
    run(["cmake", "--build", os.path.join(dest, "build"), "--target", "ggml-cpu", "-j", str(os.cpu_count() or 2)],
        stdout=subprocess.DEVNULL)
    stock_bin = os.path.dirname(os.path.realpath(os.path.join(llama, "llama-logits")))
    shutil.copytree(stock_bin, os.path.join(dest, "bin"), symlinks=True)
    built = os.path.join(dest, "build", "bin")
    for f in os.listdir(built):
        if f.startswith("libggml-cpu.so") and not os.path.islink(os.path.join(built, f)):
            shutil.copy2(os.path.join(built, f), os.path.join(dest, "bin", f))
    return lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama", required=True, help="llama.cpp CPU build folder (scripts/build-llama-cuda.sh --cpu)")
    ap.add_argument("--llama-logits")
    ap.add_argument("--llama-quantize")
    ap.add_argument("--build", required=True, help="lockstep build folder")
    ap.add_argument("--model", default=os.environ.get(
        "LOCKSTEP_MODEL", os.path.expanduser("~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", help="scratch folder (default: a new one under $TMPDIR; needs ~10 GB)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--exact-gelu", help="exact-GELU llama.cpp folder (default: <--llama>-exact-gelu; built if absent)")
    ap.add_argument("--no-write", action="store_true", help="write the golden into the scratch folder only")
    a = ap.parse_args()

    ll_logits = a.llama_logits or os.path.join(a.llama, "llama-logits")
    ll_quant = a.llama_quantize or next(
        (p for p in (os.path.join(a.llama, "llama-quantize"), os.path.join(a.llama, "build", "bin", "llama-quantize"))
         if os.path.exists(p)), os.path.join(a.llama, "llama-quantize"))
    lockstep = os.path.join(a.build, "lockstep")
    f32tool = os.path.join(a.build, "lockstep-gguf-f32")
    crit = os.path.join(a.build, "lockstep-logits-criteria")
    for p in (ll_logits, ll_quant, lockstep, f32tool, crit, a.model):
        if not os.path.exists(p):
            sys.exit("missing: " + p)
    ll_exact = build_exact_gelu(a.llama, a.exact_gelu or os.path.abspath(a.llama).rstrip("/") + "-exact-gelu")
    work = a.work or tempfile.mkdtemp(prefix="lockstep-criteria.")
    os.makedirs(work, exist_ok=True)
    W = lambda name: os.path.join(work, name)
    golden = W("golden.bin") if a.no_write else os.path.join(DATA, "golden.bin")
    times = {}
    try:
        # 1. ids
        ids = out([lockstep, "tokenize", "-m", a.model, "-f", os.path.join(DATA, "prompt.txt")]).split()
        if len(ids) < N_TOKENS:
            sys.exit("prompt.txt has %d tokens, need %d" % (len(ids), N_TOKENS))
        ids = ids[:N_TOKENS]
        with open(W("tokens.txt"), "w") as f:
            f.write(" ".join(ids) + "\n")

        # 2. F32 copies and digests
        _, times["llama-quantize F32"] = run([ll_quant, "--allow-requantize", a.model, W("llama-f32.gguf"), "F32"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        d_llama = out([f32tool, "--digest", W("llama-f32.gguf")]).strip()
        d_model = out([f32tool, "--digest", a.model]).strip()
        t0 = time.time()
        d_ours = out([f32tool, a.model, W("lockstep-f32.gguf")]).strip()
        times["lockstep-gguf-f32"] = time.time() - t0
        identical = filecmp.cmp(W("llama-f32.gguf"), W("lockstep-f32.gguf"), shallow=False)
        print("weights digest: llama-quantize F32 %s, model dequantized by lockstep %s, lockstep-gguf-f32 copy %s; "
              "the two F32 files are %s" % (d_llama, d_model, d_ours,
                                            "byte identical" if identical else "NOT byte identical"))
        if not (d_llama == d_model == d_ours):
            sys.exit("the F32 weights differ: lockstep's dequantizers do not match llama.cpp's")

        # 3. llama.cpp
        runs = {"f32-exact-off": (ll_exact, W("llama-f32.gguf"), "off"),
                "f32-off": (ll_logits, W("llama-f32.gguf"), "off"), "f32-on": (ll_logits, W("llama-f32.gguf"), "on"),
                "q-off": (ll_logits, a.model, "off"), "q-on": (ll_logits, a.model, "on")}
        for name, (binary, model, fa) in runs.items():
            _, times["llama-logits " + name] = run(
                [binary, "-m", model, "--tokens-file", W("tokens.txt"), "-ngl", "0", "-t", str(a.threads), "-fa", fa,
                 "-o", W("llama-%s.bin" % name)])

        # 4. golden
        run([crit, "golden", "-o", golden, "--tokens", W("tokens.txt"), "--digest", d_llama,
             "--f32", W("llama-f32-exact-off.bin"), "--q-off", W("llama-q-off.bin"), "--q-on", W("llama-q-on.bin"),
             "--f32-stock", W("llama-f32-off.bin")])

        # 5. lockstep, exact comparisons, the CI checks
        tok_arg = ",".join(ids)
        for name, model in (("f32", W("lockstep-f32.gguf")), ("q", a.model)):
            _, times["lockstep logits " + name] = run(
                [lockstep, "logits", "-m", model, "--device", "cpu", "--tokens", tok_arg, "-t", str(a.threads), "-o",
                 W("lockstep-%s.bin" % name)])
        res = {}
        for key, x, ref in (("a: lockstep vs llama.cpp exact GELU (F32, FA off) [asserted]", "lockstep-f32",
                             "llama-f32-exact-off"),
                            ("a: lockstep vs stock llama.cpp (F32, FA off)", "lockstep-f32", "llama-f32-off"),
                            ("a: lockstep vs stock llama.cpp (F32, FA on)", "lockstep-f32", "llama-f32-on"),
                            ("a: stock vs exact-GELU llama.cpp (F32, FA off)", "llama-f32-off", "llama-f32-exact-off"),
                            ("a: stock llama.cpp F32 FA on vs FA off", "llama-f32-on", "llama-f32-off"),
                            ("b: lockstep vs llama.cpp (Q4_K_M, FA off)", "lockstep-q", "llama-q-off"),
                            ("b: lockstep vs llama.cpp (Q4_K_M, FA on)", "lockstep-q", "llama-q-on"),
                            ("b: llama.cpp Q4_K_M FA on vs FA off", "llama-q-on", "llama-q-off")):
            res[key] = compare(crit, W(x + ".bin"), W(ref + ".bin"))
        checks = {}
        for part in ("f32", "q"):
            r = subprocess.run([crit, "check", golden, part, W("lockstep-%s.bin" % part)], stdout=subprocess.PIPE,
                               text=True)
            print(r.stdout, end="")
            checks[part] = r.returncode == 0

        # summary
        print("\n## Summary (%d positions, %d past the 512-token sliding window; exact, full rows)\n"
              % (N_TOKENS, N_TOKENS - 512))
        print("| comparison | top-1 agreement | disagreements | median rel L2 | past window: top-1 | past window: median"
              " | max rel L2 | sketch est. median |")
        print("|---|---|---|---|---|---|---|---|")
        for key, r in res.items():
            print("| %s | %.2f%% | %d | %.3e | %.2f%% | %.3e | %.3e | %.3e |" % (
                key, 100 * r["agree"] / r["n"], r["n"] - r["agree"], r["median"],
                100 * r["agree_past"] / r["n_past"], r["median_past"], r["max"], r["est_median"]))
        qo, qn = res["b: lockstep vs llama.cpp (Q4_K_M, FA off)"], res["b: lockstep vs llama.cpp (Q4_K_M, FA on)"]
        qp = res["b: llama.cpp Q4_K_M FA on vs FA off"]
        dis = lambda r: r["n"] - r["agree"]
        print("\n(b) ratios, exact: top-1 disagreement %d/%d = %.3f (vs FA off), %d/%d = %.3f (vs FA on); "
              "median rel L2 %.3f (vs FA off), %.3f (vs FA on); limit 1.1"
              % (dis(qo), dis(qp), dis(qo) / max(dis(qp), 1), dis(qn), dis(qp), dis(qn) / max(dis(qp), 1),
                 qo["median"] / qp["median"], qn["median"] / qp["median"]))
        print("CI checks on the golden (sketch estimates): (a) %s, (b) %s"
              % ("PASS" if checks["f32"] else "FAIL", "PASS" if checks["q"] else "FAIL"))
        print("times (s, %d threads): %s" % (a.threads, ", ".join("%s %.1f" % kv for kv in times.items())))
        print("golden: %s (%d bytes)" % (golden, os.path.getsize(golden)))
    finally:
        if a.keep:
            print("scratch folder kept: " + work)
        else:
            for f in os.listdir(work):
                if f == "tokens.txt" or (f.startswith(("llama-", "lockstep-", "golden")) and
                                         f.endswith((".bin", ".gguf"))):
                    os.remove(os.path.join(work, f))
            if not a.work:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
