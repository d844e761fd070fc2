"""``subagents test``: run conversation fixtures offline against the scripted model.

One assistant and one fake model server serve a whole run; every test case gets a fresh
conversation (in-memory tracker) and its own script. Test cases without ``llm_script`` use the
configured real models, as in Rasa.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import events as ev
from ..channels.base import CollectingOutputChannel
from ..config.project import ProjectPaths
from ..stores import InMemoryTrackerStore
from .fake_server import FakeModelServer
from .fixtures import AGENT_ASSERTIONS, TestCase


@dataclass
class CaseResult:
    case: TestCase
    passed: bool
    failures: list[str] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    duration: float = 0.0


class _MismatchError(Exception):
    pass


def _bot_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == "bot" and (e.get("text") or
                                                              (e.get("data") or {}).get("buttons"))]


def _describe(message: dict[str, Any]) -> str:
    utter = (message.get("metadata") or {}).get("utter_action")
    return f"{message.get('text')!r}" + (f" ({utter})" if utter else "")


class Runner:
    def __init__(self, project_dir: Path | ProjectPaths) -> None:
        self.project_dir = project_dir
        self.fake: FakeModelServer | None = None
        self._scripted: Any = None
        self._real: Any = None
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _assistant(self, scripted: bool) -> Any:
        from ..dialogue.processor import Assistant

        if scripted and self._scripted is None:
            self.fake = await self._stack.enter_async_context(FakeModelServer())
            self._scripted = await self._stack.enter_async_context(Assistant.load(
                self.project_dir, tracker_store=InMemoryTrackerStore(),
                llm_factory=self.fake.llm_factory(), retry_delays=(0.0,)))
        if not scripted and self._real is None:
            self._real = await self._stack.enter_async_context(Assistant.load(
                self.project_dir, tracker_store=InMemoryTrackerStore()))
        return self._scripted if scripted else self._real

    async def run_case(self, case: TestCase) -> CaseResult:
        started = time.perf_counter()
        result = CaseResult(case=case, passed=False)
        try:
            async with self._prepared(case) as assistant:
                await _Conversation(assistant, case, result).run()
        except _MismatchError as exc:
            result.failures.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - a crashing case fails, the run goes on
            result.failures.append(f"the assistant raised {type(exc).__name__}: {exc}")
        if case.llm_script is not None and self.fake is not None:
            for problem in self.fake.problems():
                result.failures.append(f"model script: {problem}")
                if problem.startswith("expect failed"):
                    result.failures.append(self._request_dump(problem))
        result.passed = not result.failures
        result.duration = time.perf_counter() - started
        return result

    @contextlib.asynccontextmanager
    async def _prepared(self, case: TestCase) -> AsyncIterator[Any]:
        assistant = await self._assistant(case.llm_script is not None)
        if case.llm_script is not None:
            assert self.fake is not None
            self.fake.reset()
            for caller, replies in case.llm_script.items():
                self.fake.add(caller, replies)
        assistant.actions.stubs = dict(case.stubs) if case.stubs else None
        yield assistant

    def _request_dump(self, problem: str) -> str:
        match = re.search(r"for (\S+), request (\d+)", problem)
        if not match or self.fake is None:
            return ""
        requests = self.fake.requests_of(match.group(1))
        index = int(match.group(2)) - 1
        if index >= len(requests):
            return ""
        request = requests[index]
        lines = [f"  the request {match.group(2)} of {match.group(1)} was:",
                 f"    tools: {request.tool_names}"]
        for message in request.messages:
            content = str(message.get("content") or "").replace("\n", " ")
            lines.append(f"    {message.get('role')}: {content[:160]}")
        return "\n".join(lines)


class _Conversation:
    def __init__(self, assistant: Any, case: TestCase, result: CaseResult) -> None:
        self.assistant = assistant
        self.case = case
        self.result = result
        self.sender = f"e2e-{uuid.uuid4().hex[:12]}"
        self.turn_events: list[dict[str, Any]] = []
        self.bots: list[dict[str, Any]] = []
        self.pointer = 0
        self.turns = 0

    async def run(self) -> None:
        if self.case.slot_presets:
            await self.assistant.tracker_store.save_turn(
                self.sender, [ev.slot_set(k, v) for k, v in self.case.slot_presets.items()],
                [], 0)
        for index, step in enumerate(self.case.steps):
            line = self.case.step_lines[index]
            where = f"step {index + 1}" + (f" (line {line})" if line else "")
            try:
                await self.step(step)
                check_assertions(step.get("assertions") or [], self.turn_events,
                                 ordered=bool(step.get("assertion_order_enabled")))
            except _MismatchError as exc:
                raise _MismatchError(f"{where}: {exc}") from None

    async def step(self, step: dict[str, Any]) -> None:
        if "user" in step or "client_tool_result" in step:
            self.check_all_matched()
            await self.send(step)
        elif "bot" in step or "utter" in step:
            self.match_bot(step)
        elif "slot_was_set" in step:
            for name, value, has_value in _slot_items(step["slot_was_set"]):
                if not _slot_set(self.turn_events, name, value, has_value):
                    raise _MismatchError(f"slot {name!r} was not set"
                                    + (f" to {value!r}" if has_value else "")
                                    + f"; slot events this turn: {_slot_events(self.turn_events)}")
        elif "slot_was_not_set" in step:
            for name, value, has_value in _slot_items(step["slot_was_not_set"]):
                if _slot_set(self.turn_events, name, value, has_value):
                    raise _MismatchError(f"slot {name!r} was set" +
                                    (f" to {value!r}" if has_value else ""))

    async def send(self, step: dict[str, Any]) -> None:
        metadata = dict(self.case.metadata)
        if step.get("metadata"):
            metadata.update(self.case.metadata_presets.get(step["metadata"], {}))
        channel = CollectingOutputChannel()
        if "client_tool_result" in step:
            result = step["client_tool_result"]
            text = f"[client tool {result['id']} returned]"
            self.turn_events = await self.assistant.handle_client_tool_results(
                self.sender, [result], channel)
        else:
            text = str(step["user"])
            self.turn_events = await self.assistant.handle_message(self.sender, text,
                                                                   metadata or None, channel)
        self.turns += 1
        self.bots = _bot_messages(self.turn_events)
        self.pointer = 0
        self.result.transcript.append(f"user: {text}")
        self.result.transcript += [f"  bot: {_describe(m)}" for m in self.bots]

    def match_bot(self, step: dict[str, Any]) -> None:
        if self.turns == 0:
            raise _MismatchError("a bot/utter step comes before any user step")
        expected = step.get("bot", step.get("utter"))
        kind = "bot" if "bot" in step else "utter"
        if self.pointer >= len(self.bots):
            raise _MismatchError(f"expected {kind} {expected!r}, but the turn had no more bot "
                            f"messages (got {[_describe(m) for m in self.bots]})")
        message = self.bots[self.pointer]
        actual = message.get("text") if kind == "bot" else \
            (message.get("metadata") or {}).get("utter_action")
        if actual != expected:
            raise _MismatchError(f"expected {kind} {expected!r}, got {_describe(message)}\n"
                            f"  bot messages this turn: {[_describe(m) for m in self.bots]}")
        self.pointer += 1

    def check_all_matched(self) -> None:
        if self.turns and self.pointer < len(self.bots):
            left = [_describe(m) for m in self.bots[self.pointer:]]
            raise _MismatchError(f"unmatched bot messages before the next user step: {left}")


def _slot_items(value: Any) -> list[tuple[str, Any, bool]]:
    items: list[tuple[str, Any, bool]] = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict):
            if "name" in item:
                items.append((str(item["name"]), item.get("value"), "value" in item))
            else:
                items += [(str(k), v, True) for k, v in item.items()]
        else:
            items.append((str(item), None, False))
    return items


def _slot_set(events: list[dict[str, Any]], name: str, value: Any, has_value: bool) -> bool:
    return any(e.get("event") == "slot" and e.get("name") == name and
               (not has_value or e.get("value") == value or str(e.get("value")) == str(value))
               for e in events)


def _slot_events(events: list[dict[str, Any]]) -> list[str]:
    return [f"{e['name']}={e.get('value')!r}" for e in events if e.get("event") == "slot"]


def _flow_match(events: list[dict[str, Any]], kind: str, spec: Any) -> bool:
    flow_id = spec if isinstance(spec, str) else spec.get("flow_id")
    step_id = None if isinstance(spec, str) else spec.get("flow_step_id")
    return any(e.get("event") == kind and e.get("flow_id") == flow_id and
               (step_id is None or e.get("step_id") == step_id) for e in events)


def _bot_match(message: dict[str, Any], spec: dict[str, Any]) -> bool:
    meta = message.get("metadata") or {}
    if spec.get("utter_name") and meta.get("utter_action") != spec["utter_name"]:
        return False
    if spec.get("text_matches") and not re.search(str(spec["text_matches"]),
                                                  str(message.get("text") or "")):
        return False
    if spec.get("buttons") is not None:
        actual = [{"title": b.get("title"), "payload": b.get("payload")}
                  for b in (message.get("data") or {}).get("buttons") or []]
        wanted = [{"title": b.get("title"), "payload": b.get("payload")} for b in spec["buttons"]]
        if actual != wanted:
            return False
    return True


def _args_match(actual: Any, wanted: Any) -> bool:
    if wanted is None:
        return True
    return isinstance(actual, dict) and all(actual.get(k) == v for k, v in wanted.items())


NEGATIVE = {"bot_did_not_utter", "slot_was_not_set"}


def check_assertions(assertions: list[dict[str, Any]], events: list[dict[str, Any]], *,
                     ordered: bool = False) -> None:
    """Every assertion must hold in the turn; with ``ordered`` (Rasa's
    ``assertion_order_enabled``) the positive ones must match events in the order written."""
    position = 0
    for assertion in assertions:
        check_assertion(assertion, events)
        name, spec = next(iter(assertion.items()))
        if not ordered or name in NEGATIVE:
            continue
        index = next((i for i in range(position, len(events))
                      if _holds(name, spec, [events[i]])), None)
        if index is None:
            raise _MismatchError(f"assertion {name}: {spec!r} held, but not after the "
                                 "assertions before it (assertion_order_enabled)")
        position = index + 1


def check_assertion(assertion: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """Raise _MismatchError unless a matching event happened in ``events`` (one turn)."""
    name, spec = next(iter(assertion.items()))
    if _holds(name, spec, events):
        return
    seen = [f"{e.get('event')}:{e.get('flow_id') or e.get('agent_id') or e.get('name') or ''}"
            for e in events]
    raise _MismatchError(f"assertion {name}: {spec!r} did not hold; events this turn: {seen}")


def _holds(name: str, spec: Any, events: list[dict[str, Any]]) -> bool:
    if name in ("flow_started", "flow_completed", "flow_cancelled"):
        return _flow_match(events, name, spec)
    if name == "action_executed":
        return any(e.get("event") == "action" and e.get("name") == spec for e in events)
    if name in ("bot_uttered", "bot_did_not_utter"):
        found = any(_bot_match(m, spec or {}) for m in _bot_messages(events))
        return found if name == "bot_uttered" else not found
    if name in ("slot_was_set", "slot_was_not_set"):
        results = [_slot_set(events, n, v, h) for n, v, h in _slot_items(spec)]
        return all(results) if name == "slot_was_set" else not any(results)
    if name in AGENT_ASSERTIONS:
        return any(e.get("event") == name and e.get("agent_id") == spec.get("agent_id") and
                   (spec.get("flow_id") is None or e.get("flow_id") == spec["flow_id"])
                   for e in events)
    if name == "tool_executed":
        return any(e.get("event") == "mcp_tool_executed" and e.get("tool_name") ==
                   spec.get("tool_name") and _args_match(e.get("arguments"), spec.get("arguments"))
                   and (spec.get("is_error") is None or e.get("is_error") == spec["is_error"])
                   for e in events)
    if name == "client_tool_requested":
        return any(e.get("event") == "agent_client_tool_requested" and
                   e.get("tool_name") == spec.get("tool_name") and
                   _args_match(e.get("arguments"), spec.get("arguments")) for e in events)
    return False
