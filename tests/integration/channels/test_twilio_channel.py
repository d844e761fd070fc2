"""Twilio SMS/WhatsApp at the wire: signed webhook forms in, recorded Messages API calls out
(to a local stand-in of Twilio's API)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest
from starlette.responses import JSONResponse
from subagents.channels.twilio import TEXT_LIMIT, TwilioInput
from twilio.request_validator import RequestValidator

from tests.servers.platforms import PlatformStandIn, channel_under_test, twilio_api

SID = "AC" + "1" * 32
AUTH = "12345678901234567890123456789012"
PUBLIC_URL = "https://bot.example.org/webhooks/twilio/webhook"
NUMBER = "+15005550006"
USER = "+14155238886"
LONG = " ".join(f"Sentence number {i} of the long forecast." for i in range(60))


@pytest.fixture
async def twilio(tmp_path, tools_url) -> AsyncIterator[Any]:
    async with contextlib.AsyncExitStack() as stack:
        async def start(script: dict[str, Any], answer: Any = twilio_api
                        ) -> tuple[Any, PlatformStandIn, httpx2.AsyncClient, TwilioInput]:
            return await stack.enter_async_context(channel_under_test(
                tmp_path, tools_url, answer, script,
                lambda api_url: TwilioInput.from_credentials({
                    "account_sid": SID, "auth_token": AUTH, "twilio_number": NUMBER,
                    "webhook_url": PUBLIC_URL, "api_url": api_url})))

        yield start


def form(body: str, sid: str, sender: str = USER) -> dict[str, str]:
    return {"ToCountry": "US", "SmsMessageSid": sid, "NumMedia": "0", "SmsSid": sid,
            "SmsStatus": "received", "Body": body, "To": NUMBER, "NumSegments": "1",
            "MessageSid": sid, "AccountSid": SID, "From": sender, "ApiVersion": "2010-04-01"}


async def post(client: httpx2.AsyncClient, fields: dict[str, str], *,
               auth: str = AUTH) -> Any:
    signature = RequestValidator(auth).compute_signature(PUBLIC_URL, fields)
    return await client.post("/webhooks/twilio/webhook", data=fields,
                             headers={"x-twilio-signature": signature})


async def test_fillers_and_long_answers_are_separate_sms(twilio):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [
                  {"text": "Let me check that for you.",
                   "tool_calls": [{"timed_read": {"label": "w", "ms": 10}}]},
                  {"text": LONG, "tool_calls": [{"task_completed": {}}]}]}
    assistant, api, client, channel = await twilio(script)
    response = await post(client, form("weather?", "SM" + "a" * 32))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/xml")
    assert "<Response></Response>" in response.text
    with anyio.fail_after(30):
        await channel.turns.drain()
    calls = api.named("Messages.json")
    assert {c.path for c in calls} == {f"/2010-04-01/Accounts/{SID}/Messages.json"}
    texts = [c.fields["Body"] for c in calls]
    assert texts[0] == "Let me check that for you."
    assert all(len(t) <= TEXT_LIMIT for t in texts)
    assert f"{texts[1]} {texts[2]}" == LONG
    assert texts[3:] == ["Anything else about the weather?",
                         "Is there anything else I can help you with?"]
    assert {(c.fields["From"], c.fields["To"]) for c in calls} == {(NUMBER, USER)}
    assert calls[0].headers["authorization"].startswith("Basic ")
    users = [e for e in (await assistant.state(USER))["events"] if e["event"] == "user"]
    assert users[0]["metadata"]["twilio"]["to"] == NUMBER


async def test_whatsapp_choices_are_numbered_and_a_number_sends_the_payload(twilio):
    script = {"command_generator": ["start flow weather_flow", "start flow opening_hours", ""],
              "weather_agent": ["Which city?", "Which city?"]}
    assistant, api, client, channel = await twilio(script)
    user = f"whatsapp:{USER}"
    await post(client, form("weather", "SM1", user))
    with anyio.fail_after(30):
        await channel.turns.drain()
    await post(client, form("hours?", "SM2", user))
    with anyio.fail_after(30):
        await channel.turns.drain()
    question = api.named("Messages.json")[-1].fields
    assert question["Body"].splitlines()[0] == "Shall we pick up where we left off before?"
    assert [line.split(". ")[0] for line in question["Body"].splitlines()[1:]] == ["1", "2"]
    assert (question["From"], question["To"]) == (f"whatsapp:{NUMBER}", user)
    await post(client, form("1", "SM3", user))
    with anyio.fail_after(30):
        await channel.turns.drain()
    users = [e["text"] for e in (await assistant.state(user))["events"]
             if e["event"] == "user"]
    assert users == ["weather", "hours?",
                     "/SetSlots(continue_interrupted_flow_confirmation=true)"]


async def test_a_bad_signature_is_refused(twilio):
    _, api, client, _ = await twilio({})
    forged = await post(client, form("hi", "SM9"), auth="0" * 32)
    unsigned = await client.post("/webhooks/twilio/webhook", data=form("hi", "SM9"))
    fields = form("hi", "SM9")
    signature = RequestValidator(AUTH).compute_signature(PUBLIC_URL, fields)
    tampered = await client.post("/webhooks/twilio/webhook",
                                 data={**fields, "Body": "send money"},
                                 headers={"x-twilio-signature": signature})
    assert [forged.status_code, unsigned.status_code, tampered.status_code] == [401, 401, 401]
    assert api.calls == []


async def test_a_replayed_message_is_not_handled_again(twilio):
    assistant, api, client, channel = await twilio({
        "command_generator": ["start flow opening_hours"]})
    fields = form("hours?", "SM" + "b" * 32)
    assert (await post(client, fields)).status_code == 200
    with anyio.fail_after(30):
        await channel.turns.drain()
    assert (await post(client, fields)).status_code == 200
    with anyio.fail_after(30):
        await channel.turns.drain()
    users = [e for e in (await assistant.state(USER))["events"] if e["event"] == "user"]
    assert len(users) == 1
    assert len(api.named("Messages.json")) == 2


async def test_a_failing_messages_api_does_not_end_the_conversation(twilio):
    def outage(_: Any) -> JSONResponse:
        return JSONResponse({"code": 20500, "message": "Internal Server Error",
                             "status": 500}, status_code=500)

    assistant, api, client, channel = await twilio(
        {"command_generator": ["start flow opening_hours"]}, outage)
    assert (await post(client, form("hours?", "SM5"))).status_code == 200
    with anyio.fail_after(30):
        await channel.turns.drain()
    assert len(api.named("Messages.json")) == 2  # both messages were tried
    events = (await assistant.state(USER))["events"]
    assert [e["text"] for e in events if e["event"] == "bot"] == [
        "We are open 9 to 5.", "Is there anything else I can help you with?"]
