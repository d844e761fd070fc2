"""Issue 30, item 11 (its model part), through a real ``serve``: a model whose replies are
never usable (malformed tool arguments, empty bodies) leaves the user with a defined answer,
and the conversation takes the next message."""

from __future__ import annotations

import pytest
from subagents.agents.engine import MAX_UNUSABLE_REPLIES, NO_ANSWER
from subagents.testing import FakeModelServer

from tests.security.served import served, served_project

MALFORMED = {"tool_calls": [{"name": "echo", "arguments": "{\"text\": oops"}]}
EMPTY = {"text": ""}


@pytest.mark.parametrize("reply", [MALFORMED, EMPTY], ids=["malformed", "empty"])
async def test_an_agent_model_that_never_answers_usably_gets_the_user_a_defined_reply(
        tmp_path, tools_url, reply):
    script = {"command_generator": ["start flow weather_flow", "continue agent"],
              "weather_agent": [reply] * MAX_UNUSABLE_REPLIES + ["Sunny, 21 degrees."]}
    async with FakeModelServer(script) as fake:
        project = served_project(tmp_path / "p", fake, tools_url)
        async with served(project) as (_, client):
            first = await client.post("/webhooks/rest/webhook",
                                      json={"sender": "ada", "message": "weather?"})
            second = await client.post("/webhooks/rest/webhook",
                                       json={"sender": "ada", "message": "and now?"})
        fake.assert_done()
    assert first.status_code == 200, first.text[:300]
    assert [m.get("text") for m in first.json()] == [NO_ANSWER]
    assert second.status_code == 200, second.text[:300]
    assert "Sunny, 21 degrees." in [m.get("text") for m in second.json()]

