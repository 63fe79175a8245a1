#!/usr/bin/env bash
# Prints the sha256 of `lockstep logits --device cpu` on the default model (a 700-token
# prompt, past the sliding window) and on every checkpoint fixture, one line per
# (model, mode). Recorded before the backend-seam change (tests/data/cpu_bytes/sha256.txt)
# so tests/cli_cpu_bytes.sh can show the CPU backend still computes exactly those bytes.
# Usage: tools/cpu_logits_sha256.sh CLI MODEL_GGUF|"" DATA_DIR [--device-cpu]
# (an empty MODEL skips the default model; --device-cpu passes --device cpu, for builds with
# CUDA on a GPU machine)
set -euo pipefail
CLI=$1; MODEL=$2; DATA=$3; DEV=""
[ "${4:-}" = --device-cpu ] && DEV="--device cpu"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
prompt=$(for i in $(seq 1 70); do printf 'The quick brown fox %d jumps over the lazy dog. ' "$i"; done)
[ -n "$MODEL" ] && for mode in prefill prefill:64; do
  "$CLI" logits -m "$MODEL" $DEV -p "$prompt" --mode "$mode" -t 2 -o "$tmp/o.f32" 2>/dev/null
  echo "default $mode $(sha256sum < "$tmp/o.f32" | cut -c1-64)"
done
for fx in gemma3_text gemma3_text_mlx_q4 gemma4_dense gemma4_dense_mlx_q4_mlp8 gemma4_ple gemma4_moe gemma4_moe_mlx_q4 gemma4_ple_mlx_q4 gemma4_dense_h96_mlx_q4; do
  d="$DATA/hf/$fx"
  toks=$(od -An -v -t d4 -N 160 "$d/golden/tokens.i32" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
  "$CLI" logits -m "$d" $DEV --tokens "$toks" --mode prefill -t 2 -o "$tmp/o.f32" 2>/dev/null
  echo "$fx prefill $(sha256sum < "$tmp/o.f32" | cut -c1-64)"
done
