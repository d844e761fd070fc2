"""Our sub agents served over A2A, and the routes any ``a2a-sdk`` executor needs.

Each published sub agent gets its own JSON-RPC endpoint at ``/a2a/<name>/`` and its own agent
card at ``/a2a/<name>/.well-known/agent-card.json``. The card's interface URL is built from the
address the card was fetched from, so it is right behind any host name or port.

One A2A context (``contextId``) is one conversation with the agent: its user and bot messages
and the state a waiting agent keeps are held in memory. A data part ``{"slots": {...}}`` in the
incoming message gives the agent slot values. Agent statuses map to task states:
``input_required`` -> ``input-required`` (the question is the status message), ``completed`` ->
an ``answer`` artifact (the final text, and a data part with the slots the agent set) then
``completed``, ``cancelled`` -> ``canceled``, errors and a passed deadline -> ``failed`` with a
generic message (details stay in our logs). Texts the agent sends while it works (fillers)
become ``working`` status messages.

What keeps callers apart and the server bounded (docs/security.md, "A2A"):

* **Identity.** A caller is named by its bearer token: one of ``SUBAGENTS_A2A_TOKENS``
  (``name=token,...``), or the server's own token (the caller ``default``); without any token
  configured every caller is ``anonymous``. Tasks and contexts belong to the caller that made
  them: another caller can neither list, read, continue nor cancel them, and the same
  ``contextId`` sent by another caller is another conversation.
* **Caps.** A request body is at most the REST API's cap (1 MB, nested at most 64 levels,
  arriving within 30 s), else 413 / 400 / 408 before anything runs.
* **A deadline.** A request's agent run ends by the turn deadline (``SUBAGENTS_TURN_TIMEOUT``),
  its model calls a little earlier; a run that does not is a failed task.
* **Bounded memory.** At most ``SUBAGENTS_A2A_MAX_TASKS`` tasks (and as many contexts) per
  published agent are kept, the least recently changed forgotten first, and each is forgotten
  ``SUBAGENTS_A2A_TASK_TTL`` seconds after its last change; a task keeps its last 40 messages.
* **Errors** carry the JSON-RPC code and its standard message only, never exception text; the
  ``a2a-sdk``'s DEBUG log lines (which hold whole messages and tasks) are not logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from a2a.auth.user import User
from a2a.helpers import get_data_parts, new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Task
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP
from starlette.authentication import SimpleUser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message

from subagents.agents.schemas import AgentInput, AgentInputSlot, AgentOutput, AgentStatus
from subagents.channels.bodies import (
    BODY_TIMEOUT,
    MAX_BODY,
    BadRequestError,
    check_depth,
    read_body,
)
from subagents.channels.collecting import CollectingOutputChannel
from subagents.channels.input import TurnLimiter, busy_response
from subagents.exceptions import AgentInitializationError, SubagentsError
from subagents.server.rest_contract import token_matches
from subagents.types import CallScope, typed_events

if TYPE_CHECKING:
    from subagents.agents.protocol import SubAgent
    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.a2a")
CARD_PATH = "/.well-known/agent-card.json"
HISTORY_TURNS = 20
FAILED_TEXT = "The agent could not finish this request."
MAX_TASK_MESSAGES = 2 * HISTORY_TURNS
"""Messages a stored task keeps (its history beyond that is cut, oldest first)."""
TOKENS_ENV = "SUBAGENTS_A2A_TOKENS"
MAX_TASKS_ENV = "SUBAGENTS_A2A_MAX_TASKS"
TASK_TTL_ENV = "SUBAGENTS_A2A_TASK_TTL"
DEFAULT_MAX_TASKS = 1000
DEFAULT_TASK_TTL = 3600.0
DEFAULT_CALLER = "default"
"""The caller holding the server's own token."""
ANONYMOUS = "anonymous"
"""Every caller, when no token is configured at all."""
_STANDARD_MESSAGES = {code: error.message for error, code in JSON_RPC_ERROR_CODE_MAP.items()}


class A2ASettings:
    """Who may call the published agents, and how much the server keeps for them.

    Args:
        token: The server's bearer token (``--token``): its holder is the caller ``default``.
        callers: Caller name -> bearer token (``SUBAGENTS_A2A_TOKENS``).
        max_tasks: Tasks (and contexts) kept per published agent.
        task_ttl: Seconds a task (and a context) is kept after its last change.
        deadline: Seconds a request's agent run may take (the turn deadline).
        max_body: Bytes a request body may have.
        body_timeout: Seconds a request body may take to arrive.
    """

    def __init__(self, *, token: str | None = None, callers: Mapping[str, str] | None = None,
                 max_tasks: int = DEFAULT_MAX_TASKS, task_ttl: float = DEFAULT_TASK_TTL,
                 deadline: float = 60.0, max_body: int = MAX_BODY,
                 body_timeout: float = BODY_TIMEOUT) -> None:
        self.token = token
        self.callers = dict(callers or {})
        self.max_tasks = max_tasks
        self.task_ttl = task_ttl
        self.deadline = deadline
        self.max_body = max_body
        self.body_timeout = body_timeout

    @classmethod
    def from_env(cls, **kwargs: Any) -> A2ASettings:
        """The settings with ``SUBAGENTS_A2A_TOKENS``, ``SUBAGENTS_A2A_MAX_TASKS`` and
        ``SUBAGENTS_A2A_TASK_TTL`` read from the environment.

        Raises:
            SubagentsError: a value is malformed (``a2a.serve.settings_invalid``).
        """
        return cls(callers=_callers_from_env(), max_tasks=int(_positive(MAX_TASKS_ENV,
                                                                      DEFAULT_MAX_TASKS)),
                   task_ttl=_positive(TASK_TTL_ENV, DEFAULT_TASK_TTL), **kwargs)

    def caller(self, request: Request) -> str | None:
        """The identity of the request's caller; None when it presents no valid token."""
        for name, secret in self.callers.items():
            if token_matches(request, secret):
                return name
        if self.token:
            return DEFAULT_CALLER if token_matches(request, self.token) else None
        return None if self.callers else ANONYMOUS


def _settings_error(message: str) -> SubagentsError:
    return SubagentsError(message, code="a2a.serve.settings_invalid")


def _callers_from_env() -> dict[str, str]:
    raw = os.environ.get(TOKENS_ENV, "").strip()
    callers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, _, secret = item.partition("=")
        if not name.strip() or not secret.strip():
            raise _settings_error(f"{TOKENS_ENV}: each entry is name=token, separated by "
                                  "commas")
        callers[name.strip()] = secret.strip()
    return callers


def _positive(env: str, default: float) -> float:
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise _settings_error(f"{env}={raw!r} is not a positive number")
    return value


def a2a_routes(card: AgentCard, executor: AgentExecutor, *, prefix: str,
               guard: Callable[[Any], Any] | None = None,
               settings: A2ASettings | None = None,
               limiter: TurnLimiter | None = None) -> list[Route]:
    """JSON-RPC at ``<prefix>/`` and the card at ``<prefix>/.well-known/agent-card.json``.

    Args:
        card: The agent card; its first interface's URL is replaced per request.
        executor: The ``a2a-sdk`` executor that answers messages.
        prefix: Path prefix without a trailing slash (``""`` for the root).
        guard: Wraps the JSON-RPC endpoint (e.g. a concurrency cap).
        settings: Callers, caps and task storage (see the module docstring).
        limiter: The worker's turns in flight: beyond its cap a request is answered 503.
    """
    settings = settings or A2ASettings()
    _quiet_sdk_debug_logs()
    store = BoundedTaskStore(settings.max_tasks, settings.task_ttl)
    handler = DefaultRequestHandler(agent_executor=executor, task_store=store,
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
        endpoint = _guarded(route.endpoint, settings, limiter or TurnLimiter(None))
        endpoint = guard(endpoint) if guard is not None else endpoint
        routes.append(Route(route.path, endpoint, methods=["POST"]))
    return routes


def _guarded(dispatch: Callable[[Request], Any], settings: A2ASettings,
             limiter: TurnLimiter) -> Any:
    """The SDK's JSON-RPC endpoint behind the caller check, the body caps and the cap on turns
    in flight, its errors reduced to their code and standard message."""
    async def endpoint(request: Request) -> Response:
        caller = settings.caller(request)
        if caller is None:
            return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
        try:
            raw = await read_body(request, settings.max_body, settings.body_timeout)
            check_depth(raw)
        except BadRequestError as exc:
            return _rpc_error(exc.status, -32600, exc.message)
        if not limiter.try_acquire():
            return busy_response()
        request.scope["user"] = SimpleUser(caller)  # the owner of the tasks it makes
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        try:
            response = await dispatch(Request(request.scope, replay))
        except BaseException:
            limiter.release()
            raise
        return _without_internals(response, limiter.release)

    return endpoint


def _rpc_error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": code,
                                                                  "message": message}},
                        status_code=status)


def _plain_error(payload: Any) -> Any:
    """A JSON-RPC response whose error keeps only its code and the code's standard message."""
    if not isinstance(payload, dict) or not isinstance(payload.get("error"), dict):
        return payload
    error = payload["error"]
    code = error.get("code")
    plain = _STANDARD_MESSAGES.get(code, "Error") if isinstance(code, int) else "Error"
    if error.get("message") != plain or set(error) - {"code", "message"}:
        log.info("a2a.serve.error_answered", code=code)
    return {**payload, "error": {"code": code, "message": plain}}


def _without_internals(response: Response, done: Callable[[], None]) -> Response:
    """The SDK's response with every error reduced (:func:`_plain_error`), streams too;
    ``done`` is called once the response (a stream: its last event) is complete."""
    events = getattr(response, "body_iterator", None)
    if isinstance(response, JSONResponse) or events is None:
        done()
        if not isinstance(response, JSONResponse):
            return response
        payload = json.loads(bytes(response.body))
        plain = _plain_error(payload)
        if plain is payload:
            return response
        return JSONResponse(plain, status_code=response.status_code)

    async def plain_events() -> AsyncIterator[Any]:
        try:
            async for event in events:
                if isinstance(event, dict) and event.get("event") == "error":
                    try:
                        event = {**event, "data": json.dumps(_plain_error(json.loads(
                            event["data"])))}
                    except (KeyError, TypeError, ValueError):
                        event = {**event, "data": json.dumps({"error": {
                            "code": -32603, "message": _STANDARD_MESSAGES[-32603]}})}
                yield event
        finally:
            done()
            close = getattr(events, "aclose", None)
            if close is not None:  # a client that went away: end the SDK's stream here
                await close()

    response.body_iterator = plain_events()  # type: ignore[attr-defined]
    return response


def _quiet_sdk_debug_logs() -> None:
    """The SDK logs whole request bodies, messages and tasks at DEBUG: keep its loggers at
    INFO or above, whatever the server's level."""
    sdk = logging.getLogger("a2a")
    if sdk.getEffectiveLevel() < logging.INFO or sdk.level == logging.NOTSET:
        sdk.setLevel(logging.INFO)


class _Owner(User):
    """The caller a stored task belongs to (for the store's own clean-up)."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        """Always: only authenticated callers own tasks."""
        return True

    @property
    def user_name(self) -> str:
        """The caller's name."""
        return self._name


def _owner(context: ServerCallContext) -> str:
    return context.user.user_name


class BoundedTaskStore(TaskStore):
    """The SDK's in-memory task store, each task its caller's own, and bounded.

    At most ``max_tasks`` tasks are kept (the least recently saved is forgotten first), each
    for ``ttl`` seconds after it was last saved, with its last :data:`MAX_TASK_MESSAGES`
    messages.
    """

    def __init__(self, max_tasks: int = DEFAULT_MAX_TASKS, ttl: float = DEFAULT_TASK_TTL, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_tasks = max_tasks
        self.ttl = ttl
        self.clock = clock
        self._tasks = InMemoryTaskStore(owner_resolver=_owner)
        self._saved: OrderedDict[tuple[str, str], float] = OrderedDict()
        """(owner, task id) -> when it was last saved, the oldest first."""

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Store (or replace) a task of the context's caller, then forget what is too many
        or too old."""
        if len(task.history) > MAX_TASK_MESSAGES:
            trimmed = Task()
            trimmed.CopyFrom(task)
            del trimmed.history[:-MAX_TASK_MESSAGES]
            task = trimmed
        await self._tasks.save(task, context)
        key = (_owner(context), task.id)
        self._saved[key] = self.clock()
        self._saved.move_to_end(key)
        await self._forget()

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """A task of the context's caller, if it is still kept."""
        await self._forget()
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest,
                   context: ServerCallContext) -> ListTasksResponse:
        """The context's caller's tasks still kept."""
        await self._forget()
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget a task of the context's caller."""
        self._saved.pop((_owner(context), task_id), None)
        await self._tasks.delete(task_id, context)

    async def _forget(self) -> None:
        now = self.clock()
        while self._saved:
            (owner, task_id), saved = next(iter(self._saved.items()))
            if len(self._saved) <= self.max_tasks and now - saved <= self.ttl:
                return
            del self._saved[(owner, task_id)]
            await self._tasks.delete(task_id, ServerCallContext(user=_Owner(owner)))


class _Conversation:
    """What one A2A context remembers between messages."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        """The last user and bot messages (at most ``2 * HISTORY_TURNS``)."""
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
    """Answers A2A messages with one of our sub agents (an ``a2a-sdk`` ``AgentExecutor``).

    A context is the caller's own (keyed by caller and ``contextId``); at most ``max_contexts``
    are kept, each for ``ttl`` seconds after its last message; a run ends by ``deadline``.
    """

    def __init__(self, agent: SubAgent, slot_types: Mapping[str, str] | None = None, *,
                 deadline: float = 60.0, max_contexts: int = DEFAULT_MAX_TASKS,
                 ttl: float = DEFAULT_TASK_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.agent = agent
        self.slot_types = dict(slot_types or {})
        self.deadline = deadline
        self.max_contexts = max_contexts
        self.ttl = ttl
        self.clock = clock
        self._conversations: OrderedDict[tuple[str, str], tuple[_Conversation, float]] = \
            OrderedDict()
        """(caller, context id) -> the conversation and when it last changed, oldest first."""

    def conversation(self, caller: str, context_id: str) -> _Conversation:
        """The conversation of the caller's context (a new one when it was not kept)."""
        now = self.clock()
        key = (caller, context_id)
        kept = self._conversations.pop(key, None)
        conversation = kept[0] if kept and now - kept[1] <= self.ttl else _Conversation()
        self._conversations[key] = (conversation, now)
        while self._conversations:
            oldest_key, (_, at) = next(iter(self._conversations.items()))
            if len(self._conversations) <= self.max_contexts and now - at <= self.ttl:
                break
            del self._conversations[oldest_key]
        return conversation

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the agent on the incoming message and publish the task's new state."""
        updater = await task_updater(context, event_queue)
        caller = context.call_context.user.user_name
        conversation = self.conversation(caller, updater.context_id)
        async with conversation.lock:
            await self._run(context, updater, conversation, f"a2a:{caller}:"
                                                              f"{updater.context_id}")

    async def _run(self, context: RequestContext, updater: TaskUpdater,
                   conversation: _Conversation, sender: str) -> None:
        async def working(text: str) -> None:
            await updater.start_work(updater.new_agent_message([Part(text=text)]))

        text = context.get_user_input()
        conversation.slots.update(incoming_slots(context))
        agent_input = self._input(text, conversation, sender, updater.context_id)
        conversation.events.append({"event": "user", "text": text})
        try:
            # model calls stop a little before the deadline, as in a turn
            scope = CallScope(time.monotonic() + self.deadline - min(5.0, self.deadline * 0.2))
            async with asyncio.timeout(self.deadline):
                output = await self.agent.run(agent_input, CollectingOutputChannel(),
                                              scope=scope)
        except TimeoutError:
            log.warning("a2a.serve.deadline", agent=self.agent.name, seconds=self.deadline)
            await updater.failed(updater.new_agent_message([Part(text=FAILED_TEXT)]))
            return
        except Exception:
            error_id = uuid.uuid4().hex[:16]
            log.exception("a2a.serve.agent_crashed", agent=self.agent.name, error_id=error_id)
            await updater.failed(updater.new_agent_message([Part(text=FAILED_TEXT)]))
            return
        finally:
            del conversation.events[:-2 * HISTORY_TURNS]
        bot_texts = [e.get("text") or "" for e in output.events if e.get("event") == "bot"]
        for event in output.events:
            if event.get("event") in ("bot", "user"):
                conversation.events.append(event)
            elif event.get("event") == "slot":
                conversation.slots[event["name"]] = event.get("value")
        del conversation.events[:-2 * HISTORY_TURNS]
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

    def _input(self, text: str, conversation: _Conversation, sender: str,
               context_id: str) -> AgentInput:
        slots = [AgentInputSlot(name=name, value=value, type=self.slot_types.get(name, "any"))
                 for name, value in conversation.slots.items()]
        # the caller's name is part of the conversation's id: per-conversation MCP sessions
        # and anything else keyed by it are never shared between callers
        metadata = {**conversation.pending, "sender_id": sender, "context_id": context_id,
                    "agent_id": self.agent.name, "model_id": self.agent.name}
        events = [*conversation.events, {"event": "user", "text": text}]
        return AgentInput(id=self.agent.name, user_message=text, slots=slots,
                          conversation_history=_transcript(events),
                          events=typed_events(events),
                          metadata=metadata, recipient_id=sender)

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
                     guard: Callable[[Any], Any] | None = None,
                     settings: A2ASettings | None = None,
                     limiter: TurnLimiter | None = None) -> list[Route]:
    """Routes publishing the sub agents of ``assistant`` over A2A (see the module docstring).

    Args:
        assistant: The assistant whose sub agents are published.
        names: The agents to publish (every one a flow calls when empty).
        guard: Wraps each JSON-RPC endpoint (e.g. a concurrency cap).
        settings: Callers, caps and task storage; by default from the environment, with
            the assistant's turn deadline.
        limiter: The worker's turns in flight (no cap by default).
    """
    settings = settings or A2ASettings.from_env(deadline=assistant.turn_timeout)
    slot_types = {name: d.type for name, d in assistant.project.domain.slots.items()}
    routes: list[Route] = []
    for agent in published_agents(assistant, names):
        executor: Any = SubAgentExecutor(agent, slot_types, deadline=settings.deadline,
                                         max_contexts=settings.max_tasks, ttl=settings.task_ttl)
        routes += a2a_routes(sub_agent_card(agent), executor, prefix=f"/a2a/{agent.name}",
                             guard=guard, settings=settings, limiter=limiter)
    return routes
