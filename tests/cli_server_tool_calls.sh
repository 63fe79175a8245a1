#!/usr/bin/env bash
# Tool calls through `lockstep serve` (docs/tool_calls.md): tests/server/test_tool_calls.py starts
# a plain server and a --draft ngram server on the default model, runs a tool-using
# conversation (named / required / auto / none tool_choice, the call and its result sent back
# for a final answer), streaming and not, checks that both servers give byte-identical
# responses, that a malformed call is reported, that bad tools / tool_choice / tool messages
# get 400 (the servers keep serving), and the openai client's typed objects when that package
# is installed (skipped with a message otherwise; the raw-HTTP checks always run). Both
# servers must exit 0 on SIGTERM. Exit 77 (skip) without the model.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}

if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
if ! command -v "$PY" >/dev/null; then echo "skip: $PY not found"; exit 77; fi

LOCKSTEP_CLI=$CLI LOCKSTEP_MODEL=$MODEL timeout 900 "$PY" "$HERE/server/test_tool_calls.py"
