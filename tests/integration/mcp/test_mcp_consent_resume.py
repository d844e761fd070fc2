"""A finished sign-in resumes the conversation by itself over a channel that can push.

The user talks to the assistant over Socket.IO (a real python-socketio client). Their first
question gets a sign-in link; the test follows it like a browser; the agent's answer then
arrives on the socket without any further message from the user, and the tracker holds the
call and the answer once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from subagents.channels.socketio import SocketIOInput
from subagents.cli.mcp_login import login
from subagents.server.app import create_app
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for
from tests.integration.channels.test_socketio_channel import Widget
from tests.integration.mcp.test_mcp_consent import (
    Browser,
    calendar_turns,
    consent_link,
    write_project,
)
from tests.servers.consent_standin import CALLS, consent_standin

pytest.importorskip("cryptography")


@contextlib.asynccontextmanager
async def served_socket(tmp_path: Path, script: dict[str, list[Any]],
                        monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Any, ...]]:
    """The stand-in, an operator login, and the assistant behind serve with Socket.IO."""
    from cryptography.fernet import Fernet
    from subagents.config.project import load_project

    monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("CONSENT_PUBLIC_URL", "http://127.0.0.1:9")  # set below, once known
    browser = Browser()
    async with consent_standin() as (auth, _, mcp_url):
        root = write_project(tmp_path / "assistant", mcp_url)
        config = load_project(root).endpoints.mcp_server("calendar")
        assert config is not None

        async def operator(url: str) -> None:
            await browser.open(url, "operator")

        await login(config, root, open_url=operator)
        store = SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path / 'tracker.db'}")
        channel = SocketIOInput(session_persistence=True)
        async with FakeModelServer(script) as fake, \
                assistant_for(root, fake, tracker_store=store) as assistant, \
                serve_app(create_app(assistant, channels=[channel])) as base:
            monkeypatch.setenv("CONSENT_PUBLIC_URL", base)
            widget = Widget()
            await widget.connect(base)
            try:
                yield auth, fake, assistant, browser, widget, channel
            finally:
                await widget.client.disconnect()
                await browser.http.aclose()


def texts(received: list[tuple[str, Any, float]]) -> list[str]:
    return [str(data.get("text", "")) for event, data, _ in received if event == "bot_uttered"]


async def test_the_answer_arrives_on_the_socket_once_the_browser_signs_in(
        tmp_path, monkeypatch):
    script = {"command_generator": ["start flow calendar_flow"],
              "calendar_agent": [{"tool_calls": [{"id": "c1", "name": "my_events",
                                                  "arguments": {}}]},
                                 *calendar_turns("alice")[1:]]}
    async with served_socket(tmp_path, script, monkeypatch) as (
            auth, fake, assistant, browser, widget, channel):
        with anyio.fail_after(60):
            await widget.say("what is on my calendar?", metadata={"user_id": "alice"})
            link = consent_link(texts([await widget.next()]), auth)
            page = await browser.open(link, "alice")
            answer = await widget.next()  # no message from the user in between
            await channel.turns.drain()
            chat = f"socketio:{widget.session_id}"
            # the resumed turn sends its answer before it is saved: its lock is free once saved
            async with assistant.lock_store.lock(chat):
                pass
            events = await assistant.tracker(chat)
            # a late second resume (e.g. another worker's) finds nothing parked: no double run
            again = await assistant.resume_parked_call(f"{chat}:c1")
            after = await assistant.tracker(chat)
        fake.assert_done()
    assert "the answer is on its way" in page.text
    assert answer[0] == "bot_uttered"
    assert answer[1]["text"] == "alice, you see the dentist on Monday."
    assert CALLS == ["alice"]
    assert [e["event"] for e in events].count("user") == 1
    bots = [e.get("text") for e in events if e.get("event") == "bot"]
    assert bots.count("alice, you see the dentist on Monday.") == 1
    assert [e.get("event") for e in events].count("mcp_tool_executed") == 1
    assert again == []
    assert after == events
