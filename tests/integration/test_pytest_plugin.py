"""The pytest plugin collects tests/e2e/*.yml test cases as items."""

from __future__ import annotations

import textwrap

pytest_plugins = ["pytester"]


def test_each_test_case_is_a_pytest_item(pytester):
    files = {
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
    for rel, text in files.items():
        path = pytester.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    result = pytester.runpytest_subprocess("tests/e2e", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*cases.yml::hours_pass PASSED*",
                                 "*expected bot 'Closed.', got 'Open 9 to 5.'*"])
