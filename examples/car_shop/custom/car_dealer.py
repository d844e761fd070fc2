"""The remote dealer's offer goes into slots (written against Rasa's import paths)."""

from rasa.agents.protocol.a2a.a2a_agent import A2AAgent
from rasa.agents.schemas import AgentOutput
from rasa.shared.core.events import SlotSet


class CarDealerAgent(A2AAgent):
    async def process_agent_output(self, output: AgentOutput) -> AgentOutput:
        for results in output.structured_results[-1:]:
            for item in results:
                offer = item.get("result") if item.get("type") == "data" else None
                if isinstance(offer, dict) and "model" in offer:
                    output.events.append(SlotSet("car_model", offer["model"]))
                    output.events.append(SlotSet("car_price", offer.get("price")))
        return output
