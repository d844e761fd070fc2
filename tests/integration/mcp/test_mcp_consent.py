"""User-level OAuth consent, driven through ``subagents serve`` over HTTP.

A calendar MCP server behind a local OAuth stand-in knows its users by their tokens. Each end
user of the assistant authorizes it themselves: the first call gets a sign-in link in the reply,
the test follows it like a browser (authorize, then the redirect to our callback), and the next
message gets the call's result. Tokens are stored per user, encrypted, refreshed after a 401,
and never reach the model, the tracker or the logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import sqlite3
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
import pytest
from structlog.testing import capture_logs
from subagents.cli.mcp_login import login
from subagents.server.app import create_app
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for
from tests.servers.consent_standin import CALLS, UserAuthServer, consent_standin, with_account

pytest.importorskip("cryptography")

TOKEN = "api-t0ken"
LINK = re.compile(r"https?://\S+")

FILES = {
    "config.yml": """
        assistant_id: consent_test
        pipeline:
          - name: CompactLLMCommandGenerator
            llm: {model_group: llm}
        """,
    "data/flows.yml": """
        flows:
          calendar_flow:
            description: look at the user's calendar
            steps:
              - call: calendar_agent
        """,
    "data/domain.yml": """
        responses:
          utter_placeholder: [{text: "ok"}]
        """,
    "sub_agents/calendar/config.yml": """
        agent: {name: calendar_agent, description: Reads the user's calendar.}
        configuration: {CONFIGURATION}
        connections:
          mcp_servers: [{name: calendar}]
        """,
}


def write_project(root: Path, mcp_url: str,
                  configuration: str = "{include_date_time: false}", oauth: str = "") -> Path:
    files = dict(FILES)
    files["sub_agents/calendar/config.yml"] = files["sub_agents/calendar/config.yml"].replace(
        "{CONFIGURATION}", configuration)
    files["endpoints.yml"] = f"""
        model_groups:
          - id: llm
            models: [{{provider: openai, model: gpt-test}}]
        mcp_servers:
          - name: calendar
            type: http
            url: {mcp_url}
            session: {{per_user: metadata.user_id}}
            oauth:
              grant: authorization_code
              per_user: true
              public_url: ${{CONSENT_PUBLIC_URL}}
              {oauth}
        """
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def calendar_turns(*users: str) -> list[Any]:
    """The agent's script for one consent round trip per user: call, then answer."""
    script: list[Any] = []
    for user in users:
        script += [{"tool_calls": [{"my_events": {}}]},
                   {"text": f"{user}, you see the dentist on Monday.",
                    "tool_calls": [{"task_completed": {}}],
                    "expect": {"messages_contain": [f"events of {user}: dentist on Monday"]}}]
    return script


class Browser:
    """Follows links the way the user's browser would (no API token)."""

    def __init__(self) -> None:
        self.http = httpx2.AsyncClient(follow_redirects=True, timeout=30)

    async def open(self, link: str, account: str, **extra: str) -> httpx2.Response:
        return await self.http.get(with_account(link, account, **extra))


@contextlib.asynccontextmanager
async def served(tmp_path: Path, script: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch,
                 clients: dict[str, list[str]] | None = None,
                 **project: str) -> AsyncIterator[tuple[Any, ...]]:
    """The stand-in (with ``clients`` registered by the operator), an operator login for
    listing tools, and the assistant behind serve."""
    from cryptography.fernet import Fernet

    monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("CONSENT_PUBLIC_URL", "http://127.0.0.1:9")  # set below, once known
    browser = Browser()
    async with consent_standin() as (auth, _, mcp_url):
        auth.clients.update(clients or {})
        root = write_project(tmp_path / "assistant", mcp_url, **project)
        # the operator signs in once so that the server's tools can be listed at start-up
        from subagents.config.project import load_project

        config = load_project(root).endpoints.mcp_server("calendar")
        assert config is not None

        async def operator(url: str) -> None:
            await browser.open(url, "operator")

        await login(config, root, open_url=operator)
        db = tmp_path / "tracker.db"
        store = SQLTrackerStore(f"sqlite+aiosqlite:///{db}")
        async with FakeModelServer(script) as fake, \
                assistant_for(root, fake, tracker_store=store) as assistant, \
                serve_app(create_app(assistant, token=TOKEN)) as base:
            monkeypatch.setenv("CONSENT_PUBLIC_URL", base)
            api = httpx2.AsyncClient(base_url=base, timeout=60,
                                     headers={"Authorization": f"Bearer {TOKEN}"})
            try:
                api.assistant = assistant  # type: ignore[attr-defined]
                yield auth, fake, api, browser, db
            finally:
                await api.aclose()
                await browser.http.aclose()


async def say(api: httpx2.AsyncClient, sender: str, user: str, text: str) -> list[str]:
    response = await api.post("/webhooks/rest/webhook", json={
        "sender": sender, "message": text, "metadata": {"user_id": user}})
    assert response.status_code == 200, response.text
    return [m.get("text", "") for m in response.json()]


def consent_link(texts: list[str], auth: UserAuthServer) -> str:
    links = [m for text in texts for m in LINK.findall(text)]
    assert len(links) == 1, texts
    assert links[0].startswith(f"{auth.base}/authorize?")
    return links[0]


def stored_rows(db: Path) -> list[tuple[str, str, str, str]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return list(conn.execute("SELECT user_key, server, kind, data FROM subagents_mcp_oauth"))


async def test_each_user_authorizes_in_the_chat_and_the_parked_call_runs_after_it(
        tmp_path, monkeypatch):
    script = {"command_generator": ["start flow calendar_flow", "",
                                    "start flow calendar_flow", ""],
              "calendar_agent": calendar_turns("alice", "bob")}
    with capture_logs() as logs:
        async with served(tmp_path, script, monkeypatch) as (auth, fake, api, browser, db):
            with anyio.fail_after(60):
                first = await say(api, "alice-chat", "alice", "what is on my calendar?")
                link = consent_link(first, auth)
                page = await browser.open(link, "alice")
                second = await say(api, "alice-chat", "alice", "done")
                # a second user gets their own consent, and never alice's token
                bob_first = await say(api, "bob-chat", "bob", "and my calendar?")
                bob_link = consent_link(bob_first, auth)
                await browser.open(bob_link, "bob")
                bob_second = await say(api, "bob-chat", "bob", "ok, signed in")
                # a used link is refused
                replayed = await browser.open(link, "mallory")
                tracker = (await api.get("/conversations/alice-chat/tracker")).text
            fake.assert_done()
    assert page.status_code == 200
    assert str(page.url).startswith(str(api.base_url).rstrip("/") + "/oauth/callback?")
    assert "You are signed in" in page.text
    assert second[0] == "alice, you see the dentist on Monday."
    assert bob_link != link
    assert bob_second[0] == "bob, you see the dentist on Monday."
    assert replayed.status_code == 400
    assert CALLS == ["alice", "bob"]  # each call made with its own user's token
    # stored per user, encrypted: no token in the clear
    rows = stored_rows(db)
    assert {(user, kind) for user, server, kind, _ in rows} == {
        ("alice", "tokens"), ("bob", "tokens"), ("", "client"), ("", "metadata")}
    secrets = [*auth.access, *auth.refresh]
    assert len(secrets) == 6  # the operator's, alice's and bob's
    for _, _, _, data in rows:
        assert not any(secret in data for secret in secrets)
        assert "access_token" not in data
    # the link is not logged, and the agent's model reads it as "[sign-in link]"
    state = parse_qs(urlparse(link).query)["state"][0]
    assert state not in str(logs)
    agent_requests = [r for r in fake.requests if r.caller == "calendar_agent"]
    assert state not in str([r.body for r in agent_requests])
    assert "[sign-in link]" in str(agent_requests[1].body)
    # tokens are never shown to a model, recorded in the tracker or logged
    for secret in secrets:
        assert secret not in str([r.body for r in fake.requests])
        assert secret not in tracker
        assert secret not in str(logs)


def tool_errors(logs: list[dict[str, Any]]) -> list[str]:
    return [e["code"] for e in logs if e["event"] == "agent.tool.error"]


async def test_a_refused_token_is_refreshed_and_a_failed_refresh_asks_for_consent_again(
        tmp_path, monkeypatch):
    again = [{"tool_calls": [{"my_events": {}}]},
             {"text": "Still the dentist.", "tool_calls": [{"task_completed": {}}],
              "expect": {"messages_contain": ["events of alice: dentist on Monday"]}}]
    script = {"command_generator": ["start flow calendar_flow", "", "start flow calendar_flow",
                                    "start flow calendar_flow", ""],
              "calendar_agent": [*calendar_turns("alice"), *again,
                                 again[0], {**again[1], "text": "Signed in again."}]}
    async with served(tmp_path, script, monkeypatch) as (auth, fake, api, browser, _):
        with anyio.fail_after(60):
            await browser.open(consent_link(
                await say(api, "chat", "alice", "my calendar?"), auth), "alice")
            await say(api, "chat", "alice", "done")
            # the server stops accepting the access token before it expires: refreshed
            auth.revoke_access()
            grants = len(auth.grants)
            refreshed = await say(api, "chat", "alice", "my calendar again?")
            refresh_grants = auth.grants[grants:]
            # the refresh token is revoked as well: the user is asked again
            auth.revoke_access()
            auth.revoke_refresh()
            asked = await say(api, "chat", "alice", "and now?")
            link = consent_link(asked, auth)
            await browser.open(link, "alice")
            resumed = await say(api, "chat", "alice", "signed in")
        fake.assert_done()
    assert refreshed[0] == "Still the dentist."
    assert refresh_grants == ["refresh_token"]
    assert auth.grants[-2:] == ["refresh_token", "authorization_code"]
    assert resumed[0] == "Signed in again."
    assert CALLS == ["alice", "alice", "alice"]


async def test_a_call_that_needs_more_scope_asks_the_user_to_sign_in_again_with_it(
        tmp_path, monkeypatch):
    add = [{"tool_calls": [{"add_event": {"title": "gym"}}]},
           {"text": "Added.", "tool_calls": [{"task_completed": {}}],
            "expect": {"messages_contain": ["added 'gym' for alice"]}}]
    script = {"command_generator": ["start flow calendar_flow", "", "start flow calendar_flow",
                                    ""],
              "calendar_agent": [*calendar_turns("alice"), *add]}
    async with served(tmp_path, script, monkeypatch) as (auth, fake, api, browser, _):
        with anyio.fail_after(60):
            await browser.open(consent_link(
                await say(api, "chat", "alice", "my calendar?"), auth), "alice")
            await say(api, "chat", "alice", "done")
            # adding an event needs calendar.write, which alice's first sign-in did not grant
            asked = await say(api, "chat", "alice", "add the gym on Friday")
            link = consent_link(asked, auth)
            page = await browser.open(link, "alice")
            added = await say(api, "chat", "alice", "signed in")
        fake.assert_done()
    assert "calendar needs more access before I can continue (calendar.write)" in asked[0]
    assert "calendar.write" in parse_qs(urlparse(link).query)["scope"][0].split()
    assert page.status_code == 200
    assert added[0] == "Added."
    assert CALLS == ["alice", "alice"]  # the refused call never ran; it ran once after


async def test_a_denied_consent_reaches_the_agent_as_a_tool_error(tmp_path, monkeypatch):
    script = {"command_generator": ["start flow calendar_flow", ""],
              "calendar_agent": [
                  {"tool_calls": [{"my_events": {}}]},
                  {"text": "Without your permission I cannot read your calendar.",
                   "tool_calls": [{"task_completed": {}}],
                   "expect": {"messages_contain": ["did not authorize MCP server 'calendar'"]}}]}
    with capture_logs() as logs:
        async with served(tmp_path, script, monkeypatch) as (auth, fake, api, browser, db):
            with anyio.fail_after(60):
                link = consent_link(await say(api, "chat", "alice", "my calendar?"), auth)
                page = await browser.open(link, "alice", deny="1")
                after = await say(api, "chat", "alice", "I said no")
            fake.assert_done()
    assert page.status_code == 200
    assert "Access not granted" in page.text
    assert after[0] == "Without your permission I cannot read your calendar."
    assert tool_errors(logs) == ["mcp.consent_denied"]
    assert CALLS == []
    assert [(user, kind) for user, _, kind, _ in stored_rows(db)] == [("", "client")]


async def test_the_callback_refuses_an_unknown_state_without_needing_the_api_token(
        tmp_path, monkeypatch):
    async with served(tmp_path, {}, monkeypatch) as (_, _, api, browser, _):
        response = await browser.http.get(f"{str(api.base_url).rstrip('/')}/oauth/callback",
                                          params={"state": "forged", "code": "stolen"})
        without_state = await browser.http.get(f"{str(api.base_url).rstrip('/')}/oauth/callback")
    assert response.status_code == 400
    assert without_state.status_code == 400
    assert response.headers["cache-control"] == "no-store"
    assert "stolen" not in response.text


async def test_the_shared_session_only_lists_tools_and_never_calls_for_a_user(
        tmp_path, monkeypatch):
    async with served(tmp_path, {}, monkeypatch) as (auth, _, api, _, _):
        from subagents.exceptions import ToolInvocationError

        pool = api.assistant.pool  # type: ignore[attr-defined]
        shared = pool.connection("calendar")
        with pytest.raises(ToolInvocationError) as call:
            await shared.call_tool("my_events", {}, timeout=5)
        with pytest.raises(ToolInvocationError) as step:
            await shared.call_tool_result("my_events", {}, timeout=5)
    assert call.value.code == step.value.code == "mcp.user_session_required"
    assert CALLS == []
    assert auth.grants == ["authorization_code"]  # the operator's sign-in only


async def test_a_server_that_lists_only_for_signed_in_accounts_needs_an_operator_login(
        tmp_path, monkeypatch):
    from cryptography.fernet import Fernet
    from subagents.config.project import load_project
    from subagents.exceptions import MCPConnectionError
    from subagents.mcp.connection import MCPServerConnection

    monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("CONSENT_PUBLIC_URL", "http://127.0.0.1:9")
    async with consent_standin() as (_, _, mcp_url):
        root = write_project(tmp_path / "assistant", mcp_url)
        config = load_project(root).endpoints.mcp_server("calendar")
        assert config is not None
        conn = MCPServerConnection(config, root=root)
        with anyio.fail_after(30), pytest.raises(MCPConnectionError) as failed:
            await conn.start(attempts=1)
        await conn.close()
    assert failed.value.code == "mcp.login_required"
    assert "subagents mcp login calendar" in str(failed.value)


async def test_a_message_before_the_sign_in_keeps_the_link_open(tmp_path, monkeypatch):
    script = {"command_generator": ["start flow calendar_flow", "", ""],
              "calendar_agent": [
                  {"tool_calls": [{"my_events": {}}]},
                  {"tool_calls": [{"answer_server_request": {"action": "accept"}}],
                   "expect": {"tools_include": ["answer_server_request"]}},
                  {"text": "Please open the link first, then tell me.",
                   "expect": {"messages_contain": ["has not finished signing in"]}},
                  *calendar_turns("alice")[1:]]}
    with capture_logs() as logs:
        async with served(tmp_path, script, monkeypatch) as (auth, fake, api, browser, _):
            with anyio.fail_after(60):
                link = consent_link(await say(api, "chat", "alice", "my calendar?"), auth)
                early = await say(api, "chat", "alice", "done!")
                page = await browser.open(link, "alice")
                late = await say(api, "chat", "alice", "now really done")
            fake.assert_done()
    assert early == ["Please open the link first, then tell me."]
    assert "You are signed in" in page.text
    assert late[0] == "alice, you see the dentist on Monday."
    assert tool_errors(logs) == ["mcp.consent_pending"]
    assert CALLS == ["alice"]


async def test_an_expired_token_is_refreshed_before_it_is_sent_by_a_later_session(
        tmp_path, monkeypatch):
    from subagents.mcp.oauth.token_store import SQLTokenStore

    script = {"command_generator": ["start flow calendar_flow", "", "start flow calendar_flow"],
              "calendar_agent": [*calendar_turns("alice"),
                                 {"tool_calls": [{"my_events": {}}]},
                                 {"text": "Refreshed.", "tool_calls": [{"task_completed": {}}],
                                  "expect": {"messages_contain": ["events of alice"]}}]}
    async with served(tmp_path, script, monkeypatch) as (auth, fake, api, browser, db):
        with anyio.fail_after(60):
            link = consent_link(await say(api, "chat", "alice", "my calendar?"), auth)
            await browser.open(link, "alice")
            await say(api, "chat", "alice", "done")
            # her session is closed (as after an idle timeout or a restart) and the access
            # token's lifetime is over
            await api.assistant.pool.close()  # type: ignore[attr-defined]
            store = SQLTokenStore(f"sqlite+aiosqlite:///{db}")
            saved = await store.get("alice", "calendar", "tokens")
            assert saved is not None
            await store.put("alice", "calendar", "tokens", {**saved, "expires_at": 1.0})
            await store.close()
            grants = len(auth.grants)
            later = await say(api, "chat", "alice", "my calendar again?")
        fake.assert_done()
    assert later[0] == "Refreshed."
    assert auth.grants[grants:] == ["refresh_token"]
    assert CALLS == ["alice", "alice"]


async def test_an_expired_sign_in_link_reaches_the_agent_as_a_tool_error(tmp_path, monkeypatch):
    script = {"command_generator": ["start flow calendar_flow", ""],
              "calendar_agent": [
                  {"tool_calls": [{"id": "c1", "name": "my_events", "arguments": {}}]},
                  {"text": "The link expired; shall I send a new one?",
                   "expect": {"messages_contain": ["expired before the user signed in"]}}]}
    config = "{include_date_time: false, elicitation_timeout: 2}"
    async with served(tmp_path, script, monkeypatch, configuration=config) as (
            auth, fake, api, browser, _):
        with anyio.fail_after(60):
            link = consent_link(await say(api, "chat", "alice", "my calendar?"), auth)
            held = api.assistant.pool.elicitations.held_call("chat:c1")
            assert held is not None
            await asyncio.wait({held})  # the link's time runs out (elicitation_timeout)
            page = await browser.open(link, "alice")
            after = await say(api, "chat", "alice", "done")
        fake.assert_done()
    assert page.status_code == 400
    assert after[0] == "The link expired; shall I send a new one?"
    assert CALLS == []


async def test_a_configured_client_id_is_used_instead_of_registering(tmp_path, monkeypatch):
    script = {"command_generator": ["start flow calendar_flow", ""],
              "calendar_agent": calendar_turns("alice")}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # registered by the operator: the operator login's callback, and (below, once serve's
    # address is known) the users' callback
    login_callback = f"http://127.0.0.1:{port}/callback"
    oauth = f"client_id: assistant-app\n              redirect_port: {port}"
    async with served(tmp_path, script, monkeypatch, oauth=oauth,
                      clients={"assistant-app": [login_callback]}) as (
            auth, fake, api, browser, db):
        base = str(api.base_url).rstrip("/")
        auth.clients["assistant-app"].append(f"{base}/oauth/callback")
        registered = len(auth.clients)
        with anyio.fail_after(60):
            link = consent_link(await say(api, "chat", "alice", "my calendar?"), auth)
            await browser.open(link, "alice")
            done = await say(api, "chat", "alice", "done")
        fake.assert_done()
    assert parse_qs(urlparse(link).query)["client_id"] == ["assistant-app"]
    assert len(auth.clients) == registered  # no registration for the users
    assert done[0] == "alice, you see the dentist on Monday."
    assert ("", "client") not in {(user, kind) for user, _, kind, _ in stored_rows(db)}


async def test_a_users_consent_serves_them_on_another_worker_sharing_the_database(
        tmp_path, monkeypatch):
    from tests.dialogue_harness import Conversation

    script = {"command_generator": ["start flow calendar_flow", "", "start flow calendar_flow"],
              "calendar_agent": [*calendar_turns("alice"),
                                 {"tool_calls": [{"my_events": {}}]},
                                 {"text": "Worker two read it.",
                                  "tool_calls": [{"task_completed": {}}],
                                  "expect": {"messages_contain": ["events of alice"]}}]}
    async with served(tmp_path, script, monkeypatch) as (auth, fake, api, browser, db):
        with anyio.fail_after(60):
            link = consent_link(await say(api, "chat", "alice", "my calendar?"), auth)
            await browser.open(link, "alice")
            await say(api, "chat", "alice", "done")
            grants = len(auth.grants)
            other = SQLTrackerStore(f"sqlite+aiosqlite:///{db}")
            async with assistant_for(tmp_path / "assistant", fake, tracker_store=other) as two:
                texts, _ = await Conversation(two, "chat-2").say("my calendar?",
                                                                 user_id="alice")
        fake.assert_done()
    assert texts[0] == "Worker two read it."
    assert auth.grants[grants:] == []  # neither a new consent nor a refresh
    assert CALLS == ["alice", "alice"]
