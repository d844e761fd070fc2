#!/usr/bin/env bash
# Providers suite (`make providers`): the providers reached through LiteLLM (the optional
# `providers` extra, not part of `dev`, so `make test` stays lean and skips these), each against
# its stand-in on 127.0.0.1 that speaks its own wire format (Anthropic Messages, Gemini and
# Vertex AI generateContent, Bedrock Converse, Cohere v2), plus the direct way for the hosted
# OpenAI-compatible ones. No test reaches the internet (a guard refuses other host lookups).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PROVIDERS_PYTHON:-.venv/bin/python}"

echo "== providers: installing the providers extra"
timeout 600 "$PYTHON" -m pip install -q -e '.[dev,providers]'
# a missing LiteLLM fails here instead of skipping the tests below
"$PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("litellm") is None)'

echo "== providers: LiteLLM and the direct way against the provider stand-ins"
timeout 900 "$PYTHON" -m pytest -p no:cacheprovider \
  tests/integration/llm/test_provider_wire_servers.py \
  tests/integration/llm/test_provider_models.py \
  tests/integration/llm/test_provider_conversations.py \
  tests/integration/llm/test_model_env_references.py \
  tests/unit/config/test_provider_validation.py
