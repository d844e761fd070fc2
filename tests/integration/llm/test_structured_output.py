"""Constrained output (``structured_output``) against the fake model server, over real HTTP."""

from __future__ import annotations

import json

import pytest
from subagents.config.endpoints import EndpointsConfig, model_key_problems
from subagents.exceptions import LLMError
from subagents.llm import ModelSettings, build_model, resolve_model_settings, schema_format
from subagents.testing import FakeModelServer

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
USER = [{"role": "system", "content": "You help with the weather."},
        {"role": "user", "content": "weather in Berlin?"}]
SCHEMA = schema_format("commands", {"type": "object", "properties": {
    "commands": {"type": "array", "items": {"type": "string"}}}, "required": ["commands"]})


def model(fake: FakeModelServer, mode: str, provider: str = "self-hosted"):
    return build_model(ModelSettings(model="m", provider=provider, api_base=fake.base_url(),
                                     max_retries=0, structured_output=mode), name="tester")


def reply(value: dict) -> str:
    return json.dumps({"reply": value})


async def test_json_schema_mode_turns_tools_into_a_reply_schema_and_back_into_a_call():
    async with FakeModelServer({"default": [
            reply({"tool": "get_weather", "arguments": {"city": "Berlin"}})]}) as fake:
        llm = model(fake, "json_schema")
        response = await llm.complete(USER, TOOLS)
        await llm.close()
    body = fake.requests[0].body
    assert "tools" not in body
    choices = body["response_format"]["json_schema"]["schema"]["properties"]["reply"]["anyOf"]
    assert [c["properties"].get("tool", {}).get("const") for c in choices] == [
        "get_weather", None]
    assert choices[0]["properties"]["arguments"] == TOOLS[0]["function"]["parameters"]
    assert "get_weather: The weather in a city." in body["messages"][0]["content"]
    assert body["messages"][0]["content"].startswith("You help with the weather.")
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("get_weather", {"city": "Berlin"})]
    assert response.text is None


async def test_an_answer_in_the_json_form_streams_to_a_streaming_caller_as_written():
    pieces: list[str] = []

    async def on_text(delta: str) -> None:
        pieces.append(delta)

    answer = "Sunny all day in Berlin, with a light breeze."
    async with FakeModelServer({"default": [reply({"answer": answer})]}, chunk_chars=6
                               ) as fake:
        llm = model(fake, "json_schema")
        response = await llm.complete(USER, TOOLS, stream=True, on_text=on_text)
        await llm.close()
    assert fake.requests[0].body["stream"] is True
    assert (response.text, response.tool_calls) == (answer, [])
    assert len(pieces) > 3  # piece by piece, while the JSON arrives
    assert "".join(pieces) == answer
    assert response.streamed  # the caller already has the text: it is not sent again


async def test_a_streamed_tool_call_in_the_json_form_sends_no_text():
    pieces: list[str] = []

    async def on_text(delta: str) -> None:
        pieces.append(delta)

    call = reply({"tool": "get_weather", "arguments": {"city": "Oslo"}})
    async with FakeModelServer({"default": [call]}, chunk_chars=4) as fake:
        llm = model(fake, "json_schema")
        response = await llm.complete(USER, TOOLS, stream=True, on_text=on_text)
        await llm.close()
    assert pieces == []
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("get_weather",
                                                                     {"city": "Oslo"})]


async def test_an_answer_cut_by_the_reply_length_cap_is_the_text_written_so_far():
    cut = {"text": '{"reply": {"answer": "Sunny and wa', "finish_reason": "length"}
    cut_call = {"text": '{"reply": {"tool": "get_weather", "arguments": {"city": "Ber',
                "finish_reason": "length"}
    async with FakeModelServer({"default": [cut, cut_call]}) as fake:
        llm = model(fake, "json_schema")
        answer = await llm.complete(USER, TOOLS)
        call = await llm.complete(USER, TOOLS)
        await llm.close()
    assert (answer.text, answer.tool_calls) == ("Sunny and wa", [])
    assert (call.text, call.tool_calls) == (None, [])  # half a call is never made


async def test_earlier_calls_and_results_are_sent_in_the_json_form():
    history = [*USER,
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function", "function": {
                       "name": "get_weather", "arguments": "{\"city\": \"Berlin\"}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    async with FakeModelServer({"default": [reply({"answer": "Sunny, 21 C."})]}) as fake:
        llm = model(fake, "json_schema")
        await llm.complete(history, TOOLS)
        await llm.close()
    sent = fake.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert json.loads(sent[2]["content"]) == {
        "reply": {"tool": "get_weather", "arguments": {"city": "Berlin"}}}
    assert sent[3]["content"] == "Result of get_weather: sunny, 21 C"


async def test_a_reply_that_is_not_the_json_form_is_an_empty_reply():
    async with FakeModelServer({"default": ['{"reply": {"tool": "get_wea']}) as fake:
        llm = model(fake, "json_schema")
        response = await llm.complete(USER, TOOLS)
        await llm.close()
    assert (response.text, response.tool_calls) == (None, [])


async def test_auto_drops_a_refused_reply_format_and_stops_asking_for_it():
    refused = {"error": {"status": 400, "message": "response_format is not supported"}}
    async with FakeModelServer({"default": [refused, "start flow weather", "cancel flow"]}
                               ) as fake:
        llm = model(fake, "auto")
        first = await llm.complete(USER, None, options={"response_format": SCHEMA})
        second = await llm.complete(USER, None, options={"response_format": SCHEMA})
        await llm.close()
        fake.assert_done()
    assert [("response_format" in r.body) for r in fake.requests] == [True, False, False]
    assert (first.text, second.text) == ("start flow weather", "cancel flow")


async def test_auto_answers_with_the_json_form_once_native_tools_are_refused():
    refused = {"error": {"status": 500, "message": "tools param requires --jinja flag"}}
    call = reply({"tool": "get_weather", "arguments": {"city": "Riga"}})
    async with FakeModelServer({"default": [refused, call, call]}) as fake:
        llm = model(fake, "auto")
        first = await llm.complete(USER, TOOLS)
        second = await llm.complete(USER, TOOLS)
        await llm.close()
        fake.assert_done()
    assert [("tools" in r.body, "response_format" in r.body) for r in fake.requests] == [
        (True, False), (False, True), (False, True)]
    assert first.tool_calls[0].arguments == second.tool_calls[0].arguments == {"city": "Riga"}


async def test_auto_keeps_other_errors():
    failed = {"error": {"status": 400, "message": "the context is too long"}}
    async with FakeModelServer({"default": [failed]}) as fake:
        llm = model(fake, "auto")
        with pytest.raises(LLMError) as info:
            await llm.complete(USER, TOOLS, options={"response_format": SCHEMA})
        await llm.close()
    assert info.value.code == "llm.http_400"


async def test_off_sends_native_tools_and_no_reply_format():
    async with FakeModelServer({"default": ["ok"]}) as fake:
        llm = model(fake, "off")
        await llm.complete(USER, TOOLS, options={"response_format": SCHEMA})
        await llm.close()
    body = fake.requests[0].body
    assert body["tools"] == TOOLS
    assert "response_format" not in body


def test_self_hosted_models_default_to_auto_and_hosted_ones_to_off():
    endpoints = EndpointsConfig.model_validate({"model_groups": [
        {"id": "local", "models": [{"provider": "self-hosted", "model": "m",
                                    "api_base": "http://127.0.0.1:1/v1"}]},
        {"id": "hosted", "models": [{"provider": "openai", "model": "gpt-4.1-mini"}]},
        {"id": "forced", "models": [{"provider": "openai", "model": "gpt-4.1-mini",
                                     "structured_output": "json_schema"}]}]})
    modes = [resolve_model_settings({"model_group": g}, endpoints).structured_output
             for g in ("local", "hosted", "forced")]
    assert modes == ["auto", "off", "json_schema"]
    assert "structured_output" not in resolve_model_settings(
        {"model_group": "forced"}, endpoints).options


def test_an_unknown_mode_is_a_configuration_problem():
    problems = model_key_problems({"provider": "openai", "model": "m",
                                   "structured_output": "always"})
    assert [(key, code) for key, code, *_ in problems] == [
        ("structured_output", "llm.structured_output.invalid")]


async def test_an_agents_answer_in_the_json_form_reaches_a_streaming_user_once():
    from subagents.agents.open_agent import MCPOpenAgent
    from subagents.channels.collecting import CollectingOutputChannel
    from subagents.config.sub_agent import SubAgentConfig

    config = SubAgentConfig.model_validate({
        "agent": {"name": "helper", "description": "Answers."},
        "configuration": {"include_date_time": False}})
    script = [reply({"answer": "Sunny in Riga."})]
    async with FakeModelServer({"helper": script}) as fake:
        llm = build_model(ModelSettings(model="m", provider="self-hosted",
                                        api_base=fake.base_url("helper"), max_retries=0,
                                        structured_output="json_schema"), name="helper")
        agent = MCPOpenAgent.from_config(config, llm=llm)
        await agent.connect()
        channel = CollectingOutputChannel(streaming=True)
        from tests.agent_harness import agent_input

        output = await agent.run(agent_input("weather?", name="helper"), channel)
        await agent.disconnect()
    assert channel.texts == ["Sunny in Riga."]
    assert [e["text"] for e in output.events if e["event"] == "bot"] == ["Sunny in Riga."]


async def test_an_agent_on_a_streaming_channel_shows_a_json_form_answer_once():
    import anyio
    from subagents.agents.open_agent import MCPOpenAgent
    from subagents.channels.collecting import CollectingOutputChannel
    from subagents.config.endpoints import EndpointsConfig
    from subagents.config.sub_agent import SubAgentConfig

    from tests.agent_harness import agent_input

    config = SubAgentConfig.model_validate({
        "agent": {"name": "weather_agent", "description": "Tell the user the weather."},
        "configuration": {"include_date_time": False}})
    channel = CollectingOutputChannel(streaming=True)
    async with FakeModelServer({"default": [reply({"answer": "Which city, please?"})]},
                               chunk_chars=5) as fake:
        agent = MCPOpenAgent.from_config(config, endpoints=EndpointsConfig(),
                                         llm=model(fake, "json_schema"))
        await agent.connect()
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input("weather?"), channel)
        finally:
            await agent.disconnect()
    assert channel.messages == [{"recipient_id": "user-1", "text": "Which city, please?",
                                 "streamed": True}]
    assert sum(kind == "chunk" for kind, _ in channel.log) > 2
    assert [e.get("text") for e in output.events if e.get("event") == "bot"] == [
        "Which city, please?"]


LLAMA_CPP_PROPS = {"chat_template_caps": {"supports_tool_calls": True},
                   "default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}


async def test_llama_cpp_is_asked_for_json_without_line_breaks():
    # llama.cpp's grammar lets a model pretty-print, which doubles a small model's tokens
    call = reply({"tool": "get_weather", "arguments": {"city": "Oslo"}})
    async with FakeModelServer({"default": [call, '{"commands": []}', "plain"]},
                               props=LLAMA_CPP_PROPS) as fake:
        llm = model(fake, "json_schema")
        await llm.complete(USER, TOOLS)
        await llm.complete(USER, None, options={"response_format": SCHEMA})
        await llm.complete(USER, None)
        await llm.close()
    bias = [r.body.get("logit_bias") for r in fake.requests]
    assert bias[0] == bias[1]
    banned = {space for space, allowed in bias[0] if allowed is False}
    # a line break alone, and with the indentation a tokenizer merges into it
    assert {"\n", "\n\n", "\n\t", "\n  ", "\n      ", "\n" + " " * 32} <= banned
    assert all(not space.strip() for space in banned)  # nothing but whitespace is banned
    assert bias[2] is None  # no reply format, no constraint


async def test_other_servers_and_a_configured_bias_get_no_line_break_ban():
    async with FakeModelServer({"default": ['{"commands": []}']}) as other, \
            FakeModelServer({"default": ['{"commands": []}']}, props=LLAMA_CPP_PROPS) as own:
        plain = model(other, "json_schema")
        await plain.complete(USER, None, options={"response_format": SCHEMA})
        await plain.close()
        configured = build_model(ModelSettings.from_mapping({
            "provider": "self-hosted", "model": "m", "api_base": own.base_url(),
            "max_retries": 0, "structured_output": "json_schema",
            "logit_bias": {"198": -100}}), name="tester")
        await configured.complete(USER, None, options={"response_format": SCHEMA})
        await configured.close()
    assert "logit_bias" not in other.requests[0].body
    assert own.requests[0].body["logit_bias"] == {"198": -100}
