"""Demo MCP server: stock research over in-memory market data."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

READ_ONLY = ToolAnnotations(read_only_hint=True)

COMPANIES = {
    "ACME": {"name": "Acme Robotics", "sector": "Industrials", "price": 182.40, "change": 1.8,
             "pe": 24.1, "news": ["Acme wins a warehouse automation contract in Rotterdam.",
                                  "Acme's CFO expects margins to widen next year."]},
    "NOVA": {"name": "Nova Energy", "sector": "Utilities", "price": 47.15, "change": -0.6,
             "pe": 15.3, "news": ["Nova Energy opens its largest offshore wind farm.",
                                  "Regulator approves Nova's grid upgrade plan."]},
    "BYTE": {"name": "Bytewise Software", "sector": "Technology", "price": 311.02,
             "change": 3.2, "pe": 41.7, "news": ["Bytewise launches an on-device AI assistant.",
                                                "Bytewise beats quarterly revenue estimates."]},
}

server = MCPServer("stocks", instructions="Quotes, fundamentals and news for listed companies.")


class Quote(BaseModel):
    """A stock quote as the demo server returns it."""

    symbol: str
    name: str
    price: float
    change_percent: float
    currency: str = "USD"


def _company(symbol: str) -> dict[str, object]:
    company = COMPANIES.get(symbol.strip().upper())
    if company is None:
        known = ", ".join(sorted(COMPANIES))
        raise ToolError(f"unknown symbol {symbol!r}; known symbols: {known}")
    return company


@server.tool(annotations=READ_ONLY)
def search_symbol(query: str) -> str:
    """Find the ticker symbol of a company by (part of) its name."""
    hits = [f"{sym}: {c['name']}" for sym, c in COMPANIES.items()
            if query.lower() in str(c["name"]).lower() or query.upper() == sym]
    return "\n".join(hits) if hits else f"no company matches {query!r}"


@server.tool(annotations=READ_ONLY)
def get_stock_price(symbol: str) -> Quote:
    """Current price and daily change of a stock, by ticker symbol."""
    company = _company(symbol)
    return Quote(symbol=symbol.upper(), name=str(company["name"]), price=float(company["price"]),  # type: ignore[arg-type]
                 change_percent=float(company["change"]))  # type: ignore[arg-type]


@server.tool(annotations=READ_ONLY)
def get_company_news(symbol: str, limit: int = 2) -> str:
    """Latest news headlines about a company, by ticker symbol."""
    news = list(_company(symbol)["news"])  # type: ignore[call-overload]
    return "\n".join(f"- {item}" for item in news[:limit])


@server.tool(annotations=READ_ONLY)
def get_fundamentals(symbol: str) -> str:
    """Sector and price/earnings ratio of a company."""
    company = _company(symbol)
    return f"{company['name']} ({symbol.upper()}): sector {company['sector']}, P/E {company['pe']}"


if __name__ == "__main__":
    from subagents.demo._serve import serve

    serve(server)
