#!/usr/bin/env bash
# Interop suite (`make interop`): third-party reference MCP servers driven through a real agent
# with the scripted model, then the official MCP client conformance suite against our client.
# Installs are cached in $SUBAGENTS_INTEROP_CACHE (default ~/.cache/subagents-interop) and redone
# only when the pinned versions below change. Needs npm and python3.11; Node 22 comes from npm.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${SUBAGENTS_INTEROP_CACHE:-$HOME/.cache/subagents-interop}"
PYTHON="${INTEROP_PYTHON:-.venv/bin/python}"
PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
NPM_PACKAGES=(
  node@22.23.3
  @modelcontextprotocol/conformance@0.1.16
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/server-memory@2026.8.31
)
PY_PACKAGES=(mcp-server-time==2026.10.19 mcp-server-git==2026.10.19)

mkdir -p "$CACHE/npm"
if [ "$(cat "$CACHE/npm/.pins" 2>/dev/null)" != "${NPM_PACKAGES[*]}" ]; then
  echo "== interop: installing npm packages into $CACHE/npm"
  timeout 600 npm install --no-audit --no-fund --loglevel=error --prefix "$CACHE/npm" \
    "${NPM_PACKAGES[@]}"
  echo "${NPM_PACKAGES[*]}" > "$CACHE/npm/.pins"
fi
if [ "$(cat "$CACHE/py/.pins" 2>/dev/null)" != "${PY_PACKAGES[*]}" ]; then
  echo "== interop: installing Python reference servers into $CACHE/py"
  rm -rf "$CACHE/py"
  python3.11 -m venv "$CACHE/py"
  timeout 600 "$CACHE/py/bin/pip" install -q "${PY_PACKAGES[@]}"
  echo "${PY_PACKAGES[*]}" > "$CACHE/py/.pins"
fi
export PATH="$CACHE/npm/node_modules/.bin:$PATH"
node --version | grep -q '^v22\.' || { echo "interop: Node 22 from npm did not install"; exit 1; }

echo "== interop: reference servers through a real agent"
SUBAGENTS_INTEROP_CACHE="$CACHE" timeout 600 "$PYTHON" -m pytest tests/interop -q \
  -p no:cacheprovider

echo "== interop: MCP client conformance suite"
# one scenario at a time: in parallel, 26 Python clients starting at once on a small machine
# miss the scenarios' timing windows
RESULTS="$(mktemp -d)"
trap 'rm -rf "$RESULTS"' EXIT
failed=()
for scenario in $(conformance list --client | sed -n 's/^  - \([^ ]*\).*/\1/p'); do
  if ! timeout 120 conformance client --scenario "$scenario" --timeout 30000 -o "$RESULTS" \
      --expected-failures .ci/conformance-baseline.yml \
      --command "$PYTHON -m tests.interop.conformance_client" > "$RESULTS/last.log" 2>&1; then
    cat "$RESULTS/last.log"
    failed+=("$scenario")
  fi
  echo "$scenario: $(grep -E '^(Passed|Total):' "$RESULTS/last.log" | tail -1 || true)"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "interop: conformance scenarios failing against the baseline: ${failed[*]}"
  exit 1
fi
echo "interop: conformance matches .ci/conformance-baseline.yml"
