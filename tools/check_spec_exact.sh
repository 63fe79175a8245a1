#!/usr/bin/env bash
# Scripted exactness check on the real default model: for several prompts, 256 generated
# tokens with --ignore-eos, at T=0 and at T=0.8 (seeded), stdout with and without
# speculative decoding (--draft ngram --draft-block-size 4, and optionally more configs)
# must be byte-identical.
# usage: tools/check_spec_exact.sh [build/release/lockstep] [extra spec args...]
set -euo pipefail
CLI=${1:-build/release/lockstep}; shift || true
EXTRA=("$@"); [ ${#EXTRA[@]} -gt 0 ] || EXTRA=(--draft ngram --draft-block-size 4)
HERE=$(cd "$(dirname "$0")/.." && pwd)
prompts=("$HERE/bench/prompts/edit_code.txt" "$HERE/bench/prompts/summarize_quote.txt" "$HERE/bench/prompts/free_prose.txt")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0; n=0
for p in "${prompts[@]}"; do
  for t in 0 0.8; do
    "$CLI" run -f "$p" -n 256 --ignore-eos --temp "$t" --seed 1234 > "$tmp/classic.txt" 2>/dev/null
    "$CLI" run -f "$p" -n 256 --ignore-eos --temp "$t" --seed 1234 "${EXTRA[@]}" --stats > "$tmp/spec.txt" 2> "$tmp/spec.err"
    stats=$(grep -o "acceptance_rate=[0-9.]* emitted_per_verify=[0-9.]*" "$tmp/spec.err" || true)
    if cmp -s "$tmp/classic.txt" "$tmp/spec.txt"; then
      echo "identical: $(basename "$p") T=$t ($(wc -c < "$tmp/classic.txt") bytes; $stats)"
    else
      echo "DIFFERENT: $(basename "$p") T=$t"; fail=1
    fi
    n=$((n+1))
  done
done
[ $fail -eq 0 ] && echo "PASS: $n runs byte-identical with ${EXTRA[*]}"
exit $fail
