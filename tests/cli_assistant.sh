#!/usr/bin/env bash
# Gemma 4 assistant drafting from the CLI, on the tiny checkpoints in tests/data/hf: for each
# (target, assistant) pair (dense tied head; centroid head with PLE + KV sharing) and T in
# {0, 0.8} (seeded), 256 tokens with --draft assistant are byte-identical to classic decoding,
# speculation really ran (the probe passed, rounds > 0), and --model-draft alone picks the
# assistant from its config.json. A mismatched pair is refused with a clear error (exit 1).
# `lockstep serve` on a checkpoint directory with the assistant answers a completion with
# the same text as `run`.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
DATA=${LOCKSTEP_TEST_DATA:?}
H="$DATA/hf"
[ -d "$H/gemma4_dense_assistant" ] || { echo "skip: no $H"; exit 77; }
fail=0
TMP=$(mktemp -d)
source "$(cd "$(dirname "$0")" && pwd)/server/serve_lib.sh"
trap 'serve_cleanup; rm -rf "$TMP"' EXIT INT TERM

PROMPT="The tiny model says"
for pair in gemma4_dense:gemma4_dense_assistant gemma4_ple:gemma4_ple_assistant; do
  tgt=${pair%%:*} asst=${pair##*:}
  for T in 0 0.8; do
    common=(run -m "$H/$tgt" -p "$PROMPT" -n 256 --ignore-eos --temp "$T" --seed 7 -t 2)
    "$CLI" "${common[@]}" >"$TMP/classic" 2>"$TMP/classic.err" || { echo "FAIL: classic $tgt: $(cat "$TMP/classic.err")"; fail=1; continue; }
    for how in "--draft assistant --model-draft $H/$asst" "--model-draft $H/$asst"; do
      # shellcheck disable=SC2086
      "$CLI" "${common[@]}" $how --draft-block-size 4 --stats >"$TMP/spec" 2>"$TMP/spec.err" ||
        { echo "FAIL: $tgt $how: $(tail -3 "$TMP/spec.err")"; fail=1; continue; }
      # --stats prints its line on stderr; stdout is the text alone
      if ! cmp -s "$TMP/classic" "$TMP/spec"; then
        echo "FAIL: $tgt T=$T ($how): assistant-drafted output differs from classic"; fail=1
      fi
      stats=$(grep -o 'speculative=[01].*' "$TMP/spec.err" | head -1)
      rounds=$(grep -o ' rounds=[0-9]*' <<<"$stats" | head -1 | cut -d= -f2)
      if ! grep -q 'speculative=1' <<<"$stats" || [ "${rounds:-0}" -lt 50 ]; then
        echo "FAIL: $tgt T=$T ($how): speculation did not run: $stats"; fail=1
      fi
    done
    echo "ok: $tgt + $asst, T=$T: 256 tokens identical ($(grep -o 'acceptance_rate=[0-9.]*' <<<"$stats"))"
  done
done

# a mismatched pair: dense target, the PLE target's assistant (other geometry)
err=$("$CLI" run -m "$H/gemma4_dense" --draft assistant --model-draft "$H/gemma4_ple_assistant" -p x -n 4 2>&1 >/dev/null)
rc=$?
if [ "$rc" -ne 1 ] || ! grep -qi "assistant" <<<"$err"; then echo "FAIL: mismatched pair -> rc=$rc: $err"; fail=1; fi
# --draft assistant without a path: usage error
"$CLI" run -m "$H/gemma4_dense" --draft assistant -p x -n 4 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --draft assistant without --model-draft should exit 2"; fail=1; }

# the server on a checkpoint directory, drafting with the assistant
serve_start 60 -m "$H/gemma4_dense" --model-draft "$H/gemma4_dense_assistant" -c 512 -t 2
health=$(curl -s "$URL/health")
grep -q '"passed"' <<<"$health" || { echo "FAIL: /health speculation not passed: $health"; fail=1; }
resp=$(curl -s "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 48, \"temperature\": 0, \"ignore_eos\": true}")
"$CLI" run -m "$H/gemma4_dense" -p "$PROMPT" -n 48 --ignore-eos --temp 0 -t 2 >"$TMP/run48" 2>/dev/null
got=$(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["choices"][0]["text"], end=""); print("\n" + str(r["timings"]["draft_n"]), file=sys.stderr)' <<<"$resp" 2>"$TMP/draft_n")
want=$(head -c -1 "$TMP/run48") # run ends its output with a newline
if [ "$got" != "$want" ]; then echo "FAIL: serve text differs from run: [$got] vs [$want]"; fail=1; fi
[ "$(tail -1 "$TMP/draft_n")" -gt 0 ] || { echo "FAIL: serve did not draft: $resp"; fail=1; }
serve_stop 30 || fail=1
exit $fail
