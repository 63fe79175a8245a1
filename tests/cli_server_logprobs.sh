#!/usr/bin/env bash
# Logprobs through `lockstep serve` (docs/logprobs.md): tests/server/test_logprobs.py starts a
# plain server and a --draft ngram server on the default model, checks that the same seeded
# requests (chat and completions, streaming and not, T 0 and 0.8, top_logprobs 5, a stop
# sequence) give byte-identical logprobs JSON on both, the shapes and their consistency with
# the text, 400s for bad values (the servers keep serving), and the openai client's typed
# objects when that package is installed (skipped with a message otherwise; the raw-HTTP
# checks always run). Both servers must exit 0 on SIGTERM. Exit 77 (skip) without the model.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}

if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
if ! command -v "$PY" >/dev/null; then echo "skip: $PY not found"; exit 77; fi

LOCKSTEP_CLI=$CLI LOCKSTEP_MODEL=$MODEL timeout 900 "$PY" "$HERE/server/test_logprobs.py"
