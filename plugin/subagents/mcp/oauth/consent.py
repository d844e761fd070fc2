"""User-level OAuth consent: each end user authorizes an MCP server for themselves.

A server with ``oauth: {grant: authorization_code, per_user: true}`` and ``session: {per_user:
...}`` gets one session per user, each with its own OAuth provider (the MCP SDK's, with PKCE,
discovery and dynamic client registration unless ``client_id`` is configured). When a user's
call meets a 401 and no token (or refresh token) helps, the provider's sign-in address reaches
the user as a URL-mode elicitation of the call in flight: the agent sends the link and parks, and
the call waits in the background. The browser comes back to ``GET /oauth/callback`` on
``subagents serve`` (:mod:`subagents.server.oauth_callback`); the ``state`` there picks the waiting
consent (it was made for one conversation, call, user and server), the code is exchanged, the
tokens are stored for the user (:mod:`subagents.mcp.oauth.token_store`) and the call runs. The agent
then continues with the call's result by itself when the conversation's channel can send
without a request (Socket.IO, Slack, Telegram, Twilio), else on the user's next message. A
callback that reaches another worker is handed to this one over Redis
(:mod:`subagents.mcp.oauth.relay`).

A token the server refuses (401) before it expires is refreshed first; when the refresh fails the
user is asked again. Tokens never reach the model, the tracker or the logs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import structlog

from subagents.config._base import resolve_env
from subagents.config.endpoints import McpServerConfig
from subagents.mcp.callbacks import ElicitationRegistry, _Flight
from subagents.mcp.oauth.login import (
    ConfiguredLogin,
    LoginRequiredError,
    authorization_code_provider,
    configured_client,
    token_file,
)
from subagents.mcp.oauth.policy import StepUpWatch
from subagents.mcp.oauth.token_store import SHARED, TokenStore

log = structlog.get_logger("subagents.mcp")

CALLBACK_PATH = "/oauth/callback"
"""The route of ``subagents serve`` that users' browsers return to."""
CONSENT_MESSAGE = ("{server} needs your permission before I can continue. Open this link, sign "
                   "in and allow access, then come back here.")
STEP_UP_MESSAGE = ("{server} needs more access before I can continue ({scope}). Open this link, "
                   "sign in again and allow it, then come back here.")


class ConsentRequiredError(LoginRequiredError):
    """The user must authorize the server, and no call in flight can ask them now."""

    code = "mcp.consent_required"


class ConsentDeniedError(LoginRequiredError):
    """The user refused (or the sign-in page reported an error)."""

    code = "mcp.consent_denied"


class ConsentExpiredError(LoginRequiredError):
    """Nobody came back from the sign-in page in time, or the request was dropped."""

    code = "mcp.consent_expired"


CONSENT_CODES = frozenset({ConsentRequiredError.code, ConsentDeniedError.code,
                           ConsentExpiredError.code})
"""Error codes of a consent that did not happen (the call fails with one of them)."""


# ---------------------------------------------------------------------------- pending consents
@dataclass
class PendingConsent:
    """One sign-in link that was sent and waits for the browser to come back."""

    state: str
    server: str
    owner_key: str
    """The call it belongs to (``<conversation>:<tool call id>``)."""
    result: asyncio.Future[Any] = field(repr=False)
    """The SDK's ``AuthorizationCodeResult``, or the reason it failed."""
    asking: asyncio.Future[Any] | None = field(default=None, repr=False)
    """The question put to the user in the conversation (settled by the chat or the browser)."""
    elicitations: ElicitationRegistry | None = field(default=None, repr=False)
    """The registry holding the call (the MCP pool's)."""


class ConsentRegistry:
    """The consents that wait for a browser, by OAuth ``state``.

    The MCP pool owns one (:attr:`subagents.mcp.pool.MCPPool.consents`) and hands it to its
    connections' sign-in providers, the agents (which tell a sign-in link from another
    question) and the OAuth callback; nothing reaches it through a module global.

    Watchers (:meth:`watch`) hear of every state opened and closed: the relay between workers
    announces them, so that a callback with a state nobody opened costs nothing.
    """

    def __init__(self) -> None:
        self._by_state: dict[str, PendingConsent] = {}
        self._watchers: list[tuple[Callable[[str], None], Callable[[str], None]]] = []

    def watch(self, opened: Callable[[str], None], closed: Callable[[str], None]) -> None:
        """Call ``opened(state)`` for each consent opened and ``closed(state)`` when it ends."""
        self._watchers.append((opened, closed))

    def unwatch(self, opened: Callable[[str], None]) -> None:
        """Stop the watcher registered with ``opened``."""
        self._watchers = [w for w in self._watchers if w[0] != opened]

    def _tell(self, which: int, state: str) -> None:
        for watcher in list(self._watchers):
            watcher[which](state)

    def open(self, state: str, server: str, owner_key: str,
             elicitations: ElicitationRegistry | None = None) -> PendingConsent:
        """Remember a link just sent for the call ``owner_key`` (held in ``elicitations``)."""
        consent = PendingConsent(state, server, owner_key,
                                 asyncio.get_running_loop().create_future(),
                                 elicitations=elicitations)
        self._by_state[state] = consent
        self._tell(0, state)
        return consent

    def pending(self, state: str) -> PendingConsent | None:
        """The consent waiting for the browser with ``state``, if this process holds it."""
        return self._by_state.get(state) if state else None

    def for_owner(self, owner_key: str) -> PendingConsent | None:
        """The consent the call ``owner_key`` waits for, if any."""
        return next((c for c in self._by_state.values() if c.owner_key == owner_key), None)

    def finish(self, state: str, *, code: str | None, iss: str | None = None,
               error: str | None = None) -> PendingConsent | None:
        """The browser came back: hand the code (or the error) to the waiting call.

        Returns the consent, or None for an unknown, used or expired ``state``.
        """
        from mcp.shared.auth import AuthorizationCodeResult
        from mcp.types import ElicitResult

        consent = self._by_state.pop(state, None) if state else None
        if consent is None or consent.result.done():
            return None
        self._tell(1, state)
        if code and not error:
            consent.result.set_result(AuthorizationCodeResult(code=code, state=state, iss=iss))
            if consent.elicitations is not None:
                consent.elicitations.answer(consent.owner_key, ElicitResult(action="accept"))
            log.info("mcp.oauth.consent_given", server=consent.server)
        else:
            consent.result.set_exception(ConsentDeniedError(
                f"the user did not authorize MCP server {consent.server!r} "
                f"({error or 'no code'})"))
            if consent.elicitations is not None:
                consent.elicitations.answer(consent.owner_key, ElicitResult(action="decline"))
            log.info("mcp.oauth.consent_refused", server=consent.server, error=error)
        return consent

    def drop(self, consent: PendingConsent, error: Exception) -> None:
        """Fail a consent that will not be completed (declined in the chat, or expired)."""
        if self._by_state.pop(consent.state, None) is not None:
            self._tell(1, consent.state)
        if not consent.result.done():
            consent.result.set_exception(error)


# ---------------------------------------------------------------------------- token storage
class UserTokenStorage:
    """The SDK's ``TokenStorage`` for one (user, server): tokens of the user, and the client
    registration every user of the server shares (or the configured client)."""

    def __init__(self, store: TokenStore, user: str, config: McpServerConfig,
                 redirect_uri: str) -> None:
        self.store, self.user, self.server = store, user, config.name
        self._configured = configured_client(config, redirect_uri)

    async def get_tokens(self) -> Any:
        """The user's tokens, or None (also when the stored value does not parse)."""
        from mcp.shared.auth import OAuthToken
        from pydantic import ValidationError

        saved = await self.store.get(self.user, self.server, "tokens")
        try:
            return OAuthToken.model_validate(saved["tokens"]) if saved else None
        except (KeyError, TypeError, ValidationError):
            log.warning("mcp.oauth.tokens_unusable", server=self.server)
            return None

    async def set_tokens(self, tokens: Any) -> None:
        """Store the user's tokens and when the access token expires."""
        expires = time.time() + float(tokens.expires_in) if tokens.expires_in else None
        await self.store.put(self.user, self.server, "tokens", {
            "tokens": tokens.model_dump(mode="json", exclude_none=True), "expires_at": expires})

    async def expires_at(self) -> float | None:
        """When the stored access token expires (seconds since the epoch), if known."""
        saved = await self.store.get(self.user, self.server, "tokens")
        value = saved.get("expires_at") if saved else None
        return float(value) if isinstance(value, int | float) else None

    async def save_metadata(self, oauth_metadata: Any, resource_metadata: Any) -> None:
        """Remember the authorization server of the server (shared), so that a session opened
        later refreshes a token without discovering it again."""
        if oauth_metadata is None:
            return
        await self.store.put(SHARED, self.server, "metadata", {
            "oauth": oauth_metadata.model_dump(mode="json", exclude_none=True),
            "resource": resource_metadata.model_dump(mode="json", exclude_none=True)
            if resource_metadata is not None else None})

    async def load_metadata(self) -> tuple[Any, Any]:
        """The authorization-server and protected-resource metadata saved earlier."""
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
        from pydantic import ValidationError

        saved = await self.store.get(SHARED, self.server, "metadata")
        if not saved:
            return None, None
        try:
            return (OAuthMetadata.model_validate(saved["oauth"]),
                    ProtectedResourceMetadata.model_validate(saved["resource"])
                    if saved.get("resource") else None)
        except (KeyError, TypeError, ValidationError):
            return None, None

    async def get_client_info(self) -> Any:
        """The configured client, or the registration stored for the server."""
        from mcp.shared.auth import OAuthClientInformationFull

        if self._configured is not None:
            return self._configured
        saved = await self.store.get(SHARED, self.server, "client")
        return OAuthClientInformationFull.model_validate(saved) if saved else None

    async def set_client_info(self, client_info: Any) -> None:
        """Store the server's client registration (shared by its users)."""
        await self.store.put(SHARED, self.server, "client",
                             client_info.model_dump(mode="json", exclude_none=True))


def callback_url(config: McpServerConfig) -> str:
    """``<public_url>/oauth/callback`` of the server's consent."""
    oauth = config.oauth
    if oauth is None or not oauth.public_url:
        raise ConsentRequiredError(f"MCP server {config.name!r} has no oauth.public_url for "
                                   "its users' sign-in")
    base = resolve_env(oauth.public_url, what=f"oauth.public_url of MCP server {config.name!r}")
    return base.rstrip("/") + CALLBACK_PATH


# ---------------------------------------------------------------------------- the provider
FlightFinder = Callable[[], _Flight | None]
"""The call in flight that may ask the user (None: no call can ask now)."""


def listing_provider(config: McpServerConfig, root: Path) -> Any:
    """The auth of the session that lists a per-user server's tools: an operator's
    ``subagents mcp login`` when one was made, else none (the server may list without it)."""
    if token_file(root, config.name).is_file():
        return authorization_code_provider(config, root, None)
    return None


def user_provider(config: McpServerConfig, *, user: str, store: TokenStore,
                  flights: FlightFinder, consents: ConsentRegistry) -> Any:
    """An ``httpx2.Auth`` that authorizes ``user``'s session of ``config``'s server, asking the
    user for consent through the call in flight when needed (the link waits in
    ``consents``)."""
    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata
    from mcp.types import ElicitRequestURLParams

    oauth = config.oauth
    assert oauth is not None
    redirect = callback_url(config)
    storage = UserTokenStorage(store, user, config, redirect)
    client = configured_client(config, redirect)
    metadata = OAuthClientMetadata.model_validate({
        "redirect_uris": [redirect], "client_name": "subagents",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": client.token_endpoint_auth_method if client else "none",
        "scope": oauth.scope})
    server = config.name
    method, scope = oauth.auth_method, oauth.scope

    class _UserProvider(ConfiguredLogin, StepUpWatch, OAuthClientProvider):
        configured_auth = (client.client_id, method) if client else None
        configured_scope = scope
        waiting_for_user = False
        """True while a sign-in link waits for the user's browser (connecting waits too)."""
        _consent: PendingConsent | None = None

        async def _initialize(self) -> None:
            await super()._initialize()
            # the SDK does not keep the expiry of stored tokens, nor where it found the
            # authorization server: restore both, so that an expired token is refreshed (at the
            # right token endpoint) before it is sent
            self.context.token_expiry_time = await storage.expires_at()
            if self.context.oauth_metadata is None:
                asm, prm = await storage.load_metadata()
                self.context.oauth_metadata = asm
                self.context.protected_resource_metadata = prm
                if asm is not None:
                    self.context.auth_server_url = str(asm.issuer)

        async def _handle_token_response(self, response: httpx2.Response) -> None:
            await super()._handle_token_response(response)
            await storage.save_metadata(self.context.oauth_metadata,
                                        self.context.protected_resource_metadata)

        async def _auth_flow(self, request: httpx2.Request
                             ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
            # On a 401 the SDK goes straight to a new authorization; a token refused before
            # its expiry is refreshed first (the user is asked only when that fails too).
            flow = super()._auth_flow(request)
            refreshed = False
            try:
                outgoing = await flow.__anext__()
                while True:
                    response = yield outgoing
                    if outgoing is request and response.status_code == 401 and not refreshed \
                            and self.context.can_refresh_token():
                        refreshed = True
                        await flow.aclose()
                        log.info("mcp.oauth.refresh_after_401", server=server)
                        self.context.token_expiry_time = 1.0  # long past: refresh first
                        flow = super()._auth_flow(request)
                        outgoing = await flow.__anext__()
                        continue
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()

        async def ask_user(self, url: str) -> None:
            flight = flights()
            if flight is None:
                raise ConsentRequiredError(
                    f"MCP server {server!r} needs the user's authorization, and no agent call "
                    "can ask the user for it now; call a tool of the server again to ask")
            state = parse_qs(urlparse(url).query).get("state", [""])[0]
            consent = consents.open(state, server, flight.owner.key, flight.registry)
            self._consent = consent
            self.waiting_for_user = True
            message = CONSENT_MESSAGE.format(server=server) if self.step_up is None else \
                STEP_UP_MESSAGE.format(server=server, scope=self.step_up or "a larger scope")
            params = ElicitRequestURLParams(message=message, url=url, elicitation_id=state)
            consent.asking = asking = asyncio.ensure_future(flight.ask(params))
            asking.add_done_callback(lambda task: _answered_in_chat(consents, consent, task))
            log.info("mcp.oauth.consent_asked", server=server, key=flight.owner.key,
                     step_up=self.step_up is not None)

        async def wait_for_browser(self) -> Any:
            consent = self._consent
            assert consent is not None
            try:
                return await consent.result
            finally:
                self.waiting_for_user = False
                self._consent = None

    return _bind(_UserProvider, config, metadata, storage)


def _bind(cls: Any, config: McpServerConfig, metadata: Any, storage: UserTokenStorage) -> Any:
    """Create the provider with its own methods as the SDK's redirect and callback handlers."""
    holder: list[Any] = []

    async def redirect(url: str) -> None:
        await holder[0].ask_user(url)

    async def callback() -> Any:
        return await holder[0].wait_for_browser()

    oauth = config.oauth
    assert oauth is not None
    provider = cls(server_url=str(config.url), client_metadata=metadata, storage=storage,
                   client_metadata_url=oauth.client_metadata_url,
                   redirect_handler=redirect, callback_handler=callback)
    holder.append(provider)
    return provider


def _answered_in_chat(consents: ConsentRegistry, consent: PendingConsent,
                      task: asyncio.Future[Any]) -> None:
    """The question of a consent was settled in the conversation: a decline (or a cancel, or
    the question's deadline) ends the consent; an accept after the browser is nothing new."""
    if consent.result.done():
        return
    action = task.result().action if not task.cancelled() and task.exception() is None \
        else "cancel"
    if action == "accept":
        return  # only the browser completes a consent; it keeps waiting
    error: Exception = ConsentDeniedError(
        f"the user declined to authorize MCP server {consent.server!r}") if action == "decline" \
        else ConsentExpiredError(f"the authorization of MCP server {consent.server!r} was "
                                 "cancelled or not completed in time")
    consents.drop(consent, error)
    log.info("mcp.oauth.consent_ended", server=consent.server, action=action)
