"""A finished turn leaves no reference cycles behind.

``subagents serve`` freezes its start-up heap and collects the young generation only every
50,000 net allocations (``server.settle_heap``). That holds up only while turns free their own
state: a cycle left by every turn (an agent run pointing at its toolset and back, a statement
object built per write) would be left for the collector, whose passes then walk all the turns
in flight. These tests run whole turns with the collector off and count what only it could
free.
"""

from __future__ import annotations

import collections
import gc
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for

FILES = {
    "config.yml": """
        assistant_id: garbage
        pipeline:
          - name: CompactLLMCommandGenerator
            llm: {model_group: llm}
        """,
    "data/flows.yml": """
        flows:
          help_flow:
            description: help
            steps:
              - call: helper
              - action: utter_helped
          booking_flow:
            description: book a table
            steps:
              - call: booking
                exit_if: [slots.city is not null]
              - action: utter_booked
        """,
    "data/domain.yml": """
        slots:
          city: {type: text}
        responses:
          utter_helped: [{text: "Glad to help."}]
          utter_booked: [{text: "Booked in {city}."}]
        """,
    "sub_agents/helper/config.yml": """
        agent: {name: helper, description: Helps.}
        configuration: {include_date_time: false}
        """,
    "sub_agents/booking/config.yml": """
        agent: {name: booking, description: Books a table.}
        configuration: {include_date_time: false}
        """,
}
HELPER = [{"text": "Here you are.", "tool_calls": [{"task_completed": {}}]}]
BOOKING = [{"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}}]}]


def write_project(root: Path, extra: dict[str, str] | None = None) -> Path:
    files = {**FILES, "endpoints.yml": """
        model_groups:
          - id: llm
            models: [{provider: openai, model: gpt-test}]
        """, **(extra or {})}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


@pytest.fixture
def only_cycles_collected() -> Iterator[None]:
    """The collector off, and what it finds kept in ``gc.garbage`` until a test looks."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _cycles() -> collections.Counter[str]:
    """What the collector finds now, by type; then it is freed for real."""
    gc.collect()
    kinds = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}"
                                for o in gc.garbage)
    gc.garbage.clear()
    gc.set_debug(0)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    return kinds


async def _turns(project: Any, count: int) -> collections.Counter[str]:
    script = {"command_generator": ["start flow help_flow", "start flow booking_flow"]
              * (count + 1),
              "helper": HELPER * (count + 1), "booking": BOOKING * (count + 1)}
    store = SQLTrackerStore(f"sqlite+aiosqlite:///{project}/turns.db")
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        with anyio.fail_after(60):
            # the first turns import and build what later turns reuse
            await Conversation(assistant, "warm-up").say("help")
            await Conversation(assistant, "warm-up").say("book a table")
            _cycles()
            for number in range(count):
                convo = Conversation(assistant, f"user-{number}")
                texts, _ = await convo.say("help")
                assert texts[:2] == ["Here you are.", "Glad to help."]
                texts, _ = await convo.say("book a table")
                assert texts[0] == "Booked in Berlin."
            return _cycles()


async def test_agent_turns_on_sqlite_leave_no_reference_cycles(tmp_path, only_cycles_collected):
    project = write_project(tmp_path / "assistant")
    left = await _turns(project, 5)
    assert left == collections.Counter(), f"cyclic garbage left by 10 turns: {dict(left)}"


async def test_the_check_sees_a_cycle_a_turn_leaves(tmp_path, only_cycles_collected):
    """The same turns with an agent that keeps a cycle per run: the check above would see it."""
    project = write_project(tmp_path / "assistant", {
        "sub_agents/helper/config.yml": """
            agent: {name: helper, description: Helps.}
            configuration: {include_date_time: false, module: garbage_test_cyclic.Cyclic}
            """,
        "garbage_test_cyclic.py": """
            from subagents import MCPOpenAgent


            class Cyclic(MCPOpenAgent):
                async def process_input(self, input):
                    loop = {}
                    loop["self"] = loop
                    return input
            """})
    left = await _turns(project, 3)
    assert left["builtins.dict"] >= 3


async def test_agent_runs_with_tool_calls_and_failures_leave_no_reference_cycles(
        only_cycles_collected):
    """Runs with a working, a failing and an unknown tool, invalid arguments and a failed model
    call: nothing of them is left for the collector."""
    from subagents import events as ev
    from subagents.agents.open_agent import MCPOpenAgent
    from subagents.agents.schemas import AgentInput, AgentStatus, AgentToolResult
    from subagents.channels.collecting import CollectingOutputChannel
    from subagents.config.sub_agent import AgentConfiguration
    from subagents.llm import LLMClient, ModelSettings

    class Tools(MCPOpenAgent):
        def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
            def echo(arguments: dict[str, Any], context: Any) -> AgentToolResult:
                return AgentToolResult(tool_name="echo", result=str(arguments.get("n")))

            def boom(arguments: dict[str, Any], context: Any) -> AgentToolResult:
                raise ValueError("boom")

            params = {"type": "object", "properties": {"n": {"type": "integer"}}}
            return [{"type": "function", "function": {"name": name, "description": name,
                                                      "parameters": params},
                     "tool_executor": run, "read_only": True}
                    for name, run in (("echo", echo), ("boom", boom))]

    script = [{"text": "On it.", "tool_calls": [{"echo": {"n": 1}}, {"boom": {}}]},
              {"tool_calls": [{"echo": {"n": "not a number"}}, {"missing": {}}]},
              {"tool_calls": [{"echo": {"n": 2}}]},
              {"error": {"status": 400, "message": "refused"}}]
    async with FakeModelServer({"tools": script * 5}) as fake:
        llm = LLMClient(ModelSettings(model="m", api_base=fake.base_url("tools"),
                                      max_retries=0), name="tools")
        agent = Tools("tools", "Uses tools.", llm=llm,
                      configuration=AgentConfiguration(include_date_time=False))

        async def run() -> None:
            inp = AgentInput(id="tools", user_message="go", events=[ev.user_uttered("go")],
                             recipient_id="u", metadata={"sender_id": "u"})
            output = await agent.run(inp, CollectingOutputChannel())
            assert output.status == AgentStatus.FATAL_ERROR
            assert output.tool_calls == {"echo": 3, "boom": 1}

        try:
            with anyio.fail_after(60):
                await run()  # the first run imports and builds what later runs reuse
                _cycles()
                for _ in range(4):
                    await run()
                left = _cycles()
        finally:
            await agent.disconnect()
    assert left == collections.Counter(), f"cyclic garbage left by 4 runs: {dict(left)}"


async def test_a_routed_call_whose_models_all_fail_leaves_no_reference_cycles(
        only_cycles_collected):
    from subagents.exceptions import LLMError
    from subagents.llm import ModelSettings, RoutedGroup, build_model
    from subagents.llm.routing import RouterSettings

    failing = [{"error": {"status": 503, "message": "busy"}}] * 5
    async with FakeModelServer({"a": failing, "b": failing}) as fake:
        models = [ModelSettings(model=name, api_base=fake.base_url(name), max_retries=0)
                  for name in ("a", "b")]
        models[0].group = RoutedGroup(
            "group", RouterSettings.from_mapping({"routing_strategy": "simple-shuffle"}),
            models)
        llm = build_model(models[0])

        async def call() -> None:
            code = None
            try:  # not pytest.raises: its record of the error is a cycle of its own
                await llm.complete([{"role": "user", "content": "hi"}], None)
            except LLMError as exc:
                code = exc.code
            assert code == "llm.http_503"

        try:
            with anyio.fail_after(60):
                await call()
                _cycles()
                for _ in range(4):
                    await call()
                left = _cycles()
        finally:
            await llm.close()
    assert left == collections.Counter(), f"cyclic garbage left by 4 calls: {dict(left)}"


# ------------------------------------------------ other turn paths: MCP, slots, actions, HTTP
STDIO_TOOLS = f"""
    model_groups:
      - id: llm
        models: [{{provider: openai, model: gpt-test}}]
    mcp_servers:
      - name: tools
        type: stdio
        command: python
        args: ["-m", "tests.servers.tools_server"]
        env: {{PYTHONPATH: "{Path(__file__).resolve().parents[3]}"}}
    """
"""The tool server runs as a subprocess: only our client side of each call is in this heap."""
WEATHER = [{"tool_calls": [{"echo": {"text": "sunny"}}]},
           {"text": "Sunny.", "tool_calls": [{"task_completed": {}}]}]


def _harness_project(root: Path) -> Path:
    from tests.dialogue_harness import write_project as write_harness_project

    return write_harness_project(root, "http://127.0.0.1:9/unused",
                                 {"endpoints.yml": STDIO_TOOLS})


async def test_mcp_tool_turns_over_stdio_leave_no_reference_cycles(tmp_path,
                                                                   only_cycles_collected):
    project = _harness_project(tmp_path / "assistant")
    count = 5
    script = {"command_generator": ["start flow weather_flow"] * (count + 1),
              "weather_agent": WEATHER * (count + 1)}
    store = SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path}/turns.db")
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        with anyio.fail_after(60):
            await Conversation(assistant, "warm-up").say("weather")
            _cycles()
            for number in range(count):
                texts, events = await Conversation(assistant, f"user-{number}").say("weather")
                assert texts[:2] == ["Sunny.", "Anything else about the weather?"]
                assert any(e["event"] == "mcp_tool_executed" for e in events)
            left = _cycles()
    assert left == collections.Counter(), f"cyclic garbage left by {count} turns: {dict(left)}"


async def test_slot_filling_custom_action_and_free_text_turns_leave_no_reference_cycles(
        tmp_path, only_cycles_collected):
    project = _harness_project(tmp_path / "assistant")
    count = 3
    script = {"command_generator": ["start flow ask_name", "set slot name Ann",
                                    "start flow custom_action_flow", "start flow opening_hours"]
              * (count + 1)}
    store = SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path}/turns.db")

    async def conversation(sender: str) -> None:
        convo = Conversation(assistant, sender)
        assert (await convo.say("hi"))[0] == ["What is your name?"]
        assert (await convo.say("Ann"))[0][0] == "Hello Ann!"
        texts, _ = await convo.say("look it up")
        assert texts[:2] == ["Looking it up...", f"Found order {sender}."]
        assert (await convo.say("when are you open"))[0][0] == "We are open 9 to 5."

    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        with anyio.fail_after(60):
            await conversation("warm-up")
            _cycles()
            for number in range(count):
                await conversation(f"user-{number}")
            left = _cycles()
    assert left == collections.Counter(), f"cyclic garbage left by {count * 4} turns: {dict(left)}"


def _post(connection: Any, path: str, body: dict[str, Any]) -> bytes:
    """One request on a kept-alive blocking connection (asyncio's transports keep a cycle each
    until closed: one per connection, so the connection is opened before counting)."""
    import json

    connection.request("POST", path, json.dumps(body),
                       {"content-type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    return bytes(response.read())


@pytest.mark.parametrize("path", ["/webhooks/rest/webhook", "/webhooks/stream/webhook"])
async def test_served_turns_rest_and_streamed_leave_no_reference_cycles(
        tmp_path, only_cycles_collected, path):
    from http.client import HTTPConnection

    from subagents.server.app import create_app
    from subagents.testing.mcp_http import serve_app

    project = _harness_project(tmp_path / "assistant")
    count = 4
    script = {"command_generator": ["start flow weather_flow"] * (count + 1),
              "weather_agent": WEATHER * (count + 1)}
    store = SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path}/turns.db")
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant, \
            serve_app(create_app(assistant)) as base:
        connection = HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=30)
        with anyio.fail_after(60):
            await anyio.to_thread.run_sync(_post, connection, path,
                                           {"sender": "warm-up", "message": "weather"})
            _cycles()
            for number in range(count):
                reply = await anyio.to_thread.run_sync(
                    _post, connection, path, {"sender": f"user-{number}", "message": "weather"})
                assert b"Sunny." in reply
            left = _cycles()
            connection.close()
    assert left == collections.Counter(), f"cyclic garbage left by {count} turns: {dict(left)}"
