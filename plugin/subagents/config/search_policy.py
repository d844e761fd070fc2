"""Checks of config.yml's ``EnterpriseSearchPolicy`` entry, with the line of each problem.

The checks themselves are :func:`subagents.knowledge.check_search_setup` (a missing or empty
documents folder, documents with nothing to index, an unknown model group, a missing extra, a
broken prompt template, the Qdrant section); this module reads the entry and places every issue
at its key in config.yml (or endpoints.yml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from subagents._yaml import Loc, YamlDoc
from subagents.config._base import pydantic_issues
from subagents.config.endpoints import EndpointsConfig
from subagents.exceptions import ConfigIssue
from subagents.knowledge import SearchPolicySettings, check_search_setup

__all__ = ["POLICY", "check_search_policy", "is_search_policy"]

POLICY = "EnterpriseSearchPolicy"


def is_search_policy(entry: dict[str, Any]) -> bool:
    """Whether a ``policies`` entry is Rasa's enterprise search policy."""
    return str(entry.get("name", "")).rsplit(".", 1)[-1] == POLICY


def check_search_policy(doc: YamlDoc, index: int, entry: dict[str, Any], *, root: Path,
                        endpoints: EndpointsConfig, endpoints_doc: YamlDoc | None
                        ) -> tuple[list[ConfigIssue], set[str]]:
    """The issues of ``policies[index]`` and the model groups it uses.

    Args:
        doc: config.yml.
        index: The entry's position under ``policies``.
        entry: The entry.
        root: The project folder (the documents folder is relative to it).
        endpoints: endpoints.yml, read.
        endpoints_doc: endpoints.yml as written (for the lines of its ``vector_store``).
    """
    loc: Loc = ("policies", index)
    try:
        settings = SearchPolicySettings.model_validate(
            {k: v for k, v in entry.items() if k != "name"})
    except ValidationError as exc:
        return pydantic_issues(doc, exc, lambda e: "search.settings_invalid", base=loc), set()
    used = {str(value["model_group"]) for value in (settings.embeddings, settings.llm)
            if isinstance(value, dict) and "model_group" in value}
    section = (endpoints.model_extra or {}).get("vector_store")
    found = check_search_setup(settings, root=root,
                               model_groups={g.id for g in endpoints.model_groups},
                               vector_store_endpoint=section if isinstance(section, dict)
                               else None, file=doc.display)
    return [_placed(issue, doc, loc, endpoints_doc) for issue in found], used


def _placed(issue: ConfigIssue, doc: YamlDoc, loc: Loc, endpoints_doc: YamlDoc | None
            ) -> ConfigIssue:
    """``issue`` with the line of its key (and, in config.yml, the key under the entry)."""
    key_path: Loc = tuple(issue.key.split(".")) if issue.key else ()
    if issue.file == doc.display:
        return doc.issue(issue.code, issue.message, (*loc, *key_path), hint=issue.hint,
                         severity=issue.severity)
    if endpoints_doc is not None and issue.file == "endpoints.yml":
        return endpoints_doc.issue(issue.code, issue.message, key_path, hint=issue.hint,
                                   severity=issue.severity)
    return issue
