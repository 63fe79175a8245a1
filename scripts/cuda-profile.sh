#!/usr/bin/env bash
# Where a CUDA step's time goes, measured with Nsight Compute on the GPU machine (the profiles
# behind docs/benchmarks.md's CUDA runs: a kernel-time table of a decode step, then the warp-stall
# breakdown of the matmul kernel that dominates it).
#
#   bash scripts/cuda-profile.sh step MODEL [SKIP] [COUNT]
#       durations of COUNT (default 700) consecutive kernels of `lockstep bench` on MODEL after the
#       first SKIP (default 1500: past load and prefill), graph replay with every merge and PDL on,
#       summed by kernel and grid: calls, us a call, share of the profiled time.
#   bash scripts/cuda-profile.sh stalls LABEL M KERNEL [LABEL M KERNEL ...]
#       one launch of KERNEL (a name regex: gemv_kernel, mmq_kernel, small_kernel, mma_kernel,
#       tile_kernel) from `test_cuda_matmul --bench` on the LABEL matrices (q4_k, q6_k, q8_0, mlx4,
#       mlx8, bf16) at M rows: issue-slot use, warps, DRAM throughput, registers and the stall
#       reasons above 0.05 cycles an issued instruction.
#
# Needs build/cuda/lockstep and its tests (cmake --preset cuda, or a pack from scripts/gpu-pack.sh
# with LD_LIBRARY_PATH set as scripts/test-cuda.sh does) and `ncu` on PATH. ncu replays each kernel
# alone, so the durations are those of serialized launches; --clock-control none keeps the boost
# clock the benchmarks run at.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${LOCKSTEP_BUILD:-build/cuda}
command -v ncu >/dev/null || { echo "ncu not found (Nsight Compute, part of the CUDA toolkit)"; exit 2; }

step() {
  local model=$1 skip=${2:-1500} count=${3:-700} csv
  csv=$(mktemp)
  ncu --clock-control none --metrics gpu__time_duration.sum --csv -s "$skip" -c "$count" \
    "$B/lockstep" bench --device cuda -m "$model" -p 512 -n 64 -r 1 >"$csv" 2>/dev/null || true
  python3 - "$csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no kernel rows: did ncu run (permissions, --skip past the end)?")
h = rows[0]
ki, gi, vi = h.index("Kernel Name"), h.index("Grid Size"), h.index("Metric Value")
agg, tot = collections.OrderedDict(), 0.0
for r in rows[1:]:
    try:
        v = float(r[vi].replace(",", "")) / 1000.0
    except ValueError:
        continue
    a = agg.setdefault((r[ki][:70], r[gi]), [0, 0.0])
    a[0] += 1
    a[1] += v
    tot += v
print(f"# {len(rows) - 1} kernels, {tot:.0f} us")
for (name, grid), (n, v) in sorted(agg.items(), key=lambda x: -x[1][1])[:20]:
    print(f"{n:5d} {v / n:8.2f} us/call {100 * v / tot:5.1f}%  {name} {grid}")
PY
  rm -f "$csv"
}

stalls() {
  local m='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
  m+=',sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active'
  m+=',dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,gpu__time_duration.sum'
  while [ $# -ge 3 ]; do
    echo "=== $1 M=$2 $3"
    { LS_BENCH_ONLY=$1 LS_BENCH_M=$2 ncu --metrics "$m" -k "regex:$3" -s 2 -c 1 "$B/tests/cuda/test_cuda_matmul" --bench 2>&1 ||
        echo "  (ncu exited $?)"; } |
      awk '$1 ~ /^(smsp|sm__|dram|launch|gpu__)/ { v = $NF; gsub(",", "", v);
             if ($1 !~ /stalled/ || v + 0 > 0.05) { sub("smsp__average_warps_issue_stalled_", "", $1);
               sub("_per_issue_active.ratio", "", $1); print "  " $1, v } }
           /^  \(ncu exited/ { print }'
    shift 3
  done
}

case ${1:-} in
step) shift; [ $# -ge 1 ] || { echo "usage: $0 step MODEL [SKIP] [COUNT]"; exit 2; }; step "$@" ;;
stalls) shift; [ $# -ge 3 ] || { echo "usage: $0 stalls LABEL M KERNEL ..."; exit 2; }; stalls "$@" ;;
*) sed -n '2,17p' "$0"; exit 2 ;;
esac
