"""Shared fixtures: build assistant projects in a temporary folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

pytest_plugins = ["tests.traceback_guard"]

# Tracebacks in test logs are plain: the default rich formatter prints every frame's locals,
# which is slow (seconds per traceback under load) and would show values that never belong in
# a log.
structlog.configure(processors=[
    *structlog.get_config()["processors"][:-1],
    structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
])

BASE_FILES: dict[str, str] = {
    "endpoints.yml": """
        model_groups:
          - id: agent_llm
            models:
              - provider: openai
                model: gpt-4.1-mini
        mcp_servers:
          - name: tools
            type: stdio
            command: python
            args: ["-m", "subagents.demo.stocks"]
        """,
    "data/domain.yml": """
        slots:
          city:
            type: text
          guests:
            type: float
        responses:
          utter_done:
            - text: "Done for {city}."
        """,
    "data/flows.yml": """
        flows:
          weather_flow:
            description: get the weather
            steps:
              - call: weather_agent
              - action: utter_done
          booking_flow:
            description: book a table
            steps:
              - call: booking_agent
                exit_if:
                  - slots.city is not null
              - action: utter_done
        """,
    "sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: Tells the weather.
        configuration:
          llm:
            model_group: agent_llm
        connections:
          mcp_servers:
            - name: tools
        """,
    "sub_agents/booking/config.yml": """
        agent:
          name: booking_agent
          description: Books a table.
        connections:
          mcp_servers:
            - name: tools
        """,
}

MakeProject = Callable[..., Path]


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    """Write BASE_FILES overridden by ``files`` (None deletes a file) into a temp project."""

    def build(files: dict[str, str | None] | None = None, *, base: bool = True) -> Path:
        merged: dict[str, str | None] = dict(BASE_FILES) if base else {}
        merged.update(files or {})
        root = tmp_path / "project"
        for rel, text in merged.items():
            if text is None:
                continue
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        root.mkdir(exist_ok=True)
        return root

    return build


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``) the tests that use the shared PostgreSQL and
    Redis servers run on one worker, so they never race on creating the same tables."""
    for item in items:
        if item.get_closest_marker("postgres") or item.get_closest_marker("redis"):
            item.add_marker(pytest.mark.xdist_group("services"))
