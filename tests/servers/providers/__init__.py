"""Scripted stand-ins for model providers that speak their own wire format (not OpenAI's):
Anthropic Messages, Gemini and Vertex AI ``generateContent``, Bedrock Converse, Mistral chat
completions and Cohere v2 chat. Each runs on 127.0.0.1 (a random port), answers chat calls with
scripted replies (text, tool calls, errors, malformed bodies), plain or streamed exactly as the
provider streams, and records every request it received.

OpenAI-compatible providers (groq, deepinfra, huggingface, ...) need no stand-in of their own:
``subagents.testing.FakeModelServer`` speaks their format.
"""

from ._base import TOOL, ScriptedCall, ScriptedError, ScriptedReply, WireRequest, WireServer
from .anthropic import AnthropicServer
from .bedrock import BedrockServer
from .cohere import CohereServer
from .eventstream import encode_event, encode_exception, encode_message
from .google import BAD_KEY, GeminiServer, VertexServer
from .mistral import MistralServer

__all__ = ["BAD_KEY", "TOOL", "AnthropicServer", "BedrockServer", "CohereServer", "GeminiServer",
           "MistralServer", "ScriptedCall", "ScriptedError", "ScriptedReply", "VertexServer",
           "WireRequest", "WireServer", "encode_event", "encode_exception", "encode_message"]
