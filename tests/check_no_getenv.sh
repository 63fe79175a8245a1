#!/usr/bin/env bash
# The library reads no environment variable and sets none (include/lockstep.h, "settings and
# test control"): the front ends (tools/) map their documented variables onto options and
# ls_test_control. Fails listing any getenv / secure_getenv / setenv / unsetenv / putenv /
# environ under the given source folder (default: src/ of this checkout).
set -euo pipefail
dir="${1:-$(dirname "$0")/../src}"
if [ ! -d "$dir" ]; then
  echo "check_no_getenv: no such folder: $dir" >&2
  exit 2
fi
if grep -rnE '\b(secure_getenv|getenv|setenv|unsetenv|putenv)[[:space:]]*\(|\benviron\b' "$dir" \
  --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' --include='*.cpp'; then
  echo "check_no_getenv: the library must not read or set the environment (map the variable in tools/cli)" >&2
  exit 1
fi
echo "check_no_getenv: no environment access under $dir"
