"""Twilio SMS and WhatsApp (``twilio`` extra: ``twilio``).

Twilio posts incoming messages to ``/webhooks/twilio/webhook`` as a URL-encoded form. A body is
read only up to 1 MB (else 413; another content type is 415), and each request must carry a
valid ``X-Twilio-Signature`` (made with the account's auth token over the webhook address and
the form fields), else 401; set ``webhook_url`` to the public address configured at Twilio when
the server sits behind a proxy. A message delivered again (same ``MessageSid``: Twilio retrying,
or a captured request played again, which a Twilio signature cannot tell) is acknowledged and
not handled twice: handled messages are remembered for 30 days where every worker and a
restarted server see them (:mod:`~subagents.channels.deliveries`). The conversation is the
sender's number (``whatsapp:+...`` for WhatsApp).

The webhook answers with an empty TwiML document at once; each bot message (fillers included)
is then sent through the Messages API as soon as it exists, long texts split at sentence
boundaries within 1600 characters. SMS has no buttons: choices are sent as a numbered list, and
a reply with a number or a title sends that choice's payload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from subagents.channels.bodies import BODY_TIMEOUT, MAX_BODY, BadRequestError, read_body
from subagents.channels.deliveries import DeliveryLedger, delivery_ledger
from subagents.channels.input import (
    BackgroundTurns,
    InputChannel,
    busy_response,
    buttons_as_text,
    split_text,
)
from subagents.types import OutputChannel

if TYPE_CHECKING:
    from twilio.rest import Client

    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.channels.twilio")
TEXT_LIMIT = 1600
TWIML_EMPTY = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
API_BASE = "https://api.twilio.com"
REPLAY_TTL = 30 * 24 * 3600.0
"""Seconds a handled message is remembered (a Twilio signature carries no time)."""
FORM = "application/x-www-form-urlencoded"


class TwilioOutput(OutputChannel):
    """Sends SMS or WhatsApp messages from the assistant's number."""

    name = "twilio"
    """The channel name responses can be written for (``channel:`` in a response)."""
    can_send_later = True

    def __init__(self, client: Client, from_number: str,
                 choices: dict[str, dict[str, str]]) -> None:
        self.client = client
        self.from_number = from_number
        self.choices = choices

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Send the text in parts over Twilio; a failed send is logged, not raised."""
        if kwargs.get("buttons"):
            await self.send_text_with_buttons(recipient_id, text, kwargs["buttons"])
            return
        for part in split_text(text, TEXT_LIMIT):
            try:
                await self.client.messages.create_async(to=recipient_id,
                                                        from_=self._from(recipient_id), body=part)
            except Exception as exc:  # noqa: BLE001 - a lost message must not end the turn
                log.error("channels.twilio.send_failed", error=type(exc).__name__)

    async def send_text_with_buttons(self, recipient_id: str, text: str,
                                     buttons: list[dict[str, Any]], **kwargs: Any) -> None:
        """Send the buttons as a numbered list and remember which reply picks which payload."""
        choices: dict[str, str] = {}
        for index, button in enumerate(buttons, 1):
            payload = str(button.get("payload", button.get("title", "")))
            choices[str(index)] = payload
            choices[str(button.get("title", "")).casefold()] = payload
        self.choices[recipient_id] = choices
        await self.send_text_message(recipient_id, buttons_as_text(text, buttons))

    def _from(self, recipient_id: str) -> str:
        if recipient_id.startswith("whatsapp:") and not self.from_number.startswith("whatsapp:"):
            return f"whatsapp:{self.from_number}"
        return self.from_number


def _http_client(api_url: str | None) -> Any:
    """An async HTTP client for Twilio's library (on httpx2), sending to ``api_url`` instead of
    Twilio's API host when it is set."""
    import httpx2
    from twilio.http import AsyncHttpClient
    from twilio.http.response import Response as TwilioResponse

    class _Client(AsyncHttpClient):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(structlog.get_logger("subagents.channels.twilio.http"), True, 30.0)
            self.session = httpx2.AsyncClient(timeout=30.0)

        async def request(self, method: str, uri: str, params: Any = None, data: Any = None,
                          headers: Any = None, auth: Any = None, timeout: float | None = None,
                          allow_redirects: bool = False) -> Any:
            if api_url and uri.startswith(API_BASE):
                uri = api_url.rstrip("/") + uri[len(API_BASE):]
            response = await self.session.request(
                method, uri, params=params, data=data, headers=headers, auth=auth,
                timeout=timeout or self.timeout, follow_redirects=allow_redirects)
            return TwilioResponse(response.status_code, response.text, response.headers)

        async def close(self) -> None:
            await self.session.aclose()

    return _Client()


class TwilioInput(InputChannel):
    """The Twilio messaging webhook (SMS and WhatsApp)."""

    name = "twilio"

    def __init__(self, account_sid: str, auth_token: str, twilio_number: str, *,
                 webhook_url: str | None = None, api_url: str | None = None) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.twilio_number = twilio_number
        self.webhook_url = webhook_url
        self.api_url = api_url
        self.turns = BackgroundTurns(self.name)
        self.deliveries: DeliveryLedger | None = None
        self.choices: dict[str, dict[str, str]] = {}
        self.client: Client | None = None

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> TwilioInput:
        """Build the channel from its ``credentials.yml`` section."""
        creds = credentials or {}
        return cls(str(creds["account_sid"]), creds["auth_token"], str(creds["twilio_number"]),
                   webhook_url=creds.get("webhook_url"), api_url=creds.get("api_url"))

    def routes(self, assistant: Assistant) -> list[BaseRoute]:
        """The ``POST <prefix>/webhook`` route Twilio calls."""
        async def webhook(request: Request) -> Response:
            return await self._webhook(request, assistant)

        return [Route(f"{self.url_prefix()}/webhook", webhook, methods=["POST"])]

    async def startup(self, assistant: Assistant) -> None:
        """Create the Twilio REST client."""
        from twilio.rest import Client

        self.client = Client(self.account_sid, self.auth_token,
                             http_client=_http_client(self.api_url))

    async def shutdown(self) -> None:
        """Wait for running turns, then close the Twilio client's HTTP client."""
        await self.turns.drain()
        if self.client is not None:
            await self.client.http_client.close()
        if self.deliveries is not None:
            await self.deliveries.close()

    async def _webhook(self, request: Request, assistant: Assistant) -> Response:
        from twilio.request_validator import RequestValidator

        if not request.headers.get("content-type", "").lower().startswith(FORM):
            return JSONResponse({"error": f"send the form as {FORM}"}, status_code=415)
        try:  # capped first: nothing larger is read, signed or not
            body = await read_body(request, MAX_BODY, BODY_TIMEOUT)
            fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except BadRequestError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        except (UnicodeDecodeError, ValueError):
            return JSONResponse({"error": "unreadable form"}, status_code=400)
        url = self.webhook_url or str(request.url)
        signature = request.headers.get("x-twilio-signature", "")
        if not signature or not RequestValidator(self.auth_token).validate(url, fields,
                                                                            signature):
            log.warning("channels.twilio.bad_signature")
            return JSONResponse({"error": "invalid signature"}, status_code=401)
        sender, sid = fields.get("From"), fields.get("MessageSid") or fields.get("SmsSid")
        if not sender or not sid or self.client is None:
            return JSONResponse({"error": "not a message"}, status_code=400)
        if not self.turns.admit():  # Twilio may deliver it again
            return busy_response()
        if self.deliveries is None:
            self.deliveries = delivery_ledger(assistant)
        if not await self.deliveries.first_time("twilio", sid, REPLAY_TTL):
            log.info("channels.twilio.duplicate", message_sid=sid)
        else:
            text = fields.get("Body", "").strip()
            text = self.choices.pop(sender, {}).get(text.casefold(), text)
            output = TwilioOutput(self.client, self.twilio_number, self.choices)
            metadata = {"twilio": {"message_sid": sid, "to": fields.get("To")}}
            self.turns.start(assistant.handle_message(sender, text, metadata, output), sender)
        return Response(TWIML_EMPTY, media_type="text/xml")
