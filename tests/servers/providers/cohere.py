"""Cohere's v2 Chat API: ``POST /v2/chat``, plain JSON or typed server-sent events.

Plain reply: ``message`` (role ``assistant``) with ``content`` ``[{"type": "text", "text"}]``,
or, for tool calls, ``tool_plan`` and ``tool_calls`` (``id``, ``type`` ``function``,
``function.name``/``arguments`` JSON text); ``finish_reason`` ``COMPLETE`` or ``TOOL_CALL``;
``usage`` with ``billed_units`` and ``tokens`` (``input_tokens``/``output_tokens``). Stream:
``event: <type>`` plus ``data:`` JSON with the same ``type``: ``message-start``,
``content-start`` / ``content-delta`` (``delta.message.content.text``) / ``content-end``,
``tool-plan-delta``, ``tool-call-start`` (id, name) / ``tool-call-delta`` (argument pieces) /
``tool-call-end``, and ``message-end`` (``delta.finish_reason``, ``delta.usage``), then
``data: [DONE]``. Errors:
``{"id", "message"}``; a 429 carries ``retry-after``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from starlette.responses import JSONResponse, Response

from ._base import ScriptedError, ScriptedReply, WireRequest, WireServer, sse

PLAN = "I will look that up."


class CohereServer(WireServer):
    """Stand-in for api.cohere.com; point LiteLLM's ``cohere_chat/`` models at it with
    ``api_base=server.base_url + "/v2/chat"`` (LiteLLM posts to the api_base as given)."""

    def classify(self, request: WireRequest) -> bool | None:
        if request.method != "POST" or request.path != "/v2/chat":
            return None
        return bool(isinstance(request.body, dict) and request.body.get("stream"))

    @staticmethod
    def tool_names(request: WireRequest) -> list[str]:
        """Names of the tools a request offered."""
        return [t["function"]["name"] for t in request.body.get("tools") or []]

    def _usage(self, request: WireRequest) -> dict[str, Any]:
        prompt, completion = request.usage
        counts = {"input_tokens": prompt, "output_tokens": completion}
        return {"billed_units": dict(counts), "tokens": dict(counts)}

    def _id(self) -> str:
        return f"c0ffee00-0000-0000-0000-{len(self.requests):012d}"

    def reply_body(self, reply: ScriptedReply, request: WireRequest) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant"}
        if reply.calls:
            message["tool_plan"] = reply.text or PLAN
            message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.arguments_json}} for c in reply.calls]
        else:
            message["content"] = [{"type": "text", "text": reply.text}]
        return {"id": self._id(), "finish_reason": "TOOL_CALL" if reply.calls else "COMPLETE",
                "message": message, "usage": self._usage(request)}

    def reply_stream(self, reply: ScriptedReply, request: WireRequest) -> Iterator[bytes]:
        yield self._event({"id": self._id(), "type": "message-start", "delta": {"message": {
            "role": "assistant", "content": [], "tool_plan": "", "tool_calls": [],
            "citations": []}}})
        if reply.calls:
            for piece in self.pieces(reply.text or PLAN):
                yield self._event({"type": "tool-plan-delta",
                                   "delta": {"message": {"tool_plan": piece}}})
            for index, call in enumerate(reply.calls):
                yield from self._call(index, call.id, call.name, call.arguments_json)
        else:
            yield self._event({"type": "content-start", "index": 0, "delta": {"message": {
                "content": {"type": "text", "text": ""}}}})
            for piece in self.pieces(reply.text):
                yield self._event({"type": "content-delta", "index": 0,
                                   "delta": {"message": {"content": {"text": piece}}}})
            yield self._event({"type": "content-end", "index": 0})
        yield self._event({"type": "message-end", "delta": {
            "finish_reason": "TOOL_CALL" if reply.calls else "COMPLETE",
            "usage": self._usage(request)}})
        yield sse("[DONE]")

    def _call(self, index: int, call_id: str, name: str, arguments: str) -> Iterator[bytes]:
        yield self._event({"type": "tool-call-start", "index": index, "delta": {"message": {
            "tool_calls": {"id": call_id, "type": "function",
                           "function": {"name": name, "arguments": ""}}}}})
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            if part:
                yield self._event({"type": "tool-call-delta", "index": index, "delta": {
                    "message": {"tool_calls": {"function": {"arguments": part}}}}})
        yield self._event({"type": "tool-call-end", "index": index})

    @staticmethod
    def _event(data: dict[str, Any]) -> bytes:
        return sse(data, event=data["type"])

    def malformed_stream(self, request: WireRequest) -> Iterator[bytes]:
        yield self._event({"id": self._id(), "type": "message-start",
                           "delta": {"message": {"role": "assistant"}}})
        yield self._event({"type": "content-delta", "index": 0,
                           "delta": {"message": {"content": {"text": "Hel"}}}})
        yield b'event: content-delta\ndata: {"type": "content-delta", "ind\n\n'

    def error_response(self, error: ScriptedError, request: WireRequest) -> Response:
        headers = {} if error.retry_after is None else {"retry-after": str(error.retry_after)}
        return JSONResponse({"id": self._id(), "message": error.message}, error.status,
                            headers=headers)
