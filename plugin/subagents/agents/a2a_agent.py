"""``protocol: A2A``: a remote agent reached over the Agent2Agent protocol (``a2a-sdk``).

Startup (:meth:`A2AAgent.connect`): auth headers -> agent card (a file relative to the project,
or an http(s) URL fetched with ``max_retries`` attempts; ``${VAR}`` references are resolved)
-> a client (JSON-RPC or HTTP+JSON, streaming when the card allows it) -> a health check that
sends ``hello`` and waits for the first reply. Any failure is an
:class:`AgentInitializationError` naming the agent and the card.

One invocation sends one user message (the latest user text; the readable transcript when the
agent resumes after an interruption or has no context yet) plus a data part
``{"slots": {...}}`` with the slots that have values, and maps what comes back:

=========================================  ===========================================
received                                   status
=========================================  ===========================================
a message                                  ``input_required`` (the text is the question)
task ``input-required``                    ``input_required`` (the task id is kept, so
                                           the user's answer continues the same task)
task ``completed``                         ``completed`` (status text + artifact texts)
task ``failed`` / ``canceled`` /           ``recoverable_error`` (the flow retries, then
``rejected`` / ``auth-required``           gives up with the internal-error pattern)
task ``submitted`` / ``working``           keep reading; a status text is shown to the user
                                           as an intermediate message
stream ends without a final state          ``tasks/get`` polling until ``max_polling_time``
no events at all                           ``recoverable_error``
a transport error                          ``fatal_error``
=========================================  ===========================================

Data parts of artifacts become ``structured_results``. Slots are never set from the remote
answer by this class; a subclass returns ``slot`` events from :meth:`process_agent_output`.
The ``a2a-sdk`` package is an optional extra (``pip install 'subagents[a2a]'``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import structlog

from subagents.agents.protocol import agent_text_event
from subagents.agents.schemas import AgentInput, AgentOutput, AgentStatus
from subagents.config._base import resolve_env
from subagents.config.sub_agent import AgentConfiguration, SubAgentConfig
from subagents.exceptions import AgentInitializationError, ConfigError, MCPConnectionError
from subagents.observability import traced_agent_run
from subagents.retry import RetryPolicy, retry_call
from subagents.types import CallScope, Event, OutputChannel

if TYPE_CHECKING:
    import httpx

    from subagents.config.endpoints import EndpointsConfig
    from subagents.llm import Model
    from subagents.mcp.pool import MCPPool

log = structlog.get_logger("subagents.a2a")

HEALTH_CHECK_TEXT = "hello"
OUTPUT_MODES = ["text", "text/plain", "application/json"]
TASK_ID_KEY = "a2a_task_id"
CONTEXT_ID_KEY = "a2a_context_id"
_FINAL_ERROR_STATES = {"TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
                       "TASK_STATE_AUTH_REQUIRED"}
_SCRIPT_STATES = {"input-required", "completed", "failed", "canceled", "rejected",
                  "auth-required", "working", "submitted"}
"""The task states a recorded reply can replay."""
_WAITING_STATES = {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}


def _sdk_missing(name: str) -> AgentInitializationError:
    error = AgentInitializationError(
        f"agent {name!r} uses protocol A2A, which needs the a2a-sdk package: "
        "pip install 'subagents[a2a]'", code="agent.a2a.sdk_missing")
    error.agent_name = name  # type: ignore[attr-defined]
    return error


class _Reply:
    """What one invocation collected from the stream."""

    def __init__(self) -> None:
        self.events = 0
        self.state = ""
        self.text: list[str] = []
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.structured: list[dict[str, Any]] = []
        self.message_reply = False
        self.artifacts: list[dict[str, Any] | None] = []
        """Each artifact as an ``a2a_script`` artifact (None: it has no such form)."""

    def add_text(self, text: str) -> None:
        if text and text not in self.text:
            self.text.append(text)


class A2AAgent:
    """A remote A2A agent used as a sub agent; subclass it and point ``configuration.module``
    at the subclass to rewrite inputs (:meth:`process_input`) or outputs
    (:meth:`process_agent_output`)."""

    PROTOCOL_TYPE: ClassVar[str] = "a2a"
    CARD_RETRY_DELAYS: ClassVar[tuple[float, ...]] = (1.0, 2.0, 4.0, 5.0)
    """Waits between agent-card fetch attempts (the last one repeats)."""

    def __init__(self, name: str, description: str, *,
                 configuration: AgentConfiguration | None = None,
                 project_root: Path | None = None, **_: Any) -> None:
        # No model, prompt or MCP tools: the remote agent does the work.
        self.name = name
        self.description = description
        self.configuration = configuration or AgentConfiguration()
        self.project_root = project_root or Path.cwd()
        if not self.configuration.agent_card:
            raise AgentInitializationError(
                f"agent {name!r}: protocol A2A needs configuration.agent_card (a file path or "
                "an http(s) URL of the remote agent's card)", code="agent.a2a.agent_card_missing")
        self._http: httpx.AsyncClient | None = None
        self._client: Any = None
        self.card: Any = None

    @classmethod
    def from_config(cls, config: SubAgentConfig, *, endpoints: EndpointsConfig | None = None,
                    pool: MCPPool | None = None, project_root: Path | None = None,
                    llm: Model | None = None) -> A2AAgent:
        """Build the agent from its ``config.yml`` (the model settings are not used)."""
        return cls(config.agent.name, config.agent.description,
                   configuration=config.configuration, project_root=project_root)

    # ------------------------------------------------------------------ startup
    @property
    def _timeout(self) -> float:
        return float(self.configuration.timeout or 30.0)

    async def _headers(self) -> dict[str, str]:
        auth = self.configuration.auth
        if not auth:
            return {}
        if not isinstance(auth, dict):
            raise AgentInitializationError(
                f"agent {self.name!r}: configuration.auth must be a mapping (api_key, token, "
                "oauth, module or headers)", code="agent.a2a.auth_invalid")
        from subagents.config.endpoints import McpServerConfig
        from subagents.mcp.oauth.auth import HeaderBuilder

        try:
            config = McpServerConfig(name=self.name, url="a2a", **auth)
            return await HeaderBuilder(config).headers()
        except (ValueError, ConfigError, MCPConnectionError) as exc:
            raise AgentInitializationError(
                f"agent {self.name!r}: configuration.auth: {exc}",
                code="agent.a2a.auth_invalid") from exc

    async def connect(self) -> None:
        """Resolve the card, create the client, run the health check."""
        try:  # httpx comes with the a2a extra, as a2a-sdk does
            import httpx
            from a2a.client import ClientConfig, ClientFactory
            from a2a.utils.constants import TransportProtocol
        except ImportError as exc:
            raise _sdk_missing(self.name) from exc
        if self._client is not None:
            return
        self._http = httpx.AsyncClient(timeout=self._timeout, headers=await self._headers())
        try:
            self.card = await self._load_card()
            config = ClientConfig(
                streaming=True, httpx_client=self._http, accepted_output_modes=OUTPUT_MODES,
                supported_protocol_bindings=[TransportProtocol.JSONRPC,
                                             TransportProtocol.HTTP_JSON])
            try:
                self._client = ClientFactory(config).create(self.card)
            except ValueError as exc:
                raise self._init_error(f"no usable transport in the agent card: {exc}",
                                       "agent.a2a.card_invalid") from exc
            await self._health_check()
        except BaseException:
            await self.disconnect()
            raise
        log.info("agent.a2a.connected", agent=self.name, card=self.card.name)

    def _init_error(self, why: str, code: str) -> AgentInitializationError:
        error = AgentInitializationError(
            f"agent {self.name!r} (A2A, card {self.configuration.agent_card}): {why}", code=code)
        error.agent_name = self.name  # type: ignore[attr-defined]
        return error

    async def _load_card(self) -> Any:
        from a2a.client.card_resolver import parse_agent_card

        try:  # ${VAR} references (e.g. the remote agent's address per deployment)
            source = resolve_env(str(self.configuration.agent_card),
                                 what=f"configuration.agent_card of agent {self.name!r}")
        except ConfigError as exc:
            raise self._init_error(str(exc), "agent.a2a.card_unreachable") from exc
        if source.startswith(("http://", "https://")):
            data = await self._fetch_card(source)
        else:
            path = Path(source)
            if not path.is_absolute():
                path = (self.project_root / path) if (self.project_root / path).exists() \
                    else Path.cwd() / path
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError as exc:
                raise self._init_error(f"the agent card file {path} does not exist",
                                       "agent.a2a.card_not_found") from exc
            except (OSError, ValueError) as exc:
                raise self._init_error(f"the agent card file {path} is not readable JSON: "
                                       f"{exc}", "agent.a2a.card_invalid") from exc
        try:
            return parse_agent_card(data)
        except Exception as exc:
            raise self._init_error(f"the agent card is not valid: {exc}",
                                   "agent.a2a.card_invalid") from exc

    async def _fetch_card(self, url: str) -> Any:
        """The agent card at ``url``, fetched with ``max_retries`` attempts."""
        import httpx

        assert self._http is not None
        http = self._http
        attempts = self.configuration.max_retries or 5
        tried = 0

        async def fetch() -> Any:
            nonlocal tried
            tried += 1
            try:
                response = await http.get(url)
                if response.status_code == 200:
                    return response.json()
                error = f"HTTP {response.status_code}"
            except (httpx.HTTPError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            log.warning("agent.a2a.card_fetch_failed", agent=self.name, url=url,
                        attempt=tried, error=error)
            raise _CardUnavailableError(error)

        delays = self.CARD_RETRY_DELAYS
        policy = RetryPolicy(attempts=attempts,
                             retry_on=lambda error: isinstance(error, _CardUnavailableError),
                             delay=lambda n, _error: delays[min(n - 1, len(delays) - 1)])
        try:
            return await retry_call(fetch, policy)
        except _CardUnavailableError as exc:
            raise self._init_error(f"the agent card could not be fetched after {tried} "
                                   f"attempt(s): {exc}", "agent.a2a.card_unreachable") from exc

    async def _health_check(self) -> None:
        import httpx
        from a2a.utils.errors import A2AError

        request = self._request(HEALTH_CHECK_TEXT, None, None, {})
        try:
            with anyio.fail_after(self._timeout):
                async for _ in self._send_stream(request):
                    return
        except (A2AError, httpx.HTTPError, TimeoutError, OSError, ValueError) as exc:
            raise self._init_error(f"the agent did not answer the health check: "
                                   f"{type(exc).__name__}: {exc}",
                                   "agent.a2a.unreachable") from exc
        raise self._init_error("the agent sent nothing back to the health check",
                               "agent.a2a.unreachable")

    async def disconnect(self) -> None:
        """Close the client and its HTTP connections."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    @property
    def protocol_type(self) -> str:
        """``a2a``."""
        return self.PROTOCOL_TYPE

    # ------------------------------------------------------------------ hooks
    async def process_input(self, input: AgentInput) -> AgentInput:
        """Rewrite the input before the remote call; identity by default."""
        return input

    def create_bot_uttered(self, text: str, agent_input: AgentInput,
                           message_type: str = "final_response") -> Event:
        """A ``bot`` event for text the remote agent sent, with the agent's metadata."""
        return agent_text_event(type(self).__name__, self.name, text, agent_input, message_type)

    async def process_agent_output(self, output: AgentOutput) -> AgentOutput:
        """Rewrite the output of a remote run (add ``slot`` events, change the text, ...)."""
        return output

    async def process_output(self, output: AgentOutput) -> AgentOutput:
        """Calls :meth:`process_agent_output`."""
        return await self.process_agent_output(output)

    @traced_agent_run
    async def run(self, input: AgentInput, output_channel: OutputChannel | None = None,
                  cancellation_token: Any = None, *, scope: CallScope | None = None
                  ) -> AgentOutput:
        """``process_input`` -> one remote call -> ``process_agent_output``; a failing hook
        ends the step with a fatal error. A recorded turn (``scope``) records the answer."""
        try:
            processed = await self.process_input(input)
        except Exception as exc:  # noqa: BLE001 - a failing hook ends the run, not the process
            return self._fail(input, [], AgentStatus.FATAL_ERROR,
                              f"process_input failed: {type(exc).__name__}: {exc}")
        if scope is not None:
            processed.attach_scope(scope)
        output = await self.send_message(processed, output_channel)
        try:
            return await self.process_output(output)
        except Exception as exc:  # noqa: BLE001
            return self._fail(input, output.events, AgentStatus.FATAL_ERROR,
                              f"process_agent_output failed: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ one invocation
    def _request(self, text: str, task_id: str | None, context_id: str | None,
                 slots: dict[str, Any], metadata: dict[str, Any] | None = None) -> Any:
        from a2a.helpers import new_data_part
        from a2a.types import Message, Part, Role, SendMessageRequest

        parts = [Part(text=text or " ")]
        if slots:
            parts.append(new_data_part({"slots": slots}))
        message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=parts)
        if task_id:
            message.task_id = task_id
        if context_id:
            message.context_id = context_id
        if metadata:
            message.metadata.update(metadata)
        return SendMessageRequest(message=message)

    def _send_stream(self, request: Any) -> AsyncIterator[Any]:
        if self._client is None:
            raise AgentInitializationError(f"agent {self.name!r} is not connected",
                                           code="agent.a2a.not_connected")
        stream: AsyncIterator[Any] = self._client.send_message(request)
        return stream

    async def _pre_call_metadata(self, agent_input: AgentInput) -> dict[str, Any]:
        """``configuration.pre_call_hook`` (``pkg.module.function``): metadata to add."""
        hook_path = self.configuration.pre_call_hook
        if not hook_path:
            return {}
        from subagents.config.project import import_from_project
        from subagents.tools.mcp_tools import run_pre_call_hook

        mod_name = hook_path.rpartition(".")[0]
        import_from_project(self.project_root, mod_name)  # the project's own module
        context = {"sender_id": agent_input.recipient_id, "server_name": None,
                   "tool_name": None, "agent_id": self.name}
        return dict(await run_pre_call_hook(hook_path, context))

    @staticmethod
    def _outbound_text(agent_input: AgentInput) -> str:
        if agent_input.metadata.get("resumed_after_interruption") or \
                not agent_input.user_message.strip():
            return agent_input.conversation_history or agent_input.user_message
        return agent_input.user_message

    async def send_message(self, agent_input: AgentInput,
                           output_channel: OutputChannel | None = None) -> AgentOutput:
        """Send one message to the remote agent and map its answer to an output."""
        import httpx
        from a2a.utils.errors import A2AError

        scope = agent_input.call_scope
        recorder = None if scope is None else scope.recorder
        meta = agent_input.metadata
        slots = {s.name: s.value for s in agent_input.slots if s.value is not None}
        context_id = str(meta.get(CONTEXT_ID_KEY) or meta.get("context_id")
                         or agent_input.recipient_id or "")
        outbound: dict[str, Any] = {k: meta[k] for k in ("sender_id", "agent_id", "model_id")
                                    if k in meta}
        try:
            outbound.update(await self._pre_call_metadata(agent_input))
        except Exception as exc:  # noqa: BLE001 - the message is not sent
            return self._fail(agent_input, [], AgentStatus.FATAL_ERROR,
                              f"the pre_call_hook failed: {type(exc).__name__}: {exc}")
        request = self._request(self._outbound_text(agent_input), meta.get(TASK_ID_KEY),
                                context_id or None, slots, _json_safe(outbound))
        reply = _Reply()
        events: list[Event] = []
        try:
            with anyio.fail_after(self._timeout):
                async for item in self._send_stream(request):
                    await self._take(item, reply, agent_input, output_channel, events)
                if reply.events and reply.state in _WAITING_STATES and reply.task_id:
                    await self._poll(reply, agent_input, output_channel, events)
        except TimeoutError:
            message = f"the remote agent did not finish within {self._timeout:g}s"
            if recorder is not None:
                recorder.record_a2a_call(self.name, {"error": message})
            return self._fail(agent_input, events, AgentStatus.FATAL_ERROR, message)
        except (A2AError, httpx.HTTPError, OSError, ValueError) as exc:
            status = _error_status(exc)
            if recorder is not None:
                recorder.record_a2a_call(self.name, {"error": f"{type(exc).__name__}: {exc}"})
            return self._fail(agent_input, events, status,
                              f"the remote agent failed: {type(exc).__name__}: {exc}")
        if recorder is not None:
            recorder.record_a2a_call(self.name, _script_reply(reply, events))
        output = self._finish(agent_input, reply, events)
        if output.status == AgentStatus.INPUT_REQUIRED and output.response_message and \
                output_channel is not None and agent_input.recipient_id is not None:
            await output_channel.send_text_message(agent_input.recipient_id,
                                                   output.response_message)
        return output

    async def _take(self, item: Any, reply: _Reply, agent_input: AgentInput,
                    channel: OutputChannel | None, events: list[Event]) -> None:
        from a2a.helpers import get_message_text

        reply.events += 1
        kind = item.WhichOneof("payload")
        if kind == "message":
            reply.message_reply = True
            reply.state = "MESSAGE"
            reply.add_text(_message_text(item.message))
            reply.context_id = item.message.context_id or reply.context_id
            return
        if kind == "task":
            self._take_task(item.task, reply)
            return
        if kind == "artifact_update":
            reply.task_id = item.artifact_update.task_id or reply.task_id
            self._take_artifact(item.artifact_update.artifact, reply)
            return
        if kind == "status_update":
            update = item.status_update
            reply.task_id = update.task_id or reply.task_id
            reply.context_id = update.context_id or reply.context_id
            reply.state = _state_name(update.status.state)
            text = get_message_text(update.status.message) if update.status.HasField(
                "message") else ""
            if reply.state in _WAITING_STATES:
                if text:
                    await self._intermediate(text, agent_input, channel, events)
            elif text:
                reply.add_text(text)

    def _take_task(self, task: Any, reply: _Reply) -> None:
        from a2a.helpers import get_message_text

        reply.task_id = task.id or reply.task_id
        reply.context_id = task.context_id or reply.context_id
        reply.state = _state_name(task.status.state)
        if task.status.HasField("message") and reply.state not in _WAITING_STATES:
            reply.add_text(get_message_text(task.status.message))
        for artifact in task.artifacts:
            self._take_artifact(artifact, reply)

    def _take_artifact(self, artifact: Any, reply: _Reply) -> None:
        from a2a.helpers import get_data_parts

        index = len(reply.structured)
        reply.artifacts.append(_script_artifact(artifact))
        for part_index, part in enumerate(artifact.parts):
            if part.HasField("text"):
                reply.add_text(part.text)
            elif part.HasField("data"):
                reply.structured.append({"name": f"{self.name}_{index}_{part_index}",
                                         "type": "data",
                                         "result": get_data_parts([part])[0]})
            elif part.HasField("url"):
                reply.structured.append({"name": f"{self.name}_{index}_{part_index}",
                                         "type": "file",
                                         "result": {"uri": part.url, "name": part.filename,
                                                    "mime_type": part.media_type}})

    async def _intermediate(self, text: str, agent_input: AgentInput,
                            channel: OutputChannel | None, events: list[Event]) -> None:
        event = self.create_bot_uttered(text, agent_input, "intermediate_message")
        events.append(event)
        if channel is not None and agent_input.recipient_id is not None:
            await channel.send_text_message(agent_input.recipient_id, text)

    async def _poll(self, reply: _Reply, agent_input: AgentInput, channel: OutputChannel | None,
                    events: list[Event]) -> None:
        from a2a.types import GetTaskRequest

        delay = float(self.configuration.polling_initial_delay or 0.5)
        with anyio.move_on_after(float(self.configuration.max_polling_time or 60)):
            while reply.state in _WAITING_STATES:
                await anyio.sleep(delay)
                delay = min(delay * 2, 5.0)
                task = await self._client.get_task(GetTaskRequest(id=reply.task_id))
                self._take_task(task, reply)
        if reply.state in _WAITING_STATES:
            reply.state = "POLLING_TIMED_OUT"

    def _finish(self, agent_input: AgentInput, reply: _Reply,
                events: list[Event]) -> AgentOutput:
        text = "\n".join(reply.text)
        state = reply.state
        if not reply.events:
            return self._fail(agent_input, events, AgentStatus.RECOVERABLE_ERROR,
                              "no events received from the remote agent")
        if state in ("MESSAGE", "TASK_STATE_INPUT_REQUIRED"):
            question = self.create_bot_uttered(text, agent_input, "input_required")
            metadata = {CONTEXT_ID_KEY: reply.context_id} if reply.context_id else {}
            if reply.task_id and not reply.message_reply:
                metadata[TASK_ID_KEY] = reply.task_id
            return self._out(agent_input, AgentStatus.INPUT_REQUIRED, [*events, question],
                             reply, metadata=metadata, response=text, reason="input_required")
        if state == "TASK_STATE_COMPLETED":
            return self._out(agent_input, AgentStatus.COMPLETED, events, reply,
                             response=text or None, reason="task_completed")
        if state in _FINAL_ERROR_STATES:
            label = state.removeprefix("TASK_STATE_").lower().replace("_", "-")
            return self._fail(agent_input, events, AgentStatus.RECOVERABLE_ERROR,
                              f"Task state: {label}" + (f" ({text})" if text else ""))
        if state == "POLLING_TIMED_OUT":
            return self._fail(agent_input, events, AgentStatus.FATAL_ERROR,
                              "Polling timed out before the remote task finished")
        return self._fail(agent_input, events, AgentStatus.FATAL_ERROR,
                          f"the remote agent ended in an unknown state {state or 'unset'!r}")

    def _out(self, agent_input: AgentInput, status: AgentStatus, events: list[Event],
             reply: _Reply, *, metadata: dict[str, Any] | None = None,
             response: str | None = None, reason: str | None = None) -> AgentOutput:
        previous = agent_input.metadata.get("structured_results") or []
        log.info("agent.run.finished", agent=self.name, status=status.value,
                 exit_reason=reason, remote_state=reply.state)
        return AgentOutput(id=self.name, status=status, response_message=response,
                           events=events, structured_results=[*previous, reply.structured],
                           task_id=reply.task_id, context_id=reply.context_id,
                           metadata=metadata or None, exit_reason=reason)

    def _fail(self, agent_input: AgentInput, events: list[Event], status: AgentStatus,
              message: str) -> AgentOutput:
        log.warning("agent.a2a.failed", agent=self.name, status=status.value, error=message)
        return AgentOutput(id=self.name, status=status, events=events, error_message=message,
                           exit_reason="error")


def _script_reply(reply: _Reply, events: list[Event]) -> dict[str, Any]:
    """The remote agent's answer as an ``a2a_script`` reply, for recording.

    Artifacts keep their text and data parts when replaying them gives the same response text;
    otherwise the texts become one status text (in the order the client joined them) and the
    artifacts keep only their data parts.
    """
    text = "\n".join(reply.text)
    if reply.message_reply:
        return {"message": text}
    artifacts = reply.artifacts if all(a is not None for a in reply.artifacts) else None
    status = [t for t in reply.text
              if artifacts is None or all(t != a.get("text") for a in artifacts if a)]
    if artifacts is None or _replayed_text([a or {} for a in artifacts], status) != text:
        artifacts = [{"data": item["result"]} for item in reply.structured
                     if item.get("type") == "data" and isinstance(item.get("result"), dict)]
        status = list(reply.text)
    state = reply.state.removeprefix("TASK_STATE_").lower().replace("_", "-")
    if reply.state == "POLLING_TIMED_OUT":
        state = "working"
    entry: dict[str, Any] = {"state": state if state in _SCRIPT_STATES else "failed"}
    if status:
        entry["text"] = "\n".join(status)
    if artifacts:
        entry["artifacts"] = artifacts
    working = [str(e.get("text")) for e in events if e.get("text")]
    if working:
        entry["working"] = working
    return entry


def _script_artifact(artifact: Any) -> dict[str, Any] | None:
    """An artifact as ``{name?, text?, data?}``: at most one text part, then one data part."""
    from a2a.helpers import get_data_parts

    item: dict[str, Any] = {"name": artifact.name} if artifact.name else {}
    for part in artifact.parts:
        if part.HasField("text") and "text" not in item and "data" not in item:
            item["text"] = part.text
        elif part.HasField("data") and "data" not in item:
            data = get_data_parts([part])[0]
            if not isinstance(data, dict):
                return None
            item["data"] = data
        else:
            return None
    return item


def _replayed_text(artifacts: list[dict[str, Any]], status: list[str]) -> str:
    """The response text a stand-in answering with these artifacts and status text gives."""
    texts: list[str] = []
    for text in [*(a.get("text") or "" for a in artifacts), "\n".join(status)]:
        if text and text not in texts:
            texts.append(text)
    return "\n".join(texts)


def _state_name(state: int) -> str:
    from a2a.types import TaskState

    return str(TaskState.Name(state))


def _message_text(message: Any) -> str:
    lines = []
    for part in message.parts:
        if part.HasField("text"):
            lines.append(part.text)
        elif part.HasField("url"):
            lines.append(f"File: {part.url}")
    return "\n".join(lines)


def _error_status(exc: BaseException) -> AgentStatus:
    """Server-side errors the remote agent may recover from are retried; the rest are fatal."""
    from a2a.client import A2AClientError
    from a2a.utils.errors import InternalError, InvalidAgentResponseError

    recoverable = (InternalError, InvalidAgentResponseError)
    if isinstance(exc, recoverable) and not isinstance(exc, A2AClientError):
        return AgentStatus.RECOVERABLE_ERROR
    return AgentStatus.FATAL_ERROR


def _json_safe(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            value = str(value)
        out[key] = value
    return out


__all__ = ["A2AAgent"]


class _CardUnavailableError(Exception):
    """The agent card could not be fetched this time (worth another attempt)."""
