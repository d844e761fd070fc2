"""Parking a run on deferred calls, and resuming it on the next invocation.

A run parks when a call was deferred: an MCP call whose server asked the user for input
(``_elicitation``), a client-executed tool (the client runs it) or a call that needs the user's
approval. The exchange so far is saved in the output metadata; the next
invocation finds it in the input metadata and continues from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from subagents.agents._images import without_images
from subagents.agents.elicitation import park_on_elicitation
from subagents.agents.plan import Continue, Executed, Outcome, Park, tool_message
from subagents.agents.run import Run
from subagents.tools import approvals, client_tools
from subagents.tools.base import CallContext, Deferral, PendingCalls
from subagents.tools.concurrency import execute_calls
from subagents.types import AgentEvent, AgentStatus, ExitReason, McpToolExecuted


async def park(run: Run, executed: Executed, *, agent_name: str,
               ask: Callable[[str], Awaitable[None]]) -> Park:
    """Park on the deferred calls: a server's request for input is put to the user first
    (one question at a time); client tools are requested from the client; otherwise the user
    is asked (through ``ask``) to approve the calls."""
    elicited = await park_on_elicitation(run, executed, ask)
    if elicited is not None:
        return elicited
    waiting = executed.deferred(Deferral.CLIENT)
    if waiting:
        for call in waiting:
            event = AgentEvent("agent_client_tool_requested", agent_name, None, extra={
                "tool_call_id": call.id, "tool_name": call.name, "arguments": call.arguments})
            run.events.append(event)
            await run.send_event(event)
        run.output_metadata[client_tools.PENDING_KEY] = PendingCalls.of(
            without_images(run.tool_messages), waiting).to_metadata()
        return Park(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.CLIENT_TOOL))
    asked = executed.deferred(Deferral.APPROVAL)
    await ask(approvals.question(asked))
    run.output_metadata[approvals.PENDING_KEY] = PendingCalls.of(
        without_images(run.tool_messages), asked).to_metadata()
    return Park(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.APPROVAL))


async def resume_client_tools(run: Run, *, agent_id: str) -> Continue | Park:
    """Restore a parked exchange and answer its calls with the client's results; park again
    while results are missing and the user has not said anything new."""
    saved = run.input.metadata.get(client_tools.PENDING_KEY)
    if not saved:
        return Continue()
    pending = PendingCalls.model_validate(saved)
    delivered = client_tools.deliver(
        pending, dict(run.input.metadata.get(client_tools.RESULTS_KEY) or {}))
    run.tool_messages = delivered.messages
    for call, text in delivered.results:
        run.events.append(McpToolExecuted(call.name, call.arguments, text, is_error=False,
                                          error_message=None, agent_id=agent_id))
        run.tool_messages.append(tool_message(call.id, text))
        run.structured.append({"name": call.name, "result": text})
    if delivered.waiting and not run.input.user_message.strip():
        run.output_metadata[client_tools.PENDING_KEY] = pending.model_copy(update={
            "calls": delivered.waiting, "messages": run.tool_messages}).to_metadata()
        return Park(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.CLIENT_TOOL))
    for call in delivered.waiting:
        run.tool_messages.append(tool_message(call.id, client_tools.NOT_YET))
    return Continue()


async def resume_approval(run: Run, ctx: CallContext, *, agent_id: str, agent_name: str,
                          max_parallel: int) -> None:
    """The user answered an approval question: run the calls on a yes, else decline them."""
    saved = run.input.metadata.get(approvals.PENDING_KEY)
    if not saved or run.approvals is None or run.toolset is None:
        return
    answered = approvals.answer(PendingCalls.model_validate(saved), run.input.user_message,
                                run.tools)
    run.tool_messages = answered.messages
    run.approvals.approve(c.id for c in answered.to_run)
    outcomes = {o.call.id: o for o in await execute_calls(run.toolset, answered.to_run, ctx,
                                                         max_parallel=max_parallel)}
    for call_id in answered.order:
        if call_id in outcomes:
            answer, _ = run.record_tool(outcomes[call_id], agent_id=agent_id,
                                        agent_name=agent_name)
        else:
            answer = approvals.DECLINED
        run.tool_messages.append(tool_message(call_id, answer))
