"""Telegram over a webhook (``telegram`` extra: ``python-telegram-bot``).

At startup the bot registers ``webhook_url`` with Telegram (``setWebhook``) together with a
secret token: ``secret_token`` from credentials.yml, or one derived from the bot token. Telegram
sends that token back in ``X-Telegram-Bot-Api-Secret-Token`` with every update; an update
without it is refused (401); a body is read up to 1 MB (413) and must be a JSON object nested at
most 64 levels (400); an update delivered again (same ``update_id``) is acknowledged and not
handled twice, remembered for a day where every worker and a restarted server see it. Text
messages and button presses (``callback_query``) become user messages; the conversation is the chat.

Each bot message (fillers included) is sent with ``sendMessage`` as soon as it exists; long
texts are split at sentence boundaries within Telegram's 4096 characters. Buttons become an
inline keyboard; payloads longer than Telegram's 64 bytes of callback data fall back to a reply
keyboard of the titles, and a tapped title is sent as its payload.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import TYPE_CHECKING, Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from subagents.channels.bodies import (
    BODY_TIMEOUT,
    MAX_BODY,
    BadRequestError,
    parse_json_object,
    read_body,
)
from subagents.channels.deliveries import DeliveryLedger, delivery_ledger
from subagents.channels.input import BackgroundTurns, InputChannel, busy_response, split_text
from subagents.types import OutputChannel

if TYPE_CHECKING:
    from telegram import Bot

    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.channels.telegram")
TEXT_LIMIT = 4096
CALLBACK_DATA_LIMIT = 64
REPLAY_TTL = 24 * 3600.0
"""Seconds a handled update is remembered (Telegram gives up redelivering within a day)."""
SECRET_HEADER = "x-telegram-bot-api-secret-token"


_LIBRARY_LOGGERS = ("httpx", "telegram", "telegram.Bot", "telegram.BaseRequest",
                    "telegram.HTTPXRequest", "telegram.ext")


class _RedactToken(logging.Filter):
    """The Bot API puts the bot token in every URL: keep it out of the libraries' log lines."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.token in message:
            record.msg, record.args = message.replace(self.token, "<bot-token>"), ()
        return True


class TelegramOutput(OutputChannel):
    """Sends to Telegram chats; remembers reply-keyboard choices per chat."""

    name = "telegram"
    """The channel name responses can be written for (``channel:`` in a response)."""
    can_send_later = True

    def __init__(self, bot: Bot, choices: dict[str, dict[str, str]]) -> None:
        self.bot = bot
        self.choices = choices

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Send the text in parts Telegram accepts, then a ``custom`` message if it has text."""
        if kwargs.get("buttons"):
            await self.send_text_with_buttons(recipient_id, text, kwargs["buttons"])
            return
        for part in split_text(text, TEXT_LIMIT):
            await self._send(chat_id=recipient_id, text=part)
        custom = kwargs.get("custom")
        if isinstance(custom, dict) and isinstance(custom.get("text"), str):
            await self._send(chat_id=recipient_id, **custom)

    async def _send(self, **kwargs: Any) -> None:
        try:
            await self.bot.send_message(**kwargs)
        except Exception as exc:  # noqa: BLE001 - a lost message must not end the conversation
            log.error("channels.telegram.send_failed", chat=kwargs.get("chat_id"),
                      error=type(exc).__name__)

    async def send_text_with_buttons(self, recipient_id: str, text: str,
                                     buttons: list[dict[str, Any]], **kwargs: Any) -> None:
        """Send the text with an inline keyboard, or a reply keyboard when a payload is too long."""
        from telegram import (
            InlineKeyboardButton,
            InlineKeyboardMarkup,
            KeyboardButton,
            ReplyKeyboardMarkup,
        )

        parts = split_text(text, TEXT_LIMIT) or ["…"]
        for part in parts[:-1]:
            await self._send(chat_id=recipient_id, text=part)
        pairs = [(str(b.get("title", "")), str(b.get("payload", b.get("title", ""))))
                 for b in buttons]
        markup: InlineKeyboardMarkup | ReplyKeyboardMarkup
        if all(len(p.encode()) <= CALLBACK_DATA_LIMIT for _, p in pairs):
            markup = InlineKeyboardMarkup([[InlineKeyboardButton(t, callback_data=p)]
                                           for t, p in pairs])
        else:
            markup = ReplyKeyboardMarkup([[KeyboardButton(t)] for t, _ in pairs],
                                         one_time_keyboard=True, resize_keyboard=True)
            self.choices[recipient_id] = {t.casefold(): p for t, p in pairs}
        await self._send(chat_id=recipient_id, text=parts[-1], reply_markup=markup)


class TelegramInput(InputChannel):
    """The Telegram webhook."""

    name = "telegram"

    def __init__(self, access_token: str, verify: str, webhook_url: str, *,
                 secret_token: str | None = None, api_url: str | None = None) -> None:
        self.access_token = access_token
        self.verify = verify
        self.webhook_url = webhook_url
        self.secret_token = secret_token or hashlib.sha256(
            b"subagents-telegram-webhook:" + access_token.encode()).hexdigest()
        self.api_url = api_url
        self.turns = BackgroundTurns(self.name)
        self.deliveries: DeliveryLedger | None = None
        self.choices: dict[str, dict[str, str]] = {}
        self._bot: Bot | None = None
        redact = _RedactToken(access_token)
        for name in _LIBRARY_LOGGERS:
            logging.getLogger(name).addFilter(redact)

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> TelegramInput:
        """Build the channel from its ``credentials.yml`` section."""
        creds = credentials or {}
        return cls(creds["access_token"], creds["verify"], creds["webhook_url"],
                   secret_token=creds.get("secret_token"), api_url=creds.get("api_url"))

    @property
    def bot(self) -> Bot:
        """The Telegram bot client, created on first use."""
        if self._bot is None:
            from telegram import Bot

            base = f"{self.api_url.rstrip('/')}/bot" if self.api_url else \
                "https://api.telegram.org/bot"
            self._bot = Bot(self.access_token, base_url=base)
        return self._bot

    def routes(self, assistant: Assistant) -> list[BaseRoute]:
        """The ``POST <prefix>/webhook`` route Telegram calls."""
        async def webhook(request: Request) -> Response:
            return await self._webhook(request, assistant)

        return [Route(f"{self.url_prefix()}/webhook", webhook, methods=["POST"])]

    async def startup(self, assistant: Assistant) -> None:
        """Initialize the bot and register the webhook URL with Telegram."""
        await self.bot.initialize()
        await self.bot.set_webhook(url=self.webhook_url, secret_token=self.secret_token,
                                   allowed_updates=["message", "callback_query"])
        log.info("channels.telegram.webhook_set", bot=self.verify)

    async def shutdown(self) -> None:
        """Wait for running turns, then shut the bot client down."""
        await self.turns.drain()
        if self._bot is not None:
            await self._bot.shutdown()
        if self.deliveries is not None:
            await self.deliveries.close()

    async def _webhook(self, request: Request, assistant: Assistant) -> Response:
        token = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(token.encode(), self.secret_token.encode()):
            log.warning("channels.telegram.bad_secret_token")
            return JSONResponse({"error": "invalid secret token"}, status_code=401)
        try:
            data = parse_json_object(await read_body(request, MAX_BODY, BODY_TIMEOUT))
        except BadRequestError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        if not self.turns.admit():  # Telegram delivers it again later
            return busy_response()
        if self.deliveries is None:
            self.deliveries = delivery_ledger(assistant)
        if not await self.deliveries.first_time("telegram", str(data.get("update_id")),
                                                REPLAY_TTL):
            log.info("channels.telegram.duplicate", update_id=data.get("update_id"))
            return Response(status_code=200)
        message = self._message(data)
        if message is not None:
            chat_id, text, metadata = message
            output = TelegramOutput(self.bot, self.choices)
            self.turns.start(assistant.handle_message(chat_id, text, metadata, output), chat_id)
        return Response(status_code=200)

    def _message(self, data: dict[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
        from telegram import Update

        try:
            update = Update.de_json(data, self.bot)
        except (KeyError, TypeError, ValueError):
            log.warning("channels.telegram.bad_update")
            return None
        if update.callback_query is not None and update.callback_query.message is not None:
            query = update.callback_query
            self.turns.start(query.answer(), str(query.id))
            chat_id = str(query.message.chat.id)  # type: ignore[union-attr]
            return chat_id, query.data or "", {"telegram": {"callback_query_id": query.id}}
        message = update.message
        if message is None or message.text is None:
            return None
        chat_id = str(message.chat.id)
        text = message.text.replace(f"@{self.verify}", "").strip()
        remembered = self.choices.pop(chat_id, {})
        text = remembered.get(text.casefold(), text)
        return chat_id, text, {"telegram": {"message_id": message.message_id,
                                            "chat_type": message.chat.type}}
