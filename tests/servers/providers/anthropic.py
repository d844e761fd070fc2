"""Anthropic's Messages API: ``POST /v1/messages``, plain JSON or server-sent events.

Plain reply: a ``message`` object whose ``content`` holds ``text`` and ``tool_use`` blocks,
``stop_reason`` ``end_turn`` or ``tool_use``, ``usage`` ``input_tokens``/``output_tokens``.
Stream: ``message_start``, ``ping``, then per block ``content_block_start`` /
``content_block_delta`` (``text_delta``, or ``input_json_delta`` carrying the tool input JSON in
pieces) / ``content_block_stop``, then ``message_delta`` (stop reason, output tokens) and
``message_stop``; each event is ``event: <type>`` plus a ``data:`` JSON line with the same
``type``. Errors: ``{"type": "error", "error": {"type": ..., "message": ...}}`` with a
``request-id`` header; a 429 carries ``retry-after`` (seconds).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from starlette.responses import JSONResponse, Response

from ._base import ScriptedError, ScriptedReply, WireRequest, WireServer, sse

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


class AnthropicServer(WireServer):
    """Stand-in for api.anthropic.com; point LiteLLM at it with ``api_base=server.base_url``."""

    def classify(self, request: WireRequest) -> bool | None:
        if request.method != "POST" or request.path != "/v1/messages":
            return None
        return bool(isinstance(request.body, dict) and request.body.get("stream"))

    @staticmethod
    def tool_names(request: WireRequest) -> list[str]:
        """Names of the tools a request offered."""
        return [t["name"] for t in request.body.get("tools") or []]

    def _message_id(self) -> str:
        return f"msg_{len(self.requests):04d}"

    def reply_body(self, reply: ScriptedReply, request: WireRequest) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                    for c in reply.calls]
        prompt, completion = request.usage
        return {"id": self._message_id(), "type": "message", "role": "assistant",
                "model": request.body.get("model"), "content": content,
                "stop_reason": "tool_use" if reply.calls else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": completion}}

    def reply_stream(self, reply: ScriptedReply, request: WireRequest) -> Iterator[bytes]:
        prompt, completion = request.usage
        yield self._event({"type": "message_start", "message": {
            "id": self._message_id(), "type": "message", "role": "assistant",
            "model": request.body.get("model"), "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": 1}}})
        yield self._event({"type": "ping"})
        index = 0
        if reply.text:
            yield from self._block(index, {"type": "text", "text": ""},
                                   [{"type": "text_delta", "text": p}
                                    for p in self.pieces(reply.text)])
            index += 1
        for call in reply.calls:
            half = len(call.arguments_json) // 2
            parts = [call.arguments_json[:half], call.arguments_json[half:]]
            yield from self._block(index, {"type": "tool_use", "id": call.id, "name": call.name,
                                           "input": {}},
                                   [{"type": "input_json_delta", "partial_json": p}
                                    for p in parts if p])
            index += 1
        yield self._event({"type": "message_delta",
                           "delta": {"stop_reason": "tool_use" if reply.calls else "end_turn",
                                     "stop_sequence": None},
                           "usage": {"output_tokens": completion}})
        yield self._event({"type": "message_stop"})

    def _block(self, index: int, start: dict[str, Any],
               deltas: list[dict[str, Any]]) -> Iterator[bytes]:
        yield self._event({"type": "content_block_start", "index": index, "content_block": start})
        for delta in deltas:
            yield self._event({"type": "content_block_delta", "index": index, "delta": delta})
        yield self._event({"type": "content_block_stop", "index": index})

    @staticmethod
    def _event(data: dict[str, Any]) -> bytes:
        return sse(data, event=data["type"])

    def malformed_stream(self, request: WireRequest) -> Iterator[bytes]:
        yield self._event({"type": "message_start", "message": {
            "id": self._message_id(), "type": "message", "role": "assistant",
            "model": request.body.get("model"), "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}})
        yield self._event({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}})
        yield self._event({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": "Hel"}})
        yield b"event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"ind\n\n"

    def error_response(self, error: ScriptedError, request: WireRequest) -> Response:
        headers = {"request-id": f"req_{len(self.requests):04d}"}
        if error.retry_after is not None:
            headers["retry-after"] = str(error.retry_after)
        return JSONResponse({"type": "error", "error": {
            "type": ERROR_TYPES.get(error.status, "api_error"), "message": error.message}},
            error.status, headers=headers)
