"""Dialogue understanding: deterministic inputs first, then the LLM command generator."""

from __future__ import annotations

from typing import Any

import structlog

from ..config.project import Project
from ..llm import LLMClient
from .commands import Command, parse_commands
from .stack import Stack

log = structlog.get_logger("subagents.dialogue")

PROMPT = """You route messages in a conversation between a user and an assistant. Read the \
conversation and the user's last message, then answer with commands, one per line, and nothing \
else.

Commands:
- start flow <flow_id>: the user wants to do one of the flows below
- set slot <slot_name> <value>: the user gave a value for a slot of the current flow
- cancel flow: the user wants to stop what the current flow is doing
{agent_commands}{pattern_commands}- offtopic reply: small talk or a message unrelated to any flow
- cannot handle: none of the above fits

Flows:
{flows}

Current state:
{state}

Conversation:
{conversation}

User's last message: {message}

Commands:"""


PATTERN_COMMANDS = {
    "pattern_clarification": "- disambiguate flows <flow_id> <flow_id> ...: the message could "
                             "mean several of the flows below; name them\n",
    "pattern_repeat_bot_messages": "- repeat message: the user wants to hear the assistant's "
                                   "last message again\n",
    "pattern_skip_question": "- skip question: the user wants to skip the question being "
                             "asked\n",
}
"""Commands offered to the model only when the project has the pattern they run."""


class CommandGenerator:
    """Asks a model for commands; its caller name (fake server path) is ``command_generator``."""

    def __init__(self, project: Project, llm: LLMClient) -> None:
        self.project = project
        self.llm = llm

    def _flows(self) -> str:
        lines = []
        for flow in self.project.flows.values():
            if flow.id.startswith("pattern_"):
                continue
            line = f"- {flow.id}: {flow.description.strip()}"
            agents = [s.model.call for s in flow.steps
                      if s.kind == "call" and s.model.call in self.project.agents]
            if agents:
                line += f" (uses sub agents: {', '.join(agents)})"
            lines.append(line)
        return "\n".join(lines) or "(none)"

    def _state(self, stack: Stack, slots: dict[str, Any], events: list[dict[str, Any]]
               ) -> tuple[str, str]:
        lines = []
        agent_commands = ""
        top = stack.top_user_flow()
        if top is not None:
            flow = self.project.flows.get(top.flow_id)
            lines.append(f"- active flow: {top.flow_id}")
            if flow is not None:
                collected = sorted({str(s.model.collect) for s in flow.steps
                                    if s.kind == "collect"})
                for name in collected:
                    lines.append(f"- slot {name} = {slots.get(name)!r}")
        frame = stack.top()
        awaiting = getattr(frame, "awaiting", None)
        if awaiting:
            lines.append(f"- the assistant asked for slot {awaiting}")
        active = stack.active_agent()
        if active is not None:
            spec = self.project.agents.get(active.agent_id)
            description = spec.config.agent.description.strip() if spec else ""
            lines.append(f"- active sub agent: {active.agent_id} ({description})")
            agent_commands += ("- continue agent: the message is for the active sub agent "
                               "(answers its question or continues its task)\n")
        completed = completed_agents(events)
        if completed:
            lines.append(f"- completed sub agents: {', '.join(completed)}")
            agent_commands += ("- restart agent <agent_name>: the user wants a completed sub "
                               "agent to do its task again\n")
        return ("\n".join(lines) or "- no active flow"), agent_commands

    def render(self, text: str, stack: Stack, slots: dict[str, Any],
               events: list[dict[str, Any]]) -> str:
        """The prompt for the message ``text`` in the given conversation state."""
        state, agent_commands = self._state(stack, slots, events)
        pattern_commands = "".join(line for flow_id, line in PATTERN_COMMANDS.items()
                                   if flow_id in self.project.flows)
        return PROMPT.format(flows=self._flows(), state=state, agent_commands=agent_commands,
                             pattern_commands=pattern_commands,
                             conversation=transcript(events, 20) or "(empty)", message=text)

    async def predict(self, text: str, stack: Stack, slots: dict[str, Any],
                      events: list[dict[str, Any]]) -> list[Command]:
        """Ask the model which commands the message ``text`` means."""
        prompt = self.render(text, stack, slots, events)
        response = await self.llm.complete([{"role": "user", "content": prompt}], None)
        commands = parse_commands(response.text)
        log.info("dialogue.commands.predicted", commands=[type(c).__name__ for c in commands])
        return commands


def transcript(events: list[dict[str, Any]], lines: int) -> str:
    """``USER: ...`` / ``AI: ...`` lines (agent turns prefixed with the agent's name)."""
    out = []
    for event in events:
        if event.get("event") == "user":
            out.append(f"USER: {event.get('text') or ''}")
        elif event.get("event") == "bot" and event.get("text"):
            agent = (event.get("metadata") or {}).get("agent_name")
            out.append(f"{agent if agent else 'AI'}: {event['text']}")
    return "\n".join(out[-lines:])


def completed_agents(events: list[dict[str, Any]]) -> list[str]:
    """Agents whose latest started/completed event is a completion (they may be restarted)."""
    last: dict[str, str] = {}
    for event in events:
        if event.get("event") in ("agent_started", "agent_completed"):
            last[str(event.get("agent_id"))] = str(event["event"])
    return [name for name, kind in last.items() if kind == "agent_completed"]

