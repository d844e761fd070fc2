#!/usr/bin/env bash
# The attack and fault tests of tests/security/ (the `security` mark), each against a real
# `subagents serve` in a child process: Socket.IO identities, A2A callers, caps and deadline,
# webhook caps and replays (across a restart and two workers sharing PostgreSQL and Redis),
# OAuth callback floods, turns in flight, template and MCP cwd limits, degraded start.
# Bounded: a few minutes (15 at most).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python}"
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python

# the replay and callback tests need PostgreSQL and Redis (they skip, saying why, without them)
if [ -z "${SUBAGENTS_TEST_POSTGRES_URL:-}" ] || [ -z "${SUBAGENTS_TEST_REDIS_URL:-}" ]; then
  eval "$(bash .ci/services.sh)"
fi

timeout 900 "$PYTHON" -m pytest tests/security -m security -q -p no:randomly -rs \
  -n "${SUBAGENTS_SECURITY_WORKERS:-2}" --dist loadgroup
