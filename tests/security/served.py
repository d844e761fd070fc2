"""A small project served by a real ``subagents serve``, its models on the fake model server."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
from subagents.testing import FakeModelServer

from tests.dialogue_harness import write_project
from tests.serve_process import ServeProcess, serve_process

MODEL_KEY = {"OPENAI_API_KEY": "unused-by-the-fake-model"}
WEATHER_AGENT = """
    agent: {name: weather_agent, description: Tells the weather.}
    configuration: {include_date_time: false, llm: {model_group: agents}}
    connections:
      mcp_servers: [{name: tools, include_tools: [echo, timed_read]}]
    """


def served_project(root: Path, fake: FakeModelServer, tools_url: str, *,
                   credentials: str | None = None, endpoints_extra: str = "",
                   files: dict[str, str | None] | None = None) -> Path:
    """The dialogue harness's project with its models on ``fake`` (the command generator at
    ``command_generator``, the weather agent at ``weather_agent``), an in-memory tracker store
    unless ``endpoints_extra`` names another, and ``credentials`` as its credentials.yml."""
    endpoints = textwrap.dedent(f"""
        model_groups:
          - id: llm
            models: [{{provider: openai, model: fake,
                       api_base: "{fake.base_url('command_generator')}"}}]
          - id: agents
            models: [{{provider: openai, model: fake,
                       api_base: "{fake.base_url('weather_agent')}"}}]
        mcp_servers: [{{name: tools, type: http, url: "{tools_url}"}}]
        """)
    extra = textwrap.dedent(endpoints_extra)
    if "tracker_store:" not in extra:
        extra += "\ntracker_store: {type: memory}\n"
    project = write_project(root, tools_url, {
        "endpoints.yml": endpoints + extra,
        "sub_agents/weather/config.yml": WEATHER_AGENT,
        **(files or {})})
    if credentials is not None:
        (root / "credentials.yml").write_text(textwrap.dedent(credentials), encoding="utf-8")
    return project


@contextlib.asynccontextmanager
async def served(project: Path, *args: str, env: dict[str, str] | None = None,
                 ) -> AsyncIterator[tuple[ServeProcess, httpx2.AsyncClient]]:
    """``subagents serve`` on the project, and an HTTP client with its base URL."""
    async with serve_process(project, *args, env={**MODEL_KEY, **(env or {})}) as server, \
            httpx2.AsyncClient(base_url=server.url, timeout=60) as client:
        yield server, client


async def user_texts(client: httpx2.AsyncClient, sender: str) -> list[Any]:
    """The user messages recorded in ``sender``'s conversation."""
    from urllib.parse import quote

    reply = await client.get(f"/conversations/{quote(sender, safe='')}/tracker")
    assert reply.status_code == 200, reply.text
    return [e.get("text") for e in reply.json()["events"] if e.get("event") == "user"]
