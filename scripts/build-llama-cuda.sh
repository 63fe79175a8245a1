#!/usr/bin/env bash
# Build llama.cpp's own tools (the comparison peer, docs/cuda.md 4) from a source tarball of
# the tree that the PyPI sdist llama-cpp-python==0.3.36 vendors (vendor/llama.cpp), with no
# network: llama-bench, llama-server, llama-lookup and tools/llama_logits (llama-logits: float32
# logits of every position of a token sequence, the format `lockstep logits` writes).
#
#   bash scripts/build-llama-cuda.sh TARBALL OUTDIR [--cpu] [--native|--avx512] [--jobs N] [--targets "T1 T2 ..."]
#
#   TARBALL   llama.cpp source as .tar.xz / .tar.gz / .tar (one top-level folder), or a source
#             folder (used in place, nothing is extracted)
#   OUTDIR    gets src/ (the extracted tree), build/ (the CMake build), build.log, and links
#             OUTDIR/llama-bench, llama-server, llama-lookup, llama-logits -> build/bin/...
#             (pass OUTDIR to `scripts/test-cuda.sh --llama OUTDIR`)
#   --cpu     GGML_CUDA=OFF (a CPU build: for testing this script on a machine without a GPU)
#   --native  CPU code for this machine's CPU (GGML_NATIVE, -march=native). Default on x86-64:
#             AVX2 + FMA + F16C + BMI2 without AVX-512 / AMX, what lockstep's CPU backend uses:
#             -march=native on a host (or VM) that lists AMX but cannot run it compiles ggml's
#             AMX matmul in, and the pure-CPU reference (llama-logits -ngl 0) dies of SIGILL
#             (seen on the 2-core project machine). The GPU code is the same either way.
#   --avx512  the fastest CPU code such a host can run: AVX2 + FMA + F16C + BMI2 + AVX-512 (F, BW,
#             VL, DQ, VBMI, VNNI, BF16) + AVX-VNNI, AMX off. The CPU peer of docs/benchmarks.md on
#             the project machine (an AVX-512 Xeon whose VM lists AMX but faults on it).
#   --jobs N  parallel compile jobs (default: nproc)
#   --targets the llama.cpp targets to build (default "llama-bench llama-server llama-lookup";
#             "" builds only the libraries llama-logits needs)
#
# Re-running with the same OUTDIR continues where the last run stopped (nothing is extracted or
# configured again unless the flags changed), so a build cut short by a time limit can resume.
# Ninja when it is installed, else Unix Makefiles (LLAMA_CMAKE_GENERATOR=... overrides); nvcc
# from PATH or /usr/local/cuda/bin. Everything in OUTDIR uses relative paths ($ORIGIN RPATHs,
# relative links): it keeps working when moved.
# Prints the configure and build times last. Exit status non-zero when any step failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: $0 TARBALL OUTDIR [--cpu] [--native|--avx512] [--jobs N] [--targets \"llama-bench llama-server llama-lookup\"]" >&2; exit 2; }
[ $# -ge 2 ] || usage
TARBALL=$1; OUT=$2; shift 2
CUDA=ON
NATIVE=OFF
JOBS=$(nproc 2>/dev/null || echo 4)
TARGETS="llama-bench llama-server llama-lookup"
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) CUDA=OFF; shift ;;
    --native) NATIVE=ON; shift ;;
    --avx512) NATIVE=AVX512; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -e "$TARBALL" ] || { echo "no such tarball or folder: $TARBALL" >&2; exit 2; }
TARBALL=$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/build.log
: >"$LOG"
say() { echo "$*"; echo "$*" >>"$LOG"; }
die() { say "FAILED: $*"; [ -s "$LOG" ] && { echo "--- last lines of $LOG:"; tail -30 "$LOG"; }; exit 1; }
T_START=$(date +%s)

# ---- source -------------------------------------------------------------------------------
if [ -d "$TARBALL" ]; then
  SRC=$TARBALL
elif [ -f "$OUT/src/CMakeLists.txt" ] && [ "$(cat "$OUT/src/.tarball" 2>/dev/null)" = "$(basename "$TARBALL") $(stat -c %s "$TARBALL")" ]; then
  SRC=$OUT/src
  say "source: $SRC (already extracted)"
else
  rm -rf "$OUT/src" "$OUT/build"
  mkdir -p "$OUT/src"
  # the tarball has one top-level folder (llama.cpp/): strip it
  tar -xf "$TARBALL" -C "$OUT/src" --strip-components=1 >>"$LOG" 2>&1 || die "extracting $TARBALL"
  echo "$(basename "$TARBALL") $(stat -c %s "$TARBALL")" >"$OUT/src/.tarball"
  SRC=$OUT/src
  say "source: extracted $TARBALL into $SRC"
fi
[ -f "$SRC/CMakeLists.txt" ] && [ -f "$SRC/include/llama.h" ] || die "$SRC is not a llama.cpp tree (no CMakeLists.txt / include/llama.h)"
BUILD=$OUT/build

# ---- tools --------------------------------------------------------------------------------
if [ -n "${LLAMA_CMAKE_GENERATOR:-}" ]; then GEN=$LLAMA_CMAKE_GENERATOR
elif command -v ninja >/dev/null 2>&1; then GEN="Ninja"; else GEN="Unix Makefiles"; fi
CC_BIN=${CC:-cc}
LINK_EXTRA=()  # for llama-logits
command -v "$CC_BIN" >/dev/null 2>&1 || CC_BIN=gcc
if [ "$CUDA" = ON ] && ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /usr/local/cuda-12/bin; do
    [ -x "$d/nvcc" ] && { export PATH="$d:$PATH"; break; }
  done
  command -v nvcc >/dev/null 2>&1 || die "GGML_CUDA=ON but nvcc is not on PATH (nor in /usr/local/cuda/bin)"
fi
[ "$CUDA" = ON ] && export CUDACXX=${CUDACXX:-$(command -v nvcc)}

# Only what the named targets need; nothing that downloads (curl, the prebuilt web UI from the
# HF bucket, the test models) and no npm build of the UI.
# $ORIGIN-relative RPATHs (and relative links below): OUTDIR can move (a repository copy that
# lands elsewhere on the next call) without breaking the binaries.
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON
       -DGGML_CUDA=$CUDA -DGGML_CCACHE=OFF
       -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF
       -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
       -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
       -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_APP=OFF)
if [ "$CUDA" = ON ]; then
  FLAGS+=(-DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF)
  # libggml-cuda needs the driver's libcuda.so.1. A machine without the driver (a build-only
  # machine) links the executables against the toolkit's stub instead (link time only: at run
  # time the real libcuda.so.1 is loaded by its soname).
  have_driver() {
    local d p=${LD_LIBRARY_PATH:-}
    ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && return 0
    for d in ${p//:/ }; do [ -e "$d/libcuda.so.1" ] && return 0; done
    return 1
  }
  if ! have_driver; then
    NVCC_DIR=$(dirname "$(readlink -f "$(command -v nvcc)")")
    STUB=$(ls "$NVCC_DIR"/../lib64/stubs/libcuda.so "$NVCC_DIR"/../targets/*/lib/stubs/libcuda.so 2>/dev/null | head -1)
    if [ -n "$STUB" ]; then
      mkdir -p "$OUT/cuda-stubs" && ln -sfn "$(readlink -f "$STUB")" "$OUT/cuda-stubs/libcuda.so.1"
      FLAGS+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$OUT/cuda-stubs"
              "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$OUT/cuda-stubs")
      LINK_EXTRA=(-Wl,-rpath-link,"$OUT/cuda-stubs")
      say "no libcuda.so.1 in the loader cache: linking against the stub $STUB"
    fi
  fi
fi
case "$(uname -m)" in
  x86_64|amd64)
    if [ "$NATIVE" = ON ]; then FLAGS+=(-DGGML_NATIVE=ON)
    elif [ "$NATIVE" = AVX512 ]; then
      FLAGS+=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
              -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
              -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    else FLAGS+=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                 -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF); fi ;;
  *) FLAGS+=(-DGGML_NATIVE=ON) ;;
esac
# a moved OUTDIR or another generator: configure afresh (CMake caches absolute paths); other
# flags: configure the existing build again (only what they change is rebuilt)
WHERE="$SRC|$BUILD|$GEN"
SIG="${FLAGS[*]}"

# ---- configure ------------------------------------------------------------------------------
T0=$(date +%s)
if [ -f "$BUILD/CMakeCache.txt" ] && [ "$(sed -n 1p "$BUILD/.flags" 2>/dev/null)" = "$WHERE" ] &&
   [ "$(sed -n 2p "$BUILD/.flags" 2>/dev/null)" = "$SIG" ]; then
  say "configure: $BUILD (already configured)"
else
  [ -f "$BUILD/CMakeCache.txt" ] && [ "$(sed -n 1p "$BUILD/.flags" 2>/dev/null)" = "$WHERE" ] || rm -rf "$BUILD"
  say "configure: cmake -S $SRC -B $BUILD -G \"$GEN\" ${FLAGS[*]}"
  cmake -S "$SRC" -B "$BUILD" -G "$GEN" "${FLAGS[@]}" >>"$LOG" 2>&1 || die "cmake configure"
  printf '%s\n%s\n' "$WHERE" "$SIG" >"$BUILD/.flags"
fi
T_CONF=$(( $(date +%s) - T0 ))
if [ "$CUDA" = ON ]; then
  grep -q '^GGML_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt" || die "GGML_CUDA is not ON in $BUILD/CMakeCache.txt"
fi

# ---- build ----------------------------------------------------------------------------------
T0=$(date +%s)
# llama-logits needs libllama (and ggml); the tools bring their own dependencies
say "build: cmake --build $BUILD --target llama $TARGETS -j $JOBS"
# every 20th progress line on stdout (a run cut short by a time limit shows how far it got)
# shellcheck disable=SC2086  # TARGETS is a word list
cmake --build "$BUILD" --target llama $TARGETS -j "$JOBS" 2>&1 | tee -a "$LOG" |
  awk '/^\[ *[0-9]+(\/[0-9]+|%)\]/ { if (++n % 20 == 0) { print "  " substr($0, 1, 110); fflush() } }'
[ "${PIPESTATUS[0]}" = 0 ] || die "cmake --build (targets llama $TARGETS)"
T_BUILD=$(( $(date +%s) - T0 ))

BIN=$BUILD/bin
LIBLLAMA=$(ls "$BIN"/libllama.so 2>/dev/null || find "$BUILD" -name libllama.so -print -quit)
[ -n "$LIBLLAMA" ] || die "no libllama.so under $BUILD"
LIBDIR=$(dirname "$LIBLLAMA")
T0=$(date +%s)
say "build: llama-logits ($CC_BIN, against $LIBDIR)"
"$CC_BIN" -std=c11 -O2 -Wall -Wextra -o "$LIBDIR/llama-logits" "$ROOT/tools/llama_logits/llama_logits.c" \
  -I"$SRC/include" -I"$SRC/ggml/include" -L"$LIBDIR" -Wl,-rpath,'$ORIGIN' -Wl,-rpath-link,"$LIBDIR" "${LINK_EXTRA[@]}" \
  -lllama -lggml -lggml-base -lm \
  >>"$LOG" 2>&1 || die "compiling tools/llama_logits/llama_logits.c"
T_LOGITS=$(( $(date +%s) - T0 ))

# ---- links in OUTDIR, smoke test -------------------------------------------------------------
for t in $TARGETS llama-logits; do
  b=$BIN/$t
  [ $t = llama-logits ] && b=$LIBDIR/$t
  [ -x "$b" ] || die "$b was not built"
  ln -sfn "${b#"$OUT"/}" "$OUT/$t"
done
if [ ${#LINK_EXTRA[@]} -gt 0 ]; then
  say "not run here: no CUDA driver (libcuda.so.1) on this machine"
else
  "$OUT/llama-logits" --help >/dev/null 2>>"$LOG" || die "llama-logits --help"
  for t in $TARGETS; do
    case "$t" in llama-bench|llama-server)
      "$OUT/$t" --help >/dev/null 2>>"$LOG" || die "$t --help" ;;
    esac
  done
fi

say ""
say "llama.cpp ($( [ "$CUDA" = ON ] && echo "CUDA sm_90" || echo "CPU only"), CPU code $(echo "${FLAGS[*]}" | grep -q 'GGML_NATIVE=ON' && echo native || { echo "${FLAGS[*]}" | grep -q "GGML_AVX512=ON" && echo "x86-64 AVX-512 + VNNI" || echo "x86-64 AVX2"; })) in $OUT: $(cd "$OUT" && ls -1 $TARGETS llama-logits | tr '\n' ' ')"
say "build time: configure ${T_CONF} s, build ${T_BUILD} s (-j $JOBS, $GEN), llama-logits ${T_LOGITS} s; total $(( $(date +%s) - T_START )) s"
