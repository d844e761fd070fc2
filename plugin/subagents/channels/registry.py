"""Build the input channels named in ``credentials.yml``, and their routes and middleware for the
HTTP server."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from starlette.middleware import Middleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from subagents.channels.input import BackgroundTurns, InputChannel, TurnLimiter
from subagents.config.credentials import Credentials, load_credentials
from subagents.config.project import import_from_project
from subagents.exceptions import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.channels")

BUILTIN: dict[str, tuple[str, str, str, str]] = {
    "socketio": ("subagents.channels.socketio", "SocketIOInput", "socketio", "socketio"),
    "slack": ("subagents.channels.slack", "SlackInput", "slack", "slack_sdk"),
    "telegram": ("subagents.channels.telegram", "TelegramInput", "telegram", "telegram"),
    "twilio": ("subagents.channels.twilio", "TwilioInput", "twilio", "twilio"),
}
"""Channel name -> (module, class, the optional extra that installs its library, the library)."""


def channel_class(name: str, root: Path) -> type[InputChannel]:
    """The class of channel ``name``: built-in, or a custom ``pkg.mod.Class`` of the project."""
    if name in BUILTIN:
        module_name, cls_name, extra, library = BUILTIN[name]
        try:
            importlib.import_module(library)
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(ConfigIssue(
                "credentials.channel.extra_missing",
                f"channel {name!r} needs a library that is not installed ({exc.name})",
                file="credentials.yml", key=name,
                hint=f"pip install 'subagents[{extra}]'")) from exc
        cls: type[InputChannel] = getattr(module, cls_name)
        return cls
    mod_name, _, cls_name = name.rpartition(".")
    custom: type[InputChannel] = getattr(import_from_project(root, mod_name), cls_name)
    return custom


def build_channels(root: Path, credentials: Credentials) -> list[InputChannel]:
    """One channel object per entry (``rest`` is the server's own REST API: nothing to build)."""
    channels = []
    for entry in credentials.channels:
        if entry.name == "rest":
            continue
        cls = channel_class(entry.name, root)
        channels.append(cls.from_credentials(entry.resolved()))
        log.info("channels.enabled", channel=entry.name)
    return channels


def load_channels(root: Path, credentials_path: Path | None = None) -> list[InputChannel]:
    """Read the project's ``credentials.yml`` (or ``credentials_path``) and build its channels.

    Raises:
        ProjectInvalidError: the file has errors (each with file, line and code).
        ConfigError: a ``${VAR}`` is not set, or a channel's library is not installed.
    """
    return build_channels(Path(root), load_credentials(Path(root), credentials_path))


def channel_routes(assistant: Assistant, channels: Sequence[InputChannel]) -> list[BaseRoute]:
    """The HTTP routes (webhooks) of ``channels``."""
    return [route for channel in channels for route in channel.routes(assistant)]


def channel_middleware(assistant: Assistant, channels: Sequence[InputChannel],
                       cors_origins: Sequence[str] = (),
                       limiter: TurnLimiter | None = None) -> list[Middleware]:
    """The middleware that puts the channels' ASGI wrappers (Socket.IO) in front of the app
    and runs their ``startup``/``shutdown`` with the server's lifespan; the server places it
    inside its ``Host`` check. ``cors_origins`` are the browser origins the server allows;
    ``limiter`` counts the channels' turns among the worker's turns in flight."""
    if not channels:
        return []
    for channel in channels:
        channel.allowed_origins = list(cors_origins)
        turns = getattr(channel, "turns", None)
        if isinstance(turns, BackgroundTurns):
            turns.limiter = limiter
    return [Middleware(_ChannelsMiddleware, channels=list(channels), assistant=assistant)]


class _ChannelsMiddleware:
    def __init__(self, app: ASGIApp, *, channels: list[InputChannel],
                 assistant: Assistant) -> None:
        self.channels = channels
        self.assistant = assistant
        self.app = app
        for channel in channels:
            app = channel.wrap(app, assistant)
        self.wrapped = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.wrapped(scope, receive, send)
            return

        async def on_receive() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                for channel in self.channels:
                    await channel.shutdown()
            return message

        async def on_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                try:
                    for channel in self.channels:
                        await channel.startup(self.assistant)
                except Exception as exc:
                    log.exception("channels.startup.failed")
                    message = {"type": "lifespan.startup.failed", "message": str(exc)}
            await send(message)

        await self.app(scope, on_receive, on_send)

