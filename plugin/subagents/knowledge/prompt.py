"""The default prompt of generative search, with Rasa's template variables.

A project's ``prompt_template`` file sees the same variables: ``docs`` (the hits; each has
``text``, ``metadata`` and ``score``), ``slots`` (dicts with ``name``, ``value``, ``type``),
``current_conversation`` (the readable transcript), ``check_relevancy`` and ``citation_enabled``
(booleans) and ``current_datetime`` (a timezone-aware datetime, when ``include_date_time``).
Templates render in Jinja's sandbox.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from subagents.knowledge.answers import NO_ANSWER_MARKER
from subagents.knowledge.index import SearchHit

__all__ = ["DEFAULT_SEARCH_PROMPT", "PROMPT_VARIABLES", "render_search_prompt"]

PROMPT_VARIABLES = frozenset({"docs", "slots", "current_conversation", "check_relevancy",
                              "citation_enabled", "current_datetime"})

DEFAULT_SEARCH_PROMPT = """\
You answer the user's latest message using the documents below and the conversation so far.
Keep to what the documents and the conversation say; if they do not contain the answer, say that \
you do not know.
{% if check_relevancy %}
When the documents do not let you answer the question, reply with exactly """ + NO_ANSWER_MARKER \
    + """ and nothing else.
{% endif %}

## Documents
{% for doc in docs %}
Document {{ loop.index }} ({{ doc.metadata }}):
{{ doc.text }}
{% endfor %}
{% if citation_enabled %}
## Citing the documents
Cite the documents you use with bracketed numbers at the end of the sentence they support: the \
first document you cite is [1], the next new one [2], and a document cited again keeps its number.
Take each source from the "source" in the document's metadata, never from the conversation.
After the answer, write a line "Sources:" and then one line per cited document, for example:
Shipping takes three days. [1]
Sources:
[1] docs/shipping.txt
{% endif %}
{% if slots %}
## What is known about the conversation
{% for slot in slots %}
- {{ slot.name }} = {{ slot.value }} ({{ slot.type }})
{% endfor %}
{% endif %}
{% if current_datetime %}
## Now
It is {{ current_datetime.strftime("%A, %d %B %Y, %H:%M") }} ({{ current_datetime.tzname() }}).
{% endif %}

## Conversation
{{ current_conversation }}

Answer in two or three sentences:
"""


@functools.lru_cache(maxsize=32)
def _compile(template: str) -> Any:
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                autoescape=False).from_string(template)


def render_search_prompt(*, docs: Sequence[SearchHit], current_conversation: str,
                         slots: Sequence[dict[str, str]] = (), check_relevancy: bool = False,
                         citation_enabled: bool = False,
                         current_datetime: datetime | None = None,
                         template: str = DEFAULT_SEARCH_PROMPT) -> str:
    """Render a search prompt (the default one unless ``template`` is given)."""
    return str(_compile(template).render(
        docs=list(docs), slots=list(slots), current_conversation=current_conversation,
        check_relevancy=check_relevancy, citation_enabled=citation_enabled,
        current_datetime=current_datetime))
