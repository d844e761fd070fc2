PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench install clean compat

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "python3.11 not found; set PYTHON=..."; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/subagents demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check plugin tests benchmarks
	$(BIN)/mypy plugin/subagents

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

compat: $(STAMP)
	$(BIN)/python scripts/compat.py --e2e

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .subagents
