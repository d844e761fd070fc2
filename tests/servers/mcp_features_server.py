"""A real MCP server exercising protocol features beyond plain text tools: binary content,
task-only tools, progress, server logging, roots and sampling.

Run over stdio (``python -m tests.servers.mcp_features_server``) or served in-process over HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import warnings
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    ResourceLink,
    SamplingMessage,
    SetLevelRequestParams,
    TextContent,
    ToolExecution,
)
from mcp.types import Tool as MCPTool

PNG_BYTES = bytes(range(256)) * 16  # 4096 bytes of "image"
WAV_BYTES = b"RIFF" + bytes(1996)  # 2000 bytes of "audio"
BLOB_BYTES = b"%PDF-" + bytes(995)  # 1000 bytes


class _FeaturesServer(MCPServer):
    resource_listings = 0
    """How many times a client listed the resources (this process)."""

    async def list_resources(self) -> list[Any]:
        type(self).resource_listings += 1
        return await super().list_resources()

    async def list_tools(self) -> list[MCPTool]:
        tools = await super().list_tools()
        return [t.model_copy(update={"execution": ToolExecution(task_support="required")})
                if t.name == "long_report" else t for t in tools]


server = _FeaturesServer("features")
LOG_LEVELS: list[str] = []
"""Every level a client asked for with logging/setLevel (declares the logging capability)."""


async def _set_level(ctx: object, params: SetLevelRequestParams) -> EmptyResult:
    LOG_LEVELS.append(str(params.level))
    return EmptyResult()


server._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams,
                                            _set_level)


@server.tool()
def requested_log_level() -> str:
    """The level the client last asked for (or 'none')."""
    return LOG_LEVELS[-1] if LOG_LEVELS else "none"


@server.tool()
def picture() -> list[ImageContent | TextContent]:
    """A chart as a PNG image, with a caption."""
    return [TextContent(type="text", text="Revenue chart"),
            ImageContent(type="image", data=base64.b64encode(PNG_BYTES).decode(),
                         mime_type="image/png")]


@server.tool()
def recording() -> list[AudioContent]:
    """A short audio clip."""
    return [AudioContent(type="audio", data=base64.b64encode(WAV_BYTES).decode(),
                         mime_type="audio/wav")]


@server.tool()
def report_files() -> list[EmbeddedResource | ResourceLink]:
    """An embedded PDF blob and a link to a larger file."""
    blob = BlobResourceContents(uri="file:///reports/q3.pdf", mime_type="application/pdf",
                                blob=base64.b64encode(BLOB_BYTES).decode())
    return [EmbeddedResource(type="resource", resource=blob),
            ResourceLink(type="resource_link", uri="file:///reports/q3-full.pdf",
                         name="q3-full.pdf", mime_type="application/pdf", size=123456)]


@server.tool()
def media_file() -> CallToolResult:
    """A picture as a content block and again inside structured content, the way the filesystem
    reference server's read_media_file answers, with a data: URL and a raw base64 field too."""
    data = base64.b64encode(PNG_BYTES).decode()
    blob = base64.b64encode(BLOB_BYTES).decode()
    return CallToolResult(
        content=[ImageContent(type="image", data=data, mime_type="image/png")],
        structured_content={
            "content": [{"type": "image", "data": data, "mimeType": "image/png"},
                        {"type": "resource", "resource": {
                            "uri": "file:///reports/q3.pdf", "mimeType": "application/pdf",
                            "blob": blob}}],
            "name": "chart.png", "thumbnail": f"data:image/png;base64,{data}", "raw": data})


@server.tool()
def long_report() -> str:
    """Only runs as a task (listed with execution.taskSupport = required)."""
    return "never called directly"


@server.tool()
async def crawl_with_progress(steps: int, step_ms: int, ctx: Context) -> str:
    """Report progress after every step, then answer."""
    for step in range(steps):
        await asyncio.sleep(step_ms / 1000)
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
    return f"crawled {steps} pages"


@server.tool()
async def wait_quietly(ms: int) -> str:
    """Wait without reporting progress, then answer."""
    await asyncio.sleep(ms / 1000)
    return "waited"


@server.tool()
async def chatty(ctx: Context) -> str:
    """Sends a debug, an info and a warning log message, then answers."""
    with warnings.catch_warnings():  # logging is deprecated from protocol 2026-07-28 on
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.debug("debug detail", logger_name="crawler")
        await ctx.info("fetched 3 pages", logger_name="crawler")
        await ctx.warning({"slow": True, "pages": 3}, logger_name="crawler")
    return "done"


@server.tool()
async def client_name(ctx: Context) -> str:
    """The client's name and version from the handshake."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    return f"{info.name} {info.version}" if info is not None else "anonymous"


@server.tool()
async def show_roots(ctx: Context) -> str:
    """The client's roots, one URI per line (or 'no roots')."""
    caps = ctx.client_capabilities
    if caps is None or caps.roots is None:
        return "no roots"
    with warnings.catch_warnings():  # roots are deprecated from protocol 2026-07-28 on
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        result = await ctx.session.list_roots()
    return "\n".join(str(root.uri) for root in result.roots) or "no roots"


@server.tool()
async def summarise(text: str, ctx: Context) -> str:
    """Ask the client's model to summarise the text (MCP sampling)."""
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        return "sampling not offered"
    with warnings.catch_warnings():  # sampling is deprecated from protocol 2026-07-28 on
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=text))],
            max_tokens=500, system_prompt="Summarise in one line.")
    content = result.content
    return f"{result.model}: {getattr(content, 'text', content)}"


@server.resource("file:///reports/q3-full.pdf", mime_type="application/pdf")
def q3_full() -> bytes:
    """The full Q3 report (binary)."""
    return BLOB_BYTES


@server.resource("file:///reports/q3-summary.txt", mime_type="text/plain")
def q3_summary() -> str:
    """The Q3 summary."""
    return "Q3: revenue up 12%, costs flat."


@server.resource("report://{quarter}/summary", mime_type="text/plain")
def quarter_summary(quarter: str) -> str:
    """The summary of any quarter."""
    return f"{quarter}: nothing unusual."


if __name__ == "__main__":
    server.run()
