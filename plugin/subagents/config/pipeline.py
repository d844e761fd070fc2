"""The root ``config.yml`` (Rasa format): the pipeline and the policies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from subagents.config.endpoints import normalize_model_keys

__all__ = ["PipelineConfig"]


class PipelineConfig(BaseModel):
    """Root ``config.yml`` (Rasa format); only the command generator's settings are read."""

    model_config = ConfigDict(extra="allow")
    recipe: str | None = None
    language: str | None = None
    assistant_id: str | None = None
    pipeline: list[dict[str, Any]] | None = None
    policies: list[dict[str, Any]] | None = None

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
