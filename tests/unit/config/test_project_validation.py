"""Every validation error: a broken project each, asserting code, file and line."""

from __future__ import annotations

import pytest
from subagents.config import collect_issues, load_project
from subagents.exceptions import ProjectInvalidError

CASES = [
    # (id, files, code, file, line)
    ("agent section missing", {"sub_agents/weather/config.yml": "configuration: {}\n"},
     "agent.validation.mandatory.agent_section_missing", "sub_agents/weather/config.yml", 1),
    ("agent section not a mapping", {"sub_agents/weather/config.yml": "agent: weather\n"},
     "agent.validation.mandatory.agent_section_invalid", "sub_agents/weather/config.yml", 1),
    ("description missing", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
        """}, "agent.validation.mandatory.fields_missing", "sub_agents/weather/config.yml", 1),
    ("unknown agent key", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
          colour: blue
        """}, "agent.validation.structure.additional_agent_keys",
     "sub_agents/weather/config.yml", 4),
    ("unknown configuration key", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          tool_timout: 3
        """}, "agent.validation.structure.additional_configuration_keys",
     "sub_agents/weather/config.yml", 5),
    ("unknown connections key", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        connections:
          servers: []
        """}, "agent.validation.structure.additional_connections_keys",
     "sub_agents/weather/config.yml", 5),
    ("invalid protocol", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
          protocol: mcp
        """}, "agent.validation.pydantic.invalid_protocol", "sub_agents/weather/config.yml", 4),
    ("max_retries not an int", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          max_retries: lots
        """}, "agent.validation.pydantic.type_error", "sub_agents/weather/config.yml", 5),
    ("tool_timeout zero", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          tool_timeout: 0
        """}, "agent.validation.pydantic.failed", "sub_agents/weather/config.yml", 5),
    ("tool_timeout infinite", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          tool_timeout: .inf
        """}, "agent.validation.pydantic.failed", "sub_agents/weather/config.yml", 5),
    ("invalid timezone", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          timezone: Mars/Olympus
        """}, "datetime_utils.validate_datetime_configuration.invalid_timezone",
     "sub_agents/weather/config.yml", 5),
    ("include and exclude together", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        connections:
          mcp_servers:
            - name: tools
              include_tools: [a]
              exclude_tools: [b]
        """}, "agent.validation.mcp.include_exclude_conflict",
     "sub_agents/weather/config.yml", 6),
    ("unknown mcp server", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        connections:
          mcp_servers:
            - name: tools
            - name: weather_api
        """}, "agent.validation.endpoints.invalid_mcp_server",
     "sub_agents/weather/config.yml", 7),
    ("no mcp servers in endpoints", {"endpoints.yml": """
        model_groups:
          - id: agent_llm
            models:
              - model: gpt-4.1-mini
        """}, "agent.validation.endpoints.no_mcp_servers", "sub_agents/booking/config.yml", 6),
    ("empty server name", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        connections:
          mcp_servers:
            - name: ""
        """}, "agent.validation.mcp.server_missing_name", "sub_agents/weather/config.yml", 6),
    ("unknown model group", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          llm:
            model_group: nope
        """}, "agent.validation.llm.unknown_model_group", "sub_agents/weather/config.yml", 6),
    ("prompt template missing", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          prompt_template: sub_agents/weather/prompt.jinja2
        """}, "agent.validation.optional.prompt_template_error",
     "sub_agents/weather/config.yml", 5),
    ("prompt template syntax", {
        "sub_agents/weather/config.yml": """
            agent:
              name: weather_agent
              description: d
            configuration:
              prompt_template: sub_agents/weather/prompt.jinja2
            """,
        "sub_agents/weather/prompt.jinja2": "Hello\n{% if description %}\nunclosed\n"},
     "agent.validation.prompt_template_syntax_error", "sub_agents/weather/prompt.jinja2", 2),
    ("prompt template unknown variable", {
        "sub_agents/weather/config.yml": """
            agent:
              name: weather_agent
              description: d
            configuration:
              prompt_template: sub_agents/weather/prompt.jinja2
            """,
        "sub_agents/weather/prompt.jinja2": "{{ description }}\n{{ descripton }}\n"},
     "agent.validation.prompt_template_unknown_variable", "sub_agents/weather/prompt.jinja2", 2),
    ("module not importable", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          module: sub_agents.weather.nothing_here.MyAgent
        """}, "agent.validation.optional.module_not_found", "sub_agents/weather/config.yml", 5),
    ("pre_call_hook on a RASA agent", {"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
        configuration:
          pre_call_hook: my.hook
        """}, "agent.validation.pre_call_hook.a2a_only", "sub_agents/weather/config.yml", 5),
    ("folder without config.yml", {"sub_agents/empty/notes.txt": "nothing"},
     "agent.validation.folder.missing_config", "sub_agents/empty", None),
    ("duplicate agent name", {"sub_agents/weather2/config.yml": """
        agent:
          name: weather_agent
          description: again
        connections:
          mcp_servers:
            - name: tools
        """}, "agent.duplicated_name", "sub_agents/weather2/config.yml", 2),
    ("agent named like a flow", {"sub_agents/clash/config.yml": """
        agent:
          name: weather_flow
          description: clash
        connections:
          mcp_servers: [{name: tools}]
        """}, "agent.flow_name_conflict", "sub_agents/clash/config.yml", None),
    ("literal secret in endpoints", {"endpoints.yml": """
        model_groups:
          - id: agent_llm
            models:
              - model: gpt-4.1-mini
                api_key: sk-123
        mcp_servers:
          - name: tools
            type: stdio
            command: python
        """}, "validation.sensitive_key_string_value_must_be_set_as_env_var", "endpoints.yml", 5),
    ("literal secret header", {"endpoints.yml": """
        mcp_servers:
          - name: tools
            url: http://127.0.0.1:9/mcp
            headers:
              Authorization: Bearer abc
        """}, "validation.sensitive_key_string_value_must_be_set_as_env_var", "endpoints.yml", 4),
    ("unknown mcp server key", {"endpoints.yml": """
        mcp_servers:
          - name: tools
            url: http://127.0.0.1:9/mcp
            retries: 3
        """}, "endpoints.mcp_server.invalid", "endpoints.yml", 4),
    ("stdio without command", {"endpoints.yml": """
        mcp_servers:
          - name: tools
            type: stdio
        """}, "endpoints.mcp_server.invalid", "endpoints.yml", 2),
    ("unsupported transport", {"endpoints.yml": """
        mcp_servers:
          - name: tools
            type: websocket
            url: ws://x
        """}, "endpoints.mcp_server.invalid", "endpoints.yml", 3),
    ("yaml syntax error", {"data/flows.yml": "flows:\n  a: [unclosed\n"},
     "yaml.syntax_error", "data/flows.yml", 3),
    ("exit_if unknown slot", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
          booking_flow:
            description: d
            steps:
              - call: booking_agent
                exit_if:
                  - slots.city is not null
                  - slots.town is not null
        """}, "flow.exit_if.unknown_slot", "data/flows.yml", 12),
    ("exit_if unparseable", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
          booking_flow:
            description: d
            steps:
              - call: booking_agent
                exit_if:
                  - slots.city is not
        """}, "flow.exit_if.invalid_condition", "data/flows.yml", 11),
    ("exit_if without slots", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
          booking_flow:
            description: d
            steps:
              - call: booking_agent
                exit_if:
                  - "true"
        """}, "flow.exit_if.no_slot_reference", "data/flows.yml", 11),
    ("exit_if on a flow call", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
          booking_flow:
            description: d
            steps:
              - call: booking_agent
              - call: weather_flow
                exit_if: [slots.city is null]
        """}, "flow.exit_if.target_not_agent", "data/flows.yml", 11),
    ("call of unknown target", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
              - call: booking_agent
              - call: nobody
        """}, "flow.call.unknown_target", "data/flows.yml", 7),
    ("collect unknown slot", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - collect: town
              - call: weather_agent
              - call: booking_agent
        """}, "flow.collect.unknown_slot", "data/flows.yml", 5),
    ("unknown action", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
              - call: booking_agent
              - action: utter_nothing
        """}, "flow.action.unknown", "data/flows.yml", 7),
    ("next to unknown step", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
                next: somewhere
              - call: booking_agent
        """}, "flow.next.unknown_step", "data/flows.yml", 6),
    ("step with two kinds", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
                action: utter_done
              - call: booking_agent
        """}, "flow.validation.structure", "data/flows.yml", 5),
    ("unknown step key", {"data/flows.yml": """
        flows:
          weather_flow:
            description: d
            steps:
              - call: weather_agent
                exitif: [slots.city is null]
              - call: booking_agent
        """}, "flow.validation.structure", "data/flows.yml", 6),
    ("duplicate flow id", {"data/more_flows.yml": """
        flows:
          weather_flow:
            description: again
            steps:
              - action: utter_done
        """}, "flow.duplicate_id", "data/more_flows.yml", 2),
    ("bad slot type", {"data/domain.yml": """
        slots:
          city:
            type: txt
        """}, "domain.validation.structure", "data/domain.yml", 3),
    ("command generator unknown model group", {"config.yml": """
        pipeline:
          - name: CompactLLMCommandGenerator
            llm:
              model_group: missing
        """}, "config.model_group.unknown", "config.yml", 4),
]


@pytest.mark.parametrize(("files", "code", "file", "line"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_broken_project_reports_code_file_and_line(make_project, files, code, file, line):
    root = make_project(files)
    project, issues = collect_issues(root)
    assert project is None
    matching = [i for i in issues if i.code == code]
    assert matching, f"no {code} among {[i.format() for i in issues]}"
    issue = matching[0]
    assert issue.file == file
    assert issue.line == line
    assert issue.severity == "error"
    assert issue.message


def test_the_base_fixture_project_is_valid(make_project):
    project = load_project(make_project())
    assert set(project.agents) == {"weather_agent", "booking_agent"}
    assert project.flows["booking_flow"].steps[0].exit_if[0].slot_names == ["city"]


def test_every_problem_is_reported_at_once(make_project):
    root = make_project({
        "sub_agents/weather/config.yml": "agent:\n  name: weather_agent\n",
        "data/flows.yml": """
            flows:
              weather_flow:
                description: d
                steps:
                  - collect: town
                  - call: booking_agent
            """,
    })
    with pytest.raises(ProjectInvalidError) as info:
        load_project(root)
    assert set(info.value.codes) >= {"agent.validation.mandatory.fields_missing",
                                     "flow.collect.unknown_slot"}


def test_missing_connections_is_a_warning_not_an_error(make_project):
    project, issues = collect_issues(make_project({"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: custom tools only
        """}))
    assert project is not None
    assert [i.code for i in issues] == ["agent.validation.mcp.missing_connections"]
    assert issues[0].severity == "warning"


def test_protocol_is_case_insensitive_and_defaults_are_the_references(make_project):
    project = load_project(make_project({"sub_agents/weather/config.yml": """
        agent:
          name: weather_agent
          description: d
          protocol: rasa
        configuration:
          max_retries: 0
        connections:
          mcp_servers: [{name: tools}]
        """}))
    conf = project.agents["weather_agent"].config.configuration
    assert project.agents["weather_agent"].config.agent.protocol.value == "RASA"
    assert (conf.max_retries, conf.tool_timeout, conf.include_date_time, conf.timezone,
            conf.enable_filler_messages, conf.max_agent_steps, conf.max_parallel_tools,
            conf.raise_on_tool_invocation_failure) == (5, 10.0, True, "UTC", True, 10, 3, False)


def test_project_flow_overrides_a_default_pattern(make_project):
    project = load_project(make_project({"data/patterns.yml": """
        flows:
          pattern_completed:
            description: mine
            steps:
              - action: utter_done
        """}))
    assert project.flows["pattern_completed"].description == "mine"
    assert "pattern_internal_error" in project.flows


def test_config_models_publish_json_schemas():
    from subagents.config.endpoints import EndpointsConfig
    from subagents.config.flows import FlowsFile
    from subagents.config.sub_agent import SubAgentConfig

    schema = SubAgentConfig.model_json_schema()
    assert schema["additionalProperties"] is False
    assert "tool_timeout" in schema["$defs"]["AgentConfiguration"]["properties"]
    assert "mcp_servers" in EndpointsConfig.model_json_schema()["properties"]
    assert "flows" in FlowsFile.model_json_schema()["properties"]


@pytest.mark.parametrize(("template", "codes"), [
    ('{{ user_message | to_json_escaped_string }}', []),
    ('{{ user_message | no_such_filter }}',
     ["config.command_generator.prompt_template_syntax_error"]),
])
def test_a_command_prompt_template_may_use_rasas_filter_and_no_unknown_one(make_project,
                                                                          template, codes):
    root = make_project({"config.yml": """
        pipeline:
          - name: CompactLLMCommandGenerator
            prompt_template: commands.jinja2
        """, "commands.jinja2": template})
    _, issues = collect_issues(root)
    assert [i.code for i in issues if i.code.startswith("config.command_generator")] == codes


def test_a_missing_slot_in_every_branch_of_one_next_is_reported_once(make_project):
    branches = "".join(f'          - if: slots.tier = "t{n}"\n            then: END\n'
                       for n in range(7))
    root = make_project({"data/tiers.yml": (
        "flows:\n  tier_flow:\n    description: branches on a slot that does not exist\n"
        "    steps:\n      - action: utter_done\n        next:\n" + branches
        + "          - else: END\n")})
    _, issues = collect_issues(root)
    found = [(i.file, i.line, i.key) for i in issues if i.code == "flow.condition.unknown_slot"]
    assert found == [("data/tiers.yml", 6, "flows.tier_flow.steps[0].next")]


def test_comparing_previous_flow_name_with_a_flow_id_is_a_warning(make_project):
    root = make_project({"data/completed.yml": """
        flows:
          pattern_completed:
            description: says goodbye after a booking
            steps:
              - noop: true
                next:
                  - if: context.previous_flow_name = "booking_flow"
                    then:
                      - action: utter_done
                        next: END
                  - if: context.previous_flow_name = "weather flow"
                    then: END
                  - else: END
        responses:
          utter_bye:
            - text: "Enjoy your table."
              condition: context.previous_flow_name == "booking_flow"
            - text: "Bye."
        """})
    _, issues = collect_issues(root)
    found = [(i.code, i.severity, i.line, i.hint) for i in issues
             if "previous_flow_name" in i.code]
    assert found == [
        ("flow.condition.previous_flow_name_is_id", "warning", 6, "compare with 'booking flow'"),
        ("domain.response.condition_previous_flow_name_is_id", "warning", 17,
         "compare with 'booking flow'")]
