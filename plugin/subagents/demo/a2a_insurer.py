"""A scripted health insurer served over A2A (``a2a-sdk``): the remote agent of the example
assistant's ``insurance_checker``.

No model is involved, so its answers are predictable:

* a transcript (``USER:`` / ``AI:`` lines, as sent after a digression) counts by its last user
  line;
* a message with an insurance number (``INS-`` and digits, or a ``slots.insurance_number``
  value in a data part) completes the task: a ``working`` status while it "asks the insurer",
  then an artifact with a text and a data part ``{"policy", "covered", "co_payment"}``;
  numbers ending in 0 are not covered;
* otherwise it asks for the number (task state ``input-required``); the answer continues the
  task.

Run it with ``python -m subagents.demo.a2a_insurer --port 8767`` and point the example at it
with ``export CLINIC_INSURER_URL=http://127.0.0.1:8767``. Its card is at
``/.well-known/agent-card.json``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from a2a.helpers import new_data_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import AgentCard, AgentSkill, Part
from starlette.applications import Starlette

from subagents.server.a2a import a2a_routes, agent_card, cancel_task, incoming_slots, task_updater

DEFAULT_PORT = 8767
ASK_NUMBER = "Which insurance number is on the patient's card? It starts with INS-."
_NUMBER = re.compile(r"\bINS-\d+\b", re.IGNORECASE)


def _latest_user_text(text: str) -> str:
    users = [line[5:].strip() for line in text.splitlines() if line.startswith("USER:")]
    return users[-1] if users else text


def _policy(text: str, context: RequestContext) -> str | None:
    slots = incoming_slots(context)
    for candidate in (str(slots.get("insurance_number") or ""), text):
        found = _NUMBER.search(candidate)
        if found:
            return found.group(0).upper()
    return None


class InsurerExecutor(AgentExecutor):
    """The insurer's behaviour (see the module docstring)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Answer one user message."""
        text = _latest_user_text(context.get_user_input())
        updater = await task_updater(context, event_queue)
        policy = _policy(text, context)
        if policy is None:
            await updater.requires_input(updater.new_agent_message([Part(text=ASK_NUMBER)]))
            return
        await updater.start_work(updater.new_agent_message([Part(
            text=f"Checking policy {policy} with the insurer...")]))
        covered = not policy.endswith("0")
        answer = (f"Policy {policy} covers the visit; the co-payment is 15 EUR." if covered
                  else f"Policy {policy} does not cover this visit.")
        await updater.add_artifact([Part(text=answer), new_data_part(
            {"policy": policy, "covered": covered, "co_payment": 15 if covered else None})],
            name="coverage")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the running task."""
        await cancel_task(context, event_queue)


def insurer_card() -> AgentCard:
    """The insurer's agent card (the interface URL is filled in per request)."""
    return agent_card(
        "clinic_insurer", "Checks whether a patient's insurance covers a visit.",
        AgentSkill(id="coverage", name="Coverage check", tags=["insurance"],
                   description="Whether a policy covers a visit, and the co-payment."))


def build_app() -> Starlette:
    """The insurer as an ASGI app: card at ``/.well-known/agent-card.json``, JSON-RPC at ``/``."""
    return Starlette(routes=a2a_routes(insurer_card(), InsurerExecutor(), prefix=""))


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the insurer with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="subagents.demo.a2a_insurer")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    print(f"Demo insurer (A2A) on http://{args.host}:{args.port}; point the example at it: "
          f"export CLINIC_INSURER_URL=http://{args.host}:{args.port}", flush=True)
    uvicorn.run(build_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
