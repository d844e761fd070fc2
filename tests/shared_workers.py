"""Projects for tests that run two ``subagents serve`` workers sharing PostgreSQL and Redis."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

POSTGRES = os.environ.get("SUBAGENTS_TEST_POSTGRES_URL")
REDIS = os.environ.get("SUBAGENTS_TEST_REDIS_URL")

MARKS = [
    pytest.mark.postgres, pytest.mark.redis,
    pytest.mark.skipif(not (POSTGRES and REDIS), reason=(
        "needs SUBAGENTS_TEST_POSTGRES_URL and SUBAGENTS_TEST_REDIS_URL: "
        'eval "$(bash .ci/services.sh)" starts both')),
]
"""The marks of a module whose tests need both shared stores (skipped without them)."""


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Write each file (its text dedented) below ``root``; return ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def workers_project(root: Path, assistant_id: str, models: str, agent: str, mcp_server: str,
                    files: dict[str, str]) -> Path:
    """A project whose workers share the stores, with ``files`` added.

    Args:
        root: Where to write it.
        assistant_id: The assistant's id.
        models: The fake model server's base URL: the command generator's model is at
            ``<models>/command_generator/v1``, the agent's at ``<models>/<agent>/v1``; the model
            groups are ``command_llm`` and ``agent_llm``.
        agent: The sub agent's name.
        mcp_server: The MCP server's declaration (a YAML list item, dedented).
        files: The other files (flows, domain, the sub agent's config).
    """
    server = textwrap.indent(textwrap.dedent(mcp_server).strip("\n"), "  ")
    config = f"""
        assistant_id: {assistant_id}
        pipeline:
          - name: CompactLLMCommandGenerator
            llm: {{model_group: command_llm}}
        """
    endpoints = textwrap.dedent(f"""
        model_groups:
          - id: command_llm
            models:
              - {{provider: openai, model: fake, api_base: "{models}/command_generator/v1"}}
          - id: agent_llm
            models:
              - {{provider: openai, model: fake, api_base: "{models}/{agent}/v1"}}
        mcp_servers:
        """).lstrip("\n") + server + textwrap.dedent(f"""
        tracker_store:
          type: sql
          url: {POSTGRES}
        lock_store:
          type: redis
          url: {REDIS}
        """)
    return write_files(root, {"config.yml": config, "endpoints.yml": endpoints, **files})
