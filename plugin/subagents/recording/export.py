"""Turning a recorded conversation (its tracker events) into a conversation test.

The test has the conversation's user messages as steps, its bot messages as expectations, an
``llm_script`` per caller made of the recorded model replies, and a ``tool_script`` with the
recorded results of MCP tools (agents' calls and flow tool steps') and an ``a2a_script`` with
the recorded answers of A2A agents, so it runs with neither the model nor the MCP servers nor
the remote agents; the project's A2A agents the conversation never called get a stand-in that
expects no call. Used by
``subagents test export`` and by the HTTP API (``GET /conversations/{sender}/test``), which
therefore export the same test.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from subagents.exceptions import ConfigError, ConfigIssue
from subagents.recording import turn as recording

if TYPE_CHECKING:
    from subagents.config.project import Project


class ExportError(ConfigError):
    """The conversation cannot be exported (unknown, or not recorded)."""


def _fail(code: str, message: str, hint: str | None = None) -> ExportError:
    return ExportError(ConfigIssue(code, message, hint=hint))


def a2a_agent_names(project: Project) -> list[str]:
    """The names of the project's A2A agents (remote agents reached over the A2A protocol)."""
    return [name for name, spec in project.agents.items()
            if spec.config.agent.protocol.value == "A2A"]


def build_fixture(sender_id: str, events: list[dict[str, Any]],
                  a2a_agents: Iterable[str] = ()) -> dict[str, Any]:
    """The conversation-test document for a recorded conversation's events.

    Args:
        sender_id: The conversation's id (names the test case).
        events: The conversation's tracker events.
        a2a_agents: The project's A2A agents. Each one the conversation never called gets a
            stand-in that expects no call (``a2a_script: {agent: []}``), so the test needs
            none of the remote agents.

    Raises:
        ExportError: the conversation has no events, or a turn of it was not recorded.
    """
    if not any(e.get("event") == "user" for e in events):
        raise _fail("export.no_conversation", f"conversation {sender_id!r} has no user message "
                    "in the tracker store")
    steps: list[dict[str, Any]] = []
    script: dict[str, list[Any]] = {}
    tools: dict[str, list[dict[str, Any]]] = {}
    remote: dict[str, list[Any]] = {}
    unrecorded = 0
    for event in events:
        if recording.is_switch_event(event):
            continue
        if event.get("event") == "action" and event.get("name") == "action_listen" and steps:
            entries = (event.get("metadata") or {}).get(recording.METADATA_KEY)
            if not isinstance(entries, list):
                unrecorded += 1
                continue
            for entry in entries:
                _add_entry(entry, script, tools, remote)
        else:
            step = _step(event, bool(steps))
            if step is not None:
                steps.append(step)
    if unrecorded:
        raise _fail("export.not_recorded", f"{unrecorded} turn(s) of conversation "
                    f"{sender_id!r} were not recorded, so the test could not replay them",
                    hint="record from the first message on: subagents serve --record, or "
                    "turn recording on for the conversation before it starts")
    case: dict[str, Any] = {"test_case": _case_name(sender_id)}
    if script:
        case["llm_script"] = script
    # Always there (even empty): every MCP server is then replaced by a stand-in, so the test
    # needs none of them, also those the conversation never called.
    case["tool_script"] = tools
    called = {e.get("agent_id") for e in events if e.get("event") == "agent_started"}
    remote.update({name: [] for name in a2a_agents if name not in called and name not in remote})
    if remote:
        case["a2a_script"] = remote
    case["steps"] = steps
    return {"test_cases": [case]}


def _step(event: dict[str, Any], after_first: bool) -> dict[str, Any] | None:
    kind = event.get("event")
    if kind == "user":
        return {"user": str(event.get("text") or "")}
    if kind == "client_tool_result":
        return {"client_tool_result": {"id": event.get("tool_call_id"),
                                       "result": event.get("result")}}
    if kind == "bot" and after_first:
        return _bot_step(event)
    return None


def _bot_step(event: dict[str, Any]) -> dict[str, Any] | None:
    text = event.get("text")
    utter = (event.get("metadata") or {}).get("utter_action")
    if utter:
        return {"utter": str(utter)}
    if text:
        return {"bot": str(text)}
    return None


def _add_entry(entry: dict[str, Any], script: dict[str, list[Any]],
               tools: dict[str, list[dict[str, Any]]], remote: dict[str, list[Any]]) -> None:
    if entry.get("kind") == "a2a":
        if isinstance(entry.get("reply"), dict):
            remote.setdefault(str(entry.get("agent")), []).append(dict(entry["reply"]))
    elif entry.get("kind") == "model":
        caller = str(entry.get("caller") or "llm")
        if entry.get("error"):
            script.setdefault(caller, []).append({"error": dict(entry["error"])})
            return
        response = entry.get("response") or {}
        calls = [{"name": c.get("name"), "arguments": c.get("arguments"), "id": c.get("id")}
                 for c in response.get("tool_calls") or []]
        reply: Any = response.get("text")
        if calls:
            reply = {"text": response.get("text"), "tool_calls": calls}
        script.setdefault(caller, []).append(reply if reply is not None else {"text": None})
    elif entry.get("kind") == "tool" and str(entry.get("source", "")).startswith("mcp:"):
        server = str(entry["source"]).split(":", 1)[1]
        item: dict[str, Any] = {"tool": entry.get("tool_name"),
                                "arguments": entry.get("arguments") or {},
                                **_tool_result(entry.get("result"))}
        if entry.get("description"):
            item["description"] = entry["description"]
        if entry.get("input_schema"):
            item["input_schema"] = entry["input_schema"]
        tools.setdefault(server, []).append(item)


def _tool_result(result: Any) -> dict[str, Any]:
    """The ``result`` (text), ``is_error`` and ``structured_content`` keys of a recorded MCP
    tool call: an agent's tool result (``result``, ``is_error``, ``error_message``), a flow
    tool step's call result (``content``, ``structuredContent``, ``isError``), or an error."""
    if not isinstance(result, dict):
        return {"result": result if result is not None else ""}
    if "content" in result and "isError" in result:  # a flow tool step's call result
        texts = [str(c.get("text") or "") for c in result.get("content") or []
                 if isinstance(c, dict) and c.get("type") == "text"]
        item: dict[str, Any] = {"result": "\n".join(texts)}
        if isinstance(result.get("structuredContent"), dict):
            item["structured_content"] = result["structuredContent"]
        if result.get("isError"):
            item["is_error"] = True
        return item
    if result.get("is_error"):
        return {"result": result.get("error_message") or "", "is_error": True}
    text = result.get("result")
    return {"result": text if text is not None else ""}


def _case_name(sender_id: str) -> str:
    return "recorded_" + (re.sub(r"[^A-Za-z0-9_]+", "_", sender_id).strip("_") or "conversation")


def dump_fixture(document: dict[str, Any], sender_id: str) -> str:
    """The fixture as YAML text, with a comment saying where it came from."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 100
    yaml.allow_unicode = True
    out = io.StringIO()
    out.write(f"# Exported from the recorded conversation {sender_id!r}: the recorded model "
              "replies\n# (llm_script), MCP tool results (tool_script) and A2A agent answers "
              "(a2a_script)\n# replay it offline.\n")
    yaml.dump(document, out)
    return out.getvalue()
