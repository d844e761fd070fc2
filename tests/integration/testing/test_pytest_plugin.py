"""The pytest plugin collects tests/e2e/*.yml test cases as items, only when enabled."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]


FILES = {
        "data/flows.yml": """
            flows:
              hours:
                description: opening hours
                steps:
                  - action: utter_hours
            """,
        "data/domain.yml": """
            responses:
              utter_hours: [{text: "Open 9 to 5."}]
            """,
        "tests/e2e/cases.yml": """
            strict: true
            test_cases:
              - test_case: hours_pass
                llm_script: {}
                steps:
                  - user: /hours
                  - bot: "Open 9 to 5."
              - test_case: hours_fail
                llm_script: {}
                steps:
                  - user: /hours
                  - bot: "Closed."
            """,
}


def write(pytester, files):
    for rel, text in files.items():
        path = pytester.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def test_each_test_case_is_a_pytest_item(pytester):
    write(pytester, FILES)
    result = pytester.runpytest_subprocess("tests/e2e", "-p", "no:cacheprovider", "-v",
                                           "-p", "subagents")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*cases.yml::hours_pass PASSED*",
                                 "*expected bot 'Closed.', got 'Open 9 to 5.'*"])


def test_installed_but_not_enabled_collects_no_yaml(pytester):
    write(pytester, FILES)
    result = pytester.runpytest_subprocess("tests", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.assert_outcomes()


def test_the_ini_option_enables_it(pytester):
    write(pytester, {**FILES, "pytest.ini": """
        [pytest]
        subagents_e2e = true
        """})
    result = pytester.runpytest_subprocess("tests/e2e", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)


def test_the_strict_option_applies_to_files_that_do_not_choose(pytester):
    lenient = """
        test_cases:
          - test_case: a_message_no_step_names
            steps:
              - user: /hours
              - bot: "Open 9 to 5."
              - user: /hours
        """
    write(pytester, {**FILES, "tests/e2e/cases.yml": lenient})
    result = pytester.runpytest_subprocess("tests/e2e", "-p", "no:cacheprovider",
                                           "-p", "subagents")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("tests/e2e", "-p", "no:cacheprovider",
                                           "-p", "subagents", "--subagents-strict")
    result.assert_outcomes(failed=1)


def test_duplicate_names_run_both_and_warn(pytester):
    twice = """
        test_cases:
          - test_case: hours
            steps: [{user: /hours}, {bot: "Open 9 to 5."}]
          - test_case: hours
            steps: [{user: /hours}, {utter: utter_hours}]
        """
    write(pytester, {**FILES, "tests/e2e/cases.yml": twice})
    result = pytester.runpytest_subprocess("tests/e2e", "-p", "no:cacheprovider",
                                           "-p", "subagents")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["*e2e.validation.duplicate_test_case*"])
