#!/usr/bin/env bash
# Hostile clients against `lockstep serve` (tests/server/test_hostile.py: raw sockets, loopback
# only, bounded): malformed HTTP framing, request lines and headers, idle and slow connections,
# a full queue, NUL bytes and duplicate keys in JSON, keys, methods, paths and oversized bodies.
# Every case must get its documented answer (docs/server_http.md) and the server must keep
# serving after each. Starts one server (default model, --parallel 2 -c 1024, an API key, short
# header and queue timeouts); at the end it must be alive, exit 0 on SIGTERM and have logged no
# sanitizer report (under the asan-ubsan preset this is the ASan + UBSan build).
# Exit 77 (skip) when the model or pytest is missing. Env: LOCKSTEP_CLI, LOCKSTEP_MODEL.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}

if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
if ! "$PY" -c "import pytest" 2>/dev/null; then echo "skip: pytest is needed (pip install pytest)"; exit 77; fi

source "$HERE/server/serve_lib.sh"

KEY=hostile-$$
serve_start 120 -m "$MODEL" --parallel 2 -c 1024 --api-key "$KEY" --header-timeout 2 --queue-timeout 2 --timeout 60
t0=$(date +%s)
LOCKSTEP_SERVER_URL=$URL LOCKSTEP_SERVER_KEY=$KEY LOCKSTEP_SERVER_HEADER_TIMEOUT=2 LOCKSTEP_SERVER_QUEUE_TIMEOUT=2 \
  timeout 600 "$PY" -m pytest -q -p no:cacheprovider "$HERE/server/test_hostile.py" "$@"
rc=$?
echo "hostile suite: $(($(date +%s) - t0)) s"
serve_stop 10 || rc=1
exit $rc
