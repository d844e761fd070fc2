"""State and helpers shared by the parts of the project loader."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from subagents._yaml import Loc, YamlDoc, YamlSyntaxError, load_yaml
from subagents.config.endpoints import EndpointsConfig, model_key_problems, router_problems
from subagents.config.paths import ProjectPaths
from subagents.config.validation import Broken, TemplateChecker
from subagents.exceptions import ConfigIssue


class _LoaderBase:
    """What every part of the loader shares: the paths, the issues found so far, the names that
    failed to load, reading YAML, and the model-settings checks."""

    def __init__(self, paths: ProjectPaths) -> None:
        self.paths = paths
        self.root = paths.root
        self.issues: list[ConfigIssue] = []
        self.broken = Broken()
        self.templates = TemplateChecker(self.root, self.issues)
        self.response_docs: dict[str, YamlDoc] = {}
        self.agent_docs: dict[str, YamlDoc] = {}
        self.used_model_groups: set[str] = set()
        """Model groups something subagents runs refers to (the first group is the default)."""
        self.valid_indices: dict[str, set[int]] = {}
        """Per endpoints.yml list section: indices of the entries that validated."""
        self.group_model_issues: list[tuple[str, ConfigIssue]] = []
        """Problems of model group members, reported once it is known which groups are used."""

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

    def check_llm(self, doc: YamlDoc, raw: Any, loc: Loc, group: str | None = None) -> None:
        """Provider and option checks of one model's settings (inline, or a member of
        ``group``: then reported by :meth:`report_group_models`)."""
        if not isinstance(raw, dict) or "model_group" in raw:
            return
        for key, code, message, hint, severity in model_key_problems(raw):
            issue = doc.issue(code, message, (*loc, key), hint=hint, severity=severity)
            if group is None:
                self.issues.append(issue)
            else:
                self.group_model_issues.append((group, issue))

    def check_router(self, doc: YamlDoc, group: dict[str, Any], loc: Loc) -> None:
        """Checks of a model group's ``router:`` (reported like the group's models)."""
        if "router" not in group or group["router"] is None:
            return
        models = group.get("models")
        count = len(models) if isinstance(models, list) else 0
        for path, code, message, hint, severity in router_problems(group["router"], count):
            issue = doc.issue(code, message, (*loc, "router", *path), hint=hint,
                              severity=severity)
            self.group_model_issues.append((str(group.get("id")), issue))

    def report_group_models(self, endpoints: EndpointsConfig) -> None:
        """Model group problems: errors in groups that are used, warnings in the others (for
        example embedding groups for Rasa's flow retrieval or enterprise search)."""
        if endpoints.model_groups:
            self.used_model_groups.add(endpoints.model_groups[0].id)
        for group, issue in self.group_model_issues:
            if group not in self.used_model_groups:
                issue = replace(issue, severity="warning",
                                message=f"{issue.message} (model group {group!r} is not used "
                                        "by subagents)")
            self.issues.append(issue)

    def check_model_group_ref(self, doc: YamlDoc, endpoints: EndpointsConfig, group: Any,
                              loc: Loc, code: str) -> None:
        name = str(group)
        self.used_model_groups.add(name)
        if endpoints.model_group(name) is None and name not in self.broken.model_groups:
            self.issues.append(doc.issue(
                code, f"model group {name!r} is not defined in endpoints.yml", loc,
                hint="add it under model_groups in endpoints.yml or fix the id"))
