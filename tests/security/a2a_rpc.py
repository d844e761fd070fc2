"""JSON-RPC calls of the A2A protocol (1.0), as a caller of ``serve --a2a`` sends them."""

from __future__ import annotations

import uuid
from typing import Any

import httpx2

AGENT = "/a2a/weather_agent/"


def message(text: str, *, context_id: str | None = None,
            task_id: str | None = None) -> dict[str, Any]:
    """A user message with one text part."""
    found: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                             "parts": [{"text": text}]}
    if context_id:
        found["contextId"] = context_id
    if task_id:
        found["taskId"] = task_id
    return found


async def rpc(client: httpx2.AsyncClient, method: str, params: dict[str, Any], *,
              token: str | None = None, **kwargs: Any) -> httpx2.Response:
    """One JSON-RPC request; the response as it came."""
    headers = {"A2A-Version": "1.0", **kwargs.pop("headers", {})}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return await client.post(AGENT, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                          "params": params}, headers=headers, **kwargs)


async def call(client: httpx2.AsyncClient, method: str, params: dict[str, Any], *,
               token: str | None = None) -> dict[str, Any]:
    """One JSON-RPC request; its ``result`` or ``error`` object (HTTP 200 expected)."""
    reply = await rpc(client, method, params, token=token)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    return dict(body.get("result") or {"error": body.get("error")})


async def send(client: httpx2.AsyncClient, text: str, *, token: str | None = None,
               **ids: str) -> dict[str, Any]:
    """``SendMessage``: the task (or the error)."""
    result = await call(client, "SendMessage", {"message": message(text, **ids)}, token=token)
    return dict(result.get("task") or result)
