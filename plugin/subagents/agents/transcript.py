"""The conversation as chat messages: last N utterances, restart markers, current message."""

from __future__ import annotations

import re
from collections.abc import Sequence

from subagents.agents.schemas import AgentInput
from subagents.types import ChatMessage, TrackerEvent

PREVIOUS_RUN_START = "--- Previous run (completed). ---"
PREVIOUS_RUN_END = "--- End of previous run ---"


_SIGN_IN_LINK = re.compile(r"https?://\S*[?&]code_challenge=\S*")
SIGN_IN_LINK = "[sign-in link]"
"""What the model reads instead of an OAuth sign-in address the user was sent."""


def hide_sign_in_links(text: str) -> str:
    """``text`` with each OAuth sign-in address replaced by ``[sign-in link]``."""
    return _SIGN_IN_LINK.sub(SIGN_IN_LINK, text)


def _bot_text(event: TrackerEvent) -> str:
    text = " ".join(str(event.get("text") or "").split("\n")).strip()
    text = hide_sign_in_links(text)
    buttons = (event.get("data") or {}).get("buttons") or []
    if buttons:
        labels = ", ".join(f'button {i}: "{b.get("title", "")}"' for i, b in
                           enumerate(buttons, 1))
        text = f"{text} {labels}".strip()
    return text


def previous_run_region(events: Sequence[TrackerEvent], agent: str, *,
                        open_before: bool = False) -> tuple[int, int] | None:
    """Indexes (start, end) of the agent's last completed run in ``events``; with
    ``open_before`` (a run of the agent had started before ``events`` begin) a run that
    started before them starts at 0."""
    end = next((i for i in range(len(events) - 1, -1, -1)
                if events[i].get("event") == "agent_completed"
                and events[i].get("agent_id") == agent), None)
    if end is None:
        return None
    start = None
    for i in range(end - 1, -1, -1):
        event = events[i]
        if event.get("agent_id") != agent:
            continue
        if event.get("event") == "agent_completed":
            return (start, end) if start is not None else None
        if event.get("event") == "agent_started":
            start = i
    if open_before:  # the run started before the first of ``events``
        start = 0
    return (start, end) if start is not None else None


def history_messages(context: AgentInput, agent: str, turns: int) -> list[ChatMessage]:
    """The last ``turns`` utterances as chat messages, then the current message."""
    events = context.events
    indexed = [(i, e) for i, e in enumerate(events) if e.get("event") in ("user", "bot")]
    window = indexed[-turns:] if turns else []
    region = previous_run_region(events, agent, open_before=agent in context.earlier.open_runs) \
        if context.metadata.get("restarted") else None
    messages: list[ChatMessage] = []
    in_region: list[int] = []
    for index, event in window:
        is_user = event.get("event") == "user"
        content = str(event.get("text") or "") if is_user else _bot_text(event)
        if not content.strip():
            continue
        if region and region[0] <= index <= region[1]:
            in_region.append(len(messages))
        messages.append({"role": "user" if is_user else "assistant", "content": content})
    if in_region:
        first, last = in_region[0], in_region[-1]
        messages[first]["content"] = f"{PREVIOUS_RUN_START}\n{messages[first]['content']}"
        messages[last]["content"] = f"{messages[last]['content']}\n{PREVIOUS_RUN_END}"
    last_user = next((e.get("text") for _, e in reversed(window) if e.get("event") == "user"),
                     None)
    if context.user_message and last_user != context.user_message:
        messages.append({"role": "user", "content": context.user_message})
    return messages
