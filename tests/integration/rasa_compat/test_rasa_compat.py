"""Agent classes written against Rasa's import paths run unchanged (no Rasa installed); with a
real ``rasa`` package installed, such a class is refused with a clear error."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator

import anyio
import pytest
from subagents import rasa_compat
from subagents.demo.a2a_dealer import build_app
from subagents.dialogue.processor import Assistant
from subagents.exceptions import AgentInitializationError
from subagents.stores import InMemoryTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

PRICE_AGENT = '''
    import json

    from rasa.agents.protocol.mcp.mcp_task_agent import MCPTaskAgent
    from rasa.agents.schemas import AgentToolResult
    from rasa.agents.schemas.agent_input import AgentInputSlot
    from rasa.shared.core.events import SlotSet
    from rasa.shared.utils.io import read_json_file


    class PriceAgent(MCPTaskAgent):
        """Written for Rasa: a custom tool and a slot set from its result."""

        def get_custom_tool_definitions(self):
            return [{
                "type": "function",
                "function": {
                    "name": "lookup_price",
                    "description": "Price of a product",
                    "parameters": {"type": "object",
                                   "properties": {"product": {"type": "string"}},
                                   "required": ["product"]},
                },
                "tool_executor": self.lookup_price,
            }]

        async def lookup_price(self, arguments, context):
            prices = read_json_file(self.project_root / "prices.json")
            return AgentToolResult(tool_name="lookup_price",
                                   result=json.dumps({"price": prices[arguments["product"]]}))

        async def process_tool_output(self, current, cumulative, output_channel):
            events = []
            for result in current.values():
                if result.tool_name == "lookup_price":
                    events.append(SlotSet("price", json.loads(result.result)["price"]))
            return events

        async def process_input(self, input):
            assert all(isinstance(s, AgentInputSlot) for s in input.slots)
            return input
    '''
DEALER_AGENT = '''
    from rasa.agents.protocol.a2a.a2a_agent import A2AAgent
    from rasa.agents.schemas import AgentOutput
    from rasa.shared.core.events import SlotSet


    class Dealer(A2AAgent):
        async def process_agent_output(self, output: AgentOutput) -> AgentOutput:
            for results in output.structured_results[-1:]:
                for item in results:
                    if item["type"] == "data":
                        output.events.append(SlotSet("price", item["result"]["price"]))
            return output
    '''
FLOWS = """
    flows:
      price_flow:
        description: find a price
        steps:
          - call: price_agent
            exit_if: [slots.price is not null]
          - action: utter_price
      dealer_flow:
        description: ask the dealer
        steps:
          - call: car_dealer
          - action: utter_price
    """
DOMAIN = """
    slots:
      price: {type: float}
    responses:
      utter_price: [{text: "The price is {price}."}]
    """


@pytest.fixture
def clean_rasa() -> Iterator[None]:
    def forget() -> None:
        rasa_compat.deactivate()
        for name in [n for n in sys.modules if n == "rasa" or n.startswith("rasa.")]:
            del sys.modules[name]

    forget()
    yield
    forget()


def project(root, tools_url, card: str = "http://127.0.0.1:9/card.json"):
    return write_project(root, tools_url, {
        "data/flows.yml": FLOWS, "data/domain.yml": DOMAIN,
        "prices.json": '{"lamp": 19.5}',
        "custom/__init__.py": "",
        "custom/price_agent.py": PRICE_AGENT,
        "custom/dealer.py": DEALER_AGENT,
        "sub_agents/price/config.yml": """
            agent: {name: price_agent, description: Finds prices.}
            configuration: {module: custom.price_agent.PriceAgent, include_date_time: false}
            """,
        "sub_agents/dealer/config.yml": f"""
            agent: {{name: car_dealer, protocol: A2A, description: A dealer.}}
            configuration:
              agent_card: {card}
              module: custom.dealer.Dealer
              max_retries: 1
            """,
    })


async def test_a_class_subclassing_rasas_task_agent_runs_unchanged(tmp_path, tools_url,
                                                                      clean_rasa):
    script = {
        "command_generator": ["start flow price_flow"],
        "price_agent": [{"tool_calls": [{"lookup_price": {"product": "lamp"}}]}],
    }
    async with serve_app(build_app()) as dealer:
        root = project(tmp_path / "a", tools_url, f"{dealer}/.well-known/agent-card.json")
        async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
            with anyio.fail_after(30):
                texts, events = await Conversation(assistant).say("how much is the lamp?")
            fake.assert_done()
    assert "slot:price=19.5" in names(events)
    assert "agent_completed:price_agent" in names(events)
    assert texts[0] == "The price is 19.5."
    assert type(sys.modules["rasa.shared.core.events"].SlotSet("x", 1)) is not dict


async def test_a_class_subclassing_rasas_a2a_agent_sets_slots_from_the_remote_result(
        tmp_path, tools_url, clean_rasa):
    async with serve_app(build_app()) as dealer:
        root = project(tmp_path / "a", tools_url, f"{dealer}/.well-known/agent-card.json")
        script = {"command_generator": ["start flow dealer_flow"]}
        async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
            with anyio.fail_after(30):
                texts, events = await Conversation(assistant).say("price of a civic?")
    assert "slot:price=26900.0" in names(events)
    assert texts[1:3] == ["The Civic is in stock at $26,900.", "The price is 26900.0."]


def test_only_the_listed_rasa_modules_are_provided(clean_rasa):
    assert rasa_compat.activate()
    from rasa.agents.protocol.mcp.mcp_open_agent import MCPOpenAgent  # type: ignore
    from subagents import MCPOpenAgent as Ours

    assert MCPOpenAgent is Ours
    with pytest.raises(ModuleNotFoundError):
        import rasa.core.policies  # type: ignore  # noqa: F401


def test_rasas_tool_format_constants_build_a_tool_the_agent_accepts(clean_rasa):
    """Rasa's car-purchase sample builds its ``task_completed`` tool from these names."""
    assert rasa_compat.activate()
    from rasa.agents.constants import (  # type: ignore
        TOOL_DESCRIPTION_KEY,
        TOOL_NAME_KEY,
        TOOL_PARAMETERS_KEY,
        TOOL_PROPERTIES_KEY,
        TOOL_REQUIRED_KEY,
        TOOL_TYPE_FUNCTION_KEY,
        TOOL_TYPE_KEY,
    )
    from subagents.agents.schemas import AgentToolSchema

    tool = {TOOL_TYPE_KEY: TOOL_TYPE_FUNCTION_KEY, TOOL_TYPE_FUNCTION_KEY: {
        TOOL_NAME_KEY: "task_completed", TOOL_DESCRIPTION_KEY: "Say the task is done.",
        TOOL_PARAMETERS_KEY: {"type": "object", TOOL_PROPERTIES_KEY: {
            "message": {"type": "string"}}, TOOL_REQUIRED_KEY: ["message"]}}}
    schema = AgentToolSchema.from_openai_json_format(tool)
    assert schema.name == "task_completed"
    assert schema.parameters["required"] == ["message"]


def test_with_the_real_rasa_installed_its_classes_are_refused_with_the_reason(
        tmp_path, tools_url, clean_rasa, monkeypatch):
    site = tmp_path / "site"
    for package in ("rasa", "rasa/agents", "rasa/agents/protocol", "rasa/agents/protocol/mcp",
                    "rasa/agents/protocol/a2a", "rasa/agents/schemas", "rasa/shared",
                    "rasa/shared/core", "rasa/shared/utils"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
    for module, body in {
        "rasa/agents/protocol/mcp/mcp_task_agent.py": "class MCPTaskAgent:\n    pass\n",
        "rasa/agents/protocol/a2a/a2a_agent.py": "class A2AAgent:\n    pass\n",
        "rasa/agents/schemas/agent_input.py": "class AgentInputSlot:\n    pass\n",
        "rasa/shared/core/events.py": "class SlotSet:\n    pass\n",
        "rasa/shared/utils/io.py": "def read_json_file(path):\n    pass\n",
    }.items():
        (site / module).write_text(textwrap.dedent(body))
    (site / "rasa/agents/schemas/__init__.py").write_text(
        "class AgentToolResult:\n    pass\n\n\nclass AgentOutput:\n    pass\n")
    monkeypatch.syspath_prepend(str(site))
    assert rasa_compat.real_rasa_available()
    assert not rasa_compat.activate()
    with pytest.raises(AgentInitializationError) as info:
        Assistant.load(project(tmp_path / "a", tools_url), tracker_store=InMemoryTrackerStore())
    assert info.value.code == "agent.module.rasa_installed"
