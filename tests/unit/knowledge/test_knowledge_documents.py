"""Documents for the knowledge index: loading, chunking, Q/A pairs; answers and settings."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from subagents.knowledge import (
    NO_ANSWER_MARKER,
    Document,
    SearchHit,
    SearchPolicySettings,
    TextSplitter,
    answer_metadata,
    extractive_answer,
    is_relevant,
    load_documents,
    parse_qa_documents,
    render_search_prompt,
    renumber_citations,
    search_query,
    split_documents,
)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


# ---------------------------------------------------------------- loading


def test_load_documents_reads_every_txt_file_recursively_in_a_stable_order(tmp_path: Path):
    docs = write(tmp_path / "docs", {"b.txt": "bee", "a.txt": "ay", "sub/c.txt": "sea",
                                     "notes.md": "not a document"})
    documents = load_documents(docs, display_root=tmp_path)
    assert documents == [Document("ay", {"source": "docs/a.txt"}),
                         Document("bee", {"source": "docs/b.txt"}),
                         Document("sea", {"source": "docs/sub/c.txt"})]


# ---------------------------------------------------------------- chunking


def test_short_text_is_one_chunk_stripped():
    assert TextSplitter(100, 10).split("  Shipping takes three days.\n\n") == [
        "Shipping takes three days."]


def test_chunks_respect_the_size_and_prefer_paragraph_breaks():
    paragraph = "word " * 30  # 150 characters
    text = "\n\n".join([paragraph.strip()] * 4)
    chunks = TextSplitter(200, 20).split(text)
    assert len(chunks) == 4
    assert all(len(c) <= 200 for c in chunks)
    assert all(c == paragraph.strip() for c in chunks)  # each paragraph whole, none cut


def test_consecutive_chunks_overlap_when_a_paragraph_must_be_cut():
    text = " ".join(f"w{i:03d}" for i in range(100))  # 499 characters, spaces only
    chunks = TextSplitter(100, 20).split(text)
    assert all(len(c) <= 100 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        assert before.split()[-1] in after.split()[:4]  # the tail of a chunk starts the next
    words = [w for c in chunks for w in c.split()]
    assert sorted(set(words)) == [f"w{i:03d}" for i in range(100)]


def test_a_word_longer_than_the_chunk_size_is_cut_into_characters():
    chunks = TextSplitter(10, 0).split("x" * 25)
    assert chunks == ["x" * 10, "x" * 10, "x" * 5]


def test_default_chunking_is_1000_characters_with_20_overlapping():
    splitter = TextSplitter()
    assert (splitter.chunk_size, splitter.chunk_overlap) == (1000, 20)


def test_invalid_sizes_are_refused():
    with pytest.raises(ValueError, match="chunk_overlap"):
        TextSplitter(10, 20)


def test_split_documents_copies_the_source_into_each_chunk():
    chunks = split_documents([Document("a " * 80, {"source": "docs/a.txt"})], TextSplitter(50, 0))
    assert len(chunks) > 1
    assert {c.metadata["source"] for c in chunks} == {"docs/a.txt"}


# ---------------------------------------------------------------- Q/A pairs


def test_qa_entries_become_one_document_per_question_with_the_answer_in_metadata():
    text = ("Q: Who is Finley?\nA: Finley is your assistant.\n"
            "It lives in the app.\n\nQ:How do I pay?\nA: By card.")
    pairs = parse_qa_documents([Document(text, {"source": "docs/faq.txt"})])
    assert pairs == [
        Document("Who is Finley?", {"source": "docs/faq.txt", "title": "who_is_finley",
                                    "type": "faq",
                                    "answer": "Finley is your assistant.\nIt lives in the app."}),
        Document("How do I pay?", {"source": "docs/faq.txt", "title": "how_do_i_pay",
                                   "type": "faq", "answer": "By card."}),
    ]


def test_malformed_qa_entries_are_skipped_with_a_warning():
    with capture_logs() as logs:
        pairs = parse_qa_documents([Document("Just a sentence.\n\nQ: Ok?\nA: Yes.", {})])
    assert [p.text for p in pairs] == ["Ok?"]
    assert [e["event"] for e in logs] == ["search.qa.entry_skipped"]


def test_entries_with_an_empty_question_or_answer_are_skipped():
    with capture_logs() as logs:
        pairs = parse_qa_documents([Document("Q:\nA: orphan\n\nQ: Empty?\nA:\n\nQ: Ok?\nA: Yes.",
                                              {})])
    assert [p.text for p in pairs] == ["Ok?"]
    assert [e["event"] for e in logs] == ["search.qa.entry_skipped"] * 2


def test_duplicate_and_conflicting_questions_are_reported():
    text = "Q: A?\nA: one\n\nQ: A?\nA: one\n\nQ: A?\nA: two"
    with capture_logs() as logs:
        parse_qa_documents([Document(text, {})])
    assert [e["event"] for e in logs] == ["search.qa.duplicate_pair",
                                          "search.qa.conflicting_answers"]


# ---------------------------------------------------------------- answers


def hit(text: str, **metadata: object) -> SearchHit:
    return SearchHit(text, dict(metadata), 0.5)


def test_search_query_is_the_last_messages_newest_first_on_one_line():
    messages = ["hello", "Hi! How can I help?", "what about\nshipping"]
    assert search_query(messages, 2) == "what about shipping Hi! How can I help?"
    assert search_query(messages, 1) == "what about shipping"


def test_answer_metadata_lists_the_results_the_query_and_the_source():
    metadata = answer_metadata("shipping?", [hit("Shipping takes 3 days."), hit("Returns...")])
    assert metadata == {"search_results": ["Shipping takes 3 days.", "Returns..."],
                        "utter_source": "EnterpriseSearchPolicy", "search_query": "shipping?"}
    assert answer_metadata("q", [], streamed=True)["streamed_text"] is True


def test_extractive_answer_is_the_best_hits_answer():
    assert extractive_answer([hit("How do I pay?", answer="By card."), hit("x", answer="no")]
                             ) == "By card."
    assert extractive_answer([hit("passage without answer")]) is None
    assert extractive_answer([]) is None


def test_an_answer_with_the_marker_is_not_relevant():
    assert not is_relevant(f"{NO_ANSWER_MARKER}")
    assert is_relevant("Shipping takes three days.")


def test_citations_are_renumbered_in_order_of_first_use():
    answer = ("Shipping is free [3]. Returns take a week [1, 3]. Unknown [7] .\n"
              "Sources:\n[1] docs/returns.txt\n[2] docs/unused.txt\n[3] docs/shipping.txt\n"
              "see also the website")
    assert renumber_citations(answer) == (
        "Shipping is free [1]. Returns take a week [1, 2]. Unknown.\n"
        "Sources:\n[1] docs/shipping.txt\n[2] docs/returns.txt\n[2] docs/unused.txt\n"
        "see also the website")


def test_an_answer_without_sources_is_only_stripped():
    assert renumber_citations("  Shipping is free [1].  ") == "Shipping is free [1]."


# ---------------------------------------------------------------- settings and prompt


def test_settings_have_rasas_defaults():
    settings = SearchPolicySettings.model_validate({})
    assert settings.vector_store.type == "faiss"
    assert settings.source == "./docs"
    assert settings.vector_store.embedded
    assert (settings.use_generative_llm, settings.citation_enabled, settings.check_relevancy,
            settings.max_messages_in_query, settings.max_history) == (True, False, False, 2, None)


def test_a_given_vector_store_replaces_the_default_and_prompt_is_an_alias():
    settings = SearchPolicySettings.model_validate(
        {"vector_store": {"type": "qdrant"}, "prompt": "p.jinja2", "priority": 3})
    assert settings.source is None
    assert not settings.vector_store.embedded
    assert settings.prompt_template == "p.jinja2"


def test_citations_and_relevancy_need_the_generative_model():
    settings = SearchPolicySettings.model_validate(
        {"use_generative_llm": False, "citation_enabled": True, "check_relevancy": True})
    assert not settings.citations
    assert not settings.relevancy_check


def test_default_prompt_renders_rasas_variables():
    prompt = render_search_prompt(
        docs=[hit("Shipping takes three days.", source="docs/shipping.txt")],
        current_conversation="USER: how long is shipping?",
        slots=[{"name": "city", "value": "Berlin", "type": "text"}],
        check_relevancy=True, citation_enabled=True,
        current_datetime=datetime(2025, 3, 4, 10, 30, tzinfo=UTC))
    assert "Shipping takes three days." in prompt
    assert "docs/shipping.txt" in prompt
    assert "USER: how long is shipping?" in prompt
    assert "city = Berlin (text)" in prompt
    assert NO_ANSWER_MARKER in prompt
    assert "Sources:" in prompt
    assert "Tuesday, 04 March 2025, 10:30 (UTC)" in prompt


def test_default_prompt_leaves_out_what_is_off():
    prompt = render_search_prompt(docs=[], current_conversation="USER: hi")
    assert NO_ANSWER_MARKER not in prompt
    assert "Sources:" not in prompt
