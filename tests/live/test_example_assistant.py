"""The example assistant (``subagents init``'s weather assistant, the one ``subagents demo``
plays) end to end on a real model server: llama.cpp on SmolLM2-135M as the ``self-hosted``
model of both model groups, the template's own MCP server (stdio), constrained output.

The model is tiny, so these tests assert on the plumbing, never on what it says: the command
generator's reply is JSON under the project's schema and reads as commands; an agent's reply in
the JSON tool form becomes a tool call that runs on the real MCP server; a JSON-form answer is
streamed to a streaming channel as the model writes it; a model slower than its timeout ends in
the defined replies with the error's code logged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from structlog.testing import capture_logs
from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.processor import Assistant
from subagents.llm import LLMResponse, Model, ModelSettings, build_model
from subagents.llm.wrappers import WrapperModel
from subagents.scaffold import create_project
from subagents.stores import InMemoryTrackerStore
from subagents.types import CallScope, ChatMessage, JsonObject

from tests.live.conftest import LiveModel

pytestmark = pytest.mark.xdist_group("live_model")

TURN_WITHIN = 240.0
"""Seconds a test's turn may take: a few model calls of up to MAX_TOKENS tokens on one
thread of a shared machine."""
AGENT_STEPS = 2
"""The agent's step cap: the tiny model calls the same tool again and again; two steps show a
tool result going back to the model, then the closing call answers."""
UNAVAILABLE = "Sorry, I can't reach my language model right now. Please try again in a moment."


@dataclass
class Call:
    """One model call as the assistant made it and what came back."""

    caller: str
    messages: list[ChatMessage]
    tools: list[JsonObject] | None
    options: JsonObject | None
    streamed_to: bool
    response: LLMResponse


@dataclass
class Calls:
    """Every model call of an assistant, in order."""

    made: list[Call] = field(default_factory=list)

    def of(self, caller: str) -> list[Call]:
        """The calls ``caller`` made."""
        return [call for call in self.made if call.caller == caller]


class Observed(WrapperModel):
    """The real model, with each call noted (nothing is changed on the way)."""

    def __init__(self, inner: Model, calls: Calls) -> None:
        super().__init__(inner)
        self.calls = calls

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: Any = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        response = await self.inner.complete(messages, tools, stream=stream, on_text=on_text,
                                             scope=scope, options=options)
        self.calls.made.append(Call(self.inner.name, messages, tools, options,
                                    on_text is not None, response))
        return response


def write_example(root: Path, live: LiveModel, *, commands: dict[str, Any] | None = None,
                  agent: dict[str, Any] | None = None) -> Path:
    """The ``minimal`` template with both model groups on the live server (``commands`` and
    ``agent``: keys over each group's model entry), its agent held to ``AGENT_STEPS`` steps."""
    create_project(root, "minimal")
    agent_config = root / "sub_agents" / "weather_agent" / "config.yml"
    text = agent_config.read_text(encoding="utf-8")
    agent_config.write_text(text.replace("configuration:\n", "configuration:\n"
                                         f"  max_agent_steps: {AGENT_STEPS}\n"), encoding="utf-8")
    endpoints = root / "endpoints.yml"
    template = endpoints.read_text(encoding="utf-8")
    rest = template[template.index("\nmcp_servers:"):]

    def model(overrides: dict[str, Any] | None) -> str:
        entry = {"provider": "self-hosted", "model": live.model, "api_base": live.api_base,
                 "structured_output": "json_schema", "temperature": 0, "max_tokens": 96,
                 "timeout": 60, "max_retries": 0, **(overrides or {})}
        return json.dumps(entry)

    endpoints.write_text(f"""model_groups:
  - id: command_generator_llm
    models:
      - {model(commands)}
  - id: agent_llm
    models:
      - {model(agent)}
{rest}""", encoding="utf-8")
    return root


def observing(calls: Calls) -> Callable[[str, ModelSettings], Model]:
    """The assistant's model factory: the project's own models, observed."""
    def build(caller: str, settings: ModelSettings) -> Model:
        return Observed(build_model(settings, name=caller), calls)
    return build


async def converse(root: Path, text: str, *, streaming: bool = True
                   ) -> tuple[Calls, CollectingOutputChannel, list[dict[str, Any]]]:
    """One message through the assistant: its model calls, the channel, the turn's events."""
    calls = Calls()
    channel = CollectingOutputChannel(streaming=streaming)
    assistant = Assistant.load(root, tracker_store=InMemoryTrackerStore(),
                               llm_factory=observing(calls), retry_delays=(0.0,),
                               turn_timeout=TURN_WITHIN)
    async with assistant:
        with anyio.fail_after(TURN_WITHIN + 10):
            events = await assistant.handle_message("user-1", text, None, channel)
    return calls, channel, events


def of_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == kind]


async def test_a_question_runs_the_flow_its_agent_and_a_real_mcp_tool(
        tmp_path: Path, live_model: LiveModel) -> None:
    # the model's choices are deterministic (greedy sampling, pinned server and model): it
    # starts the weather flow and calls get_forecast; what it writes is not checked
    root = write_example(tmp_path / "weather", live_model)
    calls, channel, events = await converse(root, "What is the weather in Oslo tomorrow?")

    # the command generator asked for JSON under the project's schema, and got it
    (generator,) = calls.of("command_generator")
    assert generator.options is not None
    asked = generator.options["response_format"]
    assert asked["type"] == "json_schema"
    schema = asked["json_schema"]["schema"]
    assert generator.response.finish_reason == "stop"
    reply = json.loads(generator.response.text or "")
    jsonschema.validate(reply, schema)
    started = [c["flow"] for c in reply["commands"] if c["command"] == "start flow"]
    assert started == ["weather"]
    assert next(e["flow_id"] for e in of_kind(events, "flow_started")) == "weather"

    # the agent's tool call came in the JSON tool form and ran on the template's MCP server
    steps = calls.of("weather_agent")
    assert len(steps) == AGENT_STEPS + 1  # the steps, then the closing call without tools
    offered = {tool["function"]["name"]: tool["function"]["parameters"]
               for tool in steps[0].tools or []}
    assert set(offered) == {"get_forecast", "task_completed"}
    (call,) = steps[0].response.tool_calls
    assert call.name == "get_forecast"
    jsonschema.validate(call.arguments, offered["get_forecast"])
    executed = of_kind(events, "mcp_tool_executed")
    assert len(executed) == AGENT_STEPS
    assert executed[0]["tool_name"] == "get_forecast"
    assert executed[0]["arguments"] == call.arguments
    assert not executed[0]["is_error"]
    assert executed[0]["result"].startswith(f"{call.arguments['city']}: ")  # the server's text
    # its result went back to the model in the next step
    assert steps[1].messages[-1]["role"] == "tool"
    assert steps[1].messages[-1]["content"] == executed[0]["result"]

    # the closing answer was streamed to the user piece by piece, recorded once, and the flow
    # went on to its next step
    closing = steps[-1]
    assert closing.tools in (None, [])
    assert closing.streamed_to
    assert closing.response.streamed
    pieces = [item for kind, item in channel.log if kind == "chunk"]
    assert len(pieces) > 1
    assert "".join(pieces) == closing.response.text
    bot = [e["text"] for e in of_kind(events, "bot")]
    assert bot[0] == closing.response.text
    assert bot[1] == "Forecasts come from the example weather service."
    assert [e["agent_id"] for e in of_kind(events, "agent_completed")] == ["weather_agent"]




async def test_a_command_generator_slower_than_its_timeout_gets_the_defined_reply(
        tmp_path: Path, live_model: LiveModel) -> None:
    root = write_example(tmp_path / "weather", live_model, commands={"timeout": 0.05})
    with capture_logs() as logs:
        calls, channel, events = await converse(root, "What is the weather in Oslo?",
                                                streaming=False)
    assert calls.made == []  # the call failed: no reply came back
    failed = [e for e in logs if e["event"] == "dialogue.understanding.failed"]
    assert [e["error_code"] for e in failed] == ["llm.timeout"]
    assert channel.texts == [UNAVAILABLE]
    assert [e["text"] for e in of_kind(events, "user")] == ["What is the weather in Oslo?"]


async def test_an_agent_model_slower_than_its_timeout_ends_the_flow_defined(
        tmp_path: Path, live_model: LiveModel) -> None:
    # `/weather` starts the flow without the command generator; the agent's first model call
    # cannot finish in 50 ms on one thread
    root = write_example(tmp_path / "weather", live_model, agent={"timeout": 0.05})
    calls, channel, events = await converse(root, "/weather", streaming=False)
    assert calls.made == []  # the call failed: no reply came back
    (cancelled,) = of_kind(events, "agent_cancelled")
    assert cancelled["agent_id"] == "weather_agent"
    assert "did not answer within 0.05s" in cancelled["reason"]
    assert [e["flow_id"] for e in of_kind(events, "flow_cancelled")] == ["weather"]
    assert channel.texts == [
        "Sorry, something went wrong on my side. Please try again in a little while."]
