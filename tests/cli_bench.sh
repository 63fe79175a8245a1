#!/usr/bin/env bash
# lockstep bench's -d/--n-depth and --ab-cuda-off (docs/settings.md "A/B in one process"): with
# a depth the line reports it and every measurement runs after that context; with --ab-cuda-off
# the second session is created, brought to the first one's context (the depth included) and
# timed against it, and the bench line carries the ab_* fields with positive medians and ratios.
# On the CPU backend the bits change nothing, so the check is that the comparison runs and
# reports, not what it measures (no timing is asserted). Out-of-range values are refused like
# every other option value (exit 2).
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
DATA=${LOCKSTEP_TEST_DATA:?}
M=$DATA/hf/gemma3_text
fail=0
T_ERR=$(mktemp); trap 'rm -f "$T_ERR"' EXIT
bad() { echo "FAIL: $*"; fail=1; }

# -n 12 decode steps past a depth of 40 with the fixture's 8-key sliding window: the window's cache
# (window + one batch of slots) no longer holds what a rollback to the depth needs, so the next
# repetition re-evaluates the prefix (cmd_bench.c back_to_depth) instead of failing
out=$("$CLI" bench --device cpu -m "$M" -t 1 -p 8 -n 12 -r 3 -d 40 --ab-cuda-off 3 2>&1) ||
  bad "bench -d 40 --ab-cuda-off exits $?: $(tail -2 <<<"$out")"
grep -q " depth=40" <<<"$out" || bad "depth=40 missing in: $out"
# the step / verify comparison runs after the prefix and the decoded tokens: position 40 + 12
grep -q " step_pos=52" <<<"$out" || bad "step_pos=52 (depth 40 + 12 decoded) missing in: $out"
for f in ab_step_ms_a ab_step_ms_b ab_step_b_over_a ab_verify_ms_a ab_verify_ms_b ab_verify_b_over_a; do
  v=$(grep -o " $f=[^ ]*" <<<"$out" | cut -d= -f2)
  [ -n "$v" ] || { bad "no $f in: $out"; continue; }
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || bad "$f=$v is not a positive number"
done
grep -q " ab_cuda_off=3" <<<"$out" || bad "ab_cuda_off=3 missing in: $out"
grep -q "verify4_ms=" <<<"$out" || bad "the usual fields are gone: $out"
# without the option: no ab_* fields
out=$("$CLI" bench --device cpu -m "$M" -t 1 -p 8 -n 4 -r 1 2>/dev/null) || bad "bench exits $?"
grep -q " ab_" <<<"$out" && bad "ab_* fields without --ab-cuda-off: $out"
grep -q " depth=0 step_pos=4" <<<"$out" || bad "depth=0 step_pos=4 missing without -d: $out"
# the host / GPU split of a step comes from replayed step graphs: none on the CPU
grep -q " step_host_us=" <<<"$out" && bad "step_host_us on the CPU backend (no replayed steps): $out"
# -p 1: the decoded and verify tokens come from past the one-token prompt (no division by zero)
"$CLI" bench --device cpu -m "$M" -t 1 -p 1 -n 4 -r 1 -k 2 >/dev/null 2>"$T_ERR"
grep -q "must be 1..1" "$T_ERR" || bad "-p 1 -k 2: want the verify block refused by the batch size, got: $(cat "$T_ERR")"
err=$("$CLI" bench --device cpu -m "$M" -d -1 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q -- "-d expects" <<<"$err" || bad "-d -1: rc=$rc, $err"
for v in 0 64 65 448 x; do
  err=$("$CLI" bench --device cpu -m "$M" --ab-cuda-off "$v" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] && grep -q -- "--ab-cuda-off expects" <<<"$err" || bad "--ab-cuda-off $v: rc=$rc, $err"
done
[ $fail -eq 0 ] && echo "PASS: bench -d, --ab-cuda-off"
exit $fail
