"""MCP content blocks -> text the model can use.

Binary payloads (images, audio, blob resources) never reach the model as base64: each becomes a
one-line placeholder naming its kind, MIME type, decoded size and (for resources) its URI, so the
model knows something was returned and can mention or fetch it, without spending tokens on bytes.
The same holds inside structured content: an object shaped like a binary content block or blob
resource, a ``data:`` URL, and any long unbroken base64 string become placeholders there too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from subagents.types import AgentToolResult, ToolResultImage


def _decoded_size(data: str) -> int:
    """Bytes a base64 string decodes to (without decoding it)."""
    data = data.strip()
    if not data:
        return 0
    return max(len(data) * 3 // 4 - data[-2:].count("="), 0)


def _placeholder(kind: str, mime: str | None, size: int | None, uri: str | None = None,
                 name: str | None = None) -> str:
    parts = [p for p in (uri, name, mime) if p]
    if size is not None:
        parts.append(f"{size} bytes")
    return f"[{kind}: {', '.join(parts)}]" if parts else f"[{kind}]"


LONG_BASE64 = 512
"""A string of at least this many base64 characters (and nothing else, with upper and lower case
letters and digits among them) counts as binary."""
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")


def _binary_object(value: dict[str, Any]) -> str | None:
    """The placeholder of a JSON object shaped like a binary content block or blob resource."""
    kind = value.get("type")
    data = value.get("data")
    if kind in ("image", "audio") and isinstance(data, str):
        return _placeholder(str(kind), _mime(value), _decoded_size(data))
    resource = value.get("resource")
    if kind == "resource" and isinstance(resource, dict):
        value = resource
    blob = value.get("blob")
    if isinstance(blob, str):
        uri = value.get("uri")
        return _placeholder("resource", _mime(value), _decoded_size(blob),
                            uri=str(uri) if uri else None)
    return None


def _mime(value: dict[str, Any]) -> str | None:
    mime = value.get("mimeType", value.get("mime_type"))
    return str(mime) if mime else None


def _binary_string(text: str) -> str | None:
    """The placeholder of a ``data:`` URL or a long base64 string; None for other text."""
    if text.startswith("data:") and ";base64," in text[:200]:
        header, _, data = text.partition(",")
        return _placeholder("data", header[5:].split(";")[0] or None, _decoded_size(data))
    if len(text) >= LONG_BASE64 and _BASE64.fullmatch(text) and _mixed(text):
        return _placeholder("binary", None, _decoded_size(text))
    return None


def _mixed(text: str) -> bool:
    """Upper and lower case letters and digits all occur (as in base64 of binary data, not in a
    long run of one letter or in hexadecimal)."""
    return any(c.isupper() for c in text) and any(c.islower() for c in text) \
        and any(c.isdigit() for c in text)


def without_binary(value: Any) -> Any:
    """``value`` (parsed JSON) with every binary payload in it replaced by its placeholder."""
    if isinstance(value, dict):
        placeholder = _binary_object(value)
        if placeholder is not None:
            return placeholder
        return {key: without_binary(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_binary(item) for item in value]
    if isinstance(value, str):
        return _binary_string(value) or value
    return value


def block_text(item: Any) -> str:
    """One content block as text; binary data becomes a placeholder."""
    kind = getattr(item, "type", None)
    if kind == "text":
        return str(item.text)
    if kind in ("image", "audio"):
        return _placeholder(kind, item.mime_type, _decoded_size(str(item.data)))
    if kind == "resource_link":
        return _placeholder("resource link", item.mime_type, item.size, uri=str(item.uri),
                            name=item.name)
    if kind == "resource":
        resource = item.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return str(text)
        blob = str(getattr(resource, "blob", "") or "")
        return _placeholder("resource", resource.mime_type, _decoded_size(blob),
                            uri=str(resource.uri))
    dumped = item.model_dump(by_alias=True, mode="json", exclude_none=True) \
        if hasattr(item, "model_dump") else item
    return json.dumps(without_binary(dumped), ensure_ascii=False)


def contents_text(contents: list[Any]) -> str:
    """``resources/read`` contents as text (blobs become placeholders)."""
    out = []
    for content in contents:
        text = getattr(content, "text", None)
        if text is not None:
            out.append(str(text))
        else:
            out.append(_placeholder("resource", content.mime_type,
                                    _decoded_size(str(getattr(content, "blob", "") or "")),
                                    uri=str(content.uri)))
    return "\n".join(out)


def convert_result(tool_name: str, result: Any) -> AgentToolResult:
    """MCP ``CallToolResult`` -> AgentToolResult: text joined as text, structured as JSON;
    image blocks are kept aside (``images``) for agents that show them to the model."""
    joined = "\n".join(block_text(item) for item in result.content or [])
    images = [ToolResultImage(mime_type=str(item.mime_type), data=str(item.data))
              for item in result.content or [] if getattr(item, "type", None) == "image"]
    if result.is_error:
        return AgentToolResult(tool_name=tool_name, is_error=True,
                               error_message=joined or f"tool {tool_name!r} reported an error")
    structured = result.structured_content
    if structured is not None:
        value = structured.get("result", structured) if isinstance(structured, dict) \
            and set(structured) == {"result"} else structured
        value = without_binary(value)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return AgentToolResult(tool_name=tool_name, result=text, images=images)
    return AgentToolResult(tool_name=tool_name, result=joined, images=images)
