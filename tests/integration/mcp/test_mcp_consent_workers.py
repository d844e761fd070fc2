"""A user's browser comes back from signing in to a worker that did not send the link.

Two ``subagents serve`` workers share PostgreSQL (trackers, tokens) and Redis (turn locks), as
behind a load balancer without sticky sessions. The link is sent by the worker the user talks
to; the browser's callback lands on the other one, which hands it over through Redis: the
sign-in completes, the parked call runs once, and the conversation gets its answer.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
import pytest
from subagents.cli.mcp_login import login
from subagents.testing import FakeModelServer

from tests.integration.mcp.test_mcp_consent import FILES, Browser, calendar_turns, consent_link
from tests.serve_process import ServeProcess, serve_process
from tests.servers.consent_standin import CALLS, consent_standin
from tests.shared_workers import MARKS, workers_project

pytest.importorskip("cryptography")

pytestmark = MARKS


def _project(root: Path, models: str, mcp_url: str, server: str) -> Path:
    return workers_project(root, "consent_workers", models, "calendar_agent", f"""
        - name: {server}
          type: http
          url: {mcp_url}
          session: {{per_user: metadata.user_id}}
          oauth:
            grant: authorization_code
            per_user: true
            public_url: ${{CONSENT_PUBLIC_URL}}
        """, {
        "data/flows.yml": FILES["data/flows.yml"],
        "data/domain.yml": FILES["data/domain.yml"],
        "sub_agents/calendar/config.yml": f"""
            agent: {{name: calendar_agent, description: Reads the user's calendar.}}
            configuration:
              include_date_time: false
              llm: {{model_group: agent_llm}}
            connections:
              mcp_servers: [{{name: {server}}}]
            """,
    })


async def _say(client: httpx2.AsyncClient, url: str, sender: str, user: str,
               text: str) -> list[str]:
    reply = await client.post(f"{url}/webhooks/rest/webhook", json={
        "sender": sender, "message": text, "metadata": {"user_id": user}})
    assert reply.status_code == 200, reply.text
    return [str(m.get("text", "")) for m in reply.json()]


@contextlib.asynccontextmanager
async def _workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: dict[str, Any],
                   *, socket: bool = False) -> AsyncIterator[tuple[Any, ...]]:
    """The stand-in, the fake model and two workers: ``talker`` sends the links, and the
    browser comes back to ``other``."""
    from cryptography.fernet import Fernet
    from subagents.config.project import load_project

    run = uuid.uuid4().hex[:8]  # the database outlives the test: a fresh server and user
    names = {"server": f"calendar_{run}", "user": f"alice-{run}", "sender": f"chat-{run}"}
    key = Fernet.generate_key().decode()
    monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", key)
    monkeypatch.setenv("CONSENT_PUBLIC_URL", "http://127.0.0.1:9")
    browser = Browser()
    async with consent_standin() as (auth, _, mcp_url), FakeModelServer(script) as fake:
        models = fake.base_url("x").rsplit("/x", 1)[0]
        root = _project(tmp_path / "assistant", models, mcp_url, names["server"])
        if socket:
            (root / "credentials.yml").write_text(
                "socketio:\n  session_persistence: true\n", encoding="utf-8")
        config = load_project(root).endpoints.mcp_server(names["server"])
        assert config is not None

        async def operator(url: str) -> None:
            await browser.open(url, "operator")

        await login(config, root, open_url=operator)  # lists the tools at start-up
        env = {"OPENAI_API_KEY": "unused-by-the-fake-model", "SUBAGENTS_OAUTH_TOKEN_KEY": key,
               "CONSENT_PUBLIC_URL": "http://127.0.0.1:9"}
        async with serve_process(root, env=env) as other, \
                serve_process(root, env={**env, "CONSENT_PUBLIC_URL": other.url}) as talker, \
                httpx2.AsyncClient(timeout=60) as client:
            try:
                yield auth, fake, browser, client, talker, other, names
            finally:
                await browser.http.aclose()
        fake.assert_done()


def _check_link(link: str, other: ServeProcess, page: httpx2.Response) -> None:
    redirect = parse_qs(urlparse(link).query)["redirect_uri"][0]
    assert redirect == f"{other.url}/oauth/callback"  # the browser comes back to the other
    assert str(page.url).startswith(f"{other.url}/oauth/callback?")
    assert page.status_code == 200, other.log()
    assert "You are signed in" in page.text


def _executed(tracker: dict[str, Any]) -> int:
    return sum(e.get("event") == "mcp_tool_executed" for e in tracker["events"])


async def test_a_callback_on_another_worker_completes_the_sign_in(tmp_path, monkeypatch):
    script = {"command_generator": ["start flow calendar_flow", ""],
              "calendar_agent": calendar_turns("alice")}
    async with _workers(tmp_path, monkeypatch, script) as (
            auth, _, browser, client, talker, other, names):
        user, sender = names["user"], names["sender"]
        with anyio.fail_after(120):
            link = consent_link(await _say(client, talker.url, sender, user,
                                           "what is on my calendar?"), auth)
            page = await browser.open(link, "alice")
            forged = await browser.http.get(f"{other.url}/oauth/callback",
                                            params={"state": "forged", "code": "x"})
            answer = await _say(client, talker.url, sender, user, "done")
            tracker = (await client.get(f"{other.url}/conversations/{sender}/tracker")).json()
        logs = talker.log() + other.log()
    _check_link(link, other, page)
    assert "send any message" in page.text  # REST: the next message carries the result
    assert forged.status_code == 400
    assert answer[0] == "alice, you see the dentist on Monday."
    assert CALLS == ["alice"]
    assert _executed(tracker) == 1
    assert parse_qs(urlparse(link).query)["state"][0] not in logs


async def test_over_socketio_the_answer_arrives_when_the_callback_reached_another_worker(
        tmp_path, monkeypatch):
    pytest.importorskip("socketio")
    from tests.integration.channels.test_socketio_channel import Widget

    script = {"command_generator": ["start flow calendar_flow"],
              "calendar_agent": calendar_turns("alice")}
    async with _workers(tmp_path, monkeypatch, script, socket=True) as (
            auth, _, browser, client, talker, other, names):
        widget = Widget()
        with anyio.fail_after(120):
            session = await widget.connect(talker.url)
            try:
                await widget.say("what is on my calendar?",
                                 metadata={"user_id": names["user"]})
                _, asked, _ = await widget.next()
                link = consent_link([str(asked.get("text"))], auth)
                page = await browser.open(link, "alice")
                _, answer, _ = await widget.next()  # no message from the user in between
            finally:
                await widget.client.disconnect()
            tracker = (await client.get(
                f"{other.url}/conversations/socketio:{session}/tracker")).json()
    _check_link(link, other, page)
    assert "on its way" in page.text
    assert answer["text"] == "alice, you see the dentist on Monday."
    assert CALLS == ["alice"]
    assert _executed(tracker) == 1
