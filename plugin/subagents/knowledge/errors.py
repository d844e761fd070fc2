"""Errors of the knowledge package, each with a stable ``code``.

Configuration problems (a missing documents folder, an empty index, an embeddings group that does
not exist, an extra that is not installed) are :class:`~subagents.exceptions.ConfigError` with a
``search.*`` code and a hint that says how to fix them. Failures while building or querying an
index (the embeddings endpoint fails, a Qdrant server cannot be reached, a persisted index is
damaged) are :class:`SearchError` subclasses: the caller turns them into the internal-error pattern
instead of ending the conversation.
"""

from __future__ import annotations

from subagents.exceptions import ConfigError, ConfigIssue, SubagentsError

__all__ = ["EmbeddingError", "IndexCorruptError", "SearchBackendError", "SearchError",
           "extra_missing", "issue"]

SEARCH_EXTRA = "search"
QDRANT_EXTRA = "qdrant"


class SearchError(SubagentsError):
    """Building or querying a knowledge index failed."""

    code = "search.failed"


class EmbeddingError(SearchError):
    """The embeddings endpoint failed or answered something that is not a set of vectors."""

    code = "search.embeddings_failed"


class SearchBackendError(SearchError):
    """The vector store failed: a Qdrant server unreachable, a collection or payload missing."""

    code = "search.backend_failed"


class IndexCorruptError(SearchError):
    """A persisted index exists but cannot be read; it is rebuilt from the documents."""

    code = "search.index_corrupt"


def issue(code: str, message: str, *, hint: str | None = None, file: str | None = None,
          key: str | None = None, line: int | None = None) -> ConfigIssue:
    """A :class:`ConfigIssue` with a ``search.*`` code (the helper keeps call sites short)."""
    return ConfigIssue(code, message, file=file, line=line, key=key, hint=hint)


def extra_missing(extra: str, package: str, *, what: str) -> ConfigError:
    """The error for an optional dependency that is not installed.

    Args:
        extra: The extra of the ``subagents`` package that installs it (``search``, ``qdrant``).
        package: The import name that failed.
        what: What needed it, for the message (``the embedded search index``).
    """
    return ConfigError(issue(
        "search.extra_missing",
        f"{what} needs the {package!r} package, which is not installed",
        hint=f"pip install 'subagents[{extra}]'"))
