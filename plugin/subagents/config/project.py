"""Load a whole assistant project folder; report every problem at once (file, line, key, code).

Files are found where Rasa looks for them (each can be given explicitly, see
:class:`ProjectPaths`): ``config.yml``, ``domain.yml`` or else the ``domain/`` folder, ``data/``
(any YAML file with a top-level ``flows`` key holds flows; domain keys are accepted there too),
``endpoints.yml`` and ``sub_agents/<dir>/config.yml``. The shipped default domain and patterns
(``default_patterns.yml``) lie underneath: a project flow with a pattern's id replaces that
pattern, and a project response or slot replaces the default of the same name.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, ValidationError

from .._yaml import Loc, YamlDoc, YamlSyntaxError, load_yaml
from ..conditions import ConditionSyntaxError, parse_condition
from ..exceptions import ConfigIssue, ProjectInvalidError
from ._base import pydantic_issues
from .domain import Domain, DomainFile
from .endpoints import (
    EndpointsConfig,
    McpServerConfig,
    ModelGroup,
    model_key_problems,
    normalize_model_keys,
)
from .flows import Flow, FlowModel, flatten, step_key_problems
from .sub_agent import SubAgentConfig
from .validation import (
    AGENT_PROMPT_VARIABLES,
    BUILTIN_ACTIONS,
    BUILTIN_SLOTS,
    COMMAND_GENERATOR_VARIABLES,
    REPHRASER_VARIABLES,
    Broken,
    FlowChecker,
    ResponseChecker,
    TemplateChecker,
    rasa_imports,
)

__all__ = ["BUILTIN_ACTIONS", "BUILTIN_SLOTS", "AgentSpec", "PipelineConfig", "Project",
           "ProjectPaths", "collect_issues", "import_from_project", "load_project"]

DEFAULT_PATTERNS = Path(__file__).with_name("default_patterns.yml")
DOMAIN_KEYS = {"slots", "responses", "actions", "intents", "entities", "forms", "session_config"}
IGNORED_KEYS = {"version", "nlu", "stories", "rules", "test_cases", "fixtures", "metadata",
                "stub_custom_actions", "retrieval_intents", "e2e_actions", "synonyms", "lookup",
                "regex", "conversation_starters"}
RASA_ENDPOINT_KEYS = {
    "version", "models", "action_endpoint", "tracker_store", "lock_store", "event_broker", "nlg",
    "nlu", "vector_store", "timer_store", "model_groups", "mcp_servers", "privacy",
    "recordings", "interaction_handling", "a2a_server", "metrics", "tracing", "secrets_manager"}
"""Top-level keys Rasa reads from endpoints.yml."""
UNSUPPORTED_POLICIES = {
    "EnterpriseSearchPolicy": ("config.enterprise_search.unsupported",
                               "enterprise search is not supported: knowledge questions get "
                               "pattern_search's reply",
                               "give a sub agent an MCP search tool and call it from a flow"),
    "IntentlessPolicy": ("config.intentless_policy.unsupported",
                         "the intentless policy is not supported: chitchat gets "
                         "pattern_chitchat's reply", "override pattern_chitchat"),
    **{name: ("config.nlu_policy.unsupported", f"{name} is not supported: stories and rules "
              "are not used; flows handle every message", "write the behaviour as flows")
       for name in ("RulePolicy", "TEDPolicy", "MemoizationPolicy", "AugmentedMemoizationPolicy",
                    "UnexpecTEDIntentPolicy")},
}
UNSUPPORTED_COMPONENTS = {
    name: ("config.coexistence.unsupported", f"{name} is not supported: every message goes to "
           "the flows (CALM); the NLU-based part of the assistant is not used",
           "write the NLU-based behaviour as flows")
    for name in ("LLMBasedRouter", "IntentBasedRouter")}


class PipelineConfig(BaseModel):
    """Root ``config.yml`` (Rasa format); only the command generator's settings are read."""

    model_config = ConfigDict(extra="allow")
    recipe: str | None = None
    language: str | None = None
    assistant_id: str | None = None
    pipeline: list[dict[str, Any]] | None = None
    policies: list[dict[str, Any]] | None = None

    def command_generator(self) -> tuple[int, dict[str, Any]] | None:
        """Index and settings of the first ``*CommandGenerator`` entry of the pipeline."""
        for index, entry in enumerate(self.pipeline or []):
            if str(entry.get("name", "")).endswith("CommandGenerator"):
                return index, entry
        return None

    def command_generator_llm(self) -> dict[str, Any] | None:
        """The command generator's ``llm`` settings, if any (older key spellings mapped)."""
        found = self.command_generator()
        llm = found[1].get("llm") if found else None
        if not isinstance(llm, dict):
            return None
        return llm if "model_group" in llm else normalize_model_keys(llm)


@dataclass
class AgentSpec:
    """A loaded sub agent: its config and where it came from."""

    config: SubAgentConfig
    folder: Path
    file: str

    @property
    def name(self) -> str:
        return self.config.agent.name


@dataclass(frozen=True)
class ProjectPaths:
    """Where a project's files are; the defaults are Rasa's, relative to the project folder."""

    root: Path
    config: Path
    domain: tuple[Path, ...]
    data: tuple[Path, ...]
    endpoints: Path
    sub_agents: Path
    explicit: frozenset[str] = frozenset()
    """The options given explicitly (a missing explicit path is an error)."""

    @classmethod
    def resolve(cls, root: Path | str, *, config: Path | str | None = None,
                domain: Path | str | None = None,
                data: Path | str | list[Path | str] | tuple[Path | str, ...] | None = None,
                endpoints: Path | str | None = None,
                sub_agents: Path | str | None = None) -> ProjectPaths:
        """Paths for ``root``; relative paths given here are relative to ``root``.

        Defaults: ``config.yml``; ``domain.yml`` (or ``domain.yaml``) if present, else the
        ``domain`` folder; ``data``; ``endpoints.yml``; ``sub_agents``.
        """
        base = Path(root)

        def at(value: Path | str) -> Path:
            path = Path(value)
            return path if path.is_absolute() else base / path

        explicit = {name for name, value in (("config", config), ("domain", domain),
                                             ("data", data), ("endpoints", endpoints),
                                             ("sub_agents", sub_agents)) if value is not None}
        if domain is None:
            found = [p for p in (base / "domain.yml", base / "domain.yaml") if p.is_file()]
            domains: tuple[Path, ...] = (found[0],) if found else (base / "domain",)
        else:
            domains = (at(domain),)
        if data is None:
            datas: tuple[Path, ...] = (base / "data",)
        elif isinstance(data, (list, tuple)):
            datas = tuple(at(d) for d in data)
        else:
            datas = (at(data),)
        return cls(root=base, config=at(config or "config.yml"), domain=domains, data=datas,
                   endpoints=at(endpoints or "endpoints.yml"),
                   sub_agents=at(sub_agents or "sub_agents"), explicit=frozenset(explicit))


@dataclass
class Project:
    """A loaded, valid project: everything the runtime needs, already parsed and checked."""

    root: Path
    endpoints: EndpointsConfig
    domain: Domain
    flows: dict[str, Flow]
    agents: dict[str, AgentSpec]
    pipeline: PipelineConfig
    warnings: list[ConfigIssue] = field(default_factory=list)
    paths: ProjectPaths | None = None

    @property
    def assistant_id(self) -> str:
        assistant = self.pipeline.assistant_id
        if assistant and assistant != "placeholder_default":
            return assistant
        return self.root.resolve().name

    def agent_call_steps(self) -> list[tuple[Flow, Any]]:
        return [(flow, step) for flow in self.flows.values() for step in flow.steps
                if step.kind == "call" and step.model.call in self.agents]


class _Loader:
    def __init__(self, paths: ProjectPaths) -> None:
        self.paths = paths
        self.root = paths.root
        self.issues: list[ConfigIssue] = []
        self.broken = Broken()
        self.templates = TemplateChecker(self.root, self.issues)
        self.response_docs: dict[str, YamlDoc] = {}
        self.agent_docs: dict[str, YamlDoc] = {}

    def rel(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
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

    def missing_explicit(self, option: str, path: Path) -> None:
        self.issues.append(ConfigIssue(
            "project.path_not_found", f"{path} does not exist", file=str(path),
            key=f"--{option.replace('_', '-')}", hint=f"fix the --{option} path"))

    # ---------------------------------------------------------------- endpoints + pipeline
    def load_endpoints(self) -> tuple[EndpointsConfig, YamlDoc | None]:
        path = self.paths.endpoints
        if not path.is_file():
            if "endpoints" in self.paths.explicit:
                self.missing_explicit("endpoints", path)
            return EndpointsConfig(), None
        doc = self.read(path)
        if doc is None:
            return EndpointsConfig(), None
        data = self.endpoint_keys(doc)
        for section, model, id_key, code in (
                ("model_groups", ModelGroup, "id", "endpoints.model_group.invalid"),
                ("mcp_servers", McpServerConfig, "name", "endpoints.mcp_server.invalid")):
            items = data.get(section)
            if isinstance(items, list):
                data[section] = self.valid_items(doc, section, items, model, id_key, code)
        try:
            cfg = EndpointsConfig.model_validate(data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, lambda e: "endpoints.validation.structure")
            bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
            try:
                cfg = EndpointsConfig.model_validate({k: v for k, v in data.items()
                                                      if k not in bad})
            except ValidationError:
                cfg = EndpointsConfig()
        self.check_endpoints(doc, cfg)
        return cfg, doc

    def endpoint_keys(self, doc: YamlDoc) -> dict[str, Any]:
        """The known top-level keys; an unknown key is reported (misspelled: with a suggestion)."""
        known = RASA_ENDPOINT_KEYS | set(EndpointsConfig.model_fields)
        data = {}
        for key, value in doc.data.items():
            if key in known:
                data[key] = value
                continue
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.7)
            if close:
                self.issues.append(doc.issue(
                    "endpoints.unknown_key", f"unknown top-level key {key!r}", (key,),
                    hint=f"did you mean {close[0]!r}?"))
            else:
                self.issues.append(doc.issue(
                    "endpoints.unknown_key", f"unknown top-level key {key!r} is ignored", (key,),
                    hint="remove it or check its spelling", severity="warning"))
        return data

    def valid_items(self, doc: YamlDoc, section: str, items: list[Any], model: type[BaseModel],
                    id_key: str, code: str) -> list[Any]:
        """The entries of ``section`` that validate; the others are reported and remembered."""
        kept = []
        for index, item in enumerate(items):
            try:
                model.model_validate(item)
            except ValidationError as exc:
                self.issues += pydantic_issues(doc, exc, _constant_code(code),
                                               base=(section, index))
                if isinstance(item, dict) and item.get(id_key):
                    target = self.broken.model_groups if section == "model_groups" \
                        else self.broken.mcp_servers
                    target.add(str(item[id_key]))
                continue
            kept.append(item)
        return kept

    def check_endpoints(self, doc: YamlDoc, cfg: EndpointsConfig) -> None:
        seen: set[str] = set()
        for index, group in enumerate(cfg.model_groups):
            if group.id in seen:
                self.issues.append(doc.issue("endpoints.model_group.duplicate_id",
                                             f"model group {group.id!r} is defined twice",
                                             ("model_groups", index, "id")))
            seen.add(group.id)
            raw_models = doc.data["model_groups"][index].get("models") or []
            for m_index, raw in enumerate(raw_models):
                self.check_llm(doc, raw, ("model_groups", index, "models", m_index))
        seen = set()
        for index, server in enumerate(cfg.mcp_servers or []):
            if server.name in seen:
                self.issues.append(doc.issue("endpoints.mcp_server.duplicate_name",
                                             f"MCP server {server.name!r} is defined twice",
                                             ("mcp_servers", index, "name")))
            seen.add(server.name)
        nlg = doc.data.get("nlg")
        if isinstance(nlg, dict):
            self.check_nlg(doc, nlg, cfg)

    def check_llm(self, doc: YamlDoc, raw: Any, loc: Loc) -> None:
        """Provider and option checks of one model's settings (a group member or inline)."""
        if not isinstance(raw, dict) or "model_group" in raw:
            return
        for key, code, message, hint in model_key_problems(raw):
            self.issues.append(doc.issue(code, message, (*loc, key), hint=hint))

    def check_model_group_ref(self, doc: YamlDoc, endpoints: EndpointsConfig, group: Any,
                              loc: Loc, code: str) -> None:
        name = str(group)
        if endpoints.model_group(name) is None and name not in self.broken.model_groups:
            self.issues.append(doc.issue(
                code, f"model group {name!r} is not defined in endpoints.yml", loc,
                hint="add it under model_groups in endpoints.yml or fix the id"))

    def check_nlg(self, doc: YamlDoc, nlg: dict[str, Any], cfg: EndpointsConfig) -> None:
        kind = str(nlg.get("type") or "response")
        if kind in ("response", "template", "templates"):
            return
        if kind == "rephrase":
            llm = nlg.get("llm")
            if isinstance(llm, dict) and "model_group" in llm:
                self.check_model_group_ref(doc, cfg, llm["model_group"],
                                           ("nlg", "llm", "model_group"),
                                           "endpoints.model_group.unknown")
            elif isinstance(llm, dict):
                self.check_llm(doc, llm, ("nlg", "llm"))
            template = nlg.get("prompt_template") or nlg.get("prompt")
            if isinstance(template, str):
                key = "prompt_template" if "prompt_template" in nlg else "prompt"
                # Rasa renders unknown names as empty, so they are reported as warnings
                self.templates.check(doc, ("nlg", key), template, REPHRASER_VARIABLES,
                                     code_prefix="endpoints.nlg", unknown_severity="warning")
            return
        if kind == "callback" or "://" in kind or nlg.get("url"):
            self.issues.append(doc.issue(
                "endpoints.nlg.callback_unsupported", "an external NLG server is not "
                "supported; responses come from the domain", ("nlg",),
                hint="use the domain's responses, optionally with nlg: {type: rephrase}",
                severity="warning"))
            return
        self.issues.append(doc.issue(
            "endpoints.nlg.custom_class_unsupported", f"custom NLG class {kind!r} is not "
            "supported; responses come from the domain", ("nlg", "type"),
            hint="use nlg: {type: rephrase} with a prompt_template to shape the wording",
            severity="warning"))

    def load_pipeline(self, endpoints: EndpointsConfig) -> PipelineConfig:
        path = self.paths.config
        if not path.is_file():
            if "config" in self.paths.explicit:
                self.missing_explicit("config", path)
            return PipelineConfig()
        doc = self.read(path)
        if doc is None:
            return PipelineConfig()
        try:
            pipeline = PipelineConfig.model_validate(doc.data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, lambda e: "config.validation.structure")
            return PipelineConfig()
        found = pipeline.command_generator()
        if found is not None:
            self.check_command_generator(doc, endpoints, found[0], found[1])
        for section, known in (("pipeline", UNSUPPORTED_COMPONENTS),
                               ("policies", UNSUPPORTED_POLICIES)):
            for index, entry in enumerate(getattr(pipeline, section) or []):
                name = str(entry.get("name", "")).rsplit(".", 1)[-1]
                if name in known:
                    code, message, hint = known[name]
                    self.issues.append(doc.issue(code, message, (section, index, "name"),
                                                 hint=hint, severity="warning"))
        return pipeline

    def check_command_generator(self, doc: YamlDoc, endpoints: EndpointsConfig, index: int,
                                entry: dict[str, Any]) -> None:
        loc: Loc = ("pipeline", index)
        llm = entry.get("llm")
        if isinstance(llm, dict) and "model_group" in llm:
            self.check_model_group_ref(doc, endpoints, llm["model_group"],
                                       (*loc, "llm", "model_group"), "config.model_group.unknown")
        elif isinstance(llm, dict):
            self.check_llm(doc, llm, (*loc, "llm"))
        template = entry.get("prompt_template") or entry.get("prompt")
        if isinstance(template, str):
            key = "prompt_template" if "prompt_template" in entry else "prompt"
            # Rasa renders unknown names as empty, so they are reported as warnings
            self.templates.check(doc, (*loc, key), template, COMMAND_GENERATOR_VARIABLES,
                                 code_prefix="config.command_generator",
                                 unknown_severity="warning")
        user_input = entry.get("user_input")
        if user_input is not None and not (
                isinstance(user_input, dict) and isinstance(
                    user_input.get("max_characters", 420), int)):
            self.issues.append(doc.issue(
                "config.command_generator.user_input_invalid",
                "user_input must be a mapping with an integer max_characters", (*loc,
                                                                                  "user_input")))

    # ---------------------------------------------------------------- domain + flows
    def data_files(self) -> tuple[list[Path], list[Path]]:
        """(domain files, data files), each sorted; a folder contributes every YAML file in it."""

        def expand(paths: tuple[Path, ...], option: str) -> list[Path]:
            found: list[Path] = []
            for path in paths:
                if path.is_file():
                    found.append(path)
                elif path.is_dir():
                    found += sorted(p for p in path.rglob("*") if p.suffix in (".yml", ".yaml")
                                    and p.is_file())
                elif option in self.paths.explicit:
                    self.missing_explicit(option, path)
            return found

        return expand(self.paths.domain, "domain"), expand(self.paths.data, "data")

    def load_data(self) -> tuple[Domain, dict[str, tuple[FlowModel, YamlDoc]], bool]:
        """The merged domain, every flow (defaults included) and whether any file was found."""
        domain = Domain()
        flows: dict[str, tuple[FlowModel, YamlDoc]] = {}
        defaults = load_yaml(DEFAULT_PATTERNS, display="<default patterns>")
        default_domain = DomainFile.model_validate(defaults.data)
        domain.merge(Domain(slots=default_domain.slots, responses=default_domain.responses,
                            actions=default_domain.actions))
        domain.default_slots = set(default_domain.slots)
        domain.default_responses = set(default_domain.responses)
        for flow_id, model in _flow_models(defaults.data).items():
            flows[flow_id] = (model, defaults)
        own_flows: dict[str, YamlDoc] = {}
        domain_files, data_files = self.data_files()
        for path in domain_files + [p for p in data_files if p not in domain_files]:
            doc = self.read(path)
            if doc is None:
                self.broken.unreadable_data = True
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
        return domain, flows, bool(domain_files or data_files)

    def load_domain_part(self, doc: YamlDoc, domain: Domain) -> None:
        data = dict(doc.data)
        try:
            part = DomainFile.model_validate(data)
        except ValidationError as exc:
            self.issues += pydantic_issues(doc, exc, lambda e: "domain.validation.structure")
            # drop only the slots and responses that failed, and remember their names
            for err in exc.errors():
                loc = err["loc"]
                if len(loc) >= 2 and loc[0] in ("slots", "responses") and \
                        isinstance(data.get(loc[0]), dict):
                    getattr(self.broken, str(loc[0])).add(str(loc[1]))
                    data[str(loc[0])] = {k: v for k, v in data[str(loc[0])].items()
                                         if k != loc[1]}
                elif loc:
                    data.pop(str(loc[0]), None)
            try:
                part = DomainFile.model_validate(data)
            except ValidationError:
                self.broken.unreadable_data = True
                return
        for name in part.responses:
            self.response_docs[name] = doc
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
            if flow_id in own:
                self.issues.append(doc.issue(
                    "flow.duplicate_id", f"flow {flow_id!r} is also defined in "
                    f"{own[flow_id].display}", loc, hint="rename one of the flows"))
                continue
            own[flow_id] = doc
            problems = list(step_key_problems(body.get("steps") if isinstance(body, dict)
                                              else None, (*loc, "steps")))
            for p_loc, message, hint in problems:
                self.issues.append(doc.issue("flow.validation.structure", message, p_loc,
                                             hint=hint))
            try:
                model = FlowModel.model_validate(body)
            except ValidationError as exc:
                self.issues += pydantic_issues(doc, exc, lambda e: "flow.validation.structure",
                                               base=loc)
                self.broken.flows.add(flow_id)
                flows.pop(flow_id, None)
                continue
            if problems:
                self.broken.flows.add(flow_id)
                flows.pop(flow_id, None)
                continue
            flows[flow_id] = (model, doc)

    # ---------------------------------------------------------------- sub agents
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
                    agents: dict[str, AgentSpec], endpoints: EndpointsConfig) -> dict[str, Flow]:
        flows: dict[str, Flow] = {}
        docs: dict[str, YamlDoc] = {}
        for flow_id, (model, doc) in raw.items():
            flow, problems = flatten(flow_id, model, _parse, file=doc.display)
            for loc, message in problems:
                code = "flow.exit_if.invalid_condition" if "exit_if" in loc else \
                    "flow.condition.invalid"
                self.issues.append(doc.issue(code, message, loc,
                                             hint="see the conditions syntax in the docs"))
            flows[flow_id] = flow
            docs[flow_id] = doc
        checker = FlowChecker(self.issues, domain, flows, docs, agents,
                              [s.name for s in endpoints.mcp_servers or []], self.broken)
        checker.check_all()
        ResponseChecker(self.issues, domain, self.response_docs, self.broken).check_all(
            checker.uttered)
        for name, spec in agents.items():
            checker.check_tool_mappings(self.agent_docs[name], spec.config)
            if name in flows:
                self.issues.append(ConfigIssue(
                    "agent.flow_name_conflict",
                    f"agent name {name!r} is also a flow id", file=spec.file, line=None,
                    key="agent.name", hint="rename the agent or the flow"))
        return flows


def _parse(text: str) -> Any:
    try:
        return parse_condition(text)
    except ConditionSyntaxError as exc:
        raise ValueError(str(exc)) from exc


def _flow_models(data: dict[str, Any]) -> dict[str, FlowModel]:
    return {k: FlowModel.model_validate(v) for k, v in (data.get("flows") or {}).items()}


def _constant_code(code: str) -> Any:
    return lambda err: code


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
    with project_on_path(root):
        return importlib.import_module(dotted)


def collect_issues(root: Path | str | ProjectPaths, **locations: Any
                   ) -> tuple[Project | None, list[ConfigIssue]]:
    """Load ``root`` and return the project (None if it has errors) and every issue found.

    ``root`` is the project folder, or a :class:`ProjectPaths` naming every location;
    ``locations`` (``config``, ``domain``, ``data``, ``endpoints``, ``sub_agents``) override
    where the files are, as :meth:`ProjectPaths.resolve` describes.
    """
    paths = root if isinstance(root, ProjectPaths) else ProjectPaths.resolve(root, **locations)
    root = paths.root
    if not root.is_dir():
        return None, [ConfigIssue("project.not_found", f"project folder {root} does not exist",
                                  file=str(root), hint="pass --project DIR")]
    loader = _Loader(paths)
    endpoints, endpoints_doc = loader.load_endpoints()
    pipeline = loader.load_pipeline(endpoints)
    domain, raw_flows, found_data = loader.load_data()
    agents = loader.load_agents(endpoints, endpoints_doc)
    if not (found_data or endpoints_doc or paths.config.is_file() or agents
            or paths.sub_agents.is_dir()):
        loader.issues.append(ConfigIssue(
            "project.empty", f"no assistant project in {root}: no config.yml, endpoints.yml, "
            "domain or data files", file=str(root),
            hint="run it in a project folder or pass --project DIR"))
    flows = loader.build_flows(raw_flows, domain, agents, endpoints)
    action = endpoints.action_endpoint
    if action is None or action.actions_module or not action.url:
        loader.issues += rasa_imports(root, (action.actions_module if action else None)
                                      or "actions")
    issues = loader.issues
    if any(i.severity == "error" for i in issues):
        return None, issues
    project = Project(root=root, endpoints=endpoints, domain=domain, flows=flows, agents=agents,
                      pipeline=pipeline, warnings=[i for i in issues if i.severity != "error"],
                      paths=paths)
    return project, issues


def load_project(root: Path | str | ProjectPaths, **locations: Any) -> Project:
    """Load a project; raise :class:`ProjectInvalidError` listing every error if there is any.

    ``root`` and ``locations`` are what :func:`collect_issues` accepts.
    """
    project, issues = collect_issues(root, **locations)
    if project is None:
        folder = root.root if isinstance(root, ProjectPaths) else Path(root)
        raise ProjectInvalidError(issues, folder)
    return project
