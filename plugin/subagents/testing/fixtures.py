"""Conversation fixture files (``shared/design/E2E_FORMAT.md``): models and loading with precise
errors (file, line, code). Rasa e2e files load unchanged; ``llm_script`` is our extension."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._yaml import YamlDoc, YamlSyntaxError, load_yaml
from ..exceptions import ConfigIssue
from .fake_server import normalize_reply

STEP_KEYS = {"user", "bot", "utter", "slot_was_set", "slot_was_not_set", "client_tool_result"}
STEP_EXTRAS = {"metadata", "assertions", "assertion_order_enabled"}
RASA_ASSERTIONS = {"flow_started", "flow_completed", "flow_cancelled", "action_executed",
                   "bot_uttered", "bot_did_not_utter", "slot_was_set", "slot_was_not_set"}
AGENT_ASSERTIONS = {"agent_started", "agent_completed", "agent_interrupted", "agent_resumed",
                    "agent_cancelled"}
OUR_ASSERTIONS = AGENT_ASSERTIONS | {"tool_executed", "client_tool_requested"}
ASSERTIONS = RASA_ASSERTIONS | OUR_ASSERTIONS


class TestCaseModel(BaseModel):
    """One test case (JSON schema for editors)."""

    model_config = ConfigDict(extra="forbid")

    test_case: str
    steps: list[dict[str, Any]] = Field(min_length=1)
    fixtures: list[str] = Field(default_factory=list)
    metadata: str | None = None
    llm_script: dict[str, list[Any]] | None = None


class E2EFileModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fixtures: list[dict[str, list[dict[str, Any]]]] = Field(default_factory=list)
    metadata: list[dict[str, dict[str, Any]]] = Field(default_factory=list)
    stub_custom_actions: dict[str, Any] = Field(default_factory=dict)
    test_cases: list[TestCaseModel] = Field(default_factory=list)


@dataclass
class TestCase:
    name: str
    file: str
    line: int | None
    steps: list[dict[str, Any]]
    step_lines: list[int | None]
    slot_presets: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    metadata_presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    llm_script: dict[str, list[Any]] | None = None
    stubs: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadResult:
    cases: list[TestCase] = field(default_factory=list)
    issues: list[ConfigIssue] = field(default_factory=list)


def _named(items: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        out.update(item)
    return out


def load_file(path: Path, display: str | None = None) -> LoadResult:
    result = LoadResult()
    try:
        doc = load_yaml(path, display=display)
    except YamlSyntaxError as exc:
        result.issues.append(exc.issue)
        return result
    data = doc.data or {}
    if not isinstance(data, dict) or "test_cases" not in data:
        result.issues.append(doc.issue("e2e.validation.no_test_cases",
                                       "a test file needs a top-level 'test_cases' list",
                                       hint="add test_cases: [...]"))
        return result
    known = set(E2EFileModel.model_fields)
    for key in data:
        if key not in known:
            result.issues.append(doc.issue("e2e.validation.unknown_key",
                                           f"unknown top-level key {key!r}", (key,),
                                           hint=f"use {', '.join(sorted(known))}"))
    fixtures = _named(data.get("fixtures") or [])
    presets = _named(data.get("metadata") or [])
    stubs = dict(data.get("stub_custom_actions") or {})
    names: set[str] = set()
    for index, raw in enumerate(data.get("test_cases") or []):
        case = _load_case(doc, index, raw, fixtures, presets, stubs, result.issues)
        if case is None:
            continue
        if case.name in names:
            result.issues.append(doc.issue("e2e.validation.duplicate_test_case",
                                           f"test case {case.name!r} is defined twice",
                                           ("test_cases", index, "test_case")))
        names.add(case.name)
        result.cases.append(case)
    return result


def _load_case(doc: YamlDoc, index: int, raw: Any, fixtures: dict[str, Any],
               presets: dict[str, Any], stubs: dict[str, Any],
               issues: list[ConfigIssue]) -> TestCase | None:
    loc = ("test_cases", index)
    if not isinstance(raw, dict) or "test_case" not in raw:
        issues.append(doc.issue("e2e.validation.test_case_name_missing",
                                "a test case needs 'test_case: <name>' and 'steps'", loc))
        return None
    before = len(issues)
    for key in raw:
        if key not in TestCaseModel.model_fields:
            issues.append(doc.issue("e2e.validation.unknown_key", f"unknown test case key "
                                    f"{key!r}", (*loc, key)))
    steps = raw.get("steps")
    if not isinstance(steps, list) or not steps:
        issues.append(doc.issue("e2e.validation.steps_missing", "a test case needs a non-empty "
                                "'steps' list", (*loc, "steps")))
        return None
    for s_index, step in enumerate(steps):
        _check_step(doc, (*loc, "steps", s_index), step, presets, issues)
    slot_presets: dict[str, Any] = {}
    for f_index, name in enumerate(raw.get("fixtures") or []):
        if name not in fixtures:
            issues.append(doc.issue("e2e.validation.unknown_fixture", f"fixture {name!r} is not "
                                    "defined under fixtures:", (*loc, "fixtures", f_index)))
            continue
        slot_presets.update(_named(fixtures[name]))
    metadata: dict[str, Any] = {}
    if raw.get("metadata") is not None:
        if raw["metadata"] not in presets:
            issues.append(doc.issue("e2e.validation.unknown_metadata",
                                    f"metadata {raw['metadata']!r} is not defined under "
                                    "metadata:", (*loc, "metadata")))
        else:
            metadata = dict(presets[raw["metadata"]])
    script = raw.get("llm_script")
    if script is not None:
        _check_script(doc, (*loc, "llm_script"), script, issues)
    if len(issues) > before:
        return None
    name = str(raw["test_case"])
    case_stubs = {k: v for k, v in stubs.items() if "::" not in k}
    case_stubs.update({k.split("::", 1)[1]: v for k, v in stubs.items()
                       if k.startswith(name + "::")})
    return TestCase(name=name, file=doc.display, line=doc.line_of(loc), steps=list(steps),
                    step_lines=[doc.line_of((*loc, "steps", i)) for i in range(len(steps))],
                    slot_presets=slot_presets, metadata=metadata, metadata_presets=presets,
                    llm_script=script, stubs=case_stubs)


def _check_step(doc: YamlDoc, loc: tuple[Any, ...], step: Any, presets: dict[str, Any],
                issues: list[ConfigIssue]) -> None:
    if not isinstance(step, dict):
        issues.append(doc.issue("e2e.validation.invalid_step", "a step is a mapping such as "
                                "{user: ...} or {bot: ...}", loc))
        return
    kinds = [k for k in step if k in STEP_KEYS]
    unknown = [k for k in step if k not in STEP_KEYS | STEP_EXTRAS]
    if len(kinds) != 1 or unknown:
        what = f"unknown key(s) {', '.join(unknown)}" if unknown else \
            f"exactly one of {', '.join(sorted(STEP_KEYS))} is needed"
        issues.append(doc.issue("e2e.validation.invalid_step", f"invalid step: {what}", loc))
        return
    if "metadata" in step and step["metadata"] not in presets:
        issues.append(doc.issue("e2e.validation.unknown_metadata", f"metadata "
                                f"{step['metadata']!r} is not defined under metadata:",
                                (*loc, "metadata")))
    if kinds[0] == "client_tool_result":
        value = step["client_tool_result"]
        if not isinstance(value, dict) or "id" not in value or "result" not in value:
            issues.append(doc.issue("e2e.validation.invalid_step",
                                    "client_tool_result needs {id, result}", loc))
    for a_index, assertion in enumerate(step.get("assertions") or []):
        name = next(iter(assertion), None) if isinstance(assertion, dict) else None
        if name not in ASSERTIONS or len(assertion) != 1:
            issues.append(doc.issue(
                "e2e.validation.unknown_assertion", f"unknown assertion {name!r}",
                (*loc, "assertions", a_index), hint="use " + ", ".join(sorted(ASSERTIONS))))


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


def discover(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in (".yml", ".yaml"))
        elif path.exists():
            files.append(path)
    return files
