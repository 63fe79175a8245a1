#!/usr/bin/env bash
# Graceful shutdown and --queue-timeout of `lockstep serve`: runs tests/server/test_shutdown.py
# (pytest, raw http.client), which starts its own servers (default model, free loopback ports)
# and always kills them: SIGTERM with running and queued requests (streaming and not) must
# complete or 503 every one of them and exit 0 within --shutdown-timeout + 1 s; queued
# requests past --queue-timeout get 503; --timeout counts from the start of generation.
# Exit 77 (skip) when the model or pytest is missing. Env: LOCKSTEP_CLI (e.g. build/asan/lockstep),
# LOCKSTEP_MODEL.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}

# Flag errors (exit 2), model-less.
fail=0
for args in "--shutdown-timeout -1" "--shutdown-timeout x" "--queue-timeout 0"; do
  # shellcheck disable=SC2086
  "$CLI" serve -m /nonexistent $args >/dev/null 2>&1; rc=$?
  if [ "$rc" -ne 2 ]; then echo "FAIL: serve $args -> rc=$rc (want 2)"; fail=1; fi
done
[ "$fail" -eq 0 ] || exit 1

if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
if ! "$PY" -c "import pytest" 2>/dev/null; then echo "skip: pytest is needed (pip install pytest)"; exit 77; fi

LOCKSTEP_MODEL=$MODEL LOCKSTEP_CLI=$CLI \
  timeout 300 "$PY" -m pytest -q -s -p no:cacheprovider "$HERE/server/test_shutdown.py" "$@"
