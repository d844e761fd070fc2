"""Size limits on what the model produces and on rendered prompt templates."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio

PROMPT_CUT = "\n[The rest of this prompt was cut: it is longer than the agent's limit.]"
TEXT_CUT = " [...]"
INLINE_RENDER_SECONDS = 0.001
"""How long a prompt may render on the event loop before the rest moves to a worker thread."""


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[:limit] + TEXT_CUT


def capped_render(template: Any, values: dict[str, Any], limit: int) -> str:
    """Render a Jinja template, stopping once ``limit`` characters are produced (a template
    that would produce more is cut and marked, never fully expanded)."""
    return _finish(iter(template.generate(**values)), [], limit)


async def capped_render_async(template: Any, values: dict[str, Any], limit: int, *,
                              budget: float = INLINE_RENDER_SECONDS) -> str:
    """:func:`capped_render` on the event loop for at most ``budget`` seconds; a template
    still rendering then finishes in a worker thread, so a slow one never holds the loop."""
    chunks = iter(template.generate(**values))
    parts: list[str] = []
    size = 0
    deadline = time.perf_counter() + budget
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(parts)[:limit] + PROMPT_CUT
        if time.perf_counter() > deadline:
            return await anyio.to_thread.run_sync(_finish, chunks, parts, limit)
    return "".join(parts)


def _finish(chunks: Iterator[str], parts: list[str], limit: int) -> str:
    size = sum(len(part) for part in parts)
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(parts)[:limit] + PROMPT_CUT
    return "".join(parts)
