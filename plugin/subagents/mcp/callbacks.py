"""Answers to the requests an MCP server may send us: roots and sampling.

Both are opt-in per server in ``endpoints.yml``; a server that is not given them sees neither
capability and cannot call them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import structlog

from ..config.endpoints import EndpointsConfig, McpServerConfig
from .content import block_text

log = structlog.get_logger("subagents.mcp")


def root_uris(config: McpServerConfig, root: Path) -> list[str]:
    """The configured roots as ``file://`` URIs (directories relative to the project root)."""
    out = []
    for entry in config.roots:
        if entry.startswith("file://"):
            out.append(entry)
        else:
            path = Path(entry)
            out.append((path if path.is_absolute() else root / path).resolve().as_uri())
    return out


def roots_callback(config: McpServerConfig, root: Path) -> Any:
    """A ``list_roots_callback`` for the SDK client, or None when no roots are configured."""
    if not config.roots:
        return None
    from mcp.types import ListRootsResult, Root

    roots = [Root.model_validate({"uri": uri, "name": Path(uri.removeprefix("file://")).name
                                  or None}) for uri in root_uris(config, root)]

    async def list_roots(context: Any) -> Any:
        log.debug("mcp.roots.listed", server=config.name, roots=len(roots))
        return ListRootsResult(roots=roots)

    return list_roots


class SamplingHandler:
    """Answers ``sampling/createMessage`` with the configured model group, capped in tokens."""

    def __init__(self, config: McpServerConfig, endpoints: EndpointsConfig | None) -> None:
        assert config.sampling is not None
        self.server = config.name
        self.settings = config.sampling
        self.endpoints = endpoints
        self._llm: Any = None

    def _client(self) -> Any:
        if self._llm is None:
            from ..llm import LLMClient, resolve_model_settings

            model = resolve_model_settings({"model_group": self.settings.model_group},
                                           self.endpoints, where="endpoints.yml")
            self._llm = LLMClient(model, name=f"mcp-sampling:{self.server}")
        return self._llm

    async def __call__(self, context: Any, params: Any) -> Any:
        from mcp.types import INTERNAL_ERROR, CreateMessageResult, ErrorData, TextContent

        if params.tools:
            return ErrorData(code=INTERNAL_ERROR, message="tool use in sampling is not supported")
        messages: list[dict[str, Any]] = []
        if params.system_prompt:
            messages.append({"role": "system", "content": params.system_prompt})
        for message in params.messages:
            content = message.content
            blocks = content if isinstance(content, list) else [content]
            messages.append({"role": message.role,
                             "content": "\n".join(block_text(b) for b in blocks)})
        max_tokens = min(int(params.max_tokens), self.settings.max_tokens)
        try:
            llm = self._client()
            capped = dataclasses.replace(llm.settings, options={
                **llm.settings.options, "max_completion_tokens": max_tokens})
            llm.settings = capped
            response = await llm.complete(messages, None)
        except Exception as exc:  # noqa: BLE001 - the server gets an error, the run goes on
            log.warning("mcp.sampling.failed", server=self.server, error=str(exc))
            return ErrorData(code=INTERNAL_ERROR, message="sampling failed")
        log.info("mcp.sampling.answered", server=self.server, model=llm.settings.model,
                 max_tokens=max_tokens, completion_tokens=response.usage.completion_tokens)
        stop = "maxTokens" if response.finish_reason == "length" else "endTurn"
        return CreateMessageResult(role="assistant", model=llm.settings.model, stop_reason=stop,
                                   content=TextContent(type="text", text=response.text or ""))

    async def close(self) -> None:
        if self._llm is not None:
            await self._llm.close()
