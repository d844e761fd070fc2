"""Google's Gemini API (AI Studio) and Vertex AI: ``generateContent`` and
``streamGenerateContent?alt=sse``.

Gemini: ``POST /v1beta/models/<model>:generateContent`` with the key in ``x-goog-api-key``.
Vertex AI: ``POST /v1/projects/<project>/locations/<location>/publishers/google/models/<model>
:generateContent`` with ``Authorization: Bearer <token>``; :class:`VertexServer` also serves
``POST /token``, the OAuth token endpoint google-auth's service-account credentials exchange
their signed JWT at (their ``token_uri``; google-auth ignores the ``token_uri`` of
``authorized_user`` credentials and always calls Google, so those cannot be pointed here).

Reply: ``candidates[0].content`` (role ``model``) whose ``parts`` hold ``text`` and
``functionCall`` (``name``, ``args`` object, no id) parts; ``finishReason`` is ``STOP`` even
for a function call; ``usageMetadata`` counts ``promptTokenCount``, ``candidatesTokenCount``,
``totalTokenCount``. Stream (``alt=sse``): ``data: <GenerateContentResponse>`` events separated
by CRLF CRLF, each carrying the next parts; a function call arrives whole in one event; the
last event carries ``finishReason`` and the full usage. Errors:
``{"error": {"code", "message", "status", "details"}}``; a 429 says how long to wait in a
``google.rpc.RetryInfo`` detail (``retryDelay: "7s"``), not in a header; a bad key is a 400
``INVALID_ARGUMENT`` with an ``ErrorInfo`` detail of reason ``API_KEY_INVALID``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from starlette.responses import JSONResponse, Response

from ._base import ScriptedError, ScriptedReply, WireRequest, WireServer

STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
            504: "DEADLINE_EXCEEDED"}
BAD_KEY = "API key not valid. Please pass a valid API key."
"""The message a scripted 400 carries to play Gemini's answer to a wrong key."""

_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):(?P<action>\w+)$")
_VERTEX_PATH = re.compile(r"^/v1(?:beta1)?/projects/(?P<project>[^/]+)/locations/"
                          r"(?P<location>[^/]+)/publishers/google/models/(?P<model>[^/:]+)"
                          r":(?P<action>\w+)$")


class GeminiServer(WireServer):
    """Stand-in for generativelanguage.googleapis.com; point LiteLLM's ``gemini/`` models at it
    with ``api_base=server.base_url + "/v1beta"``."""

    path_pattern = _GEMINI_PATH

    def classify(self, request: WireRequest) -> bool | None:
        match = self.path_pattern.match(request.path)
        if request.method != "POST" or match is None:
            return None
        if match["action"] == "generateContent":
            return False
        if match["action"] == "streamGenerateContent":
            return True
        return None

    def model_of(self, request: WireRequest) -> str:
        """The model named in a chat call's path."""
        match = self.path_pattern.match(request.path)
        return match["model"] if match else ""

    @staticmethod
    def tool_names(request: WireRequest) -> list[str]:
        """Names of the functions a request declared."""
        return [d["name"] for tool in request.body.get("tools") or []
                for d in tool.get("functionDeclarations") or tool.get("function_declarations")
                or []]

    def _parts(self, reply: ScriptedReply) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        return parts + [{"functionCall": {"name": c.name, "args": c.arguments}}
                        for c in reply.calls]

    def _usage(self, request: WireRequest, final: bool) -> dict[str, int]:
        prompt, completion = request.usage
        if not final:
            return {"promptTokenCount": prompt, "totalTokenCount": prompt}
        return {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                "totalTokenCount": prompt + completion}

    def _response(self, request: WireRequest, parts: list[dict[str, Any]],
                  final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if final:
            candidate["finishReason"] = "STOP"
        return {"candidates": [candidate], "usageMetadata": self._usage(request, final),
                "modelVersion": self.model_of(request),
                "responseId": f"resp-{len(self.requests):04d}"}

    def reply_body(self, reply: ScriptedReply, request: WireRequest) -> dict[str, Any]:
        return self._response(request, self._parts(reply), final=True)

    def reply_stream(self, reply: ScriptedReply, request: WireRequest) -> Iterator[bytes]:
        events = [[{"text": piece}] for piece in self.pieces(reply.text)]
        events += [[part] for part in self._parts(reply) if "functionCall" in part]
        for number, parts in enumerate(events or [[{"text": ""}]]):
            last = number == max(len(events), 1) - 1
            yield self._event(self._response(request, parts, final=last))

    @staticmethod
    def _event(data: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\r\n\r\n"

    def malformed_stream(self, request: WireRequest) -> Iterator[bytes]:
        yield self._event(self._response(request, [{"text": "Hel"}], final=False))
        yield b'data: {"candidates": [{"content": {"role": "mo\r\n\r\n'

    def error_response(self, error: ScriptedError, request: WireRequest) -> Response:
        details: list[dict[str, Any]] = []
        if error.message == BAD_KEY:
            details.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "API_KEY_INVALID", "domain": "googleapis.com"})
        if error.retry_after is not None:
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                            "retryDelay": f"{error.retry_after}s"})
        body = {"error": {"code": error.status, "message": error.message,
                          "status": STATUSES.get(error.status, "UNKNOWN"), "details": details}}
        return JSONResponse(body, error.status)


class VertexServer(GeminiServer):
    """Stand-in for ``<location>-aiplatform.googleapis.com`` and Google's OAuth token endpoint;
    point LiteLLM's ``vertex_ai/`` models at it with ``api_base=server.base_url`` and
    ``vertex_credentials=server.credentials(project)``."""

    path_pattern = _VERTEX_PATH
    token = "ya29.stand-in-access-token"

    def credentials(self, project: str) -> dict[str, str]:
        """Service-account credentials (a fresh RSA key) whose token exchange comes here."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        return {"type": "service_account", "project_id": project, "private_key_id": "k1",
                "private_key": pem, "client_email": f"agent@{project}.iam.gserviceaccount.com",
                "client_id": "1", "token_uri": f"{self.base_url}/token"}

    def project_and_location(self, request: WireRequest) -> tuple[str, str]:
        """The project and location named in a chat call's path."""
        match = self.path_pattern.match(request.path)
        return (match["project"], match["location"]) if match else ("", "")

    def other(self, request: WireRequest) -> Response:
        if request.method == "POST" and request.path == "/token":
            return JSONResponse({"access_token": self.token, "expires_in": 3600,
                                 "token_type": "Bearer",
                                 "scope": "https://www.googleapis.com/auth/cloud-platform"})
        return super().other(request)
