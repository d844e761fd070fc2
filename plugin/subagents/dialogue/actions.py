"""Custom actions: rasa-sdk ``Action`` classes in process, or a rasa-sdk action server over HTTP.

In process, the project's ``actions`` package (``actions/`` or ``actions.py`` in the project
folder; ``action_endpoint.actions_module`` names another) is registered with rasa-sdk's
``ActionExecutor``. With ``action_endpoint.url`` the standard webhook payload is POSTed there.
Either way the returned events are applied and the dispatcher's messages are sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from subagents.config.project import Project, import_from_project
from subagents.exceptions import SubagentsError

if TYPE_CHECKING:
    from subagents.dialogue.turn import Turn

log = structlog.get_logger("subagents.actions")

MAX_ACTION_REPLY = 16 * 1024 * 1024
"""Bytes an action server's reply may have; a larger one fails the action."""
ACTION_TIMEOUT = 30.0
"""Seconds an action server has to answer."""


class ActionFailedError(SubagentsError):
    """A custom action could not be run or raised; the flow is cancelled."""

    code = "action.failed"


class ActionRunner:
    """Runs the project's custom actions, in process or on an action server.

    Args:
        project: The loaded project (its action endpoint and domain).
        stubs: Action name -> ``{events, responses}`` returned instead of running the action
            (conversation tests).
    """

    def __init__(self, project: Project, *, stubs: dict[str, Any] | None = None) -> None:
        self.project = project
        self.root: Path = project.root
        endpoint = project.endpoints.action_endpoint
        self.url = endpoint.url if endpoint else None
        self.module = (endpoint.actions_module if endpoint else None) or "actions"
        self.stubs = stubs
        """Name -> {events, responses}: used instead of running actions (e2e stubs)."""
        self._executor: Any = None
        self._client: Any = None
        """The HTTP client of the action server, kept for every call (its connections and
        TLS set-up are reused)."""

    def tracker_state(self, turn: Turn) -> dict[str, Any]:
        """The conversation in the tracker shape rasa-sdk actions receive (with the turn's
        events: every one after :meth:`Turn.all_events`)."""
        latest: dict[str, Any] = next((e for e in reversed(turn.events)
                                       if e.get("event") == "user"), {})
        action = next((e.get("name") for e in reversed(turn.events)
                       if e.get("event") == "action"), None)
        return {"sender_id": turn.sender_id, "slots": dict(turn.slots),
                "latest_message": {"text": latest.get("text"), "intent": {}, "entities": [],
                                   "metadata": latest.get("metadata") or {}},
                "events": list(turn.events), "paused": False, "followup_action": None,
                "active_loop": {}, "latest_action_name": action,
                "stack": turn.stack.to_list()}

    def domain_dict(self) -> dict[str, Any]:
        """The domain in the shape rasa-sdk actions receive."""
        domain = self.project.domain
        return {"slots": {k: v.model_dump(exclude_none=True) for k, v in domain.slots.items()},
                "responses": {k: [r.model_dump(exclude_none=True) for r in v]
                              for k, v in domain.responses.items()},
                "actions": list(domain.actions)}

    async def run(self, name: str, turn: Turn, project: Project
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return (messages to send, events to apply)."""
        if self.stubs is not None and name in self.stubs:
            stub = self.stubs[name] or {}
            return list(stub.get("responses") or []), list(stub.get("events") or [])
        await turn.all_events()  # rasa-sdk's tracker holds every event of the conversation
        call = {"next_action": name, "sender_id": turn.sender_id,
                "tracker": self.tracker_state(turn), "domain": self.domain_dict(),
                "version": "3.21.0"}
        try:
            result = await (self._http(call) if self.url else self._in_process(call))
        except ActionFailedError:
            raise
        except Exception as exc:
            raise ActionFailedError(f"custom action {name!r} failed: {type(exc).__name__}: "
                                    f"{exc}") from exc
        return list(result.get("responses") or []), list(result.get("events") or [])

    async def _in_process(self, call: dict[str, Any]) -> dict[str, Any]:
        if self._executor is None:
            try:
                from rasa_sdk.executor import ActionExecutor
            except ImportError as exc:
                raise ActionFailedError(
                    f"custom action {call['next_action']!r}: running custom actions needs the "
                    "'actions' extra (rasa-sdk): pip install 'subagents[actions]'") from exc

            executor = ActionExecutor()
            try:
                package = import_from_project(self.root, self.module)
            except ImportError as exc:
                raise ActionFailedError(
                    f"custom action {call['next_action']!r}: cannot import the actions "
                    f"package {self.module!r} from {self.root}: {exc}") from exc
            try:
                executor.register_package(package)
            except SystemExit as exc:  # rasa-sdk exits the process when an import fails
                raise ActionFailedError(
                    f"custom action {call['next_action']!r}: importing the actions package "
                    f"{self.module!r} failed (see the log)") from exc
            self._executor = executor
        result = await self._executor.run(call)
        if result is None:
            return {}
        return dict(result.model_dump(by_alias=True))

    async def _http(self, call: dict[str, Any]) -> dict[str, Any]:
        """POST the call to the action server; its reply, read with a cap, as a JSON object."""
        import httpx2

        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=ACTION_TIMEOUT)
        name = call["next_action"]
        raw = bytearray()
        async with self._client.stream("POST", str(self.url), json=call) as response:
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_ACTION_REPLY:
                    raise ActionFailedError(f"the action server's reply for {name!r} is larger "
                                            f"than {MAX_ACTION_REPLY} bytes")
        if response.status_code != 200:
            text = bytes(raw[:200]).decode("utf-8", "replace")
            raise ActionFailedError(f"action server answered HTTP {response.status_code} for "
                                    f"{name!r}: {text}")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise ActionFailedError(f"the action server's reply for {name!r} is not JSON: "
                                    f"{exc}") from exc
        if not isinstance(body, dict):
            raise ActionFailedError(f"the action server's reply for {name!r} is not a JSON "
                                    "object")
        return body

    async def close(self) -> None:
        """Close the action server's connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
