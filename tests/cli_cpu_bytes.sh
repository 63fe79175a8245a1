#!/usr/bin/env bash
# The CPU backend computes exactly the bytes it computed before the backend seam was
# redesigned for device memory (docs/design.md "Backends and device memory"): the sha256 of
# `lockstep logits --device cpu` on the default model (a 903-token prompt, two modes) and on
# nine checkpoint fixtures must equal tests/data/cpu_bytes/sha256.txt, recorded with
# tools/cpu_logits_sha256.sh on the tree before the change. LOCKSTEP_CPU_BYTES_FIXTURES_ONLY=1
# skips the default model (the sanitizer run).
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
DATA=${LOCKSTEP_TEST_DATA:?}
MODEL=${LOCKSTEP_MODEL:-}
HERE=$(cd "$(dirname "$0")" && pwd)
want=$DATA/cpu_bytes/sha256.txt
got=$(mktemp); trap 'rm -f "$got"' EXIT
if [ -f "$MODEL" ] && [ "${LOCKSTEP_CPU_BYTES_FIXTURES_ONLY:-0}" != 1 ]; then
  bash "$HERE/../tools/cpu_logits_sha256.sh" "$CLI" "$MODEL" "$DATA" --device-cpu >"$got" || exit 1
else
  bash "$HERE/../tools/cpu_logits_sha256.sh" "$CLI" "" "$DATA" --device-cpu >"$got" || exit 1
  grep -v '^default ' "$want" >"$got.want"; want=$got.want
fi
if ! diff -u "$want" "$got"; then
  echo "FAIL: CPU logits bytes changed (sha256 above; - recorded, + now)"
  exit 1
fi
echo "ok: $(wc -l <"$got") CPU logits sha256 unchanged"
