#!/usr/bin/env bash
# GPU tests and benchmarks, end to end, on a machine with an NVIDIA GPU (docs/cuda.md).
#
#   bash scripts/test-cuda.sh [--model GGUF] [--llama DIR] [--big DIR] [--quick]
#
# Builds the `cuda` preset unless build/cuda/lockstep exists (a machine without
# libcjson/libmicrohttpd headers can run a build made elsewhere: Debian runtime packages
# under .gpu/debs are unpacked into .gpu/root and put on LD_LIBRARY_PATH), then:
#   1. kernel and backend tests on the GPU (tests/cuda/*, test_backend_ops)
#   2. exactness: `lockstep logits --device cuda` prefill / chain / prefill:7 / prefill:64
#      over a ~1000-token prompt (past the sliding window) memcmp-identical; graph replay ==
#      direct launches; the same on the Gemma 4 fixtures
#   3. `lockstep probe --device cuda` at K = 2..16; a fault injected on the GPU path is named
#   4. speculative output byte-identical to plain decoding (ngram, model drafts; T = 0, 0.8)
#   5. accuracy: GPU logits vs the committed transformers / mlx-lm goldens on every fixture;
#      GPU vs CPU lockstep logits on the prompt of 2., and with --llama DIR the same
#      measurement for llama.cpp (its CUDA vs its own CPU logits, llama-logits, on the token ids
#      lockstep evaluated) plus lockstep vs llama.cpp on each device
#   6. speed: lockstep bench --device cuda next to llama.cpp's CUDA llama-bench (--llama DIR:
#      the output folder of scripts/build-llama-cuda.sh, holding llama-bench, llama-server,
#      llama-logits) on the same file; with --llama, bench/bench_server.py: lockstep serve
#      --parallel 32 vs llama-server -np 32 -ngl 99, 32 streams, aggregate tok/s and the ratio
#   7. big-model geometry (--big DIR from lockstep-gen-model): probe and decode/verify cost
# and prints a table last. Exit status: non-zero when any exactness or accuracy check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
LLAMA=""
BIG=""
QUICK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --llama) LLAMA=$2; shift 2 ;;
    --big) BIG=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "usage: $0 [--model GGUF] [--llama DIR] [--big DIR] [--quick]"; exit 2 ;;
  esac
done
B=$ROOT/build/cuda
if [ -d .gpu/debs ] && [ ! -d .gpu/root ]; then
  for f in .gpu/debs/*.deb; do dpkg -x "$f" .gpu/root; done
fi
[ -d .gpu/root ] && export LD_LIBRARY_PATH="$ROOT/.gpu/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
if [ ! -x "$B/lockstep" ]; then
  cmake --preset cuda >/dev/null && cmake --build --preset cuda || { echo "build failed"; exit 1; }
fi
CLI=$B/lockstep
DATA=$ROOT/tests/data
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
export LOCKSTEP_PROBE_CACHE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'

ROWS=()
FAIL=0
row() { ROWS+=("$(printf '%-52s %s' "$1" "$2")"); echo "== $1: $2"; }
llama_bin() { # NAME: path of llama.cpp's NAME in --llama DIR (DIR/NAME, DIR/bin/NAME, DIR/build/bin/NAME)
  local d
  [ -n "$LLAMA" ] || return 1
  for d in "$LLAMA" "$LLAMA/bin" "$LLAMA/build/bin"; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}
agree() { # a.f32 b.f32: teacher-forced top-1 agreement and rel L2 of a's logits rows against b's
  python3 - "$1" "$2" <<'PY'
import sys, numpy as np
g = np.fromfile(sys.argv[1], dtype='<f4'); c = np.fromfile(sys.argv[2], dtype='<f4')
v = 262144; n = g.size // v
if g.size != c.size or g.size == 0 or g.size % v:
    sys.exit(print(f"size mismatch: {g.size / v} vs {c.size / v} rows of {v}"))
g = g.reshape(n, v); c = c.reshape(n, v)
rel = np.linalg.norm(g - c, axis=1) / np.linalg.norm(c, axis=1)
print(f"{n} positions: top-1 agreement {(g.argmax(1) == c.argmax(1)).mean()*100:.2f}%, median rel L2 {np.median(rel):.2e}, max {rel.max():.2e}")
PY
}
check() { # name, command...: PASS/FAIL row from the exit status
  local name=$1; shift
  if "$@" >"$TMP/out" 2>&1; then row "$name" PASS; else row "$name" FAIL; FAIL=1; tail -5 "$TMP/out"; fi
}

# ---- 1. kernels and backend ops on the GPU ----------------------------------------------
for t in "$B"/tests/cuda/test_cuda_*; do
  [ -x "$t" ] && check "unit $(basename "$t")" "$t"
done
[ -x "$B/tests/test_backend_ops" ] && check "backend conformance (cpu + cuda)" "$B/tests/test_backend_ops"

# ---- 2. logits exactness ------------------------------------------------------------------
prompt=$(for i in $(seq 1 80); do printf 'The quick brown fox %d jumps over the lazy dog. ' "$i"; done)
logits_modes() { # model, args..., writes $TMP/<mode>.f32, compares
  local m=$1; shift
  local ok=0
  for mode in prefill chain prefill:7 prefill:64; do
    "$CLI" logits --device cuda -m "$m" "$@" --mode "$mode" -o "$TMP/$mode.f32" 2>"$TMP/err" || { cat "$TMP/err"; return 1; }
  done
  for mode in chain prefill:7 prefill:64; do
    cmp -s "$TMP/prefill.f32" "$TMP/$mode.f32" || { echo "$mode differs from prefill"; ok=1; }
  done
  return $ok
}
if [ -f "$MODEL" ]; then
  check "logits modes identical, default model, 1000 tok" logits_modes "$MODEL" -p "$prompt"
  cp "$TMP/prefill.f32" "$TMP/graph.f32" 2>/dev/null
  # GPU vs CPU lockstep on the same ~1000 positions (teacher-forced: the prompt's own tokens)
  "$CLI" logits --device cpu -m "$MODEL" -p "$prompt" --mode prefill -o "$TMP/cpu.f32" 2>/dev/null
  row "GPU vs CPU lockstep logits (default model)" "$(agree "$TMP/graph.f32" "$TMP/cpu.f32")"
  # the same for llama.cpp (--llama DIR): its CUDA logits vs its own pure-CPU logits (no device,
  # no op offload), teacher-forced on the token ids lockstep evaluated (lockstep tokenize of the
  # same prompt), and each engine against the other on the same device
  if LLOGITS=$(llama_bin llama-logits); then
    "$CLI" tokenize -m "$MODEL" -p "$prompt" >"$TMP/ids" 2>"$TMP/err" || cat "$TMP/err"
    ll_ok=1
    for ngl in 99 0; do
      "$LLOGITS" -m "$MODEL" --tokens-file "$TMP/ids" -ngl $ngl -o "$TMP/llama-ngl$ngl.f32" 2>"$TMP/llerr" \
        || { ll_ok=0; tail -5 "$TMP/llerr"; }
      grep '^llama-logits:' "$TMP/llerr"
    done
    if [ $ll_ok = 1 ]; then
      row "GPU vs CPU llama.cpp logits (default model)" "$(agree "$TMP/llama-ngl99.f32" "$TMP/llama-ngl0.f32")"
      row "lockstep vs llama.cpp logits, CPU" "$(agree "$TMP/cpu.f32" "$TMP/llama-ngl0.f32")"
      row "lockstep vs llama.cpp logits, GPU" "$(agree "$TMP/graph.f32" "$TMP/llama-ngl99.f32")"
    else
      row "GPU vs CPU llama.cpp logits (default model)" "failed (llama-logits, see above)"
    fi
    rm -f "$TMP"/llama-ngl*.f32
  fi
  LOCKSTEP_CUDA_GRAPHS=0 "$CLI" logits --device cuda -m "$MODEL" -p "$prompt" --mode chain -o "$TMP/nograph.f32" 2>/dev/null
  check "graph replay == direct launches (chain)" cmp -s "$TMP/graph.f32" "$TMP/nograph.f32"
fi
for fx in gemma3_text gemma4_dense gemma4_ple gemma4_moe gemma4_dense_mlx_q4_mlp8 gemma4_moe_mlx_q4 gemma4_ple_mlx_q4 \
          gemma4_dense_h96_mlx_q4 gemma3_text_mlx_q4; do
  d=$DATA/hf/$fx
  toks=$(od -An -v -t d4 -N 160 "$d/golden/tokens.i32" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
  check "logits modes identical, $fx" logits_modes "$d" --tokens "$toks"
  # ---- 5. accuracy vs the reference goldens (row 0 of the golden = these 40 tokens)
  if python3 -c 'import numpy' 2>/dev/null; then
    acc=$(python3 - "$TMP/prefill.f32" "$d/golden/logits.f32" <<'PY'
import sys, numpy as np
got = np.fromfile(sys.argv[1], dtype='<f4'); ref = np.fromfile(sys.argv[2], dtype='<f4')
n = 40; v = got.size // n
got = got.reshape(n, v); ref = ref[: n * v].reshape(n, v)
rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
top = (got.argmax(1) == ref.argmax(1)).mean()
print(f"{rel.max():.2e} {top*100:.1f}")
PY
)
    rel=${acc% *}; top=${acc#* }
    if python3 -c "import sys; sys.exit(0 if float('$rel') <= 1e-2 and float('$top') >= 99 else 1)"; then
      row "accuracy vs golden, $fx" "PASS max rel L2 $rel, top-1 $top%"
    else
      row "accuracy vs golden, $fx" "FAIL max rel L2 $rel, top-1 $top%"; FAIL=1
    fi
  fi
done

# ---- 3. probe ------------------------------------------------------------------------------
probe_all() { # model: K = 2..16 must pass
  local m=$1 k
  for k in $(seq 2 16); do
    "$CLI" probe --device cuda -m "$m" --draft-block-size $k >"$TMP/p" 2>&1 || { echo "K=$k"; cat "$TMP/p"; return 1; }
  done
}
[ -f "$MODEL" ] && check "probe K=2..16, default model" probe_all "$MODEL"
[ $QUICK = 1 ] || for fx in gemma4_dense gemma4_moe gemma4_dense_mlx_q4_mlp8; do
  check "probe K=2..16, $fx" probe_all "$DATA/hf/$fx"
done
if [ -f "$MODEL" ]; then
  LOCKSTEP_TEST_FAULT=5:mlp "$CLI" probe --device cuda -m "$MODEL" --draft-block-size 4 >"$TMP/f" 2>&1
  if grep -q "layer 5 .*mlp" "$TMP/f"; then row "probe names injected GPU fault (layer 5 mlp)" PASS
  else row "probe names injected GPU fault (layer 5 mlp)" "FAIL $(tail -1 "$TMP/f")"; FAIL=1; fi
fi

# ---- 4. speculative == plain --------------------------------------------------------------
spec_same() { # model, draft args...: 3 prompts x 256 tokens at T=0 and T=0.8
  local m=$1; shift
  local p t
  for p in bench/prompts/*.txt; do
    for t in 0 0.8; do
      "$CLI" run --device cuda -m "$m" -f "$p" -n 256 --temp $t --seed 11 --ignore-eos >"$TMP/plain" 2>/dev/null || return 1
      "$CLI" run --device cuda -m "$m" -f "$p" -n 256 --temp $t --seed 11 --ignore-eos "$@" >"$TMP/spec" 2>/dev/null || return 1
      cmp -s "$TMP/plain" "$TMP/spec" || { echo "differs: $p T=$t"; return 1; }
    done
  done
}
if [ -f "$MODEL" ]; then
  check "run --draft ngram == plain (3 prompts x256, T 0/0.8)" spec_same "$MODEL" --draft ngram --draft-block-size 4
  check "run --draft model == plain (3 prompts x256, T 0/0.8)" spec_same "$MODEL" --draft model --model-draft "$MODEL" --draft-block-size 4
fi

# ---- 6. speed ------------------------------------------------------------------------------
if [ -f "$MODEL" ]; then
  "$CLI" bench --device cuda -m "$MODEL" >"$TMP/b" 2>/dev/null
  pp=$(sed -n 's/.*prefill_tok_s=\([0-9.]*\).*/\1/p' "$TMP/b"); tg=$(sed -n 's/.*decode_tok_s=\([0-9.]*\).*/\1/p' "$TMP/b")
  row "lockstep cuda default model pp512 / tg128 tok/s" "$pp / $tg"
  if LBENCH=$(llama_bin llama-bench); then
    "$LBENCH" -m "$MODEL" -ngl 99 -p 512 -n 128 -r 5 -o csv >"$TMP/lb" 2>/dev/null
    cmpline=$(python3 - "$TMP/lb" "$pp" "$tg" <<'PY'

import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
pp = tg = None
for r in rows:
    if r.get("n_prompt") == "512" and r.get("n_gen") == "0": pp = float(r["avg_ts"])
    if r.get("n_prompt") == "0" and r.get("n_gen") == "128": tg = float(r["avg_ts"])
if pp and tg:
    print(f"{pp:.0f} / {tg:.0f}; lockstep/llama.cpp pp {float(sys.argv[2])/pp:.2f}x tg {float(sys.argv[3])/tg:.2f}x")
PY
)
    row "llama.cpp cuda pp512 / tg128 tok/s" "$cmpline"
  fi
  # server throughput: 32 streams, 32 slots on both servers, the same file, both on the GPU
  if LSERVER=$(llama_bin llama-server); then
    python3 bench/bench_server.py --device cuda --lockstep "$CLI" --llama-server "$LSERVER" --model "$MODEL" \
      --levels 32 --ls-parallel 32 --threads 0 --json "$TMP/server-32.json"
    srv=$(python3 - "$TMP/server-32.json" <<'PY' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
r = d["ratios"][0] if d.get("ratios") else None
if r:
    print(f"{r['lockstep_tok_s']:.0f} / {r['llama_server_tok_s']:.0f}; lockstep/llama-server {r['ratio']:.2f}x")
else:
    print("failed: " + "; ".join(x["server"] + ": " + x["error"].splitlines()[0][:100] for x in d["runs"] if "error" in x))
PY
)
    row "serve 32 streams tok/s lockstep / llama-server" "${srv:-failed (bench_server.py, see above)}"
  fi
fi

echo
echo "==================== lockstep CUDA summary ===================="
for r in "${ROWS[@]}"; do echo "$r"; done
exit $FAIL
