"""MCP client side: transports, one reconnecting connection per server, tool filtering."""

from subagents.mcp.connection import MCPServerConnection, MCPTool
from subagents.mcp.pool import MCPPool

__all__ = ["MCPPool", "MCPServerConnection", "MCPTool"]
