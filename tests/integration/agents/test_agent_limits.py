"""Limits of a run: the step limit is visible, prompt templates stay in the project and are
rendered with a size cap, and model text and tool results are capped (and marked)."""

from __future__ import annotations

import anyio
import pytest
from structlog.testing import capture_logs
from subagents.agents.open_agent import MCPOpenAgent
from subagents.config.sub_agent import SubAgentConfig
from subagents.exceptions import AgentInitializationError
from subagents.testing import FakeModelServer

from tests.agent_harness import IN_MEMORY, TimedChannel, agent_input, build_agent, close


async def run_agent(script, *, cls=MCPOpenAgent, **kw):
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, IN_MEMORY, cls=cls, **kw)
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input(), TimedChannel())
        finally:
            await close(agent)
        return output, fake


async def test_reaching_max_agent_steps_is_logged_as_a_warning_and_is_the_exit_reason():
    script = [{"tool_calls": [{"echo": {"text": "a"}}]}, "Here is what I found."]
    with capture_logs() as logs:
        output, fake = await run_agent(script, configuration={"max_agent_steps": 1})
    fake.assert_done()
    assert output.exit_reason == "max_steps"
    assert any(e["event"] == "agent.run.max_steps" and e["log_level"] == "warning"
               for e in logs)


def test_a_prompt_template_outside_the_project_folder_is_refused(tmp_path):
    (tmp_path / "secret.txt").write_text("not a prompt")
    project = tmp_path / "project"
    project.mkdir()
    config = SubAgentConfig.model_validate({
        "agent": {"name": "a", "description": "d"},
        "configuration": {"prompt_template": "../secret.txt"}})
    with pytest.raises(AgentInitializationError) as caught:
        MCPOpenAgent.from_config(config, project_root=project)
    assert caught.value.code == "agent.prompt_template.outside_project"


class Small(MCPOpenAgent):
    MAX_PROMPT_CHARS = 1_000
    MAX_RESPONSE_CHARS = 50
    MAX_TOOL_RESULT_CHARS = 100


async def test_a_huge_template_is_cut_while_rendering(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the project folder defaults to the working directory
    (tmp_path / "prompt.jinja2").write_text(
        "{% for i in range(90000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}")
    async with FakeModelServer({"weather_agent": ["Hi."]}) as fake:
        agent = await build_agent(fake, None, cls=Small,
                                  configuration={"prompt_template": "prompt.jinja2"})
        try:
            with anyio.fail_after(30):
                await agent.run(agent_input(), TimedChannel())
        finally:
            await close(agent)
    system = fake.requests[0].messages[0]["content"]
    assert system.startswith("x" * 1_000)
    assert len(system) < 1_200
    assert "cut" in system[1_000:]


async def test_long_model_text_and_tool_results_are_capped_and_marked():
    script = [{"text": "y" * 500, "tool_calls": [{"huge": {"size": 5000}}]},
              {"text": "z" * 500, "tool_calls": [{"task_completed": {}}]}]
    output, fake = await run_agent(script, cls=Small)
    fake.assert_done()
    filler, tool, final = output.events
    assert filler["text"].startswith("y" * 50)
    assert len(filler["text"]) < 60
    assert len(final["text"]) < 60
    assert tool["result"].startswith("x" * 100)
    assert len(tool["result"]) < 200
    assert "5000" in tool["result"]


async def test_the_size_caps_are_configuration_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompt.jinja2").write_text("{% for i in range(5000) %}x{% endfor %}")
    script = [{"text": "y" * 500, "tool_calls": [{"huge": {"size": 5000}}]},
              {"text": "z" * 500, "tool_calls": [{"task_completed": {}}]}]
    output, fake = await run_agent(script, configuration={
        "prompt_template": "prompt.jinja2", "max_prompt_chars": 1_000,
        "max_response_chars": 50, "max_tool_result_chars": 100})
    fake.assert_done()
    system = fake.requests[0].messages[0]["content"]
    assert system.startswith("x" * 1_000)
    assert len(system) < 1_200
    filler, tool, final = output.events
    assert filler["text"].startswith("y" * 50)
    assert len(filler["text"]) < 60
    assert len(final["text"]) < 60
    assert tool["result"].startswith("x" * 100)
    assert len(tool["result"]) < 200


def test_the_size_caps_default_to_the_documented_values():
    agent = MCPOpenAgent("a", "d")
    assert (agent.max_prompt_chars, agent.max_response_chars, agent.max_tool_result_chars) \
        == (200_000, 20_000, 200_000)


@pytest.mark.parametrize("key", ["max_prompt_chars", "max_response_chars",
                                 "max_tool_result_chars"])
def test_a_size_cap_must_be_positive(key):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        SubAgentConfig.model_validate({"agent": {"name": "a", "description": "d"},
                                       "configuration": {key: 0}})
