"""Layouts and overrides that public Rasa CALM projects use load and run as Rasa runs them."""

from __future__ import annotations

from subagents.config import collect_issues, load_project

COLLECT_OVERRIDE = """
    flows:
      pattern_collect_information:
        description: a copy of the collect loop with templated names
        steps:
          - id: start
            action: action_run_slot_rejections
          - action: validate_{{context.collect}}
            next:
              - if: "slots.{{context.collect}} is not null"
                then: END
              - else: ask
          - id: ask
            action: "{{context.utter}}"
          - action: action_listen
            next: start
    """


def test_an_override_of_the_collect_pattern_is_a_warning_and_is_ignored(make_project):
    root = make_project({"data/patterns.yml": COLLECT_OVERRIDE})
    _, issues = collect_issues(root)
    assert [(i.code, i.severity) for i in issues] == [("flow.pattern.runs_natively", "warning")]
    assert "pattern_collect_information" not in load_project(root).flows


def test_the_test_command_finds_rasas_default_test_file(make_project, capsys):
    from subagents.cli.main import main

    root = make_project({
        "config.yml": "recipe: default.v1\nlanguage: en\nassistant_id: hours\n",
        "endpoints.yml": """
            model_groups:
              - id: llm
                models: [{provider: openai, model: gpt-test}]
            """,
        "domain.yml": "responses:\n  utter_hours: [{text: We are open 9 to 5.}]\n",
        "data/flows.yml": """
            flows:
              opening_hours:
                description: tells the opening hours
                steps:
                  - action: utter_hours
            """,
        "tests/e2e_test_cases.yml": """
            test_cases:
              - test_case: hours
                steps:
                  - user: /opening_hours
                  - bot: We are open 9 to 5.
            """}, base=False)
    status = main(["test", "--project", str(root)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "e2e_test_cases.yml::hours" in out


def test_listing_action_listen_in_the_domain_is_a_warning(make_project):
    # the project's own action_session_start replaces the built-in (as in Rasa): no warning
    root = make_project({"data/more_domain.yml": """
        actions:
          - action_session_start
          - action_custom_lookup
          - action_listen
        """})
    _, issues = collect_issues(root)
    override = _only_issue(issues, "domain.action.builtin_override")
    assert (override.severity, override.file, override.key) == (
        "warning", "data/more_domain.yml", "actions[2]")


def _only_issue(issues, code):
    found = [i for i in issues if i.code == code]
    assert len(found) == 1, [i.format() for i in issues]
    return found[0]


def test_a_session_config_asking_for_expiry_or_no_carry_over_is_a_warning(make_project):
    root = make_project({"data/session.yml": """
        session_config:
          session_expiration_time: 60
          carry_over_slots_to_new_session: false
        """})
    _, issues = collect_issues(root)
    found = [(i.severity, i.file, i.key, i.line) for i in issues
             if i.code == "domain.session_config.unsupported"]
    assert found == [
        ("warning", "data/session.yml", "session_config.session_expiration_time", 2),
        ("warning", "data/session.yml", "session_config.carry_over_slots_to_new_session", 3)]


def test_a_session_config_rasa_runs_as_here_loads_without_a_warning(make_project):
    root = make_project({"data/session.yml": """
        session_config:
          session_expiration_time: 0
          carry_over_slots_to_new_session: true
        """})
    _, issues = collect_issues(root)
    assert [i.code for i in issues] == []
