"""The response rephraser: a model rewrites a response so it fits the conversation.

Configured in ``endpoints.yml``::

    nlg:
      type: rephrase               # Rasa 3.7's rasa_plus.ml.ContextualResponseRephraser too
      rephrase_all: false          # rephrase every response, not only those that ask for it
      max_historical_turns: 5      # how much of the conversation the model sees
      prompt_template: prompts/rephraser.jinja2   # optional, relative to the project folder
      llm: {model_group: rephraser_llm}           # optional; default: the first model group

A response is rephrased when its ``metadata.rephrase`` says so (``true`` or ``false`` wins over
``rephrase_all``); a response without text is never rephrased. A ``metadata.rephrase_prompt``
replaces the prompt template for that response. The prompt template is Jinja and receives
``history``, ``current_input``, ``suggested_response``, ``slots`` and ``language``. If the model
fails or answers with nothing, the response goes out as written. The model is called with the
caller name ``rephraser`` (the name conversation tests script it under).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from subagents.config.domain import ResponseVariation
from subagents.config.endpoints import is_rephraser_type
from subagents.config.project import Project
from subagents.dialogue.turn import Turn
from subagents.dialogue.understanding import transcript
from subagents.llm import Model, ModelSettings, resolve_model_settings
from subagents.templating import sandbox

log = structlog.get_logger("subagents.dialogue")

CALLER = "rephraser"
LLMFactory = Callable[[str, ModelSettings], Model]
LANGUAGES = {"en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
             "pt": "Portuguese", "nl": "Dutch"}
DEFAULT_PROMPT = """\
Rewrite the assistant's next message so that it fits the conversation below. Keep its meaning \
and every fact in it (names, numbers, dates, references); add nothing; keep it about as long. \
Write in simple {{ language }}. Answer with the rewritten message only.

Conversation:
{{ history }}
{{ current_input }}

Message to rewrite: {{ suggested_response }}

Rewritten message:"""


class Rephraser:
    """Rephrases responses through a model.

    Args:
        project: The loaded project (its ``nlg`` endpoint and language).
        llm_factory: Builds the model client from its settings.
        config: The ``nlg`` section of ``endpoints.yml``.
    """

    def __init__(self, project: Project, llm_factory: LLMFactory, config: dict[str, Any]) -> None:
        self.factory = llm_factory
        self.rephrase_all = bool(config.get("rephrase_all", False))
        self.max_turns = max(int(config.get("max_historical_turns") or 5), 1)
        llm = config.get("llm") if isinstance(config.get("llm"), dict) else None
        self.settings = resolve_model_settings(llm, project.endpoints, where="endpoints.yml")
        self.template = DEFAULT_PROMPT
        if config.get("prompt_template") or config.get("prompt"):
            path = Path(project.root) / str(config.get("prompt_template") or config.get("prompt"))
            try:
                self.template = path.read_text(encoding="utf-8")
            except OSError as exc:
                log.error("dialogue.rephraser.template_missing", path=str(path), error=str(exc))
        code = str(project.pipeline.language or "en")
        self.language = LANGUAGES.get(code.split("-")[0].lower(), code)
        self.enabled = True
        """False: every response goes out as written (a conversation test that scripts no
        rephraser turns it off)."""

    @classmethod
    def from_project(cls, project: Project, llm_factory: LLMFactory | None) -> Rephraser | None:
        """The rephraser the project configures (``nlg: {type: rephrase}``), if any."""
        nlg = (project.endpoints.model_extra or {}).get("nlg")
        if llm_factory is None or not isinstance(nlg, dict) or \
                not is_rephraser_type(nlg.get("type")):
            return None
        return cls(project, llm_factory, nlg)

    def wants(self, variation: ResponseVariation) -> bool:
        """Whether this variation is to be rephrased."""
        if not self.enabled:
            return False
        metadata = variation.metadata or {}
        if "rephrase" in metadata:
            return bool(metadata["rephrase"])
        return self.rephrase_all

    def prompt(self, turn: Turn, text: str, variation: ResponseVariation) -> str:
        """The prompt asking to rephrase ``text``."""
        source = str((variation.metadata or {}).get("rephrase_prompt") or self.template)
        latest = next((e for e in reversed(turn.events) if e.get("event") == "user"), None)
        current = f"USER: {latest.get('text') or ''}" if latest else ""
        history = transcript(turn.events, self.max_turns * 2)
        return str(sandbox().from_string(source).render(
            history=history, current_input=current, suggested_response=text,
            slots=dict(turn.slots), language=self.language))

    async def rephrase(self, turn: Turn, text: str, variation: ResponseVariation) -> str | None:
        """The rephrased text, or None when the model failed or answered with nothing."""
        client = self.factory(CALLER, copy.deepcopy(self.settings))
        try:
            prompt = self.prompt(turn, text, variation)
            response = await client.complete([{"role": "user", "content": prompt}], None,
                                             scope=turn.scope)
        except Exception as exc:  # noqa: BLE001 - on any failure the response goes out as written
            log.warning("dialogue.rephraser.failed", error=str(exc)[:200])
            return None
        finally:
            await client.close()
        rephrased = (response.text or "").strip()
        return rephrased or None
