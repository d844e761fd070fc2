"""MCP servers of the example assistant (in-memory data), runnable over stdio or HTTP.

``python -m subagents.demo.stocks`` serves over stdio; add ``--http 127.0.0.1:8765`` for
streamable HTTP at ``/mcp`` or ``--sse 127.0.0.1:8765`` for SSE at ``/sse``.
"""
