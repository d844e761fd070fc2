"""A project's own command-generator prompt: ``prompt_template`` of the command generator.

The template is a Jinja2 file (path relative to the project folder) rendered with autoescaping
off; a name the template uses but is not given renders empty. It receives the variables Rasa
passes to such a template:

* ``available_flows``: the flows a message may start (no patterns, no link-only flows, guards
  that hold now), each ``{name, description, slots, agent_info}``; ``slots`` lists
  ``{name, description, allowed_values}`` of the flow's collect steps a message may fill now,
  ``agent_info`` the sub agents the flow calls (``{name, description}``, only when it has some);
* ``current_conversation``: the transcript, ending with ``USER: <the message>``;
* ``flow_slots``: the active flow's fillable slots as ``{name, value, type, allowed_values,
  description}`` (an unset value is the text ``undefined``);
* ``current_flow``, ``current_slot``, ``current_slot_description``, ``current_slot_type``,
  ``current_slot_allowed_values``: the active flow and the slot it asks for;
* ``user_message``: the message on one line;
* ``active_agent`` (``{name, description}`` or None) and ``completed_agents`` (a list of them);
* ``current_datetime`` (unless ``include_date_time: false``), in ``timezone`` (default UTC), or
  the ``mocked_datetime`` slot when it is set.

The filter ``to_json_escaped_string`` writes a value as a JSON string literal.
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from subagents.config.flows import Flow, Step
from subagents.config.project import Project
from subagents.config.validation import project_file
from subagents.dialogue.stack import Stack

log = structlog.get_logger("subagents.dialogue")

TRANSCRIPT_LINES = 20
"""Lines of ``current_conversation`` (the message included)."""


def to_json_escaped_string(value: Any) -> str:
    """``value`` as a JSON string literal, quotes included (newlines and quotes escaped)."""
    return json.dumps(value if value is None or isinstance(value, str) else str(value),
                      ensure_ascii=False)


def allowed_values(slot_type: str | None, values: list[Any] | None) -> str | None:
    """How Rasa lists a slot's allowed values: ``[True, False]`` for a bool slot, the values of
    a categorical slot, else None."""
    if slot_type == "bool":
        return str([True, False])
    if slot_type in ("categorical", "strict_categorical"):
        return str([v for v in values or [] if v != "__other__"])
    return None


class CustomCommandPrompt:
    """Renders a project's own command-generator prompt.

    Args:
        project: The loaded project.
        text: The template's text.
        include_date_time: Whether ``current_datetime`` is passed.
        timezone: The timezone of ``current_datetime``.
    """

    def __init__(self, project: Project, text: str, *, include_date_time: bool = True,
                 timezone: str = "UTC") -> None:
        from jinja2.sandbox import SandboxedEnvironment

        self.project = project
        env = SandboxedEnvironment(autoescape=False)
        env.filters["to_json_escaped_string"] = to_json_escaped_string
        self.template = env.from_string(text)
        self.include_date_time = include_date_time
        try:
            self.timezone = ZoneInfo(timezone)
        except (ValueError, KeyError):
            log.warning("dialogue.command_prompt.timezone_unknown", timezone=timezone)
            self.timezone = ZoneInfo("UTC")

    @classmethod
    def from_project(cls, project: Project) -> CustomCommandPrompt | None:
        """The project's custom prompt, or None when it has none (or it cannot be read or
        parsed, which ``validate`` reports; the built-in prompt is used then, as Rasa does)."""
        from jinja2 import TemplateSyntaxError

        found = project.pipeline.command_generator()
        settings = found[1] if found else {}
        rel = settings.get("prompt_template") or settings.get("prompt")
        if not isinstance(rel, str) or not rel:
            return None
        path = project_file(project.root, rel)
        try:
            if path is None:
                raise OSError("the template is outside the project folder")
            text = path.read_text(encoding="utf-8")
            return cls(project, text, include_date_time=settings.get("include_date_time", True)
                       is not False, timezone=str(settings.get("timezone") or "UTC"))
        except (OSError, UnicodeDecodeError, TemplateSyntaxError) as exc:
            log.warning("dialogue.command_prompt.unusable", template=rel, error=str(exc)[:200])
            return None

    def render(self, text: str, stack: Stack, slots: dict[str, Any],
               events: list[dict[str, Any]], *, conversation: str, completed: list[str],
               filled: set[str] | None = None) -> str:
        """The prompt for the message ``text``.

        Args:
            text: The user's message.
            stack: The dialogue stack.
            slots: The current slot values.
            events: The conversation's latest events before the message.
            conversation: The transcript before the message.
            completed: The sub agents that completed and may be restarted.
            filled: The slots that were ever set (None: those set in ``events``).
        """
        return str(self.template.render(**self.variables(
            text, stack, slots, events, conversation=conversation, completed=completed,
            filled=filled)))

    def variables(self, text: str, stack: Stack, slots: dict[str, Any],
                  events: list[dict[str, Any]], *, conversation: str,
                  completed: list[str], filled: set[str] | None = None) -> dict[str, Any]:
        """The template's variables (see the module docstring and :meth:`render`)."""
        frame = stack.top_user_flow()
        flow = self.project.flows.get(frame.flow_id) if frame is not None else None
        step = flow.step(frame.step_id) if flow is not None and frame is not None else None
        current = step if step is not None and step.kind == "collect" else None
        if filled is None:
            filled = {str(e.get("name")) for e in events if e.get("event") == "slot"}
        values: dict[str, Any] = {
            "available_flows": [self._flow_entry(f, slots, filled, current)
                                for f in self.project.flows.values()
                                if self._startable(f, slots)],
            "current_conversation": f"{conversation}\nUSER: {text}".lstrip("\n"),
            "flow_slots": [self._flow_slot(s, slots) for s in self._fillable(flow, filled, current)]
            if flow is not None else [],
            "current_flow": flow.id if flow is not None else None,
            "user_message": text.replace("\n", " "),
            "active_agent": None,
            "completed_agents": [self._agent(name) for name in completed
                                 if name in self.project.agents],
        }
        values.update(self._current_slot(current))
        active = stack.active_agent()
        if active is not None:
            values["active_agent"] = self._agent(active.agent_id)
        if self.include_date_time:
            values["current_datetime"] = self._now(slots)
        return values

    def _startable(self, flow: Flow, slots: dict[str, Any]) -> bool:
        if flow.id.startswith("pattern_") or flow.link_only:
            return False
        guard = flow.guard
        return guard is None or bool(guard.evaluate({"slots": dict(slots)}))

    def _flow_entry(self, flow: Flow, slots: dict[str, Any], filled: set[str],
                    current: Step | None) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": flow.id, "description": flow.description,
            "slots": [{"name": str(s.model.collect), "description": self._description(s),
                       "allowed_values": self._allowed(str(s.model.collect))}
                      for s in self._fillable(flow, filled, current)]}
        agents = [self._agent(str(s.model.call)) for s in flow.steps
                  if s.kind == "call" and s.model.call in self.project.agents]
        if agents:
            entry["agent_info"] = agents
        return entry

    def _fillable(self, flow: Flow, filled: set[str], current: Step | None) -> list[Step]:
        """The flow's collect steps whose slot a message may fill now (once per slot)."""
        steps: dict[str, Step] = {}
        for step in flow.steps:
            name = str(step.model.collect) if step.kind == "collect" else ""
            if not name or name in steps or name not in self.project.domain.slots:
                continue
            if not step.model.ask_before_filling or name in filled or (
                    current is not None and current.model.collect == name):
                steps[name] = step
        return list(steps.values())

    def _description(self, step: Step) -> str | None:
        definition = self.project.domain.slots.get(str(step.model.collect))
        return step.model.description or (definition.description if definition else None)

    def _allowed(self, name: str) -> str | None:
        definition = self.project.domain.slots.get(name)
        return allowed_values(definition.type, definition.values) if definition else None

    def _flow_slot(self, step: Step, slots: dict[str, Any]) -> dict[str, Any]:
        name = str(step.model.collect)
        value = slots.get(name)
        definition = self.project.domain.slots.get(name)
        return {"name": name, "value": "undefined" if value is None else str(value),
                "type": definition.type if definition else None,
                "allowed_values": self._allowed(name), "description": self._description(step)}

    def _current_slot(self, step: Step | None) -> dict[str, Any]:
        if step is None:
            return {"current_slot": None, "current_slot_description": None,
                    "current_slot_type": None, "current_slot_allowed_values": None}
        name = str(step.model.collect)
        definition = self.project.domain.slots.get(name)
        return {"current_slot": name, "current_slot_description": self._description(step),
                "current_slot_type": definition.type if definition else None,
                "current_slot_allowed_values": self._allowed(name)}

    def _agent(self, name: str) -> dict[str, Any]:
        spec = self.project.agents.get(name)
        return {"name": name,
                "description": spec.config.agent.description.strip() if spec else ""}

    def _now(self, slots: dict[str, Any]) -> datetime:
        mocked = slots.get("mocked_datetime")
        if mocked:
            with contextlib.suppress(ValueError, TypeError):
                parsed = datetime.fromisoformat(str(mocked))
                return parsed.astimezone(self.timezone) if parsed.tzinfo \
                    else parsed.replace(tzinfo=self.timezone)
        return datetime.now(self.timezone)
