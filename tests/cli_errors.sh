#!/usr/bin/env bash
# CLI error handling: bad flags -> usage + exit 2; unreadable/malformed model files ->
# a message naming the problem + exit 1, never a crash (a signal would give exit >= 128).
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
DATA=${LOCKSTEP_TEST_DATA:?}
CORPUS="$DATA/../fuzz/corpus/gguf"
fail=0
TMPDIR=$(mktemp -d); trap 'rm -rf "$TMPDIR"' EXIT
expect() { # expect CODE PATTERN -- command...
  local code=$1 pat=$2; shift 3
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qiE -e "$pat" <<<"$err"; then
    echo "FAIL: '$*' -> rc=$rc (want $code), stderr: $err"; fail=1
  fi
}
expect 2 "usage" -- "$CLI"
expect 2 "unknown command" -- "$CLI" frobnicate
expect 2 "usage|unrecognized|invalid" -- "$CLI" run --no-such-flag
expect 2 "-n expects" -- "$CLI" run -n abc
expect 2 "-t expects" -- "$CLI" run -t 0
expect 2 "--temp expects" -- "$CLI" run --temp -1
expect 2 "--top-p expects" -- "$CLI" run --top-p 2
expect 2 "not both" -- "$CLI" run -p a -f b
expect 2 "usage" -- "$CLI" tokenize
expect 2 "--mode" -- "$CLI" logits --tokens 1,2 --mode sideways
expect 2 "--tokens" -- "$CLI" logits --tokens 1,,x
expect 2 "--draft must be" -- "$CLI" run --draft telepathy
expect 2 "--model-draft" -- "$CLI" run --draft model
expect 2 "--draft-block-size expects" -- "$CLI" run --draft ngram --draft-block-size 1
expect 2 "cannot open prompt file" -- "$CLI" run -f /nonexistent/prompt.txt
expect 1 "cannot load model.*(No such file|cannot open)" -- "$CLI" tokenize -m /nonexistent.gguf -p hi
expect 1 "cannot load model" -- "$CLI" tokenize -m /etc/passwd -p hi
# Every malformed file of the fuzz regression corpus: a clear error, exit 1, no crash.
# (nullglob: an empty or missing corpus counts 0 files, and fails below)
shopt -s nullglob
n=0
for f in "$CORPUS"/*; do
  "$CLI" tokenize -m "$f" -p hi >/dev/null 2>"$TMPDIR/err.txt" </dev/null; rc=$?
  if [ "$rc" -ge 2 ]; then echo "FAIL: $f -> rc=$rc: $(cat "$TMPDIR/err.txt")"; fail=1; fi
  if [ "$rc" -eq 1 ] && ! grep -q "cannot load model" "$TMPDIR/err.txt"; then echo "FAIL: $f: no message"; fail=1; fi
  n=$((n+1))
done
# an empty or missing corpus would make the loop above check nothing
if [ "$n" -lt 5 ]; then
  echo "FAIL: only $n files in the GGUF corpus $CORPUS"; fail=1
fi
[ $fail -eq 0 ] && echo "PASS: CLI errors ($n malformed model files rejected cleanly)"
exit $fail
