"""Conversation test files (format: ``docs/conversation-tests.md``): models and loading with
precise errors (file, line, key, code). Rasa e2e files load unchanged; ``llm_script`` and a few
more keys are our extensions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from subagents._yaml import YamlDoc, YamlSyntaxError, load_yaml
from subagents.exceptions import ConfigIssue
from subagents.testing.a2a_replay import a2a_script_problems
from subagents.testing.assertions import (
    ASSERTIONS,
    MANTLE_HINT,
    MANTLE_NAMES,
    MANTLE_PREFIXES,
    shape_problem,
)
from subagents.testing.fake_server import normalize_reply
from subagents.testing.simulated_user import spec_problems
from subagents.testing.tool_replay import tool_script_problems

STEP_KEYS = {"user", "bot", "utter", "slot_was_set", "slot_was_not_set", "client_tool_result"}
STEP_EXTRAS = {"metadata", "assertions", "assertion_order_enabled"}
BOT_PATTERN_KEYS = {"matches", "any"}
FILE_KEYS = ("fixtures", "metadata", "stub_custom_actions", "test_cases", "strict",
             "a2a_script")
CASE_KEYS = ("test_case", "steps", "fixtures", "metadata", "llm_script", "strict", "streaming",
             "expected_errors", "tool_script", "simulated_user", "a2a_script")

log = structlog.get_logger("subagents.testing")


class TestCaseModel(BaseModel):
    """One test case (JSON schema for editors)."""

    model_config = ConfigDict(extra="forbid")

    test_case: str
    steps: list[dict[str, Any]] = Field(default_factory=list)
    """Required unless the case has simulated_user."""
    fixtures: list[str] = Field(default_factory=list)
    metadata: str | None = None
    llm_script: dict[str, list[Any]] | None = None
    strict: bool | None = None
    streaming: bool = False
    expected_errors: list[str] = Field(default_factory=list)
    tool_script: dict[str, list[dict[str, Any]] | Literal["down"]] | None = None
    a2a_script: dict[str, list[dict[str, Any]]] | None = None


class E2EFileModel(BaseModel):
    """A conversation test file (JSON schema for editors)."""

    model_config = ConfigDict(extra="forbid")

    fixtures: list[dict[str, list[dict[str, Any]]]] = Field(default_factory=list)
    metadata: list[dict[str, dict[str, Any]]] = Field(default_factory=list)
    stub_custom_actions: dict[str, Any] = Field(default_factory=dict)
    test_cases: list[TestCaseModel] = Field(default_factory=list)
    strict: bool = False
    a2a_script: dict[str, list[dict[str, Any]]] | None = None
    """Replies of A2A agents for every case of the file (a case's own entries win)."""


@dataclass
class TestCase:
    """A loaded test case, ready to run."""

    name: str
    file: str
    line: int | None
    steps: list[dict[str, Any]]
    step_lines: list[int | None]
    slot_presets: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    metadata_presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    llm_script: dict[str, list[Any]] | None = None
    tool_script: dict[str, Any] | None = None
    """Recorded tool results per MCP server, served by a replay stand-in for every server."""
    a2a_script: dict[str, list[dict[str, Any]]] | None = None
    """Scripted replies per A2A agent, served by a local stand-in each named agent points at."""
    simulated_user: dict[str, Any] | None = None
    """A model plays the user towards a goal (the case then needs no steps)."""
    stubs: dict[str, Any] = field(default_factory=dict)
    strict: bool | None = None
    """True/False from the file or the case; None: the runner's default (Rasa's matching)."""
    streaming: bool = False
    """Run the case through a streaming output channel."""
    expected_errors: list[str] = field(default_factory=list)
    """Runtime errors (log event names, ``pattern_internal_error`` or ``*``) the case expects."""
    problems: list[ConfigIssue] = field(default_factory=list)
    """Problems that fail this case only (unknown assertion types); it is not run."""
    judge: dict[str, Any] | None = None
    """``llm_judge`` of the nearest ``conftest.yml``, for generative assertions."""
    path: Path | None = None

    @property
    def assertion_style(self) -> bool:
        """Rasa's rule: a case with assertions on a user step is judged by assertions only."""
        return any("user" in s and s.get("assertions") for s in self.steps)


@dataclass
class LoadResult:
    """Test cases of one file, the errors that refuse it and the warnings."""

    cases: list[TestCase] = field(default_factory=list)
    issues: list[ConfigIssue] = field(default_factory=list)
    warnings: list[ConfigIssue] = field(default_factory=list)
    skipped: bool = False
    """The file holds no ``test_cases`` key (empty, commented out, or not a test file)."""


def _named(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            out.update(item)
    return out


def _slot_presets(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items if isinstance(items, list) else [items]:
        if isinstance(item, dict):
            out.update(item)
    return out


def conftest_data(path: Path, root: Path | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Fixtures and ``llm_judge`` from ``conftest.yml`` files next to ``path`` and in its
    parents up to ``root``; closer files win."""
    folders = []
    folder = path.resolve().parent
    stop = root.resolve() if root else folder
    while True:
        folders.append(folder)
        if folder == stop or folder.parent == folder or stop not in folder.parents:
            break
        folder = folder.parent
    fixtures: dict[str, Any] = {}
    judge: dict[str, Any] | None = None
    for folder in reversed(folders):
        conftest = folder / "conftest.yml"
        if not conftest.is_file():
            continue
        try:
            data = load_yaml(conftest).data or {}
        except YamlSyntaxError:
            continue
        if isinstance(data, dict):
            fixtures.update(_named(data.get("fixtures")))
            if isinstance(data.get("llm_judge"), dict):
                judge = data["llm_judge"]
    return fixtures, judge


def load_file(path: Path, display: str | None = None, *, root: Path | None = None,
              metadata: dict[str, Any] | None = None) -> LoadResult:
    """Load one test file. A file without ``test_cases`` is skipped (as Rasa does).

    Args:
        path: The file.
        display: How to name the file in messages (default: the path).
        root: The project folder: ``conftest.yml`` files are looked for up to it.
        metadata: Metadata presets defined by other files of the run; a name defined there
            first wins over this file's own definition.
    """
    result = LoadResult()
    if path.name == "conftest.yml":
        result.skipped = True
        return result
    try:
        doc = load_yaml(path, display=display)
    except YamlSyntaxError as exc:
        result.issues.append(exc.issue)
        return result
    data = doc.data
    if not isinstance(data, dict) or "test_cases" not in data:
        result.skipped = True
        return result
    for key in data:
        if key not in FILE_KEYS:
            result.issues.append(doc.issue("e2e.validation.unknown_key",
                                           f"unknown top-level key {key!r}", (key,),
                                           hint=f"use {', '.join(FILE_KEYS)}"))
    if "strict" in data and not isinstance(data["strict"], bool):
        result.issues.append(doc.issue("e2e.validation.invalid_value",
                                       "strict is true or false", ("strict",)))
    _check_duplicates(doc, data, result.issues)
    file_a2a = _file_a2a_script(doc, data.get("a2a_script"), result.issues)
    _check_stubs(doc, data.get("stub_custom_actions"), result.issues)
    shared, judge = conftest_data(path, root)
    fixtures = {**shared, **_named(data.get("fixtures"))}
    presets = {**_named(data.get("metadata")), **(metadata or {})}
    stubs = dict(data.get("stub_custom_actions") or {})
    names: dict[str, int | None] = {}
    cases = data.get("test_cases") or []
    if not isinstance(cases, list):
        result.issues.append(doc.issue("e2e.validation.invalid_value",
                                       "test_cases is a list of test cases", ("test_cases",)))
        cases = []
    for index, raw in enumerate(cases):
        case = _load_case(doc, index, raw, fixtures, presets, stubs, result.issues)
        if case is None:
            continue
        _file_defaults(case, data, file_a2a)
        case.judge, case.path = judge, path
        if case.name in names:
            warning = doc.issue("e2e.validation.duplicate_test_case",
                                f"test case {case.name!r} is defined twice (first at line "
                                f"{names[case.name]}); both run", ("test_cases", index,
                                                                    "test_case"),
                                severity="warning")
            result.warnings.append(warning)
            log.warning("e2e.test_case.duplicate", file=warning.file, line=warning.line,
                        test_case=case.name)
        names.setdefault(case.name, case.line)
        result.cases.append(case)
    return result


def _file_defaults(case: TestCase, data: dict[str, Any],
                   file_a2a: dict[str, Any] | None) -> None:
    """What a case takes from its file: ``strict`` and the ``a2a_script`` entries it lacks."""
    if case.strict is None and isinstance(data.get("strict"), bool):
        case.strict = data["strict"]
    if file_a2a is not None:
        case.a2a_script = {**file_a2a, **(case.a2a_script or {})}


def _file_a2a_script(doc: YamlDoc, script: Any,
                     issues: list[ConfigIssue]) -> dict[str, Any] | None:
    """The file's ``a2a_script`` (the default of each case), None when absent or invalid."""
    if script is None:
        return None
    problems = a2a_script_problems(script)
    for problem, where in problems:
        issues.append(doc.issue("e2e.validation.invalid_a2a_script", problem,
                                ("a2a_script", *where)))
    return None if problems else dict(script)


def _check_stubs(doc: YamlDoc, stubs: Any, issues: list[ConfigIssue]) -> None:
    """A stub is ``{events: [...], responses: [...]}`` in the action server's reply format."""
    if stubs is None:
        return
    if not isinstance(stubs, dict):
        issues.append(doc.issue("e2e.validation.invalid_stub", "stub_custom_actions maps "
                                "action names to {events, responses}", ("stub_custom_actions",)))
        return
    for name, stub in stubs.items():
        loc = ("stub_custom_actions", name)
        if stub is None:
            continue
        unknown = sorted(set(stub) - {"events", "responses"}) if isinstance(stub, dict) else []
        if not isinstance(stub, dict) or unknown:
            what = f"unknown key(s) {', '.join(unknown)}" if unknown else "no mapping"
            issues.append(doc.issue("e2e.validation.invalid_stub", f"the stub of {name!r} has "
                                    f"{what}; a stub is {{events: [...], responses: [...]}}",
                                    loc))
            continue
        for key, what in (("events", "an event mapping with 'event: <type>'"),
                          ("responses", "a mapping")):
            items = stub.get(key) or []
            bad = [i for i, item in enumerate(items if isinstance(items, list) else [None])
                   if not isinstance(item, dict) or (key == "events" and "event" not in item)]
            if bad:
                issues.append(doc.issue("e2e.validation.invalid_stub", f"each of {key} is "
                                        f"{what}", (*loc, key, bad[0])))


def _check_duplicates(doc: YamlDoc, data: dict[str, Any], issues: list[ConfigIssue]) -> None:
    """Fixtures and metadata presets are named once per file (as Rasa requires)."""
    for key in ("fixtures", "metadata"):
        seen: set[str] = set()
        for index, item in enumerate(data.get(key) or []):
            for name in item if isinstance(item, dict) else []:
                if name in seen:
                    issues.append(doc.issue(f"e2e.validation.duplicate_{key}",
                                            f"{key} {name!r} is defined twice in this file",
                                            (key, index, name)))
                seen.add(name)


def _load_case(doc: YamlDoc, index: int, raw: Any, fixtures: dict[str, Any],
               presets: dict[str, Any], stubs: dict[str, Any],
               issues: list[ConfigIssue]) -> TestCase | None:
    loc = ("test_cases", index)
    if not isinstance(raw, dict) or "test_case" not in raw:
        issues.append(doc.issue("e2e.validation.test_case_name_missing",
                                "a test case needs 'test_case: <name>' and 'steps'", loc))
        return None
    before = len(issues)
    _check_case_keys(doc, loc, raw, issues)
    expected_errors = raw.get("expected_errors") or []
    simulated = raw.get("simulated_user")
    steps = [] if simulated is not None and raw.get("steps") is None else raw.get("steps")
    _check_extensions(doc, loc, raw, issues)
    if not isinstance(steps, list) or (not steps and simulated is None):
        issues.append(doc.issue("e2e.validation.steps_missing", "a test case needs a non-empty "
                                "'steps' list", (*loc, "steps")))
        return None
    case_problems: list[ConfigIssue] = []
    for s_index, step in enumerate(steps):
        _check_step(doc, (*loc, "steps", s_index), step, presets, issues, case_problems)
    slot_presets: dict[str, Any] = {}
    for f_index, name in enumerate(raw.get("fixtures") or []):
        if name not in fixtures:
            issues.append(doc.issue("e2e.validation.unknown_fixture", f"fixture {name!r} is not "
                                    "defined under fixtures:", (*loc, "fixtures", f_index)))
            continue
        slot_presets.update(_slot_presets(fixtures[name]))
    metadata: dict[str, Any] = {}
    if raw.get("metadata") is not None:
        if raw["metadata"] not in presets:
            issues.append(doc.issue("e2e.validation.unknown_metadata",
                                    f"metadata {raw['metadata']!r} is not defined under "
                                    "metadata:", (*loc, "metadata")))
        else:
            metadata = dict(presets[raw["metadata"]])
    script, tool_script = raw.get("llm_script"), raw.get("tool_script")
    if len(issues) > before:
        return None
    name = str(raw["test_case"])
    case_stubs = {k: v for k, v in stubs.items() if "::" not in k}
    case_stubs.update({k.split("::", 1)[1]: v for k, v in stubs.items()
                       if k.split("::", 1)[0] in (name, name.replace(" ", "_"))})
    return TestCase(name=name, file=doc.display, line=doc.line_of(loc), steps=list(steps),
                    step_lines=[doc.line_of((*loc, "steps", i)) for i in range(len(steps))],
                    slot_presets=slot_presets, metadata=metadata, metadata_presets=presets,
                    llm_script=script, tool_script=tool_script, stubs=case_stubs,
                    a2a_script=raw.get("a2a_script"),
                    simulated_user=simulated,
                    strict=raw["strict"] if isinstance(raw.get("strict"), bool) else None,
                    streaming=bool(raw.get("streaming")),
                    expected_errors=[str(e) for e in expected_errors]
                    if isinstance(expected_errors, list) else [],
                    problems=case_problems)


def _check_case_keys(doc: YamlDoc, loc: tuple[Any, ...], raw: dict[str, Any],
                     issues: list[ConfigIssue]) -> None:
    for key in raw:
        if key not in CASE_KEYS:
            issues.append(doc.issue("e2e.validation.unknown_key", f"unknown test case key "
                                    f"{key!r}", (*loc, key), hint=f"use {', '.join(CASE_KEYS)}"))
    for key in ("strict", "streaming"):
        if key in raw and not isinstance(raw[key], bool):
            issues.append(doc.issue("e2e.validation.invalid_value", f"{key} is true or false",
                                    (*loc, key)))
    if not isinstance(raw.get("expected_errors") or [], list):
        issues.append(doc.issue("e2e.validation.invalid_value", "expected_errors is a list of "
                                "log event names, pattern_internal_error or '*'",
                                (*loc, "expected_errors")))


def _check_step(doc: YamlDoc, loc: tuple[Any, ...], step: Any, presets: dict[str, Any],
                issues: list[ConfigIssue], case_problems: list[ConfigIssue]) -> None:
    if not isinstance(step, dict):
        issues.append(doc.issue("e2e.validation.invalid_step", "a step is a mapping such as "
                                "{user: ...} or {bot: ...}", loc))
        return
    for key in step:
        if key not in STEP_KEYS | STEP_EXTRAS:
            issues.append(doc.issue("e2e.validation.unknown_key", f"unknown step key {key!r}",
                                    (*loc, key), hint="a step is one of " +
                                    ", ".join(sorted(STEP_KEYS)) + " plus " +
                                    ", ".join(sorted(STEP_EXTRAS))))
    kinds = [k for k in step if k in STEP_KEYS]
    if len(kinds) != 1:
        issues.append(doc.issue("e2e.validation.invalid_step", "invalid step: exactly one of "
                                f"{', '.join(sorted(STEP_KEYS))} is needed", loc))
        return
    if "metadata" in step and step["metadata"] not in presets:
        issues.append(doc.issue("e2e.validation.unknown_metadata", f"metadata "
                                f"{step['metadata']!r} is not defined under metadata:",
                                (*loc, "metadata")))
    if "assertion_order_enabled" in step and "assertions" not in step:
        issues.append(doc.issue("e2e.validation.invalid_step", "assertion_order_enabled needs "
                                "assertions on the same step", (*loc, "assertion_order_enabled")))
    problem = _value_problem(kinds[0], step[kinds[0]])
    if problem:
        issues.append(doc.issue("e2e.validation.invalid_step", problem, (*loc, kinds[0])))
    assertions = step.get("assertions")
    if assertions is not None and not isinstance(assertions, list):
        issues.append(doc.issue("e2e.validation.invalid_step", "assertions is a list",
                                (*loc, "assertions")))
        return
    for a_index, assertion in enumerate(assertions or []):
        _check_assertion(doc, (*loc, "assertions", a_index), assertion, issues, case_problems)


def _value_problem(kind: str, value: Any) -> str | None:
    if kind == "client_tool_result" and (not isinstance(value, dict) or "id" not in value
                                         or "result" not in value):
        return "client_tool_result needs {id, result}"
    if kind == "bot" and isinstance(value, dict):
        unknown = set(value) - BOT_PATTERN_KEYS
        if unknown or len(value) != 1:
            return "a bot step is a text, {matches: <regex>} or {any: true}"
        if "matches" in value:
            try:
                re.compile(str(value["matches"]))
            except re.error as exc:
                return f"bot.matches is not a valid regular expression: {exc}"
    if kind in ("slot_was_set", "slot_was_not_set") and not isinstance(value, (list, str)):
        return f"{kind} takes a list of slot names or {{name: value}} mappings"
    return None


def _check_assertion(doc: YamlDoc, loc: tuple[Any, ...], assertion: Any,
                     issues: list[ConfigIssue], case_problems: list[ConfigIssue]) -> None:
    if not isinstance(assertion, dict) or len(assertion) != 1:
        issues.append(doc.issue("e2e.validation.invalid_assertion", "an assertion is a "
                                "mapping with one key, the assertion type", loc))
        return
    name, spec = next(iter(assertion.items()))
    if name not in ASSERTIONS:
        mantle = name.startswith(MANTLE_PREFIXES) or name in MANTLE_NAMES
        case_problems.append(doc.issue(
            "e2e.assertions.incompatible" if mantle else "e2e.validation.unknown_assertion",
            (f"assertion {name!r}: {MANTLE_HINT}" if mantle else
             f"unknown assertion type {name!r}") + "; this test case fails, the others run",
            (*loc, name), hint="use " + ", ".join(sorted(ASSERTIONS))))
        return
    problem = shape_problem(name, spec)
    if problem:
        issues.append(doc.issue("e2e.validation.invalid_assertion", f"{name} {problem}",
                                (*loc, name)))


def _check_extensions(doc: YamlDoc, loc: tuple[Any, ...], raw: dict[str, Any],
                      issues: list[ConfigIssue]) -> None:
    """``llm_script``, ``tool_script``, ``a2a_script`` and ``simulated_user`` of a case."""
    if raw.get("llm_script") is not None:
        _check_script(doc, (*loc, "llm_script"), raw["llm_script"], issues)
    if raw.get("tool_script") is not None:
        for problem, where in tool_script_problems(raw["tool_script"]):
            issues.append(doc.issue("e2e.validation.invalid_tool_script", problem,
                                    (*loc, "tool_script", *where)))
    if raw.get("a2a_script") is not None:
        for problem, where in a2a_script_problems(raw["a2a_script"]):
            issues.append(doc.issue("e2e.validation.invalid_a2a_script", problem,
                                    (*loc, "a2a_script", *where)))
    if raw.get("simulated_user") is not None:
        _check_simulated_user(doc, (*loc, "simulated_user"), raw["simulated_user"], issues)


def _check_simulated_user(doc: YamlDoc, loc: tuple[Any, ...], spec: Any,
                          issues: list[ConfigIssue]) -> None:
    for problem, where in spec_problems(spec):
        issues.append(doc.issue("e2e.validation.invalid_simulated_user", problem,
                                (*loc, *where)))
    if isinstance(spec, dict) and isinstance(spec.get("assertions"), list):
        for a_index, assertion in enumerate(spec["assertions"]):
            _check_assertion(doc, (*loc, "assertions", a_index), assertion, issues, issues)


def _check_script(doc: YamlDoc, loc: tuple[Any, ...], script: Any,
                  issues: list[ConfigIssue]) -> None:
    if not isinstance(script, dict):
        issues.append(doc.issue("e2e.validation.invalid_llm_script",
                                "llm_script maps callers to lists of replies", loc))
        return
    for caller, replies in script.items():
        if not isinstance(replies, list):
            issues.append(doc.issue("e2e.validation.invalid_llm_script",
                                    f"the replies of {caller!r} must be a list", (*loc, caller)))
            continue
        for r_index, reply in enumerate(replies):
            try:
                normalize_reply(reply)
            except ValueError as exc:
                issues.append(doc.issue("e2e.validation.invalid_reply", str(exc),
                                        (*loc, caller, r_index)))


def load_files(files: list[Path], project: Path) -> LoadResult:
    """Load several test files; paths are shown relative to ``project`` when inside it."""
    result = LoadResult()
    shared: dict[str, Any] = {}
    for path in files:  # metadata presets are shared by all files; the first definition wins
        try:
            data = load_yaml(path).data
        except YamlSyntaxError:
            continue
        if isinstance(data, dict) and "test_cases" in data:
            for name, value in _named(data.get("metadata")).items():
                shared.setdefault(name, value)
    for path in files:
        try:
            shown = str(path.relative_to(project))
        except ValueError:
            shown = str(path)
        loaded = load_file(path, display=shown, root=project, metadata=shared)
        result.cases += loaded.cases
        result.issues += loaded.issues
        result.warnings += loaded.warnings
    return result


def discover(paths: list[Path]) -> list[Path]:
    """The ``*.yml``/``*.yaml`` files under ``paths`` (files are taken as they are)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in (".yml", ".yaml"))
        elif path.exists():
            files.append(path)
    return files
