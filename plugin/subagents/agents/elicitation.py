"""An MCP server asks the user for input in the middle of a call (elicitation).

The run parks like a client tool: the user gets the server's question (form fields listed, a URL
as a link), the model gets a placeholder result for the call, and the exchange is saved in the
output metadata under ``pending_elicitation``. The MCP call itself stays open in this process,
held in the MCP pool's registry (:attr:`subagents.agents.run.Run.elicitations`). On the user's
next message the model is offered ``answer_server_request``: it sends the answer (accept with
content, decline or cancel) and returns what the call finally produced. A run that ends without
answering, other than by asking the user again, cancels the request. When the call is gone (the
question timed out, or the process restarted in between) the resumed run ends with an error
instead of waiting forever.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from pydantic import BaseModel, Field

from subagents.agents._images import without_images
from subagents.agents.plan import Executed, Outcome, Park, tool_message
from subagents.agents.run import Run
from subagents.exceptions import ToolArgumentsError, ToolInvocationError
from subagents.mcp.callbacks import with_defaults
from subagents.tools.base import CallContext, Deferral, PendingCall, PlannedCall, Tool
from subagents.tools.elicitation import elicitation_key
from subagents.types import (
    AgentStatus,
    AgentToolResult,
    AgentToolSchema,
    ChatMessage,
    ExitReason,
    JsonObject,
)

log = structlog.get_logger("subagents.agent")

PENDING_KEY = "pending_elicitation"
ANSWER_TOOL = "answer_server_request"
NOT_RUN = ("This call was not run: another call is waiting for the user's answer to a "
           "server's question. Call it again afterwards if it is still needed.")
ASKED = ("The server needs the user's input before this call can finish. The user was asked: "
         "{question}\nWhen the user has answered, call answer_server_request with their answer.")
ASKED_AGAIN = ("The server needs more input before the call can finish. Ask the user: "
               "{question}\nThen call answer_server_request with their answer.")
CONSENT_ASKED = ("MCP server {server!r} needs the user's own authorization before this call "
                 "can run. The user was sent a sign-in link. The call runs once they have "
                 "signed in; if they refuse, call answer_server_request with decline.")
CONSENT_PENDING = ("The user has not finished signing in to {server!r} yet. Ask them to open the "
                   "link they were sent and to tell you when they are done.")
CONSENT_EXPIRED = ("the sign-in link for MCP server {server!r} expired before the user signed "
                   "in (mcp.consent_expired); nothing was run. Call the tool again to send the "
                   "user a new link if they still want this.")
LOST = ("the MCP server's request for input in the call to {tool!r} can no longer be answered: "
        "it expired or the assistant restarted while it waited. Start the request again.")


class PendingElicitation(BaseModel):
    """A server's open request for input, as saved while the run waits."""

    call: PendingCall
    server: str
    mode: str = "form"
    message: str
    url: str | None = None
    requested_schema: JsonObject = Field(default_factory=dict)
    messages: list[ChatMessage] = Field(default_factory=list)
    """The exchange of the run so far (restored when the run resumes)."""
    consent: bool = False
    """The question is our own request for the user's OAuth consent (see mcp/consent.py)."""

    @classmethod
    def of(cls, call: PlannedCall, params: Any) -> PendingElicitation:
        """The record of ``params`` (an MCP ``ElicitRequestParams``) asked during ``call``."""
        source = call.tool.source if call.tool is not None else ""
        url = getattr(params, "url", None)
        return cls(call=PendingCall(id=call.id, name=call.name, arguments=call.arguments),
                   server=source.removeprefix("mcp:"), mode="url" if url else "form",
                   message=str(params.message), url=url,
                   requested_schema=dict(getattr(params, "requested_schema", None) or {}))

    def question(self) -> str:
        """What the user reads: the server's message, then the fields or the link."""
        lines = [self.message.strip()]
        if self.mode == "url":
            lines.append(f"Open this link to continue: {self.url}")
            return "\n".join(lines)
        properties = self.requested_schema.get("properties") or {}
        required = set(self.requested_schema.get("required") or [])
        if len(properties) > 1 or any(_choices(p) for p in properties.values()):
            lines += [_field_line(name, spec, name in required)
                      for name, spec in properties.items() if isinstance(spec, dict)]
        return "\n".join(lines)


def _choices(spec: Any) -> list[str]:
    if not isinstance(spec, dict):
        return []
    if "enum" in spec:
        return [str(v) for v in spec["enum"]]
    options = spec.get("oneOf") or (spec.get("items") or {}).get("anyOf") or []
    return [str(o.get("title") or o.get("const")) for o in options if isinstance(o, dict)]


def _field_line(name: str, spec: JsonObject, required: bool) -> str:
    line = f"- {spec.get('title') or name}"
    if spec.get("description"):
        line += f": {spec['description']}"
    choices = _choices(spec)
    if choices:
        line += f" (one of: {', '.join(choices)})"
    elif spec.get("type") == "boolean":
        line += " (yes or no)"
    if not required:
        line += " (optional)"
    return line


# ---------------------------------------------------------------------------- parking
async def park_on_elicitation(run: Run, executed: Executed,
                              ask: Callable[[str], Awaitable[None]]) -> Park | None:
    """Park on the first call whose server asked for input; None when no server asked.

    Other deferred calls of the step are answered as not run (one question at a time).
    """
    elicited = executed.deferred(Deferral.ELICITATION)
    if not elicited:
        return None
    first = elicited[0]
    params = run.elicitations.question(elicitation_key(run.input, first.id))
    for outcome in executed.outcomes:
        if outcome.deferred is None or outcome.call is first:
            continue
        if outcome.deferred == Deferral.ELICITATION:
            run.elicitations.forget(elicitation_key(run.input, outcome.call.id))
        run.tool_messages.append(tool_message(outcome.call.id, NOT_RUN))
    if params is None:  # expired in the meantime
        run.tool_messages.append(tool_message(first.id, LOST.format(tool=first.name)))
        return Park(Outcome.fatal(LOST.format(tool=first.name)))
    pending = PendingElicitation.of(first, params)
    question = pending.question()
    consent = run.consents.for_owner(elicitation_key(run.input, first.id))
    pending.consent = consent is not None
    # a sign-in link is for the user's eyes: the model only learns that it was sent
    run.tool_messages.append(tool_message(first.id, CONSENT_ASKED.format(server=consent.server)
                                          if consent is not None
                                          else ASKED.format(question=question)))
    await ask(question)
    run.elicitation = pending
    log.info("agent.elicitation.parked", tool=first.name, server=pending.server,
             mode=pending.mode)
    return Park(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.ELICITATION))


def settle(run: Run, outcome: Outcome) -> None:
    """At the end of a run: keep waiting while the user is asked, else cancel the request."""
    pending: PendingElicitation | None = run.elicitation
    if pending is None:
        return
    key = elicitation_key(run.input, pending.call.id)
    if outcome.status == AgentStatus.INPUT_REQUIRED and run.elicitations.question(key) is not None:
        run.output_metadata[PENDING_KEY] = pending.model_copy(
            update={"messages": without_images(run.tool_messages)}).model_dump()
        return
    run.elicitations.forget(key)
    log.info("agent.elicitation.cancelled", tool=pending.call.name, server=pending.server,
             status=outcome.status.value)


# ---------------------------------------------------------------------------- resuming
async def resume(run: Run, ctx: CallContext, *, agent_id: str,
                 agent_name: str) -> Outcome | None:
    """Restore a parked request and offer the answer tool; an error outcome when the request
    is gone. A call whose answer came while no run waited (a sign-in finished in the browser)
    is collected at once: its result replaces the placeholder the model saw."""
    saved = run.input.metadata.get(PENDING_KEY)
    if not saved:
        return None
    pending = PendingElicitation.model_validate(saved)
    key = elicitation_key(run.input, pending.call.id)
    if run.elicitations.answered(key):
        run.tool_messages = list(pending.messages)
        await _collect(run, pending, ctx, agent_id=agent_id, agent_name=agent_name)
        return None
    if run.elicitations.question(key) is None and pending.consent:
        # the sign-in link expired (or the assistant restarted): the model reads a tool error
        # and can call the tool again for a new link
        run.tool_messages = _answer_call(pending.messages, pending.call.id, "Error: " +
                                         CONSENT_EXPIRED.format(server=pending.server))
        log.info("agent.elicitation.consent_expired", agent=agent_name, tool=pending.call.name,
                 server=pending.server)
        return None
    if run.elicitations.question(key) is None:
        log.warning("agent.elicitation.lost", agent=agent_name, tool=pending.call.name,
                    server=pending.server)
        return Outcome.fatal(LOST.format(tool=pending.call.name))
    run.tool_messages = list(pending.messages)
    _offer(run, pending, agent_id=agent_id, agent_name=agent_name)
    return None


async def _collect(run: Run, pending: PendingElicitation, ctx: CallContext, *,
                   agent_id: str, agent_name: str) -> None:
    result = await _finish_call(run, pending, ctx, agent_id=agent_id, agent_name=agent_name)
    text = f"Error: {result.error_message}" if result.is_error else str(result.result or "")
    run.tool_messages = _answer_call(run.tool_messages, pending.call.id, text)
    log.info("agent.elicitation.collected", agent=agent_name, tool=pending.call.name,
             is_error=result.is_error)


def _answer_call(messages: list[ChatMessage], call_id: str, text: str) -> list[ChatMessage]:
    """``messages`` with the placeholder answer to ``call_id`` replaced by ``text``."""
    return [tool_message(call_id, text)
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id else m
            for m in messages]


def _offer(run: Run, pending: PendingElicitation, *, agent_id: str,
           agent_name: str) -> None:
    run.elicitation = pending
    tool = answer_tool(run, pending, agent_id=agent_id, agent_name=agent_name)
    run.tools[tool.name] = tool


def answer_tool(run: Run, pending: PendingElicitation, *, agent_id: str,
                agent_name: str) -> Tool:
    """The built-in tool that sends the user's answer and returns the call's result."""
    properties: JsonObject = {"action": {
        "type": "string", "enum": ["accept", "decline", "cancel"],
        "description": "accept: the user answered (or, for a link, agreed to open it); "
                       "decline: the user refused; cancel: the user dropped the matter"}}
    if pending.mode == "form":
        properties["content"] = {**(pending.requested_schema or {"type": "object"}),
                                 "description": "The user's answer (with accept only)"}
    schema = AgentToolSchema(
        name=ANSWER_TOOL, parameters={"type": "object", "properties": properties,
                                      "required": ["action"]},
        description=f"Send the user's answer to the question of MCP server "
                    f"{pending.server!r} during {pending.call.name!r}: {pending.message}")
    key = elicitation_key(run.input, pending.call.id)

    async def answer(arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
        from jsonschema import Draft202012Validator  # only when a server asks: not at start-up
        from mcp.types import ElicitResult

        action = str(arguments.get("action"))
        content = None
        if action == "accept" and pending.mode == "form":
            content = with_defaults(pending.requested_schema,
                                     dict(arguments.get("content") or {}))
            errors = list(Draft202012Validator(pending.requested_schema).iter_errors(content))
            if errors:
                raise ToolArgumentsError(f"the answer does not fit the server's question: "
                                         f"{errors[0].message}. Ask the user again or decline")
        result = ElicitResult.model_validate({"action": action, "content": content})
        if run.elicitations.answered(key):  # signed in since the run resumed
            run.elicitation = None
            return await _finish_call(run, pending, ctx, agent_id=agent_id,
                                      agent_name=agent_name)
        if action == "accept" and run.consents.for_owner(key) is not None:
            raise ToolInvocationError(CONSENT_PENDING.format(server=pending.server),
                                      code="mcp.consent_pending")
        if not run.elicitations.answer(key, result):
            raise ToolInvocationError("the server no longer waits for this answer",
                                      code="mcp.elicitation_expired")
        log.info("agent.elicitation.answered", agent=agent_name, tool=pending.call.name,
                 action=action)
        run.elicitation = None
        return await _finish_call(run, pending, ctx, agent_id=agent_id, agent_name=agent_name)

    return Tool(schema=schema, run=answer, source="builtin")


async def _finish_call(run: Run, pending: PendingElicitation, ctx: CallContext, *,
                       agent_id: str, agent_name: str) -> AgentToolResult:
    """Wait for the answered call (through the run's toolset) and record it."""
    saved = pending.call
    call = PlannedCall(saved.id, saved.name, saved.arguments, run.tools.get(saved.name))
    if call.tool is None or run.toolset is None:
        raise ToolInvocationError(f"tool {saved.name!r} is no longer available")
    if run.approvals is not None:
        run.approvals.approve([call.id])  # it was approved (or needed none) before it asked
    outcome = await run.toolset.call(call, ctx)
    if outcome.deferred == Deferral.ELICITATION:
        params = run.elicitations.question(elicitation_key(run.input, call.id))
        if params is not None:
            again = PendingElicitation.of(call, params)
            _offer(run, again, agent_id=agent_id, agent_name=agent_name)
            return AgentToolResult(tool_name=ANSWER_TOOL,
                                   result=ASKED_AGAIN.format(question=again.question()))
        raise ToolInvocationError(LOST.format(tool=call.name), code="mcp.elicitation_expired")
    text, event = run.record_tool(outcome, agent_id=agent_id, agent_name=agent_name)
    if event is not None:
        await run.send_event(event)
    if outcome.result.is_error:
        return AgentToolResult(tool_name=ANSWER_TOOL, is_error=True,
                               error_message=outcome.result.error_message)
    return AgentToolResult(tool_name=ANSWER_TOOL, result=text)
