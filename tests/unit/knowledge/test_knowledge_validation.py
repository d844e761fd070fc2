"""Checks of a search setup: each problem is an issue with a stable code and a fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subagents.knowledge import SearchPolicySettings, check_search_setup


def check(root: Path, config: dict[str, Any], *, groups: tuple[str, ...] = ("embeddings", "llm"),
          endpoint: dict[str, Any] | None = None) -> list[str]:
    issues = check_search_setup(SearchPolicySettings.model_validate(config), root=root,
                                model_groups=groups, vector_store_endpoint=endpoint)
    assert all(i.hint and i.file for i in issues)
    return [i.code for i in issues]


def docs(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_a_complete_embedded_setup_has_no_issue(tmp_path: Path):
    docs(tmp_path, {"docs/a.txt": "Shipping takes three days."})
    assert check(tmp_path, {"embeddings": {"model_group": "embeddings"},
                            "llm": {"model_group": "llm"}}) == []


def test_a_missing_source_folder(tmp_path: Path):
    assert check(tmp_path, {}) == ["search.source_missing"]
    assert check(tmp_path, {"vector_store": {"type": "faiss"}}) == ["search.source_missing"]


def test_a_source_folder_without_txt_files(tmp_path: Path):
    docs(tmp_path, {"docs/readme.md": "# not indexed"})
    assert check(tmp_path, {}) == ["search.source_empty"]


def test_documents_that_give_an_empty_index(tmp_path: Path):
    docs(tmp_path, {"kb/a.txt": "Prose, no questions.", "kb/b.txt": "  \n"})
    assert check(tmp_path, {"vector_store": {"source": "kb"}, "use_generative_llm": False}) == [
        "search.index_empty"]
    assert check(tmp_path, {"vector_store": {"source": "kb"}}) == []  # passages are fine


def test_a_document_that_is_not_utf8(tmp_path: Path):
    docs(tmp_path, {"docs/a.txt": "fine"})
    (tmp_path / "docs" / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    issues = check_search_setup(SearchPolicySettings(), root=tmp_path, model_groups=())
    assert [(i.code, i.file) for i in issues] == [("search.document_unreadable",
                                                   "docs/latin1.txt")]


def test_model_groups_that_do_not_exist(tmp_path: Path):
    docs(tmp_path, {"docs/a.txt": "Q: Who?\nA: Us."})
    config = {"embeddings": {"model_group": "vectors"}, "llm": {"model_group": "writer"}}
    assert check(tmp_path, config) == ["search.embeddings_group_missing",
                                       "search.llm_group_missing"]
    assert check(tmp_path, {**config, "use_generative_llm": False}) == [
        "search.embeddings_group_missing"]  # extractive search uses no llm


def test_a_prompt_template_that_is_missing_or_does_not_parse(tmp_path: Path):
    docs(tmp_path, {"docs/a.txt": "text", "bad.jinja2": "{% for doc in docs %}"})
    assert check(tmp_path, {"prompt": "nope.jinja2"}) == ["search.prompt_missing"]
    assert check(tmp_path, {"prompt_template": "bad.jinja2"}) == ["search.prompt_invalid"]


def test_qdrant_needs_an_endpoint_with_a_collection_and_an_env_var_key(tmp_path: Path):
    config = {"vector_store": {"type": "qdrant"}}
    assert check(tmp_path, config) == ["search.qdrant_endpoint_missing"]
    assert check(tmp_path, config, endpoint={"type": "qdrant", "api_key": "abc"}) == [
        "search.qdrant_collection_missing", "search.qdrant_api_key_literal"]
    assert check(tmp_path, config, endpoint={"type": "qdrant", "collection": "docs",
                                             "api_key": "${QDRANT_KEY}"}) == []


def test_an_unsupported_store_type(tmp_path: Path):
    assert check(tmp_path, {"vector_store": {"type": "milvus"}}) == [
        "search.vector_store_unsupported"]
