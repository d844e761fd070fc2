"""Telegram webhook at the wire: updates shaped as the Bot API documents them, the secret token
header, and the recorded Bot API calls (to a local stand-in of Telegram's API)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest
from subagents.channels.telegram import TEXT_LIMIT, TelegramInput

from tests.servers.platforms import PlatformStandIn, channel_under_test, telegram_api

BOT_TOKEN = "110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
WEBHOOK = "https://bot.example.org/webhooks/telegram/webhook"
CHAT = 593812771
LONG = " ".join(f"Sentence number {i} of the long forecast." for i in range(150))


@pytest.fixture
async def telegram(tmp_path, tools_url) -> AsyncIterator[Any]:
    async with contextlib.AsyncExitStack() as stack:
        async def start(script: dict[str, Any]) -> tuple[Any, PlatformStandIn,
                                                         httpx2.AsyncClient, TelegramInput]:
            return await stack.enter_async_context(channel_under_test(
                tmp_path, tools_url, telegram_api, script,
                lambda api_url: TelegramInput.from_credentials({
                    "access_token": BOT_TOKEN, "verify": "test_bot", "webhook_url": WEBHOOK,
                    "api_url": api_url})))

        yield start


def update(update_id: int, text: str) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id * 10, "date": 1700000000, "text": text,
        "chat": {"id": CHAT, "type": "private", "first_name": "Ada"},
        "from": {"id": CHAT, "is_bot": False, "first_name": "Ada", "language_code": "en"}}}


def secret_of(api: PlatformStandIn) -> str:
    [call] = api.named("setWebhook")
    return str(call.fields["secret_token"])


async def send(client: httpx2.AsyncClient, body: dict[str, Any], secret: str) -> Any:
    return await client.post("/webhooks/telegram/webhook", content=json.dumps(body),
                             headers={"content-type": "application/json",
                                      "x-telegram-bot-api-secret-token": secret})


async def test_startup_registers_the_webhook_with_a_secret(telegram):
    _, api, _, _ = await telegram({})
    [call] = api.named("setWebhook")
    assert call.fields["url"] == WEBHOOK
    assert len(str(call.fields["secret_token"])) == 64
    assert BOT_TOKEN not in str(call.fields["secret_token"])
    assert call.path == f"/bot{BOT_TOKEN}/setWebhook"


async def test_fillers_and_long_answers_are_separate_messages(telegram, caplog):
    caplog.set_level(logging.DEBUG)
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [
                  {"text": "Let me check that for you.",
                   "tool_calls": [{"timed_read": {"label": "w", "ms": 10}}]},
                  {"text": LONG, "tool_calls": [{"task_completed": {}}]}]}
    assistant, api, client, channel = await telegram(script)
    response = await send(client, update(1, "weather?"), secret_of(api))
    assert response.status_code == 200
    with anyio.fail_after(30):
        calls = await api.wait_for("sendMessage", 5)
        await channel.turns.drain()
    texts = [c.fields["text"] for c in calls]
    assert texts[0] == "Let me check that for you."
    assert all(len(t) <= TEXT_LIMIT for t in texts)
    assert f"{texts[1]} {texts[2]}" == LONG
    assert texts[1].endswith(".")
    assert texts[3:] == ["Anything else about the weather?",
                         "Is there anything else I can help you with?"]
    assert {str(c.fields["chat_id"]) for c in calls} == {str(CHAT)}
    users = [e for e in (await assistant.state(str(CHAT)))["events"] if e["event"] == "user"]
    assert users[0]["text"] == "weather?"
    assert users[0]["metadata"]["telegram"]["chat_type"] == "private"
    assert any("sendMessage" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if BOT_TOKEN in r.getMessage()]


async def test_buttons_are_an_inline_keyboard_and_a_press_sends_the_payload(telegram):
    script = {"command_generator": ["start flow weather_flow", "start flow opening_hours", ""],
              "weather_agent": ["Which city?", "Which city?"]}
    assistant, api, client, channel = await telegram(script)
    secret = secret_of(api)
    await send(client, update(1, "weather"), secret)
    with anyio.fail_after(30):
        await api.wait_for("sendMessage", 1)
        await channel.turns.drain()
    await send(client, update(2, "hours?"), secret)
    with anyio.fail_after(30):
        await channel.turns.drain()
    question = api.named("sendMessage")[-1]
    markup = question.fields["reply_markup"]
    markup = json.loads(markup) if isinstance(markup, str) else markup
    rows = markup["inline_keyboard"]
    payload = rows[0][0]["callback_data"]
    assert payload == "/SetSlots(continue_interrupted_flow_confirmation=true)"
    assert len(rows) == 2

    press = {"update_id": 3, "callback_query": {
        "id": "4382bfdwdsb323b2d9", "chat_instance": "-1", "data": payload,
        "from": {"id": CHAT, "is_bot": False, "first_name": "Ada"},
        "message": {"message_id": 77, "date": 1700000000, "text": question.fields["text"],
                    "chat": {"id": CHAT, "type": "private"}}}}
    assert (await send(client, press, secret)).status_code == 200
    with anyio.fail_after(30):
        await channel.turns.drain()
        await api.wait_for("answerCallbackQuery", 1)
    users = [e["text"] for e in (await assistant.state(str(CHAT)))["events"]
             if e["event"] == "user"]
    assert users == ["weather", "hours?", payload]


async def test_a_missing_or_wrong_secret_is_refused(telegram):
    _, api, client, _ = await telegram({})
    wrong = await send(client, update(1, "hi"), "0" * 64)
    missing = await client.post("/webhooks/telegram/webhook", json=update(2, "hi"))
    assert [wrong.status_code, missing.status_code] == [401, 401]
    assert api.named("sendMessage") == []


async def test_a_replayed_update_is_not_handled_again(telegram):
    assistant, api, client, channel = await telegram({
        "command_generator": ["start flow opening_hours"]})
    secret = secret_of(api)
    assert (await send(client, update(7, "hours?"), secret)).status_code == 200
    with anyio.fail_after(30):
        await channel.turns.drain()
    assert (await send(client, update(7, "hours?"), secret)).status_code == 200
    with anyio.fail_after(30):
        await channel.turns.drain()
    users = [e for e in (await assistant.state(str(CHAT)))["events"] if e["event"] == "user"]
    assert len(users) == 1
    assert len(api.named("sendMessage")) == 2
