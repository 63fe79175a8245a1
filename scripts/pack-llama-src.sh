#!/usr/bin/env bash
# Pack the comparison peer's source (docs/cuda.md 4): the llama.cpp tree that the PyPI sdist
# llama-cpp-python==0.3.36 vendors in vendor/llama.cpp, without models/, docs/ and media/
# (~9 MB .tar.xz), for scripts/build-llama-cuda.sh on a machine with no network. tools/ui stays:
# the vendored CMakeLists adds it even with LLAMA_BUILD_UI=OFF (configure fails without it).
#
#   bash scripts/pack-llama-src.sh [OUT.tar.xz]     (default .gpu/llama.cpp.tar.xz; needs pip + network)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.gpu/llama.cpp.tar.xz}
VER=0.3.36
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
python3 -m pip download "llama-cpp-python==$VER" --no-binary :all: --no-deps -d "$TMP/sd" >"$TMP/pip.log" 2>&1 ||
  { tail -5 "$TMP/pip.log"; echo "pip download failed"; exit 1; }
tar -C "$TMP" -xzf "$TMP/sd/llama_cpp_python-$VER.tar.gz"
V=$TMP/llama_cpp_python-$VER/vendor
[ -f "$V/llama.cpp/CMakeLists.txt" ] || { echo "no vendor/llama.cpp in the sdist"; exit 1; }
rm -rf "$V/llama.cpp/models" "$V/llama.cpp/docs" "$V/llama.cpp/media"
mkdir -p "$(dirname "$OUT")"
tar -C "$V" -cf - llama.cpp | xz -6 -T2 >"$OUT"
echo "$OUT: $(stat -c %s "$OUT") bytes (llama-cpp-python $VER vendor/llama.cpp)"
