"""The root ``config.yml`` (Rasa format): the pipeline and the policies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from subagents.config._base import StrictModel
from subagents.config.endpoints import normalize_model_keys

__all__ = ["MessageMetadataConfig", "PipelineConfig"]


class MessageMetadataConfig(StrictModel):
    """``message_metadata`` in ``config.yml`` (ours): which keys of a message's metadata reach
    sub agents and their tools.

    Without it every key does, as in Rasa (except the names the runtime reserves for itself).
    """

    allowed_keys: list[str]
    """Only these keys (and those the project's own files read: ``inputs_from_state:
    metadata.<key>``, MCP credential templates, ``per_user`` keys) reach agents and tools."""


class PipelineConfig(BaseModel):
    """Root ``config.yml`` (Rasa format); only the command generator's settings are read."""

    model_config = ConfigDict(extra="allow")
    recipe: str | None = None
    language: str | None = None
    assistant_id: str | None = None
    pipeline: list[dict[str, Any]] | None = None
    policies: list[dict[str, Any]] | None = None
    message_metadata: MessageMetadataConfig | None = None

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
