"""Protocol type -> agent class, ``configuration.module`` overrides, third-party classes.

Third-party packages add protocol types through the entry point group ``subagents.agents``
(``name = "pkg.mod:Class"``); a project picks a class per agent with ``configuration.module``.
The class must subclass the one the call step needs (MCPOpenAgent without ``exit_if``,
MCPTaskAgent with it).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from subagents.agents.a2a_agent import A2AAgent
from subagents.agents.base import MCPBaseAgent
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.protocol import SubAgent
from subagents.agents.task_agent import MCPTaskAgent
from subagents.config._load_agents import missing_rasa_import
from subagents.config.project import AgentSpec, import_from_project
from subagents.exceptions import AgentInitializationError
from subagents.rasa_compat import is_rasa_class

if TYPE_CHECKING:
    from subagents.config.endpoints import EndpointsConfig
    from subagents.llm import Model
    from subagents.mcp.pool import MCPPool

ENTRY_POINT_GROUP = "subagents.agents"
AgentClass = type[MCPBaseAgent] | type[A2AAgent]
"""A class of sub agent: an MCP agent or the remote A2A agent (both are :class:`SubAgent`)."""
BUILTIN: dict[str, AgentClass] = {"mcp_open": MCPOpenAgent, "mcp_task": MCPTaskAgent,
                                  "a2a": A2AAgent}


def protocol_type_for(spec: AgentSpec, *, has_exit_if: bool) -> str:
    """``exit_if`` -> ``mcp_task``; A2A agents -> ``a2a``; otherwise ``mcp_open``."""
    if has_exit_if:
        return "mcp_task"
    return "a2a" if spec.config.agent.protocol.value == "A2A" else "mcp_open"


def registered_classes() -> dict[str, AgentClass]:
    """Built-in agent classes plus those registered under the entry point group."""
    classes = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        loaded = ep.load()
        if isinstance(loaded, type) and issubclass(loaded, MCPBaseAgent | A2AAgent):
            classes[ep.name] = loaded
    return classes


def agent_class(spec: AgentSpec, protocol_type: str, root: Path) -> AgentClass:
    """The class for an agent: ``configuration.module`` or the protocol type's class."""
    classes = registered_classes()
    required = classes.get(protocol_type)
    if required is None:
        raise AgentInitializationError(
            f"agent {spec.name!r}: protocol type {protocol_type!r} is not supported "
            f"(available: {', '.join(sorted(classes))}); A2A agents need a class registered "
            f"under the {ENTRY_POINT_GROUP!r} entry point group",
            code="agent.protocol.unsupported")
    module = spec.config.configuration.module
    if not module:
        return required
    mod_name, _, cls_name = module.rpartition(".")
    try:
        cls = getattr(import_from_project(root, mod_name), cls_name)
    except ModuleNotFoundError as exc:
        missing = missing_rasa_import(exc, root)
        if missing is None:
            raise AgentInitializationError(
                f"agent {spec.name!r}: cannot load configuration.module {module!r}: {exc}",
                code="agent.validation.optional.module_not_found") from exc
        raise AgentInitializationError(
            f"agent {spec.name!r}: configuration.module {module!r} {missing}",
            code="agent.validation.module.rasa_import_unsupported") from exc
    except (ImportError, AttributeError) as exc:
        raise AgentInitializationError(
            f"agent {spec.name!r}: cannot load configuration.module {module!r}: {exc}",
            code="agent.validation.optional.module_not_found") from exc
    if isinstance(cls, type) and is_rasa_class(cls):
        raise AgentInitializationError(
            f"agent {spec.name!r} ({spec.file}): configuration.module {module!r} subclasses a "
            "class of the installed Rasa Pro package; Rasa's agent classes need Rasa's own "
            "engine and cannot run here. Import paths such as "
            "rasa.agents.protocol.mcp.mcp_task_agent resolve to subagents' classes only when "
            "the rasa package is not installed: uninstall it from this environment, or import "
            f"{required.__name__} from subagents instead (same hooks)",
            code="agent.module.rasa_installed")
    if not isinstance(cls, type) or not issubclass(cls, required):
        raise AgentInitializationError(
            f"agent {spec.name!r} ({spec.file}): configuration.module {module!r} is not a "
            f"subclass of {required.__name__}, which this call step needs "
            f"({'with' if protocol_type == 'mcp_task' else 'without'} exit_if)",
            code="agent.module.not_subclass")
    return cls


def create_agent(spec: AgentSpec, protocol_type: str, *, root: Path,
                 endpoints: EndpointsConfig | None = None, pool: MCPPool | None = None,
                 llm: Model | None = None) -> SubAgent:
    """Build the agent of ``spec`` for the protocol type its call step needs."""
    cls = agent_class(spec, protocol_type, root)
    return cls.from_config(spec.config, endpoints=endpoints, pool=pool, project_root=root,
                           llm=llm)
