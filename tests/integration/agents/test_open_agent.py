"""MCPOpenAgent driven directly: fake model server + a real MCP server over HTTP."""

from __future__ import annotations

import itertools
import json

import anyio
import pytest
from subagents.agents.schemas import AgentStatus
from subagents.testing import FakeModelServer

from tests.agent_harness import IN_MEMORY, TimedChannel, agent_input, build_agent, close, kinds


@pytest.fixture
def tools_url() -> str:
    """This module's agents reach the test MCP server in memory (the transport is not tested)."""
    return IN_MEMORY



async def run_agent(script, url, *, channel=None, inp=None, **kw):
    async with FakeModelServer({kw.get("name", "weather_agent"): script}) as fake:
        agent = await build_agent(fake, url, **kw)
        try:
            with anyio.fail_after(30):
                output = await agent.run(inp or agent_input(), channel or TimedChannel())
        finally:
            await close(agent)
        return output, fake


async def test_a_text_answer_asks_the_user_and_is_recorded(tools_url):
    channel = TimedChannel()
    output, fake = await run_agent(["Which city?"], tools_url, channel=channel)
    fake.assert_done()
    assert output.status == AgentStatus.INPUT_REQUIRED
    assert output.response_message is None
    assert output.exit_reason == "text"
    assert channel.texts == ["Which city?"]
    [bot] = output.events
    assert bot["event"] == "bot"
    assert bot["text"] == "Which city?"
    meta = bot["metadata"]
    assert meta["agent_message_type"] == "input_required"
    assert meta["utter_source"] == "MCPOpenAgent"
    assert meta["agent_name"] == "weather_agent"
    assert meta["agent_id"] == "assistant-1"
    assert meta["model_id"] == "model-1"
    assert meta["llm_total_time_ms"] > 0
    assert meta["llm_time_to_first_token_ms"] is None
    request = fake.requests[0]
    assert request.tool_names[-1] == "task_completed"
    assert request.messages[0]["role"] == "system"
    assert "Tell the user the weather." in request.messages[0]["content"]
    assert request.messages[-1] == {"role": "user", "content": "What's the weather in Berlin?"}


async def test_filler_is_delivered_before_the_tool_starts_and_events_are_chronological(tools_url):
    channel = TimedChannel()
    script = [
        {"text": "Let me check.", "tool_calls": [{"timed_read": {"label": "w", "ms": 50}}]},
        {"text": "Sunny in Berlin. Enjoy!", "tool_calls": [{"task_completed": {}}],
         "expect": {"messages_contain": ["w "]}},
    ]
    output, fake = await run_agent(script, tools_url, channel=channel)
    fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert output.exit_reason == "task_completed"
    assert kinds(output.events) == ["bot:filler_message", "tool:timed_read", "bot:final_response"]
    tool_event = output.events[1]
    tool_started = float(tool_event["result"].split()[1])
    filler_time = dict(channel.times)["Let me check."]
    assert filler_time < tool_started
    assert tool_event["metadata"] == {"agent_id": "weather_agent::mcp_open"}
    assert tool_event["arguments"] == {"label": "w", "ms": 50}
    assert output.structured_results == [[
        {"name": "timed_read", "result": tool_event["result"]},
        {"name": "task_completed", "result": "Task completed"}]]
    assert output.tool_calls == {"timed_read": 1, "task_completed": 1}
    second = fake.requests[1].messages
    assert second[-2]["role"] == "assistant"
    assert second[-2]["tool_calls"][0]["function"] == {
        "name": "timed_read", "arguments": json.dumps({"label": "w", "ms": 50})}
    assert second[-1]["role"] == "tool"


async def test_streaming_delivers_chunks_in_order_before_the_tool_runs(tools_url):
    channel = TimedChannel(streaming=True)
    script = [
        {"text": "Let me look that up for you.",
         "tool_calls": [{"timed_read": {"label": "s", "ms": 10}}]},
        {"text": "Done: it is sunny.", "tool_calls": [{"task_completed": {}}]},
    ]
    output, fake = await run_agent(script, tools_url, channel=channel)
    assert all(r.body.get("stream") for r in fake.requests)
    first_end = channel.log.index(("end", False))
    assert next(k for k, _ in channel.log[:first_end + 1]) == "start"
    chunks = [v for k, v in channel.log[:first_end] if k == "chunk"]
    assert len(chunks) > 1
    assert "".join(chunks) == "Let me look that up for you."
    tool_started = float(output.events[1]["result"].split()[1])
    assert max(t for text, t in channel.times if text in chunks) < tool_started
    filler, final = output.events[0], output.events[2]
    assert filler["metadata"]["streamed_text"] is True
    assert filler["metadata"]["llm_time_to_first_token_ms"] is not None
    assert final["text"] == "Done: it is sunny."
    assert channel.texts == ["Let me look that up for you.", "Done: it is sunny."]


async def test_task_completed_without_text_asks_once_more_for_a_closing_line(tools_url):
    script = [
        {"tool_calls": [{"echo": {"text": "x"}}]},
        {"tool_calls": [{"task_completed": {}}]},
        {"text": "All done, have a nice day!",
         "expect": {"system_not_contains": ["Primary Task"], "tools": ["task_completed"]}},
    ]
    channel = TimedChannel()
    output, fake = await run_agent(script, tools_url, channel=channel)
    fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert kinds(output.events) == ["tool:echo", "bot:final_response"]
    closing_request = fake.requests[2].messages
    assert closing_request[0]["role"] == "system"
    assert "closing line" in closing_request[0]["content"]
    assert channel.texts == ["All done, have a nice day!"]


async def test_task_completed_without_any_tool_exchange_offers_no_tools(tools_url):
    script = [{"tool_calls": [{"task_completed": {}}]}, "Glad I could help."]
    output, fake = await run_agent(script, tools_url)
    assert output.status == AgentStatus.COMPLETED
    assert "tools" not in fake.requests[1].body


async def test_other_tools_in_the_completing_response_still_run(tools_url):
    script = [{"text": "Noted, all set.", "tool_calls": [{"echo": {"text": "saved"}},
                                                         {"task_completed": {}}]}]
    output, fake = await run_agent(script, tools_url)
    fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert kinds(output.events) == ["bot:final_response", "tool:echo"]
    assert output.events[1]["result"] == "saved"


async def test_a_tool_error_goes_back_to_the_model_which_recovers(tools_url):
    script = [
        {"text": "Checking.", "tool_calls": [{"fail": {"message": "weather service down"}}]},
        {"text": "Sorry, the weather service is down right now. Try later?",
         "expect": {"messages_contain": ["weather service down"]}},
    ]
    output, fake = await run_agent(script, tools_url)
    fake.assert_done()
    assert output.status == AgentStatus.INPUT_REQUIRED
    assert kinds(output.events) == ["bot:filler_message", "tool:fail!", "bot:input_required"]
    tool_msg = fake.requests[1].messages[-1]
    assert tool_msg["role"] == "tool"
    assert tool_msg["content"].startswith("Error: ")


async def test_raise_on_tool_invocation_failure_makes_tool_errors_fatal(tools_url):
    script = [{"tool_calls": [{"fail": {"message": "boom"}}]}]
    output, fake = await run_agent(script, tools_url,
                                   configuration={"raise_on_tool_invocation_failure": True})
    fake.assert_done()
    assert output.status == AgentStatus.FATAL_ERROR
    assert "boom" in output.error_message
    assert kinds(output.events) == ["tool:fail!"]


async def test_a_tool_timeout_is_an_error_result_for_the_model(tools_url):
    script = [{"tool_calls": [{"slow": {"seconds": 5}}]},
              {"text": "That took too long, sorry.", "expect": {"messages_contain": ["0.3s"]}}]
    output, fake = await run_agent(script, tools_url, configuration={"tool_timeout": 0.3})
    fake.assert_done()
    assert output.status == AgentStatus.INPUT_REQUIRED
    assert output.events[0]["is_error"] is True


async def test_an_unknown_tool_gets_one_corrective_round_then_the_run_fails(tools_url):
    script = [{"tool_calls": [{"get_weather": {"city": "Berlin"}}]},
              {"tool_calls": [{"get_forecast": {}}]}]
    output, fake = await run_agent(script, tools_url, server={"include_tools": ["echo"]})
    fake.assert_done()
    correction = fake.requests[1].messages[-1]
    assert correction["role"] == "tool"
    assert "`get_weather`" in correction["content"]
    assert "echo, task_completed" in correction["content"]
    assert output.status == AgentStatus.FATAL_ERROR
    assert "get_forecast" in output.error_message
    assert output.events == []


async def test_a_tool_not_given_to_the_agent_is_never_called(tools_url):
    script = [{"tool_calls": [{"add": {"a": 1, "b": 2}}]}, "I can only echo."]
    output, fake = await run_agent(script, tools_url, server={"include_tools": ["echo"]})
    assert fake.requests[0].tool_names == ["echo", "task_completed"]
    assert not [e for e in output.events if e["event"] == "mcp_tool_executed"]
    assert output.status == AgentStatus.INPUT_REQUIRED


async def test_a_malformed_tool_name_is_repaired(tools_url):
    script = [{"text": "Bye!", "tool_calls": [{"name": 'task_completed" />', "arguments": {}}]}]
    output, _ = await run_agent(script, tools_url)
    assert output.status == AgentStatus.COMPLETED


@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_json_arguments_are_retried_with_a_system_message(tools_url, stream):
    channel = TimedChannel(streaming=stream)
    script = [{"tool_calls": [{"name": "echo", "arguments": "{\"text\": oops"}]},
              {"text": "Fine.", "expect": {"messages_contain": []}}]
    output, fake = await run_agent(script, tools_url, channel=channel)
    fake.assert_done()
    assert output.status == AgentStatus.INPUT_REQUIRED
    retry = fake.requests[1].messages[-1]
    assert retry["role"] == "system"
    assert "not valid JSON" in retry["content"]
    assert kinds(output.events) == ["bot:input_required"]


async def test_invalid_arguments_are_an_error_result_and_the_tool_never_runs(tools_url):
    script = [{"tool_calls": [{"add": {"a": "one"}}]},
              {"text": "Let me retry.", "expect": {"messages_contain": ["invalid arguments"]}}]
    output, fake = await run_agent(script, tools_url)
    fake.assert_done()
    event = output.events[0]
    assert event["is_error"] is True
    assert "was not run" in event["error_message"]


async def test_max_agent_steps_ends_with_a_real_reply_without_tools(tools_url):
    script = [{"tool_calls": [{"echo": {"text": "1"}}]},
              {"tool_calls": [{"echo": {"text": "2"}}]},
              {"text": "Here is what I found so far: 1 and 2.",
               "expect": {"messages_contain": []}}]
    output, fake = await run_agent(script, tools_url, configuration={"max_agent_steps": 2})
    fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert output.exit_reason == "max_steps"
    assert output.steps == 3
    assert "tools" not in fake.requests[2].body
    assert fake.requests[2].messages[-1]["role"] == "system"
    assert kinds(output.events) == ["tool:echo", "tool:echo", "bot:final_response"]


async def test_the_whole_run_timeout_ends_with_a_fatal_error(tools_url):
    script = [{"text": "Let me check.", "tool_calls": [{"slow": {"seconds": 3}}]}]
    output, _fake = await run_agent(script, tools_url, configuration={"timeout": 0.5})
    assert output.status == AgentStatus.FATAL_ERROR
    assert output.exit_reason == "timeout"
    assert "0.5s" in output.error_message
    assert kinds(output.events) == ["bot:filler_message"]


async def test_an_llm_error_is_a_fatal_error_with_a_clear_message(tools_url):
    script = [{"error": {"status": 500, "message": "model exploded"}}]
    output, _ = await run_agent(script, tools_url)
    assert output.status == AgentStatus.FATAL_ERROR
    assert "HTTP 500" in output.error_message
    assert "model exploded" in output.error_message


async def test_an_empty_answer_gets_one_nudge_instead_of_a_silent_wait(tools_url):
    script = [{"text": ""}, {"text": "Which city?", "expect": {"messages_contain": []}}]
    output, fake = await run_agent(script, tools_url)
    fake.assert_done()
    assert output.status == AgentStatus.INPUT_REQUIRED
    assert fake.requests[1].messages[-1]["role"] == "system"


async def test_read_only_tools_overlap_and_a_side_effect_tool_runs_alone(tools_url):
    script = [{"tool_calls": [{"timed_read": {"label": "a", "ms": 300}},
                              {"timed_read": {"label": "b", "ms": 300}},
                              {"timed_write": {"label": "c", "ms": 100}},
                              {"timed_read": {"label": "d", "ms": 50}}]},
              "Done."]
    output, fake = await run_agent(script, tools_url)
    spans = {}
    for event in output.events:
        if event["event"] == "mcp_tool_executed":
            label, start, end = event["result"].split()
            spans[label] = (float(start), float(end))
    a, b, c, d = spans["a"], spans["b"], spans["c"], spans["d"]
    assert a[0] < b[1]
    assert b[0] < a[1]
    assert c[0] >= max(a[1], b[1])  # the write started after the reads before it ended
    assert d[0] >= c[1]  # and the next read waited for it
    answers = [m["content"].split()[0] for m in fake.requests[1].messages if m["role"] == "tool"]
    assert answers == ["a", "b", "c", "d"]


async def test_max_parallel_tools_limits_concurrency(tools_url):
    script = [{"tool_calls": [{"timed_read": {"label": x, "ms": 200}} for x in "abc"]}, "Done."]
    output, _ = await run_agent(script, tools_url, configuration={"max_parallel_tools": 1})
    spans = sorted(tuple(map(float, e["result"].split()[1:])) for e in output.events
                   if e["event"] == "mcp_tool_executed")
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))


async def test_exit_conditions_text_completes_on_a_text_answer(tools_url):
    output, _ = await run_agent(["It is sunny."], tools_url,
                                configuration={"exit_conditions": ["text"]})
    assert (output.status, output.exit_reason) == (AgentStatus.COMPLETED, "text")
    assert kinds(output.events) == ["bot:final_response"]


async def test_exit_conditions_tool_completes_right_after_that_tool(tools_url):
    script = [{"text": "Saving.", "tool_calls": [{"echo": {"text": "x"}}]}]
    output, fake = await run_agent(script, tools_url, configuration={"exit_conditions": ["echo"]})
    fake.assert_done()
    assert (output.status, output.exit_reason) == (AgentStatus.COMPLETED, "tool:echo")


async def test_filler_sections_disappear_when_fillers_are_disabled(tools_url):
    _, on = await run_agent(["Hi"], tools_url)
    _, off = await run_agent(["Hi"], tools_url, configuration={"enable_filler_messages": False})
    assert "Before using tools" in on.requests[0].system_text
    assert "Before using tools" not in off.requests[0].system_text


async def test_the_date_section_uses_the_configured_timezone(tools_url):
    inp = agent_input(metadata={"mocked_datetime": "2026-03-01T12:00:00+00:00"})
    _, fake = await run_agent(["Hi"], tools_url, inp=inp,
                              configuration={"include_date_time": True,
                                             "timezone": "Asia/Tokyo"})
    system = fake.requests[0].system_text
    assert "Sunday, 01 March, 2026" in system
    assert "21:00:00 (JST)" in system


async def test_history_is_the_last_ten_utterances_as_chat_messages(tools_url):
    from subagents import events as ev

    history = []
    for i in range(8):
        history += [ev.user_uttered(f"u{i}"),
                    ev.bot_uttered(f"b{i}\nline", data={"buttons": [{"title": "Yes"}]})]
    _, fake = await run_agent(["ok"], tools_url, inp=agent_input("now", history=history))
    messages = fake.requests[0].messages[1:]
    assert len(messages) == 10
    assert messages[0] == {"role": "assistant", "content": 'b3 line button 1: "Yes"'}
    assert messages[-1] == {"role": "user", "content": "now"}
