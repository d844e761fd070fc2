"""What the model reads: the system prompt, the history, this run's exchange and the tools.

The prompt template is compiled once per agent (:func:`compile_template`). Within a run the
rendered prompt is reused while its context is unchanged (a slot set during the run renders it
again), and the history while no event was added; a project's own prompt hooks are called on
every step.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio

from subagents.agents._limits import capped_render, capped_render_async
from subagents.agents.hooks import AgentHooks
from subagents.agents.run import Run
from subagents.agents.transcript import history_messages
from subagents.config.sub_agent import AgentConfiguration
from subagents.exceptions import AgentInitializationError
from subagents.types import AgentInput, ChatMessage, JsonObject

TEMPLATES = Path(__file__).with_name("templates")
INLINE_HISTORY_EVENTS = 500
"""Above this many events the history is built in a worker thread with the prompt."""


# ---------------------------------------------------------------------------- the template
def default_template(file_name: str) -> str:
    """The text of a built-in prompt template."""
    return (TEMPLATES / file_name).read_text(encoding="utf-8")


def compile_template(configuration: AgentConfiguration, project_root: Path, agent: str,
                     default: Any) -> Any:
    """The agent's Jinja template: ``configuration.prompt_template`` (a file inside the
    project) or the built-in one (``default()`` gives its text), in a sandbox."""
    from jinja2.sandbox import SandboxedEnvironment

    path = configuration.prompt_template
    text = _project_template(project_root, path, agent) if path else default()
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(text)


def _project_template(project_root: Path, path: str, agent: str) -> str:
    root = project_root.resolve()
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root):
        raise AgentInitializationError(
            f"agent {agent!r}: configuration.prompt_template {path!r} is outside the "
            f"project folder {root}", code="agent.prompt_template.outside_project")
    return resolved.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- the default hooks
def prompt_values(agent: AgentHooks, context: AgentInput) -> dict[str, Any]:
    """What the default ``_build_context_for_prompt`` gives the template."""
    meta = context.metadata
    conf = agent.configuration
    values: dict[str, Any] = {
        "description": agent.description, "user_message": context.user_message,
        "slots": {s.name: s.value for s in context.slots if s.value is not None},
        "conversation_history": context.conversation_history,
        "recipient_id": context.recipient_id, "agent_name": agent.name,
        "enable_filler_messages": conf.enable_filler_messages,
        "resumed_after_interruption": bool(meta.get("resumed_after_interruption")),
        "resumed_last_request": str(meta.get("agent_response") or ""),
        "restarted": bool(meta.get("restarted"))}
    if conf.include_date_time:
        values["current_datetime"] = now(conf, context)
    return values


def now(configuration: AgentConfiguration, context: AgentInput) -> datetime:
    """The current time in the agent's time zone (``mocked_datetime`` when set)."""
    tz = ZoneInfo(configuration.timezone or "UTC")
    mocked = context.metadata.get("mocked_datetime")
    slot = context.slot("mocked_datetime")
    mocked = mocked or (slot.value if slot is not None else None)
    if mocked:
        with contextlib.suppress(ValueError, TypeError):
            parsed = datetime.fromisoformat(str(mocked))
            return parsed.astimezone(tz) if parsed.tzinfo else parsed.replace(tzinfo=tz)
    return datetime.now(tz)


def render(agent: AgentHooks, context: AgentInput) -> str:
    """The default ``render_prompt_template``: cut after ``max_prompt_chars`` characters."""
    return capped_render(agent._template, agent._build_context_for_prompt(context),
                         agent.max_prompt_chars)


def build_messages(agent: AgentHooks, context: AgentInput, turns: int) -> list[ChatMessage]:
    """The default ``build_messages_for_llm_request``: system prompt, then history."""
    messages = [{"role": "system", "content": agent.render_prompt_template(context)}]
    messages += history_messages(context, agent.name, turns)
    return messages


# ---------------------------------------------------------------------------- one step's messages
async def conversation(agent: AgentHooks, run: Run) -> list[ChatMessage]:
    """System prompt and history. The prompt renders on the event loop for at most a
    millisecond, then finishes in a worker thread (a thread hop costs more than a typical
    render); a replaced builder, or a long history, is built in the thread whole."""
    replaced = run.hooks_replaced
    if ("build_messages_for_llm_request" in replaced or "render_prompt_template" in replaced
            or len(run.input.events) > INLINE_HISTORY_EVENTS):
        return await anyio.to_thread.run_sync(agent.build_messages_for_llm_request, run.input)
    return [{"role": "system", "content": await _system_prompt(agent, run)},
            *_history(agent, run)]


async def _system_prompt(agent: AgentHooks, run: Run) -> str:
    values = agent._build_context_for_prompt(run.input)
    cached = run.prompt_cache
    if cached is not None and _same_inputs(cached[0], values):
        return cached[1]
    system = await capped_render_async(agent._template, values, agent.max_prompt_chars)
    if "_build_context_for_prompt" not in run.hooks_replaced:  # ours builds from the input
        run.prompt_cache = (values, system)
    return system


def _same_inputs(cached: dict[str, Any], values: dict[str, Any]) -> bool:
    """Whether the prompt rendered from ``cached`` still holds for ``values``: the clock is
    read once per run (as in Rasa, the prompt is built once per invocation), so every step of a
    run sends the same system prompt and a server's prompt cache keeps the conversation."""
    if "current_datetime" not in values:
        return cached == values  # one comparison in C
    return cached.keys() == values.keys() and all(
        key == "current_datetime" or cached[key] == value for key, value in values.items())


def _history(agent: AgentHooks, run: Run) -> list[ChatMessage]:
    events, metadata = run.input.events, run.input.metadata
    key = (id(events), len(events), id(events[-1]) if events else None,
           run.input.user_message, metadata.get("restarted"))
    cached = run.history_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    messages = history_messages(run.input, agent.name, 10)
    run.history_cache = (key, messages)
    return messages


def offered(run: Run) -> list[JsonObject]:
    """The schemas of the run's offered tools, in the model's format."""
    tools = tuple(run.tools.values())
    cached = run.offered_cache
    if cached is None or cached[0] != tools:
        cached = run.offered_cache = (tools, [tool.schema.to_openai() for tool in tools])
    return list(cached[1])
