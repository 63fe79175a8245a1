#!/usr/bin/env bash
# Two builds side by side on one GPU, in one run (docs/benchmarks.md: ratios only within a
# run): the integer matmul kernels at 1..8 rows and the 31B-geometry decode / verify step,
# runs of A and B interleaved (A B A B) so that clock and thermal drift fall on both. B's
# exactness is checked in the same run (test_cuda_matmul, the probe at K = 2..16). How the
# session-11 small-kernel numbers were taken (docs/benchmarks.md, eighth CUDA run).
#
#   bash scripts/cuda-ab.sh A_BUILD B_BUILD [--dir /tmp/ab] [--layers 12] [--types "mlx8 mlx4"]
#
# A_BUILD / B_BUILD: build folders with lockstep and tests/cuda/test_cuda_matmul (cmake
# --preset cuda or release with nvcc); B_BUILD also provides lockstep-gen-model.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 A_BUILD B_BUILD [--dir D] [--layers N] [--types \"mlx8 mlx4 q4_k q8_0 q6_k\"]"; exit 2; }
A=$(cd "$1" && pwd) || exit 2
B=$(cd "$2" && pwd) || exit 2
shift 2
DIR=/tmp/ab
LAYERS=12
TYPES="mlx8 mlx4 q4_k q8_0"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    --types) TYPES=$2; shift 2 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
for b in "$A" "$B"; do
  for f in lockstep tests/cuda/test_cuda_matmul; do
    [ -x "$b/$f" ] || { echo "missing $b/$f"; exit 2; }
  done
done
[ -x "$B/lockstep-gen-model" ] || { echo "missing $B/lockstep-gen-model"; exit 2; }
export LOCKSTEP_PROBE_CACHE=0
mkdir -p "$DIR"
ROWS=()
row() { ROWS+=("$(printf '%-44s %s' "$1" "$2")"); }

"$B/tests/cuda/test_cuda_matmul" > "$DIR/test_cuda_matmul.txt" 2>&1
rc=$?
[ $rc -eq 77 ] && { echo "no CUDA device"; exit 77; }
row "B test_cuda_matmul" "$([ $rc -eq 0 ] && echo PASS || echo FAIL) ($(tail -1 "$DIR/test_cuda_matmul.txt"))"

# kernels: every call through the dp4a kernel (policy 1) and the small-M kernel (policy 3)
for t in $TYPES; do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    LS_BENCH_ONLY=$t LS_BENCH_POLICY=13 "$bin/tests/cuda/test_cuda_matmul" --bench 2>&1 |
      grep -v '^device\|^d2d' | sed "s/^/$side /"
  done
done | tee "$DIR/kernels.txt"

M="$DIR/g4-31b-l$LAYERS"
[ -f "$M/config.json" ] || "$B/lockstep-gen-model" --kind gemma4-31b-qat "$M" --layers "$LAYERS" > "$DIR/gen.log" 2>&1 ||
  { echo "lockstep-gen-model failed: $DIR/gen.log"; exit 1; }
field() { grep -o "$1=[^ ]*" | head -1 | cut -d= -f2; }
for side in A B A B; do
  bin=$A; [ $side = B ] && bin=$B
  out=$("$bin/lockstep" bench --device cuda -m "$M" -p 128 -n 32 -r 2 --verify 4 2>/dev/null)
  echo "$side $out" >> "$DIR/e2e.txt"
  row "$side 31B L$LAYERS decode tok/s | verify4/step" "$(echo "$out" | field decode_tok_s) | $(echo "$out" | field verify_over_step)"
done
for k in 2 4 8 16; do
  if "$B/lockstep" probe --device cuda -m "$M" --draft-block-size $k > "$DIR/probe$k.txt" 2>&1; then r=PASS; else r=FAIL; fi
  row "B probe 31B L$LAYERS K=$k" "$r"
done

echo
printf '%s\n' "${ROWS[@]}"
