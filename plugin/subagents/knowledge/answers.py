"""What the search policy does with search results, as small pure functions.

These follow Rasa's ``EnterpriseSearchPolicy`` (facts, not its code): the query is the last
``max_messages_in_query`` user and bot messages, newest first; an extractive answer is the best
hit's ``answer``; a generative answer that contains :data:`NO_ANSWER_MARKER` is not relevant and
leads to ``pattern_cannot_handle`` with :data:`NO_RELEVANT_ANSWER_REASON`; citations are
renumbered in order of first use. The answer is sent as a bot message carrying
:func:`answer_metadata`; it is not rephrased (only domain responses are).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from subagents.knowledge.index import SearchHit

__all__ = ["NO_ANSWER_MARKER", "NO_RELEVANT_ANSWER_REASON", "POLICY_NAME", "answer_metadata",
           "extractive_answer", "is_relevant", "renumber_citations", "search_query"]

POLICY_NAME = "EnterpriseSearchPolicy"
"""The ``utter_source`` of search answers."""
NO_ANSWER_MARKER = "[NO_RAG_ANSWER]"
"""What the model answers when the documents do not answer the question (relevancy check)."""
NO_RELEVANT_ANSWER_REASON = "cannot_handle_no_relevant_answer"
"""``context.reason`` of ``pattern_cannot_handle`` when search has no relevant answer."""

_CITATION = re.compile(r"\[([^\]]+)\]")
_SOURCE_LINE = re.compile(r"\[(\d+)\](.*)")


def search_query(messages: Sequence[str], max_messages: int = 2) -> str:
    """The search query: the last ``max_messages`` messages (user and bot, oldest first in
    ``messages``), newest first, line breaks replaced by spaces, joined by spaces."""
    texts = [m.replace("\n", " ") for m in messages if m]
    return " ".join(reversed(texts[-max_messages:])) if max_messages > 0 else ""


def answer_metadata(query: str, hits: Sequence[SearchHit], *, streamed: bool = False
                    ) -> dict[str, Any]:
    """The metadata of the bot message that carries a search answer."""
    metadata: dict[str, Any] = {"search_results": [hit.text for hit in hits],
                                "utter_source": POLICY_NAME, "search_query": query}
    if streamed:
        metadata["streamed_text"] = True
    return metadata


def extractive_answer(hits: Sequence[SearchHit]) -> str | None:
    """The best hit's stored answer (extractive search), or None when it has none."""
    if not hits:
        return None
    answer = hits[0].metadata.get("answer")
    return answer if isinstance(answer, str) and answer else None


def is_relevant(answer: str) -> bool:
    """False when the model said the documents do not answer the question."""
    return NO_ANSWER_MARKER not in answer


def renumber_citations(answer: str) -> str:
    """Renumber an answer's ``[n]`` citations 1, 2, ... in order of first use.

    The answer ends with a ``Sources:`` line followed by ``[n] <source>`` lines. Citations of
    sources that are not listed are removed; a group such as ``[3, 1]`` is renumbered, sorted and
    deduplicated. The sources are listed again: the cited ones in their new order, then the
    uncited numbered ones, then any other line. An answer without ``Sources:`` is returned
    stripped.
    """
    body, marker, tail = answer.rpartition("Sources:")
    if not marker:
        return answer.strip()
    sources: dict[int, str] = {}
    other_lines: list[str] = []
    for line in (raw.strip() for raw in tail.strip().split("\n")):
        if not line:
            continue
        match = _SOURCE_LINE.match(line)
        if match:
            sources[int(match[1])] = line
        else:
            other_lines.append(line)
    order: list[int] = []
    for group in _CITATION.finditer(body):
        for number in _numbers(group[1]):
            if number in sources and number not in order:
                order.append(number)
    new = {old: position + 1 for position, old in enumerate(order)}

    def rewrite(group: re.Match[str]) -> str:
        numbers = sorted({new[n] for n in _numbers(group[1]) if n in new})
        return f"[{', '.join(map(str, numbers))}]" if numbers else ""

    text = _CITATION.sub(rewrite, body)
    text = re.sub(r"\s+([,.?])", r"\1", text).replace("[]", " ")
    text = re.sub(r"\s+", " ", text).strip()
    lines = [sources[old].replace(f"[{old}]", f"[{new[old]}]", 1) for old in order]
    lines += [line for number, line in sorted(sources.items()) if number not in new]
    lines += other_lines
    return text + ("\nSources:\n" + "\n".join(lines) if lines else "")


def _numbers(group: str) -> list[int]:
    return [int(part.strip()) for part in group.split(",") if part.strip().isdigit()]
