"""Flows: the file format (pydantic, publishes a JSON schema) and the flattened runtime form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..conditions import Condition

END = "END"
STEP_KINDS = ("collect", "action", "call", "set_slots", "noop", "link")


class NextBranch(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    if_: str | None = Field(default=None, alias="if")
    then: str | list[FlowStepModel] | None = None
    else_: str | list[FlowStepModel] | None = Field(default=None, alias="else")

    @model_validator(mode="after")
    def _shape(self) -> NextBranch:
        if self.if_ is not None and self.then is None:
            raise ValueError("an 'if' branch needs 'then'")
        if self.if_ is None and self.else_ is None:
            raise ValueError("a branch needs 'if' + 'then' or 'else'")
        return self


class FlowStepModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    description: str | None = None
    collect: str | None = None
    action: str | None = None
    call: str | None = None
    set_slots: list[dict[str, Any]] | None = None
    noop: bool | None = None
    link: str | None = None
    next: str | list[NextBranch] | None = None
    exit_if: list[str] | None = None
    ask_before_filling: bool = False
    reset_after_flow_ends: bool = True
    utter: str | None = None
    rejections: list[dict[str, Any]] | None = None
    force_slot_filling: bool = False
    mcp_server: str | None = None
    mapping: dict[str, Any] | None = None
    silence_timeout: float | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> FlowStepModel:
        kinds = [k for k in STEP_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none"
            raise ValueError(f"a step needs exactly one of {', '.join(STEP_KINDS)} (found {found})")
        if self.exit_if is not None and self.call is None:
            raise ValueError("'exit_if' is only allowed on a 'call' step")
        if self.exit_if is not None and (self.mcp_server or self.mapping):
            raise ValueError("a call step with 'exit_if' may not also have mcp_server/mapping")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in STEP_KINDS if getattr(self, k) is not None)


class FlowModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    description: str = ""
    name: str | None = None
    if_: str | None = Field(default=None, alias="if")
    nlu_trigger: Any = None
    persisted_slots: list[str] | None = None
    always_include_in_prompt: bool | None = None
    run_pattern_completed: bool = True
    steps: list[FlowStepModel] = Field(min_length=1)


class FlowsFile(BaseModel):
    model_config = ConfigDict(extra="allow")
    flows: dict[str, FlowModel] = Field(default_factory=dict)


NextBranch.model_rebuild()


@dataclass
class Step:
    """A step of a flattened flow; ``next`` lists (condition or None, target step id or END)."""

    id: str
    kind: str
    model: FlowStepModel
    loc: tuple[str | int, ...]
    next: list[tuple[Condition | None, str]] = field(default_factory=list)
    exit_if: list[Condition] = field(default_factory=list)

    @property
    def target(self) -> Any:
        return getattr(self.model, self.kind)


@dataclass
class Flow:
    id: str
    description: str
    name: str
    steps: list[Step]
    model: FlowModel
    file: str = ""
    run_pattern_completed: bool = True

    def step(self, step_id: str) -> Step | None:
        return next((s for s in self.steps if s.id == step_id), None)

    @property
    def first_step(self) -> Step:
        return self.steps[0]

    def call_steps_for(self, target: str) -> list[Step]:
        return [s for s in self.steps if s.kind == "call" and s.model.call == target]


Loc = tuple[str | int, ...]


def _auto_id(index: int, step: FlowStepModel, prefix: str) -> str:
    target = getattr(step, step.kind)
    label = target if isinstance(target, str) else ""
    return f"{prefix}{index}_{step.kind}{('_' + label) if label else ''}"


class _Flattener:
    """Turns nested step lists into one list of :class:`Step` with explicit ``next`` rules."""

    def __init__(self, parse: Callable[[str], Condition]) -> None:
        self.parse = parse
        self.steps: list[Step] = []
        self.problems: list[tuple[Loc, str]] = []

    def walk(self, items: list[FlowStepModel], loc: Loc, prefix: str) -> str:
        ids = [item.id or _auto_id(index, item, prefix) for index, item in enumerate(items)]
        for index, item in enumerate(items):
            step = Step(id=ids[index], kind=item.kind, model=item, loc=(*loc, index))
            self.steps.append(step)
            default_next = ids[index + 1] if index + 1 < len(items) else END
            if item.next is None or isinstance(item.next, str):
                step.next = [(None, item.next or default_next)]
            else:
                self.branches(step, item.next, default_next)
            for c_index, text in enumerate(item.exit_if or []):
                try:
                    step.exit_if.append(self.parse(text))
                except ValueError as exc:
                    self.problems.append(((*step.loc, "exit_if", c_index), str(exc)))
        return ids[0] if ids else END

    def branches(self, step: Step, branches: list[NextBranch], default_next: str) -> None:
        for b_index, branch in enumerate(branches):
            b_loc = (*step.loc, "next", b_index)
            target = branch.then if branch.if_ is not None else branch.else_
            if isinstance(target, list):
                target_id = self.walk(target, (*b_loc, "then" if branch.if_ else "else"),
                                      f"{step.id}_{b_index}_")
            else:
                target_id = str(target)
            cond = None
            if branch.if_ is not None:
                try:
                    cond = self.parse(branch.if_)
                except ValueError as exc:
                    self.problems.append(((*b_loc, "if"), str(exc)))
                    continue
            step.next.append((cond, target_id))
        if not step.next or step.next[-1][0] is not None:
            step.next.append((None, default_next))


def flatten(flow_id: str, model: FlowModel, parse: Callable[[str], Condition],
            file: str = "") -> tuple[Flow, list[tuple[Loc, str]]]:
    """Flatten nested steps; ``parse(text)`` parses a condition (raises ValueError).

    Returns the flow and the (location, message) of every condition that did not parse.
    """
    flattener = _Flattener(parse)
    flattener.walk(model.steps, ("flows", flow_id, "steps"), "")
    flow = Flow(id=flow_id, description=model.description, name=model.name or flow_id,
                steps=flattener.steps, model=model, file=file,
                run_pattern_completed=model.run_pattern_completed)
    return flow, flattener.problems
