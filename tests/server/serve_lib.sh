# Sourced by the tests/cli_*.sh tests that run `lockstep serve`: start it on a free loopback
# port, wait for /health 200, and at the end check it is still alive, exits 0 on SIGTERM and
# logged no sanitizer report. The trap always kills it. Needs CLI set by the caller.

SERVE_LOG=$(mktemp /tmp/lockstep-serve.XXXXXX)
PID=
URL=

serve_cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PID" 2>/dev/null
  fi
  rm -f "$SERVE_LOG"
}
trap serve_cleanup EXIT INT TERM

# serve_start WAIT_S ARGS...: sets PID and URL, or prints the log and exits 1.
serve_start() {
  local wait_s=$1
  shift
  "$CLI" serve --host 127.0.0.1 --port 0 "$@" >"$SERVE_LOG" 2>&1 &
  PID=$!
  URL=
  for _ in $(seq $((wait_s * 10))); do
    kill -0 "$PID" 2>/dev/null || { echo "FAIL: server exited:"; cat "$SERVE_LOG"; exit 1; }
    [ -z "$URL" ] && URL=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$SERVE_LOG" | head -1 | sed 's/^listening on //')
    if [ -n "$URL" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ]; then break; fi
    sleep 0.1
  done
  if [ -z "$URL" ] || [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" != 200 ]; then
    echo "FAIL: server not healthy within $wait_s s:"; cat "$SERVE_LOG"; exit 1
  fi
  echo "server: $URL (pid $PID)"
}

# serve_stop WAIT_S: 0 when the server was alive, exited 0 on SIGTERM within WAIT_S and logged
# no sanitizer report; 1 (with the reason) otherwise.
serve_stop() {
  local wait_s=$1 ok=0 st=
  if ! kill -0 "$PID" 2>/dev/null; then echo "FAIL: server died during the tests:"; tail -50 "$SERVE_LOG"; ok=1; fi
  kill -TERM "$PID" 2>/dev/null
  for _ in $(seq $((wait_s * 10))); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$PID" 2>/dev/null; then echo "FAIL: server ignored SIGTERM for $wait_s s"; ok=1; else wait "$PID"; st=$?; fi
  if [ -n "$st" ] && [ "$st" -ne 0 ]; then echo "FAIL: server exit status $st after SIGTERM"; tail -40 "$SERVE_LOG"; ok=1; fi
  if grep -qE 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:' "$SERVE_LOG"; then
    echo "FAIL: sanitizer report in the server log:"
    grep -A30 -E 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:' "$SERVE_LOG" | head -80
    ok=1
  fi
  PID=
  return $ok
}
