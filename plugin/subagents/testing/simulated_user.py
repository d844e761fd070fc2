"""Simulated users: a model plays the user of a test case, towards a goal, in a persona.

A test case with ``simulated_user: {goal, persona, max_turns, llm, assertions}`` has no fixed
user messages: before each turn the simulated user's model reads the conversation so far and
writes the next message, or says the goal was reached (``GOAL_REACHED``) or cannot be reached
(``GIVE_UP``). The case passes when the goal is reached within ``max_turns`` and every assertion
of ``assertions`` holds on the whole conversation. Under ``llm_script`` the model is the scripted
caller ``simulated_user``, so such cases also run offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SIMULATED_USER_CALLER = "simulated_user"
GOAL_REACHED = "GOAL_REACHED"
GIVE_UP = "GIVE_UP"
KEYS = {"goal", "persona", "max_turns", "llm", "assertions"}
DEFAULT_MAX_TURNS = 10

_PROMPT = """You are role-playing a person who writes to a chat assistant. Stay in character and \
write only what this person would type next: one short message, no explanations, no quotes.

The person's goal: {goal}
{persona}
When the goal has been fully achieved in the conversation, reply with exactly {reached}.
When the assistant clearly cannot help with the goal, reply with exactly {give_up}."""


def spec_problems(spec: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """What is wrong with a ``simulated_user`` value: (message, location below it) pairs."""
    if not isinstance(spec, dict):
        return [("simulated_user is a mapping with goal, persona, max_turns, llm, assertions",
                 ())]
    problems: list[tuple[str, tuple[Any, ...]]] = []
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        problems.append((f"unknown keys {unknown}; use {sorted(KEYS)}", ()))
    if not isinstance(spec.get("goal"), str) or not spec["goal"].strip():
        problems.append(("simulated_user needs a goal (text)", ("goal",)))
    if spec.get("persona") is not None and not isinstance(spec["persona"], str):
        problems.append(("persona is a text", ("persona",)))
    turns = spec.get("max_turns", DEFAULT_MAX_TURNS)
    if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
        problems.append(("max_turns is a whole number of at least 1", ("max_turns",)))
    if spec.get("llm") is not None and not isinstance(spec["llm"], dict):
        problems.append(("llm is a mapping such as {model_group: simulated_user_llm}", ("llm",)))
    if spec.get("assertions") is not None and not isinstance(spec["assertions"], list):
        problems.append(("assertions is a list", ("assertions",)))
    return problems


@dataclass
class Reply:
    """The simulated user's next move."""

    text: str | None
    """The next message; None when the conversation ends."""
    reached: bool = False
    """The simulated user says the goal was reached."""


class SimulatedUser:
    """Asks a model for the next user message of a conversation."""

    def __init__(self, spec: dict[str, Any], llm: Any) -> None:
        self.goal = str(spec["goal"]).strip()
        self.persona = str(spec.get("persona") or "").strip()
        self.max_turns = int(spec.get("max_turns", DEFAULT_MAX_TURNS))
        self.llm = llm

    def messages(self, history: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """The request: the role-play instructions, then the conversation seen from the user's
        side (the assistant's messages as ``user``, the simulated user's as ``assistant``)."""
        persona = f"The person: {self.persona}" if self.persona else ""
        messages: list[dict[str, Any]] = [{"role": "system", "content": _PROMPT.format(
            goal=self.goal, persona=persona, reached=GOAL_REACHED, give_up=GIVE_UP)}]
        messages.append({"role": "user", "content": "(The chat is open: write your first "
                                                    "message.)"})
        for speaker, text in history:
            role = "assistant" if speaker == "user" else "user"
            if messages[-1]["role"] == role:
                messages[-1]["content"] += "\n" + text
            else:
                messages.append({"role": role, "content": text})
        if messages[-1]["role"] == "assistant":
            messages.append({"role": "user", "content": "(The assistant said nothing.)"})
        return messages

    async def next(self, history: list[tuple[str, str]]) -> Reply:
        """The next message, or the end of the conversation."""
        response = await self.llm.complete(self.messages(history), None)
        text = str(response.text or "").strip()
        if GOAL_REACHED in text:
            return Reply(None, reached=True)
        if GIVE_UP in text or not text:
            return Reply(None)
        return Reply(text)
