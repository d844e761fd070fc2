"""Flows: the file format (pydantic, publishes a JSON schema) and the flattened runtime form.

The format accepts what Rasa's flow schema accepts: flow guards and branch conditions written as
YAML booleans or strings, every flow-level key, ``nlu_trigger`` in both item shapes, and per step
type the keys Rasa allows (``link``, ``set_slots`` and ``noop`` steps tolerate any extra key;
branch items tolerate extra keys). Everything the runtime interprets - guards, ``next`` conditions,
``exit_if``, collect ``rejections`` - is parsed here, once, when the project loads; a condition that
does not parse is a load error, never a silent ``false`` at run time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from subagents.conditions import Condition

END = "END"
_QUOTED_TEXT = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")
_DOTTED_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*\.[A-Za-z_]")
STEP_KINDS = ("collect", "action", "call", "set_slots", "noop", "link")
_COMMON_STEP_KEYS = {"id", "next", "metadata"}
STEP_KEYS: dict[str, set[str] | None] = {
    "action": _COMMON_STEP_KEYS | {"action"},
    "collect": _COMMON_STEP_KEYS | {
        "collect", "description", "ask_before_filling", "reset_after_flow_ends", "utter",
        "force_slot_filling", "rejections", "silence_timeout", "collect-tool-binding", "dtmf"},
    "call": _COMMON_STEP_KEYS | {"call", "description", "mcp_server", "mapping", "exit_if"},
    "link": None,
    "set_slots": None,
    "noop": None,
}
"""Keys allowed on each step type; ``None``: any key (Rasa's schema does not restrict them)."""


def _condition_text(value: Any) -> Any:
    """YAML booleans are accepted where Rasa accepts them and kept as condition text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


class NextBranch(BaseModel):
    """A branch of ``next``: ``if`` + ``then``, or ``else``; other keys are ignored, as in Rasa."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    if_: str | None = Field(default=None, alias="if")
    then: str | list[FlowStepModel] | None = None
    else_: str | list[FlowStepModel] | None = Field(default=None, alias="else")

    _cond = field_validator("if_", mode="before")(_condition_text)

    @model_validator(mode="after")
    def _shape(self) -> NextBranch:
        if self.if_ is not None and self.then is None:
            raise ValueError("an 'if' branch needs 'then'")
        if self.if_ is not None and self.else_ is not None:
            raise ValueError("a branch has either 'if' + 'then' or 'else', not both")
        if self.if_ is None and self.else_ is None:
            raise ValueError("a branch needs 'if' + 'then' or 'else'")
        return self


class McpInput(BaseModel):
    """A tool argument taken from a slot."""

    model_config = ConfigDict(extra="forbid")

    param: str
    slot: str


class McpOutput(BaseModel):
    """A slot set from the tool result: ``value`` is a Jinja expression over ``result``."""

    model_config = ConfigDict(extra="forbid")

    slot: str
    value: str

    @field_validator("value")
    @classmethod
    def _expression(cls, value: str) -> str:
        from jinja2 import TemplateSyntaxError
        from jinja2.sandbox import SandboxedEnvironment

        try:
            SandboxedEnvironment().compile_expression(value)
        except TemplateSyntaxError as exc:
            raise ValueError(f"{value!r} is not an expression: {exc.message}") from exc
        return value


class McpMapping(BaseModel):
    """``mapping`` of an MCP tool call step: arguments from slots, slots from the result."""

    model_config = ConfigDict(extra="forbid")

    input: list[McpInput]
    output: list[McpOutput]


class FlowStepModel(BaseModel):
    """One step as written; the keys each step type allows are checked by
    :func:`step_key_problems`."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str | None = None
    description: str | None = None
    collect: str | None = None
    action: str | None = None
    call: str | None = None
    set_slots: list[dict[str, Any]] | None = None
    noop: Any = None
    link: str | None = None
    next: str | list[NextBranch] | None = None
    exit_if: list[str] | None = None
    ask_before_filling: bool = False
    reset_after_flow_ends: bool = True
    utter: str | None = None
    rejections: list[dict[str, Any]] | None = None
    """Each ``{if, utter}``: ``if`` a condition string or boolean, ``utter`` a response name
    (checked by :func:`step_key_problems`; other keys are tolerated, as in Rasa)."""
    force_slot_filling: bool = False
    mcp_server: str | None = None
    mapping: McpMapping | None = None
    silence_timeout: float | dict[str, Any] | None = None
    collect_tool_binding: str | dict[str, Any] | None = Field(default=None,
                                                              alias="collect-tool-binding")
    dtmf: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> FlowStepModel:
        kinds = [k for k in STEP_KINDS if k in self.model_fields_set and
                 (k == "noop" or getattr(self, k) is not None)]
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none"
            raise ValueError(f"a step needs exactly one of {', '.join(STEP_KINDS)} (found {found})")
        if self.exit_if is not None and self.call is None:
            raise ValueError("'exit_if' is only allowed on a 'call' step")
        if self.exit_if is not None and (self.mcp_server or self.mapping):
            raise ValueError("a call step with 'exit_if' may not also have mcp_server/mapping")
        if (self.mcp_server is None) != (self.mapping is None):
            raise ValueError("an MCP tool call step needs both 'mcp_server' and 'mapping'")
        if kinds[0] == "noop" and self.next is None:
            raise ValueError("a 'noop' step needs 'next'")
        if kinds[0] == "link" and self.next is not None:
            raise ValueError("a 'link' step ends the flow; it may not have 'next'")
        return self

    @property
    def kind(self) -> str:
        """Which kind of step this is: the one step key that is set (``collect``, ``call``, ...)."""
        return next(k for k in STEP_KINDS if k in self.model_fields_set and
                    (k == "noop" or getattr(self, k) is not None))


class IntentTrigger(BaseModel):
    """``intent: {name, confidence_threshold}`` of an ``nlu_trigger`` item."""

    model_config = ConfigDict(extra="ignore")

    name: str
    confidence_threshold: float = 0.0


class NluTrigger(BaseModel):
    """An ``nlu_trigger`` item: ``intent: name`` or ``intent: {name, confidence_threshold}``."""

    model_config = ConfigDict(extra="forbid")

    intent: str | IntentTrigger

    @property
    def name(self) -> str:
        """The intent's name."""
        return self.intent if isinstance(self.intent, str) else self.intent.name

    @property
    def threshold(self) -> float:
        """The minimum confidence that triggers the flow (0.0 when none is given)."""
        return 0.0 if isinstance(self.intent, str) else self.intent.confidence_threshold


class FlowModel(BaseModel):
    """A flow as written; every flow-level key Rasa's schema knows is accepted."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    description: str = ""
    name: str | None = None
    if_: str | None = Field(default=None, alias="if")
    nlu_trigger: list[NluTrigger] | None = Field(default=None, min_length=1)
    persisted_slots: list[str] | None = None
    always_include_in_prompt: bool | None = None
    run_pattern_completed: bool = True
    file_path: str | None = None
    on_activate: str | dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    translation: dict[str, dict[str, Any]] | None = None
    steps: list[FlowStepModel] = Field(min_length=1)

    _cond = field_validator("if_", mode="before")(_condition_text)


class FlowsFile(BaseModel):
    """A flows file: its ``flows:`` mapping; other top-level keys are accepted."""

    model_config = ConfigDict(extra="allow")
    flows: dict[str, FlowModel] = Field(default_factory=dict)


NextBranch.model_rebuild()

Loc = tuple[str | int, ...]


Problem = tuple[Loc, str, str | None]
"""Location, message and fix hint of a problem found before the model validates."""


def _rejection_problems(rejections: Any, loc: Loc) -> Iterator[Problem]:
    if not isinstance(rejections, list):
        return  # the model reports the wrong type
    for index, item in enumerate(rejections):
        r_loc = (*loc, index)
        if not isinstance(item, dict):
            yield r_loc, "a rejection is a mapping with 'if' and 'utter'", None
            continue
        for key in ("if", "utter"):
            if key not in item:
                yield r_loc, f"required key {key!r} is missing", f"add {key!r}"
        if "if" in item and not isinstance(item["if"], (str, bool)):
            yield (*r_loc, "if"), "'if' must be a condition string or a boolean", None
        if "utter" in item and not isinstance(item["utter"], str):
            yield (*r_loc, "utter"), "'utter' must be a response name", None


def step_key_problems(steps: Any, loc: Loc) -> Iterator[Problem]:
    """Keys a step type does not allow and malformed rejections, with their location (nested
    branch steps included)."""
    if not isinstance(steps, list):
        return
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        s_loc = (*loc, index)
        kinds = [k for k in STEP_KINDS if k in step]
        allowed = STEP_KEYS[kinds[0]] if len(kinds) == 1 else None
        if kinds == ["collect"]:
            yield from _rejection_problems(step.get("rejections"), (*s_loc, "rejections"))
        if allowed is not None:
            for key in step:
                if key not in allowed:
                    yield ((*s_loc, key), f"unknown key {key!r} on a {kinds[0]} step (allowed: "
                           f"{', '.join(sorted(allowed))})", "remove it or check its spelling")
        branches = step.get("next")
        if isinstance(branches, list):
            for b_index, branch in enumerate(branches):
                if not isinstance(branch, dict):
                    continue
                for key in ("then", "else"):
                    yield from step_key_problems(branch.get(key), (*s_loc, "next", b_index, key))


@dataclass
class ParsedRejection:
    """A collect step's rejection with its condition parsed."""

    condition: Condition
    utter: str


@dataclass
class Step:
    """A step of a flattened flow; ``next`` lists (condition or None, target step id or END)."""

    id: str
    kind: str
    model: FlowStepModel
    loc: tuple[str | int, ...]
    next: list[tuple[Condition | None, str]] = field(default_factory=list)
    exit_if: list[Condition] = field(default_factory=list)
    rejections: list[ParsedRejection] = field(default_factory=list)

    @property
    def target(self) -> Any:
        """The value of the step's kind key (the slot, action, flow or agent it names)."""
        return getattr(self.model, self.kind)


@dataclass
class Flow:
    """A flow ready for the runtime: flattened steps, parsed guard and conditions."""

    id: str
    description: str
    name: str
    """``name:``, or the id with ``_`` and ``-`` as spaces (Rasa's readable name)."""
    steps: list[Step]
    model: FlowModel
    file: str = ""
    run_pattern_completed: bool = True
    guard: Condition | None = None
    """The parsed ``if:`` guard (None: always startable)."""

    def step(self, step_id: str) -> Step | None:
        """The step with id ``step_id``, or None."""
        return next((s for s in self.steps if s.id == step_id), None)

    @property
    def first_step(self) -> Step:
        """The flow's first step."""
        return self.steps[0]

    @property
    def link_only(self) -> bool:
        """A guard that names no slot or context field and is false: the flow is reachable only
        by ``link`` or ``call`` (as Rasa decides it)."""
        if self.guard is None:
            return False
        names = _DOTTED_NAME.search(_QUOTED_TEXT.sub('""', self.guard.text))
        return names is None and not self.guard.evaluate({"slots": {}, "context": {}})

    def call_steps_for(self, target: str) -> list[Step]:
        """This flow's ``call`` steps that call ``target``."""
        return [s for s in self.steps if s.kind == "call" and s.model.call == target]


def _auto_id(flow_id: str, index: int, step: FlowStepModel) -> str:
    """Rasa's id for a step without ``id``: ``<flow>_<index>_<postfix>``, where the index counts
    every step of the flow in document order (nested branch steps included) and the postfix is
    the action name, ``noop``, ``set_slots``, or ``<kind>_<target>``."""
    if step.kind == "action":
        postfix = str(step.action)
    elif step.kind in ("noop", "set_slots"):
        postfix = step.kind
    else:
        postfix = f"{step.kind}_{getattr(step, step.kind)}"
    return f"{flow_id}_{index}_{postfix}"


def _number_steps(items: list[FlowStepModel], flow_id: str, ids: dict[int, str]) -> None:
    """Assign an id to every step in document order (a step, then the steps nested in it)."""
    for item in items:
        ids[id(item)] = item.id or _auto_id(flow_id, len(ids), item)
        for branch in item.next if isinstance(item.next, list) else []:
            nested = branch.then if branch.if_ is not None else branch.else_
            if isinstance(nested, list):
                _number_steps(nested, flow_id, ids)


class _Flattener:
    """Turns nested step lists into one list of :class:`Step` with explicit ``next`` rules."""

    def __init__(self, parse: Callable[[str], Condition], ids: dict[int, str]) -> None:
        self.parse = parse
        self.ids = ids
        self.steps: list[Step] = []
        self.problems: list[tuple[Loc, str]] = []

    def condition(self, text: str, loc: Loc) -> Condition | None:
        try:
            return self.parse(text)
        except ValueError as exc:
            self.problems.append((loc, str(exc)))
            return None

    def walk(self, items: list[FlowStepModel], loc: Loc) -> str:
        ids = [self.ids[id(item)] for item in items]
        for index, item in enumerate(items):
            step = Step(id=ids[index], kind=item.kind, model=item, loc=(*loc, index))
            self.steps.append(step)
            default_next = ids[index + 1] if index + 1 < len(items) else END
            if item.next is None or isinstance(item.next, str):
                step.next = [(None, item.next or default_next)]
            else:
                self.branches(step, item.next, default_next)
            for c_index, text in enumerate(item.exit_if or []):
                cond = self.condition(text, (*step.loc, "exit_if", c_index))
                if cond is not None:
                    step.exit_if.append(cond)
            for r_index, rejection in enumerate(item.rejections or []):
                cond = self.condition(_condition_text(rejection["if"]),
                                      (*step.loc, "rejections", r_index, "if"))
                if cond is not None:
                    step.rejections.append(ParsedRejection(cond, str(rejection["utter"])))
        return ids[0] if ids else END

    def branches(self, step: Step, branches: list[NextBranch], default_next: str) -> None:
        for b_index, branch in enumerate(branches):
            b_loc = (*step.loc, "next", b_index)
            target = branch.then if branch.if_ is not None else branch.else_
            if isinstance(target, list):
                target_id = self.walk(target, (*b_loc, "then" if branch.if_ else "else"))
            else:
                target_id = str(target)
            cond = None
            if branch.if_ is not None:
                cond = self.condition(branch.if_, (*b_loc, "if"))
                if cond is None:
                    continue
            step.next.append((cond, target_id))
        if not step.next or step.next[-1][0] is not None:
            step.next.append((None, default_next))


def flatten(flow_id: str, model: FlowModel, parse: Callable[[str], Condition],
            file: str = "") -> tuple[Flow, list[tuple[Loc, str]]]:
    """Flatten nested steps and parse every condition; ``parse(text)`` raises ValueError.

    Returns the flow and the (location, message) of every condition that did not parse.
    """
    ids: dict[int, str] = {}
    _number_steps(model.steps, flow_id, ids)
    flattener = _Flattener(parse, ids)
    guard = None
    if model.if_ is not None:
        guard = flattener.condition(model.if_, ("flows", flow_id, "if"))
    flattener.walk(model.steps, ("flows", flow_id, "steps"))
    readable = flow_id.replace("_", " ").replace("-", " ")
    flow = Flow(id=flow_id, description=model.description, name=model.name or readable,
                steps=flattener.steps, model=model, file=file,
                run_pattern_completed=model.run_pattern_completed, guard=guard)
    return flow, flattener.problems
