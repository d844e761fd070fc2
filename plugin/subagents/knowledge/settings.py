"""The ``EnterpriseSearchPolicy`` entry of config.yml, with Rasa's keys and defaults.

::

    policies:
      - name: EnterpriseSearchPolicy
        vector_store: {type: faiss, source: docs, threshold: 0.0}
        embeddings: {model_group: embeddings}
        llm: {model_group: search_llm}
        prompt_template: prompts/search.jinja2     # "prompt" is the older name
        use_generative_llm: true                   # false: extractive search over Q/A documents
        citation_enabled: false
        check_relevancy: false
        max_messages_in_query: 2
        max_history: null                          # transcript lines in the prompt; null = all

``type: faiss`` selects the embedded index (the name Rasa uses; the index here is
:class:`~subagents.knowledge.index.LocalIndex`). ``type: qdrant`` takes the connection from
endpoints.yml (:class:`~subagents.knowledge.qdrant.QdrantSettings`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DEFAULT_SOURCE", "EMBEDDED_STORE_TYPES", "SearchPolicySettings", "VectorStoreSettings"]

DEFAULT_SOURCE = "./docs"
EMBEDDED_STORE_TYPES = frozenset({"faiss"})
"""Store types served by the embedded index."""


class VectorStoreSettings(BaseModel):
    """The policy's ``vector_store`` key."""

    model_config = ConfigDict(extra="allow")

    type: str = "faiss"
    """``faiss`` (the embedded index) or ``qdrant`` (endpoints.yml holds the connection)."""
    source: str | None = None
    """The documents folder, relative to the project folder (embedded index only)."""
    threshold: float = 0.0
    """Minimum similarity of a result. Rasa passes it to Qdrant and ignores it for FAISS; here
    both stores apply it when it is above 0."""

    @property
    def embedded(self) -> bool:
        """Whether this store is the embedded index."""
        return self.type.lower() in EMBEDDED_STORE_TYPES


class SearchPolicySettings(BaseModel):
    """Rasa's ``EnterpriseSearchPolicy`` options; unknown keys are kept (``priority``, ...)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    vector_store: VectorStoreSettings = Field(
        default_factory=lambda: VectorStoreSettings(source=DEFAULT_SOURCE))
    """Replaced as a whole when given, as in Rasa: a given ``vector_store`` without ``source``
    has no documents folder."""
    llm: dict[str, Any] | None = None
    """The model (``model_group: <id>`` or inline) that writes generative answers."""
    embeddings: dict[str, Any] | None = None
    """The embeddings model (``model_group: <id>`` or inline)."""
    prompt_template: str | None = Field(None, alias="prompt_template")
    """A Jinja template file for the generative answer (``prompt`` is the older name)."""
    use_generative_llm: bool = True
    citation_enabled: bool = False
    check_relevancy: bool = False
    max_messages_in_query: int = Field(2, ge=1)
    max_history: int | None = Field(None, ge=1)
    include_date_time: bool = True
    """Give the prompt ``current_datetime`` (Rasa's default is on)."""
    timezone: str = "UTC"

    @model_validator(mode="before")
    @classmethod
    def _prompt_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "prompt" in data and "prompt_template" not in data:
            data = {**data, "prompt_template": data["prompt"]}
            data.pop("prompt")
        return data

    @property
    def source(self) -> str | None:
        """The documents folder of the embedded index, if any."""
        return self.vector_store.source

    @property
    def citations(self) -> bool:
        """Citations take effect only with the generative model (as in Rasa)."""
        return self.citation_enabled and self.use_generative_llm

    @property
    def relevancy_check(self) -> bool:
        """The relevancy check takes effect only with the generative model (as in Rasa)."""
        return self.check_relevancy and self.use_generative_llm
