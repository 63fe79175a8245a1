#!/usr/bin/env bash
# Compile-only check (no GPU needed) that the CUDA matmul / get_rows kernels use no local
# memory: every kernel in src/kernels/cuda/matmul.cu must report a 0-byte stack frame, no
# spill stores/loads and < 128 registers in ptxas -v, and, where cuobjdump can disassemble,
# the sm_90 SASS must hold no LDL / STL instruction. Same flags as CMakeLists.txt.
#
#   bash tests/cuda/check_matmul_spills.sh        (from the repository root; exit 0 = clean)
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$NVCC" -std=c++17 -gencode=arch=compute_90,code=sm_90 -Werror=all-warnings \
  -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-function -fmad=true -I src \
  -Xptxas -v -c src/kernels/cuda/matmul.cu -o "$TMP/matmul.o" 2> "$TMP/ptxas.txt"
bad=0
# ptxas prints, per function: "Function properties for F" / "N bytes stack frame, S bytes
# spill stores, L bytes spill loads" / "Used R registers, ..."
awk '
  /Function properties for/ { f = $NF }
  /bytes stack frame/ { if ($1 != 0 || $5 != 0 || $9 != 0) { print "SPILL " f ": " $0; bad = 1 } }
  /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1);
                            if (r + 0 >= 128) { print "REGS " f ": " r; bad = 1 } ; n++ }
  END { printf "%d kernels checked\n", n; exit bad }' "$TMP/ptxas.txt" || bad=1
if command -v cuobjdump > /dev/null && cuobjdump --dump-sass "$TMP/matmul.o" > "$TMP/sass.txt" 2> /dev/null; then
  if grep -qE '\b(LDL|STL)\b' "$TMP/sass.txt"; then
    echo "local memory instructions in SASS:"; grep -cE '\b(LDL|STL)\b' "$TMP/sass.txt"; bad=1
  else
    echo "SASS: no LDL/STL"
  fi
else
  echo "cuobjdump/nvdisasm not available: SASS not inspected (ptxas report only)"
fi
[ $bad -eq 0 ] && echo "PASS: no local memory, < 128 registers" || echo "FAIL"
exit $bad
