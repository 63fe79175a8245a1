#!/usr/bin/env bash
# Browser test of the chat page (GET /, src/server/webui): starts `lockstep serve` (--draft
# ngram, so the page shows acceptance and the exactness verdict) with the default model on a
# free loopback port, checks the page's headers with curl, then runs tests/server/test_webui.py:
# headless Debian chromium driven by Selenium (chromedriver) sends messages, watches an answer
# stream, stops one midway, reads the footer stats, asks for the key under --api-key, and
# checks --no-webui. Screenshots (desktop and 390 px phone width) are written next to the
# test's working directory (build/<preset>/tests/webui.png, webui-phone.png) or to
# $LOCKSTEP_ARTIFACT_DIR.
#
# chromium, chromium-driver (apt) and selenium (pip) are installed by scripts/setup.sh: when one
# is missing this test FAILS. LOCKSTEP_SKIP_BROWSER=1 skips it (exit 77, saying so; CI does not
# set it). It is skipped (77) when the model is missing, like the other server tests.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}
CHROMIUM=${LOCKSTEP_CHROMIUM:-$(command -v chromium || true)}
CHROMEDRIVER=${LOCKSTEP_CHROMEDRIVER:-$(command -v chromedriver || true)}
ART=${LOCKSTEP_ARTIFACT_DIR:-$PWD}

if [ "${LOCKSTEP_SKIP_BROWSER:-0}" = 1 ]; then
  echo "skip: LOCKSTEP_SKIP_BROWSER=1: the chat page's browser test is not run"
  exit 77
fi
if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
missing=()
[ -n "$CHROMIUM" ] && [ -x "$CHROMIUM" ] || missing+=("chromium (apt)")
[ -n "$CHROMEDRIVER" ] && [ -x "$CHROMEDRIVER" ] || missing+=("chromium-driver (apt)")
"$PY" -c "import selenium" 2>/dev/null || missing+=("selenium (pip)")
"$PY" -c "import pytest" 2>/dev/null || missing+=("pytest (pip)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "FAIL: the browser test needs ${missing[*]}: run bash scripts/setup.sh (or set LOCKSTEP_SKIP_BROWSER=1 to skip it)"
  exit 1
fi

source "$HERE/server/serve_lib.sh"

CTX=2048
serve_start 60 -m "$MODEL" --parallel 2 -c $CTX --draft ngram --timeout 120

# The page as curl sees it: HTML with a Content-Security-Policy, its two files, nothing else.
fail=0
hdr=$(curl -s -D - -o "$SERVE_LOG.page" "$URL/")
grep -qi '^content-type: text/html; charset=utf-8' <<<"$hdr" || { echo "FAIL: GET / content type: $hdr"; fail=1; }
grep -qi "^content-security-policy: default-src 'none'; script-src 'self'" <<<"$hdr" || { echo "FAIL: GET / CSP: $hdr"; fail=1; }
grep -q 'webui/app.js' "$SERVE_LOG.page" || { echo "FAIL: GET / is not the chat page"; fail=1; }
for p in /index.html /webui/app.js /webui/style.css; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$URL$p")
  [ "$code" = 200 ] || { echo "FAIL: GET $p -> $code"; fail=1; }
done
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/")
[ "$code" = 405 ] || { echo "FAIL: POST / -> $code (want 405)"; fail=1; }
rm -f "$SERVE_LOG.page"
[ "$fail" -eq 0 ] && echo "curl: GET / (text/html + CSP), /index.html, /webui/app.js, /webui/style.css ok; POST / 405"

LOCKSTEP_SERVER_URL=$URL LOCKSTEP_SERVER_CTX=$CTX LOCKSTEP_MODEL=$MODEL LOCKSTEP_CLI=$CLI \
  LOCKSTEP_CHROMIUM=$CHROMIUM LOCKSTEP_CHROMEDRIVER=$CHROMEDRIVER LOCKSTEP_ARTIFACT_DIR=$ART \
  timeout 900 "$PY" -m pytest -q -x -p no:cacheprovider "$HERE/server/test_webui.py" "$@"
rc=$?

serve_stop 10 || rc=1
[ "$fail" -ne 0 ] && rc=1
exit $rc
