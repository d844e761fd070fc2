"""Calling language models.

:class:`Model` is what the rest of the package calls; :func:`build_model` assembles one from
its :class:`ModelSettings` (resolved from ``endpoints.yml`` by :func:`resolve_model_settings`).
Every call is an argument-passing affair: the turn's :class:`~subagents.types.CallScope`
carries its deadline, its usage tally and, for a recorded conversation, its recording.
"""

from subagents.llm.factory import build_model
from subagents.llm.fallback import FallbackModel
from subagents.llm.model import LLMResponse, Model, TextCallback, ToolCall, Usage
from subagents.llm.openai_compat import OpenAICompatibleModel
from subagents.llm.settings import (
    DEFAULT_MODEL_SETTINGS,
    ModelSettings,
    RoutedGroup,
    resolve_model_settings,
)
from subagents.llm.structured import StructuredOutputModel, schema_format, wants_schema

LLMClient = OpenAICompatibleModel
"""The name earlier versions gave the OpenAI-compatible model (kept for project code)."""

__all__ = [
    "DEFAULT_MODEL_SETTINGS",
    "FallbackModel",
    "LLMClient",
    "LLMResponse",
    "Model",
    "ModelSettings",
    "OpenAICompatibleModel",
    "RoutedGroup",
    "StructuredOutputModel",
    "TextCallback",
    "ToolCall",
    "Usage",
    "build_model",
    "resolve_model_settings",
    "schema_format",
    "wants_schema",
]
