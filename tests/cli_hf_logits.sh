#!/usr/bin/env bash
# The CLI opens Hugging Face / MLX checkpoint directories like GGUF files: `logits` from
# tests/data/hf/gemma4_dense gives one [n][vocab] f32 block per call, byte-identical across
# prefill / chain / chunked modes, matching the transformers golden (argmax of every row;
# rel L2 when python3 + numpy are around); tokenize and probe work on a directory too.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
DATA=${LOCKSTEP_TEST_DATA:?}
DIR="$DATA/hf/gemma4_dense"
[ -d "$DIR" ] || { echo "skip: no $DIR"; exit 77; }
fail=0
TMPDIR=$(mktemp -d); trap 'rm -rf "$TMPDIR"' EXIT
# sequence 0 of the golden tokens (40 int32)
TOKS=$(od -An -v -t d4 -N 160 "$DIR/golden/tokens.i32" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
for mode in prefill chain prefill:7; do
  if ! "$CLI" logits -m "$DIR" --tokens "$TOKS" --mode "$mode" -t 2 -o "$TMPDIR/$mode.f32" 2>"$TMPDIR/err"; then
    echo "FAIL: logits --mode $mode: $(cat "$TMPDIR/err")"; fail=1
  fi
done
size=$(stat -c %s "$TMPDIR/prefill.f32" 2>/dev/null || echo 0)
[ "$size" -eq $((40 * 512 * 4)) ] || { echo "FAIL: logits file has $size bytes, want $((40 * 512 * 4))"; fail=1; }
cmp -s "$TMPDIR/prefill.f32" "$TMPDIR/chain.f32" || { echo "FAIL: prefill and chain logits differ"; fail=1; }
cmp -s "$TMPDIR/prefill.f32" "$TMPDIR/prefill:7.f32" || { echo "FAIL: prefill and chunked logits differ"; fail=1; }
if python3 -c 'import numpy' 2>/dev/null; then
  python3 - "$TMPDIR/prefill.f32" "$DIR/golden/logits.f32" <<'PY' || fail=1
import sys, numpy as np
got = np.fromfile(sys.argv[1], dtype='<f4').reshape(40, 512)
ref = np.fromfile(sys.argv[2], dtype='<f4').reshape(2, 40, 512)[0]
rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
if rel.max() > 1e-3 or (got.argmax(1) != ref.argmax(1)).any():
    print(f"FAIL: CLI logits vs golden: max rel L2 {rel.max():.3g}, argmax mismatches {(got.argmax(1) != ref.argmax(1)).sum()}")
    sys.exit(1)
PY
fi
out=$("$CLI" tokenize -m "$DIR" -p "Hello world" 2>&1) || { echo "FAIL: tokenize on a directory: $out"; fail=1; }
[ "${out%% *}" = "2" ] || { echo "FAIL: tokenize did not start with <bos> (2): $out"; fail=1; }
"$CLI" probe -m "$DIR" -t 2 >/dev/null 2>"$TMPDIR/probe" || { echo "FAIL: probe on a directory: $(tail -3 "$TMPDIR/probe")"; fail=1; }
# `lockstep probe` at K = 2..8 on the Gemma 4 fixtures, the 8-bit-MLP-on-4-bit MLX one included
for fx in gemma4_dense gemma4_ple gemma4_moe gemma4_dense_mlx_q4_mlp8; do
  for k in 2 3 4 5 6 7 8; do
    if ! "$CLI" probe -m "$DATA/hf/$fx" --draft-block-size $k -t 2 >"$TMPDIR/probe.out" 2>&1; then
      echo "FAIL: probe $fx K=$k: $(tail -3 "$TMPDIR/probe.out")"; fail=1
    fi
  done
done
# a directory that is not a checkpoint: a clear error, exit 1
mkdir "$TMPDIR/empty"
err=$("$CLI" logits -m "$TMPDIR/empty" --tokens 2,3 2>&1 >/dev/null); rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "config.json" <<<"$err"; then echo "FAIL: empty dir -> rc=$rc: $err"; fail=1; fi
exit $fail
