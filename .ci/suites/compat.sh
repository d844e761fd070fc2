#!/usr/bin/env bash
# Rasa compatibility: the projects `rasa init --template` writes (rasa-pro 3.21.0 wheel from PyPI,
# cached) must pass `subagents validate` unchanged.
set -euo pipefail
cd "$(dirname "$0")/../.."
timeout 900 make compat
