"""Responses: choosing a variation of an ``utter_*`` response, filling it in and sending it."""

from __future__ import annotations

import re
from typing import Any

from .. import events as ev
from ..config.domain import ResponseVariation
from ..config.project import Project
from .turn import Turn

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def render_template(text: str, slots: dict[str, Any]) -> str:
    """Replace ``{slot}`` placeholders with slot values (unset slots stay as written)."""
    return _PLACEHOLDER.sub(lambda m: str(slots[m.group(1)]) if m.group(1) in slots and
                            slots[m.group(1)] is not None else m.group(0), text)


class Responder:
    """Sends the assistant's messages: domain responses, plain texts and action messages.

    Args:
        project: The loaded project (its domain responses).
    """

    def __init__(self, project: Project) -> None:
        self.responses = project.domain.responses

    async def utter(self, turn: Turn, name: str) -> None:
        """Send the response ``name`` (nothing if no variation applies)."""
        variation = self.pick_variation(turn, name)
        if variation is None:
            return
        text = render_template(variation.text or "", turn.slots)
        data: dict[str, Any] = {}
        if variation.buttons:
            data["buttons"] = [{**b, "title": render_template(str(b.get("title", "")),
                                                                turn.slots)}
                               for b in variation.buttons]
        if variation.custom:
            data["custom"] = variation.custom
        await self.say(turn, text, {"utter_action": name, **(variation.metadata or {})}, data)

    def pick_variation(self, turn: Turn, name: str) -> ResponseVariation | None:
        """The first variation of ``name`` whose slot conditions hold."""
        for variation in self.responses.get(name, []):
            conditions = variation.condition or []
            if all(turn.slots.get(str(c.get("name"))) == c.get("value") for c in conditions
                   if isinstance(c, dict)):
                return variation
        return None

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
        if data.get("buttons"):
            await turn.channel.send_text_with_buttons(turn.sender_id, text, data["buttons"])
        elif text:
            await turn.channel.send_text_message(turn.sender_id, text,
                                                 **({"custom": data["custom"]}
                                                    if data.get("custom") else {}))

    async def send_custom_message(self, turn: Turn, message: dict[str, Any]) -> None:
        """Send a message a custom action returned (a response name or text with data)."""
        response = message.get("response") or message.get("template")
        if response:
            await self.utter(turn, str(response))
            return
        data = {k: message[k] for k in ("buttons", "custom", "image", "attachment")
                if message.get(k)}
        await self.say(turn, str(message.get("text") or ""), {}, data)
