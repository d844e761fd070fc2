#!/usr/bin/env bash
# The real rasa-webchat widget (from npm) in headless Chromium (from Debian) against the
# Socket.IO channel, and the inspector page (checked with axe-core from npm, fetched once into
# the cache, never into the package). Screenshots land in artifacts/browser/. Bounded: about
# 10 minutes at most.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/subagents-browser"
mkdir -p "$CACHE"

if ! command -v chromium >/dev/null 2>&1; then
  timeout 300 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
    chromium >/dev/null
fi

WEBCHAT="$CACHE/package/lib/index.js"
if [ ! -f "$WEBCHAT" ]; then
  # only the widget's self-contained bundle (lib/index.js) is used: fetch the package itself,
  # not its build dependencies
  (cd "$CACHE" && rm -rf package rasa-webchat-*.tgz \
    && timeout 300 npm pack --silent rasa-webchat@1 >/dev/null \
    && tar -xzf rasa-webchat-*.tgz package/lib/index.js package/package.json)
fi

AXE="$CACHE/axe/package/axe.min.js"
if [ ! -f "$AXE" ]; then
  # axe-core's single-file build: injected into the inspector page by the test at run time
  mkdir -p "$CACHE/axe"
  (cd "$CACHE/axe" && rm -rf package axe-core-*.tgz \
    && timeout 300 npm pack --silent axe-core@4 >/dev/null \
    && tar -xzf axe-core-*.tgz package/axe.min.js package/package.json)
fi

if [ ! -x .venv/bin/python ]; then
  make install
fi
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 300 .venv/bin/python -m pip install -q -e '.[browser-test]'

SUBAGENTS_WEBCHAT_JS="$WEBCHAT" SUBAGENTS_AXE_JS="$AXE" SUBAGENTS_CHROMIUM="$(command -v chromium)" \
  timeout 300 .venv/bin/python -m pytest tests/browser -q -p no:cacheprovider
test -s artifacts/browser/2-answer.png
test -s artifacts/browser/inspector-2-completed.png
test -s artifacts/browser/inspector-save-as-test.png
