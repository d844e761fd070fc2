"""Response templates: ``{name}`` placeholders and sandboxed Jinja, checked and rendered.

Imports nothing else of ours, so the project loader can check templates with the same rules the
runtime renders them with.

* **Format templates** (the default): ``{name}`` is replaced by the value of ``name`` when
  ``name`` is known (a slot that is not set gives ``None``, as Rasa's interpolation does); a
  placeholder naming nothing known stays as written; ``{{`` and ``}}`` are literal braces.
* **Jinja templates** (``metadata: {template: jinja}``): rendered in Jinja's sandbox; unknown
  names render empty; a template that fails to render is kept as written.

Whatever the values (slots a user filled), a rendered text is at most
:data:`MAX_RENDERED_CHARS` characters: a template that would expand further is kept as written
(and logged). In Jinja, repeating a string or list (``*``), powers (``**``), ``%`` formatting
with a huge width and ``center`` with a huge width are refused before they build anything.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import structlog

log = structlog.get_logger("subagents.templating")

__all__ = ["TemplateParseError", "format_placeholders", "jinja_variables", "render_format",
           "render_jinja"]

_FORMAT = re.compile(r"\{\{|\}\}|\{([^\n{}]+?)\}")
MAX_RENDERED_CHARS = 100_000
"""Characters a rendered template may have; a longer result keeps the template as written."""
_MAX_EXPONENT = 1000
_HUGE_WIDTH = re.compile(r"%[-#0 +]*(?:\d{6,}|\*)|%[-#0 +]*\d*\.(?:\d{6,}|\*)")


class _TooLongError(Exception):
    """A rendering went past :data:`MAX_RENDERED_CHARS`."""


class TemplateParseError(ValueError):
    """A Jinja template does not parse.

    Attributes:
        code: Stable error code, ``template.syntax``.
        line: 1-based line of the problem inside the template, when known.
        reason: What is wrong.
    """

    code = "template.syntax"

    def __init__(self, reason: str, *, line: int | None = None) -> None:
        super().__init__(f"{reason} (line {line})" if line is not None else reason)
        self.reason = reason
        self.line = line


def format_placeholders(text: str) -> list[str]:
    """The names of the ``{name}`` placeholders of a format template, in order, once each."""
    names: list[str] = []
    for match in _FORMAT.finditer(text):
        name = match.group(1)
        if name is not None and name.strip() not in names:
            names.append(name.strip())
    return names


def render_format(text: str, values: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders with ``values``.

    Args:
        text: The text, e.g. ``"Booked in {city}."``; ``{{`` and ``}}`` are literal braces.
        values: Values by name. A name that is present is filled in even when its value is
            None (``None``, as Rasa writes an unset slot); a name that is absent stays as
            written.

    Returns:
        The filled-in text.
    """
    length = len(text)

    def replace(match: re.Match[str]) -> str:
        nonlocal length
        key = match.group(1)
        if key is None:
            return match.group(0)[0]
        name = key.strip()
        if name not in values:
            return match.group(0)
        filled = str(values[name])  # an unset slot reads None, as in Rasa
        length += len(filled) - len(match.group(0))
        if length > MAX_RENDERED_CHARS:
            raise _TooLongError
        return filled

    try:
        return _FORMAT.sub(replace, text)
    except _TooLongError:
        log.warning("template.too_long", limit=MAX_RENDERED_CHARS)
        return text


def _refuse_growth(operator: str, left: Any, right: Any) -> None:
    """Raise SecurityError for an operation whose result would be huge (before it is built)."""
    from jinja2.exceptions import SecurityError

    sized = (str, bytes, list, tuple)
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, sized) and isinstance(times, int) \
                    and len(seq) * times > MAX_RENDERED_CHARS:
                raise SecurityError("the repetition would be too long")
    elif operator == "**" and isinstance(right, int | float) and abs(right) > _MAX_EXPONENT:
        raise SecurityError("the exponent is too large")
    elif operator == "%" and isinstance(left, str) and _HUGE_WIDTH.search(left):
        raise SecurityError("the format width is too large")


@functools.cache
def sandbox() -> Any:
    """The sandboxed Jinja environment templates are parsed and rendered in (with the limits
    the module docstring lists)."""
    from jinja2.exceptions import SecurityError
    from jinja2.filters import do_center
    from jinja2.sandbox import SandboxedEnvironment

    class _BoundedSandbox(SandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _refuse_growth(operator, left, right)
            return super().call_binop(context, operator, left, right)

    def center(value: str, width: int = 80) -> str:
        if width > MAX_RENDERED_CHARS:
            raise SecurityError("the width is too large")
        return do_center(value, width)

    env = _BoundedSandbox()
    env.filters["center"] = center
    return env


@functools.lru_cache(maxsize=512)
def _compiled(text: str) -> Any:
    return sandbox().from_string(text)


def jinja_variables(text: str) -> set[str]:
    """The top-level names a Jinja template reads (``context.x`` reads ``context``).

    Raises:
        TemplateParseError: The template does not parse.
    """
    from jinja2 import TemplateSyntaxError, meta

    try:
        return set(meta.find_undeclared_variables(sandbox().parse(text)))
    except TemplateSyntaxError as exc:
        raise TemplateParseError(exc.message or "syntax error", line=exc.lineno) from exc


def render_jinja(text: str, values: Mapping[str, Any]) -> str:
    """Render ``text`` as a sandboxed Jinja template; on any error, or past
    :data:`MAX_RENDERED_CHARS`, the text is kept as written."""
    parts: list[str] = []
    length = 0
    try:
        for part in _compiled(text).generate(**values):  # stops as soon as it is too long
            length += len(part)
            if length > MAX_RENDERED_CHARS:
                log.warning("template.too_long", limit=MAX_RENDERED_CHARS)
                return text
            parts.append(part)
    except Exception as exc:  # noqa: BLE001 - a bad template must not end the turn
        log.warning("template.render_failed", error=str(exc)[:200])
        return text
    return "".join(parts)
