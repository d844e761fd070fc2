"""A scripted car dealer served over A2A (``a2a-sdk``): a remote agent for the example assistant.

No model is involved, so its answers are predictable:

* a transcript (``USER:`` / ``AI:`` lines, as sent after a digression) counts by its last user
  line;
* a message naming a model it sells (or a ``slots.car_model`` value in a data part) completes
  the task with an artifact: a text and a data part ``{"model", "price", "in_stock"}``;
  while it "checks the stock" it sends a ``working`` status with a short text;
* otherwise it asks which model (task state ``input-required``); the answer continues the task;
* ``opening hours`` gets a plain message back (no task), and so does ``my account`` (it names
  the ``customer_tier`` from the message metadata);
* a text containing ``broken`` fails the task, ``forbidden`` rejects it, ``call it off``
  cancels it.

Run it with ``python -m subagents.demo.a2a_dealer --port 8766`` (add ``--no-streaming`` to
advertise a card without streaming). Its card is at ``/.well-known/agent-card.json``; the
interface URL in the card is the address the card was fetched from.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from a2a.helpers import new_data_part, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import AgentCard, AgentSkill, Part
from starlette.applications import Starlette

from subagents.server.a2a import a2a_routes, agent_card, cancel_task, incoming_slots, task_updater

STOCK = {"corolla": 24500, "civic": 26900, "model 3": 41990}


def _latest_user_text(text: str) -> str:
    """A transcript (``USER: ...`` / ``AI: ...`` lines) counts by its last user line."""
    users = [line[5:].strip() for line in text.splitlines() if line.startswith("USER:")]
    return users[-1] if users else text


def _wanted_model(text: str, slots: dict[str, Any]) -> str | None:
    for candidate in (str(slots.get("car_model") or ""), text):
        lowered = candidate.lower()
        for model in STOCK:
            if model in lowered:
                return model
    return None


def _message_metadata(context: RequestContext) -> dict[str, Any]:
    if context.message is None or not context.message.HasField("metadata"):
        return {}
    return dict(context.message.metadata.items())


class DealerExecutor(AgentExecutor):
    """The dealer's behaviour (see the module docstring)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Answer one user message."""
        text = _latest_user_text(context.get_user_input())
        if "opening hours" in text.lower():
            await event_queue.enqueue_event(new_text_message(
                "We are open Monday to Saturday, 9:00 to 18:00.",
                context_id=context.context_id, task_id=None))
            return
        if "my account" in text.lower():
            tier = _message_metadata(context).get("customer_tier") or "unknown"
            await event_queue.enqueue_event(new_text_message(
                f"Your customer tier: {tier}.", context_id=context.context_id, task_id=None))
            return
        updater = await task_updater(context, event_queue)
        if "broken" in text.lower():
            await updater.failed(updater.new_agent_message(
                [Part(text="Our stock system is down.")]))
            return
        if "forbidden" in text.lower():
            await updater.reject(updater.new_agent_message(
                [Part(text="I cannot help with that.")]))
            return
        if "call it off" in text.lower():
            await updater.cancel(updater.new_agent_message([Part(text="Cancelled.")]))
            return
        model = _wanted_model(text, incoming_slots(context))
        if model is None:
            await updater.requires_input(updater.new_agent_message([Part(
                text="Which model are you looking for? We have the Corolla, the Civic and the "
                     "Model 3.")]))
            return
        await updater.start_work(updater.new_agent_message([Part(
            text=f"Checking our stock for the {model.title()}...")]))
        price = STOCK[model]
        await updater.add_artifact([
            Part(text=f"The {model.title()} is in stock at ${price:,}."),
            new_data_part({"model": model, "price": price, "in_stock": True})], name="offer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the running task."""
        await cancel_task(context, event_queue)


def dealer_card(*, streaming: bool = True) -> AgentCard:
    """The dealer's agent card (the interface URL is filled in per request)."""
    return agent_card(
        "car_dealer", "Checks whether a car model is in stock and its price.",
        AgentSkill(id="stock", name="Stock check", tags=["cars"],
                   description="Price and availability of a car model."), streaming=streaming)


def build_app(*, streaming: bool = True) -> Starlette:
    """The dealer as an ASGI app: card at ``/.well-known/agent-card.json``, JSON-RPC at ``/``."""
    return Starlette(routes=a2a_routes(dealer_card(streaming=streaming), DealerExecutor(),
                                       prefix=""))


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the dealer with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="subagents.demo.a2a_dealer")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--no-streaming", action="store_true")
    args = parser.parse_args(argv)
    uvicorn.run(build_app(streaming=not args.no_streaming), host=args.host, port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
