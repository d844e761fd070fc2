"""A whole conversation per provider: a project whose sub agent's model group names the provider
(with the keys and variables a Rasa project uses, the endpoint pointing at the provider's
stand-in on 127.0.0.1), a flow that calls the agent, the agent calling a tool of a real MCP
server over HTTP, and its answer streamed to a streaming channel.

The command generator's model is the fake OpenAI-compatible server; every call of the agent
goes to the provider in its own wire format (Anthropic Messages, Gemini and Vertex AI
``generateContent``, Bedrock Converse, Mistral, Cohere v2), or, for the hosted
OpenAI-compatible providers, to the fake server at the address their variables name.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.processor import Assistant
from subagents.stores import InMemoryTrackerStore
from subagents.testing import FakeModelServer

from tests.dialogue_harness import names
from tests.provider_cases import (
    KEY,
    LITELLM_WARNINGS,
    case_params,
    chat_requests,
    no_internet,  # noqa: F401 - the fixture
    tool_names,
)

pytestmark = [*LITELLM_WARNINGS, pytest.mark.usefixtures("no_internet")]

QUESTION = "What is the weather in Paris?"
RESULT = "sunny, 21 C"
ANSWER = "It is sunny in Paris today, 21 degrees."
AGENT_SCRIPT = [
    {"tool_calls": [{"name": "echo", "arguments": {"text": RESULT}, "id": "toolu_01echo"}]},
    {"text": ANSWER, "tool_calls": [{"name": "task_completed", "arguments": {},
                                     "id": "toolu_02done"}]},
]
AFTER = "Anything else about the weather?"
ANSWER_ONLY = [AGENT_SCRIPT[0], ANSWER]
"""For a provider that drops text beside tool calls: the answer alone (the agent then waits for
the user, as an open agent does after a reply)."""


def write_project(root: Path, model: dict[str, Any], commands_url: str, tools_url: str) -> Path:
    """The assistant: one flow calling the weather agent, whose model is ``model``."""
    files = {
        "config.yml": """
            assistant_id: provider_test
            pipeline:
              - name: CompactLLMCommandGenerator
                llm: {model_group: commands}
            """,
        "endpoints.yml": f"""
            model_groups:
              - id: commands
                models:
                  - {{provider: openai, model: gpt-test, api_base: "{commands_url}",
                     api_key: "${{COMMANDS_KEY}}"}}
              - id: weather_llm
                models:
                  - {json.dumps(model)}
            mcp_servers:
              - name: tools
                type: http
                url: {tools_url}
            """,
        "data/flows.yml": """
            flows:
              weather_flow:
                description: tell the weather
                steps:
                  - call: weather_agent
                  - action: utter_after_weather
            """,
        "domain.yml": f"""
            responses:
              utter_after_weather: [{{text: "{AFTER}"}}]
            """,
        "sub_agents/weather/config.yml": """
            agent: {name: weather_agent, description: Tells the weather.}
            configuration:
              llm: {model_group: weather_llm}
              include_date_time: false
            connections:
              mcp_servers: [{name: tools, include_tools: [echo]}]
            """,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


async def converse(root: Path) -> tuple[CollectingOutputChannel, list[dict[str, Any]]]:
    """One user message through the assistant, to a streaming channel."""
    channel = CollectingOutputChannel(streaming=True)
    assistant = Assistant.load(root, tracker_store=InMemoryTrackerStore(), retry_delays=(0.0,))
    async with assistant:
        with anyio.fail_after(60):
            events = await assistant.handle_message("user-1", QUESTION, None, channel)
    return channel, events


def streamed_pieces(channel: CollectingOutputChannel) -> list[str]:
    return [item for kind, item in channel.log if kind == "chunk"]


@pytest.mark.parametrize("case", case_params())
async def test_a_conversation_with_a_tool_call_streamed_through_the_provider(
        case, tmp_path, tools_url, monkeypatch):
    monkeypatch.setenv("COMMANDS_KEY", KEY)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    script = AGENT_SCRIPT if case.text_beside_calls else ANSWER_ONLY
    async with FakeModelServer({"command_generator": ["start flow weather_flow"]}) as fake, \
            case.server(script) as server:
        root = write_project(tmp_path / "assistant", case.entry(server, tmp_path),
                             fake.base_url("command_generator"), tools_url)
        channel, events = await converse(root)
        fake.assert_done()
        server.assert_done()
    first, second = chat_requests(server)
    # the provider was asked in its own format, streamed where it can stream
    assert [first.stream, second.stream] == [case.streams, case.streams]
    assert {"echo", "task_completed"} <= set(tool_names(server, first))
    # the tool ran on the MCP server and its result went back to the provider
    assert "tool:echo" in names(events)
    assert RESULT in json.dumps(second.body)
    assert "toolu_01echo" in json.dumps(second.body) or case.name in ("gemini", "vertex_ai")
    # the answer reached the user as the provider streamed it, then the flow went on
    assert streamed_pieces(channel) == (server.pieces(ANSWER) if case.streams else [ANSWER])
    if not case.text_beside_calls:
        assert channel.texts == [ANSWER]
        return
    assert channel.texts[:2] == [ANSWER, AFTER]
    assert names(events).index("agent_completed:weather_agent") < names(events).index(
        f"bot:{AFTER}")


HOSTED = [
    # provider, its key variable, its base variable (pointed at the fake server), the model as
    # written, the model the API gets, whether the stream asks for usage
    ("groq", "GROQ_API_KEY", "GROQ_API_BASE", "groq/llama-3.3-70b-versatile",
     "llama-3.3-70b-versatile", True),
    ("deepinfra", "DEEPINFRA_API_KEY", "DEEPINFRA_API_BASE",
     "meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", True),
    ("huggingface", "HF_TOKEN", "HF_API_BASE", "together/deepseek-ai/DeepSeek-R1",
     "deepseek-ai/DeepSeek-R1:together", True),
    ("together_ai", "TOGETHERAI_API_KEY", "TOGETHER_AI_API_BASE",
     "meta-llama/Llama-3.3-70B-Instruct-Turbo", "meta-llama/Llama-3.3-70B-Instruct-Turbo", True),
    ("openrouter", "OPENROUTER_API_KEY", "OPENROUTER_API_BASE", "openai/gpt-4o",
     "openai/gpt-4o", True),
    ("deepseek", "DEEPSEEK_API_KEY", "DEEPSEEK_API_BASE", "deepseek-chat", "deepseek-chat",
     True),
    ("xai", "XAI_API_KEY", "XAI_API_BASE", "grok-3", "grok-3", True),
]


@pytest.mark.parametrize(("provider", "key", "base", "written", "called", "usage"), HOSTED,
                         ids=[h[0] for h in HOSTED])
async def test_hosted_openai_compatible_providers_go_the_direct_way(
        provider, key, base, written, called, usage, tmp_path, tools_url, monkeypatch):
    monkeypatch.setenv("COMMANDS_KEY", KEY)
    monkeypatch.setenv(key, f"{provider}-key")
    script = {"command_generator": ["start flow weather_flow"], provider: AGENT_SCRIPT}
    async with FakeModelServer(script) as fake:
        monkeypatch.setenv(base, fake.base_url(provider))
        root = write_project(tmp_path / "assistant", {"provider": provider, "model": written},
                             fake.base_url("command_generator"), tools_url)
        channel, events = await converse(root)
        fake.assert_done()
    calls = fake.requests_of(provider)
    assert [r.body["model"] for r in calls] == [called, called]
    assert {r.headers["authorization"] for r in calls} == {f"Bearer {provider}-key"}
    assert all(r.body["stream"] for r in calls)
    assert all(("stream_options" in r.body) is usage for r in calls)
    assert calls[1].messages[-1]["content"] == RESULT
    assert "".join(streamed_pieces(channel)) == ANSWER
    assert channel.texts[:2] == [ANSWER, AFTER]
    assert "tool:echo" in names(events)


async def test_cohere_through_its_compatibility_api_streams_without_stream_options(
        tmp_path, tools_url, monkeypatch):
    """Without a native ``api_base`` cohere is called at its OpenAI-compatible API, which
    refuses ``stream_options``; OpenAI's ``max_completion_tokens`` is its ``max_tokens``."""
    monkeypatch.setenv("COMMANDS_KEY", KEY)
    monkeypatch.setenv("CO_API_KEY", "cohere-key")
    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    monkeypatch.delenv("COHERE_API_BASE", raising=False)
    script = {"command_generator": ["start flow weather_flow"], "cohere": AGENT_SCRIPT}
    async with FakeModelServer(script) as fake:
        model = {"provider": "cohere", "model": "cohere/command-a-03-2025",
                 "api_base": fake.base_url("cohere"), "api_key": "${CO_API_KEY}",
                 "max_completion_tokens": 300}
        root = write_project(tmp_path / "assistant", model, fake.base_url("command_generator"),
                             tools_url)
        channel, _ = await converse(root)
        fake.assert_done()
    calls = fake.requests_of("cohere")
    assert [r.path for r in calls] == ["/cohere/v1/chat/completions"] * 2
    assert {r.body["model"] for r in calls} == {"command-a-03-2025"}
    assert {r.headers["authorization"] for r in calls} == {"Bearer cohere-key"}
    assert not any("stream_options" in r.body for r in calls)
    assert {r.body["max_tokens"] for r in calls} == {300}
    assert "".join(streamed_pieces(channel)) == ANSWER


async def test_an_openai_compatible_conversation_never_imports_litellm(tmp_path, tools_url):
    """The direct way does not pay for LiteLLM: a conversation with a hosted provider and an
    OpenAI model, in a fresh process, leaves ``litellm`` unimported."""
    program = textwrap.dedent(f"""
        import asyncio, os, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path.cwd())!r})
        from subagents.testing import FakeModelServer
        from tests.integration.llm.test_provider_conversations import (
            AGENT_SCRIPT, converse, write_project)

        async def main():
            script = {{"command_generator": ["start flow weather_flow"],
                       "mistral": AGENT_SCRIPT}}
            async with FakeModelServer(script) as fake:
                os.environ["COMMANDS_KEY"] = os.environ["MISTRAL_API_KEY"] = "k"
                os.environ["MISTRAL_API_BASE"] = fake.base_url("mistral")
                root = write_project(Path({str(tmp_path)!r}) / "a",
                                     {{"provider": "mistral", "model": "mistral-small"}},
                                     fake.base_url("command_generator"), {tools_url!r})
                channel, _ = await converse(root)
                fake.assert_done()
            assert channel.texts, channel.log
            print("litellm" in sys.modules, "subagents.llm.litellm_model" in sys.modules)

        asyncio.run(main())
        """)
    with anyio.fail_after(120):  # the MCP server runs on this test's event loop
        done = await anyio.run_process([sys.executable, "-c", program], check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().split()[-2:] == ["False", "False"]
