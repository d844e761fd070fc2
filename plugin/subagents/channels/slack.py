"""Slack over the Events API (``slack`` extra: ``slack-sdk``).

Slack posts events to ``/webhooks/slack/webhook``. A body is read only up to 1 MB (else 413),
then every request must carry a valid ``X-Slack-Signature`` made with the app's signing secret
over a timestamp of the last five minutes (else 401: forged and old requests are refused), and
only then is the body parsed (400 when it is not a JSON object nested at most 64 levels). A
message delivered again (Slack retrying, or a captured request played again) is acknowledged
and not handled twice: handled deliveries are remembered for an hour where every worker and a
restarted server see them (:mod:`~subagents.channels.deliveries`). The URL check
(``url_verification``) is answered, messages and mentions become user messages (the bot's own
messages are ignored), and a button press (``block_actions``, sent to the same address) sends
the button's payload.

The webhook is answered at once and the turn runs afterwards; each bot message (fillers
included) is posted with ``chat.postMessage`` as soon as it exists, long texts split at sentence
boundaries, buttons as Block Kit buttons.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from subagents.channels.bodies import (
    BODY_TIMEOUT,
    MAX_BODY,
    BadRequestError,
    check_depth,
    read_body,
)
from subagents.channels.deliveries import DeliveryLedger, delivery_ledger
from subagents.channels.input import BackgroundTurns, InputChannel, busy_response, split_text
from subagents.types import OutputChannel

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.channels.slack")
TEXT_LIMIT = 3000
"""Characters per message (the limit of a Block Kit text section)."""
_MENTION = re.compile(r"<@[A-Z0-9]+>\s*")
REPLAY_TTL = 3600.0
"""Seconds a handled delivery is remembered (Slack refuses signatures older than five
minutes, and retries within that time)."""


class SlackOutput(OutputChannel):
    """Posts to one Slack channel (and thread, when replies go to threads)."""

    name = "slack"
    """The channel name responses can be written for (``channel:`` in a response)."""
    can_send_later = True

    def __init__(self, client: AsyncWebClient, channel: str,
                 thread_ts: str | None = None) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts

    async def _post(self, **kwargs: Any) -> None:
        if self.thread_ts:
            kwargs.setdefault("thread_ts", self.thread_ts)
        kwargs.setdefault("channel", self.channel)
        try:
            await self.client.chat_postMessage(**kwargs)
        except Exception as exc:  # noqa: BLE001 - a lost message must not end the conversation
            log.error("channels.slack.send_failed", channel=self.channel,
                      error=type(exc).__name__)

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Post the text in parts Slack accepts, then a ``custom`` payload if given."""
        if kwargs.get("buttons"):
            await self.send_text_with_buttons(recipient_id, text, kwargs["buttons"])
            return
        for part in split_text(text, TEXT_LIMIT):
            await self._post(text=part, mrkdwn=True)
        custom = kwargs.get("custom")
        if isinstance(custom, dict):
            await self._post(**custom)

    async def send_text_with_buttons(self, recipient_id: str, text: str,
                                     buttons: list[dict[str, Any]], **kwargs: Any) -> None:
        """Post the text with the buttons as a Block Kit actions block."""
        parts = split_text(text, TEXT_LIMIT) or [""]
        for part in parts[:-1]:
            await self._post(text=part, mrkdwn=True)
        elements = [{"type": "button", "action_id": f"button_{index}",
                     "text": {"type": "plain_text", "text": str(b.get("title", ""))[:75]},
                     "value": str(b.get("payload", b.get("title", "")))[:2000]}
                    for index, b in enumerate(buttons)]
        blocks: list[dict[str, Any]] = []
        if parts[-1]:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": parts[-1]}})
        blocks.append({"type": "actions", "elements": elements})
        await self._post(text=parts[-1] or "Choose one", blocks=blocks)


class SlackInput(InputChannel):
    """The Slack Events API webhook."""

    name = "slack"

    def __init__(self, slack_token: str, slack_signing_secret: str, *,
                 slack_channel: str | None = None, use_threads: bool = False,
                 conversation_granularity: str = "sender", proxy: str | None = None,
                 api_url: str | None = None) -> None:
        self.token = slack_token
        self.signing_secret = slack_signing_secret
        self.slack_channel = slack_channel
        self.use_threads = use_threads
        self.granularity = conversation_granularity
        self.proxy = proxy
        self.api_url = api_url
        self.turns = BackgroundTurns(self.name)
        self.deliveries: DeliveryLedger | None = None
        self.client: AsyncWebClient | None = None

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> SlackInput:
        """Build the channel from its ``credentials.yml`` section."""
        creds = credentials or {}
        threads = creds.get("use_threads", False)
        if isinstance(threads, str):
            threads = threads.strip().lower() in ("true", "yes", "1")
        return cls(creds["slack_token"], creds["slack_signing_secret"],
                   slack_channel=creds.get("slack_channel"), use_threads=bool(threads),
                   conversation_granularity=creds.get("conversation_granularity") or "sender",
                   proxy=creds.get("proxy"), api_url=creds.get("api_url"))

    def routes(self, assistant: Assistant) -> list[BaseRoute]:
        """The ``POST <prefix>/webhook`` route Slack's Events API calls."""
        async def webhook(request: Request) -> Response:
            return await self._webhook(request, assistant)

        return [Route(f"{self.url_prefix()}/webhook", webhook, methods=["POST"])]

    def _client(self) -> AsyncWebClient:
        if self.client is None:
            from slack_sdk.web.async_client import AsyncWebClient

            base = (self.api_url.rstrip("/") + "/") if self.api_url else \
                "https://slack.com/api/"
            self.client = AsyncWebClient(token=self.token, base_url=base, proxy=self.proxy)
        return self.client

    async def shutdown(self) -> None:
        """Wait for running turns, then close the Slack client's HTTP session."""
        await self.turns.drain()
        if self.client is not None and self.client.session is not None:
            await self.client.session.close()
        if self.deliveries is not None:
            await self.deliveries.close()

    async def _webhook(self, request: Request, assistant: Assistant) -> Response:
        from slack_sdk.signature import SignatureVerifier

        try:  # capped first: nothing larger is read, signed or not
            body = await read_body(request, MAX_BODY, BODY_TIMEOUT)
        except BadRequestError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        timestamp = request.headers.get("x-slack-request-timestamp", "")
        verifier = SignatureVerifier(self.signing_secret)
        if not timestamp.isdigit() or not verifier.is_valid(
                body, timestamp, request.headers.get("x-slack-signature", "")):
            log.warning("channels.slack.bad_signature")
            return JSONResponse({"error": "invalid signature"}, status_code=401)
        try:
            payload = _payload(body, request.headers.get("content-type", ""))
        except ValueError:
            return JSONResponse({"error": "unreadable body"}, status_code=400)
        if payload.get("type") == "url_verification":
            return JSONResponse({"challenge": payload.get("challenge")})
        message = self._message(payload)
        if message is not None:
            sender, text, channel, thread_ts, key = message
            if not self.turns.admit():  # Slack delivers it again later
                return busy_response()
            if self.deliveries is None:
                self.deliveries = delivery_ledger(assistant)
            if not await self.deliveries.first_time("slack", key, REPLAY_TTL):
                log.info("channels.slack.duplicate", key=key)
            else:
                output = SlackOutput(self._client(), self.slack_channel or channel, thread_ts)
                metadata = {"slack": {"channel": channel, "thread_ts": thread_ts}}
                self.turns.start(assistant.handle_message(sender, text, metadata, output),
                                 sender)
        return Response(status_code=200, headers={"x-slack-no-retry": "1"})

    def _message(self, payload: dict[str, Any]
                 ) -> tuple[str, str, str, str | None, str] | None:
        """(sender, text, channel, thread, dedup key) of a user message, or None."""
        if payload.get("type") == "block_actions":
            actions = payload.get("actions") or []
            user = (payload.get("user") or {}).get("id")
            channel = (payload.get("channel") or {}).get("id")
            if not actions or not user or not channel:
                return None
            thread = (payload.get("container") or {}).get("thread_ts")
            key = f"action:{payload.get('trigger_id') or actions[0].get('action_ts')}"
            return (self._sender(user, channel, thread), str(actions[0].get("value", "")),
                    channel, thread if self.use_threads else None, key)
        if payload.get("type") != "event_callback":
            return None
        event = payload.get("event") or {}
        if event.get("type") not in ("message", "app_mention") or event.get("bot_id") \
                or event.get("subtype") or not event.get("user") or not event.get("channel"):
            return None
        text = _MENTION.sub("", str(event.get("text") or "")).strip()
        thread = event.get("thread_ts") or event.get("ts")
        # a mention also arrives as a message: one key per posted message handles it once
        key = f"msg:{event['channel']}:{event.get('ts') or payload.get('event_id')}"
        return (self._sender(event["user"], event["channel"], event.get("thread_ts")), text,
                event["channel"], thread if self.use_threads else None, key)

    def _sender(self, user: str, channel: str, thread: str | None) -> str:
        if self.granularity == "channel":
            return f"{user}_{channel}"
        if self.granularity == "thread" and thread:
            return f"{user}_{channel}_{thread}"
        return str(user)


def _payload(body: bytes, content_type: str) -> dict[str, Any]:
    """The JSON object of a verified body (a button press comes as a form field)."""
    try:
        raw = body
        if content_type.startswith("application/x-www-form-urlencoded"):
            raw = parse_qs(body.decode()).get("payload", ["{}"])[0].encode()
        check_depth(raw)
        data = json.loads(raw or b"{}")
    except (UnicodeDecodeError, ValueError, RecursionError, BadRequestError) as exc:
        raise ValueError("unreadable body") from exc
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return data
