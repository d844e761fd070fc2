"""A real MCP server whose tools ask the user for input in the middle of a call (elicitation):
a form with fields, a URL to open, and two questions in a row.

Run over stdio (``python -m tests.servers.elicit_server``) or served in-process over HTTP.
"""

from __future__ import annotations

from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

server = MCPServer("elicit")


class Party(BaseModel):
    people: int = Field(description="How many guests")
    seating: Literal["inside", "terrace"] = Field(default="inside", description="Where to sit")


class Name(BaseModel):
    name: str = Field(description="The name for the booking")


@server.tool()
async def book_table(day: str, ctx: Context) -> str:
    """Book a table; asks the user how many people are coming."""
    answer = await ctx.elicit(f"How many people are coming on {day}?", schema=Party)
    if answer.action == "accept":
        return f"Booked a table for {answer.data.people} ({answer.data.seating}) on {day}."
    return f"No booking made: the user chose {answer.action}."


@server.tool()
async def book_with_name(day: str, ctx: Context) -> str:
    """Book a table; asks for the party size, then for a name."""
    party = await ctx.elicit("How many people?", schema=Party)
    if party.action != "accept":
        return f"No booking made: the user chose {party.action}."
    name = await ctx.elicit("Under which name?", schema=Name)
    if name.action != "accept":
        return f"No booking made: the user chose {name.action} at the name."
    return f"Booked for {party.data.people} under {name.data.name} on {day}."


@server.tool()
async def link_account(ctx: Context) -> str:
    """Link the user's bank account; the user signs in on the bank's page."""
    answer = await ctx.elicit_url("Please sign in at your bank to link the account.",
                                  url="https://bank.example/link?session=42",
                                  elicitation_id="link-42")
    return f"link: {answer.action}"


@server.tool()
def ping() -> str:
    """Answers pong."""
    return "pong"


if __name__ == "__main__":
    server.run()
