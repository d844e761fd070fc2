"""Flow steps that call an MCP tool directly: ``call`` + ``mcp_server`` + ``mapping``.

::

    - call: book_appointment
      mcp_server: appointments
      mapping:
        input:
          - {param: appointment_slot, slot: selected_slot}
        output:
          - {slot: appointment_confirmed, value: result.structuredContent.confirmed}
      next: confirm

One run: connect the server (shared with the agents), check that it lists the tool, build the
arguments from the slots' current values (an unset slot is sent as ``null``), call the tool
(``TOOL_STEP_TIMEOUT`` seconds, or the server's ``timeout`` when that is shorter), record an
``mcp_tool_executed`` event (and, when the conversation is recorded, the call and its result
or failure in the turn's recording, as agents' tool calls are), then evaluate each
output expression against ``{"result": <the CallToolResult as a dict>}`` (keys ``content``,
``structuredContent``, ``isError``, ``meta``) and set the slots in output order. A non-empty
list or dict is stored as a JSON string. The flow then continues with the step's ``next``.

Failures (the server is down or times out, the tool is not listed, the tool reports an error,
an expression fails, no output produced a slot) run ``pattern_internal_error`` with
``error_source: mcp_tool`` and the flow carries on after the step, with the output slots unset.
An error ``mcp_tool_executed`` event (no arguments, no result) is recorded unless the call
already recorded one. A result with neither content nor structured content sets no slot and is
not an error.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from subagents.config.endpoints import EndpointsConfig
    from subagents.config.flows import Step
    from subagents.dialogue.turn import Turn
    from subagents.mcp.pool import MCPPool

log = structlog.get_logger("subagents.dialogue")

TOOL_STEP_TIMEOUT = 10.0
"""Seconds an MCP tool step waits for the tool's answer."""


class McpToolStepError(Exception):
    """A failed MCP tool step; ``message`` goes into the internal-error pattern's context."""


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def is_mcp_tool_step(step: Step, endpoints: EndpointsConfig) -> bool:
    """A call step with ``mcp_server`` and ``mapping`` naming a server in endpoints.yml."""
    server = step.model.mcp_server
    return bool(server and step.model.mapping is not None
                and endpoints.mcp_server(str(server)) is not None)


def result_as_dict(result: Any) -> dict[str, Any]:
    """A ``CallToolResult`` as output expressions see it."""
    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {("meta" if k == "_meta" else k): rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        return value

    dumped = rename(result.model_dump(by_alias=True, mode="json"))
    return {"meta": dumped.get("meta"), "content": dumped.get("content") or [],
            "structuredContent": dumped.get("structuredContent"),
            "isError": bool(dumped.get("isError"))}


def _slot_value(value: Any) -> Any:
    if isinstance(value, (list, dict)) and value:
        return json.dumps(value)
    return value


def _event(tool: str, arguments: dict[str, Any], result: dict[str, Any] | None, *,
           is_error: bool, error_message: str | None,
           metadata: dict[str, Any]) -> dict[str, Any]:
    return {"event": "mcp_tool_executed", "timestamp": time.time(), "tool_name": tool,
            "arguments": arguments, "result": result, "is_error": is_error,
            "error_message": error_message, "metadata": metadata}


class McpToolSteps:
    """Runs MCP tool steps with the assistant's shared MCP connections."""

    def __init__(self, endpoints: EndpointsConfig, pool: MCPPool) -> None:
        self.endpoints = endpoints
        self.pool = pool

    async def run(self, turn: Turn, flow_id: str, step: Step) -> dict[str, Any] | None:
        """Run the step; None on success, else the internal-error pattern's context."""
        tool = str(step.model.call)
        server = str(step.model.mcp_server)
        recorded: list[bool] = []
        try:
            await self._call(turn, flow_id, step, tool, server, recorded)
            return None
        except McpToolStepError as exc:
            message = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure ends in the error pattern
            message = f"the MCP tool step failed: {type(exc).__name__}: {exc}"
        log.warning("dialogue.mcp_step.failed", flow=flow_id, step=step.id, tool=tool,
                    server=server, error=message)
        if not recorded:
            turn.add(_event(tool, {}, None, is_error=True, error_message=message,
                            metadata={"flow_id": flow_id, "step_id": step.id,
                                      "mcp_server": server}))
        return {"error_source": "mcp_tool", "tool_name": tool, "mcp_server": server,
                "error_message": message, "flow_id": flow_id, "step_id": step.id}

    async def _call(self, turn: Turn, flow_id: str, step: Step, tool: str, server: str,
                    recorded: list[bool]) -> None:
        mapping = step.model.mapping
        outputs = list(_field(mapping, "output") or [])
        await self.pool.start(server, attempts=1)
        connection = self.pool.connection(server)
        listed = next((t for t in await connection.tools() if t.name == tool), None)
        if listed is None:
            raise McpToolStepError(f"tool {tool!r} is not available on MCP server {server!r}")
        arguments = {str(_field(i, "param")): turn.slots.get(str(_field(i, "slot")))
                     for i in _field(mapping, "input") or []
                     if _field(i, "param") and _field(i, "slot")}
        timeout = min(TOOL_STEP_TIMEOUT, connection.config.timeout)
        left = turn.scope.time_left()  # the turn's deadline bounds the step too
        if left is not None and left < timeout:
            if left <= 0:
                raise McpToolStepError(f"tool {tool!r} was not called: the turn ran out of time")
            timeout = left
        metadata = {"flow_id": flow_id, "step_id": step.id}
        recorder = turn.scope.recorder
        try:
            raw = await connection.call_tool_result(tool, arguments, timeout=timeout)
        except Exception as exc:
            if recorder is not None:
                failure = f"the MCP tool step failed: {type(exc).__name__}: {exc}"
                recorder.record_tool_call(listed, arguments, {
                    "is_error": True, "error_message": failure}, flow_step=metadata)
            raise
        result = result_as_dict(raw)
        if recorder is not None:
            recorder.record_tool_call(listed, arguments, result, flow_step=metadata)
        if result["isError"]:
            message = f"tool {tool!r} reported an error: " + " ".join(
                str(c.get("text") or "") for c in result["content"] if isinstance(c, dict))
            turn.add(_event(tool, arguments, None, is_error=True, error_message=message,
                            metadata=metadata))
            recorded.append(True)
            raise McpToolStepError(message)
        turn.add(_event(tool, arguments, result, is_error=False, error_message=None,
                        metadata=metadata))
        recorded.append(True)
        if not result["content"] and not result["structuredContent"]:
            log.warning("dialogue.mcp_step.empty_result", flow=flow_id, tool=tool)
            return
        for slot, value in self._outputs(outputs, result, tool):
            turn.add({"event": "slot", "timestamp": time.time(), "name": slot, "value": value})

    @staticmethod
    def _outputs(outputs: list[Any], result: dict[str, Any],
                 tool: str) -> list[tuple[str, Any]]:
        from jinja2 import TemplateError
        from jinja2.sandbox import SandboxedEnvironment

        env = SandboxedEnvironment()
        values = []
        for item in outputs:
            slot, expression = _field(item, "slot"), _field(item, "value")
            if not slot or not isinstance(expression, str):
                continue
            try:
                value = env.compile_expression(expression)(result=result)
            except TemplateError as exc:
                raise McpToolStepError(
                    f"could not process the result of {tool!r}: {expression!r} failed: "
                    f"{exc}") from exc
            values.append((str(slot), _slot_value(value)))
        if not values:
            raise McpToolStepError(f"could not process the result of {tool!r}: no output "
                                   "mapping produced a slot value")
        return values
