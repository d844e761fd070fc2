"""Tools and toolsets: MCP tools, Python tools, built-ins, and one module per tool feature.

* :mod:`.base` - ``Tool``, ``Toolset``, ``WrapperToolset``
* :mod:`.executor` - ``FunctionToolset``; one call: argument validation, per-tool timeout,
  errors as results
* :mod:`.concurrency` - read-only calls overlap, others run alone
* :mod:`.approvals` - calls that need the user's yes first
* :mod:`.client_tools` - tools the client executes
* :mod:`.state_mapping` - ``inputs_from_state`` / ``outputs_to_state``
* :mod:`.result_budget` - long results enter as a preview, ``recall`` reads the rest
* :mod:`.mcp_tools` - the MCP tools an agent may use; :mod:`.python` - ``@tool``
"""

from subagents.tools.base import (
           CallContext,
           Deferral,
           PlannedCall,
           SlotEffect,
           Tool,
           ToolOutcome,
           Toolset,
           WrapperToolset,
)
from subagents.tools.concurrency import execute_calls
from subagents.tools.executor import FunctionToolset, invoke_tool

__all__ = ["CallContext", "Deferral", "FunctionToolset", "PlannedCall", "SlotEffect", "Tool",
           "ToolOutcome", "Toolset", "WrapperToolset", "execute_calls", "invoke_tool"]
