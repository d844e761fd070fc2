"""One run of an agent: its state and the operations on it.

A :class:`Run` lives for one invocation. It holds what the run has done so far (the exchange with
the model, the events it recorded, its slot view, counters, usage) and does the things that
change that state: call the model (streamed to the channel when it streams), send text and
events to the user, record a text, a tool call or a slot effect. The engine
(:mod:`subagents.agents.engine`) decides *when*; the run knows *how*.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from subagents.agents.fillers import FillerMemory
from subagents.llm import LLMResponse, Model, Usage
from subagents.mcp.callbacks import ElicitationRegistry
from subagents.mcp.oauth.consent import ConsentRegistry
from subagents.tools.approvals import ApprovalToolset
from subagents.tools.base import CallContext, SlotEffect, Tool, ToolOutcome, Toolset
from subagents.types import (
    AgentInput,
    AgentInputSlot,
    AgentToolContext,
    AgentToolResult,
    CallScope,
    ChatMessage,
    Event,
    JsonObject,
    McpToolExecuted,
    OutputChannel,
    SlotSet,
)

if TYPE_CHECKING:
    from subagents.agents.budgets import BudgetGuard
    from subagents.agents.fillers import ProgressReporter

log = structlog.get_logger("subagents.agent")

Utter = Callable[..., Event]
"""Makes the ``bot`` event of a text the agent sent (the agent's ``create_bot_uttered``)."""


def _plain_utter(text: str, agent_input: AgentInput, message_type: str = "final_response",
                 llm_time_to_first_token_ms: float | None = None,
                 llm_total_time_ms: float | None = None, streamed: bool = False) -> Event:
    from subagents.types import BotUttered

    return BotUttered(text, metadata={"agent_message_type": message_type})


@dataclass(eq=False)
class Run:
    """State that lives for one invocation only, and the operations that change it."""

    input: AgentInput
    channel: OutputChannel | None
    scope: CallScope = field(default_factory=CallScope)
    """What the turn gives the run's model and tool calls: deadline, usage tally, recording."""
    utter: Utter = _plain_utter
    """Makes the ``bot`` event of a text the run sent (the agent's ``create_bot_uttered``)."""
    toolset: Toolset | None = None
    """The composed toolset of this run (features wrapped around the plain tools)."""
    approvals: ApprovalToolset | None = None
    tools: dict[str, Tool] = field(default_factory=dict)
    """The offered tools by name."""
    tool_messages: list[ChatMessage] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    results: dict[str, AgentToolResult] = field(default_factory=dict)
    structured: list[JsonObject] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model_usage: dict[str, Usage] = field(default_factory=dict)
    """The run's usage by the model that answered (a routed group may use several)."""
    steps: int = 0
    unavailable_rounds: int = 0
    malformed_rounds: int = 0
    """Steps in a row whose response the run could not use (malformed arguments, nothing)."""
    completion_pending: bool = False
    tool_counts: dict[str, int] = field(default_factory=dict)
    slot_values: dict[str, Any] = field(default_factory=dict)
    initial_slot_values: dict[str, Any] = field(default_factory=dict)
    slot_set_by_hook: set[str] = field(default_factory=set)
    recorded_slots: dict[str, Any] = field(default_factory=dict)
    """Slots whose SlotSet was recorded during the run, with the value recorded last."""
    output_metadata: JsonObject = field(default_factory=dict)
    elicitations: ElicitationRegistry = field(default_factory=ElicitationRegistry)
    """The calls waiting for a user's answer to an MCP server's question (the MCP pool's)."""
    consents: ConsentRegistry = field(default_factory=ConsentRegistry)
    """The sign-in links waiting for the user's browser (the MCP pool's)."""
    elicitation: Any = None
    """The MCP server's request for input this run waits on (``agents.elicitation``)."""
    progress: ProgressReporter | None = None
    """Turns progress of running calls into messages (None when they are off)."""
    budget: BudgetGuard | None = None
    """Checks the run against ``configuration.budgets`` (None without caps)."""
    prompt_cache: tuple[dict[str, Any], str] | None = None
    """The last prompt context and the system prompt rendered from it."""
    history_cache: tuple[tuple[Any, ...], list[ChatMessage]] | None = None
    """The history messages and what they were built from."""
    fillers: FillerMemory = field(default_factory=FillerMemory)
    """The wordings of the fillers sent in the conversation so far."""
    traced: bool | None = None
    """Whether the channel wants trace records (looked up once per run)."""
    handled: set[str] = field(default_factory=set)
    """Built-in tool names the agent handles itself (``task_completed``)."""
    hooks_replaced: frozenset[str] = frozenset()
    """The agent's hooks a project replaced (looked up once per run): the package's own
    ``process_tool_output`` adds nothing, its prompt builders may be cached."""
    offered_cache: tuple[tuple[Tool, ...], list[JsonObject]] | None = None
    """The offered tools and their schemas in the model's format."""
    tool_context: AgentToolContext | None = None
    """The tool context of the last step's calls (a copy of the input metadata)."""
    exit_conditions: list[Any] | None = None
    """The call step's parsed ``exit_if`` conditions (task agents; looked up once per run)."""

    # ------------------------------------------------------------------ counters
    @property
    def recipient_id(self) -> str | None:
        """Who the agent talks to (for the output channel)."""
        return self.input.recipient_id or self.input.metadata.get("sender_id")

    def add_usage(self, usage: Usage, model: str | None) -> None:
        """Count one model reply's tokens, in total and for the model that gave it."""
        self.usage.add(usage)
        if model is not None:
            counted = self.model_usage.get(model)
            if counted is None:
                counted = self.model_usage[model] = Usage()
            counted.add(usage)

    def count_tool(self, name: str) -> None:
        """Count one executed call of ``name``."""
        self.tool_counts[name] = self.tool_counts.get(name, 0) + 1

    def note(self, text: str) -> None:
        """Add a system message for the model's next call."""
        self.tool_messages.append({"role": "system", "content": text})

    @property
    def tracing(self) -> bool:
        """Whether the run's channel wants trace records."""
        if self.traced is None:
            self.traced = (self.channel is not None and self.recipient_id is not None
                           and getattr(self.channel, "wants_trace", False) is True)
        return self.traced

    def release(self) -> None:
        """Drop the run's toolset and progress reporter once the run is over: they point back
        at the run, and without this every finished run is left for the cyclic garbage
        collector instead of being freed at once."""
        self.toolset = self.approvals = self.progress = self.offered_cache = None
        self.tools = {}

    # ------------------------------------------------------------------ the model call
    async def generate(self, llm: Model, messages: list[ChatMessage],
                       tools: list[JsonObject]) -> LLMResponse:
        """Call the model once (streamed to the channel when it streams); count the step."""
        channel, recipient = self.channel, self.recipient_id
        self.steps += 1
        if channel is None or recipient is None or not channel.wants_streaming():
            response = await llm.complete(messages, tools or None, scope=self.scope)
        else:
            response = await self._stream(llm, channel, recipient, messages, tools)
        self.add_usage(response.usage, response.model)
        return response

    async def _stream(self, llm: Model, channel: OutputChannel, recipient: str,
                      messages: list[ChatMessage], tools: list[JsonObject]) -> LLMResponse:
        started = False
        leading = ""

        async def on_text(delta: str) -> None:
            # leading whitespace is held back, so a whitespace-only reply is never sent
            nonlocal started, leading
            if not started:
                leading += delta
                if not leading.strip():
                    return
                started, delta = True, leading
                await channel.send_response_chunk_start(recipient)
            await channel.send_response_chunk(recipient, delta)

        try:
            response = await llm.complete(messages, tools or None, stream=True,
                                          on_text=on_text, scope=self.scope)
        except BaseException:
            if started:
                await channel.send_response_chunk_end(recipient, interrupted=True)
            raise
        if started:
            await channel.send_response_chunk_end(recipient)
        return response

    # ------------------------------------------------------------------ the user's side
    async def deliver(self, text: str) -> None:
        """Send one whole message to the user (no-op without a channel)."""
        if self.channel is not None and self.recipient_id is not None:
            await self.channel.send_text_message(self.recipient_id, text)

    async def send_event(self, event: Event) -> None:
        """Show an event on channels that show them (no-op without a channel)."""
        if self.channel is not None and self.recipient_id is not None:
            await self.channel.send_event(self.recipient_id, event)

    def record_text(self, text: str, response: LLMResponse | None, message_type: str) -> Event:
        """Record a text the user got, as a ``bot`` event of the given message type."""
        event = self.utter(
            text, self.input, message_type,
            response.time_to_first_token_ms if response else None,
            response.total_time_ms if response else None,
            streamed=bool(response and response.streamed))
        self.events.append(event)
        return event

    def said_before(self, text: str) -> bool:
        """Whether a filler worded like ``text`` was already sent in this conversation."""
        return self.fillers.said_before(text, self.input.events, self.events,
                                        self.input.earlier.fillers)

    # ------------------------------------------------------------------ tools
    def call_context(self, timeout: float) -> CallContext:
        """The context of this step's tool calls."""
        # the tool context holds a copy of the input metadata; while that copy still equals the
        # metadata (neither side changed) it serves the next step too
        shared = self.tool_context
        if shared is None or shared.metadata != self.input.metadata:
            shared = self.tool_context = AgentToolContext(metadata=dict(self.input.metadata))
        return CallContext(self.input, shared, timeout=timeout, on_progress=self.progress,
                           scope=self.scope)

    def record_tool(self, outcome: ToolOutcome, *, agent_id: str, agent_name: str
                    ) -> tuple[str, Event | None]:
        """Record a call that ran, then its slot effects; return the model's answer and the
        tool event (None for built-ins, which get no event)."""
        call, result = outcome.call, outcome.result
        self.count_tool(call.name)
        source = call.tool.source if call.tool else ""
        duration_ms = round(outcome.duration_ms, 1)
        event = None
        if source != "builtin":
            event = McpToolExecuted(call.name, call.arguments, result.result,
                                    is_error=result.is_error,
                                    error_message=result.error_message, agent_id=agent_id,
                                    duration_ms=duration_ms)
            self.events.append(event)
            if not result.is_error:
                self.results[call.id] = result
                self.structured.append({"name": call.name, "result": result.result or ""})
        for effect in outcome.effects:
            self.apply_effect(effect)
        # log.bind().info: the lazy proxy's own path, without its failed attribute lookup
        log.bind().info("agent.tool.finished", agent=agent_name, tool=call.name, source=source,
                        is_error=result.is_error, duration_ms=duration_ms)
        if result.is_error:
            return f"Error: {result.error_message}", event
        if outcome.model_text is not None:
            return outcome.model_text, event
        return (result.result if result.result is not None else ""), event

    # ------------------------------------------------------------------ slots
    def apply_effect(self, effect: SlotEffect) -> None:
        """Set a slot a call set and record the SlotSet where the call happened."""
        value = effect.value
        slot = self.input.slot(effect.name)
        if effect.extend_list and slot is not None:
            value = list(slot.value or []) + (value if isinstance(value, list) else [value])
        if effect.only_if_changed:
            before = self.recorded_slots.get(effect.name,
                                             self.initial_slot_values.get(effect.name))
            first = effect.name not in self.recorded_slots
            self.apply_slot(effect.name, value)
            if value == before and first:
                return
            self.recorded_slots[effect.name] = value
        else:
            self.apply_slot(effect.name, value)
            self.slot_set_by_hook.add(effect.name)
        self.events.append(SlotSet(effect.name, value))

    def apply_slot(self, name: str, value: Any) -> None:
        """Update the run's view of a slot (a slot not in the input is added)."""
        slot = self.input.slot(name)
        if slot is None:
            self.input.slots.append(AgentInputSlot(name=name, value=value, type="any"))
        else:
            slot.value = value
        self.slot_values[name] = value

    def add_hook_events(self, produced: list[Any], agent_name: str) -> None:
        """Events a ``process_tool_output`` hook returned: recorded, shown to the next step,
        and SlotSets applied to the slot view; anything that is not an event is logged."""
        from subagents.types import typed_event

        for item in produced:
            if not isinstance(item, dict) or not isinstance(item.get("event"), str):
                log.error("agent.hook.invalid_event", agent=agent_name, value=repr(item)[:200])
                continue
            event = typed_event(item)
            self.events.append(event)
            self.input.events.append(event)
            if event["event"] == "slot":
                self.apply_slot(event["name"], event.get("value"))
                self.slot_set_by_hook.add(event["name"])
