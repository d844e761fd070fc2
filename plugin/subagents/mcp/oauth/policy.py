"""Rules every OAuth flow of ours follows, whatever the grant: how a client secret is sent to
the token endpoint, and what a step-up (``403 insufficient_scope``) is and who answers it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any


def token_auth_method(configured: str | None, metadata: Any) -> str:
    """How a token request authenticates a client that has a secret.

    A configured ``auth_method`` always wins. Otherwise HTTP Basic (``client_secret_basic``),
    unless the authorization server's metadata lists ``client_secret_post`` and not Basic; a
    server whose metadata lists no methods (or that has none) gets Basic, the RFC default.
    """
    if configured:
        return configured
    listed = getattr(metadata, "token_endpoint_auth_methods_supported", None) or []
    if "client_secret_post" in listed and "client_secret_basic" not in listed:
        return "client_secret_post"
    return "client_secret_basic"


def scope_refused(response: Any) -> str | None:
    """The scope a ``403`` with ``error="insufficient_scope"`` asks for (RFC 6750 §3.1; ``""``
    when it names none); None for any other response."""
    from mcp.client.auth.utils import extract_field_from_www_auth, extract_scope_from_www_auth

    if response.status_code != 403 \
            or extract_field_from_www_auth(response, "error") != "insufficient_scope":
        return None
    return extract_scope_from_www_auth(response) or ""


class StepUpWatch:
    """For a provider (the SDK's ``OAuthClientProvider``): notes the scope a ``403
    insufficient_scope`` to the request asks for (``step_up``, None after any other answer).
    The SDK then re-authorizes with the larger scope; with ``reauthorize_on_step_up`` False
    (nobody can sign in again) the 403 stands as the request's answer instead."""

    step_up: str | None = None
    reauthorize_on_step_up = True

    async def _auth_flow(self, request: Any) -> AsyncGenerator[Any, Any]:
        flow = super()._auth_flow(request)  # type: ignore[misc]
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request:
                    self.step_up = scope_refused(response)
                    if self.step_up is not None and not self.reauthorize_on_step_up:
                        return
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()
