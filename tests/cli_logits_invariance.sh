#!/usr/bin/env bash
# End-to-end batch invariance: the logits of every position of a prompt longer than the
# 512-token sliding window are byte-identical whether the prompt runs as one batch, one
# token at a time, or in chunks of 7 or 64 rows, with 1 or 2 threads.
set -euo pipefail
CLI=${LOCKSTEP_CLI:?}
MODEL=${LOCKSTEP_MODEL:?}
DATA=${LOCKSTEP_TEST_DATA:?}
N=${LOCKSTEP_INVARIANCE_TOKENS:-700}
# The sanitizer run uses a shorter prompt (still beyond the 512-token window) to stay fast.
MODES=${LOCKSTEP_INVARIANCE_MODES:-prefill chain prefill:7 prefill:64}
THREADS=${LOCKSTEP_INVARIANCE_THREADS:-1 2}
if [ ! -f "$MODEL" ]; then echo "SKIP: model $MODEL not installed"; exit 77; fi

ids=$("$CLI" tokenize -m "$MODEL" -f "$DATA/long_prompt.txt" | tr ' ' '\n' | awk -v n="$N" 'NR <= n' | paste -sd, -)
count=$(echo "$ids" | tr ',' '\n' | wc -l)
[ "$count" -eq "$N" ] || { echo "FAIL: prompt has only $count tokens, need $N"; exit 1; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ref=""
for t in $THREADS; do
  for mode in $MODES; do
    "$CLI" logits -m "$MODEL" --tokens "$ids" --mode "$mode" -t "$t" -c 1024 -o "$tmp/logits.bin"
    h=$(sha256sum "$tmp/logits.bin" | cut -d' ' -f1)
    bytes=$(stat -c %s "$tmp/logits.bin")
    echo "threads=$t mode=$mode sha256=$h"
    if [ -z "$ref" ]; then ref=$h; expect=$((N * 262144 * 4)); [ "$bytes" -eq "$expect" ] || { echo "FAIL: $bytes bytes, want $expect"; exit 1; }
    elif [ "$h" != "$ref" ]; then echo "FAIL: threads=$t mode=$mode differs from threads=1 prefill"; exit 1; fi
  done
done
echo "PASS: $N positions byte-identical across 4 modes x 2 thread counts"
