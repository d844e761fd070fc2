"""The model that judges generative assertions (``generative_response_is_relevant`` and
``generative_response_is_grounded``).

Configured under ``llm_judge`` in the nearest ``conftest.yml`` (``llm`` and ``embeddings``, each
``{provider, model}`` or ``{model_group}``). In a test case with ``llm_script`` the judge is the
caller ``judge`` of the scripted model and embeddings come from the fake server (deterministic
bag-of-words vectors), so these assertions run offline too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from subagents.exceptions import SubagentsError
from subagents.llm import Model
from subagents.testing.assertions import AssertionFailed, Window, bot_messages

JUDGE_CALLER = "judge"
EMBEDDINGS_CALLER = "judge_embeddings"
DEFAULT_JUDGE_LLM = {"provider": "openai", "model": "gpt-4.1-mini-2025-04-14"}
DEFAULT_JUDGE_EMBEDDINGS = {"provider": "openai", "model": "text-embedding-3-large"}
GENERATIVE_SOURCES = ("EnterpriseSearchPolicy", "ContextualResponseRephraser", "IntentlessPolicy")
"""Message sources judged when an assertion names no ``utter_source``."""

_RELEVANCE_PROMPT = """You help to test a conversational assistant.
Below is a message the assistant sent. Write three different questions, each of which this
message would answer directly. Reply with JSON only, in this shape:
{{"question_variations": ["<question 1>", "<question 2>", "<question 3>"]}}

Assistant message:
{answer}"""

_GROUNDED_PROMPT = """You help to test a conversational assistant.
Split the assistant message below into short standalone statements of fact. For each statement
decide whether the reference text supports it: score 1 if it does, 0 if it does not or says
something else. Reply with JSON only, in this shape:
{{"statements": [{{"statement": "<statement>", "score": 1}}]}}

Reference text:
{ground_truth}

Assistant message:
{answer}"""


@dataclass
class Judge:
    """A chat model and an embeddings model used to score bot messages."""

    llm: Model
    embeddings: Model

    async def close(self) -> None:
        """Close both clients."""
        await self.llm.close()
        await self.embeddings.close()

    async def judge(self, name: str, spec: dict[str, Any], window: Window,
                    domain_texts: dict[str, list[str]]) -> str:
        """Judge one generative assertion; return a line describing the score, or raise
        :class:`AssertionFailed`."""
        message = _candidate(spec, window.events)
        answer = str(message.get("text") or "")
        threshold = float(spec.get("threshold", 0.5))
        if name == "generative_response_is_relevant":
            score = await self._relevance(answer, window.user_text)
        else:
            truth = _ground_truth(spec, message, domain_texts)
            score = await self._groundedness(answer, truth)
        line = f"{name}: score {score:.2f}, threshold {threshold:.2f} for {answer!r}"
        if score < threshold:
            raise AssertionFailed(line)
        return line

    async def _ask(self, prompt: str) -> dict[str, Any]:
        try:
            response = await self.llm.complete([{"role": "user", "content": prompt}], None)
        except SubagentsError as exc:
            raise AssertionFailed(f"the judge model failed: {exc}") from exc
        text = (response.text or "").strip()
        text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text)
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            raise AssertionFailed(f"the judge did not answer with a JSON object: {text[:200]!r}")
        return data

    async def _relevance(self, answer: str, user_text: str) -> float:
        data = await self._ask(_RELEVANCE_PROMPT.format(answer=answer))
        questions = data.get("question_variations")
        if not isinstance(questions, list) or not questions or \
                not all(isinstance(q, str) for q in questions):
            raise AssertionFailed("the judge's answer has no 'question_variations' list")
        vectors = await self._embed([user_text, *questions])
        return sum(_cosine(vectors[0], v) for v in vectors[1:]) / len(questions)

    async def _groundedness(self, answer: str, ground_truth: str) -> float:
        data = await self._ask(_GROUNDED_PROMPT.format(answer=answer,
                                                       ground_truth=ground_truth))
        statements = data.get("statements")
        if not isinstance(statements, list) or not statements:
            raise AssertionFailed("the judge's answer has no 'statements' list")
        scores = []
        for item in statements:
            score = item.get("score") if isinstance(item, dict) else None
            if score not in (0, 1):
                raise AssertionFailed(f"the judge scored a statement with {score!r}, not 0 or 1")
            scores.append(float(score))
        return sum(scores) / len(scores)

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        try:
            return await self.embeddings.embed(texts)
        except Exception as exc:  # any provider error fails the assertion
            raise AssertionFailed(f"the embeddings model failed: {type(exc).__name__}: "
                                  f"{exc}") from exc


def _candidate(spec: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    source = spec.get("utter_source")
    candidates = [m for m in bot_messages(events)
                  if ((m.get("metadata") or {}).get("utter_source") == source if source else
                      (m.get("metadata") or {}).get("utter_source") in GENERATIVE_SOURCES)]
    if spec.get("utter_name"):
        candidates = [m for m in candidates
                      if (m.get("metadata") or {}).get("utter_action") == spec["utter_name"]]
    if not candidates:
        wanted = f"utter_source {source!r}" if source else \
            f"an utter_source among {', '.join(GENERATIVE_SOURCES)}"
        raise AssertionFailed(f"no bot message with {wanted}" + (
            f" and utter_name {spec['utter_name']!r}" if spec.get("utter_name") else "") +
            " to judge in this turn")
    return candidates[0]


def _ground_truth(spec: dict[str, Any], message: dict[str, Any],
                  domain_texts: dict[str, list[str]]) -> str:
    if spec.get("ground_truth"):
        return str(spec["ground_truth"])
    meta = message.get("metadata") or {}
    if meta.get("search_results"):
        results = meta["search_results"]
        return results if isinstance(results, str) else json.dumps(results)
    texts = domain_texts.get(str(meta.get("utter_action") or ""))
    if texts:
        return "\n".join(texts)
    raise AssertionFailed("no ground truth: give 'ground_truth', or judge a message with "
                          "search results or a domain response")


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5)
    return dot / norm if norm else 0.0
