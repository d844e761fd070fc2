"""Conditions are parsed once, when the project loads: a task agent gets the call step's parsed
``exit_if`` conditions with its input (the texts stay in ``metadata["exit_if"]``), and parses the
texts itself only when it has no parsed ones or a hook changed them."""

from __future__ import annotations

import anyio
from subagents.agents.schemas import AgentInput
from subagents.agents.task_agent import MCPTaskAgent
from subagents.conditions import parse_condition
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

RECORDING_AGENT = '''
    from subagents.agents.task_agent import MCPTaskAgent
    from subagents.types import SlotSet


    class Recording(MCPTaskAgent):
        async def process_input(self, input):
            self.given = input.exit_conditions
            return input

        async def process_output(self, output):
            ids = [id(c) for c in self.given or []]
            output.events.append(SlotSet("given", ids))
            return output
    '''


def test_the_attached_conditions_are_used_while_the_texts_match():
    parsed = [parse_condition("slots.city is not null")]
    given = AgentInput(id="a", metadata={"exit_if": ["slots.city is not null"]})
    given.attach_exit_conditions(parsed)
    assert MCPTaskAgent.exit_conditions(given)[0] is parsed[0]
    given.metadata["exit_if"] = ["slots.city == 'Rome'"]  # changed by a hook: parsed anew
    again = MCPTaskAgent.exit_conditions(given)
    assert [c.text for c in again] == ["slots.city == 'Rome'"]
    assert again[0].evaluate({"slots": {"city": "Rome"}})


async def test_a_task_agent_gets_the_conditions_parsed_when_the_project_loaded(
        tmp_path, tools_url):
    root = write_project(tmp_path / "a", tools_url, {
        "custom/__init__.py": "",
        "custom/recording.py": RECORDING_AGENT,
        "data/flows.yml": """
            flows:
              city_flow:
                description: find a city
                steps:
                  - call: city_agent
                    exit_if: [slots.city is not null]
            """,
        "data/domain.yml": """
            slots:
              city: {type: text, mappings: [{type: from_llm}]}
              given: {type: any}
            """,
        "sub_agents/city/config.yml": """
            agent: {name: city_agent, description: Finds the city.}
            configuration: {module: custom.recording.Recording, include_date_time: false}
            """,
    })
    script = {"command_generator": ["start flow city_flow"],
              "city_agent": [{"tool_calls": [{"set_slot_city": {"slot_value": "Rome"}}]}]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            _, events = await Conversation(assistant).say("Rome please")
        fake.assert_done()
        step = assistant.project.flows["city_flow"].steps[0]
    assert "slot:city=Rome" in names(events)
    given = next(e["value"] for e in events if e["event"] == "slot" and e["name"] == "given")
    assert given == [id(c) for c in step.exit_if]
    assert given
