#!/usr/bin/env bash
# Pack a build made here for a GPU machine that has no compiler toolchain for lockstep's
# dependencies (docs/cuda.md 4: the lent H200 has no libcjson / libmicrohttpd and no network):
# the binaries the GPU scripts run, stripped, in the build/cuda layout they expect, plus the
# Debian runtime packages they need under .gpu/debs (unpacked there by the scripts).
#
#   bash scripts/gpu-pack.sh [BUILD_DIR] [OUT]     (defaults: build/release, .gpu/pack.tar.xz)
#
# There, from the repository root: tar -xJf .gpu/pack.tar.xz, then scripts/test-cuda.sh,
# scripts/test-cuda-big.sh or scripts/cuda-ab.sh as usual (they find build/cuda and .gpu/debs).
# The pack is ~7 MB (xz dedups the binaries' shared library code), well inside what one call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
OUT=${2:-.gpu/pack.tar.xz}
[ -x "$B/lockstep" ] || { echo "no $B/lockstep: build first (cmake --preset release, nvcc present)"; exit 2; }
ls "$B"/tests/cuda/test_cuda_* >/dev/null 2>&1 || { echo "no CUDA tests in $B: was it built with LOCKSTEP_CUDA on?"; exit 2; }
DEBS=".gpu/debs"
PKGS="libcjson1 libmicrohttpd12 libcmocka0"
mkdir -p "$DEBS"
for p in $PKGS; do
  ls "$DEBS/${p}_"*.deb >/dev/null 2>&1 || (cd "$DEBS" && apt-get download "$p" >/dev/null) ||
    { echo "apt-get download $p failed (network to the package registry needed once)"; exit 1; }
done
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/build/cuda/tests/cuda" "$T/.gpu/debs"
cp "$B/lockstep" "$B/lockstep-gen-model" "$T/build/cuda/"
cp "$B"/tests/cuda/test_cuda_* "$T/build/cuda/tests/cuda/"
[ -x "$B/tests/test_backend_ops" ] && cp "$B/tests/test_backend_ops" "$T/build/cuda/tests/"
strip "$T/build/cuda/lockstep" "$T/build/cuda/lockstep-gen-model" 2>/dev/null || true
cp "$DEBS"/*.deb "$T/.gpu/debs/"
mkdir -p "$(dirname "$OUT")"
tar -C "$T" -cf - build .gpu | xz -9 -T2 >"$OUT"
echo "$OUT: $(stat -c %s "$OUT") bytes ($(git rev-parse --short HEAD 2>/dev/null || echo '?'), from $B)"
