#!/usr/bin/env bash
# Tensor parallelism on the GPU machine (docs/design.md, "Tensor parallelism"):
#
#   bash scripts/test-tp.sh [--model GGUF] [--tokens N] [--device cuda|cpu]
#
# Builds the `cuda` preset unless build/cuda/lockstep exists (as scripts/test-cuda.sh does),
# puts NCCL on LD_LIBRARY_PATH (the pip package nvidia-nccl-cu13, else the CUDA toolkit's or
# the system's libnccl.so.2: lockstep dlopens "libnccl.so.2" only when -tp is given), then
# checks on the default model, over the first N tokens (default 700, past the 512-token
# sliding window) of tests/data/long_prompt.txt:
#   1. `lockstep logits --device cuda -tp 1` (the tensor-parallel path: NCCL with a
#      communicator of size 1, exact all-reduce) == `lockstep logits --device cuda` (no TP),
#      byte for byte, in modes prefill, chain and prefill:7;
#   2. the same with --tp-reduce plain (ncclAllReduce; one rank: one term, so the same bytes);
#   3. the stderr line naming the NCCL version (proof the NCCL path ran);
#   4. bench tok/s at -tp 1 vs no TP (the cost of the TP path at N = 1: no CUDA graphs, one
#      NCCL all-gather + sum kernel per row-parallel projection), printed, not asserted.
# Prints a table; exits non-zero when any byte comparison fails. --device cpu runs the same
# checks on the CPU (host collective instead of NCCL), for trying the script without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
N=700
DEVICE=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --tokens) N=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    *) echo "usage: $0 [--model GGUF] [--tokens N] [--device cuda|cpu]"; exit 2 ;;
  esac
done
[ -f "$MODEL" ] || { echo "model $MODEL not found (scripts/setup.sh installs it, or --model)"; exit 2; }
B=$ROOT/build/cuda
[ "$DEVICE" = cpu ] && [ -x "$ROOT/build/release/lockstep" ] && [ ! -x "$B/lockstep" ] && B=$ROOT/build/release
if [ -d .gpu/debs ] && [ ! -d .gpu/root ]; then
  for f in .gpu/debs/*.deb; do dpkg -x "$f" .gpu/root; done
fi
[ -d .gpu/root ] && export LD_LIBRARY_PATH="$ROOT/.gpu/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
if [ ! -x "$B/lockstep" ]; then
  cmake --preset cuda >/dev/null && cmake --build --preset cuda || { echo "build failed"; exit 1; }
fi
CLI=$B/lockstep

# NCCL: the first folder holding libnccl.so.2 goes first on the library path.
NCCL_DIR=""
pip_nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
for d in ${pip_nccl:+"$pip_nccl/lib"} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
  if [ -e "$d/libnccl.so.2" ]; then NCCL_DIR=$d; break; fi
done
if [ -n "$NCCL_DIR" ]; then
  export LD_LIBRARY_PATH="$NCCL_DIR:${LD_LIBRARY_PATH:-}"
  echo "nccl: $NCCL_DIR/libnccl.so.2"
else
  echo "nccl: libnccl.so.2 not found (pip install nvidia-nccl-cu13, or libnccl2); the -tp runs will say so"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'

TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
export LOCKSTEP_PROBE_CACHE=0
ROWS=()
FAIL=0
row() { ROWS+=("$(printf '%-58s %s' "$1" "$2")"); echo "== $1: $2"; }
ids=$("$CLI" tokenize -m "$MODEL" -f tests/data/long_prompt.txt | tr ' ' '\n' | awk -v n="$N" 'NR <= n' | paste -sd, -)
count=$(tr ',' '\n' <<<"$ids" | grep -c .)
echo "prompt: $count tokens; device: $DEVICE; lockstep: $CLI"
logits() { # OUT MODE ARGS...: logits of the prompt; stderr kept in OUT.err
  local out=$1 mode=$2; shift 2
  "$CLI" logits -m "$MODEL" --device "$DEVICE" --tokens "$ids" --mode "$mode" -c 2048 -o "$out" "$@" 2>"$out.err"
}

for mode in prefill chain prefill:7; do
  if ! logits "$TMP/plain.bin" "$mode"; then
    row "logits $mode, no TP" "FAIL (did not run: $(tail -1 "$TMP/plain.bin.err"))"; FAIL=1; continue
  fi
  for reduce in exact plain; do
    name="logits $mode: -tp 1 --tp-reduce $reduce == no TP"
    if ! logits "$TMP/tp.bin" "$mode" -tp 1 --tp-reduce "$reduce"; then
      row "$name" "FAIL (did not run: $(tail -1 "$TMP/tp.bin.err"))"; FAIL=1
    elif [ "$mode.$reduce" = prefill.exact ] && ! cp "$TMP/tp.bin.err" "$TMP/exact.err"; then
      row "$name" "FAIL (no stderr kept)"; FAIL=1
    elif cmp -s "$TMP/plain.bin" "$TMP/tp.bin"; then
      row "$name" "PASS ($(sha256sum "$TMP/tp.bin" | cut -c1-16))"
    else
      row "$name" "FAIL ($(cmp "$TMP/plain.bin" "$TMP/tp.bin" | head -1))"; FAIL=1
    fi
  done
done
if [ -f "$TMP/exact.err" ]; then
  line=$(grep -m1 "tensor parallel:" "$TMP/exact.err" || true)
  if [ "$DEVICE" = cuda ] && ! grep -q "NCCL" <<<"$line"; then row "NCCL path taken" "FAIL (no NCCL line on stderr)"; FAIL=1
  else row "collective" "${line#*tensor parallel: }"; fi
fi

# Speed at N = 1 (printed only): decode and prefill tok/s, no TP vs -tp 1.
bench() {
  "$CLI" bench -m "$MODEL" --device "$DEVICE" -p 128 -n 64 -r 3 "$@" 2>/dev/null |
    grep -o 'prefill_tok_s=[^ ]*\|decode_tok_s=[^ ]*\|step_ms=[^ ]*' | paste -sd' ' -
}
row "bench, no TP" "$(bench)"
row "bench, -tp 1 (exact)" "$(bench -tp 1)"
row "bench, -tp 1 --tp-reduce plain" "$(bench -tp 1 --tp-reduce plain)"

echo
echo "==== tensor parallelism ($DEVICE, $(basename "$MODEL"), $count tokens) ===="
printf '%s\n' "${ROWS[@]}"
[ $FAIL -eq 0 ] && echo "ALL PASS" || echo "SOME CHECKS FAILED"
exit $FAIL
