#!/usr/bin/env bash
# Logits criteria (a) and (b) against llama.cpp, on committed goldens (docs/benchmarks.md,
# "Logits against llama.cpp: the criteria"; tests/data/logits_criteria/README.md):
#   (a) the F32 copy of the default model: lockstep vs llama.cpp top-1 >= 99% and median relative
#       L2 <= 1e-3 over the golden's 1536 positions, and again over the 1024 past the 512-token
#       sliding window (the reference: llama.cpp with exact GELU, below);
#   (b) the quantized default model: lockstep's distance to llama.cpp (top-1 disagreement, median
#       relative L2), against each of llama.cpp's two attention paths, is at most 1.1x the
#       distance between those paths (flash attention on vs off) in the same reference run.
# CI makes the F32 copy itself (lockstep-gguf-f32, ~1.1 GB in a temporary folder, removed at
# the end) and checks its weights digest equals the one of the F32 copy llama.cpp's
# llama-quantize made for the golden. `lockstep logits` streams its rows straight into the
# checker (no 1.6 GB logits file).
# The reference for (a) is llama.cpp with its f16-table GELU compiled out (the golden's README
# says why); the distance to stock llama.cpp is printed, not asserted.
# Sanitizer build (LOCKSTEP_SANITIZED=1): only (a), on the first 64 positions: the F32 copy, the
# checker and the F32 forward path under ASan/UBSan in ~20 s (640 positions took ~170 s there);
# the criteria proper are asserted by the release run. LOCKSTEP_CRITERIA_POSITIONS=N sets the
# prefix in either build.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
DATA=${LOCKSTEP_TEST_DATA:?}
MODEL=${LOCKSTEP_MODEL:-}
F32TOOL=${LOCKSTEP_GGUF_F32:?}
CRIT=${LOCKSTEP_LOGITS_CRITERIA:?}
GOLDEN=$DATA/logits_criteria/golden.bin
if [ ! -f "$MODEL" ]; then
  echo "skip: no default model at '$MODEL'"
  exit 77
fi
POS=${LOCKSTEP_CRITERIA_POSITIONS:-}
PARTS="f32 q"
if [ "${LOCKSTEP_SANITIZED:-0}" = 1 ]; then
  POS=${POS:-64}
  PARTS="f32"
fi
tokens=$("$CRIT" tokens "$GOLDEN") || exit 1
want_digest=$("$CRIT" digest "$GOLDEN") || exit 1
POSARG=()
if [ -n "$POS" ]; then
  tokens=$(echo "$tokens" | cut -d, -f1-"$POS")
  POSARG=(--positions "$POS")
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-criteria.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
t_start=$(date +%s)
for part in $PARTS; do
  t0=$(date +%s)
  if [ "$part" = f32 ]; then
    avail_kb=$(df -Pk "$tmp" | awk 'NR == 2 { print $4 }')
    if [ "${avail_kb:-0}" -lt 2000000 ]; then
      echo "FAIL: (a) needs ~1.1 GB free in ${TMPDIR:-/tmp} for the F32 copy (${avail_kb} KB free)"
      fail=1
      continue
    fi
    got_digest=$("$F32TOOL" "$MODEL" "$tmp/f32.gguf") || { echo "FAIL: lockstep-gguf-f32"; fail=1; continue; }
    if [ "$got_digest" != "$want_digest" ]; then
      echo "FAIL: F32 copy weights digest $got_digest, the golden was made on $want_digest"
      fail=1
      continue
    fi
    echo "F32 copy: weights digest $got_digest = llama-quantize's ($(( $(date +%s) - t0 )) s)"
    model=$tmp/f32.gguf
  else
    model=$MODEL
  fi
  "$CLI" logits -m "$model" --device cpu --mode prefill:256 --tokens "$tokens" -t 2 2>"$tmp/err" | "$CRIT" check "$GOLDEN" "$part" - "${POSARG[@]}"
  st=("${PIPESTATUS[@]}")
  # 141: SIGPIPE, the checker stopped reading (it says why)
  if [ "${st[0]}" != 0 ] && [ "${st[0]}" != 141 ]; then
    echo "FAIL: lockstep logits ($part) exited ${st[0]}:"
    cat "$tmp/err"
    fail=1
  fi
  [ "${st[1]}" = 0 ] || fail=1
  rm -f "$tmp/f32.gguf"
  echo "($part: $(( $(date +%s) - t0 )) s)"
done
echo "total $(( $(date +%s) - t_start )) s"
[ "$fail" = 0 ] && echo "ok: logits criteria ($PARTS)" || echo "FAIL: logits criteria"
exit "$fail"
