"""``Assistant``: loads a project and handles one user turn end to end.

lock(sender) -> load tracker -> user event -> commands -> stack -> flow executor (agents run
inside call steps) -> save the turn's events and the stack in one transaction -> unlock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from .. import events as ev
from ..agents.base import MCPBaseAgent
from ..agents.registry import create_agent, protocol_type_for
from ..channels.base import OutputChannel
from ..config.project import Project, load_project
from ..exceptions import AgentInitializationError, LLMError, MCPConnectionError
from ..llm import LLMClient, ModelSettings, resolve_model_settings
from ..mcp.pool import MCPPool
from ..observability import traced_command_generation, traced_turn
from ..stores import (
    LockStore,
    TrackerStore,
    create_lock_store,
    create_tracker_store,
)
from ..usage import conversation_usage, turn_metadata
from .actions import ActionRunner
from .commands import CannotHandle, Command, ContinueAgent, parse_deterministic
from .flow_executor import FlowExecutor
from .stack import Stack
from .turn import Turn
from .understanding import CommandGenerator

log = structlog.get_logger("subagents.dialogue")

LLMFactory = Callable[[str, ModelSettings], LLMClient]
COMMAND_GENERATOR = "command_generator"


def default_llm_factory(caller: str, settings: ModelSettings) -> LLMClient:
    return LLMClient(settings, name=caller)


class Assistant:
    """A loaded assistant project. Use ``async with Assistant.load(dir) as assistant:``."""

    def __init__(self, project: Project, *, tracker_store: TrackerStore | None = None,
                 lock_store: LockStore | None = None, llm_factory: LLMFactory | None = None,
                 action_stubs: dict[str, Any] | None = None,
                 retry_delays: tuple[float, ...] = (1.0, 2.0)) -> None:
        self.project = project
        self.root = project.root
        factory = llm_factory or default_llm_factory
        self.tracker_store = tracker_store or create_tracker_store(
            project.endpoints.tracker_store, project.root)
        self.lock_store = lock_store or create_lock_store(project.endpoints.lock_store)
        self.pool = MCPPool(project.endpoints, root=project.root)
        self.agents: dict[tuple[str, str], MCPBaseAgent] = {}
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
        self.understanding = CommandGenerator(project, self.command_llm)
        self.actions = ActionRunner(project, stubs=action_stubs)
        self.executor = FlowExecutor(project, self.agents, self.actions,
                                     assistant_id=project.assistant_id,
                                     model_id=project.assistant_id, retry_delays=retry_delays,
                                     mcp_pool=self.pool)
        self._started = False

    @classmethod
    def load(cls, project_dir: str | Path, **kwargs: Any) -> Assistant:
        """Load and check a project (raises ProjectInvalidError listing every problem)."""
        return cls(load_project(project_dir), **kwargs)

    async def start(self) -> None:
        """Connect every agent's MCP servers (retries with backoff, then a clear error)."""
        if self._started:
            return
        for agent in self.agents.values():
            try:
                await agent.connect()
            except MCPConnectionError as exc:
                await self.close()
                raise AgentInitializationError(str(exc), code="agent.mcp_connection_failed") \
                    from exc
            except AgentInitializationError:  # e.g. an A2A agent's card or health check
                await self.close()
                raise
        self._started = True

    async def close(self) -> None:
        for agent in self.agents.values():
            await agent.disconnect()
        await self.command_llm.close()
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
                             output_channel: OutputChannel | None = None) -> list[dict[str, Any]]:
        """Handle one user message; returns the events of this turn.

        ``metadata["client_tool_results"]`` (``[{"id", "result"}]``) delivers the results of
        client-executed tools; with an empty ``text`` the turn only resumes the waiting agent.
        """
        if not self._started:
            await self.start()
        metadata = dict(metadata or {})
        results = _client_results(metadata.pop("client_tool_results", None))
        async with self.lock_store.lock(sender_id):
            record = await self.tracker_store.load(sender_id)
            turn = Turn(sender_id, record.events, Stack.from_list(record.stack),
                        self.project.domain, output_channel, metadata)
            turn.user_text = text
            for call_id, result in results.items():
                turn.add(ev.client_tool_result(call_id, result))
            if results:
                turn.metadata["client_tool_results"] = results
            if results and not text.strip():
                commands: list[Command] = [ContinueAgent()]
            else:
                turn.add(ev.user_uttered(text, metadata=dict(metadata)))
                commands = await self.understand(turn, text)
            commands = self.executor.clean_commands(turn, commands)
            result_only = bool(results) and not text.strip()
            if not commands and turn.stack.top() is None and not result_only:
                commands = [CannotHandle()]
            log.info("dialogue.turn.commands", sender=sender_id,
                     commands=[repr(c) for c in commands])
            if commands or not result_only:  # a late result with no waiting agent: record only
                self.executor.apply_commands(turn, commands)
                await self.executor.advance(turn)
            turn.add(ev.action_executed("action_listen", metadata=turn_metadata()))
            await self.tracker_store.save_turn(sender_id, turn.new_events, turn.stack.to_list(),
                                               turn.previous_count)
            return turn.new_events

    async def handle_client_tool_results(self, sender_id: str, results: list[dict[str, Any]],
                                         output_channel: OutputChannel | None = None
                                         ) -> list[dict[str, Any]]:
        """Deliver client-executed tool results (``[{"id", "result"}]``) and resume the agent."""
        return await self.handle_message(sender_id, "", {"client_tool_results": results},
                                         output_channel)

    @traced_command_generation
    async def understand(self, turn: Turn, text: str) -> list[Command]:
        fixed = parse_deterministic(text, set(self.project.flows))
        if fixed is not None:
            return fixed
        try:
            return await self.understanding.predict(text, turn.stack, turn.slots,
                                                    turn.events[:-1])
        except LLMError as exc:
            log.warning("dialogue.understanding.failed", error=str(exc))
            return []

    async def tracker(self, sender_id: str) -> list[dict[str, Any]]:
        return (await self.tracker_store.load(sender_id)).events

    async def state(self, sender_id: str) -> dict[str, Any]:
        """Events, current slot values and the stack of a conversation."""
        from .turn import slots_from_events

        record = await self.tracker_store.load(sender_id)
        return {"sender_id": sender_id, "events": record.events,
                "slots": slots_from_events(self.project.domain, record.events),
                "stack": record.stack, "usage": conversation_usage(record.events)}


def _client_results(raw: Any) -> dict[str, Any]:
    """``[{"id", "result"}]`` or ``{id: result}`` -> ``{id: result}``."""
    if not raw:
        return {}
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    return {str(item["id"]): item.get("result") for item in raw
            if isinstance(item, dict) and "id" in item}

