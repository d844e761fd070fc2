"""Rasa's ``EnterpriseSearchPolicy``: knowledge questions answered from the project's documents.

A project configures the policy in config.yml (Rasa's keys, :class:`SearchPolicySettings`) and
overrides ``pattern_search`` with ``- action: action_trigger_search``. The assistant then builds
an :class:`EnterpriseSearch` and plugs it into the flow executor
(:meth:`~subagents.dialogue.flow_executor.FlowExecutor.use_search`); at start it loads the
embedded index (or builds it from the documents and persists it under ``.subagents/search/``).

When ``action_trigger_search`` runs, the search:

1. takes the last ``max_messages_in_query`` user and bot messages, newest first, as the query;
2. asks the store (the embedded index, or a Qdrant collection) for the 4 nearest documents;
3. answers: with the best question's stored answer (extractive search, no model), or with what
   the ``search`` model writes from the documents, the conversation and the slots (generative
   search; citations renumbered when ``citation_enabled``);
4. sends the answer as Rasa's ``action_send_text`` does: a bot message whose metadata carries
   ``search_results``, ``utter_source: EnterpriseSearchPolicy`` and ``search_query``; it is not
   rephrased.

No result, or a generative answer with ``[NO_RAG_ANSWER]`` while ``check_relevancy`` is on, runs
``pattern_cannot_handle`` with reason ``cannot_handle_no_relevant_answer``. A failing store,
embeddings model or answer model, or an extractive hit without an answer, runs
``pattern_internal_error``: the conversation goes on.

The models are called by the caller names :data:`LLM_CALLER` (``search``, the one conversation
tests script) and :data:`EMBEDDINGS_CALLER`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import structlog
from jinja2 import TemplateError
from pydantic import ValidationError

from subagents import events as ev
from subagents.config._base import resolve_env
from subagents.config.project import Project
from subagents.dialogue.navigation import Navigator
from subagents.dialogue.patterns import Patterns
from subagents.dialogue.responses import Responder
from subagents.dialogue.results import Advance
from subagents.dialogue.stack import FlowFrame
from subagents.dialogue.turn import Turn
from subagents.exceptions import ConfigError, ConfigIssue, SubagentsError
from subagents.knowledge import (
    DEFAULT_TOP_K,
    NO_RELEVANT_ANSWER_REASON,
    LocalIndex,
    ModelEmbedder,
    QdrantSettings,
    QdrantStore,
    SearchHit,
    SearchPolicySettings,
    answer_metadata,
    extractive_answer,
    is_relevant,
    render_search_prompt,
    renumber_citations,
    search_query,
)
from subagents.knowledge.prompt import DEFAULT_SEARCH_PROMPT
from subagents.llm import Model, ModelSettings, resolve_model_settings
from subagents.types import CallScope, ChatMessage

__all__ = ["DEFAULT_EMBEDDINGS", "EMBEDDINGS_CALLER", "INDEX_FOLDER", "LLM_CALLER",
           "POLICY", "EnterpriseSearch", "build_store", "search_policy"]

log = structlog.get_logger("subagents.dialogue")

POLICY = "EnterpriseSearchPolicy"
LLM_CALLER = "search"
"""The caller name of the model that writes generative answers (``llm_script: {search: ...}``)."""
EMBEDDINGS_CALLER = "search_embeddings"
DEFAULT_EMBEDDINGS: dict[str, Any] = {"provider": "openai", "model": "text-embedding-3-large"}
"""Rasa's default embeddings model, used when the policy names none."""
INDEX_FOLDER = Path(".subagents") / "search"
"""Where the embedded index is persisted, relative to the project folder."""

LLMFactory = Callable[[str, ModelSettings], Model]


class SearchStore(Protocol):
    """What the search asks a store: the nearest documents to a query."""

    async def search(self, query: str, k: int = DEFAULT_TOP_K,
                     min_score: float | None = None, *,
                     scope: CallScope | None = None) -> list[SearchHit]:
        """The ``k`` nearest documents, best first."""
        ...


def search_policy(project: Project) -> SearchPolicySettings | None:
    """The settings of the project's ``EnterpriseSearchPolicy`` entry, if config.yml has one.

    Raises:
        ConfigError: The entry's keys do not validate (``search.settings_invalid``).
    """
    for entry in project.pipeline.policies or []:
        if str(entry.get("name", "")).rsplit(".", 1)[-1] != POLICY:
            continue
        try:
            return SearchPolicySettings.model_validate(
                {k: v for k, v in entry.items() if k != "name"})
        except ValidationError as exc:
            raise ConfigError(ConfigIssue(
                "search.settings_invalid", f"{POLICY}: {exc.errors()[0]['msg']}",
                file="config.yml", key="policies",
                hint="see docs/knowledge-search.md for the keys")) from exc
    return None


def build_store(project: Project, settings: SearchPolicySettings, llm_factory: LLMFactory,
                *, index_root: Path | None = None) -> LocalIndex | QdrantStore:
    """The store the policy searches, with its embedder (built through ``llm_factory``);
    the embedded index is persisted under ``index_root`` (default: :data:`INDEX_FOLDER` in the
    project folder).

    Raises:
        ConfigError: An unknown store type, a missing model group or Qdrant section.
    """
    embeddings = resolve_model_settings(settings.embeddings or DEFAULT_EMBEDDINGS,
                                        project.endpoints, where="config.yml")
    embedder = ModelEmbedder(llm_factory(EMBEDDINGS_CALLER, embeddings))
    root = Path(project.root)
    kind = settings.vector_store.type.lower()
    if settings.vector_store.embedded:
        source = settings.source
        if not source:
            raise ConfigError(ConfigIssue(
                "search.source_missing", "vector_store has no source folder", file="config.yml",
                key="vector_store.source", hint="set vector_store.source to the folder of .txt "
                                                "documents (Rasa's default is ./docs)"))
        folder = (index_root or root / INDEX_FOLDER) / _slug(source)
        return LocalIndex(root / source, folder, embedder,
                          qa_pairs=not settings.use_generative_llm, display_root=root)
    if kind == "qdrant":
        section = (project.endpoints.model_extra or {}).get("vector_store")
        if not isinstance(section, dict):
            raise ConfigError(ConfigIssue(
                "search.qdrant_endpoint_missing",
                "the search policy uses qdrant but endpoints.yml has no vector_store section",
                file="endpoints.yml", key="vector_store",
                hint="add vector_store: {type: qdrant, collection: ..., host: ...}"))
        resolved = {key: resolve_env(value, what=f"vector_store.{key}")
                    if isinstance(value, str) else value for key, value in section.items()}
        try:
            return QdrantStore(QdrantSettings.model_validate(resolved), embedder)
        except ValidationError as exc:
            raise ConfigError(ConfigIssue(
                "search.qdrant_settings_invalid", f"vector_store: {exc.errors()[0]['msg']}",
                file="endpoints.yml", key="vector_store",
                hint="name the collection and how to reach Qdrant")) from exc
    raise ConfigError(ConfigIssue(
        "search.vector_store_unsupported",
        f"vector_store type {settings.vector_store.type!r} is not supported", file="config.yml",
        key="vector_store.type", hint="use faiss (the embedded index) or qdrant"))


def _slug(source: str) -> str:
    """A folder name for the index of ``source`` (``./docs/faq`` -> ``docs_faq``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", source.strip("./\\")).strip("_") or "documents"


class EnterpriseSearch:
    """The search backend ``action_trigger_search`` hands knowledge questions to.

    Args:
        project: The loaded project.
        settings: The policy's config.yml entry.
        llm_factory: Builds the embeddings model and the answer model.
        responder: Sends the answer.
        patterns: Pushes the cannot-handle and internal-error patterns.
        navigator: Moves ``pattern_search`` past its step when a pattern takes over.
        index_root: Where the embedded index is persisted (default: ``.subagents/search/`` in
            the project folder).
    """

    def __init__(self, project: Project, settings: SearchPolicySettings, *,
                 llm_factory: LLMFactory, responder: Responder, patterns: Patterns,
                 navigator: Navigator, index_root: Path | None = None) -> None:
        self.project = project
        self.settings = settings
        self.responder = responder
        self.patterns = patterns
        self.navigator = navigator
        self.store = build_store(project, settings, llm_factory, index_root=index_root)
        self.llm: Model | None = None
        self.template = DEFAULT_SEARCH_PROMPT
        if settings.use_generative_llm:
            self.llm = llm_factory(LLM_CALLER, resolve_model_settings(
                settings.llm, project.endpoints, where="config.yml"))
            if settings.prompt_template:
                self.template = _read_template(Path(project.root) / settings.prompt_template)
        threshold = settings.vector_store.threshold
        self.min_score = threshold if threshold > 0 else None
        self.timezone = _timezone(settings.timezone)

    @classmethod
    def from_project(cls, project: Project, llm_factory: LLMFactory, *, responder: Responder,
                     patterns: Patterns, navigator: Navigator,
                     index_root: Path | None = None) -> EnterpriseSearch | None:
        """The search of the project's ``EnterpriseSearchPolicy``; None without one."""
        settings = search_policy(project)
        if settings is None:
            return None
        return cls(project, settings, llm_factory=llm_factory, responder=responder,
                   patterns=patterns, navigator=navigator, index_root=index_root)

    async def start(self, *, strict: bool = True) -> None:
        """Load the embedded index, or build and persist it when the documents changed.

        Args:
            strict: Raise when the embeddings model fails. Otherwise the failure is logged
                and the index is built at the first question (``serve`` starts anyway).

        Raises:
            ConfigError: The documents folder is missing or empty, or holds nothing to index.
        """
        if not isinstance(self.store, LocalIndex):
            return
        try:
            await self.store.ensure()
        except ConfigError:
            raise
        except SubagentsError as exc:
            if strict:
                raise
            log.warning("search.index.deferred", error_code=exc.code, error=str(exc)[:300])

    async def close(self) -> None:
        """Close the models' connections (and a Qdrant client)."""
        if isinstance(self.store, QdrantStore):
            await self.store.close()
        if isinstance(self.store.embedder, ModelEmbedder):
            await self.store.embedder.close()
        if self.llm is not None:
            await self.llm.close()

    async def __call__(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Answer the knowledge question of ``turn`` (see the module docstring)."""
        events = turn.events
        if self.llm is not None and self.settings.max_history is None:
            events = await turn.all_events()  # the whole transcript goes into the prompt
        query = search_query(_messages(events), self.settings.max_messages_in_query)
        try:
            hits = await self.store.search(query, DEFAULT_TOP_K, self.min_score,
                                           scope=turn.scope)
        except SubagentsError as exc:
            return await self._internal_error(turn, frame, "search.store_failed", exc)
        if not hits:
            log.info("search.no_results", sender=turn.sender_id)
            return await self._cannot_handle(turn, frame)
        streamed = False
        if self.llm is None:
            answer = extractive_answer(hits)
            if answer is None:
                return await self._internal_error(turn, frame, "search.answer_missing", None)
        else:
            try:
                answer, streamed = await self._generate(turn, events, hits, self.llm)
            except (SubagentsError, TemplateError) as exc:
                return await self._internal_error(turn, frame, "search.llm_failed", exc)
            if not answer:
                return await self._internal_error(turn, frame, "search.llm_empty", None)
            if self.settings.relevancy_check and not is_relevant(answer):
                log.info("search.not_relevant", sender=turn.sender_id)
                return await self._cannot_handle(turn, frame)
            if self.settings.citations:
                answer = renumber_citations(answer)
        if streamed:  # the channel has it already: recorded only
            turn.add(ev.bot_uttered(answer, metadata=answer_metadata(query, hits,
                                                                     streamed=True)))
        else:
            await self.responder.say(turn, answer, answer_metadata(query, hits))
        log.info("search.answered", sender=turn.sender_id, results=len(hits),
                 generative=self.llm is not None)
        return Advance.NEXT

    async def _generate(self, turn: Turn, events: list[dict[str, Any]], hits: list[SearchHit],
                        llm: Model) -> tuple[str, bool]:
        """The model's answer from the documents, the conversation and the slots, and whether
        it was streamed to the channel (only when the channel streams and the answer needs no
        check or rewrite: relevancy check and citations off, as in Rasa)."""
        lines = _transcript(events)
        if self.settings.max_history is not None:
            lines = lines[-self.settings.max_history:]
        prompt = render_search_prompt(
            docs=hits, current_conversation="\n".join(lines), slots=self._slots(turn),
            check_relevancy=self.settings.relevancy_check,
            citation_enabled=self.settings.citations,
            current_datetime=datetime.now(self.timezone) if self.settings.include_date_time
            else None, template=self.template)
        messages: list[ChatMessage] = [{"role": "user", "content": prompt}]
        channel = turn.channel
        if channel is None or not channel.wants_streaming() or self.settings.relevancy_check \
                or self.settings.citations:
            response = await llm.complete(messages, None, scope=turn.scope)
            return (response.text or "").strip(), False
        started = False

        async def on_text(delta: str) -> None:
            nonlocal started
            if not started:
                if not delta.strip():
                    return  # leading whitespace: nothing is sent for a blank answer
                started, delta = True, delta.lstrip()
                await channel.send_response_chunk_start(turn.sender_id)
            await channel.send_response_chunk(turn.sender_id, delta)

        try:
            response = await llm.complete(messages, None, stream=True, on_text=on_text,
                                          scope=turn.scope)
        except BaseException:
            if started:
                await channel.send_response_chunk_end(turn.sender_id, interrupted=True)
            raise
        if started:
            await channel.send_response_chunk_end(turn.sender_id)
        return (response.text or "").strip(), started

    def _slots(self, turn: Turn) -> list[dict[str, str]]:
        """The domain's slots that hold a value other than their initial one."""
        slots = []
        for name, definition in self.project.domain.slots.items():
            value = turn.slots.get(name)
            if value is None or value == "" or value == definition.initial_value:
                continue
            slots.append({"name": name, "value": str(value), "type": str(definition.type)})
        return slots

    async def _cannot_handle(self, turn: Turn, frame: FlowFrame) -> Advance:
        self.patterns.cannot_handle(turn, NO_RELEVANT_ANSWER_REASON)
        return await self._handed_over(turn, frame)

    async def _internal_error(self, turn: Turn, frame: FlowFrame, code: str,
                              exc: BaseException | None) -> Advance:
        log.warning("search.failed", sender=turn.sender_id, code=code,
                    error_code=getattr(exc, "code", None) if exc else None,
                    error=str(exc)[:300] if exc else None)
        self.patterns.internal_error(turn, error_source="search", error_code=code)
        return await self._handed_over(turn, frame)

    async def _handed_over(self, turn: Turn, frame: FlowFrame) -> Advance:
        """A pattern now on top replaces the search, as in Rasa: ``pattern_search`` moves past
        its step underneath it (and ends there when that was its last)."""
        flow = self.project.flows.get(frame.flow_id)
        step = flow.step(frame.step_id) if flow is not None else None
        if flow is not None and step is not None:
            await self.navigator.move_next(turn, frame, flow, step)
        return Advance.CHANGED


def _messages(events: Sequence[dict[str, Any]]) -> list[str]:
    """The texts of the user and bot messages, oldest first."""
    return [str(e.get("text")) for e in events
            if e.get("event") in ("user", "bot") and e.get("text")]


def _transcript(events: Sequence[dict[str, Any]]) -> list[str]:
    """``USER: ...`` / ``AI: ...`` lines, one per message, line breaks made spaces."""
    lines = []
    for event in events:
        kind, text = event.get("event"), event.get("text")
        if kind in ("user", "bot") and text:
            who = "USER" if kind == "user" else "AI"
            lines.append(f"{who}: {' '.join(str(text).splitlines())}")
    return lines


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(ConfigIssue(
            "search.prompt_missing", f"the prompt template {path} cannot be read: {exc}",
            file="config.yml", key="prompt_template",
            hint="create the file or remove prompt_template to use the default")) from exc


def _timezone(name: str) -> tzinfo:
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("search.timezone_unknown", timezone=name)
        return UTC
