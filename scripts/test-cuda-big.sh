#!/usr/bin/env bash
# Large geometries on the GPU (docs/large_models.md, docs/cuda.md 5): writes random-weight
# checkpoints of Gemma 4 31B (QAT layout) + its assistant and of Gemma 3 27B Q4_K_M with
# lockstep-gen-model, then checks exactness where the original bug showed (head dim 512,
# k_eq_v, 8-bit MLP dispatch) and measures decode against the memory roofline.
#
#   bash scripts/test-cuda-big.sh [--dir /tmp/big] [--layers 12] [--full] [--like TEMPLATE.gguf]
#                                 [--llama DIR]
# --llama DIR (scripts/build-llama-cuda.sh's output): with --full, llama.cpp's CUDA llama-bench
# on the same 27B GGUF in the same run, and the ratios.
#
# Needs build/cuda/lockstep and build/cuda/lockstep-gen-model (cmake --preset cuda, or a pack of
# a build made elsewhere: scripts/gpu-pack.sh). --full
# also writes and benchmarks the whole 60-layer 31B (27.7 GB) and the 62-layer 27B GGUF.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=/tmp/big
LAYERS=12
FULL=0
LLAMA=""
LIKE=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    --full) FULL=1; shift ;;
    --like) LIKE=$2; shift 2 ;;
    --llama) LLAMA=$2; shift 2 ;;
    *) echo "usage: $0 [--dir D] [--layers N] [--full] [--like GGUF] [--llama DIR]"; exit 2 ;;
  esac
done
if [ -d .gpu/debs ] && [ ! -d .gpu/root ]; then for f in .gpu/debs/*.deb; do dpkg -x "$f" .gpu/root; done; fi
[ -d .gpu/root ] && export LD_LIBRARY_PATH="$ROOT/.gpu/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
CLI=$ROOT/build/cuda/lockstep
GEN=$ROOT/build/cuda/lockstep-gen-model
export LOCKSTEP_PROBE_CACHE=0
mkdir -p "$DIR"
ROWS=()
FAIL=0
row() { ROWS+=("$(printf '%-50s %s' "$1" "$2")"); echo "== $1: $2"; }
check() {
  local name=$1; shift
  if "$@" >"$DIR/out" 2>&1; then row "$name" PASS; else row "$name" FAIL; FAIL=1; tail -5 "$DIR/out"; fi
}
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2"; }

# copy bandwidth of this GPU, measured now (the roofline's denominator)
BW=$(python3 - <<'PY' 2>/dev/null
import torch
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10): y.copy_(x)
e.record(); torch.cuda.synchronize()
print(f"{2 * x.numel() * 10 / (s.elapsed_time(e) / 1e3) / 1e9:.0f}")
PY
)
row "device-to-device copy GB/s (read+write)" "${BW:-?}"

T=$DIR/g4-31b-L$LAYERS
A=$DIR/g4-31b-assistant
t0=$(date +%s)
[ -f "$T/config.json" ] || "$GEN" --kind gemma4-31b-qat "$T" --layers "$LAYERS" >/dev/null
[ -f "$A/config.json" ] || "$GEN" --kind gemma4-31b-assistant "$A" >/dev/null
row "wrote 31B-geometry L$LAYERS + assistant" "$(( $(date +%s) - t0 )) s, $(du -sh "$T" | cut -f1)"

# exactness at the geometry that showed the bug
probe_k() { local k; for k in "$@"; do "$CLI" probe --device cuda -m "$T" --draft-block-size "$k" || return 1; done; }
check "probe 31B-geometry L$LAYERS, K=2,4,8,16" probe_k 2 4 8 16
# prefill (the block tiles from 48 rows, mmq_tile.cu), chain (the one-row kernels), prefill:64
# and prefill:7 (the small-M kernel), prefill:3 (its paired-plane form for up to 4 rows) over a
# ~780-token prompt: the same bytes
logits_modes() {
  local m=$1 mode ok=0 prompt
  prompt=$(for i in $(seq 1 60); do printf 'The quick brown fox %d jumps over the lazy dog. ' "$i"; done)
  for mode in prefill chain prefill:64 prefill:7 prefill:3; do
    "$CLI" logits --device cuda -m "$m" -p "$prompt" --mode "$mode" -o "$DIR/l_$mode.f32" 2>"$DIR/lerr" ||
      { cat "$DIR/lerr"; rm -f "$DIR"/l_*.f32; return 1; }
  done
  for mode in chain prefill:64 prefill:7 prefill:3; do
    cmp -s "$DIR/l_prefill.f32" "$DIR/l_$mode.f32" || { echo "$mode differs from prefill"; ok=1; }
  done
  rm -f "$DIR"/l_*.f32
  return $ok
}
check "logits modes identical, 31B geom L$LAYERS, ~780 tok" logits_modes "$T"
spec_same() {
  local t
  for t in 0 0.8; do
    "$CLI" run --device cuda -m "$T" -c 2048 -f bench/prompts/edit_code.txt -n 64 --temp $t --seed 5 --ignore-eos >"$DIR/plain" 2>/dev/null || return 1
    "$CLI" run --device cuda -m "$T" -c 2048 -f bench/prompts/edit_code.txt -n 64 --temp $t --seed 5 --ignore-eos \
      --model-draft "$A" --draft-block-size 4 --stats >"$DIR/spec" 2>"$DIR/spec.err" || { cat "$DIR/spec.err"; return 1; }
    cmp -s "$DIR/plain" "$DIR/spec" || { echo "T=$t differs"; return 1; }
  done
  grep "lockstep stats" "$DIR/spec.err" | tail -1
}
check "run --draft assistant == plain (31B geom, T 0/0.8)" spec_same
grep -o "speculative=[^ ]*\|acceptance_rate=[^ ]*\|verify_ms=[^ ]*\|draft_ms=[^ ]*" "$DIR/spec.err" 2>/dev/null | tr '\n' ' '; echo

# decode, verify block, prefill at this depth
"$CLI" bench --device cuda -m "$T" -p 512 -n 64 -r 2 --verify 4 >"$DIR/b" 2>/dev/null
row "31B L$LAYERS decode tok/s, weight GB/s" "$(kv decode_tok_s "$DIR/b") tok/s, $(kv decode_weight_gb_s "$DIR/b") GB/s of ${BW:-?}"
row "31B L$LAYERS verify(4) / one-token step" "$(kv verify4_ms "$DIR/b") ms / $(kv step_ms "$DIR/b") ms = $(kv verify_over_step "$DIR/b")x"
row "31B L$LAYERS prefill tok/s (512)" "$(kv prefill_tok_s "$DIR/b")"

# the server on the GPU: one seeded request alone == with 15 others in flight
check "serve --parallel 16: alone == batched (no drafter)" python3 tests/server/check_concurrent_exact.py \
  --lockstep "$CLI" --model "$T" --n 16 --tokens 64 -- --device cuda -c 2048
check "serve --parallel 16: alone == batched (assistant)" python3 tests/server/check_concurrent_exact.py \
  --lockstep "$CLI" --model "$T" --n 16 --tokens 64 -- --device cuda -c 2048 --model-draft "$A" --draft-block-size 4

if [ $FULL = 1 ]; then
  F=$DIR/g4-31b-full
  t0=$(date +%s)
  [ -f "$F/config.json" ] || "$GEN" --kind gemma4-31b-qat "$F" >/dev/null
  row "wrote 31B-geometry full (60 layers)" "$(( $(date +%s) - t0 )) s, $(du -sh "$F" | cut -f1)"
  "$CLI" bench --device cuda -m "$F" -p 128 -n 32 -r 2 --verify 4 >"$DIR/bf" 2>"$DIR/bf.err" || tail -3 "$DIR/bf.err"
  row "31B full decode tok/s, weight GB/s" "$(kv decode_tok_s "$DIR/bf") tok/s, $(kv decode_weight_gb_s "$DIR/bf") GB/s of ${BW:-?}"
  row "31B full verify(4) / one-token step" "$(kv verify4_ms "$DIR/bf") ms / $(kv step_ms "$DIR/bf") ms = $(kv verify_over_step "$DIR/bf")x"
  # the same after 8,192 tokens of context: attention's share grows with it (docs/benchmarks.md, 24th CUDA run)
  "$CLI" bench --device cuda -m "$F" -p 128 -d 8192 -n 32 -r 1 --verify 4 >"$DIR/bd" 2>"$DIR/bd.err" || tail -3 "$DIR/bd.err"
  row "31B full at 8192 tokens of context: decode tok/s" "$(kv decode_tok_s "$DIR/bd") tok/s"
  row "31B full at 8192 tokens: verify(4) / step" "$(kv verify4_ms "$DIR/bd") ms / $(kv step_ms "$DIR/bd") ms = $(kv verify_over_step "$DIR/bd")x"
  rm -rf "$F"
  if [ -f "$LIKE" ]; then
    G3=$DIR/g3-27b.gguf
    "$GEN" --kind gemma3-27b-q4km "$G3" --like "$LIKE" >/dev/null
    check "logits modes identical, 27B Q4_K_M, ~780 tok" logits_modes "$G3"
    "$CLI" bench --device cuda -m "$G3" -p 512 -n 128 -r 2 >"$DIR/b3" 2>"$DIR/b3.err" || tail -3 "$DIR/b3.err"
    pp=$(kv prefill_tok_s "$DIR/b3"); tg=$(kv decode_tok_s "$DIR/b3")
    row "Gemma 3 27B Q4_K_M pp512 / tg128 tok/s" "$pp / $tg ($(kv decode_weight_gb_s "$DIR/b3") GB/s)"
    LB=""
    for c in "$LLAMA/llama-bench" "$LLAMA/bin/llama-bench" "$LLAMA/build/bin/llama-bench"; do [ -n "$LLAMA" ] && [ -x "$c" ] && LB=$c && break; done
    if [ -n "$LB" ]; then
      "$LB" -m "$G3" -ngl 99 -p 512 -n 128 -r 2 -o csv >"$DIR/lb3" 2>/dev/null
      row "llama.cpp 27B pp512 / tg128, lockstep ratio" "$(python3 - "$DIR/lb3" "$pp" "$tg" <<'PY'
import csv, sys
pp = tg = None
for r in csv.DictReader(open(sys.argv[1])):
    if r.get("n_prompt") == "512" and r.get("n_gen") == "0": pp = float(r["avg_ts"])
    if r.get("n_prompt") == "0" and r.get("n_gen") == "128": tg = float(r["avg_ts"])
print(f"{pp:.0f} / {tg:.1f}; lockstep/llama.cpp pp {float(sys.argv[2])/pp:.2f}x tg {float(sys.argv[3])/tg:.2f}x" if pp and tg else "failed")
PY
)"
    fi
  fi
fi

echo
echo "==================== lockstep CUDA large-geometry summary ===================="
for r in "${ROWS[@]}"; do echo "$r"; done
exit $FAIL
