"""Dialogue understanding: deterministic inputs first, then the LLM command generator.

In this order: ``/SetSlots(...)`` and ``/intent`` payloads; the message itself as the value of
the slot a ``collect`` step with ``force_slot_filling: true`` asks for, when that slot has a
``from_text`` mapping; an intent the client sent in the message metadata (``{"intent": "name"}``
or ``{"intent": {"name": ..., "confidence": ...}}``) when it triggers a flow; an empty or too
long message (``user_input.max_characters``, default 420, negative: no limit), which runs the
internal-error pattern without a model call; then the model, with the built-in prompt or the
project's own ``prompt_template``.

While a ``collect`` step with ``force_slot_filling: true`` asks, only the model's ``set slot``
commands for that slot are kept; without one, the message cannot be handled (as in Rasa).
"""

from __future__ import annotations

import functools
import math
import time
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from subagents.agents.transcript import hide_sign_in_links
from subagents.config.flows import Step
from subagents.config.project import Project
from subagents.dialogue.command_prompt import TRANSCRIPT_LINES, CustomCommandPrompt
from subagents.dialogue.command_schema import (
    JSON_INSTRUCTIONS,
    Offer,
    command_schema,
    commands_from_json,
)
from subagents.dialogue.commands import (
    CannotHandle,
    Command,
    Intent,
    InternalError,
    KnowledgeAnswer,
    SetSlot,
    parse_commands,
    parse_deterministic,
)
from subagents.dialogue.stack import Stack
from subagents.llm import Model, schema_format, wants_schema
from subagents.types import CallScope

if TYPE_CHECKING:
    from subagents.dialogue.turn import Turn

log = structlog.get_logger("subagents.dialogue")

PROMPT = """You route messages in a conversation between a user and an assistant. Read the \
conversation and the user's last message, then answer with commands, one per line, and nothing \
else.

Commands:
- start flow <flow_id>: the user wants to do one of the flows below
- set slot <slot_name> <value>: the user gave a value for a slot of the current flow
- cancel flow: the user wants to stop what the current flow is doing
{agent_commands}{pattern_commands}- offtopic reply: small talk or a message unrelated to any flow
- cannot handle: none of the above fits

Flows:
{flows}

Current state:
{state}

Conversation:
{conversation}

User's last message: {message}

Commands:"""


PATTERN_COMMANDS = {
    "pattern_clarification": "- disambiguate flows <flow_id> <flow_id> ...: the message could "
                             "mean several of the flows below; name them\n",
    "pattern_repeat_bot_messages": "- repeat message: the user wants to hear the assistant's "
                                   "last message again\n",
    "pattern_skip_question": "- skip question: the user wants to skip the question being "
                             "asked\n",
    "pattern_search": "- search and reply: no flow fits, and the user asks something the "
                      "knowledge base may answer (a fact, a policy, how the service works)\n",
}
"""Commands offered to the model only when the project has the pattern they run."""
PATTERN_TAGS = {"pattern_repeat_bot_messages": "repeat message",
                "pattern_skip_question": "skip question",
                "pattern_search": "search and reply"}
"""The JSON reply's tags of the argument-free pattern commands (see :mod:`.command_schema`)."""
DEFAULT_MAX_CHARACTERS = 420
USER_INPUT_TOO_LONG = "rasa_internal_error_user_input_too_long"
USER_INPUT_EMPTY = "rasa_internal_error_user_input_empty"
PROMPT_FAILED = "rasa_internal_error_default"
BUILTIN_INTENTS = frozenset({"session_start", "session_end", "restart"})
"""Intents that mean something even when no flow's ``nlu_trigger`` names them."""


class CommandGenerator:
    """Asks a model for commands; its caller name (fake server path) is ``command_generator``.

    A project may subclass it and name the subclass in ``config.yml`` by its module path
    (``pipeline: - name: addons.routing.MyCommandGenerator``); Rasa's
    ``CompactLLMCommandGenerator`` and its siblings resolve to this class, so a class written
    against them subclasses it too. Override :meth:`understand`, :meth:`predict`,
    :meth:`render` (the built-in prompt) or :meth:`parse_reply` (the model's answer to
    commands); the constructor takes ``(project, llm)``.
    """

    def __init__(self, project: Project, llm: Model) -> None:
        self.project = project
        self.llm = llm
        found = project.pipeline.command_generator()
        self.max_characters = _max_characters(found[1] if found else {})
        """The longest message the model is asked about (negative: no limit)."""
        self.custom_prompt = CustomCommandPrompt.from_project(project)
        """The project's own ``prompt_template``, if it has one."""

    async def understand(self, turn: Turn, text: str) -> list[Command]:
        """The commands of the message ``text``, the turn's latest user event.

        Raises:
            LLMError: the command generator's model failed.
        """
        fixed = parse_deterministic(text, set(self.project.flows))
        if fixed is not None:
            return fixed
        forced = self.forced_slot(turn.stack)
        if forced is not None and self._from_text(forced):
            log.info("dialogue.slot.filled_from_text", slot=forced)
            return [SetSlot(forced, text)]
        user = turn.events[-1] if turn.events and turn.events[-1].get("event") == "user" \
            else {}
        intent = self.metadata_intent(user.get("metadata"))
        if intent is not None:
            return [intent]
        started = time.perf_counter()
        commands = await self.predict(text, turn.stack, turn.slots, turn.events[:-1],
                                      scope=turn.scope,
                                      completed=turn.snapshot.completed_agents(),
                                      filled=set(turn.snapshot.filled))
        if getattr(turn.channel, "wants_trace", False) is True:  # the inspector's timeline
            await turn.channel.send_trace(turn.sender_id, "command_generation", {  # type: ignore[union-attr]
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "commands": [_shown_command(c) for c in commands]})
        return commands

    def forced_slot(self, stack: Stack) -> str | None:
        """The slot a ``collect`` step with ``force_slot_filling: true`` is asking for now."""
        frame = stack.top_flow()
        if frame is None or stack.top() is not frame or frame.awaiting is None:
            return None
        flow = self.project.flows.get(frame.flow_id)
        step: Step | None = flow.step(frame.step_id) if flow is not None else None
        if step is None or step.kind != "collect" or not step.model.force_slot_filling:
            return None
        return str(step.model.collect)

    def _from_text(self, slot: str) -> bool:
        definition = self.project.domain.slots.get(slot)
        return definition is not None and any(
            m.get("type") == "from_text" for m in definition.mappings or [])

    def metadata_intent(self, metadata: Any) -> Intent | None:
        """The intent a client sent with the message, if it triggers a flow (or is
        ``session_start``, ``session_end`` or ``restart``) at its confidence."""
        raw = metadata.get("intent") if isinstance(metadata, dict) else None
        if raw is None:
            return None
        name, confidence = _intent_of(raw)
        if name is None:
            log.warning("dialogue.intent.metadata_invalid", kind=type(raw).__name__)
            return None
        if self.project.flow_for_intent(name, confidence) is None and not (
                name in BUILTIN_INTENTS and confidence >= 1.0):
            log.info("dialogue.intent.not_triggered", intent=name, confidence=confidence)
            return None
        return Intent(name, confidence)

    def input_error(self, text: str) -> InternalError | None:
        """An empty message, or one longer than ``max_characters``: no model is asked."""
        if not text.strip():
            return InternalError(USER_INPUT_EMPTY)
        if 0 <= self.max_characters < len(text):
            return InternalError(USER_INPUT_TOO_LONG, {"max_characters": self.max_characters})
        return None

    def _flows(self) -> str:
        lines = []
        for flow in self.project.flows.values():
            if flow.id.startswith("pattern_"):
                continue
            line = f"- {flow.id}: {flow.description.strip()}"
            agents = [s.model.call for s in flow.steps
                      if s.kind == "call" and s.model.call in self.project.agents]
            if agents:
                line += f" (uses sub agents: {', '.join(agents)})"
            lines.append(line)
        return "\n".join(lines) or "(none)"

    def _state(self, stack: Stack, slots: dict[str, Any], completed: list[str]
               ) -> tuple[str, str]:
        lines = []
        agent_commands = ""
        top = stack.top_user_flow()
        if top is not None:
            flow = self.project.flows.get(top.flow_id)
            lines.append(f"- active flow: {top.flow_id}")
            if flow is not None:
                collected = sorted({str(s.model.collect) for s in flow.steps
                                    if s.kind == "collect"})
                for name in collected:
                    lines.append(f"- slot {name} = {slots.get(name)!r}")
        frame = stack.top()
        awaiting = getattr(frame, "awaiting", None)
        if awaiting:
            lines.append(f"- the assistant asked for slot {awaiting}")
        active = stack.active_agent()
        if active is not None:
            spec = self.project.agents.get(active.agent_id)
            description = spec.config.agent.description.strip() if spec else ""
            lines.append(f"- active sub agent: {active.agent_id} ({description})")
            agent_commands += ("- continue agent: the message is for the active sub agent "
                               "(answers its question or continues its task)\n")
        if completed:
            lines.append(f"- completed sub agents: {', '.join(completed)}")
            agent_commands += ("- restart agent <agent_name>: the user wants a completed sub "
                               "agent to do its task again\n")
        return ("\n".join(lines) or "- no active flow"), agent_commands

    def render(self, text: str, stack: Stack, slots: dict[str, Any],
               events: list[dict[str, Any]], *, completed: list[str] | None = None) -> str:
        """The prompt for the message ``text`` in the given conversation state (``events``:
        the latest ones, all of them unless ``completed`` names the completed agents)."""
        state, agent_commands = self._state(
            stack, slots, completed_agents(events) if completed is None else completed)
        pattern_commands = "".join(line for flow_id, line in PATTERN_COMMANDS.items()
                                   if flow_id in self.project.flows)
        return PROMPT.format(flows=self._flows(), state=state, agent_commands=agent_commands,
                             pattern_commands=pattern_commands,
                             conversation=transcript(events, 20) or "(empty)", message=text)

    def parse_reply(self, reply: str | None) -> list[Command]:
        """The commands of the model's answer: its JSON form (constrained output), else its
        lines (lines that are no command are ignored)."""
        found = commands_from_json(reply, {"search and reply": KnowledgeAnswer()})
        return parse_commands(reply) if found is None else found

    def offer(self, stack: Stack, events: list[dict[str, Any]], *,
              completed: list[str] | None = None) -> Offer:
        """The commands the built-in prompt offers in this state (the reply schema's choices;
        ``completed``: the agents whose latest run completed, None: found in ``events``)."""
        flows = self.project.flows
        return Offer(
            flows=tuple(f for f in flows if not f.startswith("pattern_")),
            slots=tuple((name, slot) for name, slot in self.project.domain.slots.items()
                        if slot.llm_fillable()),
            agent_waiting=stack.active_agent() is not None,
            completed_agents=tuple(completed_agents(events) if completed is None
                                   else completed),
            extra=tuple(tag for flow, tag in PATTERN_TAGS.items() if flow in flows),
            clarify="pattern_clarification" in flows)

    async def predict(self, text: str, stack: Stack, slots: dict[str, Any],
                      events: list[dict[str, Any]], *, scope: CallScope | None = None,
                      completed: list[str] | None = None, filled: set[str] | None = None
                      ) -> list[Command]:
        """Ask the model which commands the message ``text`` means.

        Args:
            text: The message.
            stack: The dialogue stack.
            slots: Every slot's value.
            events: The conversation's latest events before the message (all of them unless
                ``completed`` and ``filled`` are given).
            scope: The turn's deadline, usage tally and recording.
            completed: Agents whose latest run completed (None: found in ``events``).
            filled: Slots that were ever set (None: found in ``events``).
        """
        if completed is None:
            completed = completed_agents(events)
        error = self.input_error(text)
        if error is not None:
            log.info("dialogue.user_input.refused", error_type=error.error_type,
                     length=len(text))
            return [error]
        custom = self.custom_prompt
        options: dict[str, Any] | None = None
        if custom is None:
            prompt = self.render(text, stack, slots, events, completed=completed)
            if wants_schema(self.llm):  # constrained output: the reply is JSON under a schema
                prompt += JSON_INSTRUCTIONS
                options = {"response_format": schema_format("commands", command_schema(
                    self.offer(stack, events, completed=completed)))}
        else:
            try:
                prompt = await anyio.to_thread.run_sync(functools.partial(
                    custom.render, text, stack, slots, events,
                    conversation=transcript(events, TRANSCRIPT_LINES - 1),
                    completed=completed, filled=filled))
            except Exception as exc:  # noqa: BLE001 - a template error must not end the turn
                log.error("dialogue.command_prompt.render_failed", error_type=type(exc).__name__,
                          error=str(exc)[:200])
                return [InternalError(PROMPT_FAILED)]
        response = await self.llm.complete([{"role": "user", "content": prompt}], None,
                                           scope=scope, options=options)
        commands = self.parse_reply(response.text)
        forced = self.forced_slot(stack)
        if forced is not None:  # as in Rasa: only the asked slot may be set, or nothing fits
            kept: list[Command] = [c for c in commands
                                   if isinstance(c, SetSlot) and c.name == forced]
            if len(kept) < len(commands):
                log.info("dialogue.commands.force_slot_filling", slot=forced,
                         dropped=len(commands) - len(kept))
            commands = kept
        if not commands:
            # as in Rasa: a reply with no command it can read means the message was not
            # understood, whether or not a flow is running
            log.warning("dialogue.commands.none_parsed", reply_length=len(response.text or ""))
            return [CannotHandle()]
        log.info("dialogue.commands.predicted", commands=[type(c).__name__ for c in commands])
        return commands


CompactLLMCommandGenerator = SearchReadyLLMCommandGenerator = CommandGenerator
SingleStepLLMCommandGenerator = LLMCommandGenerator = LLMBasedCommandGenerator = CommandGenerator
MultiStepLLMCommandGenerator = CommandGenerator
"""Rasa's command generator names, for classes written against them (see
:mod:`subagents.rasa_compat`)."""
def _shown_command(command: Any) -> str:
    """``StartFlow(flow='x')`` as the inspector shows it."""
    fields = ", ".join(f"{k}={v!r}" for k, v in vars(command).items()) \
        if hasattr(command, "__dict__") else ""
    return f"{type(command).__name__}({fields})"


def transcript(events: list[dict[str, Any]], lines: int) -> str:
    """``USER: ...`` / ``AI: ...`` lines (agent turns prefixed with the agent's name)."""
    if lines <= 0:  # taken as a slice's start, as it always was: 0 keeps every line
        every = [line for line in map(_transcript_line, events) if line is not None]
        return "\n".join(every[-lines:])
    out: list[str] = []
    for event in reversed(events):  # the latest lines only: a long conversation is not walked
        line = _transcript_line(event)
        if line is not None:
            out.append(line)
            if len(out) == lines:
                break
    return "\n".join(reversed(out))


def _transcript_line(event: dict[str, Any]) -> str | None:
    if event.get("event") == "user":
        return f"USER: {event.get('text') or ''}"
    if event.get("event") == "bot" and event.get("text"):
        agent = (event.get("metadata") or {}).get("agent_name")
        return f"{agent if agent else 'AI'}: {hide_sign_in_links(event['text'])}"
    return None


def completed_agents(events: list[dict[str, Any]]) -> list[str]:
    """Agents whose latest started/completed event is a completion (they may be restarted)."""
    last: dict[str, str] = {}
    for event in events:
        if event.get("event") in ("agent_started", "agent_completed"):
            last[str(event.get("agent_id"))] = str(event["event"])
    return [name for name, kind in last.items() if kind == "agent_completed"]


def _max_characters(settings: dict[str, Any]) -> int:
    user_input = settings.get("user_input")
    value = user_input.get("max_characters") if isinstance(user_input, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) \
        else DEFAULT_MAX_CHARACTERS


def _intent_of(raw: Any) -> tuple[str | None, float]:
    """(name, confidence) of ``"name"`` or ``{"name": ..., "confidence": ...}``."""
    if isinstance(raw, str) and raw.strip():
        return raw.strip(), 1.0
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or \
            not raw["name"].strip():
        return None, 0.0
    confidence = raw.get("confidence", 1.0)
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or \
            not math.isfinite(confidence):
        return None, 0.0
    return raw["name"].strip(), float(confidence)
