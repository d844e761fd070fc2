"""Custom actions on an action server (``action_endpoint.url``) over real HTTP: the webhook
call, its events and messages applied, one client for every call, and replies that are too
large, not JSON or not an object failing the action - not the conversation."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from subagents.dialogue.actions import MAX_ACTION_REPLY
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for, names, write_project


def lookup_reply(call: dict[str, Any]) -> bytes:
    sender = call["sender_id"]
    return json.dumps({
        "events": [{"event": "slot", "name": "lookup_result", "value": f"order {sender}"}],
        "responses": [{"text": "Looking it up..."}]}).encode()


@contextlib.asynccontextmanager
async def action_server(reply=lookup_reply) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    calls: list[dict[str, Any]] = []

    async def webhook(request: Request) -> Response:
        call = json.loads(await request.body())
        calls.append({"call": call, "client": request.client})
        return Response(reply(call), media_type="application/json")

    app = Starlette(routes=[Route("/webhook", webhook, methods=["POST"])])
    async with serve_app(app) as base:
        yield f"{base}/webhook", calls


def project_on(tmp_path, tools_url, url: str):
    root = write_project(tmp_path / "p", tools_url)
    endpoints = root / "endpoints.yml"
    endpoints.write_text(endpoints.read_text() + f"action_endpoint:\n  url: {url}\n",
                         encoding="utf-8")
    return root


async def test_an_action_server_runs_the_action_and_its_events_apply(tmp_path, tools_url):
    async with action_server() as (url, calls), FakeModelServer({}) as fake, \
            assistant_for(project_on(tmp_path, tools_url, url), fake) as assistant:
        with anyio.fail_after(30):
            first, events = await Conversation(assistant, "order-7").say("/custom_action_flow")
            await Conversation(assistant, "order-8").say("/custom_action_flow")
    assert first[:2] == ["Looking it up...", "Found order order-7."]
    assert "slot:lookup_result=order order-7" in names(events)
    assert [c["call"]["next_action"] for c in calls] == ["action_lookup", "action_lookup"]
    assert calls[0]["call"]["tracker"]["sender_id"] == "order-7"
    # one client for every call: the second call came over the same kept-alive connection
    assert calls[0]["client"] == calls[1]["client"]


@pytest.mark.parametrize("body", [
    b'{"events": [], "responses": [{"text": "' + b"x" * MAX_ACTION_REPLY + b'"}]}',
    b"<html>not json</html>",
    b'["a list"]',
], ids=["too-large", "not-json", "not-an-object"])
async def test_a_bad_reply_fails_the_action_and_the_conversation_goes_on(tmp_path, tools_url,
                                                                         body):
    async with action_server(lambda call: body) as (url, _), FakeModelServer({}) as fake, \
            assistant_for(project_on(tmp_path, tools_url, url), fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("/custom_action_flow")
    order = names(events)
    assert "flow_started:pattern_internal_error" in order
    assert not any(n.startswith("slot:lookup_result") for n in order)
    assert texts  # the user is told something went wrong
