"""The search policy from the command line: a conversation test (``subagents test``, offline:
scripted models, fake embeddings), ``subagents index`` and ``subagents validate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.integration.knowledge.test_search_answers import FAQ, SHIPPING, write_search_project

CASES = """
test_cases:
  - test_case: shipping_question_is_answered_from_the_documents
    llm_script:
      command_generator: ["search and reply"]
      search:
        - text: "Shipping takes three working days."
          expect: {messages_contain: "Shipping takes three working days. Express shipping"}
    steps:
      - user: "How long does shipping take?"
        assertions:
          - flow_started: pattern_search
          - bot_uttered:
              text_matches: "three working days"
              metadata: {utter_source: EnterpriseSearchPolicy,
                         search_query: "How long does shipping take?"}
  - test_case: an_unsupported_answer_is_not_sent
    llm_script:
      command_generator: ["search and reply"]
      search: ["[NO_RAG_ANSWER]"]
    steps:
      - user: "Who won the match?"
        assertions:
          - flow_started: pattern_cannot_handle
          - bot_did_not_utter: {metadata: {utter_source: EnterpriseSearchPolicy}}
      - bot: "Sorry, I could not find an answer to that."
"""


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "subagents.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def test_subagents_test_runs_a_conversation_test_with_search_offline(tmp_path):
    root = write_search_project(tmp_path / "assistant", "check_relevancy: true")
    cases = root / "tests/e2e/search.yml"
    cases.parent.mkdir(parents=True)
    cases.write_text(CASES.lstrip("\n"), encoding="utf-8")
    done = run_cli("test", "--project", str(root), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    # built from the fake server's vectors: kept apart from the project's own index
    assert not (root / ".subagents" / "search").exists()


def test_the_scripted_shell_answers_from_the_documents_and_keeps_the_projects_index(tmp_path):
    root = write_search_project(tmp_path / "assistant")
    script = root / "demo.yml"
    script.write_text(textwrap.dedent("""
        test_cases:
          - test_case: shipping
            llm_script: {command_generator: ["search and reply"], search: ["Three days."]}
            steps:
              - user: "How long does shipping take?"
        """).lstrip("\n"), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "subagents.cli", "shell", "--project",
                           str(root), "--script", str(script)], cwd=tmp_path,
                          input="How long does shipping take?\n", capture_output=True,
                          text=True, timeout=180, check=False,
                          env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Three days." in done.stdout
    assert not (root / ".subagents" / "search").exists()


def test_subagents_test_fails_when_the_answer_is_not_the_expected_one(tmp_path):
    root = write_search_project(tmp_path / "assistant")
    cases = root / "tests/e2e/search.yml"
    cases.parent.mkdir(parents=True)
    cases.write_text(textwrap.dedent("""
        test_cases:
          - test_case: wrong
            llm_script: {command_generator: ["search and reply"], search: ["Five days."]}
            steps:
              - user: "How long does shipping take?"
              - bot: "Three days."
        """).lstrip("\n"), encoding="utf-8")
    done = run_cli("test", "--project", str(root), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Five days." in done.stdout


def test_subagents_index_builds_then_keeps_the_index(tmp_path):
    root = write_search_project(tmp_path / "assistant", "use_generative_llm: false",
                                {"docs/faq.txt": FAQ})
    # the embeddings model must be reachable from the command: a server of our own
    script = textwrap.dedent("""
        import asyncio, sys
        from subagents.testing import FakeModelServer
        from subagents.cli import main

        async def run():
            async with FakeModelServer() as fake:
                endpoints = sys.argv[1] + "/endpoints.yml"
                text = open(endpoints).read().replace(
                    "model: text-embedding-3-small}",
                    f"model: text-embedding-3-small, api_base: '{fake.base_url()}'}}")
                open(endpoints, "w").write(text)
                first = await asyncio.to_thread(main, ["index", "--project", sys.argv[1]])
                second = await asyncio.to_thread(main, ["index", "--project", sys.argv[1]])
                again = await asyncio.to_thread(main, ["index", "--project", sys.argv[1],
                                                       "--rebuild"])
                print("RESULT", first, second, again, len(fake.embedding_inputs))

        asyncio.run(run())
    """)
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT 0 0 0 2" in done.stdout  # built, kept, built again (one request each)
    assert "built 3 entries" in done.stdout
    assert "up to date: 3 entries" in done.stdout
    manifest = json.loads((root / ".subagents/search/docs/manifest.json").read_text())
    assert manifest["qa_pairs"] is True


def test_validate_reports_search_problems_with_file_line_key_and_fix(tmp_path):
    root = write_search_project(tmp_path / "assistant",
                                "vector_store: {type: faiss, source: knowledge}")
    done = run_cli("validate", "--project", str(root), cwd=tmp_path)
    assert done.returncode == 1
    line = next(li for li in done.stdout.splitlines() + done.stderr.splitlines()
                if "search.source_missing" in li)
    assert line.startswith("config.yml:10: error [search.source_missing] "
                           "policies[1].vector_store.source:")
    assert "(fix: create knowledge/" in line


@pytest.mark.parametrize(("policy", "docs", "code", "key"), [
    ("", {"docs/empty.txt": "  \n\n "}, "search.index_empty", "policies[1].vector_store.source"),
    ("use_generative_llm: false", {"docs/notes.txt": SHIPPING}, "search.index_empty",
     "policies[1].vector_store.source"),
    ("", {"docs/other.md": "# not a txt"}, "search.source_empty",
     "policies[1].vector_store.source"),
])
def test_documents_with_nothing_to_index_are_errors(tmp_path, policy, docs, code, key):
    from subagents.config.project import collect_issues

    root = write_search_project(tmp_path / "assistant", policy, docs)
    project, issues = collect_issues(root)
    assert project is None
    [issue] = [i for i in issues if i.severity == "error"]
    assert (issue.code, issue.key, issue.file) == (code, key, "config.yml")
    assert issue.line is not None
    assert issue.hint


def test_an_unknown_embeddings_group_is_an_error_at_its_line(tmp_path):
    from subagents.config.project import collect_issues

    root = write_search_project(tmp_path / "assistant")
    config = root / "config.yml"
    config.write_text(config.read_text().replace("{model_group: embeddings}",
                                                 "{model_group: vectors}"), encoding="utf-8")
    _, issues = collect_issues(root)
    [issue] = [i for i in issues if i.severity == "error"]
    assert (issue.code, issue.key, issue.line) == (
        "search.embeddings_group_missing", "policies[1].embeddings.model_group", 8)
    assert "vectors" in issue.hint


def test_a_missing_extra_is_an_error_naming_the_pip_command(tmp_path):
    root = write_search_project(tmp_path / "assistant")
    script = textwrap.dedent("""
        import sys
        sys.modules["numpy"] = None  # as if the search extra were not installed
        from subagents.config.project import collect_issues
        _, issues = collect_issues(sys.argv[1])
        for issue in issues:
            if issue.severity == "error":
                print(issue.code, issue.key, issue.hint)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == ("search.extra_missing policies[1].vector_store "
                                   "pip install 'subagents[search]'")


def test_the_search_step_is_no_longer_reported_unsupported_once_the_policy_is_there(tmp_path):
    from subagents.config.project import collect_issues

    root = write_search_project(tmp_path / "assistant")
    _, issues = collect_issues(root)
    assert "flow.action.search_unsupported" not in [i.code for i in issues]
    config = root / "config.yml"
    config.write_text(config.read_text().split("  - name: EnterpriseSearchPolicy")[0],
                      encoding="utf-8")
    _, issues = collect_issues(root)
    assert "flow.action.search_unsupported" in [i.code for i in issues]
