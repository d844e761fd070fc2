"""Size limits on what the model produces and on rendered prompt templates."""

from __future__ import annotations

from typing import Any

PROMPT_CUT = "\n[The rest of this prompt was cut: it is longer than the agent's limit.]"
TEXT_CUT = " [...]"


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[:limit] + TEXT_CUT


def capped_render(template: Any, values: dict[str, Any], limit: int) -> str:
    """Render a Jinja template, stopping once ``limit`` characters are produced (a template
    that would produce more is cut and marked, never fully expanded)."""
    parts: list[str] = []
    size = 0
    for chunk in template.generate(**values):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(parts)[:limit] + PROMPT_CUT
    return "".join(parts)
