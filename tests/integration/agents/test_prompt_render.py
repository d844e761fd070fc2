"""Where an agent's prompt renders: a quick template on the event loop (no thread hop per
step), a slow one moves to a worker thread once it has run for a millisecond."""

from __future__ import annotations

import threading
from typing import Any

import anyio
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.schemas import AgentInput
from subagents.testing import FakeModelServer

from tests.agent_harness import agent_input, build_agent, close


class ThreadProbe(MCPOpenAgent):
    """Its template can ask which thread renders it."""

    def _build_context_for_prompt(self, context: AgentInput) -> dict[str, Any]:
        return {**super()._build_context_for_prompt(context),
                "thread": lambda: threading.current_thread().name}


async def _system_prompt(template: str, tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompt.jinja2").write_text(template)
    async with FakeModelServer({"weather_agent": [{"text": "Hi."}]}) as fake:
        agent = await build_agent(fake, None, cls=ThreadProbe,
                                  configuration={"prompt_template": "prompt.jinja2"})
        try:
            with anyio.fail_after(30):
                await agent.run(agent_input())
        finally:
            await close(agent)
        fake.assert_done()
    return fake.requests[0].messages[0]["content"]


async def test_a_quick_prompt_renders_on_the_event_loop(tmp_path, monkeypatch):
    system = await _system_prompt("You help. {{ thread() }}", tmp_path, monkeypatch)
    assert system == f"You help. {threading.main_thread().name}"


async def test_a_slow_prompt_finishes_in_a_worker_thread_and_renders_whole(tmp_path,
                                                                          monkeypatch):
    # tens of thousands of loop passes take far longer than the millisecond on the loop
    template = ("{% for i in range(60000) %}.{% if loop.last %}{{ thread() }}{% endif %}"
                "{% endfor %}")
    system = await _system_prompt(template, tmp_path, monkeypatch)
    assert system.startswith("." * 60000)
    assert system[60000:] != threading.main_thread().name
    assert system[60000:]  # the name of the worker thread that finished it
