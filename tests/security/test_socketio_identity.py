"""Issue 30, item 1: over Socket.IO a client reaches only the conversations of its own identity.

Session ids are issued by the server (or, with ``jwt_key``, bound to the token's ``sub``); a
socket never names a REST or Twilio conversation; the ``Host`` and ``Origin`` checks that guard
the REST API guard the Socket.IO endpoint too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import jwt
import pytest
from subagents.testing import FakeModelServer

from tests.integration.channels.test_socketio_channel import Widget
from tests.security.served import served, served_project, user_texts

socketio = pytest.importorskip("socketio")

PERSISTENT = """
    rest:
    socketio:
      user_message_evt: user_uttered
      bot_message_evt: bot_uttered
      session_persistence: true
    """
KEY = "s" * 40
HOURS = "start flow opening_hours"


async def _say_rest(client: Any, sender: str, text: str) -> None:
    reply = await client.post("/webhooks/rest/webhook", json={"sender": sender, "message": text})
    assert reply.status_code == 200, reply.text


async def _quiet(widget: Widget, seconds: float = 1.0) -> list[Any]:
    """What reached ``widget`` while another conversation took a whole turn (bounded)."""
    got = []
    with anyio.move_on_after(seconds):
        while True:
            got.append(await widget.received.get())
    return got


async def test_a_socket_cannot_name_a_rest_or_twilio_conversation(tmp_path, tools_url):
    async with FakeModelServer({"command_generator": [HOURS] * 3}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, credentials=PERSISTENT)
        async with served(project) as (server, client):
            await _say_rest(client, "alice", "hours?")
            attacker = Widget()
            try:
                for victim in ("alice", "+14155238886"):
                    given = await attacker.connect(server.url, session_id=victim)
                    assert given != victim
                    await attacker.say("I am the victim now")
                    await attacker.messages(1)
                    await attacker.client.disconnect()
                    attacker = Widget()
            finally:
                await attacker.client.disconnect()
            alice = await user_texts(client, "alice")
            twilio = await user_texts(client, "+14155238886")
    assert alice == ["hours?"]
    assert twilio == []


async def test_a_socket_cannot_join_another_sockets_chosen_session(tmp_path, tools_url):
    async with FakeModelServer({"command_generator": [HOURS] * 2}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, credentials=PERSISTENT)
        async with served(project) as (server, _):
            victim, attacker = Widget(), Widget()
            try:
                mine = await victim.connect(server.url, session_id="our-shared-room")
                theirs = await attacker.connect(server.url, session_id="our-shared-room")
                assert len(mine) == 32  # issued by the server, not what the client chose
                assert theirs != mine
                await victim.say("hours?")
                assert (await victim.next())[1] == {"text": "We are open 9 to 5."}
                # the attacker names the victim's session in a message of its own socket
                await attacker.client.emit("user_uttered", {"message": "hi",
                                                            "session_id": mine})
                leaked = await _quiet(attacker)
            finally:
                await victim.client.disconnect()
                await attacker.client.disconnect()
    assert leaked == []


async def test_with_a_jwt_key_a_session_belongs_to_the_tokens_subject(tmp_path, tools_url):
    credentials = PERSISTENT + "  jwt_key: ${SOCKET_JWT_KEY}\n"
    async with FakeModelServer({"command_generator": [HOURS] * 2}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, credentials=credentials)
        async with served(project, env={"SOCKET_JWT_KEY": KEY}) as (server, client):
            alice, bob = Widget(), Widget()
            try:
                session = await alice.connect(server.url, auth={
                    "token": jwt.encode({"sub": "alice"}, KEY, algorithm="HS256")})
                await alice.say("hours?")
                await alice.messages(2)
                # bob holds a valid token of his own and names alice's session
                await bob.connect(server.url, session_id=session, auth={
                    "token": jwt.encode({"sub": "bob"}, KEY, algorithm="HS256")})
                await bob.say("let me in")
                await bob.messages(2)
                leaked = await _quiet(alice)
                nameless = Widget()
                with pytest.raises(socketio.exceptions.ConnectionError):
                    await nameless.client.connect(server.url, transports=["websocket"],
                                                  wait_timeout=10, auth={
                        "token": jwt.encode({"role": "x"}, KEY, algorithm="HS256")})
            finally:
                await alice.client.disconnect()
                await bob.client.disconnect()
            alice_texts = await user_texts(client, f"socketio:alice:{session}")
    assert leaked == []
    assert alice_texts == ["hours?"]


async def test_the_host_and_origin_checks_guard_socketio(tmp_path, tools_url):
    async with FakeModelServer({}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, credentials=PERSISTENT)
        async with served(project) as (server, client):
            handshake = "/socket.io/?EIO=4&transport=polling"
            rebound = await client.get(handshake, headers={"host": "attacker.example"})
            foreign = await client.get(handshake, headers={"origin": "https://evil.example"})
            own = await client.get(handshake, headers={"origin": server.url})
            plain = await client.get(handshake)
    assert rebound.status_code == 400
    assert foreign.status_code in (400, 403)
    assert own.status_code == 200
    assert plain.status_code == 200


async def test_two_anonymous_sockets_keep_their_own_conversations(tmp_path, tools_url):
    """Without persistence each socket is its own conversation, named by the server."""
    credentials = "socketio:\n  session_persistence: false\n"
    async with FakeModelServer({"command_generator": [HOURS] * 2}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, credentials=credentials)
        async with served(project) as (server, _):
            one, two = Widget(), Widget()
            try:
                await one.connect(server.url, session_id="same")
                await two.connect(server.url, session_id="same")
                await one.say("hours?")
                await one.messages(2)
                await asyncio.sleep(0)
                leaked = await _quiet(two)
            finally:
                await one.client.disconnect()
                await two.client.disconnect()
    assert leaked == []
