"""The A2A stand-in: scripted replies of remote A2A agents, served by a real ``a2a-sdk`` server.

A test case with ``a2a_script`` runs with each ``protocol: A2A`` agent the script names pointed
at a stand-in on 127.0.0.1 (its own agent card and JSON-RPC endpoint, streaming). Each call of
the agent takes the next reply of its list, in order:

* ``message: <text>`` answers with a plain message (no task);
* ``state: <task state>`` answers with a task in that state (``input-required``, ``completed``,
  ``failed``, ``canceled``, ``rejected``, ``auth-required``; or ``working``/``submitted``,
  where the task never finishes and the client's polling gives up), with ``text`` as the
  status message, optional ``artifacts`` (each ``{name?, text?, data?}``) and optional
  ``working`` texts sent as ``working`` status updates first;
* ``error: <text>`` answers with a JSON-RPC internal error (a server-side failure);
* ``expect`` checks what the assistant sent: ``text_contains`` (a string or a list) and
  ``slots`` (each given slot has the given value in the message's data part).

The health check the client sends when it connects (``hello``, without the conversation's
metadata that every real call carries) is answered without taking a reply. A call with no reply
left fails the task and the case; replies nobody asked for fail the case too. One stand-in
server serves a whole run: :meth:`A2AStandins.load` gives the agents each case's script.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

ENTRY_KEYS = {"message", "state", "error", "text", "artifacts", "working", "expect"}
STATES = ("input-required", "completed", "failed", "canceled", "rejected", "auth-required",
          "working", "submitted")
ARTIFACT_KEYS = {"name", "text", "data"}
EXPECT_KEYS = {"text_contains", "slots"}
NO_REPLY_LEFT = "no scripted reply left for this call (a2a_script)"


def a2a_script_problems(script: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """What is wrong with an ``a2a_script`` value: (message, location below it) pairs."""
    if not isinstance(script, dict):
        return [("a2a_script maps A2A agent names to lists of replies", ())]
    problems: list[tuple[str, tuple[Any, ...]]] = []
    for agent, replies in script.items():
        if not isinstance(replies, list):
            problems.append((f"the replies of {agent!r} must be a list", (agent,)))
            continue
        for index, entry in enumerate(replies):
            problems += [(msg, (agent, index, *where)) for msg, where in _entry_problems(entry)]
    return problems


def _entry_problems(entry: Any) -> list[tuple[str, tuple[Any, ...]]]:
    if not isinstance(entry, dict):
        return [("a reply is a mapping with 'message: <text>' or 'state: <task state>'", ())]
    problems: list[tuple[str, tuple[Any, ...]]] = []
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        problems.append((f"unknown keys {unknown}; use {sorted(ENTRY_KEYS)}", ()))
    if sum(key in entry for key in ("message", "state", "error")) != 1:
        problems.append(("a reply has one of 'message', 'state' or 'error'", ()))
    if "error" in entry and not isinstance(entry["error"], str):
        problems.append(("error is the text of the server's error", ("error",)))
    if "message" in entry:
        if not isinstance(entry["message"], str):
            problems.append(("message is the text of the reply", ("message",)))
        extra = sorted(set(entry) & {"text", "artifacts", "working"})
        if extra:
            problems.append((f"{extra} belong to a task reply ('state'), not to a message", ()))
    if "state" in entry and entry["state"] not in STATES:
        problems.append((f"unknown task state {entry['state']!r}; use one of "
                         f"{', '.join(STATES)}", ("state",)))
    if entry.get("text") is not None and not isinstance(entry["text"], str):
        problems.append(("text must be a string", ("text",)))
    working = entry.get("working")
    if working is not None and not (isinstance(working, str) or (
            isinstance(working, list) and all(isinstance(w, str) for w in working))):
        problems.append(("working is a text or a list of texts", ("working",)))
    problems += _artifact_problems(entry.get("artifacts"))
    problems += _expect_problems(entry.get("expect"))
    return problems


def _artifact_problems(artifacts: Any) -> list[tuple[str, tuple[Any, ...]]]:
    if artifacts is None:
        return []
    if not isinstance(artifacts, list):
        return [("artifacts is a list of {name, text, data}", ("artifacts",))]
    problems: list[tuple[str, tuple[Any, ...]]] = []
    for index, item in enumerate(artifacts):
        where = ("artifacts", index)
        if not isinstance(item, dict) or not item or set(item) - ARTIFACT_KEYS:
            problems.append((f"an artifact is a mapping of {sorted(ARTIFACT_KEYS)}", where))
        elif item.get("data") is not None and not isinstance(item["data"], dict):
            problems.append(("data is a mapping (the artifact's data part)", (*where, "data")))
    return problems


def _expect_problems(expect: Any) -> list[tuple[str, tuple[Any, ...]]]:
    if expect is None:
        return []
    if not isinstance(expect, dict) or set(expect) - EXPECT_KEYS:
        return [(f"expect is a mapping of {sorted(EXPECT_KEYS)}", ("expect",))]
    if expect.get("slots") is not None and not isinstance(expect["slots"], dict):
        return [("expect.slots maps slot names to values", ("expect", "slots"))]
    return []


@dataclass
class ScriptedAgent:
    """The scripted replies of one A2A agent, and what happened to them."""

    name: str
    replies: list[dict[str, Any]]
    used: int = 0
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(text, slots) of every call, health checks left out."""
    problems: list[str] = field(default_factory=list)
    listener: Callable[[str, str, dict[str, Any] | None], None] | None = None
    """Told of every call: (agent name, the text sent, the reply taken or None)."""

    def reset(self, replies: list[dict[str, Any]]) -> None:
        """Start over with ``replies`` (a new test case)."""
        self.replies, self.used, self.calls, self.problems = list(replies), 0, [], []

    def take(self, text: str, slots: dict[str, Any]) -> dict[str, Any] | None:
        """The next reply for a call (None when none is left), checking its ``expect``."""
        self.calls.append((text, slots))
        entry = self._next(text)
        if self.listener is not None:
            self.listener(self.name, text, entry)
        if entry is not None:
            self._check(entry.get("expect") or {}, text, slots)
        return entry

    def _next(self, text: str) -> dict[str, Any] | None:
        if self.used >= len(self.replies):
            self.problems.append(f"unexpected call of {self.name} ({text!r}): "
                                 "no scripted reply left")
            return None
        entry = self.replies[self.used]
        self.used += 1
        return entry

    def _check(self, expect: dict[str, Any], text: str, slots: dict[str, Any]) -> None:
        wanted = expect.get("text_contains")
        for part in [wanted] if isinstance(wanted, str) else wanted or []:
            if str(part) not in text:
                self.problems.append(f"call {self.used} of {self.name}: the message "
                                     f"{text!r} does not contain {part!r}")
        for slot, value in (expect.get("slots") or {}).items():
            if slots.get(slot) != value:
                self.problems.append(f"call {self.used} of {self.name}: slot {slot!r} was "
                                     f"sent as {json.dumps(slots.get(slot))}, expected "
                                     f"{json.dumps(value)}")

    def unused(self) -> list[str]:
        """Replies nobody asked for."""
        return [f"scripted reply {index + 1} of {self.name} was not used"
                for index in range(self.used, len(self.replies))]

    def executor(self) -> Any:
        """An ``a2a-sdk`` executor answering from this script."""
        return _executor(self)


def _is_health_check(message: Any) -> bool:
    """The client's start-up check carries none of the metadata of a conversation's calls."""
    if message is None:
        return False
    return not message.HasField("metadata") or "sender_id" not in message.metadata


def _executor(agent: ScriptedAgent) -> Any:
    from a2a.helpers import get_data_parts, new_text_message
    from a2a.server.agent_execution import AgentExecutor
    from a2a.types import Part

    from subagents.agents.a2a_agent import HEALTH_CHECK_TEXT
    from subagents.server.a2a import cancel_task, task_updater

    class _Executor(AgentExecutor):
        async def execute(self, context: Any, event_queue: Any) -> None:
            message = context.message
            text = context.get_user_input()
            if text == HEALTH_CHECK_TEXT and _is_health_check(message):
                await event_queue.enqueue_event(new_text_message(
                    "ready", context_id=context.context_id, task_id=None))
                return
            slots: dict[str, Any] = {}
            for data in get_data_parts(list(message.parts)) if message is not None else []:
                if isinstance(data, dict) and isinstance(data.get("slots"), dict):
                    slots.update(data["slots"])
            entry = agent.take(text, slots)
            if entry is not None and "error" in entry:
                from a2a.utils.errors import InternalError

                raise InternalError(message=str(entry["error"]))
            if entry is not None and "message" in entry:
                await event_queue.enqueue_event(new_text_message(
                    str(entry["message"]), context_id=context.context_id, task_id=None))
                return
            updater = await task_updater(context, event_queue)
            if entry is None:
                await updater.failed(updater.new_agent_message([Part(text=NO_REPLY_LEFT)]))
                return
            await _task_reply(updater, entry)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            await cancel_task(context, event_queue)

    return _Executor()


async def _task_reply(updater: Any, entry: dict[str, Any]) -> None:
    """Working updates, artifacts, then the final state of a scripted task reply."""
    from a2a.helpers import new_data_part
    from a2a.types import Part

    working = entry.get("working") or []
    for note in [working] if isinstance(working, str) else working:
        await updater.start_work(updater.new_agent_message([Part(text=note)]))
    for item in entry.get("artifacts") or []:
        parts = [Part(text=item["text"])] if item.get("text") else []
        if item.get("data") is not None:
            parts.append(new_data_part(dict(item["data"])))
        await updater.add_artifact(parts, name=item.get("name"))
    status = updater.new_agent_message([Part(text=entry["text"])]) if entry.get("text") else None
    finish = {"input-required": updater.requires_input, "completed": updater.complete,
              "failed": updater.failed, "canceled": updater.cancel,
              "rejected": updater.reject, "auth-required": updater.requires_auth,
              "working": updater.start_work, "submitted": updater.submit}
    await finish[str(entry["state"])](status)


def _card(name: str) -> Any:
    from a2a.types import AgentSkill

    from subagents.server.a2a import agent_card

    return agent_card(name, f"{name} (scripted stand-in)", AgentSkill(
        id="scripted", name="Scripted replies", tags=["test"],
        description="Answers from the test case's a2a_script."))


class A2AStandins:
    """Stand-ins for some A2A agents on one 127.0.0.1 server, reloaded per test case."""

    def __init__(self, names: list[str]) -> None:
        self.agents = {name: ScriptedAgent(name, []) for name in names}
        self.cards: dict[str, str] = {}
        """Agent name -> the URL of its stand-in's agent card (once serving)."""

    def load(self, script: dict[str, list[dict[str, Any]]]) -> dict[str, ScriptedAgent]:
        """Give each agent of ``script`` its replies for the next case; returns those agents."""
        for name, replies in script.items():
            self.agents[name].reset(list(replies or []))
        return {name: self.agents[name] for name in script}

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, str]]:
        """Serve every agent's card and JSON-RPC endpoint; yield the card URLs."""
        from starlette.applications import Starlette

        from subagents.server.a2a import CARD_PATH, a2a_routes
        from subagents.testing.mcp_http import serve_app

        routes = []
        for name, agent in self.agents.items():
            routes += a2a_routes(_card(name), agent.executor(), prefix=f"/{name}")
        # the SDK logs the staged server errors (``error:`` replies) as its own failures
        sdk_log = logging.getLogger("a2a.server")
        level = sdk_log.level
        sdk_log.setLevel(logging.CRITICAL)
        try:
            async with serve_app(Starlette(routes=routes)) as base:
                self.cards = {name: f"{base}/{name}{CARD_PATH}" for name in self.agents}
                yield self.cards
        finally:
            sdk_log.setLevel(level)
