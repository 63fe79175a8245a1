#!/usr/bin/env bash
# Tensor parallelism on the CPU (ranks as threads; docs/design.md, "Tensor parallelism"):
#  (a) -tp 1 (the tensor-parallel path, one rank) gives the bytes of the plain path;
#  (b) at a fixed N the logits of a prompt longer than the 512-token sliding window are
#      byte-identical whether it runs as one batch, one token at a time or in chunks of 7 / 64
#      rows, and with 1 or 2 threads (N = 2), and as one batch or chunks of 7 (N = 4, where a
#      ring-order all-reduce would differ: a + b == b + a makes every order agree at N = 2);
#  (c) N = 2 is close to N = 1, not identical: on the F32 copy of the model top-1 >= 99% and
#      median relative L2 <= 1e-3; on the Q4_K_M model (int8 activations, whose rounding
#      noise floor is ~2.6e-2: docs/benchmarks.md) top-1 >= 90% and median <= 5e-2;
#  (d) what cannot be split is refused with a message: 3 ranks over 4 heads; serve (batcher);
#      a MoE fixture;
#  (e) the float32 Gemma 3 and Gemma 4 dense fixtures (tests/data/hf: Gemma 4's K = V layers
#      and value norm): prefill == chain at N = 2 and 4, and top-1 equal to N = 0 on every
#      position with max relative L2 <= 1e-4 (measured ~2.5e-6: only the summation order moves).
set -euo pipefail
CLI=${LOCKSTEP_CLI:?}
MODEL=${LOCKSTEP_MODEL:?}
DATA=${LOCKSTEP_TEST_DATA:?}
N=${LOCKSTEP_TP_TOKENS:-560}
BIN=$(dirname "$CLI")
if [ ! -f "$MODEL" ]; then echo "SKIP: model $MODEL not installed"; exit 77; fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ids=$("$CLI" tokenize -m "$MODEL" -f "$DATA/long_prompt.txt" | tr ' ' '\n' | awk -v n="$N" 'NR <= n' | paste -sd, -)
fail=0
sha() { sha256sum "$1" | cut -d' ' -f1; }
logits() { # OUT MODEL ARGS...
  local out=$1 model=$2; shift 2
  "$CLI" logits -m "$model" --tokens "$ids" -c 1024 -o "$out" "$@"
}

# (a)
logits "$tmp/plain.bin" "$MODEL" -t 2
logits "$tmp/tp1.bin" "$MODEL" -t 2 -tp 1
if [ "$(sha "$tmp/plain.bin")" = "$(sha "$tmp/tp1.bin")" ]; then echo "ok: -tp 1 == plain"; else echo "FAIL: -tp 1 differs from the plain path"; fail=1; fi

# (b)
check_modes() { # NRANKS "MODE:THREADS ..."
  local n=$1 ref="" h
  for mt in $2; do
    logits "$tmp/x.bin" "$MODEL" -tp "$n" --mode "${mt%%@*}" -t "${mt##*@}"
    h=$(sha "$tmp/x.bin")
    echo "N=$n mode=${mt%%@*} threads=${mt##*@} sha256=$h"
    if [ -z "$ref" ]; then ref=$h; cp "$tmp/x.bin" "$tmp/n$n.bin"
    elif [ "$h" != "$ref" ]; then echo "FAIL: N=$n ${mt} differs from ${2%% *}"; fail=1; fi
  done
}
# LOCKSTEP_TP_MODES2 / LOCKSTEP_TP_MODES4 (MODE@THREADS lists) narrow the sets for the
# sanitizer run (scripts/test.sh): each 560-token forward is minutes under ASan.
check_modes 2 "${LOCKSTEP_TP_MODES2:-prefill@2 chain@2 prefill:7@2 prefill:64@2 prefill@1}"
check_modes 4 "${LOCKSTEP_TP_MODES4:-prefill@2 prefill:7@2}"

# (c)
close() { # A B MIN_TOP1_PERCENT MAX_MEDIAN WHAT
  local r agree n med
  r=$("$BIN/lockstep-logits-criteria" compare "$1" "$2" | grep '^result')
  n=$(sed 's/.* n=\([0-9]*\) .*/\1/' <<<"$r"); agree=$(sed 's/.* agree=\([0-9]*\) .*/\1/' <<<"$r")
  med=$(sed 's/.* median=\([^ ]*\) .*/\1/' <<<"$r")
  echo "$5: top-1 $agree/$n, median rel L2 $med"
  awk -v a="$agree" -v n="$n" -v m="$med" -v t="$3" -v x="$4" 'BEGIN { exit !(100 * a >= t * n && m <= x) }' ||
    { echo "FAIL: $5 beyond top-1 >= $3% / median <= $4"; fail=1; }
}
close "$tmp/plain.bin" "$tmp/n2.bin" 90 5e-2 "Q4_K_M N=2 vs N=1"
"$BIN/lockstep-gguf-f32" "$MODEL" "$tmp/f32.gguf" >/dev/null
ids=$(cut -d, -f1-64 <<<"$ids")
logits "$tmp/f1.bin" "$tmp/f32.gguf" -t 2
logits "$tmp/f2.bin" "$tmp/f32.gguf" -t 2 -tp 2
close "$tmp/f1.bin" "$tmp/f2.bin" 99 1e-3 "F32 N=2 vs N=1"
rm -f "$tmp/f32.gguf"

# (d)
if "$CLI" logits -m "$MODEL" --tokens 1,2 -tp 3 -o "$tmp/y.bin" 2>"$tmp/err"; then echo "FAIL: -tp 3 accepted"; fail=1
elif ! grep -q "heads are not a multiple" "$tmp/err"; then echo "FAIL: -tp 3: $(cat "$tmp/err")"; fail=1; fi
if "$CLI" serve -m "$MODEL" --port 0 -tp 2 >/dev/null 2>"$tmp/err" </dev/null; then echo "FAIL: serve -tp 2 ran"; fail=1
elif ! grep -q "tensor-parallel session cannot join a batcher" "$tmp/err"; then echo "FAIL: serve -tp 2: $(cat "$tmp/err")"; fail=1; fi

if "$CLI" logits -m "$DATA/hf/gemma4_moe" --tokens 1,2 -tp 2 -o "$tmp/y.bin" 2>"$tmp/err"; then echo "FAIL: MoE -tp 2 ran"; fail=1
elif ! grep -q "MoE models are not supported" "$tmp/err"; then echo "FAIL: MoE -tp 2: $(cat "$tmp/err")"; fail=1; fi

# (e)
for fx in gemma3_text gemma4_dense; do
  D=$DATA/hf/$fx
  ids=$(od -An -v -t d4 -N 160 "$D/golden/tokens.i32" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
  "$CLI" logits -m "$D" --tokens "$ids" -t 2 -o "$tmp/h0.bin"
  for n in 2 4; do
    "$CLI" logits -m "$D" --tokens "$ids" -t 2 -tp "$n" -o "$tmp/hp.bin"
    "$CLI" logits -m "$D" --tokens "$ids" -t 2 -tp "$n" --mode chain -o "$tmp/hc.bin"
    cmp -s "$tmp/hp.bin" "$tmp/hc.bin" || { echo "FAIL: $fx N=$n prefill and chain differ"; fail=1; }
    r=$("$BIN/lockstep-logits-criteria" compare "$tmp/h0.bin" "$tmp/hp.bin" --vocab 512 | grep '^result')
    echo "$fx N=$n vs off: $r"
    awk -v r="$r" 'BEGIN { k = split(r, f, /[ =]/); for (i = 1; i < k; i++) v[f[i]] = f[i + 1];
                          exit !(v["agree"] == v["n"] && v["max"] <= 1e-4) }' ||
      { echo "FAIL: $fx N=$n is not within top-1 100% / max rel L2 1e-4 of N=0"; fail=1; }
  done
done

[ $fail -eq 0 ] && echo "PASS: tensor parallelism (N = 1 == plain; N = 2, 4 batch-invariant; N = 2 close to N = 1)"
exit $fail
