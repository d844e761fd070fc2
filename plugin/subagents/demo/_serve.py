"""Run a demo server over stdio (default), streamable HTTP or SSE."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from mcp.server.mcpserver import MCPServer


def serve(server: MCPServer, argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=server.name)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at /mcp")
    group.add_argument("--sse", metavar="HOST:PORT", help="serve SSE at /sse")
    args = parser.parse_args(argv)
    # keep stdout clean for the stdio transport; the SDK logs go to stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True)
    if args.http or args.sse:
        host, _, port = (args.http or args.sse).rpartition(":")
        server.run("streamable-http" if args.http else "sse", host=host or "127.0.0.1",
                   port=int(port))
    else:
        server.run()
