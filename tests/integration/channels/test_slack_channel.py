"""Slack Events API at the wire: signed webhook requests in, recorded Web API calls out (to a
local stand-in of Slack's API)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx2
import pytest
from slack_sdk.signature import SignatureVerifier
from subagents.channels.slack import TEXT_LIMIT, SlackInput

from tests.servers.platforms import PlatformStandIn, channel_under_test, slack_api

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
LONG = " ".join(f"Sentence number {i} of the long forecast." for i in range(120))


@pytest.fixture
async def slack(tmp_path, tools_url) -> AsyncIterator[Any]:
    async with contextlib.AsyncExitStack() as stack:
        async def start(script: dict[str, Any]) -> tuple[Any, PlatformStandIn,
                                                         httpx2.AsyncClient, SlackInput]:
            return await stack.enter_async_context(channel_under_test(
                tmp_path, tools_url, slack_api, script,
                lambda api_url: SlackInput.from_credentials({
                    "slack_token": "xoxb-test-token", "slack_signing_secret": SECRET,
                    "api_url": f"{api_url}/api"})))

        yield start


def signed(body: bytes, *, age: float = 0.0, secret: str = SECRET,
           content_type: str = "application/json") -> dict[str, str]:
    timestamp = str(int(time.time() - age))
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    return {"x-slack-request-timestamp": timestamp, "x-slack-signature": signature or "",
            "content-type": content_type}


def event(text: str, *, ts: str = "1700000000.000100", event_id: str = "Ev01") -> bytes:
    return json.dumps({
        "token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": 1700000000,
        "event": {"type": "message", "channel": "D024BE91L", "channel_type": "im",
                  "user": "U2147483697", "text": text, "ts": ts}}).encode()


async def post(client: httpx2.AsyncClient, body: bytes, headers: dict[str, str]) -> Any:
    return await client.post("/webhooks/slack/webhook", content=body, headers=headers)


async def test_the_url_check_is_answered(slack):
    _, _, client, _ = await slack({})
    body = json.dumps({"token": "x", "challenge": "3eZbrw1a", "type": "url_verification"})
    response = await post(client, body.encode(), signed(body.encode()))
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1a"}


async def test_fillers_and_long_answers_are_posted_as_their_own_messages(slack):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [
                  {"text": "Let me check that for you.",
                   "tool_calls": [{"timed_read": {"label": "w", "ms": 10}}]},
                  {"text": LONG, "tool_calls": [{"task_completed": {}}]}]}
    assistant, api, client, channel = await slack(script)
    body = event("<@U0BOT> weather?")
    response = await post(client, body, signed(body))
    assert response.status_code == 200
    with anyio.fail_after(30):
        calls = await api.wait_for("chat.postMessage", 5)
        await channel.turns.drain()
    texts = [c.fields["text"] for c in calls]
    assert texts[0] == "Let me check that for you."
    assert len(texts[1]) <= TEXT_LIMIT
    assert len(texts[2]) <= TEXT_LIMIT
    assert texts[1].endswith("of the long forecast.")
    assert f"{texts[1]} {texts[2]}" == LONG
    assert texts[3:] == ["Anything else about the weather?",
                         "Is there anything else I can help you with?"]
    assert {c.fields["channel"] for c in calls} == {"D024BE91L"}
    assert calls[0].headers["authorization"] == "Bearer xoxb-test-token"
    user = next(e for e in (await assistant.state("U2147483697"))["events"]
                if e["event"] == "user")
    assert user["text"] == "weather?"  # the mention is removed


async def test_buttons_are_blocks_and_a_press_sends_the_payload(slack):
    script = {"command_generator": ["start flow weather_flow", "start flow opening_hours", ""],
              "weather_agent": ["Which city?", "Which city?"]}
    assistant, api, client, channel = await slack(script)
    first, second = event("weather", ts="1.1", event_id="E1"), event("hours?", ts="1.2",
                                                                      event_id="E2")
    await post(client, first, signed(first))
    with anyio.fail_after(30):
        await api.wait_for("chat.postMessage", 1)
    await post(client, second, signed(second))
    with anyio.fail_after(30):
        while "blocks" not in api.calls[-1].fields:
            await api.wait_for("chat.postMessage", len(api.calls) + 1)
    blocks = api.calls[-1].fields["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    assert blocks[0]["text"]["text"] == "Shall we pick up where we left off before?"
    buttons = blocks[1]["elements"]
    assert [b["type"] for b in buttons] == ["button", "button"]
    payload = buttons[0]["value"]
    assert payload == "/SetSlots(continue_interrupted_flow_confirmation=true)"

    press = {"type": "block_actions", "trigger_id": "123.456", "user": {"id": "U2147483697"},
             "channel": {"id": "D024BE91L"}, "container": {"type": "message"},
             "actions": [{"type": "button", "action_id": "button_0", "value": payload,
                          "action_ts": "1700000001.1"}]}
    form = urlencode({"payload": json.dumps(press)}).encode()
    response = await post(client, form, signed(
        form, content_type="application/x-www-form-urlencoded"))
    assert response.status_code == 200
    with anyio.fail_after(30):
        await channel.turns.drain()
    users = [e["text"] for e in (await assistant.state("U2147483697"))["events"]
             if e["event"] == "user"]
    assert users == ["weather", "hours?", payload]


async def test_a_bad_signature_is_refused(slack):
    _, api, client, _ = await slack({})
    body = event("hello")
    forged = await post(client, body, signed(body, secret="not-the-signing-secret-at-all"))
    tampered = await post(client, body.replace(b"hello", b"pay me"), signed(body))
    unsigned = await client.post("/webhooks/slack/webhook", content=body,
                                 headers={"content-type": "application/json"})
    assert [forged.status_code, tampered.status_code, unsigned.status_code] == [401, 401, 401]
    assert api.calls == []


async def test_a_replayed_request_is_not_handled_again(slack):
    script = {"command_generator": ["start flow opening_hours"]}
    assistant, api, client, channel = await slack(script)
    body = event("hours?")
    headers = signed(body)
    assert (await post(client, body, headers)).status_code == 200
    with anyio.fail_after(30):
        await api.wait_for("chat.postMessage", 2)
        await channel.turns.drain()
    again = await post(client, body, {**headers, "x-slack-retry-num": "1",
                                      "x-slack-retry-reason": "http_timeout"})
    stale = await post(client, body, signed(body, age=600))
    assert again.status_code == 200  # acknowledged, so that Slack stops retrying
    assert stale.status_code == 401  # an old signed request is refused
    events = (await assistant.state("U2147483697"))["events"]
    assert [e["text"] for e in events if e["event"] == "user"] == ["hours?"]
    assert len(api.named("chat.postMessage")) == 2
