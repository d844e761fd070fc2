"""The data contracts of a sub agent run under their Rasa-compatible import path.

The types are defined in :mod:`subagents.types` (the package's leaf module); import them from
here in agent code.
"""

from subagents.types import (
           AgentInput,
           AgentInputSlot,
           AgentOutput,
           AgentStatus,
           AgentToolContext,
           AgentToolResult,
           AgentToolSchema,
           CustomToolSchema,
           ExitReason,
)

__all__ = ["AgentInput", "AgentInputSlot", "AgentOutput", "AgentStatus", "AgentToolContext",
           "AgentToolResult", "AgentToolSchema", "CustomToolSchema", "ExitReason"]
