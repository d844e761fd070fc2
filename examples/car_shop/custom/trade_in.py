"""Trade-in estimates (written against Rasa's import paths): the estimate tool's result sets
the exit slot directly, so the model does not have to copy the number."""

import json
from typing import Any, Dict, List

from rasa.agents.protocol.mcp.mcp_task_agent import MCPTaskAgent
from rasa.agents.schemas import AgentToolResult
from rasa.shared.core.events import SlotSet


class TradeInAgent(MCPTaskAgent):
    async def process_tool_output(
        self,
        current_iteration_results: Dict[str, AgentToolResult],
        cumulative_results: Dict[str, AgentToolResult],
        output_channel: Any,
    ) -> List[Any]:
        events = []
        for result in current_iteration_results.values():
            if result.tool_name == "estimate_trade_in" and result.result:
                events.append(SlotSet("trade_in_value", json.loads(result.result)["value"]))
        return events
