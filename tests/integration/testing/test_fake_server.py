"""The fake model server is strict and records what it was sent."""

from __future__ import annotations

import pytest
from subagents.exceptions import LLMError
from subagents.llm import LLMClient, ModelSettings
from subagents.testing import FakeModelServer, normalize_reply

USER = [{"role": "user", "content": "hi"}]


def client(fake: FakeModelServer, caller: str) -> LLMClient:
    return LLMClient(ModelSettings(model="m", api_base=fake.base_url(caller), max_retries=0))


async def test_replies_are_served_per_caller_in_order():
    async with FakeModelServer({"agent_a": ["a1", "a2"], "agent_b": ["b1"]}) as fake:
        a, b = client(fake, "agent_a"), client(fake, "agent_b")
        texts = [(await a.complete(USER, None)).text, (await b.complete(USER, None)).text,
                 (await a.complete(USER, None)).text]
        await a.close()
        await b.close()
        fake.assert_done()
    assert texts == ["a1", "b1", "a2"]
    assert [(r.caller, r.index) for r in fake.requests] == [
        ("agent_a", 1), ("agent_b", 1), ("agent_a", 2)]


async def test_an_unexpected_call_fails_the_request_and_is_reported():
    async with FakeModelServer({"agent_a": ["only one"]}) as fake:
        llm = client(fake, "agent_a")
        await llm.complete(USER, None)
        with pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
        await llm.close()
    assert "unexpected model call by agent_a, request 2" in str(info.value)
    assert fake.problems() == ["unexpected model call by agent_a, request 2"]
    with pytest.raises(AssertionError):
        fake.assert_done()


async def test_unconsumed_replies_are_reported():
    async with FakeModelServer({"agent_a": ["one", "two"]}) as fake:
        llm = client(fake, "agent_a")
        await llm.complete(USER, None)
        await llm.close()
    assert fake.problems() == ["1 scripted reply for agent_a never requested"]


async def test_failed_expectations_are_reported_with_the_request_number():
    reply = {"text": "ok", "expect": {"tools": ["a"], "system_contains": ["Primary Task"],
                                      "last_user": "hello", "messages_contain": ["hi"]}}
    async with FakeModelServer({"agent_a": [reply]}) as fake:
        llm = client(fake, "agent_a")
        await llm.complete([{"role": "system", "content": "You help."}, *USER], None)
        await llm.close()
    problems = fake.problems()
    assert len(problems) == 3
    assert all(p.startswith("expect failed for agent_a, request 1") for p in problems)
    assert any("tools:" in p for p in problems)
    assert any("system_contains" in p for p in problems)
    assert any("last_user" in p for p in problems)


@pytest.mark.parametrize("bad", [42, {"txt": "x"}, {"tool_calls": [{"a": {}, "b": {}}]},
                                 {"error": {"message": "no status"}},
                                 {"expect": {"tool": ["x"]}}])
def test_malformed_script_entries_are_rejected(bad):
    with pytest.raises(ValueError):  # noqa: PT011 - message checked loosely on purpose
        normalize_reply(bad)


def test_missing_tool_call_ids_are_numbered():
    reply = normalize_reply({"tool_calls": [{"a": {}}, {"name": "b"}]}, [0])
    assert [c["id"] for c in reply.tool_calls] == ["call_1", "call_2"]
