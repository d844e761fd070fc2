"""Issue 30, items 4, 8 and 10 (Slack's part): the Slack and Twilio webhooks cap a body before
they read it, verify its signature before they parse it, refuse a pathological signed body
cleanly, and remember handled deliveries where a restarted server (and every worker) sees
them, so a captured signed request cannot be played again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlparse

import anyio
import pytest
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.security.served import served, served_project, user_texts
from tests.servers.platforms import PlatformStandIn, slack_api, twilio_api
from tests.shared_workers import POSTGRES, REDIS

pytest.importorskip("slack_sdk")
pytest.importorskip("twilio")

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
AUTH = "12345678901234567890123456789012"
SID = "AC" + "1" * 32
NUMBER = "+15005550006"
USER = "+14155238886"
PUBLIC_URL = "https://bot.example.org/webhooks/twilio/webhook"
ENV = {"SLACK_TOKEN": "xoxb-test-token", "SLACK_SECRET": SECRET, "TWILIO_AUTH": AUTH}


def credentials(api_url: str) -> str:
    return f"""
        rest:
        slack:
          slack_token: ${{SLACK_TOKEN}}
          slack_signing_secret: ${{SLACK_SECRET}}
          api_url: {api_url}/api
        twilio:
          account_sid: {SID}
          auth_token: ${{TWILIO_AUTH}}
          twilio_number: "{NUMBER}"
          webhook_url: {PUBLIC_URL}
          api_url: {api_url}
        """


def slack_signed(body: bytes) -> dict[str, str]:
    from slack_sdk.signature import SignatureVerifier

    timestamp = str(int(time.time()))
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=timestamp, body=body)
    return {"x-slack-request-timestamp": timestamp, "x-slack-signature": signature or "",
            "content-type": "application/json"}


def slack_event(text: str, ts: str = "1700000000.000100", user: str = "U21474") -> bytes:
    return json.dumps({"type": "event_callback", "event_id": f"Ev{ts}", "team_id": "T1",
                       "event": {"type": "message", "channel": "D024BE91L", "user": user,
                                 "text": text, "ts": ts}}).encode()


def twilio_form(text: str, sid: str) -> dict[str, str]:
    return {"MessageSid": sid, "SmsSid": sid, "AccountSid": SID, "From": USER, "To": NUMBER,
            "Body": text, "NumMedia": "0"}


def twilio_signed(fields: dict[str, str]) -> dict[str, str]:
    from twilio.request_validator import RequestValidator

    return {"x-twilio-signature": RequestValidator(AUTH).compute_signature(PUBLIC_URL, fields)}


@contextlib.asynccontextmanager
async def platforms() -> AsyncIterator[tuple[PlatformStandIn, str]]:
    """One stand-in answering as Slack's and Twilio's APIs both (by path)."""
    def answer(call: Any) -> Any:
        return twilio_api(call) if "/Accounts/" in call.path else slack_api(call)

    api = PlatformStandIn(answer)
    async with serve_app(api.app()) as url:
        yield api, url


async def _raw(url: str, head: bytes, body: bytes = b"") -> bytes:
    """Send a request as written and read the status line of the answer."""
    parsed = urlparse(url)
    reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port)
    try:
        writer.write(head + body)
        await writer.drain()
        with anyio.fail_after(20):
            return await reader.readline()
    finally:
        writer.close()


async def test_unsigned_bodies_are_capped_before_they_are_read(tmp_path, tools_url):
    async with platforms() as (api, api_url), FakeModelServer({}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url,
                                 credentials=credentials(api_url))
        async with served(project, env=ENV) as (server, _):
            statuses = []
            for path in ("/webhooks/slack/webhook", "/webhooks/twilio/webhook"):
                # 500 MB announced, nothing sent: refused at once, not waited for (a form
                # that is not URL-encoded is no Twilio request: 415 before anything is read)
                announced = await _raw(server.url, (
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "content-type: multipart/form-data; boundary=x\r\n"
                    f"content-length: {500 * 2**20}\r\n\r\n").encode())
                # no length at all: counted while it arrives
                chunk = b"a" * 65536
                chunks = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") * 20
                streamed = await _raw(server.url, (
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "content-type: application/x-www-form-urlencoded\r\n"
                    "transfer-encoding: chunked\r\n\r\n").encode(), chunks)
                statuses += [announced.split()[1], streamed.split()[1]]
    assert statuses == [b"413", b"413", b"415", b"413"]
    assert api.calls == []
    assert fake.requests == []


async def test_a_signed_slack_body_nested_100k_deep_is_refused_cleanly(tmp_path, tools_url):
    async with platforms() as (api, api_url), FakeModelServer({}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url,
                                 credentials=credentials(api_url))
        async with served(project, env=ENV) as (_, client):
            deep = b"[" * 100_000 + b"]" * 100_000
            reply = await client.post("/webhooks/slack/webhook", content=deep,
                                      headers=slack_signed(deep))
    assert reply.status_code == 400
    assert api.calls == []


class Deliveries:
    """Signed Slack events and signed Twilio messages of one user each (ids unique to
    ``run``), sent as they would be captured and played again."""

    def __init__(self, run: str) -> None:
        self.run = int(run, 16)
        self.phone = f"+1415{self.run % 10**7:07d}"
        self.slack_user = f"U{run.upper()}"

    async def send(self, client: Any, text: str = "hours?", number: int = 0) -> None:
        """Deliver message ``number`` on both platforms (each answered 200: handled, or
        acknowledged as seen)."""
        body = slack_event(text, ts=f"17{self.run % 10**6:06d}{number:02d}.000100",
                           user=self.slack_user)
        form = {**twilio_form(text, f"SM{self.run:0>30}{number:02d}"), "From": self.phone}
        first = await client.post("/webhooks/slack/webhook", content=body,
                                  headers=slack_signed(body))
        second = await client.post("/webhooks/twilio/webhook", data=form,
                                   headers=twilio_signed(form))
        assert (first.status_code, second.status_code) == (200, 200), first.text

    async def recorded(self, client: Any, last: str) -> tuple[list[Any], list[Any]]:
        """The user messages recorded, once ``last`` is among them on both platforms (a
        replay handled before it would be recorded before it)."""
        with anyio.fail_after(60):
            while True:
                found = (await user_texts(client, self.slack_user),
                         await user_texts(client, self.phone))
                if all(last in texts for texts in found):
                    return found
                await asyncio.sleep(0.05)


async def test_a_signed_webhook_replayed_after_a_restart_is_not_handled_again(tmp_path,
                                                                              tools_url):
    script = {"command_generator": ["start flow opening_hours"] * 6}
    deliveries = Deliveries("1f")
    async with platforms() as (_, api_url), FakeModelServer(script) as fake:
        project = served_project(tmp_path / "p", fake, tools_url,
                                 credentials=credentials(api_url), endpoints_extra=f"""
                                     tracker_store:
                                       type: sql
                                       url: sqlite+aiosqlite:///{tmp_path / 'tracker.db'}
                                     """)
        async with served(project, env=ENV) as (_, client):
            await deliveries.send(client)
            await deliveries.recorded(client, "hours?")
        async with served(project, env=ENV) as (_, client):  # restarted
            await deliveries.send(client)  # the replay
            await deliveries.send(client, "thanks", number=1)
            slack, twilio = await deliveries.recorded(client, "thanks")
    assert slack == ["hours?", "thanks"]
    assert twilio == ["hours?", "thanks"]


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.skipif(not (POSTGRES and REDIS), reason="needs SUBAGENTS_TEST_POSTGRES_URL and "
                    "SUBAGENTS_TEST_REDIS_URL")
async def test_a_delivery_one_worker_handled_is_not_handled_by_another(tmp_path, tools_url):
    import uuid

    script = {"command_generator": ["start flow opening_hours"] * 6}
    deliveries = Deliveries(uuid.uuid4().hex[:8])  # the stores outlive the test
    async with platforms() as (_, api_url), FakeModelServer(script) as fake:
        project = served_project(tmp_path / "p", fake, tools_url,
                                 credentials=credentials(api_url), endpoints_extra=f"""
                                     tracker_store: {{type: sql, url: "{POSTGRES}"}}
                                     lock_store: {{type: redis, url: "{REDIS}"}}
                                     """)
        async with served(project, env=ENV) as (_, first), \
                served(project, env=ENV) as (_, second):
            await deliveries.send(first)
            await deliveries.recorded(first, "hours?")
            await deliveries.send(second)  # the replay, at the other worker
            await deliveries.send(second, "thanks", number=1)
            slack, twilio = await deliveries.recorded(second, "thanks")
    assert slack == ["hours?", "thanks"]
    assert twilio == ["hours?", "thanks"]
