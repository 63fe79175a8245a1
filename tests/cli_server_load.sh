#!/usr/bin/env bash
# Load test of `lockstep serve`: starts the server (--parallel 4, -c 2048) on a free loopback
# port with the default model, waits for /health 200, runs tests/server/test_load.py (8
# concurrent clients, 200 mixed chat/completion requests, streaming and not, openai client
# and raw HTTP, ~10% early disconnects, 503 + Retry-After retries; RSS back to idle), then
# checks the server is still alive and exits 0 on SIGTERM. Always kills the server.
# Exit 77 (skip) when the model or the python packages are missing.
#
# Env: LOCKSTEP_CLI (the binary; e.g. build/asan/lockstep for a sanitizer run),
#      LOCKSTEP_MODEL, LOCKSTEP_LOAD_REQUESTS (200), LOCKSTEP_LOAD_CLIENTS (8),
#      LOCKSTEP_LOAD_RSS_SLACK_MIB (32), LOCKSTEP_LOAD_DEADLINE_S (420).
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}

if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
if ! "$PY" -c "import pytest, openai" 2>/dev/null; then
  echo "skip: python packages pytest and openai are needed (pip install pytest openai)"; exit 77
fi

LOG=$(mktemp /tmp/lockstep-serve-load.XXXXXX)
PID=
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PID" 2>/dev/null
  fi
  rm -f "$LOG"
}
trap cleanup EXIT INT TERM

# Under AddressSanitizer freed memory sits in the quarantine (256 MiB by default) instead of
# going back to the allocator, which would swamp the RSS check: the server runs with a 16 MiB
# quarantine (still catching use-after-free of recently freed blocks) and the check allows
# that on top of the usual slack, unless the caller set a slack. Measured: +12.6 MiB.
if [ -z "${LOCKSTEP_LOAD_RSS_SLACK_MIB:-}" ] && grep -q __asan_init "$CLI" 2>/dev/null; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16"
  export LOCKSTEP_LOAD_RSS_SLACK_MIB=48
  echo "note: sanitizer build, ASan quarantine 16 MiB, RSS slack ${LOCKSTEP_LOAD_RSS_SLACK_MIB} MiB"
fi

CTX=2048
"$CLI" serve -m "$MODEL" --host 127.0.0.1 --port 0 --parallel 4 -c $CTX --timeout 120 >"$LOG" 2>&1 &
PID=$!
URL=
for _ in $(seq 1200); do # <= 120 s (sanitizer builds load slowly)
  kill -0 "$PID" 2>/dev/null || { echo "FAIL: server exited:"; cat "$LOG"; exit 1; }
  [ -z "$URL" ] && URL=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$LOG" | head -1 | sed 's/^listening on //')
  if [ -n "$URL" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ]; then break; fi
  sleep 0.1
done
if [ -z "$URL" ] || [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" != 200 ]; then
  echo "FAIL: server not healthy within 120 s:"; cat "$LOG"; exit 1
fi
echo "server: $URL (pid $PID)"

LOCKSTEP_SERVER_URL=$URL LOCKSTEP_SERVER_PID=$PID LOCKSTEP_MODEL=$MODEL LOCKSTEP_CLI=$CLI \
  timeout 900 "$PY" -m pytest -q -x -s -p no:cacheprovider "$HERE/server/test_load.py" "$@"
rc=$?

# The server must still be alive, must not have logged a sanitizer report, and must shut
# down cleanly on SIGTERM with exit 0.
if ! kill -0 "$PID" 2>/dev/null; then echo "FAIL: server died during the load:"; tail -50 "$LOG"; rc=1; fi
kill -TERM "$PID" 2>/dev/null
src=
for _ in $(seq 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$PID" 2>/dev/null; then echo "FAIL: server ignored SIGTERM for 30 s"; rc=1; else wait "$PID"; src=$?; fi
if [ -n "$src" ] && [ "$src" -ne 0 ]; then echo "FAIL: server exit status $src after SIGTERM"; tail -40 "$LOG"; rc=1; fi
if grep -qE 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:' "$LOG"; then
  echo "FAIL: sanitizer report in the server log:"; grep -A30 -E 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:' "$LOG" | head -80; rc=1
fi
PID=
exit $rc
