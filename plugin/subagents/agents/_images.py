"""Images in tool results, shown to models that accept images (``tool_result_images``).

A tool message may only hold text, so the images of one step's results follow the step's tool
messages as one user message of image parts, each introduced by the tool call it came from. The
tool messages keep their short placeholders either way, and nothing of the image data is
recorded in the tracker.
"""

from __future__ import annotations

from subagents.tools.base import ToolOutcome
from subagents.types import ChatMessage

INTRO = "The tool results above returned these images:"
OMITTED = "[images of the tool results above were shown here]"


def images_message(outcomes: list[ToolOutcome]) -> ChatMessage | None:
    """A user message with the images of ``outcomes`` (in call order), or None if none."""
    parts: list[dict[str, object]] = []
    for outcome in outcomes:
        result = outcome.result
        if result.is_error or not result.images:
            continue
        parts.append({"type": "text",
                      "text": f"{outcome.call.name} (call {outcome.call.id}):"})
        parts += [{"type": "image_url",
                   "image_url": {"url": f"data:{image.mime_type};base64,{image.data}"}}
                  for image in result.images]
    if not parts:
        return None
    return {"role": "user", "content": [{"type": "text", "text": INTRO}, *parts]}


def without_images(messages: list[ChatMessage]) -> list[ChatMessage]:
    """``messages`` with image messages reduced to a note (for saving a parked exchange)."""
    out = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list) and any(
                isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            out.append({"role": "user", "content": OMITTED})
        else:
            out.append(message)
    return out
