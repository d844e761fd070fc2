"""The domain: slots, responses, custom action names (``domain.yml`` or ``data/*.yml``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from subagents.conditions import Condition
from subagents.config._base import StrictModel

SlotType = Literal["text", "bool", "float", "categorical", "strict_categorical", "list", "any"]
MAPPING_TYPES = ("from_llm", "controlled", "custom", "from_entity", "from_intent", "from_text",
                 "from_trigger_intent")
"""Slot mapping types Rasa knows."""
NLU_MAPPING_TYPES = frozenset({"from_entity", "from_intent", "from_text", "from_trigger_intent"})
"""Mappings filled by an NLU pipeline (intent classifier, entity extractor), which is not run."""


class SlotDefinition(StrictModel):
    """A slot as declared under ``slots:`` in the domain; unknown keys are kept."""

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
        if isinstance(value, str) and "." in value:
            return "any"  # a custom slot class (pkg.Class): its values are kept as they are
        return value.lower() if isinstance(value, str) else value

    @property
    def nlu_only(self) -> bool:
        """Every mapping needs an NLU pipeline (no ``from_llm``, ``controlled`` or ``custom``)."""
        return bool(self.mappings) and all(m.get("type") in NLU_MAPPING_TYPES
                                           for m in self.mappings or [])

    def llm_fillable(self) -> bool:
        """Whether the model may fill this slot (see ``mappings_allow_llm``)."""
        return mappings_allow_llm(self.mappings)


def mappings_allow_llm(mappings: list[dict[str, Any]] | None) -> bool:
    """No mappings, an empty list, or any ``from_llm`` mapping: the model may fill the slot."""
    return not mappings or any(m.get("type") == "from_llm" for m in mappings)


class ResponseVariation(BaseModel):
    """One variation of a response; ``condition`` is a predicate string or a list of slot checks."""

    model_config = ConfigDict(extra="allow")

    text: str | None = None
    buttons: list[dict[str, Any]] | None = None
    condition: Any = None
    channel: str | None = None
    metadata: dict[str, Any] | None = None
    custom: dict[str, Any] | None = None
    _parsed_condition: Condition | None = PrivateAttr(default=None)

    @property
    def parsed_condition(self) -> Condition | None:
        """A string ``condition``, parsed when the project loaded (None for the list form)."""
        return self._parsed_condition

    def use_parsed_condition(self, condition: Condition) -> None:
        """Keep the parsed form of the string ``condition`` (done once, by validation)."""
        self._parsed_condition = condition

    @property
    def is_jinja(self) -> bool:
        """``metadata.template: jinja``: the text is a Jinja template, not ``{slot}`` format."""
        return (self.metadata or {}).get("template") == "jinja"

    def condition_holds(self, slots: dict[str, Any], context: dict[str, Any] | None = None
                        ) -> bool:
        """Whether this variation's condition holds (no condition: always).

        A string condition is a predicate over ``slots.<name>``; the list form checks every
        ``{name, value}`` item, strings compared case-insensitively, as Rasa does.
        """
        if self.condition is None:
            return True
        if isinstance(self.condition, str):
            parsed = self._parsed_condition
            return parsed is not None and parsed.evaluate({"slots": slots,
                                                           "context": context or {}})
        return all(_slot_matches(slots.get(str(item.get("name"))), item.get("value"))
                   for item in self.condition if isinstance(item, dict))


def _slot_matches(actual: Any, expected: Any) -> bool:
    if isinstance(actual, str) and isinstance(expected, str):
        return actual.casefold() == expected.casefold()
    return bool(actual == expected)


class Domain(BaseModel):
    """Merged domain of the project."""

    slots: dict[str, SlotDefinition] = Field(default_factory=dict)
    responses: dict[str, list[ResponseVariation]] = Field(default_factory=dict)
    actions: list[str] = Field(default_factory=list)
    default_slots: set[str] = Field(default_factory=set)
    """Slots that come from the shipped default domain and were not redefined by the project."""
    default_responses: set[str] = Field(default_factory=set)
    """Responses that come from the shipped default domain and were not redefined."""

    def merge(self, other: Domain) -> None:
        """Add ``other`` on top: its slots and responses replace ours of the same name."""
        self.default_slots -= set(other.slots)
        self.default_responses -= set(other.responses)
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
