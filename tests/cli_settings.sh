#!/usr/bin/env bash
# The CLI maps its common options and the documented environment variables onto
# ls_test_control (docs/settings.md), and --verbose shows the effect: LOCKSTEP_ISA,
# LOCKSTEP_CUDA_GRAPHS, LOCKSTEP_PROBE_CACHE / --no-probe-cache, XDG_CACHE_HOME (the probe
# memo's folder, written by the CLI's choice only), LOCKSTEP_PROBE_TRACE, LOCKSTEP_TEST_FAULT
# (probe faults and allocation faults, reported, never papered over).
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
MODEL=${LOCKSTEP_MODEL:?}
[ -f "$MODEL" ] || { echo "SKIP: no model at $MODEL (bash scripts/setup.sh)"; exit 77; }
fail=0
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME="$T/cache"
unset LOCKSTEP_ISA LOCKSTEP_CUDA_GRAPHS LOCKSTEP_PROBE_CACHE LOCKSTEP_PROBE_TRACE LOCKSTEP_TEST_FAULT
expect() { # expect CODE PATTERN -- command...: exit code and a stderr line matching PATTERN
  local code=$1 pat=$2; shift 3
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -e "$pat" <<<"$err"; then
    echo "FAIL: '$*' -> rc=$rc (want $code, stderr matching '$pat'), stderr: $err"; fail=1
  fi
}
tok=(tokenize -m "$MODEL" -p hi)

# defaults, and each variable / option
expect 0 "^lockstep settings: device=auto isa=(avx512|avx2|scalar) cuda_graphs=1 probe_trace=0 probe_memo=$T/cache/lockstep/probe fault_probe=off fault_alloc=off$" -- "$CLI" "${tok[@]}" --verbose
expect 0 "isa=scalar" -- env LOCKSTEP_ISA=scalar "$CLI" "${tok[@]}" --verbose
expect 0 "isa=scalar" -- "$CLI" --isa scalar "${tok[@]}" --verbose
expect 2 "--isa must be auto, avx2 or scalar" -- "$CLI" --isa avx512 "${tok[@]}"
# avx2 caps the level (no AVX-512 kernels); a CPU without AVX2 still reports scalar
expect 0 "isa=(avx2|scalar) " -- "$CLI" --isa avx2 "${tok[@]}" --verbose
expect 0 "isa=(avx2|scalar) " -- env LOCKSTEP_ISA=avx2 "$CLI" "${tok[@]}" --verbose
expect 0 "cuda_graphs=0" -- env LOCKSTEP_CUDA_GRAPHS=0 "$CLI" "${tok[@]}" --verbose
expect 0 "cuda_graphs=0" -- "$CLI" "${tok[@]}" --no-cuda-graphs --verbose
expect 0 "probe_memo=off" -- env LOCKSTEP_PROBE_CACHE=0 "$CLI" "${tok[@]}" --verbose
expect 0 "probe_memo=off" -- "$CLI" "${tok[@]}" --no-probe-cache --verbose
expect 0 "probe_memo=$T/home/.cache/lockstep/probe" -- env -u XDG_CACHE_HOME HOME="$T/home" "$CLI" "${tok[@]}" --verbose
expect 0 "probe_trace=1" -- env LOCKSTEP_PROBE_TRACE=1 "$CLI" "${tok[@]}" --verbose
expect 0 "fault_probe=3:mlp" -- env LOCKSTEP_TEST_FAULT=3:mlp "$CLI" "${tok[@]}" --verbose
expect 0 "fault_alloc=sampler:2" -- env LOCKSTEP_TEST_FAULT=alloc:sampler:2 "$CLI" "${tok[@]}" --verbose
expect 2 "LOCKSTEP_TEST_FAULT must be" -- env LOCKSTEP_TEST_FAULT=banana "$CLI" "${tok[@]}"
expect 2 "unknown stage 'softmax'" -- env LOCKSTEP_TEST_FAULT=3:softmax "$CLI" "${tok[@]}"
expect 2 "unknown allocation site" -- env LOCKSTEP_TEST_FAULT=alloc:gpu "$CLI" "${tok[@]}"
# the version line names the ISA the kernels will use
if ! env LOCKSTEP_ISA=scalar "$CLI" version | grep -q "cpu-scalar"; then echo "FAIL: LOCKSTEP_ISA=scalar version"; fail=1; fi

# faults: an allocation failure of the sampler is an error, not another way of sampling
expect 1 "out of memory for the sampler" -- env LOCKSTEP_TEST_FAULT=alloc:sampler "$CLI" run -m "$MODEL" -p hi -n 4 --seed 1
expect 1 "cannot load model.*out of memory" -- env LOCKSTEP_TEST_FAULT=alloc:model "$CLI" "${tok[@]}"
# an injected probe fault: the probe names it
expect 1 "first divergence: layer 2 \(sliding\) mlp" -- env LOCKSTEP_TEST_FAULT=2:mlp "$CLI" probe -m "$MODEL" --draft-block-size 2 -t 2

# the probe memo is written where the CLI says, and only there
memo="$T/cache/lockstep/probe"
run=(run -m "$MODEL" -p "The quick brown fox" -n 8 --temp 0 --draft ngram --draft-block-size 3 -t 2)
"$CLI" "${run[@]}" --no-probe-cache >/dev/null 2>&1 || { echo "FAIL: run --no-probe-cache"; fail=1; }
n=$(ls "$memo" 2>/dev/null | wc -l)
[ "$n" -eq 0 ] || { echo "FAIL: --no-probe-cache wrote $n memo file(s)"; fail=1; }
"$CLI" "${run[@]}" >/dev/null 2>&1 || { echo "FAIL: run with the memo"; fail=1; }
n=$(ls "$memo" 2>/dev/null | grep -c '\.pass$')
[ "$n" -eq 1 ] || { echo "FAIL: expected 1 memo file in $memo, found $n"; fail=1; }
expect 0 "verdict cached on disk" -- "$CLI" "${run[@]}"
[ $fail -eq 0 ] && echo "cli_settings: ok"
exit $fail
