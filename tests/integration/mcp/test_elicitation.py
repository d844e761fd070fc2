"""An MCP server asks the user for input in the middle of a call (elicitation, FastMCP's
``ctx.elicit``): the agent asks the user, parks, and sends the answer back on the next turn
(accept with content, decline, cancel); a request that is gone ends the run with an error."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import pytest
from structlog.testing import capture_logs
from subagents.mcp import MCPPool
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_mcp

from tests.agent_harness import TimedChannel, agent_input, build_agent, close
from tests.dialogue_harness import Conversation, assistant_for, names, write_project
from tests.servers.elicit_server import server as elicit_server

REPO = Path(__file__).resolve().parents[3]


@contextlib.asynccontextmanager
async def elicit_agent(script, **kw) -> AsyncIterator:
    async with serve_mcp(elicit_server) as url, \
            FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, url, **kw)
        try:
            yield agent, fake
        finally:
            await close(agent)


async def turn(agent, text, previous=None):
    metadata = dict(previous.metadata or {}) if previous is not None else {}
    channel = TimedChannel()
    with anyio.fail_after(30):
        output = await agent.run(agent_input(text, metadata=metadata), channel)
    return output, channel.texts


def answer(action, content=None):
    arguments = {"action": action}
    if content is not None:
        arguments["content"] = content
    return {"tool_calls": [{"answer_server_request": arguments}]}


async def test_a_form_question_reaches_the_user_and_the_answer_goes_back_to_the_server():
    script = [{"tool_calls": [{"book_table": {"day": "Friday"}}]},
              {**answer("accept", {"people": 4, "seating": "terrace"}),
               "expect": {"tools_include": ["answer_server_request"],
                          "messages_contain": ["How many people are coming on Friday?"]}},
              {"text": "Your table for 4 is booked.",
               "expect": {"messages_contain": ["Booked a table for 4 (terrace) on Friday."]}}]
    async with elicit_agent(script) as (agent, fake):
        first, texts1 = await turn(agent, "Book a table on Friday")
        second, texts2 = await turn(agent, "We are 4, on the terrace please", first)
        fake.assert_done()
    assert (first.status.value, first.exit_reason) == ("input_required", "elicitation")
    assert texts1[0].startswith("How many people are coming on Friday?")
    assert "How many guests" in texts1[0]
    assert "one of: inside, terrace" in texts1[0]
    assert first.metadata["pending_elicitation"]["call"]["name"] == "book_table"
    assert [e["event"] for e in first.events] == ["bot"]
    tool = next(e for e in second.events if e["event"] == "mcp_tool_executed")
    assert tool["tool_name"] == "book_table"
    assert tool["arguments"] == {"day": "Friday"}
    assert tool["result"] == "Booked a table for 4 (terrace) on Friday."
    assert texts2 == ["Your table for 4 is booked."]
    assert not (second.metadata or {}).get("pending_elicitation")


async def test_defaults_fill_fields_the_user_left_out():
    script = [{"tool_calls": [{"book_table": {"day": "Monday"}}]},
              answer("accept", {"people": 2}),
              {"text": "Done.",
               "expect": {"messages_contain": ["Booked a table for 2 (inside) on Monday."]}}]
    async with elicit_agent(script) as (agent, fake):
        first, _ = await turn(agent, "Table on Monday")
        await turn(agent, "two of us", first)
        fake.assert_done()


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel_reach_the_server(action):
    script = [{"tool_calls": [{"book_table": {"day": "Friday"}}]},
              answer(action),
              {"text": "Okay, no booking.",
               "expect": {"messages_contain": [f"No booking made: the user chose {action}."]}}]
    async with elicit_agent(script) as (agent, fake):
        first, _ = await turn(agent, "Book a table on Friday")
        second, texts = await turn(agent, "Actually no.", first)
        fake.assert_done()
    tool = next(e for e in second.events if e["event"] == "mcp_tool_executed")
    assert tool["result"] == f"No booking made: the user chose {action}."
    assert texts == ["Okay, no booking."]


async def test_an_answer_that_does_not_fit_the_form_is_refused_and_can_be_corrected():
    script = [{"tool_calls": [{"book_table": {"day": "Friday"}}]},
              answer("accept", {"seating": "terrace"}),
              {**answer("accept", {"people": 3}),
               "expect": {"messages_contain": ["'people' is a required property"]}},
              {"text": "Booked.",
               "expect": {"messages_contain": ["Booked a table for 3 (inside) on Friday."]}}]
    async with elicit_agent(script) as (agent, fake):
        first, _ = await turn(agent, "Book a table on Friday")
        await turn(agent, "three", first)
        fake.assert_done()


async def test_a_url_question_becomes_a_link_for_the_user():
    script = [{"tool_calls": [{"link_account": {}}]},
              {**answer("accept"),
               "expect": {"tools_schema": {"answer_server_request": {
                   "parameters": {"required": ["action"]}}}}},
              {"text": "Linked.", "expect": {"messages_contain": ["link: accept"]}}]
    async with elicit_agent(script) as (agent, fake):
        first, texts = await turn(agent, "Link my bank")
        await turn(agent, "done, I signed in", first)
        fake.assert_done()
    assert "https://bank.example/link?session=42" in texts[0]
    offered = next(t for t in fake.requests[1].body["tools"]
                   if t["function"]["name"] == "answer_server_request")
    assert "content" not in offered["function"]["parameters"]["properties"]


async def test_a_second_question_in_the_same_call_is_asked_in_turn():
    script = [{"tool_calls": [{"book_with_name": {"day": "Sunday"}}]},
              answer("accept", {"people": 5}),
              {"text": "Under which name should I book?",
               "expect": {"messages_contain": ["Under which name?"]}},
              answer("accept", {"name": "Ada"}),
              {"text": "Booked for Ada.",
               "expect": {"messages_contain": ["Booked for 5 under Ada on Sunday."]}}]
    async with elicit_agent(script) as (agent, fake):
        first, _ = await turn(agent, "Table on Sunday")
        second, texts2 = await turn(agent, "five", first)
        assert (second.status.value, second.exit_reason) == ("input_required", "text")
        assert texts2 == ["Under which name should I book?"]
        third, _ = await turn(agent, "Ada", second)
        fake.assert_done()
    tool = next(e for e in third.events if e["event"] == "mcp_tool_executed")
    assert tool["result"] == "Booked for 5 under Ada on Sunday."


async def test_a_request_that_is_gone_ends_the_run_with_an_error():
    script = [{"tool_calls": [{"book_table": {"day": "Friday"}}]}]
    async with elicit_agent(script) as (agent, fake):
        first, _ = await turn(agent, "Book a table on Friday")
        # what a restarted process sees: the saved state, but no held call
        key = f"user-1:{first.metadata['pending_elicitation']['call']['id']}"
        agent._test_pool.elicitations.forget(key)
        with capture_logs() as logs:
            second, _ = await turn(agent, "4 people", first)
        fake.assert_done()
    assert second.status.value == "fatal_error"
    assert "can no longer be answered" in second.error_message
    assert any(e["event"] == "agent.elicitation.lost" for e in logs)


async def test_an_unanswered_question_times_out_as_cancel():
    script = [{"tool_calls": [{"book_table": {"day": "Friday"}}]}]
    async with elicit_agent(script, configuration={"elicitation_timeout": 0.2}) as (agent, fake):
        first, _ = await turn(agent, "Book a table on Friday")
        key = f"user-1:{first.metadata['pending_elicitation']['call']['id']}"
        held = agent._test_pool.elicitations.held_call(key)
        with anyio.fail_after(10):
            result = await held  # the server got "cancel" when the question expired
        assert result.result == "No booking made: the user chose cancel."
        assert not agent._test_pool.elicitations.pending(key)
        second, _ = await turn(agent, "4 people", first)
        fake.assert_done()
    assert second.status.value == "fatal_error"


async def test_a_run_that_ends_without_answering_cancels_the_request():
    script = [{"tool_calls": [{"book_table": {"day": "Friday"}}]},
              {"text": "Alright, nothing booked.", "tool_calls": [{"task_completed": {}}]}]
    async with elicit_agent(script) as (agent, fake):
        first, _ = await turn(agent, "Book a table on Friday")
        key = f"user-1:{first.metadata['pending_elicitation']['call']['id']}"
        assert agent._test_pool.elicitations.pending(key)
        second, _ = await turn(agent, "forget it", first)
        fake.assert_done()
    assert second.status.value == "completed"
    assert not agent._test_pool.elicitations.pending(key)


# ---------------------------------------------------------------------------- conversations
def stdio_project(root: Path) -> Path:
    return write_project(root, "http://127.0.0.1:9/unused", {
        "endpoints.yml": f"""
            model_groups:
              - id: llm
                models: [{{provider: openai, model: gpt-test}}]
            mcp_servers:
              - name: tools
                type: stdio
                command: python
                args: ["-m", "tests.servers.elicit_server"]
                env: {{PYTHONPATH: "{REPO}"}}
            """,
        "sub_agents/weather/config.yml": """
            agent: {name: weather_agent, description: Books tables.}
            configuration: {include_date_time: false}
            connections:
              mcp_servers: [{name: tools, include_tools: [book_table]}]
            """})


@pytest.mark.parametrize(("action", "content", "result"), [
    ("accept", {"people": 2}, "Booked a table for 2 (inside) on Friday."),
    ("decline", None, "No booking made: the user chose decline."),
    ("cancel", None, "No booking made: the user chose cancel."),
])
async def test_a_conversation_over_stdio_asks_the_user_and_continues_the_flow(
        tmp_path, action, content, result):
    script = {"command_generator": ["start flow weather_flow", ""],
              "weather_agent": [
                  {"tool_calls": [{"book_table": {"day": "Friday"}}]},
                  answer(action, content),
                  {"text": "All settled.", "tool_calls": [{"task_completed": {}}],
                   "expect": {"messages_contain": [result]}}]}
    project = stdio_project(tmp_path / "assistant")
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(60):
            texts1, turn1 = await convo.say("book a table on Friday")
            texts2, turn2 = await convo.say("we are two" if action == "accept" else "no")
        fake.assert_done()
    assert texts1[0].startswith("How many people are coming on Friday?")
    assert names(turn1)[-2:] == ["action:action_agent_request_user_input",
                                 "action:action_listen"]
    assert "tool:book_table" in names(turn2)
    tool = next(e for e in turn2 if e["event"] == "mcp_tool_executed")
    assert tool["result"] == result
    assert "agent_completed:weather_agent" in names(turn2)
    assert texts2[0] == "All settled."


async def test_a_restart_while_the_user_is_asked_ends_the_agent_with_an_error(tmp_path):
    script = {"command_generator": ["start flow weather_flow", ""],
              "weather_agent": [{"tool_calls": [{"book_table": {"day": "Friday"}}]}]}
    project = stdio_project(tmp_path / "assistant")
    store = f"sqlite+aiosqlite:///{tmp_path / 'tracker.db'}"
    async with FakeModelServer(script) as fake:
        with anyio.fail_after(60):
            async with assistant_for(project, fake, tracker_store=SQLTrackerStore(store)) as first:
                await Conversation(first).say("book a table on Friday")
            # a new process: the stdio server and the held call are gone
            async with assistant_for(project, fake, tracker_store=SQLTrackerStore(store)) as second:
                with capture_logs() as logs:
                    _, events = await Conversation(second).say("we are two")
        fake.assert_done()
    cancelled = next(e for e in events if e["event"] == "agent_cancelled")
    assert "can no longer be answered" in cancelled["reason"]
    assert "flow_cancelled:weather_flow" in names(events)
    assert any(e["event"] == "agent.elicitation.lost" for e in logs)


# ---------------------------------------------------------------------------- -32042
@contextlib.asynccontextmanager
async def url_required_agent(script) -> AsyncIterator:
    from subagents.testing.mcp_http import serve_app

    from tests.servers import url_required_server

    async with serve_app(url_required_server.page) as page, \
            serve_mcp(url_required_server.server, "http") as url, \
            FakeModelServer({"weather_agent": script}) as fake:
        url_required_server.reset(page)
        agent = await build_agent(fake, url)
        try:
            yield agent, fake, page
        finally:
            await close(agent)


async def test_a_call_the_server_refuses_until_a_link_is_opened_runs_once_it_says_so():
    script = [{"tool_calls": [{"list_files": {}}]},
              {"text": "You have notes.txt.",
               "expect": {"messages_contain": ["files: notes.txt"]}}]
    async with url_required_agent(script) as (agent, fake, page):
        first, texts = await turn(agent, "What is in my drive?")
        key = f"user-1:{first.metadata['pending_elicitation']['call']['id']}"
        async with httpx2.AsyncClient() as browser:
            assert (await browser.get(f"{page}/connect?id=drive-1")).text == "connected"
        held = agent._test_pool.elicitations.held_call(key)
        assert held is not None
        with anyio.fail_after(10):
            await held  # the server's completion notification let the call run again
        second, _ = await turn(agent, "done", first)
        fake.assert_done()
    assert first.status.value == "input_required"
    assert f"{page}/connect?id=drive-1" in texts[0]
    assert texts[0].startswith("Connect your drive first.")
    assert [e["result"] for e in second.events if e["event"] == "mcp_tool_executed"] == [
        "files: notes.txt"]


async def test_without_a_completion_notice_the_user_says_when_the_link_was_opened():
    script = [{"tool_calls": [{"list_files": {}}]},
              answer("accept"),
              {"text": "You have notes.txt.",
               "expect": {"messages_contain": ["files: notes.txt"]}}]
    async with url_required_agent(script) as (agent, fake, page):
        first, _ = await turn(agent, "What is in my drive?")
        async with httpx2.AsyncClient() as browser:
            await browser.get(f"{page}/connect?id=drive-1&quiet=1")
        second, texts = await turn(agent, "I connected it", first)
        fake.assert_done()
    assert texts == ["You have notes.txt."]
    assert [e["result"] for e in second.events if e["event"] == "mcp_tool_executed"] == [
        "files: notes.txt"]


async def test_a_declined_link_ends_the_call_with_a_clear_error():
    script = [{"tool_calls": [{"list_files": {}}]},
              answer("decline"),
              {"text": "Then I cannot see your files.",
               "expect": {"messages_contain": ["did not complete the step"]}}]
    async with url_required_agent(script) as (agent, fake, _):
        first, _ = await turn(agent, "What is in my drive?")
        with capture_logs() as logs:
            await turn(agent, "no, I don't want to", first)
        fake.assert_done()
    assert [e["code"] for e in logs if e["event"] == "agent.tool.error"] == [
        "mcp.url_elicitation_declined"]


async def test_a_held_call_belongs_to_the_pool_of_its_agent_not_to_the_process():
    script = [{"tool_calls": [{"book_table": {"day": "Friday"}}]}]
    async with elicit_agent(script) as (agent, fake):
        first, _ = await turn(agent, "Book a table on Friday")
        fake.assert_done()
        key = f"user-1:{first.metadata['pending_elicitation']['call']['id']}"
        other = MCPPool(agent._test_pool.endpoints)
        try:
            assert agent._test_pool.elicitations.pending(key)
            assert not other.elicitations.pending(key)  # another assistant's pool: not there
        finally:
            await other.close()
