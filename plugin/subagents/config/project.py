"""Load a whole assistant project folder; report every problem at once (file, line, key, code).

Layout: ``endpoints.yml``, ``config.yml`` (Rasa pipeline, optional), ``domain.yml`` and/or
``domain/``, ``data/**/*.yml`` (recognised by their top-level keys: ``flows`` or domain keys),
``sub_agents/<dir>/config.yml``. The shipped default patterns (``default_patterns.yml``) are merged
underneath: a project flow or response with the same name overrides them.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, ValidationError

from .. import rasa_compat
from .._yaml import Loc, YamlDoc, YamlSyntaxError, load_yaml
from ..conditions import ConditionSyntaxError, parse_condition
from ..exceptions import ConfigIssue, ProjectInvalidError
from ._base import pydantic_issues
from .credentials import check_credentials
from .domain import Domain, DomainFile
from .endpoints import EndpointsConfig
from .flows import END, Flow, FlowModel, Step, flatten
from .sub_agent import SubAgentConfig

DEFAULT_PATTERNS = Path(__file__).with_name("default_patterns.yml")
DOMAIN_KEYS = {"slots", "responses", "actions", "intents", "entities", "forms", "session_config"}
IGNORED_KEYS = {"version", "nlu", "stories", "rules", "test_cases", "fixtures", "metadata",
                "stub_custom_actions", "retrieval_intents", "e2e_actions", "synonyms", "lookup"}
BUILTIN_ACTIONS = {
    "action_listen", "action_restart", "action_session_start", "action_default_fallback",
    "action_deactivate_loop", "action_revert_fallback_events", "action_two_stage_fallback",
    "action_unlikely_intent", "action_back", "action_extract_slots", "action_cancel_flow",
    "action_clean_stack", "action_trigger_search", "action_trigger_chitchat",
    "action_reset_routing", "action_hangup", "action_repeat_bot_messages",
    "action_correct_flow_slot", "action_run_slot_rejections", "action_continue_interrupted_flow",
    "action_cancel_interrupted_flow", "action_send_text", "action_agent_request_user_input",
    "action_block_digression",
}
PROMPT_VARIABLES = {
    "description", "user_message", "slots", "slot_names", "conversation_history", "recipient_id",
    "current_datetime", "enable_filler_messages", "resumed_after_interruption",
    "resumed_last_request", "restarted", "agent_name", "tools",
}
BUILTIN_SLOTS = {"requested_slot", "continue_interrupted_flow_confirmation", "flow_hashes",
                 "session_started_metadata", "mocked_datetime", "dialogue_stack",
                 "return_value", "slot_to_confirm", "confirm_slot"}


class PipelineConfig(BaseModel):
    """Root ``config.yml`` (Rasa format); only the command generator's ``llm`` is read."""

    model_config = ConfigDict(extra="allow")
    recipe: str | None = None
    language: str | None = None
    assistant_id: str | None = None
    pipeline: list[dict[str, Any]] | None = None
    policies: list[dict[str, Any]] | None = None

    def command_generator_llm(self) -> dict[str, Any] | None:
        for entry in self.pipeline or []:
            if str(entry.get("name", "")).endswith("CommandGenerator"):
                llm = entry.get("llm")
                return llm if isinstance(llm, dict) else None
        return None


@dataclass
class AgentSpec:
    """A loaded sub agent: its config and where it came from."""

    config: SubAgentConfig
    folder: Path
    file: str

    @property
    def name(self) -> str:
        return self.config.agent.name


@dataclass
class Project:
    root: Path
    endpoints: EndpointsConfig
    domain: Domain
    flows: dict[str, Flow]
    agents: dict[str, AgentSpec]
    pipeline: PipelineConfig
    warnings: list[ConfigIssue] = field(default_factory=list)

    @property
    def assistant_id(self) -> str:
        return self.pipeline.assistant_id or self.root.name

    def agent_call_steps(self) -> list[tuple[Flow, Any]]:
        return [(flow, step) for flow in self.flows.values() for step in flow.steps
                if step.kind == "call" and step.model.call in self.agents]


class _Loader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.issues: list[ConfigIssue] = []

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def read(self, path: Path) -> YamlDoc | None:
        try:
            doc = load_yaml(path, display=self.rel(path))
        except YamlSyntaxError as exc:
            self.issues.append(exc.issue)
            return None
        if doc.data is None:
            doc.data = {}
        if not isinstance(doc.data, dict):
            self.issues.append(doc.issue("yaml.not_a_mapping", "the file must hold a mapping "
                                         "(key: value) at the top level"))
            return None
        return doc

    # ---------------------------------------------------------------- endpoints + pipeline
    def load_endpoints(self) -> tuple[EndpointsConfig, YamlDoc | None]:
        path = self.root / "endpoints.yml"
        if not path.exists():
            return EndpointsConfig(), None
        doc = self.read(path)
        if doc is None:
            return EndpointsConfig(), None
        try:
            cfg = EndpointsConfig.model_validate(doc.data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, _endpoint_code)
            return EndpointsConfig(), doc
        seen: set[str] = set()
        for index, group in enumerate(cfg.model_groups):
            if group.id in seen:
                self.issues.append(doc.issue("endpoints.model_group.duplicate_id",
                                             f"model group {group.id!r} is defined twice",
                                             ("model_groups", index, "id")))
            seen.add(group.id)
        seen = set()
        for index, server in enumerate(cfg.mcp_servers or []):
            if server.name in seen:
                self.issues.append(doc.issue("endpoints.mcp_server.duplicate_name",
                                             f"MCP server {server.name!r} is defined twice",
                                             ("mcp_servers", index, "name")))
            seen.add(server.name)
            if server.sampling and cfg.model_group(server.sampling.model_group) is None:
                self.issues.append(doc.issue(
                    "endpoints.mcp_server.sampling_model_group_unknown",
                    f"MCP server {server.name!r} samples with model group "
                    f"{server.sampling.model_group!r}, which is not defined",
                    ("mcp_servers", index, "sampling", "model_group")))
        return cfg, doc

    def load_pipeline(self, endpoints: EndpointsConfig) -> PipelineConfig:
        path = self.root / "config.yml"
        if not path.exists():
            return PipelineConfig()
        doc = self.read(path)
        if doc is None:
            return PipelineConfig()
        try:
            pipeline = PipelineConfig.model_validate(doc.data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, lambda e: "config.validation.structure")
            return PipelineConfig()
        llm = pipeline.command_generator_llm()
        if llm and "model_group" in llm and endpoints.model_group(str(llm["model_group"])) is None:
            index = next(i for i, e in enumerate(pipeline.pipeline or [])
                         if str(e.get("name", "")).endswith("CommandGenerator"))
            self.issues.append(doc.issue(
                "config.model_group.unknown",
                f"model group {llm['model_group']!r} is not defined in endpoints.yml",
                ("pipeline", index, "llm", "model_group"),
                hint="add it under model_groups in endpoints.yml or fix the id"))
        return pipeline

    # ---------------------------------------------------------------- domain + flows
    def data_files(self) -> list[Path]:
        files: list[Path] = []
        for candidate in [self.root / "domain.yml", self.root / "domain.yaml"]:
            if candidate.is_file():
                files.append(candidate)
        for folder in [self.root / "domain", self.root / "data"]:
            if folder.is_dir():
                files += sorted(p for p in folder.rglob("*") if p.suffix in (".yml", ".yaml"))
        return files

    def load_data(self) -> tuple[Domain, dict[str, tuple[FlowModel, YamlDoc]]]:
        domain = Domain()
        flows: dict[str, tuple[FlowModel, YamlDoc]] = {}
        defaults = load_yaml(DEFAULT_PATTERNS, display="<default patterns>")
        default_domain = DomainFile.model_validate(defaults.data)
        domain.merge(Domain(slots=default_domain.slots, responses=default_domain.responses,
                            actions=default_domain.actions))
        for flow_id, model in _flow_models(defaults.data).items():
            flows[flow_id] = (model, defaults)
        own_flows: dict[str, YamlDoc] = {}
        for path in self.data_files():
            doc = self.read(path)
            if doc is None:
                continue
            keys = set(doc.data)
            if keys & DOMAIN_KEYS:
                self.load_domain_part(doc, domain)
            if "flows" in keys:
                self.load_flows_part(doc, flows, own_flows)
            unknown = keys - DOMAIN_KEYS - IGNORED_KEYS - {"flows"}
            for key in sorted(unknown):
                self.issues.append(doc.issue(
                    "data.unknown_key", f"unknown top-level key {key!r}", (key,),
                    hint="data files hold flows: or domain keys (slots, responses, actions)",
                    severity="warning"))
        return domain, flows

    def load_domain_part(self, doc: YamlDoc, domain: Domain) -> None:
        try:
            part = DomainFile.model_validate(doc.data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, lambda e: "domain.validation.structure")
            return
        domain.merge(Domain(slots=part.slots, responses=part.responses, actions=part.actions))

    def load_flows_part(self, doc: YamlDoc, flows: dict[str, tuple[FlowModel, YamlDoc]],
                        own: dict[str, YamlDoc]) -> None:
        raw = doc.data.get("flows") or {}
        if not isinstance(raw, dict):
            self.issues.append(doc.issue("flow.validation.structure",
                                         "'flows' must map flow ids to flows", ("flows",)))
            return
        for flow_id, body in raw.items():
            loc: Loc = ("flows", flow_id)
            try:
                model = FlowModel.model_validate(body)
            except ValidationError as exc:
                self.issues += pydantic_issues(doc, exc, lambda e: "flow.validation.structure",
                                               base=loc)
                continue
            if flow_id in own:
                self.issues.append(doc.issue(
                    "flow.duplicate_id", f"flow {flow_id!r} is also defined in "
                    f"{own[flow_id].display}", loc, hint="rename one of the flows"))
                continue
            own[flow_id] = doc
            flows[flow_id] = (model, doc)

    # ---------------------------------------------------------------- sub agents
    def load_agents(self, endpoints: EndpointsConfig, endpoints_doc: YamlDoc | None
                    ) -> dict[str, AgentSpec]:
        folder = self.root / "sub_agents"
        agents: dict[str, AgentSpec] = {}
        if not folder.is_dir():
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
                continue
            if spec.name in agents:
                self.issues.append(doc.issue(
                    "agent.duplicated_name", f"agent name {spec.name!r} is already used by "
                    f"{agents[spec.name].file}", ("agent", "name"),
                    hint="give every sub agent a unique agent.name"))
                continue
            agents[spec.name] = spec
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
        try:
            cfg = SubAgentConfig.model_validate(data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, _agent_code)
            return None
        self.check_agent(doc, cfg, endpoints, endpoints_doc)
        return AgentSpec(config=cfg, folder=folder, file=doc.display)

    def check_agent(self, doc: YamlDoc, cfg: SubAgentConfig, endpoints: EndpointsConfig,
                    endpoints_doc: YamlDoc | None) -> None:
        conf = cfg.configuration
        if conf.include_date_time and conf.timezone:
            try:
                ZoneInfo(conf.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                self.issues.append(doc.issue(
                    "datetime_utils.validate_datetime_configuration.invalid_timezone",
                    f"unknown timezone {conf.timezone!r}", ("configuration", "timezone"),
                    hint="use an IANA name such as Europe/Berlin or UTC"))
        if conf.pre_call_hook and cfg.agent.protocol.value == "RASA":
            self.issues.append(doc.issue(
                "agent.validation.pre_call_hook.a2a_only", "pre_call_hook is for A2A agents; "
                "for MCP agents put it on the mcp_servers entry in endpoints.yml",
                ("configuration", "pre_call_hook")))
        llm = conf.llm or {}
        if "model_group" in llm and endpoints.model_group(str(llm["model_group"])) is None:
            self.issues.append(doc.issue(
                "agent.validation.llm.unknown_model_group",
                f"model group {llm['model_group']!r} is not defined in endpoints.yml",
                ("configuration", "llm", "model_group"),
                hint="add it under model_groups in endpoints.yml or fix the id"))
        if conf.prompt_template:
            self.check_template(doc, conf.prompt_template)
        if conf.module:
            self.check_module(doc, conf.module)
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

    def check_template(self, doc: YamlDoc, template: str) -> None:
        from jinja2 import TemplateSyntaxError, meta
        from jinja2.sandbox import SandboxedEnvironment

        loc: Loc = ("configuration", "prompt_template")
        path = self.root / template
        if not path.is_file():
            self.issues.append(doc.issue(
                "agent.validation.optional.prompt_template_error",
                f"prompt template file {template!r} does not exist", loc,
                hint="paths are relative to the project folder"))
            return
        env = SandboxedEnvironment()
        try:
            ast = env.parse(path.read_text(encoding="utf-8"))
        except TemplateSyntaxError as exc:
            self.issues.append(ConfigIssue(
                "agent.validation.prompt_template_syntax_error",
                f"template syntax error: {exc.message}", file=self.rel(path), line=exc.lineno,
                key="configuration.prompt_template", hint="fix the Jinja2 syntax"))
            return
        unknown = sorted(meta.find_undeclared_variables(ast) - PROMPT_VARIABLES)
        if unknown:
            self.issues.append(ConfigIssue(
                "agent.validation.prompt_template_unknown_variable",
                f"template uses unknown variable(s) {', '.join(unknown)}", file=self.rel(path),
                line=_first_line_with(path, unknown[0]), key="configuration.prompt_template",
                hint="available: " + ", ".join(sorted(PROMPT_VARIABLES))))

    def check_module(self, doc: YamlDoc, module: str) -> None:
        loc: Loc = ("configuration", "module")
        mod_name, _, cls_name = module.rpartition(".")
        if not mod_name:
            self.issues.append(doc.issue("agent.validation.optional.module_not_found",
                                         f"{module!r} is not a dotted path pkg.mod.Class", loc))
            return
        try:
            mod = import_from_project(self.root, mod_name)
        except Exception as exc:  # noqa: BLE001 - any import failure is reported
            self.issues.append(doc.issue(
                "agent.validation.optional.module_not_found",
                f"cannot import {mod_name!r}: {exc}", loc,
                hint="module paths are relative to the project folder"))
            return
        if not hasattr(mod, cls_name):
            self.issues.append(doc.issue("agent.validation.optional.module_not_found",
                                         f"module {mod_name!r} has no class {cls_name!r}", loc))

    # ---------------------------------------------------------------- cross checks
    def build_flows(self, raw: dict[str, tuple[FlowModel, YamlDoc]], domain: Domain,
                    agents: dict[str, AgentSpec]) -> dict[str, Flow]:
        flows: dict[str, Flow] = {}
        for flow_id, (model, doc) in raw.items():
            flow, problems = flatten(flow_id, model, _parse, file=doc.display)
            for loc, message in problems:
                code = "flow.exit_if.invalid_condition" if "exit_if" in loc else \
                    "flow.condition.invalid"
                self.issues.append(doc.issue(code, message, loc,
                                             hint="see the conditions syntax in the docs"))
            flows[flow_id] = flow
        for flow_id, flow in flows.items():
            doc = raw[flow_id][1]
            self.check_flow(doc, flow, flows, domain, agents)
        for name, spec in agents.items():
            if name in flows:
                self.issues.append(ConfigIssue(
                    "agent.flow_name_conflict",
                    f"agent name {name!r} is also a flow id", file=spec.file, line=None,
                    key="agent.name", hint="rename the agent or the flow"))
        return flows

    def check_flow(self, doc: YamlDoc, flow: Flow, flows: dict[str, Flow], domain: Domain,
                   agents: dict[str, AgentSpec]) -> None:
        ids: set[str] = set()
        for step in flow.steps:
            if step.id in ids:
                self.issues.append(doc.issue("flow.duplicate_step_id",
                                             f"step id {step.id!r} is used twice", step.loc))
            ids.add(step.id)
        for step in flow.steps:
            for cond, target in step.next:
                if target != END and flow.step(target) is None:
                    self.issues.append(doc.issue(
                        "flow.next.unknown_step", f"next step {target!r} does not exist in "
                        f"flow {flow.id!r}", (*step.loc, "next"), hint="use a step id or END"))
                if cond is not None:
                    self.check_slots_exist(doc, cond.slot_names, domain, (*step.loc, "next"),
                                           "flow.condition.unknown_slot")
            self.check_step(doc, step, flows, domain, agents)

    def check_step(self, doc: YamlDoc, step: Step, flows: dict[str, Flow], domain: Domain,
                   agents: dict[str, AgentSpec]) -> None:
        m = step.model
        if step.kind == "collect" and m.collect not in domain.slots:
            self.issues.append(doc.issue(
                "flow.collect.unknown_slot", f"slot {m.collect!r} is not in the domain",
                (*step.loc, "collect"), hint="add it under slots: in the domain"))
        elif step.kind == "set_slots":
            for item in m.set_slots or []:
                for slot in item:
                    if slot not in domain.slots and slot not in BUILTIN_SLOTS:
                        self.issues.append(doc.issue(
                            "flow.set_slots.unknown_slot",
                            f"slot {slot!r} is not in the domain", (*step.loc, "set_slots")))
        elif step.kind == "action":
            name = str(m.action)
            if name not in domain.responses and name not in domain.actions and \
                    name not in BUILTIN_ACTIONS:
                self.issues.append(doc.issue(
                    "flow.action.unknown", f"action {name!r} is neither a response nor a "
                    "custom action in the domain", (*step.loc, "action"),
                    hint="add it under responses: or actions: in the domain"))
        elif step.kind == "link" and m.link not in flows:
            self.issues.append(doc.issue("flow.link.unknown_flow",
                                         f"linked flow {m.link!r} does not exist",
                                         (*step.loc, "link")))
        elif step.kind == "call":
            self.check_call(doc, step, flows, domain, agents)

    def check_call(self, doc: YamlDoc, step: Any, flows: dict[str, Flow], domain: Domain,
                   agents: dict[str, AgentSpec]) -> None:
        target = step.model.call
        loc = (*step.loc, "call")
        if step.model.mcp_server:
            return
        if target not in flows and target not in agents:
            self.issues.append(doc.issue(
                "flow.call.unknown_target", f"call target {target!r} is neither a flow nor a "
                "sub agent", loc, hint="define the flow, or add sub_agents/<dir>/config.yml"))
            return
        if step.model.exit_if is None:
            return
        if target not in agents:
            self.issues.append(doc.issue("flow.exit_if.target_not_agent",
                                         f"exit_if needs a sub agent, but {target!r} is a flow",
                                         (*step.loc, "exit_if")))
            return
        for index, cond in enumerate(step.exit_if):
            c_loc = (*step.loc, "exit_if", index)
            if not cond.slot_names:
                self.issues.append(doc.issue(
                    "flow.exit_if.no_slot_reference",
                    f"exit condition {cond.text!r} references no slot", c_loc,
                    hint="write conditions over slots, e.g. slots.city is not null"))
            self.check_slots_exist(doc, cond.slot_names, domain, c_loc, "flow.exit_if.unknown_slot")

    def check_slots_exist(self, doc: YamlDoc, names: list[str], domain: Domain, loc: Loc,
                          code: str) -> None:
        for name in names:
            if name not in domain.slots and name not in BUILTIN_SLOTS:
                self.issues.append(doc.issue(code, f"slot {name!r} is not in the domain", loc,
                                             hint="add it under slots: in the domain"))


def _parse(text: str) -> Any:
    try:
        return parse_condition(text)
    except ConditionSyntaxError as exc:
        raise ValueError(str(exc)) from exc


def _flow_models(data: dict[str, Any]) -> dict[str, FlowModel]:
    return {k: FlowModel.model_validate(v) for k, v in (data.get("flows") or {}).items()}


def _first_line_with(path: Path, needle: str) -> int | None:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return number
    return None


def _agent_code(err: dict[str, Any]) -> str:
    loc = err["loc"]
    if err["type"] == "extra_forbidden":
        section = loc[0] if len(loc) > 1 else "top_level"
        return f"agent.validation.structure.additional_{section}_keys"
    if loc and loc[-1] == "protocol":
        return "agent.validation.pydantic.invalid_protocol"
    if "include_exclude_conflict" in str(err["msg"]):
        return "agent.validation.mcp.include_exclude_conflict"
    if err["type"].endswith("_type") or err["type"].endswith("_parsing"):
        return "agent.validation.pydantic.type_error"
    return "agent.validation.pydantic.failed"


def _endpoint_code(err: dict[str, Any]) -> str:
    loc = err["loc"]
    if loc and loc[0] == "mcp_servers":
        return "endpoints.mcp_server.invalid"
    if loc and loc[0] == "model_groups":
        return "endpoints.model_group.invalid"
    return "endpoints.validation.structure"


class project_on_path:  # noqa: N801 - used as a context manager
    """Put the project folder first on ``sys.path`` (custom modules resolve as in Rasa)."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve())

    def __enter__(self) -> None:
        if self.root in sys.path:
            sys.path.remove(self.root)
        sys.path.insert(0, self.root)

    def __exit__(self, *exc: object) -> None:
        return None


def _inside(module: Any, root: str) -> bool:
    paths = [getattr(module, "__file__", None), *list(getattr(module, "__path__", []) or [])]
    return any(p and str(Path(p).resolve()).startswith(root) for p in paths)


def import_from_project(root: Path, dotted: str) -> Any:
    """Import ``dotted`` (a module) from the project folder ``root``.

    A package of the same top-level name cached from another project folder (several projects
    loaded in one process) is dropped first, so the module always comes from ``root``.
    """
    resolved = str(root.resolve())
    top = dotted.split(".")[0]
    cached = sys.modules.get(top)
    if cached is not None and not _inside(cached, resolved) and \
            (Path(resolved) / top).exists():
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()
    rasa_compat.activate()  # Rasa's import paths resolve to ours unless Rasa is installed
    with project_on_path(root):
        return importlib.import_module(dotted)


def collect_issues(root: Path) -> tuple[Project | None, list[ConfigIssue]]:
    """Load ``root`` and return the project (None if it has errors) and every issue found."""
    root = Path(root)
    loader = _Loader(root)
    if not root.is_dir():
        return None, [ConfigIssue("project.not_found", f"project folder {root} does not exist",
                                  file=str(root), hint="pass --project DIR")]
    endpoints, endpoints_doc = loader.load_endpoints()
    pipeline = loader.load_pipeline(endpoints)
    domain, raw_flows = loader.load_data()
    agents = loader.load_agents(endpoints, endpoints_doc)
    flows = loader.build_flows(raw_flows, domain, agents)
    issues = loader.issues + check_credentials(root)[1]
    if any(i.severity == "error" for i in issues):
        return None, issues
    project = Project(root=root, endpoints=endpoints, domain=domain, flows=flows, agents=agents,
                      pipeline=pipeline, warnings=[i for i in issues if i.severity != "error"])
    return project, issues


def load_project(root: Path | str) -> Project:
    """Load a project; raise :class:`ProjectInvalidError` listing every error if there is any."""
    project, issues = collect_issues(Path(root))
    if project is None:
        raise ProjectInvalidError(issues, Path(root))
    return project
