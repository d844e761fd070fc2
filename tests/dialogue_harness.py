"""A small assistant project for dialogue tests, wired to the fake model server."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.processor import Assistant
from subagents.stores import InMemoryTrackerStore
from subagents.testing import FakeModelServer

FILES = {
    "config.yml": """
        assistant_id: test_assistant
        pipeline:
          - name: CompactLLMCommandGenerator
            llm: {model_group: llm}
        """,
    "data/flows.yml": """
        flows:
          weather_flow:
            description: tell the weather
            steps:
              - call: weather_agent
              - action: utter_after_weather
          booking_flow:
            description: book a table
            steps:
              - call: booking_agent
                exit_if:
                  - slots.city is not null
              - action: utter_booked
          opening_hours:
            description: opening hours
            steps:
              - action: utter_hours
          two_agents:
            description: weather then booking
            steps:
              - call: weather_agent
              - call: booking_agent
                exit_if: [slots.city is not null]
              - action: utter_booked
          outer_flow:
            description: starts, then links to the weather
            steps:
              - action: utter_starting
              - link: weather_flow
          ask_name:
            description: asks a name and greets
            steps:
              - collect: name
                rejections:
                  - if: slots.name matches "^[0-9]+$"
                    utter: utter_name_not_a_number
              - action: utter_greet
          hidden_flow:
            if: slots.name is not null
            description: only once a name is known
            steps:
              - action: utter_greet
          custom_action_flow:
            description: runs a custom action
            steps:
              - action: action_lookup
              - action: utter_looked_up
          flaky_flow:
            description: a flaky agent
            steps:
              - call: flaky_agent
              - action: utter_after_weather
          quitting_flow:
            description: an agent that gives up
            steps:
              - call: quitter
              - action: utter_after_weather
        """,
    "data/domain.yml": """
        slots:
          city: {type: text}
          name: {type: text}
          lookup_result: {type: text}
        responses:
          utter_after_weather: [{text: "Anything else about the weather?"}]
          utter_booked: [{text: "Booked in {city}."}]
          utter_hours: [{text: "We are open 9 to 5."}]
          utter_starting: [{text: "Starting."}]
          utter_ask_name: [{text: "What is your name?"}]
          utter_name_not_a_number: [{text: "A name is not a number."}]
          utter_greet: [{text: "Hello {name}!"}]
          utter_looked_up: [{text: "Found {lookup_result}."}]
        actions: [action_lookup]
        """,
    "actions/__init__.py": "",
    "actions/lookup.py": """
        import os

        from rasa_sdk import Action
        from rasa_sdk.events import SlotSet


        class Lookup(Action):
            def name(self):
                return "action_lookup"

            async def run(self, dispatcher, tracker, domain):
                if os.environ.get("SUBAGENTS_TEST_DIE_IN_ACTION") == "1":
                    os._exit(7)
                dispatcher.utter_message(text="Looking it up...")
                return [SlotSet("lookup_result", "order " + str(tracker.sender_id))]
        """,
    "sub_agents/weather/config.yml": """
        agent: {name: weather_agent, description: Tells the weather.}
        configuration: {include_date_time: false}
        connections:
          mcp_servers: [{name: tools, include_tools: [echo, timed_read]}]
        """,
    "sub_agents/booking/config.yml": """
        agent: {name: booking_agent, description: Books a table.}
        configuration: {include_date_time: false}
        connections:
          mcp_servers: [{name: tools, include_tools: [echo]}]
        """,
    "sub_agents/__init__.py": "",
    "sub_agents/flaky/__init__.py": "",
    "sub_agents/flaky/agent.py": """
        from subagents import AgentOutput, AgentStatus, MCPOpenAgent

        ATTEMPTS = []


        class Flaky(MCPOpenAgent):
            async def send_message(self, agent_input, output_channel=None):
                ATTEMPTS.append(agent_input.user_message)
                if len(ATTEMPTS) < 3:
                    return AgentOutput(id=self.name, status=AgentStatus.RECOVERABLE_ERROR,
                                       error_message="flaky")
                return AgentOutput(id=self.name, status=AgentStatus.COMPLETED)


        class Quitter(MCPOpenAgent):
            async def send_message(self, agent_input, output_channel=None):
                return AgentOutput(id=self.name, status=AgentStatus.CANCELLED,
                                   metadata={"cancellation_reason": "user left"})
        """,
    "sub_agents/quitter/config.yml": """
        agent: {name: quitter, description: Gives up.}
        configuration: {module: sub_agents.flaky.agent.Quitter}
        """,
    "sub_agents/flaky/config.yml": """
        agent: {name: flaky_agent, description: Fails twice.}
        configuration: {module: sub_agents.flaky.agent.Flaky}
        """,
}


def write_project(root: Path, tools_url: str,
                  extra: dict[str, str | None] | None = None) -> Path:
    files: dict[str, str | None] = dict(FILES)
    files["endpoints.yml"] = f"""
        model_groups:
          - id: llm
            models: [{{provider: openai, model: gpt-test}}]
        mcp_servers:
          - name: tools
            type: http
            url: {tools_url}
        """
    files.update(extra or {})
    for rel, text in files.items():
        if text is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


@contextlib.asynccontextmanager
async def assistant_for(root: Path, fake: FakeModelServer, **kw: Any) -> AsyncIterator[Assistant]:
    kw.setdefault("tracker_store", InMemoryTrackerStore())
    assistant = Assistant.load(root, llm_factory=fake.llm_factory(), retry_delays=(0.0,), **kw)
    async with assistant:
        yield assistant


class Conversation:
    def __init__(self, assistant: Assistant, sender: str = "user-1") -> None:
        self.assistant = assistant
        self.sender = sender
        self.turns: list[list[dict[str, Any]]] = []

    async def say(self, text: str, **metadata: Any) -> tuple[list[str], list[dict[str, Any]]]:
        channel = CollectingOutputChannel()
        events = await self.assistant.handle_message(self.sender, text, metadata or None,
                                                     channel)
        self.turns.append(events)
        return channel.texts, events


SESSION_START = ["action:action_session_start", "session_started", "action:action_listen"]
"""What a new conversation records before its first message, as :func:`names` shows it."""


def names(events: list[dict[str, Any]]) -> list[str]:
    """Compact: flow_started:x, agent_started:x, bot:text, slot:x=v, action:x ..."""
    out = []
    for e in events:
        kind = e["event"]
        if kind == "user":
            out.append(f"user:{e['text']}")
        elif kind == "bot":
            out.append(f"bot:{e['text']}")
        elif kind == "slot":
            out.append(f"slot:{e['name']}={e['value']}")
        elif kind == "action":
            out.append(f"action:{e['name']}")
        elif kind.startswith("flow_"):
            out.append(f"{kind}:{e['flow_id']}")
        elif kind.startswith("agent_"):
            out.append(f"{kind}:{e['agent_id']}")
        elif kind == "mcp_tool_executed":
            out.append(f"tool:{e['tool_name']}")
        else:
            out.append(kind)
    return out
