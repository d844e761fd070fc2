"""Encode AWS event-stream messages (``application/vnd.amazon.eventstream``), the binary framing
of Bedrock's ``ConverseStream``.

botocore ships only the decoder (``botocore.eventstream.EventStreamBuffer``); the tests check this
encoder against it. One message is, all integers big-endian::

    total length   uint32   the whole message, these 4 bytes and the trailing CRC included
    headers length uint32   bytes of the header block
    prelude CRC    uint32   CRC-32 of the 8 bytes above
    headers                 per header: name length (uint8), name (UTF-8), value type (uint8,
                            7 = string), value length (uint16), value (UTF-8)
    payload                 the event's JSON
    message CRC    uint32   CRC-32 of everything before it

CRC-32 is the IEEE polynomial of ``zlib.crc32``. Bedrock sends ``:event-type`` (for example
``contentBlockDelta``), ``:content-type`` (``application/json``) and ``:message-type``
(``event``); an error in the stream is ``:message-type`` ``exception`` with
``:exception-type`` (for example ``throttlingException``) and a ``{"message": ...}`` payload.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

_STRING = 7


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers, in the order given."""
    block = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        block += struct.pack(">B", len(raw_name)) + raw_name
        block += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    total = 12 + len(block) + len(payload) + 4
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + block + payload
    return message + struct.pack(">I", zlib.crc32(message))


def encode_event(event_type: str, data: dict[str, Any]) -> bytes:
    """A Bedrock stream event: ``:event-type`` and its JSON payload."""
    return encode_message({":event-type": event_type, ":content-type": "application/json",
                           ":message-type": "event"},
                          json.dumps(data, separators=(",", ":")).encode())


def encode_exception(exception_type: str, message: str) -> bytes:
    """A Bedrock stream error (``throttlingException``, ``validationException``, ...)."""
    return encode_message({":exception-type": exception_type,
                           ":content-type": "application/json", ":message-type": "exception"},
                          json.dumps({"message": message}).encode())
