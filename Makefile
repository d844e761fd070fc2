# The first Python >= 3.11 on PATH, unless PYTHON=... is given.
ifeq ($(origin PYTHON), undefined)
PYTHON := $(shell for p in python3.11 python3.12 python3.13 python3.14 python3 python; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && { echo $$p; break; }; done)
endif
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint bench install clean compat

# Creates the virtualenv with the chosen Python (once).
define make_venv
	@test -n "$(PYTHON)" || { echo "No Python 3.11 or newer found (tried python3.11, python3.12," \
		"python3.13, python3.14, python3, python); install one or run make PYTHON=/path/to/python"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
endef

# Everything: the package with the dev extra (tests, linters, PostgreSQL and Redis clients).
$(STAMP): pyproject.toml
	$(make_venv)
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# Only what the demo needs: the package and the A2A client (the example has an A2A agent).
$(DEMO_STAMP): pyproject.toml
	$(make_venv)
	$(BIN)/python -m pip install -q -e '.[a2a]'
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/subagents demo

test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check plugin tests benchmarks
	$(BIN)/mypy plugin/subagents
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

compat: $(STAMP)
	$(BIN)/python scripts/compat.py --e2e

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .subagents

.PHONY: interop
# reference MCP servers through a real agent + the MCP client conformance suite (cached installs)
interop: $(STAMP)
	bash .ci/suites/interop.sh

.PHONY: live-model
# llama.cpp's server (xllamacpp wheel) on SmolLM2-135M through the model client (cached installs)
live-model: $(STAMP)
	bash .ci/suites/live_model.sh
