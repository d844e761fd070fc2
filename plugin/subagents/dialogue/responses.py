"""Responses: choosing a variation of an ``utter_*`` response, filling it in and sending it.

**Choosing.** The variations of a response fall into four groups, tried in order; the first
group with a member wins and one of its members is picked at random:

1. variations with a ``condition`` that holds and a ``channel`` equal to the output channel's name;
2. variations without a condition for that channel;
3. variations with a condition that holds and no channel;
4. variations with neither.

A variation for another channel is never used. A ``condition`` is either a condition string
(the language of ``exit_if``, with ``slots.*`` and ``context.*``) or a list of
``{type: slot, name, value}`` items that must all match (text compared case-insensitively). If
no variation fits, the variations of ``utter_internal_error_rasa`` are used.

**Filling in.** Every string of ``text``, ``buttons``, ``image``, ``attachment``, ``custom``,
``quick_replies`` and ``elements`` is rendered with the slot values by name, ``context`` (the
context of the flow frame on top: ``flow_id``, ``step_id`` and, for patterns, e.g.
``canceled_name``) and the values the caller passes (``value`` for rejections). By default a
``{name}`` placeholder is replaced by the value of ``name`` (``None`` for a slot that is not
set, as in Rasa), a placeholder naming nothing known stays as written and ``{{`` / ``}}`` give
literal braces. With ``metadata: {template: jinja}`` the string is a Jinja
template rendered in a sandbox; unknown names render empty and a template that fails is sent
as written.

**Sending.** The message is recorded as a ``bot`` event (the response's ``metadata`` and
``utter_action`` in its metadata, buttons and payloads in its ``data``) and sent to the
channel: with buttons through ``send_text_with_buttons``, otherwise ``send_text_message`` with
the payloads as keyword arguments.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from typing import Any

import structlog

from subagents import events as ev
from subagents.conditions import ConditionSyntaxError, parse_condition
from subagents.config.domain import ResponseVariation
from subagents.config.project import Project
from subagents.dialogue.rephraser import Rephraser
from subagents.dialogue.turn import Turn
from subagents.templating import render_format, render_jinja
from subagents.types import OutputChannel

log = structlog.get_logger("subagents.dialogue")

INTERNAL_ERROR_RESPONSE = "utter_internal_error_rasa"
TEMPLATED, REPHRASED = "TemplatedNaturalLanguageGenerator", "ContextualResponseRephraser"
"""``utter_source`` of a response as written and of a rephrased one (set with a rephraser)."""
SEED_ENV = "SUBAGENTS_RESPONSE_SEED"
"""Environment variable: an integer seed that makes the choice among variations repeatable."""
RENDERED_KEYS = ("text", "buttons", "image", "attachment", "custom", "quick_replies", "elements")
"""The parts of a variation that are filled in and sent."""

render_template = render_format
"""Fill ``{name}`` placeholders (see :func:`subagents.templating.render_format`)."""


def condition_holds(condition: Any, values: Mapping[str, Any]) -> bool:
    """Whether a variation's ``condition`` holds.

    Args:
        condition: A condition string, a list of ``{name, value}`` slot checks, or a boolean.
        values: ``{"slots": ..., "context": ...}``.

    Returns:
        True when it holds; a condition that does not parse never holds.
    """
    if condition is None or isinstance(condition, bool):
        return condition is not False
    if isinstance(condition, str):
        try:
            return parse_condition(condition).evaluate(values)
        except ConditionSyntaxError:
            log.warning("dialogue.response.bad_condition", condition=condition[:200])
            return False
    slots = values.get("slots") or {}
    items = condition if isinstance(condition, list) else [condition]
    return all(_slot_matches(slots.get(str(item.get("name"))), item.get("value"))
               for item in items if isinstance(item, dict))


def _slot_matches(actual: Any, expected: Any) -> bool:
    if isinstance(actual, str) and isinstance(expected, str):
        return actual.casefold() == expected.casefold()
    return bool(actual == expected)


def channel_name(channel: OutputChannel | None) -> str | None:
    """The output channel's name (its ``name`` attribute or method), if it has one."""
    name = getattr(channel, "name", None)
    if callable(name):
        name = name()
    return name if isinstance(name, str) else None


def eligible_variations(variations: list[ResponseVariation], values: Mapping[str, Any],
                        channel: str | None) -> list[ResponseVariation]:
    """The group of variations a response is chosen from (see the module docstring)."""
    groups: tuple[list[ResponseVariation], ...] = ([], [], [], [])
    for variation in variations:
        wanted = variation.channel
        if wanted is not None and wanted != channel:
            continue
        conditional = variation.condition not in (None, "", [])
        if conditional and not _variation_holds(variation, values):
            continue
        groups[(0 if wanted is not None else 2) + (0 if conditional else 1)].append(variation)
    return next((group for group in groups if group), [])


def _variation_holds(variation: ResponseVariation, values: Mapping[str, Any]) -> bool:
    """The condition parsed when the project loaded, else (list form, or a variation built in
    code) :func:`condition_holds`."""
    parsed = variation.parsed_condition
    if parsed is not None:
        return parsed.evaluate(values)
    return condition_holds(variation.condition, values)


def _default_rng() -> random.Random:
    seed = os.environ.get(SEED_ENV)
    try:
        return random.Random(int(seed)) if seed else random.Random()
    except ValueError:
        log.warning("dialogue.response.bad_seed", env=SEED_ENV)
        return random.Random()


class Responder:
    """Sends the assistant's messages: domain responses, plain texts and action messages.

    Args:
        project: The loaded project (its domain responses).
        rng: The random source for choosing among variations; by default seeded from
            ``SUBAGENTS_RESPONSE_SEED`` when that is set.
        rephraser: Rephrases responses when the project configures it.
    """

    def __init__(self, project: Project, *, rng: random.Random | None = None,
                 rephraser: Rephraser | None = None) -> None:
        self.responses = project.domain.responses
        self.rng = rng or _default_rng()
        self.rephraser = rephraser

    def values(self, turn: Turn, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What a response can refer to: slots by name, ``context``, ``slots`` and ``extra``."""
        frame = turn.stack.top_flow()
        context = frame.context() if frame is not None else {}
        return {**turn.slots, "slots": dict(turn.slots), "context": context, **(extra or {})}

    def choose(self, turn: Turn, name: str,
               values: Mapping[str, Any] | None = None) -> ResponseVariation | None:
        """Choose the variation of ``name`` to send (None if the response is not defined)."""
        variations = self.responses.get(name)
        if not variations:
            return None
        values = values if values is not None else self.values(turn)
        group = eligible_variations(variations, values, channel_name(turn.channel))
        if not group:
            log.error("dialogue.response.no_variation", response=name)
            group = eligible_variations(self.responses.get(INTERNAL_ERROR_RESPONSE, []), values,
                                        channel_name(turn.channel))
        return self.rng.choice(group) if group else None

    async def utter(self, turn: Turn, name: str, **extra: Any) -> None:
        """Send the response ``name``; ``extra`` values are available to its placeholders."""
        values = self.values(turn, extra)
        variation = self.choose(turn, name, values)
        if variation is None:
            return
        jinja = _template_engine(variation, name) == "jinja"
        parts = {"text": variation.text, "buttons": variation.buttons,
                 "custom": variation.custom, **(variation.model_extra or {})}
        rendered = {key: _fill(parts[key], values, jinja) for key in RENDERED_KEYS
                    if parts.get(key)}
        text = str(rendered.pop("text", "") or "")
        metadata = {"utter_action": name, **(variation.metadata or {})}
        if self.rephraser is not None:
            metadata["utter_source"] = TEMPLATED
            if text and self.rephraser.wants(variation):
                rephrased = await self.rephraser.rephrase(turn, text, variation)
                if rephrased is not None:
                    text, metadata["utter_source"] = rephrased, REPHRASED
        await self.say(turn, text, metadata, rendered)

    async def say(self, turn: Turn, text: str, metadata: dict[str, Any],
                  data: dict[str, Any] | None = None) -> None:
        """Record a bot message and send it to the turn's channel.

        Args:
            turn: The current turn.
            text: The message text.
            metadata: Goes into the ``bot`` event's metadata.
            data: Buttons, images, custom payloads (the ``bot`` event's ``data``).
        """
        data = data or {}
        turn.add(ev.bot_uttered(text, data=data, metadata=dict(metadata)))
        if turn.channel is None:
            return
        payloads = {k: v for k, v in data.items() if k != "buttons" and v}
        if data.get("buttons"):
            await turn.channel.send_text_with_buttons(turn.sender_id, text, data["buttons"],
                                                      **payloads)
        elif text or payloads:
            await turn.channel.send_text_message(turn.sender_id, text, **payloads)

    async def send_custom_message(self, turn: Turn, message: dict[str, Any]) -> None:
        """Send a message a custom action returned (a response name or text with data)."""
        response = message.get("response") or message.get("template")
        if response:
            await self.utter(turn, str(response))
            return
        data = {k: message[k] for k in ("buttons", "custom", "image", "attachment")
                if message.get(k)}
        await self.say(turn, str(message.get("text") or ""), {}, data)


def _template_engine(variation: ResponseVariation, name: str) -> str:
    engine = (variation.metadata or {}).get("template") or "format"
    if engine not in ("format", "jinja"):
        log.warning("dialogue.response.unknown_template_engine", response=name,
                    template=str(engine)[:40])
        return "format"
    return str(engine)


def _fill(part: Any, values: Mapping[str, Any], jinja: bool) -> Any:
    """Render every string inside ``part`` (recursively through lists and mappings)."""
    if isinstance(part, str):
        return render_jinja(part, values) if jinja else render_format(part, values)
    if isinstance(part, list):
        return [_fill(item, values, jinja) for item in part]
    if isinstance(part, dict):
        return {key: _fill(item, values, jinja) for key, item in part.items()}
    return part
