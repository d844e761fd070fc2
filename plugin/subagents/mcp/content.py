"""MCP content blocks -> text the model can use.

Binary payloads (images, audio, blob resources) never reach the model as base64: each becomes a
one-line placeholder naming its kind, MIME type, decoded size and (for resources) its URI, so the
model knows something was returned and can mention or fetch it, without spending tokens on bytes.
"""

from __future__ import annotations

import json
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
    return json.dumps(dumped, ensure_ascii=False)


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
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return AgentToolResult(tool_name=tool_name, result=text, images=images)
    return AgentToolResult(tool_name=tool_name, result=joined, images=images)
