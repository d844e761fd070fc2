"""Socket.IO channel speaking the protocol of Rasa's web widgets (``rasa-webchat`` and others).

The client emits ``session_request`` ``{"session_id"}`` and gets ``session_confirm`` with the
session id (a new one when it sent none). It sends messages as the user event (default
``user_uttered``) ``{"message", "session_id", "<metadata_key>": {...}}`` and receives bot
messages as the bot event (default ``bot_uttered``): ``{"text"}``, ``{"text", "quick_replies"}``
for buttons, or a custom payload as it was written. With ``session_persistence`` the
conversation is keyed by the session id and survives reconnects (every socket of a session gets
the answers); without it each socket is its own conversation.

Agent fillers are emitted as soon as the agent writes them, before its tools run. A
client-executed tool is requested with a ``client_tool_request`` event ``{"id", "name",
"arguments"}``; the client answers with ``client_tool_result`` ``{"session_id", "id",
"result"}``. Approvals are ordinary yes/no questions. With ``jwt_key`` a client must connect
with ``auth: {"token": "<JWT>"}`` signed with that key.

Needs the ``socketio`` extra (``python-socketio``).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from subagents.channels.input import BackgroundTurns, InputChannel
from subagents.types import OutputChannel

if TYPE_CHECKING:
    import socketio

    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.channels.socketio")
CLIENT_TOOL_REQUEST = "client_tool_request"
CLIENT_TOOL_RESULT = "client_tool_result"


class SocketIOOutput(OutputChannel):
    """Emits each bot message to the recipient's room as soon as it exists."""

    name = "socketio"
    """The channel name responses can be written for (``channel:`` in a response)."""
    can_send_later = True

    def __init__(self, sio: socketio.AsyncServer, bot_message_evt: str,
                 namespace: str | None = None) -> None:
        self.sio = sio
        self.bot_message_evt = bot_message_evt
        self.namespace = namespace

    async def _emit(self, recipient_id: str, event: str, data: Any) -> None:
        await self.sio.emit(event, data, room=recipient_id, namespace=self.namespace)

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Emit each paragraph as a bot message, then any custom payload and image."""
        if kwargs.get("buttons"):
            await self.send_text_with_buttons(recipient_id, text, kwargs["buttons"])
            return
        for paragraph in (p for p in text.strip().split("\n\n") if p.strip()):
            await self._emit(recipient_id, self.bot_message_evt, {"text": paragraph})
        if kwargs.get("custom"):
            await self._emit(recipient_id, self.bot_message_evt, kwargs["custom"])
        if kwargs.get("image"):
            await self._emit(recipient_id, self.bot_message_evt, {
                "attachment": {"type": "image", "payload": {"src": kwargs["image"]}}})

    async def send_text_with_buttons(self, recipient_id: str, text: str,
                                     buttons: list[dict[str, Any]], **kwargs: Any) -> None:
        """Emit the text with the buttons as ``quick_replies``."""
        replies = [{"content_type": "text", "title": str(b.get("title", "")),
                    "payload": str(b.get("payload", b.get("title", "")))} for b in buttons]
        await self._emit(recipient_id, self.bot_message_evt,
                         {"text": text, "quick_replies": replies})

    async def send_event(self, recipient_id: str, event: dict[str, Any]) -> None:
        """Forward a request for a client-executed tool to the browser; other events are dropped."""
        if event.get("event") == "agent_client_tool_requested":
            await self._emit(recipient_id, CLIENT_TOOL_REQUEST, {
                "id": event.get("tool_call_id"), "name": event.get("tool_name"),
                "arguments": event.get("arguments") or {}})


class SocketIOInput(InputChannel):
    """The Socket.IO endpoint (``/socket.io`` by default)."""

    name = "socketio"

    def __init__(self, user_message_evt: str = "user_uttered",
                 bot_message_evt: str = "bot_uttered", *, session_persistence: bool = False,
                 socketio_path: str = "/socket.io", metadata_key: str = "metadata",
                 jwt_key: str | None = None, jwt_method: str = "HS256",
                 namespace: str | None = None,
                 cors_allowed_origins: str | list[str] | None = None) -> None:
        self.user_message_evt = user_message_evt
        self.bot_message_evt = bot_message_evt
        self.session_persistence = session_persistence
        self.socketio_path = "/" + socketio_path.strip("/")
        self.metadata_key = metadata_key
        self.jwt_key = jwt_key
        self.jwt_method = jwt_method
        self.namespace = namespace
        self.cors_allowed_origins: str | list[str] = cors_allowed_origins or []
        self.sio: socketio.AsyncServer | None = None
        self.turns = BackgroundTurns(self.name)

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> SocketIOInput:
        """Build the channel from its ``credentials.yml`` section."""
        creds = credentials or {}
        persistence = creds.get("session_persistence", False)
        if isinstance(persistence, str):
            persistence = persistence.strip().lower() in ("true", "yes", "1")
        return cls(creds.get("user_message_evt") or "user_uttered",
                   creds.get("bot_message_evt") or "bot_uttered",
                   session_persistence=bool(persistence),
                   socketio_path=creds.get("socketio_path") or "/socket.io",
                   metadata_key=creds.get("metadata_key") or "metadata",
                   jwt_key=creds.get("jwt_key"), jwt_method=creds.get("jwt_method") or "HS256",
                   namespace=creds.get("namespace"),
                   cors_allowed_origins=creds.get("cors_allowed_origins"))

    def wrap(self, app: ASGIApp, assistant: Assistant) -> ASGIApp:
        """Route requests under ``socketio_path`` to the Socket.IO server, the rest to ``app``."""
        import socketio

        self.sio = socketio.AsyncServer(async_mode="asgi",
                                        cors_allowed_origins=self.cors_allowed_origins)
        self._register(self.sio, assistant)
        sio_app = socketio.ASGIApp(self.sio, socketio_path=self.socketio_path)
        prefix = self.socketio_path + "/"

        async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
            path = scope.get("path", "")
            if scope["type"] in ("http", "websocket") and (path + "/").startswith(prefix):
                await sio_app(scope, receive, send)
            else:
                await app(scope, receive, send)

        return dispatch

    def _sender(self, sid: str, data: dict[str, Any]) -> str:
        if self.session_persistence and data.get("session_id"):
            return str(data["session_id"])
        return sid

    def _register(self, sio: socketio.AsyncServer, assistant: Assistant) -> None:
        output = SocketIOOutput(sio, self.bot_message_evt, self.namespace)
        ns = self.namespace

        async def connect(sid: str, environ: dict[str, Any], auth: Any = None) -> bool:
            if self.jwt_key and not self._token_ok(auth):
                log.warning("channels.socketio.unauthorised", sid=sid)
                return False
            log.debug("channels.socketio.connected", sid=sid)
            return True

        async def session_request(sid: str, data: Any = None) -> None:
            data = data if isinstance(data, dict) else {}
            session_id = data.get("session_id") or uuid.uuid4().hex
            if self.session_persistence:
                await sio.enter_room(sid, str(session_id), namespace=ns)
            await sio.emit("session_confirm", session_id, room=sid, namespace=ns)

        async def user_message(sid: str, data: Any = None) -> None:
            if not isinstance(data, dict) or not isinstance(data.get("message", ""), str):
                log.warning("channels.socketio.bad_message", sid=sid)
                return
            metadata = data.get(self.metadata_key)
            metadata = dict(metadata) if isinstance(metadata, dict) else {}
            sender = self._sender(sid, data)
            self.turns.start(assistant.handle_message(sender, data.get("message") or "",
                                                      metadata, output), sender)

        async def client_tool_result(sid: str, data: Any = None) -> None:
            data = data if isinstance(data, dict) else {}
            results = data.get("results", [data] if "id" in data else [])
            if not isinstance(results, list) or not all(
                    isinstance(r, dict) and isinstance(r.get("id"), str) for r in results) \
                    or not results:
                log.warning("channels.socketio.bad_tool_result", sid=sid)
                return
            sender = self._sender(sid, data)
            self.turns.start(assistant.handle_client_tool_results(sender, results, output),
                             sender)

        sio.on("connect", handler=connect, namespace=ns)
        sio.on("session_request", handler=session_request, namespace=ns)
        sio.on(self.user_message_evt, handler=user_message, namespace=ns)
        sio.on(CLIENT_TOOL_RESULT, handler=client_tool_result, namespace=ns)

    async def shutdown(self) -> None:
        """Wait for running turns to finish."""
        await self.turns.drain()

    def _token_ok(self, auth: Any) -> bool:
        import jwt

        token = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(token, str):
            return False
        try:
            jwt.decode(token, self.jwt_key or "", algorithms=[self.jwt_method])
        except jwt.PyJWTError:
            return False
        return True
