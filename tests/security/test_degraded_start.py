"""Issue 30, item 12: ``serve`` starts although a remote A2A agent and an MCP server do not
answer, says so in its log and on ``/health``, answers flows that need them with the
internal-error reply, and reconnects in the background; ``--strict-start`` stops instead."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import anyio
import pytest
from subagents.demo.a2a_insurer import ASK_NUMBER, build_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app, serve_mcp

from tests.security.served import MODEL_KEY, served, served_project
from tests.serve_process import free_port
from tests.servers.tools_server import server as tools_server

pytest.importorskip("a2a")

INTERNAL_ERROR = "Sorry, something went wrong"


def _project(tmp_path, fake, insurer_port: int, mcp_port: int):
    card = f"http://127.0.0.1:{insurer_port}/.well-known/agent-card.json"
    return served_project(tmp_path / "p", fake, f"http://127.0.0.1:{mcp_port}/mcp", files={
        "data/flows.yml": """
            flows:
              weather_flow:
                description: tell the weather
                steps:
                  - call: weather_agent
                  - action: utter_after_weather
              insurance_flow:
                description: check the insurance
                steps:
                  - call: insurer
            """,
        "data/domain.yml": """
            responses:
              utter_after_weather: [{text: "Anything else about the weather?"}]
              utter_internal_error_rasa: [{text: "Sorry, something went wrong on my side."}]
            """,
        "sub_agents/booking/config.yml": None,
        "sub_agents/insurer/config.yml": f"""
            agent: {{name: insurer, protocol: A2A, description: Checks insurance policies.}}
            configuration: {{agent_card: "{card}", max_retries: 1, timeout: 5}}
            """})


async def _health(client) -> dict:
    reply = await client.get("/health")
    assert reply.status_code == 200
    return dict(reply.json())


async def _say(client, sender: str, text: str = "hi") -> list[str]:
    reply = await client.post("/webhooks/rest/webhook", json={"sender": sender, "message": text})
    assert reply.status_code == 200, reply.text
    return [m.get("text", "") for m in reply.json()]


async def test_serve_starts_degraded_and_recovers_when_the_dependencies_answer(tmp_path):
    insurer_port, mcp_port = free_port(), free_port()
    script = {"command_generator": ["start flow insurance_flow", "start flow weather_flow",
                                    "start flow insurance_flow", "start flow weather_flow"],
              "weather_agent": [{"text": "Sunny.", "tool_calls": [{"task_completed": {}}]}]}
    async with FakeModelServer(script) as fake:
        project = _project(tmp_path, fake, insurer_port, mcp_port)
        async with served(project) as (server, client):
            degraded = await _health(client)
            down_a2a = await _say(client, "a", "is my visit covered?")
            down_mcp = await _say(client, "b", "weather?")
            async with serve_app(build_app(), port=insurer_port), \
                    serve_mcp(tools_server, "http", port=mcp_port):
                with anyio.fail_after(90):  # reconnected in the background
                    while True:
                        if (await _health(client))["status"] == "ok":
                            break
                        await asyncio.sleep(0.2)
                up_a2a = await _say(client, "c", "is my visit covered?")
                up_mcp = await _say(client, "d", "weather?")
            log = server.log()
    assert degraded["status"] == "degraded"
    assert degraded["unavailable"] == {"a2a_agents": ["insurer"], "mcp_servers": ["tools"]}
    assert down_a2a == ["Sorry, something went wrong on my side."]
    assert down_mcp == ["Sorry, something went wrong on my side."]
    assert "dependency.unavailable" in log
    assert "insurer" in log
    assert up_a2a[0] == ASK_NUMBER
    assert up_mcp[:2] == ["Sunny.", "Anything else about the weather?"]
    assert "weather_agent" not in [r.caller for r in fake.requests[:2]]  # never ran blind


async def test_strict_start_stops_with_the_one_screen_help(tmp_path):
    async with FakeModelServer({}) as fake:
        project = _project(tmp_path, fake, free_port(), free_port())
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "subagents.cli.main", "serve", "--project",
                             str(project), "--port", str(free_port()), "--no-model-check",
                             "--strict-start"],
            env={**os.environ, **MODEL_KEY}, capture_output=True, text=True,
            timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "[agent.a2a.card_unreachable]" in done.stderr or \
        "[agent.mcp_connection_failed]" in done.stderr
