"""Readable differences: a character-level diff for near-miss texts, two columns side by side."""

from __future__ import annotations

import difflib

NEAR_MISS_RATIO = 0.6
"""How similar (difflib ratio) an actual text must be to be shown as a near miss."""


def near_miss(expected: str, actual: str | list[str]) -> str:
    """The closest actual text, diffed character by character against ``expected``, as
    indented lines (``-`` expected, ``+`` actual, ``?`` marks the differences); empty when no
    actual text is close."""
    candidates = [actual] if isinstance(actual, str) else actual
    scored = [(difflib.SequenceMatcher(None, expected, c).ratio(), c) for c in candidates]
    if not scored:
        return ""
    ratio, closest = max(scored)
    if ratio < NEAR_MISS_RATIO or closest == expected:
        return ""
    lines = [line.rstrip("\n") for line in difflib.ndiff([expected + "\n"], [closest + "\n"])]
    return "  near miss (- expected, + actual):\n" + "\n".join(f"    {line}" for line in lines)


def side_by_side(left: list[str], right: list[str], *, width: int = 56,
                 titles: tuple[str, str] = ("expected steps", "actual events")) -> str:
    """Two columns, each cell cut to ``width`` characters."""

    def cell(text: str) -> str:
        return text if len(text) <= width else text[: width - 3] + "..."

    rows = [f"    {titles[0]:<{width}} | {titles[1]}", f"    {'-' * width}-+-{'-' * width}"]
    for index in range(max(len(left), len(right))):
        a = cell(left[index]) if index < len(left) else ""
        b = cell(right[index]) if index < len(right) else ""
        rows.append(f"    {a:<{width}} | {b}".rstrip())
    return "  the turn:\n" + "\n".join(rows)
