"""The inspector over real HTTP: agent step events on the SSE stream (opt-in, behind the
token, free of tool-context metadata) and the ``/inspect`` page."""

from __future__ import annotations

import json

import anyio
import httpx2
import pytest
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

TOKEN = "t0ps3cret"
BOOKING = """
    agent: {name: booking_agent, description: Books a table.}
    configuration: {include_date_time: false}
    connections:
      mcp_servers: [{name: tools, include_tools: [echo, timed_read]}]
    """
# turn 1: a filler beside a slow tool, then a question (the agent waits for the user);
# turn 2: the agent sets the city and completes
SCRIPT = {
    "command_generator": ["start flow booking_flow", ""],
    "booking_agent": [
        {"text": "Let me look at the free tables.",
         "tool_calls": [{"timed_read": {"label": "tables", "ms": 300}}]},
        "Which city?",
        {"tool_calls": [{"set_slot_city": {"slot_value": "Lyon"}}]}]}
AGENT_KINDS = {"agent_run_start", "agent_step", "agent_text", "agent_tool_call", "agent_wait",
               "agent_run_end"}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url,
                         {"sub_agents/booking/config.yml": BOOKING})


async def frames_of(client: httpx2.AsyncClient, url: str, body: dict,
                    headers: dict | None = None) -> list[tuple[str, dict]]:
    frames: list[tuple[str, dict]] = []
    async with client.stream("POST", url, json=body, headers=headers or {}) as response:
        assert response.status_code == 200
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                frames.append((event, json.loads(line[len("data: "):])))
    return frames


async def test_the_stream_carries_agent_steps_when_asked(project):
    metadata = {"customer_secret": "META-S3CRET-42"}
    async with FakeModelServer(SCRIPT) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        with anyio.fail_after(60):
            first = await frames_of(client, "/webhooks/stream/webhook?inspect=true",
                                    {"sender": "u1", "message": "a table please",
                                     "metadata": metadata})
            second = await frames_of(client, "/webhooks/stream/webhook?inspect=true",
                                     {"sender": "u1", "message": "Lyon"})
    fake.assert_done()
    kinds = [kind for kind, _ in first]
    start = next(data for kind, data in first if kind == "agent_run_start")
    assert start["agent"] == "booking_agent"
    assert "timed_read" in start["tools"]
    step = next(data for kind, data in first if kind == "agent_step")
    assert step["step"] == 1
    assert "timed_read" in step["offered_tools"]
    assert step["prompt_tokens"] > 0
    assert step["duration_ms"] >= 0
    assert step["tool_calls"][0]["name"] == "timed_read"
    assert step["raw"]["request"]["messages"][0]["role"] == "system"
    call = next(data for kind, data in first if kind == "agent_tool_call")
    assert (call["tool"], call["server"], call["arguments"], call["is_error"],
            call["parallel"]) == ("timed_read", "tools", {"label": "tables", "ms": 300}, False,
                                  False)
    assert call["result"]
    assert call["duration_ms"] >= 300
    # the filler reached the user before the tool's result
    streamed = "".join(data["text"] for kind, data in first[:kinds.index("agent_tool_call")]
                       if kind == "message_chunk")
    assert streamed == "Let me look at the free tables."
    texts = [(data["step"], data["kind"]) for kind, data in first if kind == "agent_text"]
    assert texts == [(1, "filler"), (2, "question")]
    end = next(data for kind, data in first if kind == "agent_run_end")
    assert (end["status"], end["steps"]) == ("input_required", 2)
    assert kinds[-1] == "done"
    finished = next(data for kind, data in second if kind == "agent_run_end")
    assert finished["status"] == "completed"
    assert ("slot", {"name": "city", "value": "Lyon"}) in second
    # request metadata (what tools get as context) never reaches the trace
    assert "META-S3CRET-42" not in json.dumps(first + second)


async def test_without_inspect_the_stream_is_unchanged(project):
    script = {"command_generator": ["start flow booking_flow"],
              "booking_agent": SCRIPT["booking_agent"][:2]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        with anyio.fail_after(60):
            frames = await frames_of(client, "/webhooks/stream/webhook",
                                     {"sender": "u1", "message": "a table please"})
    fake.assert_done()
    assert not {kind for kind, _ in frames} & AGENT_KINDS
    assert "tool" in {kind for kind, _ in frames}


async def test_the_page_and_the_trace_need_the_token(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant, token=TOKEN)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        refused = await client.get("/inspect")
        page = await client.get(f"/inspect?token={TOKEN}")
        stream = await client.post("/webhooks/stream/webhook?inspect=true",
                                   json={"sender": "u1", "message": "hi"})
    assert refused.status_code == 401
    assert stream.status_code == 401
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "connect-src 'self'" in csp
    assert "unsafe-inline" not in csp  # only the page's own script and stylesheet run


async def test_the_page_is_self_contained(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        page = (await client.get("/inspect")).text
    assert "/*INSPECTOR_JS*/" not in page
    assert "/*INSPECTOR_CSS*/" not in page
    assert "/webhooks/stream/webhook?inspect=true" in page
    for external in ("http://", "https://", "//cdn", "@import", "url("):
        assert external not in page


REPLAY_FILE = """
test_cases:
  - test_case: book_in_lyon
    llm_script:
      command_generator: ["start flow booking_flow", ""]
      booking_agent:
        - text: "Let me look at the free tables."
          tool_calls: [{timed_read: {label: tables, ms: 10}}]
        - "Which city?"
        - tool_calls: [{set_slot_city: {slot_value: Lyon}}]
    steps:
      - user: "A table please"
      - bot: "Let me look at the free tables."
      - bot: "Which city?"
      - user: "Lyon"
      - bot: "Booked in Lyon."
  - test_case: no_script
    steps:
      - user: "/opening_hours"
"""


def replay_file(project) -> str:
    path = project / "tests" / "e2e" / "replay.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(REPLAY_FILE.lstrip(), encoding="utf-8")
    return str(path)


async def test_a_replayed_case_answers_from_its_script(project):
    from subagents.cli.inspector_replay import load_case, replay_app

    case = load_case(f"{replay_file(project)}::book_in_lyon", project)
    async with replay_app(case, project) as app, serve_app(app) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        plan = (await client.get("/inspect/replay")).json()
        with anyio.fail_after(60):
            turns = [await frames_of(client, "/webhooks/stream/webhook?inspect=true",
                                     {"sender": plan["sender"], "message": step["user"],
                                      "metadata": step["metadata"]})
                     for step in plan["steps"]]
    assert plan["case"] == "book_in_lyon"
    assert [s["user"] for s in plan["steps"]] == ["A table please", "Lyon"]
    assert plan["steps"][0]["expect"] == ["Let me look at the free tables.", "Which city?"]
    ends = [data["status"] for turn in turns for kind, data in turn if kind == "agent_run_end"]
    assert ends == ["input_required", "completed"]


async def test_without_a_replay_the_page_gets_no_case(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        plan = (await client.get("/inspect/replay")).json()
    assert plan == {"case": None}


@pytest.mark.parametrize("spec", ["missing.yml::x", "{file}::nope", "{file}", "{file}::no_script"])
def test_a_bad_replay_argument_is_a_clear_error(project, spec):
    from tests.cli_process import run_cli

    spec = spec.format(file=replay_file(project))
    done = run_cli("inspect", "--project", str(project), "--replay", spec)
    assert done.returncode == 1
    assert "[inspect.replay_invalid]" in done.stderr


def drained(channel) -> list[tuple[str, dict]]:
    frames = []
    while not channel.queue.empty():
        head, data = channel.queue.get_nowait().decode().split("\n", 1)
        frames.append((head.removeprefix("event: "),
                       json.loads(data.removeprefix("data: ").strip())))
    return frames


async def test_parallel_calls_and_the_last_step_are_traced(tools_url):
    from subagents.channels.sse import QueueOutputChannel

    from tests.agent_harness import agent_input, build_agent, close

    script = {"weather_agent": [
        {"tool_calls": [{"timed_read": {"label": "a", "ms": 200}},
                        {"timed_read": {"label": "b", "ms": 200}}]},
        {"text": "Both read; that is all I can do.", "expect": {"messages_contain": []}}]}
    async with FakeModelServer(script) as fake:
        agent = await build_agent(fake, tools_url, configuration={"max_agent_steps": 1})
        try:
            channel = QueueOutputChannel(trace=True)
            with anyio.fail_after(30):
                output = await agent.run(agent_input(), channel)
        finally:
            await close(agent)
        fake.assert_done()
    frames = drained(channel)
    calls = [data for kind, data in frames if kind == "agent_tool_call"]
    assert [(c["arguments"]["label"], c["parallel"]) for c in calls] == [("a", True),
                                                                          ("b", True)]
    steps = [data for kind, data in frames if kind == "agent_step"]
    assert [s["offered_tools"] != [] for s in steps] == [True, False]  # the last offers none
    assert [(d["step"], d["kind"]) for kind, d in frames if kind == "agent_text"] == [
        (2, "final")]
    end = next(data for kind, data in frames if kind == "agent_run_end")
    assert (end["exit_reason"], output.exit_reason) == ("max_steps", "max_steps")


async def test_an_approval_wait_and_the_approved_call_are_traced(tools_url):
    from subagents.channels.sse import QueueOutputChannel

    from tests.agent_harness import agent_input, build_agent, close

    conf = {"tools": {"timed_write": {"requires_approval": True}}}
    script = {"weather_agent": [
        {"text": "I can save that.", "tool_calls": [{"timed_write": {"label": "x", "ms": 1}}]},
        "Saved."]}
    async with FakeModelServer(script) as fake:
        agent = await build_agent(fake, tools_url, configuration=conf)
        try:
            with anyio.fail_after(30):
                asked = QueueOutputChannel(trace=True)
                parked = await agent.run(agent_input(), asked)
                approved = QueueOutputChannel(trace=True)
                await agent.run(agent_input("yes please", metadata={
                    "pending_approval": parked.metadata["pending_approval"]}), approved)
        finally:
            await close(agent)
        fake.assert_done()
    first = drained(asked)
    wait = next(data for kind, data in first if kind == "agent_wait")
    assert (wait["tool"], wait["waiting_for"], wait["arguments"]) == (
        "timed_write", "approval", {"label": "x", "ms": 1})
    assert "agent_tool_call" not in [kind for kind, _ in first]
    assert [d["kind"] for kind, d in first if kind == "agent_text"] == ["filler", "question"]
    call = next(data for kind, data in drained(approved) if kind == "agent_tool_call")
    assert (call["tool"], call["step"], call["server"], call["resumed"]) == (
        "timed_write", 0, "tools", True)


CLIENT_AGENT = """
    agent: {name: weather_agent, description: Tells the weather.}
    configuration:
      include_date_time: false
      client_tools:
        - name: get_location
          description: The user's current location, from their device.
          parameters: {type: object, properties: {precision: {type: string}}}
    connections:
      mcp_servers: [{name: tools, include_tools: [echo]}]
    """


async def test_a_client_tool_wait_is_traced(tmp_path, tools_url):
    root = write_project(tmp_path / "client", tools_url,
                         {"sub_agents/weather/config.yml": CLIENT_AGENT})
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"text": "Let me find where you are.", "tool_calls": [
                  {"name": "get_location", "arguments": {"precision": "city"},
                   "id": "call_loc"}]}]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        with anyio.fail_after(60):
            frames = await frames_of(client, "/webhooks/stream/webhook?inspect=true",
                                     {"sender": "u1", "message": "weather here?"})
    fake.assert_done()
    wait = next(data for kind, data in frames if kind == "agent_wait")
    assert (wait["tool"], wait["waiting_for"], wait["arguments"]) == (
        "get_location", "client_tool", {"precision": "city"})
    end = next(data for kind, data in frames if kind == "agent_run_end")
    assert end["status"] == "input_required"
