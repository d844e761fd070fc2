"""The bundled `subagents init` templates: valid Python, known names, clear errors."""

from __future__ import annotations

from importlib import resources

import pytest
from subagents.scaffold import TEMPLATES, ScaffoldError, create_project


def test_every_template_folder_is_offered_and_the_other_way_round():
    folders = {entry.name for entry in
               resources.files("subagents.scaffold").joinpath("templates").iterdir()
               if entry.is_dir() and entry.name != "__pycache__"}
    assert folders == set(TEMPLATES)


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_the_python_files_of_a_template_compile(tmp_path, template):
    scaffold = create_project(tmp_path / template, template)
    python = [path for path in scaffold.files if path.suffix == ".py"]
    assert python
    for path in python:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    readme = (tmp_path / template / "README.md").read_text(encoding="utf-8")
    assert readme.startswith(f"# {template}\n")
    assert "{{" not in readme


def test_an_unknown_template_is_refused_with_a_code(tmp_path):
    with pytest.raises(ScaffoldError) as caught:
        create_project(tmp_path / "x", "nope")
    assert caught.value.code == "init.unknown_template"
    assert not (tmp_path / "x").exists()


def test_a_file_in_the_way_is_refused_with_a_code(tmp_path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(ScaffoldError) as caught:
        create_project(tmp_path / "taken")
    assert caught.value.code == "init.not_a_folder"
