"""The car shop's MCP server: test-drive reservations and trade-in estimates (in memory).

Both tools return structured content, so a flow step can map fields of the result into slots
(``result.structuredContent.reservation_id``). endpoints.yml starts it over stdio.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

MODELS = ("corolla", "civic", "model 3")
BASE_VALUE = {"toyota": 9000, "honda": 8500, "ford": 7000}

server = MCPServer("car_shop", instructions="Reserve test drives and estimate trade-in values.")


@server.tool()
def reserve_car(model: str, customer: str) -> dict[str, Any]:
    """Reserve a test drive of a car model for a customer; returns the reservation id."""
    key = model.strip().lower()
    if key not in MODELS:
        raise ToolError(f"unknown model {model!r}; models: {', '.join(MODELS)}")
    reference = f"TD-{key.replace(' ', '').upper()}-{customer.split()[0].upper()}"
    return {"reservation_id": reference, "model": key, "customer": customer}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def estimate_trade_in(make: str, year: int) -> dict[str, Any]:
    """Estimate what the shop pays for a used car of this make and year."""
    base = BASE_VALUE.get(make.strip().lower())
    if base is None:
        raise ToolError(f"no estimates for {make!r}; makes: {', '.join(BASE_VALUE)}")
    age = max(0, 2026 - int(year))
    return {"make": make.lower(), "year": int(year), "value": max(500, base - 600 * age)}


if __name__ == "__main__":
    server.run()
