#!/usr/bin/env bash
# The package as a user installs it: build the wheel, install it into a fresh virtualenv
# outside the source tree, then create, check, test and play an assistant with the installed
# `subagents` command only. Bounded to a few minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD

PY=""
for candidate in python3.11 python3.12 python3.13 python3.14 python3 python; do
  if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    PY=$candidate
    break
  fi
done
[ -n "$PY" ] || { echo "wheel suite: no Python 3.11 or newer found" >&2; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
step() { echo "-- wheel: $*"; }
run() { timeout "$1" "${@:2}"; }

step "build (from a copy, so the checkout stays clean)"
mkdir "$WORK/src"
tar -C "$SRC" --exclude=.venv --exclude=.git --exclude=.subagents --exclude=build \
    --exclude='*.egg-info' -cf - . | tar -C "$WORK/src" -xf -
# the project's virtualenv (made by `make test`) has pip for sure; a bare system Python may not
BUILD_PY=$PY
[ -x "$SRC/.venv/bin/python" ] && BUILD_PY=$SRC/.venv/bin/python
run 300 "$BUILD_PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/subagents-*.whl)
"$PY" - "$WHEEL" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
needed = ["subagents/config/default_patterns.yml", "subagents/py.typed",
          "subagents/agents/templates/open_agent.jinja2",
          "subagents/scaffold/templates/support/endpoints.yml"]
missing = [n for n in needed if n not in names]
if missing:
    sys.exit(f"the wheel lacks {missing}")
PY

step "install into a fresh virtualenv"
"$PY" -m venv "$WORK/venv"
run 600 "$WORK/venv/bin/python" -m pip install -q "$WHEEL"
BIN=$WORK/venv/bin

mkdir "$WORK/user"
cd "$WORK/user"
unset PYTHONPATH
"$BIN/python" - <<'PY'
import subagents
assert "site-packages" in subagents.__file__, subagents.__file__
print("installed at", subagents.__file__)
PY
"$BIN/subagents" --version

step "install weight: no action-server stack in a bare install"
"$BIN/python" - <<'PY'
import importlib.util
heavy = [m for m in ("rasa_sdk", "sanic", "grpc", "grpc_tools") if importlib.util.find_spec(m)]
if heavy:
    raise SystemExit(f"a bare install brings {heavy}: they belong behind the 'actions' extra")
PY
"$BIN/python" "$SRC/scripts/install_weight.py"
du -sh "$("$BIN/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

for template in support minimal; do
  step "init --template $template -> validate -> test -> demo"
  run 60 "$BIN/subagents" init "$template-assistant" --template "$template"
  (
    cd "$template-assistant"
    run 120 "$BIN/subagents" validate
    run 300 "$BIN/subagents" test
    run 300 "$BIN/subagents" demo --script demo.yml
  )
done

step "custom actions without the actions extra: validate names it"
mkdir -p support-assistant/actions
printf 'from rasa_sdk import Action\n' > support-assistant/actions/__init__.py
set +e
out=$(cd support-assistant && timeout 60 "$BIN/subagents" validate 2>&1)
code=$?
set -e
echo "$out" | grep -q "pip install 'subagents\[actions\]'" || { echo "$out"; exit 1; }
[ "$code" = 1 ] || { echo "validate exited $code"; exit 1; }
rm -r support-assistant/actions

step "shell without a key stops before the prompt with the fix"
set +e
out=$(cd support-assistant && env -u OPENAI_API_KEY timeout 60 "$BIN/subagents" shell </dev/null 2>&1)
code=$?
set -e
echo "$out" | grep -q "preflight.api_key_missing" || { echo "$out"; exit 1; }
[ "$code" = 1 ] || { echo "shell exited $code"; exit 1; }
step "ok"
