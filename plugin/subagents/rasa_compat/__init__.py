"""Project code written against Rasa Pro's import paths runs here unchanged.

Sub-agent projects written for Rasa import its agent classes and schemas
(``from rasa.agents.protocol.mcp.mcp_task_agent import MCPTaskAgent``), its events
(``from rasa.shared.core.events import SlotSet``) and a few helpers. When Rasa is not installed,
:func:`activate` adds an import hook that resolves exactly the modules in :data:`MODULES` to
ours; any other ``rasa.*`` module still fails with the usual ``ModuleNotFoundError``.

The hook sits at the end of ``sys.meta_path``: a real ``rasa`` package, when one is importable,
always wins, and the hook is then not installed at all. Rasa's own agent classes cannot run here
(they need Rasa's engine); the agent registry says so when a ``configuration.module`` class
subclasses one of them.

This module imports nothing of ours at import time: the table below names modules as strings.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Sequence
from types import ModuleType

_SHIMS = "subagents.rasa_compat._shims"
_SCHEMAS = dict.fromkeys(
    ("AgentInput", "AgentInputSlot", "AgentOutput", "AgentStatus", "AgentToolContext",
     "AgentToolResult", "AgentToolSchema", "CustomToolSchema"), "subagents.agents.schemas")

_GENERATORS = dict.fromkeys(
    ("CommandGenerator", "LLMBasedCommandGenerator", "LLMCommandGenerator",
     "CompactLLMCommandGenerator", "SearchReadyLLMCommandGenerator",
     "SingleStepLLMCommandGenerator", "MultiStepLLMCommandGenerator"),
    "subagents.dialogue.understanding")

MODULES: dict[str, dict[str, str]] = {
    "rasa": {},
    "rasa.agents": {},
    "rasa.agents.protocol": {},
    "rasa.agents.protocol.mcp": {},
    "rasa.agents.protocol.mcp.mcp_base_agent": {"MCPBaseAgent": "subagents.agents.base"},
    "rasa.agents.protocol.mcp.mcp_open_agent": {"MCPOpenAgent": "subagents.agents.open_agent"},
    "rasa.agents.protocol.mcp.mcp_task_agent": {"MCPTaskAgent": "subagents.agents.task_agent"},
    "rasa.agents.protocol.a2a": {},
    "rasa.agents.protocol.a2a.a2a_agent": {"A2AAgent": "subagents.agents.a2a_agent"},
    "rasa.agents.schemas": _SCHEMAS,
    "rasa.agents.schemas.agent_input": _SCHEMAS,
    "rasa.agents.schemas.agent_output": _SCHEMAS,
    "rasa.agents.schemas.agent_tool_result": _SCHEMAS,
    "rasa.agents.schemas.agent_tool_schema": _SCHEMAS,
    "rasa.agents.schemas.agent_tool_context": _SCHEMAS,
    "rasa.agents.constants": dict.fromkeys(
        ("TOOL_TYPE_KEY", "TOOL_TYPE_FUNCTION_KEY", "TOOL_NAME_KEY", "TOOL_DESCRIPTION_KEY",
         "TOOL_PARAMETERS_KEY", "TOOL_STRICT_KEY", "TOOL_PROPERTIES_KEY", "TOOL_REQUIRED_KEY",
         "TOOL_ADDITIONAL_PROPERTIES_KEY", "TOOL_PROPERTY_TYPE_KEY", "TOOL_INPUT_SCHEMA_KEY",
         "KEY_ROLE", "KEY_CONTENT", "KEY_TOOL_CALL_ID", "KEY_TOOL_CALLS", "KEY_FUNCTION",
         "KEY_NAME", "KEY_ARGUMENTS", "KEY_ID", "KEY_TYPE"), _SHIMS),
    "rasa.agents.core": {},
    "rasa.agents.core.types": {"AgentStatus": "subagents.agents.schemas",
                               "ProtocolType": _SHIMS},
    "rasa.shared": {},
    "rasa.shared.core": {},
    "rasa.shared.core.events": dict.fromkeys(
        ("Event", "SlotSet", "BotUttered", "UserUttered", "ActionExecuted", "FollowupAction",
         "McpToolExecuted"), "subagents.types"),
    "rasa.shared.exceptions": dict.fromkeys(
        ("RasaException", "FileNotFoundException", "FileIOException",
         "AgentInitializationException", "InvalidParameterException"), _SHIMS),
    "rasa.shared.utils": {},
    "rasa.shared.utils.io": {"read_json_file": _SHIMS, "write_text_file": _SHIMS},
    "rasa.core": {},
    "rasa.core.channels": {"OutputChannel": "subagents.types"},
    "rasa.core.channels.channel": {"OutputChannel": "subagents.types"},
    "rasa.nlu": {},
    "rasa.nlu.utils": {"write_json_to_file": _SHIMS},
    "rasa.dialogue_understanding": {},
    "rasa.dialogue_understanding.generator": _GENERATORS,
    "rasa.dialogue_understanding.generator.command_generator": _GENERATORS,
    "rasa.dialogue_understanding.generator.llm_based_command_generator": _GENERATORS,
    "rasa.dialogue_understanding.generator.llm_command_generator": _GENERATORS,
    "rasa.dialogue_understanding.generator.single_step": {},
    "rasa.dialogue_understanding.generator.single_step.compact_llm_command_generator":
        _GENERATORS,
    "rasa.dialogue_understanding.generator.single_step.search_ready_llm_command_generator":
        _GENERATORS,
    "rasa.dialogue_understanding.generator.single_step.single_step_llm_command_generator":
        _GENERATORS,
}
"""Every ``rasa.*`` module this layer provides: module -> {name: our module holding it}."""

_PACKAGES = {name.rpartition(".")[0] for name in MODULES if "." in name}
_lock = threading.Lock()


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = (f"Provided by subagents in place of Rasa's {module.__name__} "
                          "(see subagents.rasa_compat).")
        for attr, source in MODULES[module.__name__].items():
            setattr(module, attr, getattr(importlib.import_module(source), attr))


class RasaCompatFinder(importlib.abc.MetaPathFinder):
    """Finds only the modules listed in :data:`MODULES`."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for a listed ``rasa.*`` module, else None (the next finder looks)."""
        if fullname not in MODULES:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _Loader(),
                                              is_package=fullname in _PACKAGES)
        if fullname in _PACKAGES:
            spec.submodule_search_locations = []
        return spec


def _installed() -> RasaCompatFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, RasaCompatFinder)), None)


def real_rasa_available() -> bool:
    """True when a real ``rasa`` package (not this layer) can be imported."""
    module = sys.modules.get("rasa")
    if module is not None:
        spec = getattr(module, "__spec__", None)
        return not (spec is not None and isinstance(spec.loader, _Loader))
    finder = _installed()
    if finder is not None:
        sys.meta_path.remove(finder)
    try:
        return importlib.util.find_spec("rasa") is not None
    finally:
        if finder is not None:
            sys.meta_path.append(finder)


def activate() -> bool:
    """Install the import hook unless a real Rasa is importable; True if it is active."""
    with _lock:
        if _installed() is not None:
            return True
        if real_rasa_available():
            return False
        sys.meta_path.append(RasaCompatFinder())
        return True


def deactivate() -> None:
    """Remove the hook and forget the ``rasa.*`` modules it provided (used by tests)."""
    with _lock:
        finder = _installed()
        if finder is not None:
            sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "rasa" or n.startswith("rasa.")]:
            spec = getattr(sys.modules[name], "__spec__", None)
            if spec is not None and isinstance(spec.loader, _Loader):
                del sys.modules[name]


def is_rasa_class(cls: type) -> bool:
    """True when ``cls`` or a base class comes from a real ``rasa`` package."""
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        if klass.__module__.split(".")[0] == "rasa" and not (
                module is not None and isinstance(getattr(module.__spec__, "loader", None),
                                                  _Loader)):
            return True
    return False


__all__ = ["MODULES", "RasaCompatFinder", "activate", "deactivate", "is_rasa_class",
           "real_rasa_available"]
