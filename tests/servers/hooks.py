"""Hooks referenced by dotted path from test endpoints (pre_call_hook, auth module)."""

from __future__ import annotations

from typing import Any


def add_uid(context: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"uid": f"hook-{context['tool_name']}"}}


def broken(context: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("vault unreachable")


class HeaderAuth:
    async def get_headers(self) -> dict[str, str]:
        return {"Authorization": "Bearer from-module"}
