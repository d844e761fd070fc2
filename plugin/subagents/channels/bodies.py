"""Request bodies read with a cap: at most ``max_body`` bytes (413), within ``body_timeout``
seconds (408), JSON nested at most :data:`MAX_JSON_DEPTH` deep (400).

Used by every route that takes a body (the REST API, A2A, the platform webhooks): a body is
counted while it arrives, so nothing larger than the cap is ever held, whatever the
``Content-Length`` says (or when there is none).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from starlette.requests import ClientDisconnect, Request

from subagents.types import load_json

MAX_BODY = 1_000_000
"""Bytes a request body may have."""
BODY_TIMEOUT = 30.0
"""Seconds a request body may take to arrive."""
MAX_JSON_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""The start of a ``\\uD800``-``\\uDFFF`` escape: in an ASCII body, the only way a lone
surrogate gets into the parsed JSON."""


class BadRequestError(Exception):
    """A request the server refuses, with its HTTP status and stable code."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


async def read_body(request: Request, max_body: int = MAX_BODY,
                    body_timeout: float = BODY_TIMEOUT) -> bytes:
    """The request's body, counted while it arrives.

    Raises:
        BadRequestError: 413 over ``max_body`` bytes, 408 when it does not arrive within
            ``body_timeout`` seconds, 400 when the client went away.
    """
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise BadRequestError(413, f"request body is larger than {max_body} bytes",
                              "http.body_too_large")
    raw = bytearray()
    try:
        async with asyncio.timeout(body_timeout):  # a client that stops sending mid-body
            async for chunk in request.stream():
                raw += chunk
                if len(raw) > max_body:
                    raise BadRequestError(413, f"request body is larger than {max_body} bytes",
                                          "http.body_too_large")
    except TimeoutError:
        raise BadRequestError(408, f"the body did not arrive in {body_timeout:g}s",
                              "http.body_timeout") from None
    except ClientDisconnect:
        raise BadRequestError(400, "the client went away before sending the body",
                              "http.body_incomplete") from None
    return bytes(raw)


def check_depth(raw: bytes) -> None:
    """Refuse (400) JSON text nested deeper than :data:`MAX_JSON_DEPTH` levels."""
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and \
            _nesting_depth(raw) > MAX_JSON_DEPTH:
        raise BadRequestError(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels",
                              "http.body_too_deep")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """A JSON object of plain UTF-8 text, nested at most MAX_JSON_DEPTH deep (else 400)."""
    check_depth(raw)
    try:
        body = load_json(raw or b"null")
    except (ValueError, RecursionError):  # bad JSON or UTF-8, an integer too long to convert
        raise BadRequestError(400, "the body is not valid JSON",
                              "http.body_invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequestError(400, "the body must be a JSON object", "http.body_not_object")
    if not raw.isascii() or _SURROGATE_ESCAPE.search(raw):
        try:  # \ud800 escapes decode to lone surrogates, which no store or response can encode
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequestError(400, "the body contains an unpaired surrogate",
                                  "http.body_invalid_text") from None
    return body


async def json_body(request: Request, max_body: int = MAX_BODY,
                    body_timeout: float = BODY_TIMEOUT) -> dict[str, Any]:
    """The request's body as a JSON object, read with the caps above."""
    return parse_json_object(await read_body(request, max_body, body_timeout))


def _nesting_depth(raw: bytes) -> int:
    """The deepest bracket nesting outside strings (an upper bound is enough)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest
