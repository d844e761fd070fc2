#!/usr/bin/env bash
# Fuzz every HTTP route with a few thousand Hypothesis-generated bodies and headers: no 5xx.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python}"
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
SUBAGENTS_FUZZ_EXAMPLES="${SUBAGENTS_FUZZ_EXAMPLES:-1000}" PYTHONPATH="$PWD/plugin" \
  timeout 900 "$PYTHON" -m pytest tests/integration/server/test_server_fuzz.py -q
