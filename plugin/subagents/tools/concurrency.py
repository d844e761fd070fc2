"""How the calls of one model response share time: read-only calls overlap, others run alone.

Read-only tools run concurrently (at most ``max_parallel_tools`` at once); any other tool runs
alone, after the read-only calls before it finished and before the ones after it start.
Outcomes come back in call order.
"""

from __future__ import annotations

import asyncio

from subagents.tools.base import CallContext, PlannedCall, ToolOutcome, Toolset


async def execute_calls(toolset: Toolset, calls: list[PlannedCall], ctx: CallContext, *,
                        max_parallel: int = 3) -> list[ToolOutcome]:
    """Execute ``calls`` (each with a tool of ``toolset``); outcomes in call order."""
    if len(calls) == 1:  # nothing to overlap with: no limiter, no batch
        assert calls[0].tool is not None
        return [await toolset.call(calls[0], ctx)]
    outcomes: list[ToolOutcome] = []
    batch: list[PlannedCall] = []
    limiter = asyncio.Semaphore(max(1, max_parallel))

    async def limited(call: PlannedCall) -> ToolOutcome:
        async with limiter:
            return await toolset.call(call, ctx)

    async def flush() -> None:
        if len(batch) == 1:  # nothing to overlap with: no task needed
            outcomes.append(await toolset.call(batch[0], ctx))
        elif batch:
            outcomes.extend(await asyncio.gather(*(limited(c) for c in batch)))
        batch.clear()

    for call in calls:
        assert call.tool is not None
        if call.tool.read_only:
            batch.append(call)
            continue
        await flush()
        outcomes.append(await toolset.call(call, ctx))
    await flush()
    return outcomes
