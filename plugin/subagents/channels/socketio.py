"""Socket.IO channel speaking the protocol of Rasa's web widgets (``rasa-webchat`` and others).

The client emits ``session_request`` ``{"session_id"}`` and gets ``session_confirm`` with the
session id. It sends messages as the user event (default ``user_uttered``) ``{"message",
"session_id", "<metadata_key>": {...}}`` and receives bot messages as the bot event (default
``bot_uttered``): ``{"text"}``, ``{"text", "quick_replies"}`` for buttons, or a custom payload as
it was written.

Who reaches which conversation (docs/security.md, "Socket.IO"):

* Session ids are issued by the server: 32 random hex digits. A client may present an id it was
  given before (to resume after a reconnect); any other id is replaced by a new one.
* With ``jwt_key`` a client connects with ``auth: {"token": "<JWT>"}`` signed with that key and
  carrying a ``sub`` claim; the token's subject is the socket's identity, and its sessions are
  its own: the same session id presented with another subject is another conversation.
* Conversations of this channel are named ``socketio:<session id>`` (``socketio:<sub>:<session
  id>`` with a JWT), so a socket can never name a conversation of the REST API, Twilio or Slack.
* A message is handled in the session its socket confirmed; a ``session_id`` in the message
  that names another session is refused.
* With ``session_persistence`` the conversation is the session's and survives reconnects
  (every socket of the session gets the answers); without it each socket is its own
  conversation.
* The ``Host`` check of the server applies; a browser's ``Origin`` must be the server's own or
  one of the allowed origins (``serve --cors``, and this channel's ``cors_allowed_origins``).

Agent fillers are emitted as soon as the agent writes them, before its tools run. A
client-executed tool is requested with a ``client_tool_request`` event ``{"id", "name",
"arguments"}``; the client answers with ``client_tool_result`` ``{"session_id", "id",
"result"}``. Approvals are ordinary yes/no questions.

Needs the ``socketio`` extra (``python-socketio``).
"""

from __future__ import annotations

import re
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
SENDER_PREFIX = "socketio:"
"""Every conversation of this channel is named with this prefix (no other channel's can be)."""
_ISSUED_ID = re.compile(r"[0-9a-f]{32}")
"""The form of a session id the server issues (``uuid4().hex``)."""
MAX_SENDER = 255


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
        self.cors_allowed_origins: list[str] = (
            [cors_allowed_origins] if isinstance(cors_allowed_origins, str)
            else list(cors_allowed_origins or []))
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
                                        cors_allowed_origins=self._origin_allowed)
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

    def _origin_allowed(self, origin: str | None, environ: dict[str, Any]) -> bool:
        """A browser's ``Origin``: the server's own, or one the server or channel allows."""
        if not origin:
            return True
        origin = origin.rstrip("/")
        allowed = {o.rstrip("/") for o in (*self.allowed_origins, *self.cors_allowed_origins)}
        if "*" in allowed or origin in allowed:
            return True
        host = str(environ.get("HTTP_HOST", ""))
        return bool(host) and origin.split("://", 1)[-1] == host

    def identity(self, auth: Any) -> tuple[bool, str | None]:
        """(accepted, the token's subject): anonymous without ``jwt_key``."""
        if not self.jwt_key:
            return True, None
        subject = self._token_subject(auth)
        return subject is not None, subject

    def session_for(self, identity: str | None, requested: Any) -> tuple[str, str]:
        """(session id, conversation) for a ``session_request`` of a socket of ``identity``."""
        requested = requested if isinstance(requested, str) else ""
        session_id = requested if _ISSUED_ID.fullmatch(requested) else uuid.uuid4().hex
        return session_id, self.conversation(identity, session_id)

    def conversation(self, identity: str | None, key: str) -> str:
        """The conversation (sender id) of session or socket ``key`` of ``identity``."""
        return f"{SENDER_PREFIX}{identity}:{key}" if identity is not None \
            else f"{SENDER_PREFIX}{key}"

    def _register(self, sio: socketio.AsyncServer, assistant: Assistant) -> None:
        handlers = _Handlers(self, sio, assistant)
        ns = self.namespace
        sio.on("connect", handler=handlers.connect, namespace=ns)
        sio.on("session_request", handler=handlers.session_request, namespace=ns)
        sio.on(self.user_message_evt, handler=handlers.user_message, namespace=ns)
        sio.on(CLIENT_TOOL_RESULT, handler=handlers.client_tool_result, namespace=ns)

    async def shutdown(self) -> None:
        """Wait for running turns to finish."""
        await self.turns.drain()

    def _token_subject(self, auth: Any) -> str | None:
        """The ``sub`` of a valid JWT in ``auth: {"token"}``; None when there is none."""
        import jwt

        token = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(token, str):
            return None
        try:
            claims = jwt.decode(token, self.jwt_key or "", algorithms=[self.jwt_method],
                                options={"require": ["sub"]})
        except jwt.PyJWTError:
            return None
        subject = claims.get("sub")
        return subject if isinstance(subject, str) and subject else None


class _Handlers:
    """The Socket.IO event handlers of one channel; each socket's identity, session id and
    conversation live in its python-socketio session."""

    def __init__(self, channel: SocketIOInput, sio: socketio.AsyncServer,
                 assistant: Assistant) -> None:
        self.channel = channel
        self.sio = sio
        self.assistant = assistant
        self.ns = channel.namespace
        self.output = SocketIOOutput(sio, channel.bot_message_evt, channel.namespace)

    async def connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> bool:
        """Accept the socket (a valid JWT when ``jwt_key`` is set); it starts in a
        conversation of its own until it asks for a session."""
        accepted, identity = self.channel.identity(auth)
        if not accepted:
            log.warning("channels.socketio.unauthorised", sid=sid)
            return False
        if len(self.channel.conversation(identity, uuid.uuid4().hex)) > MAX_SENDER:
            log.warning("channels.socketio.subject_too_long", sid=sid)
            return False
        sender = self.channel.conversation(identity, sid)
        await self.sio.save_session(sid, {"identity": identity, "session_id": None,
                                          "sender": sender}, namespace=self.ns)
        await self.sio.enter_room(sid, sender, namespace=self.ns)
        log.debug("channels.socketio.connected", sid=sid)
        return True

    async def session_request(self, sid: str, data: Any = None) -> None:
        """Confirm a session: the one the client was issued before, else a new one."""
        data = data if isinstance(data, dict) else {}
        state = await self.sio.get_session(sid, namespace=self.ns)
        session_id, conversation = self.channel.session_for(state["identity"],
                                                         data.get("session_id"))
        state["session_id"] = session_id
        if self.channel.session_persistence:
            await self.sio.leave_room(sid, state["sender"], namespace=self.ns)
            state["sender"] = conversation
            await self.sio.enter_room(sid, conversation, namespace=self.ns)
        await self.sio.save_session(sid, state, namespace=self.ns)
        await self.sio.emit("session_confirm", session_id, room=sid, namespace=self.ns)

    async def _own_sender(self, sid: str, data: dict[str, Any]) -> str | None:
        """The socket's conversation; None when the message names another session."""
        state = await self.sio.get_session(sid, namespace=self.ns)
        named = data.get("session_id")
        if named and state["session_id"] is not None and named != state["session_id"]:
            log.warning("channels.socketio.foreign_session", sid=sid)
            return None
        return str(state["sender"])

    async def _admitted(self, sid: str) -> bool:
        """Whether the worker may start one more turn; if not, the socket is told to try
        again (the project's internal-error reply) and nothing is recorded."""
        if self.channel.turns.admit():
            return True
        log.warning("channels.socketio.busy", sid=sid)
        await self.sio.emit(self.channel.bot_message_evt,
                            {"text": self.assistant.internal_error_text()}, room=sid,
                            namespace=self.ns)
        return False

    async def user_message(self, sid: str, data: Any = None) -> None:
        """A user message: a turn in the socket's own conversation."""
        if not isinstance(data, dict) or not isinstance(data.get("message", ""), str):
            log.warning("channels.socketio.bad_message", sid=sid)
            return
        metadata = data.get(self.channel.metadata_key)
        metadata = dict(metadata) if isinstance(metadata, dict) else {}
        sender = await self._own_sender(sid, data)
        if sender is None or not await self._admitted(sid):
            return
        self.channel.turns.start(self.assistant.handle_message(
            sender, data.get("message") or "", metadata, self.output), sender)

    async def client_tool_result(self, sid: str, data: Any = None) -> None:
        """Results of client-executed tools, for the socket's own conversation."""
        data = data if isinstance(data, dict) else {}
        results = data.get("results", [data] if "id" in data else [])
        if not isinstance(results, list) or not all(
                isinstance(r, dict) and isinstance(r.get("id"), str) for r in results) \
                or not results:
            log.warning("channels.socketio.bad_tool_result", sid=sid)
            return
        sender = await self._own_sender(sid, data)
        if sender is None or not await self._admitted(sid):
            return
        self.channel.turns.start(self.assistant.handle_client_tool_results(
            sender, results, self.output), sender)
