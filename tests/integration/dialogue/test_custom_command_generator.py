"""A project's own command generator class named in ``config.yml`` by its module path runs in
place of the built-in one when it subclasses it (directly, or through Rasa's class names);
anything else is a ``validate`` error instead of a silent fallback to the built-in."""

from __future__ import annotations

import anyio
import pytest
from subagents.config.project import collect_issues
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, write_project

HOURS = "We are open 9 to 5."
CONFIG = """
    assistant_id: test_assistant
    pipeline:
      - name: {name}
        llm: {{model_group: llm}}
    """
ROUTING = """
    from rasa.dialogue_understanding.generator import CompactLLMCommandGenerator
    from subagents.dialogue.commands import StartFlow
    from subagents.dialogue.understanding import CommandGenerator


    class KeywordCommandGenerator(CommandGenerator):
        def parse_reply(self, reply):
            if (reply or "").strip() == "HOURS":
                return [StartFlow("opening_hours")]
            return super().parse_reply(reply)


    class RasaStyleCommandGenerator(CompactLLMCommandGenerator):
        async def predict(self, text, stack, slots, events, **kwargs):
            return [StartFlow("opening_hours")]

        async def predict_commands(self, message, flows, tracker=None, **kwargs):
            return []


    class NotACommandGenerator:
        pass


    class RasaConstructorCommandGenerator(CommandGenerator):
        def __init__(self, config, model_storage, resource, prompt_template=None):
            pass
    """


def _project(tmp_path, tools_url, name):
    return write_project(tmp_path / "assistant", tools_url, {
        "config.yml": CONFIG.format(name=name), "addons/__init__.py": "",
        "addons/routing.py": ROUTING})


async def test_a_subclass_of_the_built_in_generator_runs(tmp_path, tools_url):
    project = _project(tmp_path, tools_url, "addons.routing.KeywordCommandGenerator")
    async with FakeModelServer({"command_generator": ["HOURS"]}) as fake, \
            assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("when can I come by?")
        fake.assert_done()
    assert texts[0] == HOURS


async def test_a_class_written_against_rasas_generator_loads_and_runs(tmp_path, tools_url):
    project = _project(tmp_path, tools_url, "addons.routing.RasaStyleCommandGenerator")
    loaded, issues = collect_issues(project)
    assert loaded is not None
    unused = [i for i in issues if i.code == "config.command_generator.method_not_called"]
    assert [(i.severity, i.file, i.key) for i in unused] == [
        ("warning", "config.yml", "pipeline[0].name")]
    assert "predict_commands" in unused[0].message
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("when can I come by?")
        fake.assert_done()
    assert texts[0] == HOURS


@pytest.mark.parametrize(("name", "code"), [
    ("addons.routing.NotACommandGenerator", "config.command_generator.not_a_subclass"),
    ("addons.routing.RasaConstructorCommandGenerator", "config.command_generator.init_signature"),
    ("addons.missing.NoCommandGenerator", "config.command_generator.import_failed"),
    ("addons.routing.NoSuchCommandGenerator", "config.command_generator.import_failed"),
    ("CompactLMCommandGenerator", "config.command_generator.unknown"),
])
def test_a_generator_that_cannot_run_is_a_validate_error(tmp_path, tools_url, name, code):
    project = _project(tmp_path, tools_url, name)
    loaded, issues = collect_issues(project)
    assert loaded is None
    found = [(i.code, i.severity, i.file, i.line, i.key) for i in issues
             if i.code.startswith("config.command_generator")]
    assert found == [(code, "error", "config.yml", 3, "pipeline[0].name")]


def test_a_generator_that_needs_more_of_rasa_names_the_missing_module(tmp_path, tools_url):
    project = _project(tmp_path, tools_url, "addons.commands.CommandsCommandGenerator")
    (project / "addons" / "commands.py").write_text(
        "from rasa.dialogue_understanding.commands import StartFlowCommand\n", encoding="utf-8")
    _, issues = collect_issues(project)
    found = next(i for i in issues if i.code == "config.command_generator.import_failed")
    assert "rasa.dialogue_understanding.commands" in (found.hint or "")
    assert "override parse_reply" in (found.hint or "")


@pytest.mark.parametrize("name", [
    "CompactLLMCommandGenerator", "SearchReadyLLMCommandGenerator",
    "rasa.dialogue_understanding.generator.CompactLLMCommandGenerator"])
def test_rasas_own_generators_run_as_the_built_in_one(tmp_path, tools_url, name):
    loaded, issues = collect_issues(_project(tmp_path, tools_url, name))
    assert loaded is not None
    assert loaded.command_generator_class is None
    assert [i for i in issues if i.code.startswith("config.command_generator")] == []
