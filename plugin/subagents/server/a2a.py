"""Our sub agents served over A2A, and the routes any ``a2a-sdk`` executor needs.

Each published sub agent gets its own JSON-RPC endpoint at ``/a2a/<name>/`` and its own agent
card at ``/a2a/<name>/.well-known/agent-card.json``. The card's interface URL is built from the
address the card was fetched from, so it is right behind any host name or port.

One A2A context (``contextId``) is one conversation with the agent: its user and bot messages
and the state a waiting agent keeps are held in memory for the life of the process. A data part
``{"slots": {...}}`` in the incoming message gives the agent slot values. Agent statuses map to
task states: ``input_required`` -> ``input-required`` (the question is the status message),
``completed`` -> an ``answer`` artifact (the final text, and a data part with the slots the agent
set) then ``completed``, ``cancelled`` -> ``canceled``, errors -> ``failed`` with a generic
message (details stay in our logs). Texts the agent sends while it works (fillers) become
``working`` status messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from a2a.helpers import get_data_parts, new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from subagents.agents.schemas import AgentInput, AgentInputSlot, AgentOutput, AgentStatus
from subagents.channels.collecting import CollectingOutputChannel
from subagents.exceptions import AgentInitializationError
from subagents.types import typed_events

if TYPE_CHECKING:
    from subagents.agents.protocol import SubAgent
    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.a2a")
CARD_PATH = "/.well-known/agent-card.json"
HISTORY_TURNS = 20
FAILED_TEXT = "The agent could not finish this request."
MAX_CONVERSATIONS = 1000
"""Contexts remembered per published agent; the least recently used is forgotten first."""


def a2a_routes(card: AgentCard, executor: AgentExecutor, *, prefix: str,
               guard: Callable[[Any], Any] | None = None) -> list[Route]:
    """JSON-RPC at ``<prefix>/`` and the card at ``<prefix>/.well-known/agent-card.json``.

    Args:
        card: The agent card; its first interface's URL is replaced per request.
        executor: The ``a2a-sdk`` executor that answers messages.
        prefix: Path prefix without a trailing slash (``""`` for the root).
        guard: Wraps the JSON-RPC endpoint (e.g. a bearer-token check).
    """
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(),
                                    agent_card=card)
    rpc = create_jsonrpc_routes(handler, f"{prefix}/", enable_v0_3_compat=True)
    base_card = agent_card_to_dict(card)

    async def serve_card(request: Request) -> Response:
        data = json.loads(json.dumps(base_card))
        root = str(request.base_url).rstrip("/")
        for interface in data.get("supportedInterfaces") or []:
            interface["url"] = f"{root}{prefix}/"
        return JSONResponse(data)

    routes = [Route(f"{prefix}{CARD_PATH}", serve_card, methods=["GET"])]
    for route in rpc:
        endpoint = guard(route.endpoint) if guard is not None else route.endpoint
        routes.append(Route(route.path, endpoint, methods=["POST"]))
    return routes


class _Conversation:
    """What one A2A context remembers between messages."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.slots: dict[str, Any] = {}
        self.pending: dict[str, Any] = {}
        self.lock = anyio.Lock()


def _transcript(events: list[dict[str, Any]]) -> str:
    lines = []
    for event in events[-2 * HISTORY_TURNS:]:
        if event.get("event") == "user":
            lines.append(f"USER: {event.get('text') or ''}")
        elif event.get("event") == "bot":
            lines.append(f"AI: {event.get('text') or ''}")
    return "\n".join(lines)


def incoming_slots(context: RequestContext) -> dict[str, Any]:
    """The slots an A2A client sent with its message (the ``slots`` of a data part)."""
    if context.message is None:
        return {}
    for data in get_data_parts(list(context.message.parts)):
        if isinstance(data, dict) and isinstance(data.get("slots"), dict):
            return dict(data["slots"])
    return {}


class SubAgentExecutor(AgentExecutor):
    """Answers A2A messages with one of our sub agents (an ``a2a-sdk`` ``AgentExecutor``)."""

    def __init__(self, agent: SubAgent, slot_types: Mapping[str, str] | None = None) -> None:
        self.agent = agent
        self.slot_types = dict(slot_types or {})
        self._conversations: dict[str, _Conversation] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the agent on the incoming message and publish the task's new state."""
        updater = await task_updater(context, event_queue)
        conversation = self._conversations.pop(updater.context_id, None) or _Conversation()
        self._conversations[updater.context_id] = conversation  # most recent last
        while len(self._conversations) > MAX_CONVERSATIONS:
            self._conversations.pop(next(iter(self._conversations)))
        async with conversation.lock:
            await self._run(context, updater, conversation, updater.context_id)

    async def _run(self, context: RequestContext, updater: TaskUpdater,
                   conversation: _Conversation, context_id: str) -> None:
        async def working(text: str) -> None:
            await updater.start_work(updater.new_agent_message([Part(text=text)]))

        text = context.get_user_input()
        conversation.slots.update(incoming_slots(context))
        agent_input = self._input(text, conversation, context_id)
        conversation.events.append({"event": "user", "text": text})
        try:
            output = await self.agent.run(agent_input, CollectingOutputChannel())
        except Exception:
            log.exception("a2a.serve.agent_crashed", agent=self.agent.name)
            await updater.failed(updater.new_agent_message([Part(text=FAILED_TEXT)]))
            return
        bot_texts = [e.get("text") or "" for e in output.events if e.get("event") == "bot"]
        for event in output.events:
            if event.get("event") in ("bot", "user"):
                conversation.events.append(event)
            elif event.get("event") == "slot":
                conversation.slots[event["name"]] = event.get("value")
        status = output.status
        log.info("a2a.serve.finished", agent=self.agent.name, status=status.value)
        if status == AgentStatus.INPUT_REQUIRED:
            conversation.pending = dict(output.metadata or {})
            question = bot_texts[-1] if bot_texts else (output.response_message or "")
            for extra in bot_texts[:-1]:
                await working(extra)
            await updater.requires_input(updater.new_agent_message([Part(text=question)]))
            return
        conversation.pending = {}
        if status == AgentStatus.COMPLETED:
            final = output.response_message or (bot_texts.pop() if bot_texts else "")
            for extra in bot_texts:
                await working(extra)
            await self._complete(updater, output, final, conversation)
        elif status == AgentStatus.CANCELLED:
            await updater.cancel()
        else:
            log.warning("a2a.serve.failed", agent=self.agent.name, error=output.error_message)
            await updater.failed(updater.new_agent_message([Part(text=FAILED_TEXT)]))

    async def _complete(self, updater: TaskUpdater, output: AgentOutput, final: str,
                        conversation: _Conversation) -> None:
        if output.response_message:
            conversation.events.append({"event": "bot", "text": output.response_message})
        set_slots = {e["name"]: e.get("value") for e in output.events if e.get("event") == "slot"}
        parts = [Part(text=final or "Done.")]
        if set_slots:
            parts.append(new_data_part({"slots": set_slots}))
        await updater.add_artifact(parts, name="answer")
        await updater.complete()

    def _input(self, text: str, conversation: _Conversation, context_id: str) -> AgentInput:
        slots = [AgentInputSlot(name=name, value=value, type=self.slot_types.get(name, "any"))
                 for name, value in conversation.slots.items()]
        metadata = {**conversation.pending, "sender_id": context_id, "context_id": context_id,
                    "agent_id": self.agent.name, "model_id": self.agent.name}
        events = [*conversation.events, {"event": "user", "text": text}]
        return AgentInput(id=self.agent.name, user_message=text, slots=slots,
                          conversation_history=_transcript(events),
                          events=typed_events(events),
                          metadata=metadata, recipient_id=context_id)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task cancelled (a running agent is not interrupted)."""
        await cancel_task(context, event_queue)


def agent_card(name: str, description: str, skill: AgentSkill, *,
               streaming: bool = True) -> AgentCard:
    """A card for an agent with one skill that takes and gives text and JSON over JSON-RPC.

    Args:
        name: The agent's name.
        description: What the agent does.
        skill: Its one skill.
        streaming: Whether it streams its task updates.

    Returns:
        The card; its interface URL is a placeholder that :func:`a2a_routes` fills in per request.
    """
    return AgentCard(
        name=name, description=description, version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming),
        supported_interfaces=[AgentInterface(url="/", protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[skill])


async def task_updater(context: RequestContext, event_queue: EventQueue) -> TaskUpdater:
    """The updater of the context's task; a message that starts a task gets one, published
    first (an executor's ``execute``)."""
    assert context.message is not None
    task = context.current_task
    if task is None:
        task = new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
    return TaskUpdater(event_queue, task.id, task.context_id)


async def cancel_task(context: RequestContext, event_queue: EventQueue) -> None:
    """Mark the context's task cancelled (an executor's ``cancel``)."""
    if context.task_id and context.context_id:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def sub_agent_card(agent: SubAgent) -> AgentCard:
    """The agent card of one of our sub agents."""
    return agent_card(agent.name, agent.description.strip(), AgentSkill(
        id=agent.name, name=agent.name, tags=["sub-agent"],
        description=agent.description.strip()))


def published_agents(assistant: Assistant, names: Sequence[str] | None) -> list[SubAgent]:
    """The agents to publish: every sub agent a flow calls, or the named ones.

    Raises:
        AgentInitializationError: a named agent is not called by any flow (so it is not
            loaded); code ``a2a.serve.unknown_agent``.
    """
    loaded: dict[str, SubAgent] = {}
    for (name, protocol), agent in sorted(assistant.agents.items(),
                                          key=lambda item: item[0][1] != "mcp_open"):
        if protocol != "a2a":
            loaded.setdefault(name, agent)
    if not names:
        return list(loaded.values())
    missing = [n for n in names if n not in loaded]
    if missing:
        raise AgentInitializationError(
            f"cannot publish {', '.join(missing)} over A2A: not a sub agent that a flow calls "
            f"(available: {', '.join(sorted(loaded)) or 'none'})", code="a2a.serve.unknown_agent")
    return [loaded[n] for n in names]


def sub_agent_routes(assistant: Assistant, names: Sequence[str] | None = None, *,
                     guard: Callable[[Any], Any] | None = None) -> list[Route]:
    """Routes publishing the sub agents of ``assistant`` over A2A (see the module docstring)."""
    slot_types = {name: d.type for name, d in assistant.project.domain.slots.items()}
    routes: list[Route] = []
    for agent in published_agents(assistant, names):
        executor: Any = SubAgentExecutor(agent, slot_types)
        routes += a2a_routes(sub_agent_card(agent), executor, prefix=f"/a2a/{agent.name}",
                             guard=guard)
    return routes
