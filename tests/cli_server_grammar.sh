#!/usr/bin/env bash
# Structured output of `lockstep serve` (docs/structured_output.md): runs
# tests/server/test_grammar.py, which starts its own servers (default model, free loopback
# ports; one plain, one with --draft ngram) and always stops them: 24 schema-constrained
# requests must give JSON valid against their schemas (the jsonschema package) and identical
# bytes with the drafter; bad schemas and GBNF grammars get 400 and the server keeps serving.
# Exit 77 (skip) when the model or pytest / jsonschema is missing. Env: LOCKSTEP_CLI,
# LOCKSTEP_MODEL.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${LOCKSTEP_MODEL:-$HOME/.cache/lockstep/gemma-3-270m-q4_k_m.gguf}
PY=${PYTHON:-python3}

if [ ! -f "$MODEL" ]; then echo "skip: model $MODEL not found (bash scripts/setup.sh)"; exit 77; fi
if ! "$PY" -c "import pytest, jsonschema" 2>/dev/null; then
  echo "skip: python packages pytest and jsonschema are needed (pip install pytest jsonschema)"; exit 77
fi

LOCKSTEP_MODEL=$MODEL LOCKSTEP_CLI=$CLI \
  timeout 600 "$PY" -m pytest -q -s -p no:cacheprovider "$HERE/server/test_grammar.py" "$@"
