"""Amazon Bedrock's Converse API: ``POST /model/<modelId>/converse`` and ``/converse-stream``.

Requests are signed with SigV4 (``Authorization: AWS4-HMAC-SHA256 Credential=<key id>/<date>/
<region>/bedrock/aws4_request, ...``). Plain reply: ``output.message`` (role ``assistant``)
whose ``content`` holds ``{"text"}`` and ``{"toolUse": {"toolUseId", "name", "input"}}``
blocks, ``stopReason`` ``end_turn`` or ``tool_use``, ``usage`` ``inputTokens``/
``outputTokens``/``totalTokens``, ``metrics.latencyMs``. Stream: AWS event-stream frames
(:mod:`.eventstream`) ``messageStart``; text as ``contentBlockDelta`` ``{"text"}`` then
``contentBlockStop`` (no start event for text); a tool call as ``contentBlockStart``
``{"toolUse": {"toolUseId", "name"}}``, ``contentBlockDelta`` ``{"toolUse": {"input": <JSON
text piece>}}`` and ``contentBlockStop``; then ``messageStop`` and ``metadata`` (usage,
metrics). Each payload also carries Bedrock's ``p`` padding field. Errors: the exception name
in ``x-amzn-ErrorType`` and ``{"message": ...}``; bad credentials are a 403
(``UnrecognizedClientException``), throttling a 429 ``ThrottlingException`` without a
``Retry-After``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from starlette.responses import JSONResponse, Response

from ._base import ScriptedError, ScriptedReply, WireRequest, WireServer
from .eventstream import encode_event, encode_message

EXCEPTIONS = {400: "ValidationException", 403: "UnrecognizedClientException",
              404: "ResourceNotFoundException", 408: "ModelTimeoutException",
              424: "ModelErrorException", 429: "ThrottlingException",
              500: "InternalServerException", 503: "ServiceUnavailableException"}

_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<action>converse|converse-stream)$")


class BedrockServer(WireServer):
    """Stand-in for ``bedrock-runtime.<region>.amazonaws.com``; point LiteLLM's ``bedrock/``
    models at it with ``aws_bedrock_runtime_endpoint=server.base_url`` (or ``api_base``)."""

    stream_media_type = "application/vnd.amazon.eventstream"

    def classify(self, request: WireRequest) -> bool | None:
        match = _PATH.match(request.path)
        if request.method != "POST" or match is None:
            return None
        return match["action"] == "converse-stream"

    @staticmethod
    def model_of(request: WireRequest) -> str:
        """The model id named in a chat call's path."""
        match = _PATH.match(request.path)
        return match["model"] if match else ""

    @staticmethod
    def tool_names(request: WireRequest) -> list[str]:
        """Names of the tools a request offered."""
        return [t["toolSpec"]["name"]
                for t in (request.body.get("toolConfig") or {}).get("tools") or []]

    def _usage(self, request: WireRequest) -> dict[str, int]:
        prompt, completion = request.usage
        return {"inputTokens": prompt, "outputTokens": completion,
                "totalTokens": prompt + completion}

    def reply_body(self, reply: ScriptedReply, request: WireRequest) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        content += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}}
                    for c in reply.calls]
        return {"output": {"message": {"role": "assistant", "content": content}},
                "stopReason": "tool_use" if reply.calls else "end_turn",
                "usage": self._usage(request), "metrics": {"latencyMs": 12}}

    def reply_stream(self, reply: ScriptedReply, request: WireRequest) -> Iterator[bytes]:
        yield self._event("messageStart", {"role": "assistant"})
        index = 0
        if reply.text:
            for piece in self.pieces(reply.text):
                yield self._event("contentBlockDelta",
                                  {"contentBlockIndex": index, "delta": {"text": piece}})
            yield self._event("contentBlockStop", {"contentBlockIndex": index})
            index += 1
        for call in reply.calls:
            yield self._event("contentBlockStart", {"contentBlockIndex": index, "start": {
                "toolUse": {"toolUseId": call.id, "name": call.name}}})
            half = len(call.arguments_json) // 2
            for part in (call.arguments_json[:half], call.arguments_json[half:]):
                if part:
                    yield self._event("contentBlockDelta", {"contentBlockIndex": index,
                                                            "delta": {"toolUse": {"input": part}}})
            yield self._event("contentBlockStop", {"contentBlockIndex": index})
            index += 1
        yield self._event("messageStop", {"stopReason": "tool_use" if reply.calls else "end_turn"})
        yield self._event("metadata", {"usage": self._usage(request),
                                       "metrics": {"latencyMs": 12}})

    @staticmethod
    def _event(event_type: str, data: dict[str, Any]) -> bytes:
        return encode_event(event_type, {**data, "p": "abcdefgh"})

    def malformed_stream(self, request: WireRequest) -> Iterator[bytes]:
        yield self._event("messageStart", {"role": "assistant"})
        yield self._event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hel"}})
        yield encode_message({":event-type": "contentBlockDelta",
                              ":content-type": "application/json", ":message-type": "event"},
                             b'{"contentBlockIndex": 0, "delta": {"te')

    def error_response(self, error: ScriptedError, request: WireRequest) -> Response:
        name = EXCEPTIONS.get(error.status, "InternalServerException")
        return JSONResponse({"message": error.message}, error.status, headers={
            "x-amzn-errortype": f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "x-amzn-requestid": f"00000000-0000-0000-0000-{len(self.requests):012d}"})
