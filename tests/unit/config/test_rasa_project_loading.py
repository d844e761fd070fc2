"""Rasa CALM projects load as Rasa loads them; what would fail at run time fails at load."""

from __future__ import annotations

from pathlib import Path

import pytest
from subagents.config import collect_issues, load_project
from subagents.config.project import ProjectPaths


def _codes(issues, severity=None):
    return [i.code for i in issues if severity is None or i.severity == severity]


def _only(issues, code):
    found = [i for i in issues if i.code == code]
    assert len(found) == 1, [i.format() for i in issues]
    return found[0]


TOLERATED_FLOWS = """
    flows:
      replace_card:
        description: Replace a lost card.
        name: replacing a card
        if: False
        persisted_slots: [city]
        run_pattern_completed: false
        always_include_in_prompt: true
        file_path: somewhere.yml
        on_activate: something
        metadata: {owner: cards}
        translation: {de: {name: Karte ersetzen}}
        nlu_trigger:
          - intent: replace_card
          - intent:
              name: lost_card
              confidence_threshold: 0.8
              extra: ignored
        steps:
          - collect: city
            description: the city
            metadata: {note: x}
            rejections:
              - if: false
                utter: utter_done
            next:
              - if: slots.guests > 2
                then:
                  - action: utter_done
                    next: END
              - if: true
                then: order
              - else: order
                next: END
          - id: order
            set_slots:
              - guests: 1
            anything: ignored
          - noop: false
            whatever: 1
            next: END
      by_context:
        description: Guard on the context.
        if: context.flow_id = "by_context"
        steps:
          - action: utter_done
      guarded:
        description: Guard as a string.
        if: "slots.guests > 1"
        steps:
          - link: replace_card
            also: ignored
"""


def test_every_form_rasa_accepts_loads(make_project):
    project = load_project(make_project({"data/more.yml": TOLERATED_FLOWS}))
    flow = project.flows["replace_card"]
    assert flow.link_only
    assert [(t.name, t.threshold) for t in flow.model.nlu_trigger] == [
        ("replace_card", 0.0), ("lost_card", 0.8)]
    collect = flow.steps[0]
    assert [c is None or c.evaluate_slots({"guests": 0}) for c, _ in collect.next] == \
        [False, True, True]
    assert collect.rejections[0].condition.evaluate_slots({}) is False
    guarded = project.flows["guarded"]
    assert not guarded.link_only
    assert not project.flows["by_context"].link_only
    assert guarded.guard.evaluate_slots({"guests": 3}) is True


@pytest.mark.parametrize(("step", "code", "key"), [
    ("- action: utter_done\n  description: not allowed on an action",
     "flow.validation.structure", "flows.f.steps[0].description"),
    ("- collect: city\n  colect_extra: 1", "flow.validation.structure",
     "flows.f.steps[0].colect_extra"),
    ("- noop: true", "flow.validation.structure", "flows.f.steps[0]"),
    ("- link: weather_flow\n  next: END", "flow.validation.structure", "flows.f.steps[0]"),
    ("- action: utter_done\n  next:\n    - if: slots.city\n      then: END\n"
     "      else: END", "flow.validation.structure", None),
])
def test_keys_rasa_rejects_are_errors(make_project, step, code, key):
    steps = "".join(f"      {line}\n" for line in step.splitlines())
    text = "flows:\n  f:\n    description: d\n    steps:\n" + steps
    _, issues = collect_issues(make_project({"data/bad.yml": text}))
    issue = next(i for i in issues if i.code == code)
    assert issue.file == "data/bad.yml"
    if key is not None:
        assert issue.key == key


def test_conditions_that_do_not_parse_are_load_errors(make_project):
    _, issues = collect_issues(make_project({"data/bad.yml": """
        flows:
          f:
            description: d
            if: slots.city ==
            steps:
              - collect: city
                rejections:
                  - if: slots.city is
                    utter: utter_done
                next:
                  - if: (slots.city
                    then: END
                  - else: END
        """}))
    found = {(i.code, i.key, i.line) for i in issues if i.code == "flow.condition.invalid"}
    assert found == {("flow.condition.invalid", "flows.f.if", 4),
                     ("flow.condition.invalid", "flows.f.steps[0].rejections[0].if", 8),
                     ("flow.condition.invalid", "flows.f.steps[0].next[0].if", 11)}


def test_a_rejection_needs_a_known_response(make_project):
    _, issues = collect_issues(make_project({"data/bad.yml": """
        flows:
          f:
            description: d
            steps:
              - collect: city
                rejections:
                  - if: slots.city = "x"
                    utter: utter_nope
        """}))
    assert _only(issues, "flow.rejection.unknown_response").key == \
        "flows.f.steps[0].rejections[0].utter"


def test_default_domain_and_patterns_need_no_definition(make_project):
    project = load_project(make_project({"data/silence.yml": """
        flows:
          pattern_user_silence:
            description: mine
            steps:
              - noop: true
                next:
                  - if: slots.consecutive_silence_timeouts = 0.0
                    then:
                      - set_slots:
                          - consecutive_silence_timeouts: 1.0
                      - action: action_repeat_bot_messages
                        next: END
                  - else:
                      - action: utter_ask_still_there
                      - action: action_hangup
                        next: END
          handoff:
            description: talk to a human
            steps:
              - action: utter_human_handoff_not_available
              - link: pattern_human_handoff
        """}))
    for pattern in ("pattern_correction", "pattern_clarification", "pattern_session_start",
                    "pattern_search", "pattern_customer_satisfaction", "pattern_skip_question",
                    "pattern_code_change", "pattern_repeat_bot_messages", "pattern_restart"):
        assert pattern in project.flows
    assert project.flows["pattern_user_silence"].description == "mine"
    assert "utter_corrected_previous_input" in project.domain.responses
    assert "csat_score" in project.domain.default_slots


def test_a_pattern_override_replaces_the_default_completely(make_project):
    project = load_project(make_project({"data/patterns.yml": """
        flows:
          pattern_session_start:
            description: greet
            steps:
              - action: utter_done
        responses:
          utter_ask_rephrase:
            - text: "Say again?"
        """}))
    flow = project.flows["pattern_session_start"]
    assert flow.model.nlu_trigger is None  # the default's trigger is not merged in
    assert [s.target for s in flow.steps] == ["utter_done"]
    assert [v.text for v in project.domain.responses["utter_ask_rephrase"]] == ["Say again?"]
    assert "utter_ask_rephrase" not in project.domain.default_responses


def test_a_broken_flow_gives_one_error_not_follow_on_errors(make_project):
    _, issues = collect_issues(make_project({"data/more.yml": """
        flows:
          feedback:
            description: d
            if: 5
            steps:
              - action: utter_done
          goodbye:
            description: d
            steps:
              - call: feedback
              - link: feedback
        """}))
    assert _codes(issues, "error") == ["flow.validation.structure"]


def test_a_broken_agent_or_model_group_gives_no_follow_on_errors(make_project):
    _, issues = collect_issues(make_project({
        "endpoints.yml": """
            model_groups:
              - id: agent_llm
                models:
                  - provider: openai
                    temperature: hot
            mcp_servers:
              - name: tools
                type: stdio
            """,
        "sub_agents/booking/config.yml": """
            agent:
              name: booking_agent
              description: Books a table.
              colour: blue
            """}))
    assert sorted(_codes(issues, "error")) == [
        "agent.validation.structure.additional_agent_keys", "endpoints.mcp_server.invalid",
        "endpoints.model_group.invalid"]


def test_a_misspelled_endpoints_key_is_an_error_with_a_suggestion(make_project):
    root = make_project()
    text = (root / "endpoints.yml").read_text() + "mcp_server:\n  - name: x\nfoo_bar_baz: 1\n"
    (root / "endpoints.yml").write_text(text)
    _, issues = collect_issues(root)
    misspelled = [i for i in issues if i.code == "endpoints.unknown_key"]
    assert [(i.key, i.severity) for i in misspelled] == [("mcp_server", "error"),
                                                         ("foo_bar_baz", "warning")]
    assert "mcp_servers" in (misspelled[0].hint or "")


@pytest.mark.parametrize(("model", "code", "key"), [
    ("{provider: openai, model: m, temprature: 0.2}", "llm.option.unknown", "temprature"),
    ("{provider: anthropc, model: claude}", "llm.provider.unsupported", "provider"),
    ("{provider: openai, model: m, stream: true}", "llm.option.forbidden", "stream"),
    ("{provider: azure, model: m, api_version: '2024-02-01'}", "llm.azure.deployment_missing",
     "provider"),
])
def test_model_settings_are_checked(make_project, model, code, key):
    _, issues = collect_issues(make_project({"endpoints.yml": f"""
        model_groups:
          - id: agent_llm
            models:
              - {model}
        mcp_servers:
          - name: tools
            type: stdio
            command: python
        """}))
    issue = _only(issues, code)
    assert issue.key == f"model_groups[0].models[0].{key}"
    assert issue.file == "endpoints.yml"


def test_rasa_model_keys_are_accepted_and_mapped(make_project):
    project = load_project(make_project({"endpoints.yml": """
        model_groups:
          - id: agent_llm
            models:
              - provider: openai
                model: gpt-4o
                request_timeout: 7
                max_tokens: 256
          - id: azure_llm
            models:
              - provider: azure
                deployment_name: my-deployment
                api_type: azure
                api_version: "2024-02-01"
                api_base: https://example.openai.azure.com
          - id: local
            models:
              - provider: self-hosted
                model: llama
                api_base: http://127.0.0.1:8000/v1
                max_tokens: 100
        mcp_servers:
          - name: tools
            type: stdio
            command: python
        """}))
    openai, azure, local = (g.models[0] for g in project.endpoints.model_groups)
    assert (openai.timeout, openai.max_completion_tokens) == (7, 256)
    assert "max_tokens" not in openai.request_options()
    assert (azure.deployment, azure.api_type, azure.api_version) == \
        ("my-deployment", "azure", "2024-02-01")
    assert local.request_options() == {"max_tokens": 100}


def test_an_inline_agent_llm_is_checked_too(make_project):
    _, issues = collect_issues(make_project({"sub_agents/booking/config.yml": """
        agent:
          name: booking_agent
          description: Books a table.
        configuration:
          llm:
            provider: palm
            model: g
        connections:
          mcp_servers:
            - name: tools
        """}))
    assert _only(issues, "llm.provider.unsupported").key == "configuration.llm.provider"


RESPONSES = """
    responses:
      utter_done:
        - text: "Done for {cty}."
      utter_from_action:
        - text: "Summary: {summary}"
      utter_jinja:
        - text: "{% if slots.city %}hi{% endif"
          metadata: {template: jinja}
      utter_conditional:
        - text: gold
          condition: "slots.guests >"
        - text: other
"""


def test_response_templates_and_conditions_are_checked(make_project):
    _, issues = collect_issues(make_project({"data/responses.yml": RESPONSES}))
    placeholders = [(i.key, i.severity) for i in issues
                    if i.code == "domain.response.unknown_placeholder"]
    assert placeholders == [("responses.utter_done[0].text", "error"),
                            ("responses.utter_from_action[0].text", "warning")]
    assert _only(issues, "domain.response.jinja_syntax_error").key == \
        "responses.utter_jinja[0].text"
    assert _only(issues, "domain.response.condition_invalid").key == \
        "responses.utter_conditional[0].condition"


def test_response_conditions_are_parsed_at_load(make_project):
    project = load_project(make_project({"data/responses.yml": """
        responses:
          utter_greet:
            - text: gold
              condition: "slots.guests > 2"
            - text: legacy
              condition:
                - type: slot
                  name: city
                  value: berlin
            - text: plain
        """}))
    gold, legacy, plain = project.domain.responses["utter_greet"]
    assert gold.parsed_condition is not None
    assert gold.condition_holds({"guests": 3})
    assert not gold.condition_holds({"guests": 1})
    assert legacy.condition_holds({"city": "Berlin"})  # case-insensitive, as in Rasa
    assert plain.condition_holds({})


def test_a_prompt_template_outside_the_project_is_an_error(make_project, tmp_path):
    (tmp_path / "outside.jinja2").write_text("{{ description }}")
    _, issues = collect_issues(make_project({"sub_agents/booking/config.yml": """
        agent:
          name: booking_agent
          description: Books a table.
        configuration:
          prompt_template: ../outside.jinja2
        connections:
          mcp_servers:
            - name: tools
        """}))
    issue = _only(issues, "agent.validation.prompt_template_outside_project")
    assert (issue.file, issue.line) == ("sub_agents/booking/config.yml", 5)


def test_command_generator_template_and_model_are_checked(make_project):
    _, issues = collect_issues(make_project({
        "config.yml": """
            pipeline:
              - name: CompactLLMCommandGenerator
                prompt_template: prompts/cg.jinja2
                llm:
                  provider: openai
                  model: gpt-4o
                  max_token: 10
            policies:
              - name: FlowPolicy
              - name: EnterpriseSearchPolicy
            """,
        "prompts/cg.jinja2": "{{ current_conversation }} {{ my_flag }} {{ user_message }}\n"}))
    assert _only(issues, "llm.option.unknown").hint == "did you mean 'max_tokens'?"
    unknown = _only(issues, "config.command_generator.prompt_template_unknown_variable")
    assert (unknown.severity, unknown.file, unknown.line) == ("warning", "prompts/cg.jinja2", 1)
    # the search policy is read: its default documents folder (./docs) does not exist
    search = _only(issues, "search.source_missing")
    assert (search.severity, search.key, search.line) == (
        "error", "policies[1].vector_store.source", 10)


def test_custom_nlg_class_is_a_warning_and_rephraser_template_is_checked(make_project):
    root = make_project()
    endpoints = root / "endpoints.yml"
    endpoints.write_text(endpoints.read_text() + "nlg:\n  type: my_pkg.MyNLG\n")
    _, issues = collect_issues(root)
    assert _only(issues, "endpoints.nlg.custom_class_unsupported").severity == "warning"
    endpoints.write_text(endpoints.read_text().replace(
        "type: my_pkg.MyNLG", "type: rephrase\n  prompt_template: /etc/passwd"))
    _, issues = collect_issues(root)
    assert _only(issues, "endpoints.nlg.prompt_template_outside_project").key == \
        "nlg.prompt_template"


def test_an_empty_folder_is_an_error(tmp_path):
    project, issues = collect_issues(tmp_path)
    assert project is None
    assert _codes(issues) == ["project.empty"]


def test_an_unused_invalid_timezone_is_a_warning(make_project):
    project, issues = collect_issues(make_project({"sub_agents/booking/config.yml": """
        agent:
          name: booking_agent
          description: Books a table.
        configuration:
          include_date_time: false
          timezone: Mars/Olympus
        connections:
          mcp_servers:
            - name: tools
        """}))
    assert project is not None
    issue = _only(issues, "datetime_utils.validate_datetime_configuration.invalid_timezone")
    assert (issue.severity, issue.line) == ("warning", 6)


def test_include_exclude_conflict_names_the_agent_once(make_project):
    _, issues = collect_issues(make_project({"sub_agents/booking/config.yml": """
        agent:
          name: booking_agent
          description: Books a table.
        connections:
          mcp_servers:
            - name: tools
              include_tools: [a]
              exclude_tools: [b]
        """}))
    issue = _only(issues, "agent.validation.mcp.include_exclude_conflict")
    assert "booking_agent" in issue.message
    assert issue.code not in issue.message
    assert _codes(issues, "error") == ["agent.validation.mcp.include_exclude_conflict"]


def _rasa_layout(root: Path) -> None:
    (root / "config").mkdir()
    (root / "config" / "config.yml").write_text(
        "pipeline:\n  - name: CompactLLMCommandGenerator\n    llm: {model_group: nope}\n")
    (root / "domain.yml").write_text("slots:\n  town: {type: text}\n")
    (root / "domain").mkdir()
    (root / "domain" / "ignored.yml").write_text("slots:\n  ignored: {type: text}\n")
    (root / "flows").mkdir()
    (root / "flows" / "f.yml").write_text(
        "flows:\n  f:\n    description: d\n    steps:\n      - collect: town\n")


def test_file_locations_default_to_rasas_and_can_be_given(tmp_path):
    _rasa_layout(tmp_path)
    paths = ProjectPaths.resolve(tmp_path)
    assert paths.domain == (tmp_path / "domain.yml",)
    project, issues = collect_issues(tmp_path, data="flows")
    assert project is not None, [i.format() for i in issues]
    assert "ignored" not in project.domain.slots
    assert "f" in project.flows
    _, issues = collect_issues(tmp_path, data=["flows"], config="config/config.yml",
                               domain="domain")
    # no endpoints.yml: the model group reference is reported as the missing file
    assert _codes(issues, "error") == ["endpoints.not_found", "flow.collect.unknown_slot"]


def test_an_explicit_path_that_does_not_exist_is_an_error(make_project):
    _, issues = collect_issues(make_project(), endpoints="prod/endpoints.yml")
    issue = _only(issues, "project.path_not_found")
    assert issue.key == "--endpoints"


def test_one_bad_slot_hides_neither_its_file_nor_causes_follow_on_errors(make_project):
    _, issues = collect_issues(make_project({"data/domain.yml": """
        slots:
          city:
            type: txt
          guests:
            type: float
        responses:
          utter_done:
            - text: "Done for {city}."
          utter_nope:
            - text: 5
        """, "data/more.yml": """
        flows:
          f:
            description: d
            steps:
              - collect: guests
                rejections:
                  - if: slots.guests > 9
                    utter: utter_nope
              - action: utter_done
        """}))
    assert [(i.code, i.key) for i in issues if i.severity == "error"] == [
        ("domain.validation.structure", "slots.city.type"),
        ("domain.validation.structure", "responses.utter_nope[0].text")]


def test_an_unreadable_data_file_does_not_make_every_reference_an_error(make_project):
    _, issues = collect_issues(make_project({"data/broken.yml": "flows: [\n"}))
    assert _codes(issues, "error") == ["yaml.syntax_error"]


def test_unknown_names_come_with_a_suggestion(make_project):
    _, issues = collect_issues(make_project({"data/more.yml": """
        flows:
          f:
            description: d
            steps:
              - collect: cty
              - action: utter_dne
              - link: weather_flw
        """}))
    hints = {i.code: i.hint for i in issues}
    assert hints["flow.collect.unknown_slot"] == "did you mean 'city'?"
    assert hints["flow.action.unknown"] == "did you mean 'utter_done'?"
    assert hints["flow.link.unknown_flow"] == "did you mean 'weather_flow'?"


def test_tool_state_mappings_name_known_slots(make_project):
    _, issues = collect_issues(make_project({"sub_agents/booking/config.yml": """
        agent:
          name: booking_agent
          description: Books a table.
        configuration:
          tools:
            book:
              inputs_from_state: {who: slots.guest_name, where: city}
              outputs_to_state: {reference: result}
        connections:
          mcp_servers:
            - name: tools
        """}))
    assert sorted((i.code, i.key) for i in issues if i.severity == "error") == [
        ("agent.validation.tools.invalid_state_source",
         "configuration.tools.book.inputs_from_state.where"),
        ("agent.validation.tools.unknown_slot",
         "configuration.tools.book.inputs_from_state.who"),
        ("agent.validation.tools.unknown_slot", "configuration.tools.book.outputs_to_state"
                                                ".reference")]


def test_custom_actions_importing_rasa_are_named(make_project):
    project, issues = collect_issues(make_project({
        "actions/__init__.py": "",
        "actions/db.py": "import json\nfrom rasa.core.nlg import NaturalLanguageGenerator\n",
        "actions/ok.py": "from rasa_sdk import Action\nfrom . import db\n",
        # provided by the compatibility layer: no warning
        "actions/io.py": "from rasa.shared.utils.io import read_json_file\n"}))
    assert project is not None
    issue = _only(issues, "actions.imports_rasa")
    assert (issue.file, issue.line, issue.severity) == ("actions/db.py", 2, "warning")


def test_search_and_intentless_actions_are_warnings(make_project):
    project, issues = collect_issues(make_project({"data/patterns.yml": """
        flows:
          pattern_search:
            description: search
            steps:
              - action: action_trigger_search
          pattern_chitchat:
            description: chat
            steps:
              - action: action_trigger_chitchat
        """}))
    assert project is not None
    assert sorted(_codes(issues, "warning")) == ["flow.action.intentless_unsupported",
                                                 "flow.action.search_unsupported"]


def test_double_braces_are_literal_in_format_responses(make_project):
    project, issues = collect_issues(make_project({"data/responses.yml": """
        responses:
          utter_done:
            - text: "Use {{name}} for {city}."
          utter_count:
            - text: "{% for i in range(3) %}{{ i }} {{ city }}{% endfor %}"
              metadata: {template: jinja}
        """}))
    assert project is not None
    assert "domain.response.unknown_placeholder" not in _codes(issues)


def test_the_shipped_default_responses_are_valid_templates():
    from jinja2.sandbox import SandboxedEnvironment
    from subagents._yaml import load_yaml
    from subagents.config.domain import DomainFile
    from subagents.config.project import DEFAULT_PATTERNS
    from subagents.config.validation import _PLACEHOLDER

    domain = DomainFile.model_validate(load_yaml(DEFAULT_PATTERNS).data)
    for name, variations in domain.responses.items():
        for variation in variations:
            if variation.is_jinja:
                SandboxedEnvironment().parse(variation.text or "")
            else:
                assert not _PLACEHOLDER.findall(variation.text or ""), name


def test_a_malformed_rejection_is_reported_at_its_line(make_project):
    _, issues = collect_issues(make_project({"data/bad.yml": """
        flows:
          f:
            description: d
            steps:
              - collect: city
                rejections:
                  - if: slots.city = "x"
                  - utter: utter_done
                    if: [1]
                  - if: true
                    utter: utter_done
        """}))
    assert [(i.key, i.line) for i in issues if i.code == "flow.validation.structure"] == [
        ("flows.f.steps[0].rejections[0]", 7), ("flows.f.steps[0].rejections[1].if", 9)]


def test_inline_model_settings_map_rasas_older_keys(make_project):
    project = load_project(make_project({
        "config.yml": """
            pipeline:
              - name: CompactLLMCommandGenerator
                llm: {provider: openai, model: gpt-4o, request_timeout: 7, max_tokens: 256}
            """,
        "sub_agents/booking/config.yml": """
            agent:
              name: booking_agent
              description: Books a table.
            configuration:
              llm: {provider: self-hosted, model: llama, api_base: "http://127.0.0.1:1/v1",
                    request_timeout: 3, max_tokens: 9}
            connections:
              mcp_servers:
                - name: tools
            """}))
    assert project.pipeline.command_generator_llm() == {
        "provider": "openai", "model": "gpt-4o", "timeout": 7, "max_completion_tokens": 256}
    llm = project.agents["booking_agent"].config.configuration.llm
    assert (llm["timeout"], llm["max_tokens"]) == (3, 9)


def test_steps_without_id_get_rasas_default_ids(make_project):
    project = load_project(make_project({"data/more.yml": """
        flows:
          f:
            description: d
            steps:
              - collect: city
                next:
                  - if: slots.city = "x"
                    then:
                      - action: utter_done
                        next: END
                  - else: named
              - id: named
                call: weather_flow
              - noop: true
                next: END
        """}))
    assert [s.id for s in project.flows["f"].steps] == [
        "f_0_collect_city", "f_1_utter_done", "named", "f_3_noop"]
    assert [s.id for s in project.flows["weather_flow"].steps] == [
        "weather_flow_0_call_weather_agent", "weather_flow_1_utter_done"]
    assert (project.flows["weather_flow"].name, project.flows["pattern_completed"].name) == (
        "weather flow", "pattern completed")


def test_a_flow_without_description_is_a_warning(make_project):
    project, issues = collect_issues(make_project({"data/more.yml": """
        flows:
          f:
            steps:
              - action: utter_done
        """}))
    assert project is not None
    assert _only(issues, "flow.description.missing").key == "flows.f"


def test_an_mcp_tool_step_mapping_is_checked(make_project):
    _, issues = collect_issues(make_project({"data/more.yml": """
        flows:
          f:
            description: d
            steps:
              - call: get_weather
                mcp_server: tools
                mapping:
                  input:
                    - param: town
                      slot: city
                    - param: days
                      value: 3
                  output:
                    - slot: forecast
                      value: result.structuredContent.forecast
                    - slot: city
                      value: "{{ result.x }}"
          g:
            description: d
            steps:
              - call: get_weather
                mcp_server: weather_api
                mapping:
                  input: []
                  output:
                    - slot: forecast
                      value: result.content[0].text
        """}))
    assert sorted((i.code, i.key) for i in issues if i.severity == "error") == [
        ("flow.call.mapping_unknown_slot", "flows.g.steps[0].mapping.output[0].slot"),
        ("flow.call.unknown_mcp_server", "flows.g.steps[0].mcp_server"),
        ("flow.validation.structure", "flows.f.steps[0].mapping.input[1].slot"),
        ("flow.validation.structure", "flows.f.steps[0].mapping.input[1].value"),
        ("flow.validation.structure", "flows.f.steps[0].mapping.output[1].value")]


def test_nlu_based_policies_and_routers_are_warnings(make_project):
    project, issues = collect_issues(make_project({"config.yml": """
        pipeline:
          - name: LLMBasedRouter
          - name: CompactLLMCommandGenerator
        policies:
          - name: RulePolicy
          - name: FlowPolicy
        """}))
    assert project is not None
    assert [(i.code, i.key) for i in issues] == [
        ("config.coexistence.unsupported", "pipeline[0].name"),
        ("config.nlu_policy.unsupported", "policies[0].name")]


def test_slot_mappings_and_custom_slot_types_are_checked(make_project):
    project, issues = collect_issues(make_project({"data/domain.yml": """
        slots:
          city:
            type: text
            mappings:
              - type: from_entity
                entity: city
          guests:
            type: addons.slots.PositiveNumber
            mappings:
              - type: from_lm
        """}))
    assert project is None
    assert sorted((i.code, i.key, i.severity) for i in issues
                  if i.code.startswith("domain.slot.")) == [
        ("domain.slot.custom_type", "slots.guests.type", "warning"),
        ("domain.slot.unknown_mapping_type", "slots.guests.mappings[0].type", "error")]
    assert _only(issues, "domain.slot.unknown_mapping_type").hint == "did you mean 'from_llm'?"


def test_a_collected_slot_only_nlu_can_fill_is_a_warning(make_project):
    project, issues = collect_issues(make_project({
        "data/domain.yml": """
            slots:
              city:
                type: text
                mappings:
                  - type: from_entity
                    entity: city
            responses:
              utter_done:
                - text: "Done for {city}."
            """,
        "data/more.yml": """
            flows:
              f:
                description: d
                steps:
                  - collect: city
            """}))
    assert project is not None
    assert _only(issues, "domain.slot.nlu_mapping_unsupported").key == "flows.f.steps[0].collect"


def test_model_problems_in_groups_nothing_uses_are_warnings(make_project):
    endpoints = """
        model_groups:
          - id: agent_llm
            models:
              - {provider: openai, model: gpt-4o}
          - id: embeddings
            models:
              - {provider: huggingface_local, model: all-MiniLM-L6-v2}
        mcp_servers:
          - name: tools
            type: stdio
            command: python
        """
    project, issues = collect_issues(make_project({"endpoints.yml": endpoints}))
    assert project is not None
    assert _only(issues, "llm.provider.unsupported").severity == "warning"
    _, issues = collect_issues(make_project({"endpoints.yml": endpoints, "config.yml": """
        pipeline:
          - name: CompactLLMCommandGenerator
            llm: {model_group: embeddings}
        """}))
    assert _only(issues, "llm.provider.unsupported").severity == "error"


def test_nlu_triggers_name_the_flow_an_intent_starts(make_project):
    project = load_project(make_project({"data/more.yml": """
        flows:
          check_balance:
            description: d
            nlu_trigger:
              - intent:
                  name: balance
                  confidence_threshold: 0.8
            steps:
              - action: utter_done
        """}))
    assert project.flow_for_intent("session_start") == "pattern_session_start"
    assert project.flow_for_intent("balance") == "check_balance"
    assert project.flow_for_intent("balance", confidence=0.5) is None
    assert project.flow_for_intent("unknown") is None


def test_model_checks_point_at_the_right_entry_after_an_invalid_one(make_project):
    _, issues = collect_issues(make_project({"endpoints.yml": """
        model_groups:
          - id: broken
            models:
              - {provider: openai, model: m, temperature: hot}
          - id: agent_llm
            models:
              - {provider: openai, model: m, temprature: 0.1}
          - id: agent_llm
            models:
              - {provider: openai, model: m}
        mcp_servers:
          - name: tools
            type: stdio
            command: python
        """}))
    assert _only(issues, "llm.option.unknown").key == "model_groups[1].models[0].temprature"
    assert _only(issues, "endpoints.model_group.duplicate_id").key == "model_groups[2].id"


def test_a_condition_naming_neither_slots_nor_context_is_an_error(make_project):
    _, issues = collect_issues(make_project({"data/more.yml": """
        flows:
          f:
            description: d
            steps:
              - collect: city
                next:
                  - if: slot.city = "x.y" and context.a.b and slots.guests > 1.5
                    then: END
                  - else: END
        responses:
          utter_greet:
            - text: hi
              condition: "sltos.city is null"
        """}))
    flow = _only(issues, "flow.condition.unknown_reference")
    assert (flow.key, flow.hint) == ("flows.f.steps[0].next", "did you mean 'slots'?")
    assert _only(issues, "domain.response.condition_unknown_reference").key == \
        "responses.utter_greet[0].condition"


def test_an_action_endpoint_with_url_and_module_is_a_warning(make_project):
    root = make_project()
    endpoints = root / "endpoints.yml"
    endpoints.write_text(endpoints.read_text() + "action_endpoint:\n  url: http://127.0.0.1:5055/"
                         "webhook\n  actions_module: actions\n")
    project, issues = collect_issues(root)
    assert project is not None
    assert _only(issues, "endpoints.action_endpoint.url_and_module").severity == "warning"


def test_a_collect_step_without_a_question_is_a_warning(make_project):
    project, issues = collect_issues(make_project({
        "data/domain.yml": """
            slots:
              city: {type: text}
              guests: {type: float}
            responses:
              utter_done:
                - text: "Done for {city}."
            actions:
              - action_ask_guests
            """,
        "data/more.yml": """
            flows:
              f:
                description: d
                steps:
                  - collect: city
                  - collect: guests
            """}))
    assert project is not None
    assert _only(issues, "flow.collect.no_question").key == "flows.f.steps[0].collect"
    # guests is asked by its custom action_ask_guests
    assert not [i for i in issues if i.code.startswith("flow.collect.")
                and i.key == "flows.f.steps[1].collect"]


def test_a_called_flow_may_not_link(make_project):
    _, issues = collect_issues(make_project({"data/more.yml": """
        flows:
          outer:
            description: d
            steps:
              - call: inner
          inner:
            description: d
            steps:
              - action: utter_done
              - link: weather_flow
        """}))
    assert _only(issues, "flow.call.target_has_link").key == "flows.outer.steps[0].call"


def test_rasa_channels_this_package_does_not_serve_are_warnings(make_project):
    project, issues = collect_issues(make_project({"credentials.yml": """
        rest:
        inspector:
          asr: {name: deepgram}
        vonage:
        """}))
    assert project is not None
    assert [(i.code, i.key) for i in issues] == [
        ("credentials.channel.unsupported", "inspector"),
        ("credentials.channel.unsupported", "vonage")]


def test_rephraser_settings_without_an_nlg_type_are_a_warning(make_project):
    root = make_project()
    endpoints = root / "endpoints.yml"
    endpoints.write_text(endpoints.read_text() + "nlg:\n  rephrase_all: true\n"
                         "  summarize_history: false\n")
    _, issues = collect_issues(root)
    missing = _only(issues, "endpoints.nlg.type_missing")
    assert (missing.severity, missing.key) == ("warning", "nlg")
    endpoints.write_text(endpoints.read_text().replace("nlg:\n", "nlg:\n  type: rephrase\n"))
    _, issues = collect_issues(root)
    assert "endpoints.nlg.type_missing" not in _codes(issues)
