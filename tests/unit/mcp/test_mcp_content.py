"""Binary values inside structured content: what becomes a placeholder and what stays text."""

from __future__ import annotations

import base64

from subagents.mcp.content import without_binary


def test_ordinary_values_are_left_as_they_are():
    value = {"text": "word " * 400, "url": "https://example.com/" + "a" * 600,
             "digest": "ab12" * 16, "token": ".".join(["eyJhbGciOiJIUzI1NiJ9"] * 40),
             "short": base64.b64encode(b"hi").decode(), "count": 3, "items": [True, None],
             "letters": "x" * 5000, "hex": "0123456789abcdef" * 64}
    assert without_binary(value) == value


def test_binary_values_become_placeholders_wherever_they_are():
    data = base64.b64encode(bytes(range(256)) * 2).decode()
    size = 512
    value = {"nested": [{"type": "audio", "data": "AAAA", "mime_type": "audio/wav"},
                        {"uri": "file:///a.bin", "blob": data}],
             "raw": data, "url": "data:application/pdf;base64," + data}
    assert without_binary(value) == {
        "nested": ["[audio: audio/wav, 3 bytes]",
                   f"[resource: file:///a.bin, {size} bytes]"],
        "raw": f"[binary: {size} bytes]",
        "url": f"[data: application/pdf, {size} bytes]"}
