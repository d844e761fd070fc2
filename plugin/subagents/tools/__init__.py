"""One toolset interface for MCP tools, Python tools and built-ins."""

from .base import CallContext, PlannedCall, Tool, ToolOutcome
from .executor import execute_calls, invoke_tool

__all__ = ["CallContext", "PlannedCall", "Tool", "ToolOutcome", "execute_calls", "invoke_tool"]
