"""Loading ``endpoints.yml`` and ``config.yml``: sections, model settings, NLG, policies."""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from pydantic import BaseModel, ValidationError

from subagents._yaml import Loc, YamlDoc
from subagents.config._base import pydantic_issues
from subagents.config._imports import import_from_project
from subagents.config._loader_base import _LoaderBase
from subagents.config.endpoints import (
    EndpointsConfig,
    McpServerConfig,
    ModelGroup,
    is_rephraser_type,
)
from subagents.config.pipeline import PipelineConfig
from subagents.config.search_policy import check_search_policy, is_search_policy
from subagents.config.validation import (
    COMMAND_GENERATOR_VARIABLES,
    REPHRASER_VARIABLES,
    did_you_mean,
)

RASA_ENDPOINT_KEYS = {
    "version", "models", "action_endpoint", "tracker_store", "lock_store", "event_broker", "nlg",
    "nlu", "vector_store", "timer_store", "model_groups", "mcp_servers", "privacy",
    "recordings", "interaction_handling", "a2a_server", "metrics", "tracing", "secrets_manager"}
"""Top-level keys Rasa reads from endpoints.yml."""
_REPHRASER_KEYS = frozenset({"rephrase_all", "prompt", "prompt_template", "llm", "model_group",
                             "summarize_history", "max_historical_turns"})
"""``nlg`` keys only the contextual response rephraser reads."""
UNSUPPORTED_POLICIES = {
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


BUILTIN_COMMAND_GENERATORS = frozenset({
    "CompactLLMCommandGenerator", "SearchReadyLLMCommandGenerator",
    "SingleStepLLMCommandGenerator", "LLMCommandGenerator", "MultiStepLLMCommandGenerator"})
"""Rasa's command generators: each runs as the built-in one here."""
GENERATOR_BASE = ("subagents.dialogue.understanding", "CommandGenerator")
"""Module and name of the class a project's own command generator must subclass (Rasa's
``CompactLLMCommandGenerator`` and its siblings resolve to it when Rasa is not installed)."""


class _SettingsLoader(_LoaderBase):
    endpoints_doc: YamlDoc | None = None
    """endpoints.yml as written, once read."""
    command_generator_class: type | None = None
    """The project's own command generator class (``pipeline: - name: pkg.mod.Class``)."""

    def load_endpoints(self) -> tuple[EndpointsConfig, YamlDoc | None]:
        path = self.paths.endpoints
        if not path.is_file():
            if "endpoints" in self.paths.explicit:
                self.missing_explicit("endpoints", path)
            return EndpointsConfig(), None
        doc = self.read(path)
        if doc is None:
            return EndpointsConfig(), None
        self.endpoints_doc = doc
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
        self.valid_indices[section] = set()
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
            self.valid_indices[section].add(index)
        return kept

    def valid_entries(self, doc: YamlDoc, section: str) -> list[tuple[int, dict[str, Any]]]:
        """(index in the file, entry) of the entries of ``section`` that validated."""
        raw = doc.data.get(section)
        valid = self.valid_indices.get(section, set())
        return [(index, entry) for index, entry in enumerate(raw if isinstance(raw, list) else [])
                if index in valid]

    def check_endpoints(self, doc: YamlDoc, cfg: EndpointsConfig) -> None:
        # locations come from the file: entries that failed to validate are not in ``cfg``
        for section, key, code, what in (
                ("model_groups", "id", "endpoints.model_group.duplicate_id", "model group"),
                ("mcp_servers", "name", "endpoints.mcp_server.duplicate_name", "MCP server")):
            seen: set[str] = set()
            for index, raw in self.valid_entries(doc, section):
                name = str(raw[key])
                if name in seen:
                    self.issues.append(doc.issue(code, f"{what} {name!r} is defined twice",
                                                 (section, index, key)))
                seen.add(name)
        for index, raw in self.valid_entries(doc, "model_groups"):
            self.check_router(doc, raw, ("model_groups", index))
            for m_index, model in enumerate(raw.get("models") or []):
                self.check_llm(doc, model, ("model_groups", index, "models", m_index),
                               group=str(raw["id"]))
        for index, raw in self.valid_entries(doc, "mcp_servers"):
            server = cfg.mcp_server(str(raw["name"]))
            if server is not None and server.sampling \
                    and cfg.model_group(server.sampling.model_group) is None:
                self.issues.append(doc.issue(
                    "endpoints.mcp_server.sampling_model_group_unknown",
                    f"MCP server {server.name!r} samples with model group "
                    f"{server.sampling.model_group!r}, which is not defined",
                    ("mcp_servers", index, "sampling", "model_group")))
        nlg = doc.data.get("nlg")
        if isinstance(nlg, dict):
            self.check_nlg(doc, nlg, cfg)
        action = cfg.action_endpoint
        if action is not None and action.url and action.actions_module:
            self.issues.append(doc.issue(
                "endpoints.action_endpoint.url_and_module", "both url and actions_module are "
                "set: Rasa runs the module in process, this version calls the url",
                ("action_endpoint",), hint="keep only the one you mean", severity="warning"))

    def check_nlg(self, doc: YamlDoc, nlg: dict[str, Any], cfg: EndpointsConfig) -> None:
        kind = str(nlg.get("type") or "response")
        rephraser_keys = sorted(k for k in _REPHRASER_KEYS if k in nlg)
        if nlg.get("type") is None and rephraser_keys and not nlg.get("url"):
            # Rasa would take this for an NLG server without a url; the keys say "rephrase"
            self.issues.append(doc.issue(
                "endpoints.nlg.type_missing", "nlg has rephraser settings "
                f"({', '.join(rephraser_keys)}) but no type, so responses are sent as "
                "written and never rephrased", ("nlg",),
                hint="add type: rephrase to rephrase responses", severity="warning"))
            return
        if kind in ("response", "template", "templates"):
            return
        if is_rephraser_type(kind):
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
        for index, entry in enumerate(pipeline.policies or []):
            if is_search_policy(entry):
                search_issues, groups = check_search_policy(
                    doc, index, entry, root=self.root, endpoints=endpoints,
                    endpoints_doc=self.endpoints_doc)
                self.issues += search_issues
                self.used_model_groups |= groups
        return pipeline

    def check_command_generator(self, doc: YamlDoc, endpoints: EndpointsConfig, index: int,
                                entry: dict[str, Any]) -> None:
        loc: Loc = ("pipeline", index)
        self.check_generator_class(doc, (*loc, "name"), str(entry.get("name")))
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

    def check_generator_class(self, doc: YamlDoc, loc: Loc, name: str) -> None:
        """A command generator named by a module path (not Rasa's own) is the project's class:
        it must import and subclass the built-in one; it is kept for the runtime."""
        module, _, class_name = name.rpartition(".")
        if class_name in BUILTIN_COMMAND_GENERATORS and (not module or
                                                         module.split(".")[0] == "rasa"):
            return
        if not module:
            self.issues.append(doc.issue(
                "config.command_generator.unknown", f"unknown command generator {name!r}", loc,
                hint=did_you_mean(name, BUILTIN_COMMAND_GENERATORS,
                                  "use CompactLLMCommandGenerator, or the module path of your "
                                  "own class")))
            return
        try:
            found = getattr(import_from_project(self.root, module), class_name)
        except Exception as exc:  # noqa: BLE001 - any import failure is reported
            missing = str(getattr(exc, "name", "") or "")
            hint = (f"{missing} is part of Rasa Pro and not provided here: subclass "
                    "CompactLLMCommandGenerator and override parse_reply or predict, which "
                    "work with this package's commands" if missing.split(".")[0] == "rasa"
                    else "module paths are relative to the project folder")
            self.issues.append(doc.issue(
                "config.command_generator.import_failed",
                f"cannot load command generator {name!r}: {type(exc).__name__}: {exc}", loc,
                hint=hint))
            return
        problems = generator_class_problems(found, name)
        for code, message, hint, severity in problems:
            self.issues.append(doc.issue(code, message, loc, hint=hint, severity=severity))
        if not any(severity == "error" for *_, severity in problems):
            self.command_generator_class = found


def generator_class_problems(found: Any, name: str) -> list[tuple[str, str, str, str]]:
    """``(code, message, hint, severity)`` of each problem of a project's command generator
    class: not a subclass of the built-in one, a constructor it cannot be built with, or
    methods (Rasa's, for instance) that nothing here calls."""
    base = next((k for k in getattr(found, "__mro__", ())
                 if (k.__module__, k.__qualname__) == GENERATOR_BASE), None)
    if not isinstance(found, type) or base is None:
        return [("config.command_generator.not_a_subclass",
                 f"{name!r} does not subclass the built-in command generator, so it cannot "
                 "run here", "subclass subagents.dialogue.understanding.CommandGenerator, or "
                 "Rasa's CompactLLMCommandGenerator (which resolves to it here)", "error")]
    problems = []
    try:
        inspect.signature(found).bind(None, None)
    except (TypeError, ValueError):
        problems.append(("config.command_generator.init_signature",
                         f"{name!r} cannot be created as CommandGenerator(project, llm)",
                         "keep the constructor's (project, llm) arguments, or leave "
                         "__init__ out", "error"))
    unused = sorted(attr for attr, value in vars(found).items()
                    if callable(value) and not attr.startswith("__") and not hasattr(base, attr))
    if unused:
        problems.append(("config.command_generator.method_not_called",
                         f"{name!r} defines {', '.join(unused)}, which nothing here calls "
                         "(Rasa's command generator interface is not run)",
                         "override predict, parse_reply or render instead", "warning"))
    return problems


def _constant_code(code: str) -> Any:
    return lambda err: code
