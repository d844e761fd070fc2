"""The command generator's reply as JSON under a schema built from the project.

When the command generator's model has constrained output (``structured_output``), the model
answers ``{"commands": [...]}`` instead of command lines, and the server holds it to a schema:
each command is one of the commands the prompt offers, tagged by ``command``; flow ids, slot
names and agent names are enums of the project's own; a slot's value has the slot's type. A
small model then cannot write a command that does not parse. The reply is read back into the
same commands the line format gives; a reply that is not such JSON is read as command lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pydantic_core

from subagents.config.domain import SlotDefinition
from subagents.dialogue.commands import (
    CancelFlow,
    CannotHandle,
    ChitChat,
    Clarify,
    Command,
    ContinueAgent,
    RepeatBotMessages,
    RestartAgent,
    SetSlot,
    SkipQuestion,
    StartFlow,
)
from subagents.types import JsonObject

MAX_COMMANDS = 5
"""The most commands one reply may hold."""
MAX_TEXT = 200
"""The longest text value a slot may be given in one command."""

JSON_INSTRUCTIONS = """

Answer with one JSON object, {"commands": [...]}, one entry per command, for example
{"commands": [{"command": "start flow", "flow": "<flow_id>"}]} or
{"commands": [{"command": "set slot", "slot": "<slot_name>", "value": <value>}]}."""
"""Appended to the built-in prompt when the reply is JSON."""

_SIMPLE: dict[str, Command] = {
    "cancel flow": CancelFlow(), "continue agent": ContinueAgent(),
    "offtopic reply": ChitChat(), "cannot handle": CannotHandle(),
    "repeat message": RepeatBotMessages(), "skip question": SkipQuestion()}
"""Commands without arguments, by their tag."""


@dataclass(frozen=True)
class Offer:
    """What the prompt offers in one turn: the schema allows exactly these commands.

    Attributes:
        flows: Flows the model may start.
        slots: Slots the model may set, with their definitions.
        agent_waiting: A sub agent waits for the user (``continue agent`` is offered).
        completed_agents: Sub agents the model may restart.
        extra: Tags of further argument-free commands the project's patterns allow
            (``repeat message``, ``skip question``, ``search and reply``, ...).
        clarify: Whether ``disambiguate flows`` is offered.
    """

    flows: tuple[str, ...]
    slots: tuple[tuple[str, SlotDefinition], ...]
    agent_waiting: bool = False
    completed_agents: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    clarify: bool = False


def command_schema(offer: Offer) -> JsonObject:
    """The JSON schema of a reply that holds only the offered commands."""
    choices: list[JsonObject] = []
    if offer.flows:
        choices.append(_command("start flow", flow={"enum": list(offer.flows)}))
    for name, slot in offer.slots:
        choices.append(_command("set slot", slot={"const": name}, value=_value_schema(slot)))
    choices.append(_command("cancel flow"))
    if offer.agent_waiting:
        choices.append(_command("continue agent"))
    if offer.completed_agents:
        choices.append(_command("restart agent", agent={"enum": list(offer.completed_agents)}))
    if offer.clarify and len(offer.flows) > 1:
        choices.append(_command("disambiguate flows", flows={
            "type": "array", "items": {"enum": list(offer.flows)}, "minItems": 2,
            "maxItems": min(MAX_COMMANDS, len(offer.flows))}))
    for tag in offer.extra:
        choices.append(_command(tag))
    choices.append(_command("offtopic reply"))
    choices.append(_command("cannot handle"))
    return {"type": "object", "additionalProperties": False, "required": ["commands"],
            "properties": {"commands": {"type": "array", "minItems": 1,
                                        "maxItems": MAX_COMMANDS, "items": {"anyOf": choices}}}}


def _command(tag: str, **arguments: JsonObject) -> JsonObject:
    return {"type": "object", "additionalProperties": False,
            "required": ["command", *arguments],
            "properties": {"command": {"const": tag}, **arguments}}


def _value_schema(slot: SlotDefinition) -> JsonObject:
    """A slot's value as its type allows (null clears the slot)."""
    if slot.type in ("categorical", "strict_categorical") and slot.values:
        return {"enum": [*slot.values, None]}
    if slot.type == "bool":
        return {"type": ["boolean", "null"]}
    if slot.type == "float":
        return {"type": ["number", "null"]}
    if slot.type == "list":
        return {"type": ["array", "null"], "items": {"type": "string", "maxLength": MAX_TEXT},
                "maxItems": 20}
    return {"type": ["string", "null"], "maxLength": MAX_TEXT}


def commands_from_json(text: str | None, extra: dict[str, Command] | None = None
                       ) -> list[Command] | None:
    """The commands of a JSON reply (entries that are no command are left out); None when the
    reply is not ``{"commands": [...]}`` JSON (then it is read as command lines).

    A reply cut short (by the reply-length cap) keeps the commands written in full before the
    one it was cut in: that one is dropped, since a ``set slot`` without its value would clear
    the slot.

    Args:
        text: The model's reply.
        extra: Argument-free commands the project adds, by tag (``search and reply``: ...).
    """
    try:
        data = json.loads(text or "")
        cut = False
    except ValueError:
        try:
            data, cut = pydantic_core.from_json(text or "", allow_partial=True), True
        except ValueError:
            return None
    entries = data.get("commands") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    if cut:
        entries = entries[:-1]
    commands: list[Command] = []
    for entry in entries:
        command = _from_entry(entry, extra or {}) if isinstance(entry, dict) else None
        if command is not None:
            commands.append(command)
    return commands


def _from_entry(entry: dict[str, Any], extra: dict[str, Command]) -> Command | None:
    tag = str(entry.get("command") or "").strip().lower()
    if tag in _SIMPLE:
        return _SIMPLE[tag]
    if tag in extra:
        return extra[tag]
    if tag == "start flow" and isinstance(entry.get("flow"), str):
        return StartFlow(entry["flow"])
    if tag == "set slot" and isinstance(entry.get("slot"), str):
        return SetSlot(entry["slot"], entry.get("value"))
    if tag == "restart agent" and isinstance(entry.get("agent"), str):
        return RestartAgent(entry["agent"])
    if tag == "disambiguate flows" and isinstance(entry.get("flows"), list):
        return Clarify(tuple(str(flow) for flow in entry["flows"]))
    return None
