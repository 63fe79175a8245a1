#!/usr/bin/env bash
# End-to-end tests of `lockstep serve`: starts the server (--parallel 4, -c 2048) on a free
# loopback port with the default model, waits for /health 200, runs tests/server/test_server.py
# (pytest + the openai client; it starts its own extra servers for --draft ngram and
# --api-key), and always kills every server it started. Exit 77 (skip) when the model or the
# python packages are missing. Also checks `serve` flag errors (exit 2), model-less.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}

fail=0
for args in "--port 70000" "--parallel 0" "--draft telepathy" "--draft model" "--host ::1 --port 0" "--bogus"; do
  # shellcheck disable=SC2086
  "$CLI" serve -m /nonexistent $args >/dev/null 2>&1; rc=$?
  want=2; [ "$args" = "--host ::1 --port 0" ] && want=1
  if [ "$rc" -ne "$want" ]; then echo "FAIL: serve $args -> rc=$rc (want $want)"; fail=1; fi
done
"$CLI" serve -m /nonexistent --port 0 >/dev/null 2>&1; rc=$?
if [ "$rc" -ne 1 ]; then echo "FAIL: serve with a missing model -> rc=$rc (want 1)"; fail=1; fi
[ "$fail" -eq 0 ] || exit 1

if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
if ! "$PY" -c "import pytest, openai" 2>/dev/null; then
  echo "skip: python packages pytest and openai are needed (pip install pytest openai)"; exit 77
fi

source "$HERE/server/serve_lib.sh"

# LOCKSTEP_SERVER_TEST_CTX: the sanitizer run (scripts/test.sh) uses 1280, so the long-prompt
# tests prefill ~1100 tokens (still several -b chunks) instead of ~1950.
CTX=${LOCKSTEP_SERVER_TEST_CTX:-2048}
serve_start 60 -m "$MODEL" --parallel 4 -c $CTX --timeout 120

# curl, as a user would: raw SSE framing and error answers (status + OpenAI-style body).
curl_fail=0
sse=$(curl -sN "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":8,"temperature":0,"stream":true}')
n_events=$(grep -c '^data: ' <<<"$sse")
if [ "$n_events" -lt 3 ] || [ "$(grep '^data: ' <<<"$sse" | tail -1)" != "data: [DONE]" ] ||
  ! grep -q '"chat.completion.chunk"' <<<"$sse" || ! grep -q '"finish_reason":"' <<<"$sse"; then
  echo "FAIL: curl SSE stream malformed:"; echo "$sse" | head -20; curl_fail=1
fi
check_err() { # expected status, expected error type, curl args...
  local want=$1 type=$2; shift 2
  local out code body
  out=$(curl -s -w '\n%{http_code}' "$@"); code=${out##*$'\n'}; body=${out%$'\n'*}
  if [ "$code" != "$want" ] || ! grep -q "\"type\":\"$type\"" <<<"$body" || ! grep -q '"message":' <<<"$body"; then
    echo "FAIL: curl $* -> $code $body (want $want $type)"; curl_fail=1
  fi
}
J=(-H 'Content-Type: application/json')
check_err 400 invalid_request_error "${J[@]}" -d '{"messages": [' "$URL/v1/chat/completions"
check_err 400 invalid_request_error "${J[@]}" -d '{"prompt": "x", "max_tokens": "ten"}' "$URL/v1/completions"
check_err 400 invalid_request_error "${J[@]}" -d '{"messages": []}' "$URL/v1/chat/completions"
check_err 400 invalid_request_error "${J[@]}" -d '{"prompt": "x", "n": 2}' "$URL/v1/completions"
check_err 400 invalid_request_error "${J[@]}" --data-binary $'{"prompt": "\xff\xfe"}' "$URL/v1/completions"
check_err 404 invalid_request_error "$URL/v1/nope"
head -c 9000000 /dev/zero | tr '\0' 'a' >"$SERVE_LOG.big"
check_err 413 invalid_request_error "${J[@]}" --data-binary @"$SERVE_LOG.big" "$URL/v1/completions"
rm -f "$SERVE_LOG.big"
[ "$curl_fail" -eq 0 ] && echo "curl: SSE framing and 7 error answers ok"

LOCKSTEP_SERVER_URL=$URL LOCKSTEP_SERVER_CTX=$CTX LOCKSTEP_MODEL=$MODEL LOCKSTEP_CLI=$CLI \
  timeout 900 "$PY" -m pytest -q -x -p no:cacheprovider "$HERE/server/test_server.py" "$@"
rc=$?

# The main server must still be alive and shut down cleanly on SIGTERM with exit 0.
serve_stop 10 || rc=1
[ "$curl_fail" -ne 0 ] && rc=1
exit $rc
