"""``subagents test``: run conversation tests against an assistant, offline with a scripted model.

One assistant and one fake model server serve a whole run; every test case gets a fresh
conversation (in-memory tracker) and its own script. Test cases without ``llm_script`` use the
configured real models, as in Rasa.

With the response rephraser on (``nlg: {type: rephrase}``), a scripted case without a
``rephraser`` script sends every response as written (the run's notices say so once); ``utter:``
steps match a response whether or not it was rephrased.

Matching follows Rasa's runner by default: a ``bot``/``utter``/slot step passes when some event
of the latest user turn matches it (extra bot messages are fine), and a case with assertions on a
user step is judged by its assertions only. Strict mode (``strict: true`` in a file, or
``Runner(strict=True)``) also requires every bot message of a turn to be matched, in order.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from subagents import events as ev
from subagents.channels.collecting import CollectingOutputChannel
from subagents.config.project import ProjectPaths
from subagents.dialogue.builtin_actions import session_start_events
from subagents.exceptions import ConfigError, ConfigIssue
from subagents.stores import InMemoryTrackerStore
from subagents.testing.assertions import (
    AGENT_HOOKS,
    GENERATIVE,
    NEGATIVE,
    AssertionFailed,
    Window,
    bot_messages,
    check,
)
from subagents.testing.diff import near_miss, side_by_side
from subagents.testing.fake_server import FakeModelServer
from subagents.testing.fixtures import TestCase
from subagents.testing.judge import (
    DEFAULT_JUDGE_EMBEDDINGS,
    DEFAULT_JUDGE_LLM,
    EMBEDDINGS_CALLER,
    JUDGE_CALLER,
    Judge,
)
from subagents.testing.live_model import LiveModelCheck
from subagents.testing.simulated_user import SIMULATED_USER_CALLER, SimulatedUser

REPHRASER_CALLER = "rephraser"
UNSCRIPTED_REPHRASER = ("the project rephrases responses (nlg: rephrase), and {count} scripted "
                        "test case(s) have no rephraser script: their responses were sent as "
                        "written; add rephraser replies to a case's llm_script to test "
                        "rephrased text")
INTERNAL_ERROR_PATTERN = "pattern_internal_error"
INTERNAL_ERROR_UTTER = "utter_internal_error_rasa"
OFFLINE_HINT = ("this test case has no llm_script and no API key is set: add an llm_script "
                "with the replies of command_generator (and of each agent it reaches) to run "
                "it offline, or export OPENAI_API_KEY")


@dataclass
class CaseResult:
    """The outcome of one test case."""

    case: TestCase
    passed: bool
    failures: list[str] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    duration: float = 0.0
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Informative lines (e.g. the scores of generative assertions)."""


class _MismatchError(Exception):
    pass


def _describe(message: dict[str, Any]) -> str:
    utter = (message.get("metadata") or {}).get("utter_action")
    return f"{message.get('text')!r}" + (f" ({utter})" if utter else "")


class _TimedChannel(CollectingOutputChannel):
    """Collects output and when the first text of the turn arrived."""

    def __init__(self, *, streaming: bool) -> None:
        super().__init__(streaming=streaming)
        self.started = time.perf_counter()
        self.first_text_ms: float | None = None

    def _mark(self) -> None:
        if self.first_text_ms is None:
            self.first_text_ms = (time.perf_counter() - self.started) * 1000

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        self._mark()
        await super().send_text_message(recipient_id, text, **kwargs)

    async def send_response_chunk(self, recipient_id: str, chunk: str) -> None:
        if chunk.strip():
            self._mark()
        await super().send_response_chunk(recipient_id, chunk)

    @property
    def chunk_count(self) -> int:
        return sum(1 for kind, _ in self.log if kind == "chunk")


@dataclass
class _Turn:
    step_index: int | None
    """Index of the user step that started this turn; None for the events before any."""
    events: list[dict[str, Any]]
    channel: _TimedChannel | None = None
    hook_calls: list[tuple[str, str]] = field(default_factory=list)
    """(agent name, hook) of every agent hook called during the turn."""


_ERROR_LEVELS = {"error", "exception", "critical", "fatal"}
_CAPTURED_LEVELS = {*_ERROR_LEVELS, "warning", "warn"}
_MAX_EVENTS_SHOWN = 40


@contextlib.contextmanager
def _capture_errors() -> Iterator[list[dict[str, Any]]]:
    """Record every warning- and error-level log event (structlog) while the block runs."""
    captured: list[dict[str, Any]] = []

    def processor(logger: Any, method: str, event_dict: Any) -> Any:
        if method in _CAPTURED_LEVELS and isinstance(event_dict, dict):
            record = {k: v for k, v in event_dict.items() if k != "exc_info"}
            captured.append({**record, "_level": method})
        return event_dict

    processors = structlog.get_config()["processors"]
    processors.insert(0, processor)
    try:
        yield captured
    finally:
        with contextlib.suppress(ValueError):
            processors.remove(processor)


class Runner:
    """Runs test cases against one project. ``async with Runner(dir) as runner:``."""

    def __init__(self, project_dir: Path | ProjectPaths, *, strict: bool = False,
                 live_model: bool = False) -> None:
        self.project_dir = project_dir
        self.strict = strict
        """Strict matching for cases whose file does not say (``--strict``)."""
        self.fake: FakeModelServer | None = None
        self._scripted: Any = None
        self._real: Any = None
        self._judges: dict[tuple[bool, str], Judge] = {}
        self._simulators: dict[tuple[bool, str], Any] = {}
        self.hook_calls: list[tuple[str, str]] = []
        """(agent name, hook) of every agent hook call, in order."""
        self.live_model = live_model
        """Ignore ``llm_script``: the configured models answer (``--live-model``)."""
        self._live_check = LiveModelCheck(project_dir)
        self.replays: dict[str, Any] = {}
        """The replay stand-ins of the case that ran last (``tool_script``)."""
        self.a2a_standins: dict[str, Any] = {}
        """The A2A stand-ins of the case that ran last (``a2a_script``)."""
        self._standins: Any = None
        self._a2a_assistants: dict[tuple[bool, frozenset[str]], Any] = {}
        self._stack = contextlib.AsyncExitStack()
        self._index_root: Path | None = None
        self.unscripted_rephraser: set[str] = set()
        """Scripted cases (``file::name``) whose responses went out as written because they
        script no rephraser."""

    @property
    def notices(self) -> list[str]:
        """What the run as a whole should tell its reader, once (e.g. responses that were not
        rephrased)."""
        if not self.unscripted_rephraser:
            return []
        return [UNSCRIPTED_REPHRASER.format(count=len(self.unscripted_rephraser))]

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for judge in self._judges.values():
            await judge.close()
        for client in self._simulators.values():
            await client.close()
        await self._stack.aclose()

    async def _assistant(self, scripted: bool) -> Any:
        from subagents.dialogue.processor import Assistant

        if scripted and self._scripted is None:
            self.fake = await self._stack.enter_async_context(FakeModelServer())
            self._scripted = await self._stack.enter_async_context(Assistant.load(
                self.project_dir, tracker_store=InMemoryTrackerStore(),
                llm_factory=self.fake.llm_factory(), retry_delays=(0.0,),
                search_index_root=self._scripted_index_root()))
            self._count_hooks(self._scripted)
        if not scripted and self._real is None:
            self._real = await self._stack.enter_async_context(Assistant.load(
                self.project_dir, tracker_store=InMemoryTrackerStore()))
            self._count_hooks(self._real)
        return self._scripted if scripted else self._real

    def _scripted_index_root(self) -> Path:
        """Where scripted assistants keep the search index: its vectors come from the fake
        server, so it must not replace the project's own (built with the real embeddings)."""
        if self._index_root is None:
            self._index_root = Path(self._stack.enter_context(
                tempfile.TemporaryDirectory(prefix="subagents-test-index-")))
        return self._index_root

    def _count_hooks(self, assistant: Any) -> None:
        """Record each call of an agent hook (the hook itself runs unchanged)."""
        for agent in assistant.agents.values():
            for hook in AGENT_HOOKS:
                method = getattr(agent, hook, None)
                if callable(method):
                    setattr(agent, hook, _counted(method, agent.name, hook, self.hook_calls))

    async def run_case(self, case: TestCase) -> CaseResult:
        """Run one test case; never raises for a failing or crashing case."""
        started = time.perf_counter()
        result = CaseResult(case=case, passed=False)
        if case.problems:
            result.failures += [p.format() for p in case.problems]
            result.duration = time.perf_counter() - started
            return result
        live_problem = await self._live_check.problem() if self.live_model else None
        if live_problem:  # one clear failure instead of a difference at every step
            result.failures.append(live_problem)
            result.duration = time.perf_counter() - started
            return result
        conversation: _Conversation | None = None
        with _capture_errors() as errors:
            try:
                async with self._prepared(case) as assistant:
                    strict = self.strict if case.strict is None else case.strict
                    conversation = _Conversation(assistant, case, result, strict, self)
                    await conversation.run()
            except _MismatchError as exc:
                result.failures.append(str(exc))
            except ConfigError as exc:
                result.failures.append(f"the assistant raised ConfigError: {exc}")
                if exc.issue.code == "llm.api_key_missing" and case.llm_script is None:
                    result.failures.append(OFFLINE_HINT)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - a crashing case fails, the run goes on
                result.failures.append(f"the assistant raised {type(exc).__name__}: {exc}")
                remote = getattr(exc, "agent_name", None)
                if remote is not None and remote not in (case.a2a_script or {}):
                    result.failures.append(
                        f"the A2A agent {remote!r} could not connect: to run this case without "
                        f"its remote side, add a2a_script: {{{remote}: [...]}} to the case, or "
                        "once at the top of the file")
        events = conversation.all_events if conversation else []
        result.failures += _unexpected_errors(case, errors, events)
        self._script_problems(case, result)
        if not result.passed and case.llm_script is None and OFFLINE_HINT not in \
                result.failures and _key_missing(errors, result.failures):
            result.failures.append(OFFLINE_HINT)
        result.passed = not result.failures
        result.duration = time.perf_counter() - started
        return result

    def _script_problems(self, case: TestCase, result: CaseResult) -> None:
        standins, self.a2a_standins = self.a2a_standins, {}
        for agent in standins.values():
            result.failures += [f"a2a script: {line}" for line in
                                [*agent.problems, *agent.unused()]]
        if case.tool_script is not None:
            replays, self.replays = self.replays, {}
            for server in replays.values():
                lines = [*server.problems, *server.unused()]
                if self._scripted_case(case):
                    result.failures += [f"tool script: {line}" for line in lines]
                else:
                    result.notes += [f"tool script: {line}" for line in lines]
        if not self._scripted_case(case) or self.fake is None:
            return
        for problem in self.fake.problems():
            result.failures.append(f"model script: {problem}")
            if problem.startswith("expect failed"):
                result.failures.append(self._request_dump(problem))

    @contextlib.asynccontextmanager
    async def _prepared(self, case: TestCase) -> AsyncIterator[Any]:
        scripted = self._scripted_case(case)
        if case.tool_script is not None:
            async with self._replaying(case, scripted) as assistant:
                yield assistant
            return
        if case.a2a_script is not None:
            assistant = await self._a2a_assistant(scripted, case.a2a_script)
            self.a2a_standins = self._standins.load(case.a2a_script)
        else:
            assistant = await self._assistant(scripted)
        self._load_script(case)
        assistant.actions.stubs = dict(case.stubs) if case.stubs else None
        self._rephrasing(assistant, case)
        yield assistant

    def _rephrasing(self, assistant: Any, case: TestCase) -> None:
        """A scripted case without a ``rephraser`` script gets its responses as written."""
        rephraser = assistant.executor.responder.rephraser
        if rephraser is None:
            return
        rephraser.enabled = not self._scripted_case(case) or \
            REPHRASER_CALLER in (case.llm_script or {})
        if not rephraser.enabled:
            self.unscripted_rephraser.add(f"{case.file}::{case.name}")

    def _scripted_case(self, case: TestCase) -> bool:
        return case.llm_script is not None and not self.live_model

    def _load_script(self, case: TestCase) -> None:
        if not self._scripted_case(case):
            return
        assert self.fake is not None
        assert case.llm_script is not None
        self.fake.reset()
        for caller, replies in case.llm_script.items():
            self.fake.add(caller, replies)

    @contextlib.asynccontextmanager
    async def _replaying(self, case: TestCase, scripted: bool) -> AsyncIterator[Any]:
        """A fresh assistant for a case with ``tool_script`` (every MCP server is a replay
        stand-in serving the recorded tool results; nothing of the real servers runs) and/or
        ``a2a_script`` (each A2A agent it names points at a local stand-in)."""
        from subagents.config.project import load_project
        from subagents.dialogue.processor import Assistant

        project = load_project(self.project_dir)
        kwargs: dict[str, Any] = {"tracker_store": InMemoryTrackerStore()}
        if scripted:
            if self.fake is None:
                self.fake = await self._stack.enter_async_context(FakeModelServer())
            kwargs.update(llm_factory=self.fake.llm_factory(), retry_delays=(0.0,),
                          search_index_root=self._scripted_index_root())
        if case.a2a_script is not None:  # the run's stand-ins start before the case's servers
            await self._point_at_standins(project, case.a2a_script)
            self.a2a_standins = self._standins.load(case.a2a_script)
        async with contextlib.AsyncExitStack() as stack:
            if case.tool_script is not None:
                from subagents.testing.tool_replay import replay_servers

                names = [s.name for s in project.endpoints.mcp_servers or []]
                timeouts = {s.name: s.timeout for s in project.endpoints.mcp_servers or []}
                servers, configs = await stack.enter_async_context(
                    replay_servers(case.tool_script, names, timeouts))
                project.endpoints.mcp_servers = configs
                self.replays = servers
            self._load_script(case)
            async with Assistant(project, **kwargs) as assistant:
                self._count_hooks(assistant)
                assistant.actions.stubs = dict(case.stubs) if case.stubs else None
                self._rephrasing(assistant, case)
                yield assistant

    async def _a2a_assistant(self, scripted: bool, script: dict[str, Any]) -> Any:
        """The assistant (kept for the run) whose A2A agents named in ``script`` use the
        stand-ins; cases that script the same agents share it, as plain cases share theirs."""
        from subagents.config.project import load_project
        from subagents.dialogue.processor import Assistant

        key = (scripted, frozenset(script))
        if key not in self._a2a_assistants:
            project = load_project(self.project_dir)
            await self._point_at_standins(project, script)
            kwargs: dict[str, Any] = {"tracker_store": InMemoryTrackerStore()}
            if scripted:
                if self.fake is None:
                    self.fake = await self._stack.enter_async_context(FakeModelServer())
                kwargs.update(llm_factory=self.fake.llm_factory(), retry_delays=(0.0,),
                              search_index_root=self._scripted_index_root())
            assistant = await self._stack.enter_async_context(Assistant(project, **kwargs))
            self._count_hooks(assistant)
            self._a2a_assistants[key] = assistant
        return self._a2a_assistants[key]

    async def _point_at_standins(self, project: Any, script: dict[str, Any]) -> None:
        """Point each A2A agent of ``script`` at its stand-in (its auth goes with the remote
        it replaces); the project's other agents keep their configuration."""
        from subagents.testing.a2a_replay import A2AStandins

        a2a = [name for name, spec in project.agents.items()
               if spec.config.agent.protocol.value == "A2A"]
        unknown = sorted(set(script) - set(a2a))
        if unknown:
            raise ConfigError(ConfigIssue(
                "e2e.a2a_script.unknown_agent", f"a2a_script names {', '.join(unknown)}, "
                "which is not a protocol A2A agent of the project",
                hint="name the A2A agents by their agent.name"))
        if self._standins is None:
            standins = A2AStandins(a2a)
            await self._stack.enter_async_context(standins.serving())
            self._standins = standins
        for name in script:
            configuration = project.agents[name].config.configuration
            configuration.agent_card = self._standins.cards[name]
            configuration.auth = None

    def judge(self, case: TestCase, assistant: Any) -> Judge:
        """The judge for generative assertions of ``case`` (scripted when the case is)."""
        from subagents.llm import build_model, resolve_model_settings

        config = case.judge or {}
        scripted = self._scripted_case(case)
        key = (scripted, json.dumps(config, sort_keys=True, default=str))
        if key not in self._judges:
            endpoints = assistant.project.endpoints
            llm = resolve_model_settings(config.get("llm") or DEFAULT_JUDGE_LLM, endpoints,
                                         where="conftest.yml")
            emb = resolve_model_settings(config.get("embeddings") or DEFAULT_JUDGE_EMBEDDINGS,
                                         endpoints, where="conftest.yml")
            if scripted and self.fake is not None:
                factory = self.fake.llm_factory()
                self._judges[key] = Judge(factory(JUDGE_CALLER, llm),
                                          factory(EMBEDDINGS_CALLER, emb))
            else:
                self._judges[key] = Judge(build_model(llm, name=JUDGE_CALLER),
                                          build_model(emb, name=EMBEDDINGS_CALLER))
        return self._judges[key]

    def simulated_user_llm(self, case: TestCase, assistant: Any) -> Any:
        """The model that plays the simulated user of ``case`` (scripted when the case is)."""
        from subagents.llm import build_model, resolve_model_settings

        spec = case.simulated_user or {}
        scripted = self._scripted_case(case)
        key = (scripted, json.dumps(spec.get("llm"), sort_keys=True, default=str))
        if key not in self._simulators:
            settings = resolve_model_settings(spec.get("llm") or DEFAULT_JUDGE_LLM,
                                              assistant.project.endpoints, where=case.file)
            if scripted and self.fake is not None:
                client = self.fake.llm_factory()(SIMULATED_USER_CALLER, settings)
            else:
                client = build_model(settings, name=SIMULATED_USER_CALLER)
            self._simulators[key] = client
        return self._simulators[key]

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


def _counted(method: Any, agent: str, hook: str, calls: list[tuple[str, str]]) -> Any:
    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def counted_async(*args: Any, **kwargs: Any) -> Any:
            calls.append((agent, hook))
            return await method(*args, **kwargs)
        return counted_async

    @functools.wraps(method)
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append((agent, hook))
        return method(*args, **kwargs)
    return counted


def _expects_internal_error(case: TestCase) -> bool:
    if {"*", INTERNAL_ERROR_PATTERN} & set(case.expected_errors):
        return True
    for step in case.steps:
        if step.get("utter") == INTERNAL_ERROR_UTTER:
            return True
        for assertion in step.get("assertions") or []:
            name, spec = next(iter(assertion.items()))
            text = json.dumps(spec, default=str)
            if name not in NEGATIVE and (INTERNAL_ERROR_PATTERN in text or
                                         INTERNAL_ERROR_UTTER in text):
                return True
    return False


def _unexpected_errors(case: TestCase, errors: list[dict[str, Any]],
                       events: list[dict[str, Any]]) -> list[str]:
    """Runtime errors of the case that it did not declare in ``expected_errors``."""
    allowed = set(case.expected_errors)
    failures = []
    by_name: dict[str, list[dict[str, Any]]] = {}
    for record in errors:
        if record.get("_level") in _ERROR_LEVELS:
            by_name.setdefault(str(record.get("event")), []).append(record)
    for name, records in by_name.items():
        if "*" in allowed or name in allowed:
            continue
        data = ", ".join(f"{k}={v!r}" for k, v in records[0].items()
                         if k not in ("event", "timestamp", "logger", "level", "_level"))
        times = f" {len(records)} times, first" if len(records) > 1 else ""
        failures.append(f"the assistant logged an error{times}: {name} ({data}); list it "
                        f"under expected_errors if the case expects it")
    internal = [e for e in events if e.get("event") == "flow_started" and
                e.get("flow_id") == INTERNAL_ERROR_PATTERN]
    if internal and not _expects_internal_error(case):
        reasons = list(dict.fromkeys(str(r["error"]) for r in errors if r.get("error")))
        why = "; ".join(reasons[:3]) or "something failed inside the assistant"
        failures.append(f"{INTERNAL_ERROR_PATTERN} ran {len(internal)} time(s) ({why}); expect "
                        f"it with utter: {INTERNAL_ERROR_UTTER} or expected_errors: "
                        f"[{INTERNAL_ERROR_PATTERN}]")
    return failures


def _key_missing(errors: list[dict[str, Any]], failures: list[str]) -> bool:
    if os.environ.get("OPENAI_API_KEY"):
        return False
    text = json.dumps(errors, default=str) + "\n".join(failures)
    return "api_key_missing" in text or "no API key" in text


class _Conversation:
    def __init__(self, assistant: Any, case: TestCase, result: CaseResult, strict: bool,
                 runner: Runner) -> None:
        self.assistant = assistant
        self.case = case
        self.result = result
        self.strict = strict
        self.runner = runner
        self.sender = f"e2e-{uuid.uuid4().hex[:12]}"
        self.turns: list[_Turn] = [_Turn(None, [])]
        self.turn_of_step: dict[int, _Turn] = {}
        self.pointer = 0
        self.stopped: str | None = None
        """Why the run stopped sending user messages (Rasa's fail-fast on a mismatch)."""
        self.mismatch: str | None = None
        self.differences: list[str] = []
        """With ``--live-model``: every step that did not match (the run goes on)."""

    @property
    def current(self) -> _Turn:
        return self.turns[-1]

    @property
    def all_events(self) -> list[dict[str, Any]]:
        return [e for turn in self.turns for e in turn.events]

    def where(self, index: int) -> str:
        line = self.case.step_lines[index]
        return f"step {index + 1}" + (f" (line {line})" if line else "")

    async def run(self) -> None:
        if self.case.slot_presets:
            # as in Rasa, the conversation's session starts before the fixtures' slots are set
            presets = [*session_start_events(),
                       *(ev.slot_set(k, v) for k, v in self.case.slot_presets.items())]
            await self.assistant.tracker_store.save_turn(self.sender, presets, [], 0)
            self.current.events += presets
        if self.case.simulated_user is not None:
            await self.run_simulated(self.case.simulated_user)
            return
        for index, step in enumerate(self.case.steps):
            if "user" in step or "client_tool_result" in step:
                if self.stopped or self.mismatch:
                    continue
                if self.strict:
                    self.check_all_matched(index)
                    if self.mismatch:
                        continue
                if "user" in step and not str(step["user"]).strip():
                    self.result.warnings.append(f"{self.where(index)}: empty user message "
                                                "skipped")
                    continue
                await self.send(step, index)
                if "client_tool_result" in step:
                    await self.step_assertions(index, step)
            elif not (self.stopped or self.mismatch):
                self.expect(index, step)
                await self.step_assertions(index, step)
        await self.user_step_assertions()
        self.raise_mismatch()

    def raise_mismatch(self) -> None:
        """Fail with the differences (``--live-model``) or the first mismatch, if any."""
        if self.differences:
            raise _MismatchError(f"{len(self.differences)} difference(s) with the live model, "
                                 "step by step:\n" + "\n".join(f"  {d}" for d in
                                                                 self.differences))
        if self.mismatch:
            raise _MismatchError(self.mismatch)

    async def run_simulated(self, spec: dict[str, Any]) -> None:
        """A model plays the user until it reaches the goal, gives up, or runs out of turns;
        then the case's ``simulated_user.assertions`` are judged on the whole conversation."""
        user = SimulatedUser(spec, self.runner.simulated_user_llm(self.case, self.assistant))
        history: list[tuple[str, str]] = []
        sent = 0
        while True:
            reply = await user.next(history)
            if reply.text is None:
                if not reply.reached:
                    raise _MismatchError(f"the simulated user gave up after {sent} message(s) "
                                         f"(goal: {user.goal!r})")
                break
            if sent >= user.max_turns:
                raise _MismatchError(f"the simulated user did not reach the goal within "
                                     f"max_turns={user.max_turns} (goal: {user.goal!r})")
            channel = _TimedChannel(streaming=self.case.streaming)
            events = await self.assistant.handle_message(self.sender, reply.text,
                                                         dict(self.case.metadata) or None,
                                                         channel)
            sent += 1
            self.turns.append(_Turn(None, list(events), channel))
            self.result.transcript.append(f"user (simulated): {reply.text}")
            self.result.transcript += [f"  bot: {_describe(m)}" for m in bot_messages(events)]
            history.append(("user", reply.text))
            history += [("bot", str(m.get("text"))) for m in bot_messages(events)
                        if m.get("text")]
        window = Window(self.all_events, [], False, "")
        for assertion in spec.get("assertions") or []:
            name, value = next(iter(assertion.items()))
            try:
                await self.judge_one(name, value, window, None)
            except AssertionFailed as exc:
                raise _MismatchError(f"simulated_user assertion {name} failed: {exc}") from exc

    # ------------------------------------------------------------------ sending
    async def send(self, step: dict[str, Any], index: int) -> None:
        metadata = dict(self.case.metadata)
        if step.get("metadata"):
            preset = self.case.metadata_presets.get(step["metadata"], {})
            overridden = sorted(set(metadata) & set(preset))
            if overridden:
                self.result.warnings.append(f"{self.where(index)}: the step's metadata "
                                            f"overrides the test case's {overridden}")
            metadata.update(preset)
        channel = _TimedChannel(streaming=self.case.streaming)
        calls_before = len(self.runner.hook_calls)
        if "client_tool_result" in step:
            result = step["client_tool_result"]
            text = f"[client tool {result['id']} returned]"
            events = await self.assistant.handle_client_tool_results(self.sender, [result],
                                                                     channel)
        else:
            text = str(step["user"])
            events = await self.assistant.handle_message(self.sender, text, metadata or None,
                                                         channel)
        turn = _Turn(index, list(events), channel, self.runner.hook_calls[calls_before:])
        self.turns.append(turn)
        self.turn_of_step[index] = turn
        self.pointer = 0
        self.result.transcript.append(f"user: {text}")
        self.result.transcript += [f"  bot: {_describe(m)}" for m in bot_messages(events)]

    # ------------------------------------------------------------------ bot / utter / slots
    def expect(self, index: int, step: dict[str, Any]) -> None:
        problem = self.strict_problem(step) if self.strict and ("bot" in step or "utter" in step) \
            else self.rasa_problem(step)
        if problem is None:
            return
        text = f"{self.where(index)}: {problem}\n{self.turn_table(index)}"
        if self.runner.live_model:
            self.differences.append(f"{self.where(index)}: {problem}")
        elif self.case.assertion_style and not self.strict:
            self.stopped = text
        else:
            self.mismatch = text

    def rasa_problem(self, step: dict[str, Any]) -> str | None:
        events = self.current.events
        messages = bot_messages(events)
        if "bot" in step:
            if any(_bot_text_matches(step["bot"], m) for m in messages):
                return None
            return _bot_problem(step["bot"], messages)
        if "utter" in step:
            if any((m.get("metadata") or {}).get("utter_action") == step["utter"]
                   for m in messages):
                return None
            return f"expected utter {step['utter']!r}; bot messages this turn: " \
                   f"{_described(messages)}"
        kind = "slot_was_set" if "slot_was_set" in step else "slot_was_not_set"
        for name, value, has_value in _slot_items(step[kind]):
            found = _slot_set(events, name, value, has_value)
            if found != (kind == "slot_was_set"):
                return f"slot {name!r} was {'not ' if not found else ''}set" + \
                    (f" to {value!r}" if has_value else "") + \
                    f"; slot events this turn: {_slot_events(events) or 'none'}"
        return None

    def strict_problem(self, step: dict[str, Any]) -> str | None:
        messages = bot_messages(self.current.events)
        kind = "bot" if "bot" in step else "utter"
        expected = step[kind]
        if self.pointer >= len(messages):
            return f"expected {kind} {expected!r}, but the turn had no more bot messages " \
                   f"(got {[_describe(m) for m in messages]})"
        message = messages[self.pointer]
        if kind == "bot":
            ok = _bot_text_matches(expected, message)
        else:
            ok = (message.get("metadata") or {}).get("utter_action") == expected
        if not ok:
            detail = near_miss(expected, str(message.get("text") or "")) \
                if kind == "bot" and isinstance(expected, str) else ""
            return f"expected {kind} {expected!r}, got {_describe(message)}" + \
                (f"\n{detail}" if detail else "")
        self.pointer += 1
        return None

    def check_all_matched(self, index: int) -> None:
        messages = bot_messages(self.current.events)
        if self.current.step_index is not None and self.pointer < len(messages):
            left = [_describe(m) for m in messages[self.pointer:]]
            if self.runner.live_model:
                self.differences.append(f"{self.where(index)}: unmatched bot messages {left}")
                self.pointer = len(messages)
                return
            self.mismatch = (f"{self.where(index)}: unmatched bot messages before the next "
                             f"user step (strict mode): {left}\n{self.turn_table(index)}")

    def turn_table(self, index: int) -> str:
        """Expected steps of the turn around step ``index`` beside the turn's events."""
        start = self.current.step_index
        first = 0 if start is None else start + 1
        last = next((i for i in range(index + 1, len(self.case.steps))
                     if "user" in self.case.steps[i]), len(self.case.steps))
        expected = []
        for i in range(first, last):
            step = self.case.steps[i]
            kind = next(k for k in step if k not in ("metadata", "assertions",
                                                     "assertion_order_enabled"))
            mark = ">" if i == index else " "
            expected.append(f"{mark} {kind}: {json.dumps(step[kind], default=str)}")
        actual = []
        for event in self.current.events:
            if event.get("event") == "bot":
                actual.append(f"bot: {_describe(event)}")
            elif event.get("event") == "slot":
                actual.append(f"slot_was_set: {event.get('name')}={event.get('value')!r}")
        return side_by_side(expected, actual)

    # ------------------------------------------------------------------ assertions
    async def step_assertions(self, index: int, step: dict[str, Any]) -> None:
        """Assertions on a non-user step (our extension): judged on the current turn."""
        if not step.get("assertions") or self.mismatch:
            return
        user_step = self.current.step_index
        text = "" if user_step is None else str(self.case.steps[user_step].get("user", ""))
        window = Window(self.current.events, [], False, text)
        failure = await self.judge_all(step, window, self.current)
        if failure:
            self.mismatch = f"{self.where(index)}: {failure}"

    async def user_step_assertions(self) -> None:
        """Rasa's assertion check: each user step's assertions, in order, on its window."""
        everything = self.all_events
        seen: dict[str, int] = {}
        for index, step in enumerate(self.case.steps):
            if "user" not in step or not step.get("assertions"):
                continue
            text = str(step["user"])
            wanted = self.case.metadata_presets.get(step.get("metadata") or "", {})
            if text in seen and not step.get("metadata"):
                self.result.warnings.append(
                    f"{self.where(index)}: the user text {text!r} also appears at step "
                    f"{seen[text] + 1}; its assertions are judged on the first occurrence")
            seen.setdefault(text, index)
            window = _window(everything, text, wanted, first_step=index == 0)
            if window is None:
                reason = f" (the run stopped at {self.stopped})" if self.stopped else ""
                raise _MismatchError(f"{self.where(index)}: the user message {text!r} was "
                                     f"never sent{reason}")
            failure = await self.judge_all(step, window, self.turn_of_step.get(index))
            if failure:
                raise _MismatchError(f"{self.where(index)}: {failure}")

    async def judge_all(self, step: dict[str, Any], window: Window,
                        turn: _Turn | None) -> str | None:
        ordered = bool(step.get("assertion_order_enabled"))
        events = window.events
        for number, assertion in enumerate(step["assertions"]):
            name, spec = next(iter(assertion.items()))
            current = Window(events, window.prior, window.first_step, window.user_text)
            try:
                match = await self.judge_one(name, spec, current, turn)
            except AssertionFailed as exc:
                suffix = " (assertion_order_enabled: a matching event may exist, but not " \
                    "after the assertions before it)" if ordered and events is not window.events \
                    else ""
                return f"assertion {name} failed: {exc}{suffix}\n" + _assertion_table(
                    step["assertions"], number, window)
            if ordered and match is not None:
                position = next(i for i, e in enumerate(events) if e is match)
                events = events[position + 1:]
        return None

    async def judge_one(self, name: str, spec: Any, window: Window,
                        turn: _Turn | None) -> dict[str, Any] | None:
        """Judge one assertion; the matching event, None, or AssertionFailed."""
        if name == "streamed":
            _streamed(spec, turn)
            return None
        if name == "hook_called":
            _hook_called(spec, turn)
            return None
        if name not in GENERATIVE:
            return check(name, spec, window)
        try:
            judge = self.runner.judge(self.case, self.assistant)
        except ConfigError as exc:
            raise AssertionFailed(f"the judge is misconfigured (llm_judge in conftest.yml): "
                                  f"{exc}") from exc
        self.result.notes.append(await judge.judge(name, spec, window,
                                                   _domain_texts(self.assistant)))
        return None


def _window(events: list[dict[str, Any]], text: str, metadata: dict[str, Any],
            *, first_step: bool) -> Window | None:
    """Rasa's window: from the first matching user message to the next user message with a
    different text."""
    start = next((i for i, e in enumerate(events) if e.get("event") == "user" and
                  e.get("text") == text and all((e.get("metadata") or {}).get(k) == v
                                                for k, v in metadata.items())), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(events)) if events[i].get("event") == "user"
                and events[i].get("text") != text), len(events))
    return Window(events[start + 1:end], events[:start], first_step, text)


def _streamed(spec: dict[str, Any], turn: _Turn | None) -> None:
    channel = turn.channel if turn else None
    if channel is None:
        raise AssertionFailed("streamed is judged on the turn of a user step")
    if not channel.supports_streaming:
        raise AssertionFailed("the case does not stream; add 'streaming: true' to it")
    chunks = channel.chunk_count
    if chunks < int(spec.get("min_chunks", 1)):
        raise AssertionFailed(f"{chunks} chunk(s) streamed, expected at least "
                              f"{spec.get('min_chunks', 1)}")
    limit = spec.get("max_first_text_ms")
    if limit is not None and (channel.first_text_ms is None or
                              channel.first_text_ms > float(limit)):
        raise AssertionFailed(f"the first text came after {channel.first_text_ms} ms, "
                              f"expected within {limit} ms")
    if spec.get("text_matches"):
        streamed = "".join(str(value) for kind, value in channel.log if kind == "chunk")
        if not re.search(str(spec["text_matches"]), streamed):
            raise AssertionFailed(f"the streamed text {streamed!r} does not match "
                                  f"{spec['text_matches']!r}")


def _hook_called(spec: dict[str, Any], turn: _Turn | None) -> None:
    calls = [agent for agent, hook in (turn.hook_calls if turn else [])
             if hook == spec["hook"] and spec.get("agent_id") in (None, agent)]
    times = spec.get("times")
    if (times is None and not calls) or (times is not None and len(calls) != int(times)):
        raise AssertionFailed(f"{spec['hook']} was called {len(calls)} time(s)" + (
            f" for {spec['agent_id']!r}" if spec.get("agent_id") else "") +
            (f", expected {times}" if times is not None else ", expected at least once"))


def _domain_texts(assistant: Any) -> dict[str, list[str]]:
    responses = assistant.project.domain.responses
    return {name: [str(v.text) for v in variations if getattr(v, "text", None)]
            for name, variations in responses.items()}


def _assertion_table(assertions: list[dict[str, Any]], failed: int, window: Window) -> str:
    """The step's assertions (the failing one marked) beside the events they looked at."""
    left = []
    for number, assertion in enumerate(assertions):
        name, spec = next(iter(assertion.items()))
        mark = ">" if number == failed else " "
        left.append(f"{mark} {name}: {json.dumps(spec, default=str)}")
    shown = [*(window.prior if window.first_step else []), *window.events]
    right = []
    if len(shown) > _MAX_EVENTS_SHOWN:
        right.append(f"... {len(shown) - _MAX_EVENTS_SHOWN} earlier events not shown")
        shown = shown[-_MAX_EVENTS_SHOWN:]
    right += [_event_line(event) for event in shown]
    return side_by_side(left, right, titles=("assertions", "events")).replace(
        "the turn:", "the assertions and the events they looked at:", 1)


def _event_line(event: dict[str, Any]) -> str:
    kind = event.get("event")
    if kind in ("user", "bot"):
        detail = repr(event.get("text"))
        if kind == "bot" and (event.get("metadata") or {}).get("utter_action"):
            detail += f" ({event['metadata']['utter_action']})"
    elif kind == "slot":
        detail = f"{event.get('name')}={event.get('value')!r}"
    elif kind == "mcp_tool_executed":
        detail = f"{event.get('tool_name')}({event.get('arguments')}) " \
                 f"is_error={event.get('is_error')}"
    elif event.get("agent_id") and event.get("flow_id"):
        detail = f"{event['agent_id']} in {event['flow_id']}"
    else:
        detail = str(event.get("flow_id") or event.get("agent_id") or event.get("name") or "")
    return f"{kind}: {detail}"


def _bot_text_matches(expected: Any, message: dict[str, Any]) -> bool:
    text = message.get("text")
    if isinstance(expected, dict):
        if expected.get("any"):
            return bool(text)
        return text is not None and re.search(str(expected["matches"]), str(text)) is not None
    # Rasa strips only the expected text; both sides are stripped here, so an expected text
    # written exactly as the bot says it (trailing space included) matches
    return text is not None and str(text).strip() == str(expected).strip()


def _described(messages: list[dict[str, Any]]) -> str:
    """The messages one after the other, each quoted once (``'Hi.' (utter_greet), 'Bye.'``)."""
    return ", ".join(_describe(m) for m in messages) or "none"


def _bot_problem(expected: Any, messages: list[dict[str, Any]]) -> str:
    texts = [str(m.get("text") or "") for m in messages]
    problem = f"expected bot {expected!r}; bot messages this turn: {_described(messages)}"
    if isinstance(expected, str) and texts:
        detail = near_miss(expected.strip(), texts)
        if detail:
            problem += "\n" + detail
    return problem


def _slot_items(value: Any) -> list[tuple[str, Any, bool]]:
    items: list[tuple[str, Any, bool]] = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict):
            if set(item) == {"name", "value"}:  # a {slot: value} mapping otherwise, as Rasa
                items.append((str(item["name"]), item.get("value"), "value" in item))
            else:
                items += [(str(k), v, True) for k, v in item.items()]
        else:
            items.append((str(item), None, False))
    return items


def _slot_set(events: list[dict[str, Any]], name: str, value: Any, has_value: bool) -> bool:
    return any(e.get("event") == "slot" and e.get("name") == name and
               (not has_value or e.get("value") == value) for e in events)


def _slot_events(events: list[dict[str, Any]]) -> list[str]:
    return [f"{e['name']}={e.get('value')!r}" for e in events if e.get("event") == "slot"]
