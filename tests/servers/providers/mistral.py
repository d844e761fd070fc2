"""Mistral's chat completions: ``POST /v1/chat/completions``, OpenAI-shaped with Mistral's ways.

Plain reply: ``choices[0].message`` with ``content`` (an empty string beside tool calls) and
``tool_calls`` (``id``, ``type`` ``function``, ``function.name``/``arguments`` JSON text,
``index``), ``finish_reason`` ``stop`` or ``tool_calls``, ``usage``. Stream: ``data:`` chunks,
the first with ``role``, text deltas, each tool call whole in one delta (Mistral does not split
the arguments), the last chunk carrying ``finish_reason`` and ``usage`` together, then
``data: [DONE]``. Errors: 401 and 429 as ``{"message", "request_id"}``, others as
``{"object": "error", "message", "type", "param", "code"}``; a 429 carries ``retry-after``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from starlette.responses import JSONResponse, Response

from ._base import ScriptedError, ScriptedReply, WireRequest, WireServer, sse


class MistralServer(WireServer):
    """Stand-in for api.mistral.ai; point LiteLLM's ``mistral/`` models at it with
    ``api_base=server.base_url + "/v1"``."""

    def classify(self, request: WireRequest) -> bool | None:
        if request.method != "POST" or request.path != "/v1/chat/completions":
            return None
        return bool(isinstance(request.body, dict) and request.body.get("stream"))

    @staticmethod
    def tool_names(request: WireRequest) -> list[str]:
        """Names of the tools a request offered."""
        return [t["function"]["name"] for t in request.body.get("tools") or []]

    def _usage(self, request: WireRequest) -> dict[str, int]:
        prompt, completion = request.usage
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def _calls(self, reply: ScriptedReply) -> list[dict[str, Any]]:
        return [{"id": c.id, "type": "function", "index": i,
                 "function": {"name": c.name, "arguments": c.arguments_json}}
                for i, c in enumerate(reply.calls)]

    def _head(self, request: WireRequest, kind: str) -> dict[str, Any]:
        return {"id": f"cmpl-{len(self.requests):04d}", "object": kind,
                "created": int(time.time()), "model": request.body.get("model")}

    def reply_body(self, reply: ScriptedReply, request: WireRequest) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.calls:
            message["tool_calls"] = self._calls(reply)
        return {**self._head(request, "chat.completion"), "choices": [
            {"index": 0, "message": message,
             "finish_reason": "tool_calls" if reply.calls else "stop"}],
            "usage": self._usage(request)}

    def reply_stream(self, reply: ScriptedReply, request: WireRequest) -> Iterator[bytes]:
        head = self._head(request, "chat.completion.chunk")
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in self.pieces(reply.text)]
        if reply.calls:
            deltas.append({"tool_calls": self._calls(reply)})
        for delta in deltas:
            yield sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        yield sse({**head, "choices": [{"index": 0, "delta": {"content": ""},
                                        "finish_reason": "tool_calls" if reply.calls else "stop"}],
                   "usage": self._usage(request)})
        yield sse("[DONE]")

    def malformed_stream(self, request: WireRequest) -> Iterator[bytes]:
        head = self._head(request, "chat.completion.chunk")
        yield sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                               "content": "Hel"}}]})
        yield b'data: {"id": "cmpl", "choices": [{"index": 0, "del\n\n'

    def error_response(self, error: ScriptedError, request: WireRequest) -> Response:
        headers = {} if error.retry_after is None else {"retry-after": str(error.retry_after)}
        body: dict[str, Any]
        if error.status in (401, 429):
            body = {"message": error.message, "request_id": f"req-{len(self.requests):04d}"}
        else:
            body = {"object": "error", "message": error.message,
                    "type": "invalid_request_error", "param": None, "code": None}
        return JSONResponse(body, error.status, headers=headers)
