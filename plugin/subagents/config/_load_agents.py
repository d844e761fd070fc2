"""Loading ``sub_agents/<dir>/config.yml``: one sub agent each, checked against endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from subagents._yaml import Loc, YamlDoc
from subagents.config._base import pydantic_issues
from subagents.config._imports import import_from_project
from subagents.config._loader_base import _LoaderBase
from subagents.config.endpoints import EndpointsConfig
from subagents.config.sub_agent import SubAgentConfig
from subagents.config.validation import AGENT_PROMPT_VARIABLES
from subagents.exceptions import ConfigIssue


@dataclass
class AgentSpec:
    """A loaded sub agent: its config and where it came from."""

    config: SubAgentConfig
    folder: Path
    file: str

    @property
    def name(self) -> str:
        return self.config.agent.name


class _AgentsLoader(_LoaderBase):
    def load_agents(self, endpoints: EndpointsConfig, endpoints_doc: YamlDoc | None
                    ) -> dict[str, AgentSpec]:
        folder = self.paths.sub_agents
        agents: dict[str, AgentSpec] = {}
        if not folder.is_dir():
            if "sub_agents" in self.paths.explicit:
                self.missing_explicit("sub_agents", folder)
            return agents
        for sub in sorted(folder.iterdir()):
            if not sub.is_dir():
                continue
            if sub.name.startswith((".", "_")):
                continue
            path = sub / "config.yml"
            if not path.is_file():
                self.issues.append(ConfigIssue(
                    "agent.validation.folder.missing_config",
                    f"sub agent folder {self.rel(sub)!r} has no config.yml", file=self.rel(sub),
                    hint="add config.yml with agent: name/description, or remove the folder"))
                continue
            doc = self.read(path)
            if doc is None:
                continue
            spec = self.load_agent(doc, sub, endpoints, endpoints_doc)
            if spec is None:
                agent = doc.data.get("agent")
                if isinstance(agent, dict) and isinstance(agent.get("name"), str):
                    self.broken.agents.add(agent["name"])
                continue
            if spec.name in agents:
                self.issues.append(doc.issue(
                    "agent.duplicated_name", f"agent name {spec.name!r} is already used by "
                    f"{agents[spec.name].file}", ("agent", "name"),
                    hint="give every sub agent a unique agent.name"))
                continue
            agents[spec.name] = spec
            self.agent_docs[spec.name] = doc
        return agents

    def load_agent(self, doc: YamlDoc, folder: Path, endpoints: EndpointsConfig,
                   endpoints_doc: YamlDoc | None) -> AgentSpec | None:
        data = doc.data
        agent = data.get("agent")
        if agent is None:
            self.issues.append(doc.issue("agent.validation.mandatory.agent_section_missing",
                                         "the 'agent' section is missing",
                                         hint="add agent: {name: ..., description: ...}"))
            return None
        if not isinstance(agent, dict):
            self.issues.append(doc.issue("agent.validation.mandatory.agent_section_invalid",
                                         "'agent' must be a mapping", ("agent",)))
            return None
        missing = [k for k in ("name", "description") if not agent.get(k)]
        if missing:
            self.issues.append(doc.issue(
                "agent.validation.mandatory.fields_missing",
                f"agent section lacks {' and '.join(missing)}", ("agent",),
                key="agent." + missing[0], hint=f"add agent.{missing[0]}"))
            return None
        conflicts = self.include_exclude_conflicts(doc, str(agent["name"]))
        if conflicts:
            data = _without_exclude_tools(data)
        try:
            cfg = SubAgentConfig.model_validate(data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, _agent_code)
            return None
        self.check_agent(doc, cfg, endpoints, endpoints_doc)
        if conflicts:
            return None
        return AgentSpec(config=cfg, folder=folder, file=doc.display)

    def include_exclude_conflicts(self, doc: YamlDoc, agent: str) -> bool:
        """``include_tools`` and ``exclude_tools`` on one server entry: an error naming both."""
        connections = doc.data.get("connections")
        servers = connections.get("mcp_servers") if isinstance(connections, dict) else None
        found = False
        for index, ref in enumerate(servers if isinstance(servers, list) else []):
            if isinstance(ref, dict) and "include_tools" in ref and "exclude_tools" in ref:
                found = True
                self.issues.append(doc.issue(
                    "agent.validation.mcp.include_exclude_conflict",
                    f"agent {agent!r}: MCP server {ref.get('name')!r} has both include_tools "
                    "and exclude_tools", ("connections", "mcp_servers", index),
                    hint="keep one of them: list the tools to offer, or the tools to hide"))
        return found

    def check_agent(self, doc: YamlDoc, cfg: SubAgentConfig, endpoints: EndpointsConfig,
                    endpoints_doc: YamlDoc | None) -> None:
        conf = cfg.configuration
        if conf.timezone:
            self.check_timezone(doc, conf.timezone, used=conf.include_date_time)
        if conf.pre_call_hook and cfg.agent.protocol.value == "RASA":
            self.issues.append(doc.issue(
                "agent.validation.pre_call_hook.a2a_only", "pre_call_hook is for A2A agents; "
                "for MCP agents put it on the mcp_servers entry in endpoints.yml",
                ("configuration", "pre_call_hook")))
        llm = conf.llm or {}
        if "model_group" in llm:
            self.check_model_group_ref(doc, endpoints, llm["model_group"],
                                       ("configuration", "llm", "model_group"),
                                       "agent.validation.llm.unknown_model_group")
        elif llm:
            self.check_llm(doc, llm, ("configuration", "llm"))
        if conf.prompt_template:
            self.templates.check(doc, ("configuration", "prompt_template"), conf.prompt_template,
                                 AGENT_PROMPT_VARIABLES, code_prefix="agent.validation")
        if conf.module:
            self.check_module(doc, conf.module)
        self.check_agent_servers(doc, cfg, endpoints, endpoints_doc)

    def check_timezone(self, doc: YamlDoc, timezone: str, *, used: bool) -> None:
        """An unknown timezone: an error when dates are in the prompt, else a warning."""
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            self.issues.append(doc.issue(
                "datetime_utils.validate_datetime_configuration.invalid_timezone",
                f"unknown timezone {timezone!r}" + ("" if used else
                                                    " (unused: include_date_time is false)"),
                ("configuration", "timezone"),
                hint="use an IANA name such as Europe/Berlin or UTC",
                severity="error" if used else "warning"))

    def check_agent_servers(self, doc: YamlDoc, cfg: SubAgentConfig, endpoints: EndpointsConfig,
                            endpoints_doc: YamlDoc | None) -> None:
        servers = cfg.connections.mcp_servers
        if cfg.agent.protocol.value == "RASA" and servers is None:
            self.issues.append(doc.issue(
                "agent.validation.mcp.missing_connections",
                "no connections.mcp_servers: the agent has no MCP tools", ("connections",),
                severity="warning"))
        for index, ref in enumerate(servers or []):
            loc: Loc = ("connections", "mcp_servers", index, "name")
            if not ref.name.strip():
                self.issues.append(doc.issue("agent.validation.mcp.server_missing_name",
                                             "an mcp_servers entry has an empty name", loc))
            elif ref.name in self.broken.mcp_servers:
                continue
            elif endpoints_doc is None or endpoints.mcp_servers is None:
                self.issues.append(doc.issue(
                    "agent.validation.endpoints.no_mcp_servers",
                    f"MCP server {ref.name!r} is used but endpoints.yml defines no mcp_servers",
                    loc, hint="add an mcp_servers list to endpoints.yml"))
            elif endpoints.mcp_server(ref.name) is None:
                known = ", ".join(s.name for s in endpoints.mcp_servers) or "none"
                self.issues.append(doc.issue(
                    "agent.validation.endpoints.invalid_mcp_server",
                    f"MCP server {ref.name!r} is not defined in endpoints.yml (defined: {known})",
                    loc, hint="fix the name or add the server to endpoints.yml"))

    def check_module(self, doc: YamlDoc, module: str) -> None:
        loc: Loc = ("configuration", "module")
        mod_name, _, cls_name = module.rpartition(".")
        if not mod_name:
            self.issues.append(doc.issue("agent.validation.optional.module_not_found",
                                         f"{module!r} is not a dotted path pkg.mod.Class", loc))
            return
        try:
            mod = import_from_project(self.root, mod_name)
        except ModuleNotFoundError as exc:
            self.issues.append(_module_issue(doc, loc, mod_name, exc, self.root))
            return
        except Exception as exc:  # noqa: BLE001 - any import failure is reported
            self.issues.append(doc.issue(
                "agent.validation.optional.module_not_found",
                f"cannot import {mod_name!r}: {exc}", loc,
                hint="module paths are relative to the project folder"))
            return
        if not hasattr(mod, cls_name):
            self.issues.append(doc.issue("agent.validation.optional.module_not_found",
                                         f"module {mod_name!r} has no class {cls_name!r}", loc))


def missing_rasa_import(exc: ModuleNotFoundError, root: Path) -> str | None:
    """When ``exc`` is a ``rasa.*`` module the compatibility layer does not provide (and Rasa
    is not installed): the module and where the project imports it."""
    from subagents import rasa_compat

    name = exc.name or ""
    if not (name == "rasa" or name.startswith("rasa.")) or rasa_compat.real_rasa_available():
        return None
    where = ""
    tb = exc.__traceback__
    resolved = root.resolve()
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename)
        if path.is_absolute() and path.resolve().is_relative_to(resolved):
            where = f" ({path.resolve().relative_to(resolved).as_posix()}, line {tb.tb_lineno})"
        tb = tb.tb_next
    return (f"imports {name}{where}, a module of Rasa Pro that subagents does not provide "
            "in its place (only the agent classes, schemas, events, OutputChannel and a few "
            "helpers are)")


def _module_issue(doc: YamlDoc, loc: Loc, mod_name: str, exc: ModuleNotFoundError,
                  root: Path) -> ConfigIssue:
    missing = missing_rasa_import(exc, root)
    if missing is not None:
        return doc.issue("agent.validation.module.rasa_import_unsupported",
                         f"{mod_name!r} {missing}", loc,
                         hint="import the class from subagents, or remove that import")
    return doc.issue("agent.validation.optional.module_not_found",
                     f"cannot import {mod_name!r}: {exc}", loc,
                     hint="module paths are relative to the project folder")


def _without_exclude_tools(data: dict[str, Any]) -> dict[str, Any]:
    """A copy where entries with both include and exclude lists keep only include_tools."""
    connections = dict(data["connections"])
    connections["mcp_servers"] = [
        {k: v for k, v in ref.items() if k != "exclude_tools"}
        if isinstance(ref, dict) and "include_tools" in ref else ref
        for ref in connections["mcp_servers"]]
    return {**data, "connections": connections}


def _agent_code(err: dict[str, Any]) -> str:
    loc = err["loc"]
    if err["type"] == "extra_forbidden":
        section = loc[0] if len(loc) > 1 else "top_level"
        return f"agent.validation.structure.additional_{section}_keys"
    if loc and loc[-1] == "protocol":
        return "agent.validation.pydantic.invalid_protocol"
    if err["type"].endswith("_type") or err["type"].endswith("_parsing"):
        return "agent.validation.pydantic.type_error"
    return "agent.validation.pydantic.failed"
