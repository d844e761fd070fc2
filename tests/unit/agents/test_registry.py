"""configuration.module overrides and the protocol registry."""

from __future__ import annotations

import pytest
from subagents.agents.a2a_agent import A2AAgent
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.registry import agent_class, create_agent, protocol_type_for
from subagents.agents.task_agent import MCPTaskAgent
from subagents.config import load_project
from subagents.exceptions import AgentInitializationError

MODULE = '''
from subagents import MCPOpenAgent, MCPTaskAgent


class MyOpen(MCPOpenAgent):
    pass


class MyTask(MCPTaskAgent):
    pass


class NotAnAgent:
    pass
'''


def project_with_module(make_project, module: str):
    return make_project({
        "sub_agents/weather/agent.py": MODULE,
        "sub_agents/weather/__init__.py": "",
        "sub_agents/__init__.py": "",
        "sub_agents/weather/config.yml": f"""
            agent:
              name: weather_agent
              description: d
            configuration:
              module: {module}
            connections:
              mcp_servers: [{{name: tools}}]
            """})


def test_a_subclass_next_to_its_config_is_loaded_from_the_project_folder(make_project):
    root = project_with_module(make_project, "sub_agents.weather.agent.MyOpen")
    project = load_project(root)
    spec = project.agents["weather_agent"]
    cls = agent_class(spec, "mcp_open", root)
    assert cls.__name__ == "MyOpen"
    assert issubclass(cls, MCPOpenAgent)
    agent = create_agent(spec, "mcp_open", root=root, endpoints=project.endpoints)
    assert type(agent).__name__ == "MyOpen"
    assert agent.protocol_type == "mcp_open"


def test_the_class_must_subclass_what_the_call_step_needs(make_project):
    root = project_with_module(make_project, "sub_agents.weather.agent.MyOpen")
    spec = load_project(root).agents["weather_agent"]
    with pytest.raises(AgentInitializationError) as info:
        agent_class(spec, "mcp_task", root)
    assert info.value.code == "agent.module.not_subclass"
    assert "MCPTaskAgent" in str(info.value)
    assert "with exit_if" in str(info.value)


def test_a_class_that_is_no_agent_is_refused(make_project):
    root = project_with_module(make_project, "sub_agents.weather.agent.NotAnAgent")
    spec = load_project(root).agents["weather_agent"]
    with pytest.raises(AgentInitializationError) as info:
        agent_class(spec, "mcp_open", root)
    assert info.value.code == "agent.module.not_subclass"


def test_protocol_type_follows_the_call_step(make_project):
    project = load_project(make_project())
    spec = project.agents["weather_agent"]
    assert protocol_type_for(spec, has_exit_if=True) == "mcp_task"
    assert protocol_type_for(spec, has_exit_if=False) == "mcp_open"
    assert agent_class(spec, "mcp_task", project.root) is MCPTaskAgent
    assert agent_class(spec, "a2a", project.root) is A2AAgent
    with pytest.raises(AgentInitializationError) as info:
        agent_class(spec, "grpc_agent", project.root)
    assert info.value.code == "agent.protocol.unsupported"


def test_third_party_classes_register_through_the_entry_point_group(make_project, tmp_path,
                                                                       monkeypatch):
    site = tmp_path / "site"
    (site / "thirdparty-0.1.dist-info").mkdir(parents=True)
    (site / "thirdparty-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: thirdparty\nVersion: 0.1\n")
    (site / "thirdparty-0.1.dist-info" / "entry_points.txt").write_text(
        "[subagents.agents]\na2a = thirdparty_agent:RemoteAgent\n")
    (site / "thirdparty_agent.py").write_text(
        "from subagents import MCPOpenAgent\n\n\nclass RemoteAgent(MCPOpenAgent):\n"
        "    PROTOCOL_TYPE = 'a2a'\n")
    monkeypatch.syspath_prepend(str(site))
    root = make_project({"sub_agents/weather/config.yml": """
        agent: {name: weather_agent, description: d, protocol: A2A}
        """})
    spec = load_project(root).agents["weather_agent"]
    protocol = protocol_type_for(spec, has_exit_if=False)
    cls = agent_class(spec, protocol, root)
    assert (protocol, cls.__name__) == ("a2a", "RemoteAgent")
