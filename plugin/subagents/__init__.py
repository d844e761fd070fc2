"""subagents: ReAct sub agents for flow-based conversational assistants.

The public API is imported lazily so that ``import subagents`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "MCPOpenAgent": "subagents.agents.open_agent",
    "MCPTaskAgent": "subagents.agents.task_agent",
    "MCPBaseAgent": "subagents.agents.base",
    "AgentInput": "subagents.agents.schemas",
    "AgentInputSlot": "subagents.agents.schemas",
    "AgentOutput": "subagents.agents.schemas",
    "AgentStatus": "subagents.agents.schemas",
    "AgentToolContext": "subagents.agents.schemas",
    "AgentToolResult": "subagents.agents.schemas",
    "AgentToolSchema": "subagents.agents.schemas",
    "tool": "subagents.tools.python",
    "Assistant": "subagents.dialogue.processor",
    "load_project": "subagents.config.project",
    "FakeModelServer": "subagents.testing.fake_server",
    "LLMClient": "subagents.llm",
    "Model": "subagents.llm",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'subagents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
