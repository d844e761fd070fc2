"""``Assistant``: loads a project and handles one user turn end to end.

lock(sender) -> load the snapshot and the latest events -> user event -> commands -> stack ->
flow executor (agents run inside call steps) -> save the turn's events, the stack and the
snapshot in one transaction -> unlock.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import structlog

from subagents import events as ev
from subagents.agents.protocol import SubAgent
from subagents.agents.registry import create_agent, protocol_type_for
from subagents.config.project import Project, ProjectPaths, load_project
from subagents.dialogue.actions import ActionRunner
from subagents.dialogue.client_input import (
    ClientInputError,
    ClientMetadata,
    TurnFailedError,
    accept_client_results,
    agent_metadata_keys,
    check_message_id,
    check_sender_id,
    declared_metadata_keys,
    replay_answer,
    split_client_metadata,
)
from subagents.dialogue.commands import CannotHandle, Command, ContinueAgent
from subagents.dialogue.dependencies import Dependencies
from subagents.dialogue.flow_executor import FlowExecutor
from subagents.dialogue.history import WINDOW_LINES, load_conversation
from subagents.dialogue.proactive import (
    ReachableChannels,
    latest_metadata,
    parked_on,
    split_owner_key,
)
from subagents.dialogue.search import EnterpriseSearch
from subagents.dialogue.stack import Stack
from subagents.dialogue.turn import Turn
from subagents.dialogue.understanding import CommandGenerator
from subagents.exceptions import (
    AgentInitializationError,
    LLMError,
    MCPConnectionError,
    SubagentsError,
)
from subagents.llm import Model, ModelSettings, build_model, resolve_model_settings
from subagents.llm.usage import UsageTally, conversation_usage
from subagents.mcp.pool import MCPPool
from subagents.observability import traced_command_generation, traced_turn
from subagents.recording import turn as recording
from subagents.stores import LockStore, TrackerStore, create_lock_store, create_tracker_store
from subagents.types import CallScope, OutputChannel

log = structlog.get_logger("subagents.dialogue")

DEFAULT_TURN_TIMEOUT = 60.0
"""Seconds; well under the Redis lock's expiry, which is extended while a turn runs anyway."""
MODEL_UNAVAILABLE_PATTERN = "pattern_model_unavailable"

LLMFactory = Callable[[str, ModelSettings], Model]
COMMAND_GENERATOR = "command_generator"


def default_llm_factory(caller: str, settings: ModelSettings) -> Model:
    """Build the model ``caller`` calls, with ``settings`` (the default factory)."""
    return build_model(settings, name=caller)


class Assistant:
    """A loaded assistant project. Use ``async with Assistant.load(dir) as assistant:``.

    ``search_index_root`` is where the search policy's embedded index is persisted (default:
    the project's ``.subagents/search/``; conversation tests keep theirs apart).
    """

    def __init__(self, project: Project, *, tracker_store: TrackerStore | None = None,
                 lock_store: LockStore | None = None, llm_factory: LLMFactory | None = None,
                 action_stubs: dict[str, Any] | None = None,
                 retry_delays: tuple[float, ...] = (1.0, 2.0),
                 client_metadata_keys: Iterable[str] | None = None,
                 turn_timeout: float | None = None,
                 search_index_root: Path | None = None) -> None:
        self.project = project
        self.turn_timeout = turn_timeout or _env_turn_timeout()
        """Seconds a turn may take, waiting for the sender's lock excluded."""
        self.client_metadata_keys: frozenset[str] | None = agent_metadata_keys(project) \
            if client_metadata_keys is None else frozenset(client_metadata_keys) | frozenset(
                declared_metadata_keys(project))
        """Message metadata keys that reach agents (an allow-list); None: every key that is
        not reserved, as in Rasa."""
        self.root = project.root
        factory = llm_factory or default_llm_factory
        self.tracker_store = tracker_store or create_tracker_store(
            project.endpoints.tracker_store, project.root)
        self.lock_store = lock_store or create_lock_store(project.endpoints.lock_store)
        self.pool = MCPPool(project.endpoints, root=project.root,
                            tokens_url=getattr(self.tracker_store, "url", None))
        self.agents: dict[tuple[str, str], SubAgent] = {}
        for _, step in project.agent_call_steps():
            name = str(step.model.call)
            protocol = protocol_type_for(project.agents[name], has_exit_if=bool(step.model.exit_if))
            if (name, protocol) in self.agents:
                continue
            spec = project.agents[name]
            settings = resolve_model_settings(spec.config.configuration.llm, project.endpoints,
                                              where=spec.file)
            self.agents[(name, protocol)] = create_agent(
                spec, protocol, root=project.root, endpoints=project.endpoints, pool=self.pool,
                llm=factory(name, settings))
        generator_settings = resolve_model_settings(project.pipeline.command_generator_llm(),
                                                    project.endpoints, where="config.yml")
        self.command_llm = factory(COMMAND_GENERATOR, generator_settings)
        generator = project.command_generator_class or CommandGenerator
        self.understanding: CommandGenerator = generator(project, self.command_llm)
        self.actions = ActionRunner(project, stubs=action_stubs)
        self.executor = FlowExecutor(project, self.agents, self.actions,
                                     assistant_id=project.assistant_id,
                                     model_id=project.assistant_id, retry_delays=retry_delays,
                                     llm_factory=factory, mcp_pool=self.pool)
        self.search = EnterpriseSearch.from_project(
            project, factory, responder=self.executor.responder,
            patterns=self.executor.patterns, navigator=self.executor.navigator,
            index_root=search_index_root)
        """Answers knowledge questions (config.yml's ``EnterpriseSearchPolicy``), if any."""
        if self.search is not None:
            self.executor.use_search(self.search)
        self.reachable = ReachableChannels()
        """Conversations whose latest message came over a channel that can send later."""
        self.dependencies = Dependencies(self.pool)
        """Agents whose remote dependency did not answer at start (``start(strict=False)``)."""
        self.executor.agent_steps.unavailable = self.dependencies.reason
        rephraser = self.executor.responder.rephraser
        self.window_lines = max(WINDOW_LINES, 2 * rephraser.max_turns if rephraser else 0)
        """Transcript lines the window of a turn holds (the most any prompt reads)."""
        self._started = False

    @classmethod
    def load(cls, project_dir: str | Path | ProjectPaths, **kwargs: Any) -> Assistant:
        """Load and check a project (raises ProjectInvalidError listing every problem)."""
        return cls(load_project(project_dir), **kwargs)

    async def start(self, *, strict: bool = True) -> None:
        """Connect every agent's MCP servers (retries with backoff, then a clear error).

        Args:
            strict: Stop at a dependency that does not answer. Otherwise (``serve``) the
                agents needing it are marked unavailable and connected again in the
                background (:mod:`~subagents.dialogue.dependencies`); configuration errors
                stop the start either way.
        """
        if self._started:
            return
        agents = list(self.agents.values())
        # all at once: start-up waits for the slowest server, not for their sum
        results = await asyncio.gather(*(agent.connect() for agent in agents),
                                       return_exceptions=True)
        for agent, result in zip(agents, results, strict=True):
            if not strict and isinstance(result, SubagentsError) \
                    and self.dependencies.unreachable(result):
                self.dependencies.mark_down(agent, result)
                continue
            if isinstance(result, MCPConnectionError):
                await self.close()
                raise AgentInitializationError(str(result), code="agent.mcp_connection_failed") \
                    from result
            if isinstance(result, BaseException):  # e.g. an A2A agent's card or health check
                await self.close()
                raise result
        if self.search is not None:
            try:
                await self.search.start(strict=strict)
            except BaseException:
                await self.close()
                raise
        await self.command_llm.prepare()
        self._started = True

    async def close(self) -> None:
        """Disconnect the agents and close the model clients, MCP pool and stores."""
        await self.dependencies.close()
        for agent in self.agents.values():
            await agent.disconnect()
        await self.command_llm.close()
        await self.actions.close()
        if self.search is not None:
            await self.search.close()
        await self.pool.close()
        await self.tracker_store.close()
        await self.lock_store.close()
        self._started = False

    async def __aenter__(self) -> Assistant:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ turns
    @traced_turn
    async def handle_message(self, sender_id: str, text: str,
                             metadata: dict[str, Any] | None = None,
                             output_channel: OutputChannel | None = None, *,
                             message_id: str | None = None) -> list[dict[str, Any]]:
        """Handle one user message; returns the events of this turn.

        ``metadata["client_tool_results"]`` (``[{"id", "result"}]``) delivers the results of
        client-executed tools; with an empty ``text`` the turn only resumes the waiting agent.
        The other metadata keys reach agents (only those in :attr:`client_metadata_keys` when
        the project narrows them); reserved names are dropped.
        A ``message_id`` the conversation has already recorded is not handled again: its
        recorded bot messages are sent again and no events are returned (a client's retry).

        Raises:
            TurnFailedError: the turn could not complete (store, lock, deadline, a bug); nothing
                of it was recorded and the internal-error reply went to ``output_channel``.
            ClientInputError: the sender id or the client tool results are not acceptable.
        """
        check_sender_id(sender_id)
        check_message_id(message_id)
        if not self._started:
            await self.start()
        client = split_client_metadata(metadata, self.client_metadata_keys)
        self.reachable.remember(sender_id, output_channel)
        try:
            async with self.lock_store.lock(sender_id), asyncio.timeout(self.turn_timeout):
                return await self._run_turn(sender_id, text, client, output_channel,
                                            message_id, self.model_deadline())
        except ClientInputError:
            raise
        except Exception as exc:
            raise await self._turn_failed(sender_id, exc, output_channel) from exc

    def model_deadline(self) -> float:
        """When a turn starting now must have finished its model calls: a little before the
        turn's deadline, so a slow model still gets its defined reply and the turn is
        recorded."""
        return time.monotonic() + _model_deadline(self.turn_timeout)

    def turn_scope(self, switched_on: bool, deadline: float) -> CallScope:
        """What the model and tool calls of a turn get: its deadline, a fresh usage tally and,
        when the conversation is recorded (its stored switch is ``switched_on``, or every
        conversation is), its recording."""
        return CallScope(deadline, UsageTally(), recording.recorder_for(switched_on))

    async def _run_turn(self, sender_id: str, text: str, client: ClientMetadata,
                        output_channel: OutputChannel | None,
                        message_id: str | None, deadline: float) -> list[dict[str, Any]]:
        turn = await self.open_turn(sender_id, output_channel, dict(client.for_agents),
                                    deadline=deadline)
        if message_id is not None and await replay_answer(turn.events, message_id, sender_id,
                                                          output_channel):
            log.info("dialogue.turn.replayed", sender=sender_id)
            return []
        results = accept_client_results(client.tool_results, turn.stack)
        turn.user_text = text
        for call_id, result in results.items():
            turn.add(ev.client_tool_result(call_id, result))
        if results:
            turn.metadata["client_tool_results"] = results
        result_only = bool(results) and not text.strip()
        if result_only:
            commands: list[Command] = [ContinueAgent()]
        else:
            if not turn.previous_count:  # a new conversation starts its first session (Rasa)
                await self.executor.start_session(turn, client.recorded)
            user = turn.add(ev.user_uttered(text, metadata=dict(client.recorded)))
            user["message_id"] = message_id
            try:
                commands = await self.understand(turn, text)
            except LLMError as exc:
                log.warning("dialogue.understanding.failed", sender=sender_id,
                            error_code=exc.code, error=str(exc))
                await self._model_unavailable(turn)
                return await self._save(turn)
        commands = self.executor.clean_commands(turn, commands)
        if not commands and turn.stack.top() is None and not result_only:
            commands = [CannotHandle()]
        log.info("dialogue.turn.commands", sender=sender_id,
                 commands=[repr(c) for c in commands])
        if commands or not result_only:  # a late result with no waiting agent: record only
            self.executor.apply_commands(turn, commands)
            await self.executor.advance(turn)
        return await self._save(turn)

    async def _model_unavailable(self, turn: Turn) -> None:
        """Run only the model-unavailable pattern; the conversation's stack stays as it was."""
        stack = turn.stack
        turn.stack = Stack()
        self.executor.patterns.push(turn, MODEL_UNAVAILABLE_PATTERN)
        try:
            await self.executor.advance(turn)
        finally:
            turn.stack = stack

    async def open_turn(self, sender_id: str, channel: OutputChannel | None,
                        metadata: dict[str, Any] | None = None, *,
                        deadline: float | None = None) -> Turn:
        """A turn of ``sender_id``'s conversation: its stack, snapshot and latest events
        loaded (the caller holds the conversation's lock); with a ``deadline``, its calls get
        the turn's scope (:meth:`turn_scope`)."""
        loaded = await load_conversation(self.tracker_store, sender_id, self.window_lines)
        scope = None if deadline is None else self.turn_scope(
            loaded.snapshot.recording is True, deadline)
        return Turn(sender_id, loaded.events, Stack.from_list(loaded.record.stack),
                    self.project.domain, channel, metadata, scope=scope,
                    snapshot=loaded.snapshot, start=loaded.start,
                    load_events=functools.partial(self.tracker_store.load_events, sender_id))

    async def save(self, turn: Turn) -> None:
        """Store the turn's events, the stack and the snapshot (one transaction)."""
        state, window_start = turn.stored_state()
        await self.tracker_store.save_turn(turn.sender_id, turn.new_events,
                                           turn.stack.to_list(), turn.previous_count,
                                           state=state, window_start=window_start)

    async def _save(self, turn: Turn) -> list[dict[str, Any]]:
        turn.add(ev.action_executed("action_listen", metadata=_closing_metadata(turn.scope)))
        await self.save(turn)
        return turn.new_events

    async def _turn_failed(self, sender_id: str, exc: Exception,
                           output_channel: OutputChannel | None) -> TurnFailedError:
        """Log the failure with an id, tell the user, and describe it for the caller."""
        error_id = uuid.uuid4().hex[:16]
        code = "dialogue.turn_deadline" if isinstance(exc, TimeoutError) else (
            getattr(exc, "code", None) or f"python.{type(exc).__name__}")
        log.error("dialogue.turn.failed", sender=sender_id, error_id=error_id,
                  error_code=code, error_type=type(exc).__name__, error=str(exc),
                  exc_info=exc)
        reply = self.internal_error_text()
        if output_channel is not None:
            try:
                await output_channel.send_text_message(sender_id, reply)
            except Exception:  # noqa: BLE001 - the channel itself may be what broke
                log.warning("dialogue.turn.reply_failed", sender=sender_id, error_id=error_id)
        return TurnFailedError(error_id, reply, cause_code=str(code))

    def internal_error_text(self) -> str:
        """The project's ``utter_internal_error_rasa`` text (first variation)."""
        for variation in self.project.domain.responses.get("utter_internal_error_rasa", []):
            if variation.text:
                return variation.text
        return "Sorry, something went wrong on my side. Please try again in a little while."

    async def handle_client_tool_results(self, sender_id: str, results: list[dict[str, Any]],
                                         output_channel: OutputChannel | None = None
                                         ) -> list[dict[str, Any]]:
        """Deliver client-executed tool results (``[{"id", "result"}]``) and resume the agent."""
        return await self.handle_message(sender_id, "", {"client_tool_results": results},
                                         output_channel)

    async def resume_parked_call(self, owner_key: str) -> list[dict[str, Any]] | None:
        """Continue the agent parked on the call ``owner_key`` (``<conversation>:<call id>``)
        whose answer arrived outside the conversation (a sign-in finished in the browser).

        Returns the turn's events, or None when the conversation's channel cannot send
        without a request (its next message resumes the agent instead).

        Raises:
            TurnFailedError: the turn could not complete; nothing of it was recorded.
        """
        sender_id, call_id = split_owner_key(owner_key)
        channel = self.reachable.get(sender_id)
        if channel is None:
            log.info("dialogue.resume.waits_for_user", sender=sender_id)
            return None
        try:
            async with self.lock_store.lock(sender_id), asyncio.timeout(self.turn_timeout):
                return await self._resume_turn(sender_id, call_id, channel,
                                               self.model_deadline())
        except Exception as exc:
            raise await self._turn_failed(sender_id, exc, channel) from exc

    async def _resume_turn(self, sender_id: str, call_id: str, channel: OutputChannel,
                           deadline: float) -> list[dict[str, Any]]:
        """The turn that resumes the agent parked on ``call_id`` (the caller holds the lock);
        no events when the agent no longer waits for that call (the user's own message resumed
        it first, or the conversation moved on). The agent gets the metadata of the
        conversation's latest user message, so it acts for the same user."""
        turn = await self.open_turn(sender_id, channel, deadline=deadline)
        if not parked_on(turn.stack, call_id):
            log.info("dialogue.resume.nothing_parked", sender=sender_id)
            return []
        turn.metadata = latest_metadata(turn.events, self.client_metadata_keys)
        self.executor.apply_commands(turn, self.executor.clean_commands(turn, [ContinueAgent()]))
        await self.executor.advance(turn)
        log.info("dialogue.resume.ran", sender=sender_id)
        return await self._save(turn)

    @traced_command_generation
    async def understand(self, turn: Turn, text: str) -> list[Command]:
        """The commands of a message: ``/Command`` text as is, else the command generator's.

        Raises:
            LLMError: the command generator's model failed (unreachable, malformed reply,
                out of time).
        """
        return await self.understanding.understand(turn, text)

    async def tracker(self, sender_id: str) -> list[dict[str, Any]]:
        """Every stored event of a conversation."""
        return await (await self.open_turn(sender_id, None)).all_events()

    async def state(self, sender_id: str) -> dict[str, Any]:
        """Every event, current slot values and the stack of a conversation."""
        turn = await self.open_turn(sender_id, None)
        events = await turn.all_events()
        return {"sender_id": sender_id, "events": events, "slots": turn.slots,
                "stack": turn.stack.to_list(), "usage": conversation_usage(events)}

    async def recording_on(self, sender_id: str) -> bool:
        """Whether the next turn of the conversation is recorded."""
        turn = await self.open_turn(sender_id, None)
        return recording.records_all() or turn.snapshot.recording is True

    async def switch_recording(self, sender_id: str, on: bool) -> bool:
        """Record (or stop recording) the conversation from its next turn on. The switch is
        stored with the conversation, so every worker sharing the store sees it; a turn in
        progress ends first (the conversation's lock). Switching to the state the
        conversation is already in stores nothing.

        Returns:
            Whether the next turn is recorded (``serve --record`` records it anyway).
        """
        async with self.lock_store.lock(sender_id):
            turn = await self.open_turn(sender_id, None)
            if (turn.snapshot.recording is True) != on:
                turn.add(recording.switch_event(on))
                await self.save(turn)
        return recording.records_all() or on


def _env_turn_timeout() -> float:
    raw = os.environ.get("SUBAGENTS_TURN_TIMEOUT")
    if not raw:
        return DEFAULT_TURN_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        log.warning("dialogue.turn_timeout.invalid", value=raw, used=DEFAULT_TURN_TIMEOUT)
        return DEFAULT_TURN_TIMEOUT
    return value


def _closing_metadata(scope: CallScope) -> dict[str, Any] | None:
    """The turn's usage and, when it was recorded, its recording: the metadata of the turn's
    closing event."""
    usage = scope.usage.metadata() if isinstance(scope.usage, UsageTally) else None
    recorder = scope.recorder
    if isinstance(recorder, recording.TurnRecording):
        return recorder.metadata(usage)
    return usage


def _model_deadline(turn_timeout: float) -> float:
    """Model calls stop a little before the turn's deadline, so a slow model still gets its
    defined reply and the turn is recorded."""
    return turn_timeout - min(5.0, turn_timeout * 0.2)
