"""Agent classes written against Rasa see what Rasa gives them: its event objects in
``AgentInput.events``, its hooks called at the same moments (``_get_meta_for_mcp_server`` before
every MCP call), its import paths (``rasa.core.channels.channel.OutputChannel``); an import path
the compatibility layer does not provide is a validate error naming it."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator

import anyio
import pytest
from subagents import events as ev
from subagents import rasa_compat
from subagents.agents.input_copy import copy_input
from subagents.agents.schemas import AgentInput
from subagents.config import collect_issues
from subagents.config.project import import_from_project
from subagents.testing import FakeModelServer

from tests.agent_harness import IN_MEMORY, TimedChannel, agent_input, build_agent, close
from tests.dialogue_harness import Conversation, assistant_for, names, write_project

TOKEN_AGENT = '''
    from typing import Any, Dict, Optional

    from rasa.agents.protocol.mcp.mcp_open_agent import MCPOpenAgent
    from rasa.agents.schemas import AgentInput, AgentOutput
    from rasa.core.channels.channel import OutputChannel
    from rasa.shared.core.events import BotUttered, SlotSet, UserUttered


    class TokenAgent(MCPOpenAgent):
        """Passes the user's token to the MCP server in _meta, as Rasa's samples do."""

        async def process_input(self, input: AgentInput) -> AgentInput:
            token = None
            for event in reversed(input.events):
                if isinstance(event, UserUttered):
                    token = (event.metadata or {}).get("user_token")
                    break
            input.metadata["user_token"] = token
            input.metadata["seen"] = {
                "users": [e.text for e in input.events if isinstance(e, UserUttered)],
                "slots": [e.key for e in input.events if isinstance(e, SlotSet)],
                "bots": sum(isinstance(e, BotUttered) for e in input.events)}
            return input

        def _get_meta_for_mcp_server(
            self, server_id: str, agent_input: Optional[AgentInput]
        ) -> Dict[str, Any]:
            meta = dict(super()._get_meta_for_mcp_server(server_id, agent_input))
            token = (agent_input.metadata or {}).get("user_token") if agent_input else None
            if token:
                meta["uid"] = token
            return meta

        async def process_output(self, output: AgentOutput) -> AgentOutput:
            assert all(isinstance(e, (BotUttered, SlotSet)) or e["event"] == "mcp_tool_executed"
                       for e in output.events)
            output.events.append(SlotSet("channel_type", OutputChannel.__name__))
            return output
    '''


@pytest.fixture
def clean_rasa() -> Iterator[None]:
    def forget() -> None:
        rasa_compat.deactivate()
        for name in [n for n in sys.modules if n == "rasa" or n.startswith("rasa.")]:
            del sys.modules[name]

    forget()
    rasa_compat.activate()
    yield
    forget()


def token_agent_class(tmp_path):
    (tmp_path / "custom").mkdir()
    (tmp_path / "custom" / "__init__.py").write_text("")
    (tmp_path / "custom" / "token_agent.py").write_text(textwrap.dedent(TOKEN_AGENT))
    return import_from_project(tmp_path, "custom.token_agent").TokenAgent


async def test_rasa_event_classes_match_the_events_an_agent_receives(tmp_path, clean_rasa):
    from rasa.shared.core.events import SlotSet, UserUttered

    history = [ev.user_uttered("hi", metadata={"user_token": "tok-1"}),
               ev.slot_set("city", "Berlin"), ev.bot_uttered("Hello!")]
    for given in (agent_input(history=history),
                  copy_input(AgentInput.model_construct(id="a", events=[*history]))):
        assert [type(e).__name__ for e in given.events][:3] == ["UserUttered", "SlotSet",
                                                                 "BotUttered"]
        slot = next(e for e in given.events if isinstance(e, SlotSet))
        user = next(e for e in given.events if isinstance(e, UserUttered))
        assert (slot.key, slot.value, user.text, user.metadata) == (
            "city", "Berlin", "hi", {"user_token": "tok-1"})
        assert slot == history[1]  # still the tracker's dict


async def test_the_mcp_meta_hook_of_a_rasa_class_reaches_the_mcp_server(tmp_path, clean_rasa):
    cls = token_agent_class(tmp_path)
    script = [{"tool_calls": [{"show_meta": {}}]}, "Done."]
    given = agent_input("show it", history=[ev.slot_set("city", "Berlin")])
    given.events[-1]["metadata"]["user_token"] = "tok-7"  # the latest user message's
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, IN_MEMORY, cls=cls)
        try:
            with anyio.fail_after(30):
                output = await agent.run(given, TimedChannel())
        finally:
            await close(agent)
        fake.assert_done()
    tool = next(e for e in output.events if e["event"] == "mcp_tool_executed")
    assert tool["result"] == "uid=tok-7"
    assert output.events[-1] == {**output.events[-1], "name": "channel_type",
                                 "value": "OutputChannel"}


async def test_a_rasa_class_sees_typed_events_and_sends_the_token_in_a_conversation(
        tmp_path, tools_url, clean_rasa):
    root = write_project(tmp_path / "a", tools_url, {
        "custom/__init__.py": "",
        "custom/token_agent.py": TOKEN_AGENT,
        "data/flows.yml": """
            flows:
              meta_flow:
                description: show the request metadata
                steps:
                  - call: meta_agent
            """,
        "data/domain.yml": """
            slots:
              channel_type: {type: text}
            """,
        "sub_agents/meta/config.yml": """
            agent: {name: meta_agent, description: Shows what the server sees.}
            configuration: {module: custom.token_agent.TokenAgent, include_date_time: false}
            connections:
              mcp_servers: [{name: tools, include_tools: [show_meta]}]
            """,
    })
    script = {"command_generator": ["start flow meta_flow"],
              "meta_agent": [{"tool_calls": [{"show_meta": {}}]},
                             {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]}
    async with FakeModelServer(script) as fake, \
            assistant_for(root, fake, client_metadata_keys=["user_token"]) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("show", user_token="tok-9")
        fake.assert_done()
    tool = next(e for e in events if e["event"] == "mcp_tool_executed")
    assert tool["result"] == "uid=tok-9"
    assert "slot:channel_type=OutputChannel" in names(events)
    assert texts[0] == "Done."
    assert all(type(e) is dict for e in events)  # dicts again at the dialogue's edge


def test_an_import_of_rasa_that_is_not_provided_is_a_validate_error_naming_it(tmp_path):
    root = write_project(tmp_path / "a", "http://127.0.0.1:9/mcp", {
        "custom/__init__.py": "",
        "custom/odd_agent.py": """
            from rasa.core.policies.policy import Policy
            from rasa.agents.protocol.mcp.mcp_open_agent import MCPOpenAgent


            class OddAgent(MCPOpenAgent):
                pass
            """,
        "data/flows.yml": """
            flows:
              odd_flow:
                description: odd
                steps:
                  - call: odd_agent
            """,
        "sub_agents/odd/config.yml": """
            agent: {name: odd_agent, description: Odd.}
            configuration: {module: custom.odd_agent.OddAgent}
            """,
    })
    _, issues = collect_issues(root)
    found = [i for i in issues if i.code == "agent.validation.module.rasa_import_unsupported"]
    assert found, [i.code for i in issues]
    assert "rasa.core.policies" in found[0].message
    assert "custom/odd_agent.py" in found[0].message
    assert found[0].file
    assert found[0].file.endswith("config.yml")
