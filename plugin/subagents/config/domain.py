"""The domain: slots, responses, custom action names (``domain.yml`` or ``data/*.yml``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._base import StrictModel

SlotType = Literal["text", "bool", "float", "categorical", "strict_categorical", "list", "any"]


class SlotDefinition(StrictModel):
    model_config = StrictModel.model_config | {"extra": "allow"}

    type: SlotType = "any"
    values: list[Any] | None = None
    """Allowed values of a categorical slot."""
    mappings: list[dict[str, Any]] | None = None
    initial_value: Any = None
    influence_conversation: bool | None = None
    description: str | None = None
    prompt: str | None = None
    verify: bool = False

    @field_validator("type", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    def llm_fillable(self) -> bool:
        return mappings_allow_llm(self.mappings)


def mappings_allow_llm(mappings: list[dict[str, Any]] | None) -> bool:
    """No mappings, an empty list, or any ``from_llm`` mapping (reference §3.1)."""
    return not mappings or any(m.get("type") == "from_llm" for m in mappings)


class ResponseVariation(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str | None = None
    buttons: list[dict[str, Any]] | None = None
    condition: Any = None
    metadata: dict[str, Any] | None = None
    custom: dict[str, Any] | None = None


class Domain(BaseModel):
    """Merged domain of the project."""

    slots: dict[str, SlotDefinition] = Field(default_factory=dict)
    responses: dict[str, list[ResponseVariation]] = Field(default_factory=dict)
    actions: list[str] = Field(default_factory=list)

    def merge(self, other: Domain) -> None:
        self.slots.update(other.slots)
        self.responses.update(other.responses)
        self.actions.extend(a for a in other.actions if a not in self.actions)


class DomainFile(BaseModel):
    """One domain file; Rasa keys we do not use (intents, entities, forms...) are accepted."""

    model_config = ConfigDict(extra="allow")

    slots: dict[str, SlotDefinition] = Field(default_factory=dict)
    responses: dict[str, list[ResponseVariation]] = Field(default_factory=dict)
    actions: list[str] = Field(default_factory=list)

    @field_validator("slots", "responses", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("actions", mode="before")
    @classmethod
    def _actions(cls, value: Any) -> Any:
        if value is None:
            return []
        # Rasa allows `- action_x: {send_domain: true}` entries
        return [next(iter(v)) if isinstance(v, dict) and v else v for v in value]
