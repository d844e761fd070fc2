"""MCP client side: transports, one reconnecting connection per server, tool filtering."""

from .connection import MCPServerConnection, MCPTool
from .pool import MCPPool

__all__ = ["MCPPool", "MCPServerConnection", "MCPTool"]
