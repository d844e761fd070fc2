"""``subagents index``: build the knowledge index of config.yml's ``EnterpriseSearchPolicy``.

The assistant builds the index at start when the documents changed; this command does it ahead
of time (in a build step, before ``serve`` starts several workers). For the embedded index
(``type: faiss``) it loads the persisted index when it still matches the documents and builds it
otherwise (``--rebuild``: always). For ``type: qdrant`` it embeds the documents of
``vector_store.source`` and stores them in the collection (points are keyed by their content,
so running it again does not duplicate them).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_index_command", "cmd_index"]

EXAMPLES = """
    subagents index
    subagents index --project path/to/assistant --rebuild"""


def add_index_command(sub: Any, command: Callable[..., argparse.ArgumentParser],
                      project_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``index`` with the CLI's subcommands (``command`` and ``project_arg`` are the
    CLI's helpers for a subcommand and its project options)."""
    parser = command(sub, "index", "build the knowledge index of the search policy", EXAMPLES)
    project_arg(parser)
    parser.add_argument("--rebuild", action="store_true",
                        help="build the embedded index even when the documents did not change")


def cmd_index(paths: Any, *, rebuild: bool = False) -> int:
    """Build (or check) the index; print what was done; return the exit status."""
    from subagents.config.project import collect_issues

    project, issues = collect_issues(paths)
    errors = [i for i in issues if i.severity == "error"]
    for issue in errors:
        print(issue.format(), file=sys.stderr)
    if project is None:
        print(f"{len(errors)} error(s): the project does not load.", file=sys.stderr)
        return 1
    return asyncio.run(_index(project, rebuild))


async def _index(project: Any, rebuild: bool) -> int:
    from subagents.dialogue.search import build_store, search_policy
    from subagents.exceptions import SubagentsError
    from subagents.knowledge import LocalIndex, ModelEmbedder
    from subagents.llm import build_model

    try:
        settings = search_policy(project)
        if settings is None:
            print("subagents index: error [search.policy_missing]: config.yml has no "
                  "EnterpriseSearchPolicy (fix: add it to policies; see "
                  "docs/knowledge-search.md)", file=sys.stderr)
            return 1
        store = build_store(project, settings, lambda caller, s: build_model(s, name=caller))
    except SubagentsError as exc:
        return _failed(exc)
    try:
        if isinstance(store, LocalIndex):
            await _embedded(store, rebuild)
        else:
            await _qdrant(store, project, settings)
    except SubagentsError as exc:
        return _failed(exc)
    finally:
        if isinstance(store.embedder, ModelEmbedder):
            await store.embedder.close()
        if not isinstance(store, LocalIndex):
            await store.close()
    return 0


async def _embedded(store: Any, rebuild: bool) -> None:
    index = await (store.build() if rebuild else store.ensure())
    done = "built" if rebuild or store.rebuilt else "up to date:"
    print(f"{done} {len(index)} entries, {index.dimension} numbers each, in {store.folder}")


async def _qdrant(store: Any, project: Any, settings: Any) -> None:
    from subagents.exceptions import ConfigError, ConfigIssue
    from subagents.knowledge import LocalIndex

    if not settings.source:
        raise ConfigError(ConfigIssue(
            "search.source_missing", "vector_store has no source folder to store in Qdrant",
            file="config.yml", key="vector_store.source",
            hint="set vector_store.source to the folder of .txt documents, or fill the "
                 "collection yourself"))
    root = Path(project.root)
    reader = LocalIndex(root / settings.source, root, store.embedder,
                        qa_pairs=not settings.use_generative_llm, display_root=root)
    reader.check_source()
    documents = reader.documents()
    stored = await store.add(documents)
    print(f"stored {stored} entries in Qdrant collection {store.settings.collection!r}")


def _failed(exc: Exception) -> int:
    from subagents.exceptions import ConfigError

    text = f"subagents index: error [{getattr(exc, 'code', 'error')}]: {exc}"
    if isinstance(exc, ConfigError) and exc.issue.hint:
        text += f" (fix: {exc.issue.hint})"
    print(text, file=sys.stderr)
    return 1
