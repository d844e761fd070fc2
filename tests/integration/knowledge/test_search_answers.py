"""Knowledge answers end to end: config.yml's EnterpriseSearchPolicy over a docs/ folder, the
scripted command generator and search model and the fake embeddings, all over real HTTP."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from subagents.exceptions import ConfigError
from subagents.server.app import create_app
from subagents.stores import InMemoryTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for, names

SHIPPING = "Shipping takes three working days. Express shipping arrives the next day."
RETURNS = "You can return an item within thirty days for a full refund."
CARDS = "We accept credit cards and debit cards. Payment is taken at dispatch."
FAQ = ("Q: How long does shipping take?\nA: Three working days; express arrives next day.\n\n"
       "Q: Can I return an item?\nA: Yes, within thirty days, for a full refund.\n\n"
       "Q: Which cards do you accept?\nA: Credit and debit cards.")
NO_ANSWER = "Sorry, I could not find an answer to that."
QUESTION = "How long does shipping take?"


def write_search_project(root: Path, policy: str = "", docs: dict[str, str] | None = None
                         ) -> Path:
    """A project without agents whose pattern_search triggers the search policy."""
    files = {
        "config.yml": "\n".join([
            "assistant_id: search_assistant",
            "pipeline:",
            "  - name: SearchReadyLLMCommandGenerator",
            "    llm: {model_group: llm}",
            "policies:",
            "  - name: FlowPolicy",
            "  - name: EnterpriseSearchPolicy",
            "    embeddings: {model_group: embeddings}",
            "    llm: {model_group: search_llm}",
            *(f"    {line}" for line in policy.splitlines() if line.strip()), ""]),
        "endpoints.yml": """
            model_groups:
              - id: llm
                models: [{provider: openai, model: gpt-test}]
              - id: search_llm
                models: [{provider: openai, model: gpt-search}]
              - id: embeddings
                models: [{provider: openai, model: text-embedding-3-small}]
            """,
        "data/flows.yml": """
            flows:
              opening_hours:
                description: tell the opening hours
                steps:
                  - action: utter_hours
              pattern_search:
                description: answer knowledge questions from the documents
                steps:
                  - action: action_trigger_search
            """,
        "domain.yml": """
            responses:
              utter_hours:
                - text: "We are open from nine to five."
            """,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    documents = docs if docs is not None else {
        "docs/shipping.txt": SHIPPING, "docs/returns.txt": RETURNS,
        "docs/payments/cards.txt": CARDS}
    for rel, text in documents.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def bot_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "bot"]


async def test_a_question_is_answered_from_the_documents(tmp_path):
    root = write_search_project(tmp_path / "assistant")
    script = {"command_generator": ["search and reply"],
              "search": ["Shipping takes three working days."]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say(QUESTION)
        fake.assert_done()
        [request] = fake.requests_of("search")
    assert texts[0] == "Shipping takes three working days."
    [answer, *_] = bot_events(events)
    # sent as Rasa's action_send_text sends it: the results, the source and the query
    assert answer["metadata"]["utter_source"] == "EnterpriseSearchPolicy"
    assert answer["metadata"]["search_query"] == QUESTION
    assert answer["metadata"]["search_results"][0] == SHIPPING
    assert "flow_started:pattern_search" in names(events)
    prompt = request.messages[0]["content"]
    assert SHIPPING in prompt
    assert f"USER: {QUESTION}" in prompt
    assert "docs/shipping.txt" in prompt  # each document's source, for citations
    manifest = json.loads((root / ".subagents/search/docs/manifest.json").read_text())
    assert manifest["chunk_count"] == 3


async def test_the_index_is_kept_and_rebuilt_only_when_the_documents_change(tmp_path):
    root = write_search_project(tmp_path / "assistant")
    async with FakeModelServer() as fake:
        async with assistant_for(root, fake):
            pass
        built = [text for batch in fake.embedding_inputs for text in batch]
        assert sorted(built) == sorted([SHIPPING, RETURNS, CARDS])
        fake.reset()
        async with assistant_for(root, fake):
            pass
        assert fake.embedding_inputs == []  # the same documents: loaded, not embedded again
        (root / "docs/gift.txt").write_text("Gift cards never expire.", encoding="utf-8")
        async with assistant_for(root, fake) as assistant:
            assert assistant.search is not None
            assert assistant.search.store.rebuilt  # type: ignore[union-attr]
        assert len([t for batch in fake.embedding_inputs for t in batch]) == 4


async def test_extractive_search_answers_with_the_stored_answer_and_no_search_model(tmp_path):
    root = write_search_project(tmp_path / "assistant", "use_generative_llm: false",
                                {"docs/faq.txt": FAQ})
    async with FakeModelServer({"command_generator": ["search and reply"]}) as fake, \
            assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("Which cards do you take?")
        fake.assert_done()
        assert fake.requests_of("search") == []
    assert texts[0] == "Credit and debit cards."
    [answer, *_] = bot_events(events)
    assert answer["metadata"]["search_results"][0] == "Which cards do you accept?"
    assert answer["metadata"]["utter_source"] == "EnterpriseSearchPolicy"


async def test_an_answer_the_documents_do_not_support_runs_cannot_handle(tmp_path):
    root = write_search_project(tmp_path / "assistant", "check_relevancy: true")
    script = {"command_generator": ["search and reply"], "search": ["[NO_RAG_ANSWER]"]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("Who won the match yesterday?")
        fake.assert_done()
        prompt = fake.requests_of("search")[0].messages[0]["content"]
    assert "[NO_RAG_ANSWER]" in prompt  # the relevancy instruction is in the prompt
    assert texts == [NO_ANSWER]
    started = [e for e in events if e["event"] == "flow_started"
               and e["flow_id"] == "pattern_cannot_handle"]
    assert started[0]["metadata"]["reason"] == "cannot_handle_no_relevant_answer"
    assert not any(e["metadata"].get("utter_source") == "EnterpriseSearchPolicy"
                   for e in bot_events(events))


async def test_no_result_above_the_threshold_runs_cannot_handle_without_the_model(tmp_path):
    root = write_search_project(tmp_path / "assistant",
                                "vector_store: {type: faiss, source: docs, threshold: 0.9}")
    async with FakeModelServer({"command_generator": ["search and reply"]}) as fake, \
            assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("Do you sell umbrellas?")
        fake.assert_done()
        assert fake.requests_of("search") == []
    assert texts == [NO_ANSWER]
    assert "flow_started:pattern_cannot_handle" in names(events)


async def test_a_failing_search_model_runs_the_internal_error_pattern(tmp_path):
    root = write_search_project(tmp_path / "assistant")
    script = {"command_generator": ["search and reply", "start flow opening_hours"],
              "search": [{"error": {"status": 500, "message": "model down"}}]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            _, events = await conversation.say(QUESTION)
            texts, _ = await conversation.say("when are you open?")
        fake.assert_done()
    started = [e for e in events if e["event"] == "flow_started"
               and e["flow_id"] == "pattern_internal_error"]
    assert started[0]["metadata"]["error_code"] == "search.llm_failed"
    assert texts[0] == "We are open from nine to five."  # the conversation goes on


async def test_a_missing_documents_folder_stops_the_start_with_its_fix(tmp_path):
    root = write_search_project(tmp_path / "assistant", docs={})
    from subagents.dialogue.processor import Assistant
    from subagents.exceptions import ProjectInvalidError

    with pytest.raises(ProjectInvalidError) as error:
        Assistant.load(root, tracker_store=InMemoryTrackerStore())
    assert [i.code for i in error.value.issues if i.severity == "error"] == [
        "search.source_missing"]
    (root / "docs").mkdir()
    (root / "docs/faq.txt").write_text("Q: x\nA: y", encoding="utf-8")
    project = Assistant.load(root, tracker_store=InMemoryTrackerStore()).project
    (root / "docs/faq.txt").unlink()  # removed after validation: the start says so
    async with FakeModelServer() as fake:
        assistant = Assistant(project, llm_factory=fake.llm_factory(),
                              tracker_store=InMemoryTrackerStore())
        with pytest.raises(ConfigError) as started:
            await assistant.start()
    assert started.value.code == "search.source_empty"


async def test_serve_answers_a_knowledge_question_over_rest(tmp_path):
    root = write_search_project(tmp_path / "assistant")
    script = {"command_generator": ["search and reply"],
              "search": ["Returns are accepted within thirty days."]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant)) as base:
        async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
            with anyio.fail_after(30):
                response = await client.post("/webhooks/rest/webhook", json={
                    "sender": "shopper", "message": "Can I return an item?"})
        fake.assert_done()
    assert response.status_code == 200
    assert response.json()[0]["text"] == "Returns are accepted within thirty days."
    # the retrieval that grounded the answer reached the search model
    assert RETURNS in fake.requests_of("search")[0].messages[0]["content"]


async def stream_frames(client: httpx2.AsyncClient, body: dict[str, Any]
                        ) -> list[tuple[str | None, Any]]:
    frames: list[tuple[str | None, Any]] = []
    async with client.stream("POST", "/webhooks/stream/webhook", json=body) as response:
        assert response.status_code == 200
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                frames.append((event, json.loads(line[len("data: "):])))
    return frames


@pytest.mark.parametrize("check_relevancy", [False, True])
async def test_a_generative_answer_streams_unless_it_must_be_checked_first(tmp_path,
                                                                         check_relevancy):
    policy = "check_relevancy: true" if check_relevancy else ""
    root = write_search_project(tmp_path / "assistant", policy)
    answer = "Shipping takes three working days, express arrives the next day."
    script = {"command_generator": ["search and reply"], "search": [answer]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant)) as base:
        async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
            with anyio.fail_after(30):
                frames = await stream_frames(client, {"sender": "s", "message": QUESTION})
        fake.assert_done()
        events = await assistant.tracker_store.load_events("s", 0, None)
    chunks = [data["text"] for kind, data in frames if kind == "message_chunk"]
    whole = [data["text"] for kind, data in frames if kind == "message"]
    [recorded] = [e for e in bot_events(events)
                  if e["metadata"].get("utter_source") == "EnterpriseSearchPolicy"]
    assert recorded["text"] == answer
    if check_relevancy:  # the answer is checked first, then sent whole
        assert chunks == []
        assert answer in whole
        assert "streamed_text" not in recorded["metadata"]
    else:  # sent as it arrives, once
        assert "".join(chunks) == answer
        assert len(chunks) > 1
        assert answer not in whole
        assert recorded["metadata"]["streamed_text"] is True


async def test_a_qdrant_collection_filled_by_subagents_index_answers(tmp_path):
    pytest.importorskip("qdrant_client")
    from subagents.cli.index import _index
    from subagents.config.project import load_project

    root = write_search_project(tmp_path / "assistant",
                                "vector_store: {type: qdrant, source: docs}")
    async with FakeModelServer() as fake:
        endpoints = root / "endpoints.yml"
        endpoints.write_text(endpoints.read_text().replace(
            "model: text-embedding-3-small}",
            f"model: text-embedding-3-small, api_base: '{fake.base_url()}'}}") +
            "vector_store:\n  type: qdrant\n  collection: support\n  path: ${QDRANT_DIR}\n",
            encoding="utf-8")
        with pytest.MonkeyPatch.context() as env:
            env.setenv("QDRANT_DIR", str(tmp_path / "qdrant"))
            with anyio.fail_after(60):
                assert await _index(load_project(root), False) == 0
                assert await _index(load_project(root), False) == 0  # stored once, not twice
            fake.add("command_generator", ["search and reply"])
            fake.add("search", ["Express shipping arrives the next day."])
            async with assistant_for(root, fake) as assistant:
                with anyio.fail_after(30):
                    texts, events = await Conversation(assistant).say(QUESTION)
                store = assistant.search.store  # type: ignore[union-attr]
                count = await store.client.count("support")
            fake.assert_done()
    assert texts[0] == "Express shipping arrives the next day."
    [answer, *_] = bot_events(events)
    assert answer["metadata"]["search_results"][0] == SHIPPING
    assert count.count == 3
