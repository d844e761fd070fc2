"""Checks of a search setup for ``subagents validate``: every problem with its fix.

:func:`check_search_setup` looks at the policy's settings, the project folder, the ids of the
model groups and the endpoints.yml ``vector_store`` section, and returns a
:class:`~subagents.exceptions.ConfigIssue` per problem (codes ``search.*``). It reads the documents
(so an empty index is caught before the first question) but calls no model.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from subagents.exceptions import ConfigError, ConfigIssue
from subagents.knowledge.documents import (
    document_files,
    load_documents,
    parse_qa_documents,
    split_documents,
)
from subagents.knowledge.settings import SearchPolicySettings

__all__ = ["check_search_setup"]

_ENV_ONLY = re.compile(r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*$")


def check_search_setup(settings: SearchPolicySettings, *, root: Path,
                       model_groups: Collection[str],
                       vector_store_endpoint: Mapping[str, Any] | None = None,
                       file: str = "config.yml") -> list[ConfigIssue]:
    """Every problem of an ``EnterpriseSearchPolicy`` setup.

    Args:
        settings: The policy's entry of config.yml.
        root: The project folder (``vector_store.source`` and ``prompt_template`` are relative
            to it).
        model_groups: The ids of endpoints.yml's model groups.
        vector_store_endpoint: endpoints.yml's ``vector_store`` section, if any.
        file: The file the settings come from, for the messages.
    """
    issues = _model_groups(settings, model_groups, file)
    issues += _prompt(settings, root, file)
    kind = settings.vector_store.type.lower()
    if settings.vector_store.embedded:
        issues += _embedded(settings, root, file)
    elif kind == "qdrant":
        issues += _qdrant(vector_store_endpoint)
    else:
        issues.append(ConfigIssue(
            "search.vector_store_unsupported",
            f"vector_store type {settings.vector_store.type!r} is not supported", file=file,
            key="vector_store.type",
            hint="use faiss (the embedded index over a folder of .txt files) or qdrant"))
    return issues


def _model_groups(settings: SearchPolicySettings, groups: Collection[str],
                  file: str) -> list[ConfigIssue]:
    issues = []
    wanted = [("embeddings", settings.embeddings)]
    if settings.use_generative_llm:
        wanted.append(("llm", settings.llm))
    for key, value in wanted:
        group = (value or {}).get("model_group")
        if group is not None and str(group) not in groups:
            known = ", ".join(sorted(groups)) or "none"
            issues.append(ConfigIssue(
                f"search.{key}_group_missing",
                f"{key}.model_group {group!r} is not a model group of endpoints.yml "
                f"(known: {known})", file=file, key=f"{key}.model_group",
                hint=f"add a model group with id {group!r} to endpoints.yml, or name one of "
                     "the existing groups"))
    return issues


def _prompt(settings: SearchPolicySettings, root: Path, file: str) -> list[ConfigIssue]:
    if not settings.prompt_template or not settings.use_generative_llm:
        return []
    path = root / settings.prompt_template
    if not path.is_file():
        return [ConfigIssue("search.prompt_missing",
                            f"the prompt template {settings.prompt_template} does not exist",
                            file=file, key="prompt_template",
                            hint="create the file or remove prompt_template to use the default")]
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    try:
        SandboxedEnvironment().parse(path.read_text(encoding="utf-8"))
    except TemplateSyntaxError as exc:
        return [ConfigIssue("search.prompt_invalid",
                            f"the prompt template {settings.prompt_template} does not parse: "
                            f"{exc.message} (line {exc.lineno})", file=file,
                            key="prompt_template", hint="fix the Jinja syntax")]
    return []


def _embedded(settings: SearchPolicySettings, root: Path, file: str) -> list[ConfigIssue]:
    issues = []
    if importlib.util.find_spec("numpy") is None:
        issues.append(ConfigIssue("search.extra_missing",
                                  "the embedded search index needs numpy, which is not "
                                  "installed", file=file, key="vector_store",
                                  hint="pip install 'subagents[search]'"))
    if not settings.source:
        return [*issues, ConfigIssue(
            "search.source_missing", "vector_store has no source folder", file=file,
            key="vector_store.source", hint="set vector_store.source to the folder of .txt "
                                            "documents (Rasa's default is ./docs)")]
    folder = root / settings.source
    if not folder.is_dir():
        return [*issues, ConfigIssue(
            "search.source_missing", f"the documents folder {settings.source} does not exist",
            file=file, key="vector_store.source",
            hint=f"create {settings.source}/ with .txt documents, or point vector_store.source "
                 "at the folder that has them")]
    if not document_files(folder):
        return [*issues, ConfigIssue(
            "search.source_empty", f"the documents folder {settings.source} has no .txt file",
            file=file, key="vector_store.source", hint="add .txt documents (subfolders count)")]
    try:
        documents = load_documents(folder, display_root=root)
    except ConfigError as error:
        return [*issues, error.issue]
    chunks = (parse_qa_documents(documents) if not settings.use_generative_llm
              else split_documents(documents))
    if not chunks:
        what = ("no 'Q: ...' / 'A: ...' entry (use_generative_llm is false)"
                if not settings.use_generative_llm else "no text")
        issues.append(ConfigIssue(
            "search.index_empty", f"the documents in {settings.source} hold {what}",
            file=file, key="vector_store.source",
            hint="write entries as 'Q: question' then 'A: answer', separated by a blank line"
            if not settings.use_generative_llm else "add text to the .txt files"))
    return issues


def _qdrant(endpoint: Mapping[str, Any] | None) -> list[ConfigIssue]:
    issues = []
    if importlib.util.find_spec("qdrant_client") is None:
        issues.append(ConfigIssue("search.extra_missing",
                                  "vector_store type qdrant needs qdrant-client, which is not "
                                  "installed", file="endpoints.yml", key="vector_store",
                                  hint="pip install 'subagents[qdrant]'"))
    if endpoint is None:
        return [*issues, ConfigIssue(
            "search.qdrant_endpoint_missing",
            "the search policy uses qdrant but endpoints.yml has no vector_store section",
            file="endpoints.yml", key="vector_store",
            hint="add vector_store: {type: qdrant, collection: ..., host: ...} to endpoints.yml")]
    if not endpoint.get("collection"):
        issues.append(ConfigIssue("search.qdrant_collection_missing",
                                  "vector_store has no collection", file="endpoints.yml",
                                  key="vector_store.collection",
                                  hint="name the Qdrant collection that holds the documents"))
    key = endpoint.get("api_key")
    if key is not None and not _ENV_ONLY.match(str(key)):
        issues.append(ConfigIssue("search.qdrant_api_key_literal",
                                  "vector_store.api_key is written in the file",
                                  file="endpoints.yml",
                                  key="vector_store.api_key",
                                  hint="use api_key: ${QDRANT_API_KEY} and set the variable"))
    return issues
