"""Load a whole assistant project folder; report every problem at once (file, line, key, code).

Files are found where Rasa looks for them (each can be given explicitly, see
:class:`ProjectPaths`): ``config.yml``, ``domain.yml`` or else the ``domain/`` folder, ``data/``
(any YAML file with a top-level ``flows`` key holds flows; domain keys are accepted there too),
``endpoints.yml`` and ``sub_agents/<dir>/config.yml``. The shipped default domain and patterns
(``default_patterns.yml``) lie underneath: a project flow with a pattern's id replaces that
pattern, and a project response or slot replaces the default of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from subagents._yaml import Loc, YamlDoc, load_yaml
from subagents.conditions import ConditionSyntaxError, parse_condition
from subagents.config import runtime_checks
from subagents.config._base import pydantic_issues
from subagents.config._imports import import_from_project, project_on_path
from subagents.config._load_agents import AgentSpec, _AgentsLoader
from subagents.config._load_settings import _SettingsLoader
from subagents.config._tool_step_check import ToolStepRef, tool_step_refs, unknown_tool_issues
from subagents.config.credentials import check_credentials
from subagents.config.domain import Domain, DomainFile
from subagents.config.endpoints import EndpointsConfig, check_stdio_folders
from subagents.config.flows import Flow, FlowModel, flatten, step_key_problems
from subagents.config.mcp_oauth import check_per_user_oauth
from subagents.config.mcp_sessions import check_template_slots
from subagents.config.paths import ProjectPaths
from subagents.config.pipeline import PipelineConfig
from subagents.config.search_policy import is_search_policy
from subagents.config.validation import (
    BUILTIN_ACTIONS,
    BUILTIN_SLOTS,
    SEARCH_STEP_WITHOUT_POLICY,
    FlowChecker,
    ResponseChecker,
    rasa_imports,
    slot_problems,
)
from subagents.exceptions import ConfigIssue, ProjectInvalidError

__all__ = ["BUILTIN_ACTIONS", "BUILTIN_SLOTS", "AgentSpec", "PipelineConfig", "Project",
           "ProjectPaths", "collect_issues", "import_from_project", "load_project",
           "project_on_path"]

DEFAULT_PATTERNS = Path(__file__).with_name("default_patterns.yml")
NATIVE_PATTERNS = frozenset({"pattern_collect_information", "pattern_validate_slot"})
"""Rasa patterns whose work the runtime does itself; a project may not override them."""
DOMAIN_KEYS = {"slots", "responses", "actions", "intents", "entities", "forms", "session_config"}
IGNORED_KEYS = {"version", "nlu", "stories", "rules", "test_cases", "fixtures", "metadata",
                "stub_custom_actions", "retrieval_intents", "e2e_actions", "synonyms", "lookup",
                "regex", "conversation_starters"}


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
    tool_steps: list[ToolStepRef] = field(default_factory=list)
    """The flows' MCP tool steps with their file and line (``validate --connect`` checks them
    against each server's tool list)."""
    command_generator_class: type | None = None
    """The project's own command generator class (a subclass of the built-in one), if
    ``config.yml`` names one by its module path."""

    @property
    def assistant_id(self) -> str:
        """The pipeline's ``assistant_id``, or the project folder's name when it is unset."""
        assistant = self.pipeline.assistant_id
        if assistant and assistant != "placeholder_default":
            return assistant
        return self.root.resolve().name

    def flow_for_intent(self, intent: str, confidence: float = 1.0) -> str | None:
        """The flow whose ``nlu_trigger`` names ``intent`` with a threshold ``confidence``
        reaches (``/intent`` payloads have confidence 1.0); the first such flow wins."""
        for flow in self.flows.values():
            for trigger in flow.model.nlu_trigger or []:
                if trigger.name == intent and confidence >= trigger.threshold:
                    return flow.id
        return None

    def agent_call_steps(self) -> list[tuple[Flow, Any]]:
        """Every ``call`` step (with its flow) that calls a sub agent."""
        return [(flow, step) for flow in self.flows.values() for step in flow.steps
                if step.kind == "call" and step.model.call in self.agents]


class _Loader(_SettingsLoader, _AgentsLoader):
    """Loads every part of a project, collecting issues instead of stopping at the first."""

    tool_steps: list[ToolStepRef]
    """The MCP tool steps of the flows (set by :meth:`build_flows`)."""

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
        for loc, code, message, hint, severity in slot_problems(data.get("slots")):
            self.issues.append(doc.issue(code, message, loc, hint=hint, severity=severity))
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
        self.check_builtin_overrides(doc)
        self.check_session_config(doc)
        domain.merge(Domain(slots=part.slots, responses=part.responses, actions=part.actions))

    def check_builtin_overrides(self, doc: YamlDoc) -> None:
        """A built-in action listed under ``actions`` is replaced by the project's action of
        that name, as in Rasa; ``action_listen`` only marks where the assistant waits, so the
        built-in always runs: say so."""
        listed = doc.data.get("actions")
        for index, item in enumerate(listed if isinstance(listed, list) else []):
            name = next(iter(item), None) if isinstance(item, dict) else item
            if name == "action_listen":
                self.issues.append(doc.issue(
                    "domain.action.builtin_override", "'action_listen' cannot be replaced: "
                    "the assistant waits for the user there, and the built-in always runs",
                    ("actions", index),
                    hint="remove it from actions, or give your action its own name and run it "
                    "from a flow step", severity="warning"))

    def check_session_config(self, doc: YamlDoc) -> None:
        """Sessions here never expire and always keep their slots: say so for a
        ``session_config`` that asks for anything else."""
        config = doc.data.get("session_config")
        if not isinstance(config, dict):
            return
        expiry = config.get("session_expiration_time")
        if isinstance(expiry, int | float) and not isinstance(expiry, bool) and expiry > 0:
            self.issues.append(doc.issue(
                "domain.session_config.unsupported", "session_expiration_time is not supported: "
                "a conversation here stays in one session however long the user is away",
                ("session_config", "session_expiration_time"),
                hint="set it to 0 (sessions never expire), or start a new session from the "
                "client with the message /session_start", severity="warning"))
        if config.get("carry_over_slots_to_new_session") is False:
            self.issues.append(doc.issue(
                "domain.session_config.unsupported", "carry_over_slots_to_new_session: false "
                "is not supported: slots always carry over into a new session here",
                ("session_config", "carry_over_slots_to_new_session"),
                hint="remove the key, or reset the slots in your pattern_session_start",
                severity="warning"))

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
            if flow_id in NATIVE_PATTERNS:
                self.issues.append(doc.issue(
                    "flow.pattern.runs_natively", f"{flow_id} cannot be overridden: collect "
                    "steps ask, check rejections and coerce slot types themselves, so this "
                    "flow is ignored (custom validate_<slot> actions in it do not run)", loc,
                    hint="remove the override; put checks in the collect step's rejections",
                    severity="warning"))
                continue
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
        checker = FlowChecker(self.issues, domain, flows, docs,
                              {name: spec.config for name, spec in agents.items()},
                              [s.name for s in endpoints.mcp_servers or []], self.broken)
        checker.check_all()
        self.tool_steps = tool_step_refs(flows, docs)
        declared = {s.name: s.tools for s in endpoints.mcp_servers or [] if s.tools is not None}
        self.issues += unknown_tool_issues(self.tool_steps, declared,
                                           "the tools: list of its entry in endpoints.yml")
        ResponseChecker(self.issues, domain, self.response_docs, self.broken,
                        flows).check_all(checker.uttered)
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
    loader.report_group_models(endpoints)
    if not (found_data or endpoints_doc or paths.config.is_file() or agents
            or paths.sub_agents.is_dir()):
        loader.issues.append(ConfigIssue(
            "project.empty", f"no assistant project in {root}: no config.yml, endpoints.yml, "
            "domain or data files", file=str(root),
            hint="run it in a project folder or pass --project DIR"))
    flows = loader.build_flows(raw_flows, domain, agents, endpoints)
    if any(is_search_policy(entry) for entry in pipeline.policies or []):
        # action_trigger_search has its backend: the search policy
        loader.issues = [i for i in loader.issues if i.code != SEARCH_STEP_WITHOUT_POLICY]
    loader.issues += check_template_slots(
        endpoints_doc, list(endpoints.mcp_servers or []),
        lambda name: name in domain.slots or name in BUILTIN_SLOTS)
    loader.issues += check_per_user_oauth(endpoints_doc, list(endpoints.mcp_servers or []))
    loader.issues += check_stdio_folders(endpoints_doc, list(endpoints.mcp_servers or []), root)
    action = endpoints.action_endpoint
    if action is None or action.actions_module or not action.url:
        module = (action.actions_module if action else None) or "actions"
        loader.issues += rasa_imports(root, module)
        loader.issues += runtime_checks.actions_issue(root, module)
    # one problem, one report: the same issue found more than once (a slot missing from every
    # branch of one next:, say) is reported once
    issues = [*dict.fromkeys(loader.issues + check_credentials(root)[1]),
              *runtime_checks.a2a_issues(agents, loader.agent_docs),
              *runtime_checks.store_issues(endpoints, endpoints_doc),
              *runtime_checks.stdio_issues(endpoints, endpoints_doc, root)]
    if "endpoints" not in paths.explicit:  # a given path that does not exist is reported
        issues = runtime_checks.endpoints_missing(paths.endpoints,
                                                  _shown(paths.endpoints, root), issues)
    if any(i.severity == "error" for i in issues):
        return None, issues
    project = Project(root=root, endpoints=endpoints, domain=domain, flows=flows, agents=agents,
                      pipeline=pipeline, warnings=[i for i in issues if i.severity != "error"],
                      paths=paths, tool_steps=loader.tool_steps,
                      command_generator_class=loader.command_generator_class)
    return project, issues


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def load_project(root: Path | str | ProjectPaths, **locations: Any) -> Project:
    """Load a project; raise :class:`ProjectInvalidError` listing every error if there is any.

    ``root`` and ``locations`` are what :func:`collect_issues` accepts.
    """
    project, issues = collect_issues(root, **locations)
    if project is None:
        folder = root.root if isinstance(root, ProjectPaths) else Path(root)
        raise ProjectInvalidError(issues, folder)
    return project
