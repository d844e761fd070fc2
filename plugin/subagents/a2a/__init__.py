"""Agent2Agent (A2A): remote agents as sub agents, and our sub agents served to A2A clients.

The client side is :class:`subagents.agents.a2a_agent.A2AAgent` (``protocol: A2A``); the serving
side is :mod:`subagents.a2a.server`. Both need the optional ``a2a-sdk`` package
(``pip install 'subagents[a2a]'``).
"""

from __future__ import annotations

from subagents.agents.a2a_agent import A2AAgent

__all__ = ["A2AAgent"]
