"""Local stand-ins for the messaging platforms' APIs: they record every call we make and answer
as the platform documents it (served on 127.0.0.1 by the tests)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Call:
    """One recorded API call: method name (last path segment), body fields, headers."""

    path: str
    method: str
    fields: dict[str, Any]
    headers: dict[str, str]

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class PlatformStandIn:
    """Records calls; ``answer(call)`` builds the platform's reply."""

    answer: Callable[[Call], Response]
    calls: list[Call] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        async def record(request: Request) -> Response:
            raw = await request.body()
            kind = request.headers.get("content-type", "")
            if kind.startswith("application/json"):
                fields = json.loads(raw or b"{}")
            elif kind.startswith("multipart/form-data"):
                form = await request.form()
                fields = {k: v for k, v in form.items() if isinstance(v, str)}
            else:
                fields = {k: v[0] if len(v) == 1 else v
                          for k, v in parse_qs(raw.decode()).items()}
            call = Call(request.url.path, request.method, fields, dict(request.headers))
            self.calls.append(call)
            self._changed.set()
            return self.answer(call)

        return Starlette(routes=[Route("/{path:path}", record, methods=["GET", "POST"])])

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    async def wait_for(self, name: str, count: int) -> list[Call]:
        """Wait until ``count`` calls of ``name`` arrived (bound it with anyio.fail_after)."""
        while len(self.named(name)) < count:
            self._changed.clear()
            await self._changed.wait()
        return self.named(name)


def slack_api(call: Call) -> Response:
    return JSONResponse({"ok": True, "channel": call.fields.get("channel"),
                         "ts": f"{time.time():.6f}", "message": {"text": call.fields.get("text")}})


def telegram_api(call: Call) -> Response:
    if call.name == "getMe":
        result: Any = {"id": 4242, "is_bot": True, "first_name": "Test Bot",
                       "username": "test_bot", "can_join_groups": True,
                       "can_read_all_group_messages": False, "supports_inline_queries": False}
    elif call.name == "sendMessage":
        result = {"message_id": len(call.fields) + int(time.time()), "date": int(time.time()),
                  "chat": {"id": int(call.fields["chat_id"]), "type": "private"},
                  "text": call.fields.get("text")}
    else:
        result = True
    return JSONResponse({"ok": True, "result": result})


def twilio_api(call: Call) -> Response:
    return JSONResponse({
        "sid": f"SM{len(call.path):032d}", "account_sid": call.path.split("/")[3],
        "from": call.fields.get("From"), "to": call.fields.get("To"),
        "body": call.fields.get("Body"), "status": "queued", "num_segments": "1",
        "direction": "outbound-api", "api_version": "2010-04-01", "uri": call.path},
        status_code=201)


@contextlib.asynccontextmanager
async def channel_under_test(root: Path, tools_url: str, answer: Any, script: dict[str, Any],
                             make_channel: Callable[[str], Any]) -> AsyncIterator[Any]:
    """The platform stand-in (answering with ``answer``), the fake model playing ``script``, an
    assistant, and ``make_channel(api_url)`` mounted on a served app.

    Yields:
        ``(assistant, stand_in, client, channel)``, ``client`` talking to the served app.
    """
    import httpx2
    from subagents.server.app import create_app
    from subagents.testing import FakeModelServer
    from subagents.testing.mcp_http import serve_app

    from tests.dialogue_harness import assistant_for, write_project

    api = PlatformStandIn(answer)
    async with contextlib.AsyncExitStack() as stack:
        api_url = await stack.enter_async_context(serve_app(api.app()))
        fake = await stack.enter_async_context(FakeModelServer(script))
        assistant = await stack.enter_async_context(
            assistant_for(write_project(root / "assistant", tools_url), fake))
        channel = make_channel(api_url)
        base = await stack.enter_async_context(
            serve_app(create_app(assistant, channels=[channel])))
        client = await stack.enter_async_context(httpx2.AsyncClient(base_url=base, timeout=30))
        yield assistant, api, client, channel
