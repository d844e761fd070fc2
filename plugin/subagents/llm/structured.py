"""Constrained output: what makes small models usable, per model's ``structured_output``.

* ``json_schema``: a reply format a caller asks for (``options["response_format"]``, e.g. the
  command generator's schema of the project's commands) is sent as is, and an agent's tools are
  not sent as native tools: the model answers with JSON under a schema that allows exactly one
  call of one of the tools (its name and its arguments' schema) or a text answer, and the reply
  is turned back into a tool call or text. Any server that accepts ``response_format`` with a
  JSON schema works this way, with or without native tool calling (llama.cpp, vLLM, Ollama,
  LM Studio, OpenAI). llama.cpp is also told to write the JSON without line breaks
  (:data:`COMPACT_JSON`).
* ``auto``: the caller's reply format is sent; a server that refuses it gets the call again
  without it, and the model stops asking for it. Tools go as native tools, except to a server
  that says it has none (llama.cpp's ``/props`` for a chat template without tools, which would
  drop them silently) or refuses them: that server gets the JSON form above from then on.
* ``off``: neither (free text and native tools, as the model would be called otherwise).

A refusal is an HTTP 400, 404, 415, 422 or 500 whose message names the feature
(``response_format``, ``json_schema``, ``grammar``, ``tools``, ``tool_choice``, ``jinja``).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pydantic_core
import structlog

from subagents.exceptions import LLMError
from subagents.llm.model import LLMResponse, Model, TextCallback, ToolCall
from subagents.llm.wrappers import WrapperModel
from subagents.types import CallScope, ChatMessage, JsonObject

log = structlog.get_logger("subagents.llm")

_REFUSAL_CODES = frozenset({"llm.http_400", "llm.http_404", "llm.http_415", "llm.http_422",
                            "llm.http_500", "llm.http_501"})
_SCHEMA_WORDS = re.compile(r"response_format|json_schema|json schema|grammar|schema", re.I)
_TOOL_WORDS = re.compile(r"\btools?\b|tool_choice|function|jinja", re.I)
REPLY_FORMAT = "reply"
"""The name of the JSON schema of an agent's reply in the JSON tool form."""
COMPACT_JSON = [[space, False] for space in (
    *("\n" + " " * indent for indent in range(33)), "\n\n", "\n\n\n", "\n\n ", "\n\t",
    "\n\t\t", " \n", "  \n", "\r\n")]
"""llama.cpp's ``logit_bias`` (by text) that forbids line breaks: its JSON grammar lets a model
indent, and small models do, which doubles a reply's tokens; JSON needs no line break, so a
constrained reply comes compact. A line break and the indentation after it are often one token
(SmolLM2's vocabulary has one per indentation up to 32 spaces), so each such text is listed.
Sent only to a llama.cpp server (it describes itself at ``/props``) with a reply format, and not
when the model's settings set ``logit_bias``."""


def schema_format(name: str, schema: JsonObject) -> JsonObject:
    """The ``response_format`` that asks for JSON under ``schema``."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True,
                                                   "schema": schema}}


def wants_schema(model: Model) -> bool:
    """Whether a caller should ask ``model`` for a reply format (else it answers in text)."""
    return model.settings.structured_output != "off" and not getattr(
        model, "schema_refused", False)


class StructuredOutputModel(WrapperModel):
    """Applies the model's ``structured_output`` mode to every call (see the module)."""

    def __init__(self, inner: Model) -> None:
        super().__init__(inner)
        self.schema_refused = False
        """The server refused a reply format (under ``auto``): none is sent any more."""
        self.tools_refused = False
        """The server refused native tools, or says it has none (under ``auto``): the JSON
        form is used."""
        self.tools_checked = False
        self.llama_cpp: bool | None = None
        """Whether the server is llama.cpp's (asked once, when a reply format is first sent)."""

    @property
    def mode(self) -> str:
        """The model's ``structured_output``."""
        return self.inner.settings.structured_output

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """The inner model's answer, with the reply format and tool form the mode asks for."""
        mode = self.mode
        if options and "response_format" in options and (mode == "off" or self.schema_refused):
            options = {k: v for k, v in options.items() if k != "response_format"}
        elif options and "response_format" in options:
            options = await self._compact(options)
        if tools and (mode == "json_schema" or self.tools_refused or (
                mode == "auto" and await self._tools_dropped())):
            return await self._json_tools(messages, tools, on_text, scope, options)
        try:
            return await self.inner.complete(messages, tools, stream=stream, on_text=on_text,
                                             scope=scope, options=options)
        except LLMError as exc:
            if mode != "auto" or exc.code not in _REFUSAL_CODES:
                raise
            if options and "response_format" in options and _SCHEMA_WORDS.search(str(exc)):
                self.schema_refused = True
                log.warning("llm.structured_output.refused", model=self.settings.model,
                            feature="response_format", error_code=exc.code)
                return await self.complete(messages, tools, stream=stream, on_text=on_text,
                                           scope=scope, options=options)
            if tools and _TOOL_WORDS.search(str(exc)):
                self.tools_refused = True
                log.warning("llm.structured_output.refused", model=self.settings.model,
                            feature="tools", error_code=exc.code)
                return await self._json_tools(messages, tools, on_text, scope, options)
            raise

    async def _compact(self, options: JsonObject) -> JsonObject:
        """``options`` with :data:`COMPACT_JSON` when the server is llama.cpp's."""
        settings = self.settings
        if "logit_bias" in options or "logit_bias" in settings.options \
                or "logit_bias" in settings.extra_body:
            return options
        if self.llama_cpp is None:
            ask = getattr(self.inner, "server_props", None)
            props = await ask() if ask is not None else None
            self.llama_cpp = isinstance(props, dict) and bool(
                {"chat_template_caps", "default_generation_settings"} & props.keys())
        return {**options, "logit_bias": COMPACT_JSON} if self.llama_cpp else options

    async def _tools_dropped(self) -> bool:
        """Whether the server says it has no native tool calling (asked once)."""
        ask = getattr(self.inner, "native_tools", None)
        if ask is None or self.tools_checked:
            return self.tools_refused
        self.tools_checked = True
        if await ask() is False:
            self.tools_refused = True
            log.info("llm.structured_output.json_tools", model=self.settings.model,
                     reason="the server's chat template has no tools")
        return self.tools_refused

    async def _json_tools(self, messages: list[ChatMessage], tools: list[JsonObject],
                          on_text: TextCallback | None, scope: CallScope | None,
                          options: JsonObject | None) -> LLMResponse:
        """One call in the JSON tool form: the reply is one tool call or a text answer. A
        streaming caller gets the answer's text as it is written (a tool call sends none)."""
        specs = [spec for spec in map(_function, tools) if spec is not None]
        asked = await self._compact({**(options or {}), "response_format": schema_format(
            REPLY_FORMAT, reply_schema(specs))})
        answer = _AnswerStream(on_text) if on_text is not None else None
        response = await self.inner.complete(
            json_tool_messages(messages, specs), None, stream=answer is not None,
            on_text=answer.feed if answer is not None else None, scope=scope, options=asked)
        reply = read_reply(response.text, {spec["name"] for spec in specs},
                           cut=response.finish_reason == "length")
        if isinstance(reply, ToolCall):
            response.text, response.tool_calls = None, [reply]
        else:
            response.text, response.tool_calls = reply, []
            if reply and answer is not None:
                await answer.finish(reply)
                response.streamed = True  # the caller has the text: not to be sent again
        return response


class _AnswerStream:
    """Hands a streaming caller the growing answer of a JSON-form reply: the raw JSON arriving
    so far is read as partial JSON, and what the answer gained is passed on."""

    def __init__(self, on_text: TextCallback) -> None:
        self.on_text = on_text
        self.raw = ""
        self.sent = ""

    async def feed(self, delta: str) -> None:
        """One piece of the raw reply."""
        self.raw += delta
        await self._send(_partial_answer(self.raw))

    async def finish(self, answer: str) -> None:
        """The whole answer: what was not sent yet goes now."""
        await self._send(answer)

    async def _send(self, answer: str | None) -> None:
        if answer and len(answer) > len(self.sent) and answer.startswith(self.sent):
            delta, self.sent = answer[len(self.sent):], answer
            await self.on_text(delta)


def _partial_answer(raw: str) -> str | None:
    """The answer of a JSON-form reply that may be cut short, as far as it was written."""
    try:
        data = pydantic_core.from_json(raw, allow_partial="trailing-strings")
    except ValueError:
        return None
    reply = data.get("reply") if isinstance(data, dict) else None
    answer = reply.get("answer") if isinstance(reply, dict) else None
    return answer if isinstance(answer, str) else None


def _function(tool: JsonObject) -> JsonObject | None:
    function = tool.get("function") if tool.get("type", "function") == "function" else None
    if not isinstance(function, dict) or not function.get("name"):
        return None
    parameters = function.get("parameters")
    return {"name": str(function["name"]), "description": str(function.get("description") or ""),
            "parameters": parameters if isinstance(parameters, dict) else {"type": "object"}}


def reply_schema(specs: list[JsonObject]) -> JsonObject:
    """The schema of a reply that is one call of one of the tools, or a text answer."""
    choices: list[JsonObject] = [
        {"type": "object", "properties": {"tool": {"const": spec["name"]},
                                          "arguments": spec["parameters"]},
         "required": ["tool", "arguments"], "additionalProperties": False}
        for spec in specs]
    choices.append({"type": "object", "properties": {"answer": {"type": "string"}},
                    "required": ["answer"], "additionalProperties": False})
    return {"type": "object", "properties": {"reply": {"anyOf": choices}},
            "required": ["reply"], "additionalProperties": False}


def json_tool_messages(messages: list[ChatMessage], specs: list[JsonObject]
                       ) -> list[ChatMessage]:
    """The conversation for a server without native tools: the tools described in the system
    message, earlier tool calls as the JSON replies they were, tool results as user messages."""
    lines = ["Reply with one JSON object. To use a tool: "
             '{"reply": {"tool": "<name>", "arguments": {...}}}. To answer the user: '
             '{"reply": {"answer": "<text>"}}. Tools:']
    for spec in specs:
        lines.append(f"- {spec['name']}: {spec['description']} Arguments: "
                     f"{json.dumps(spec['parameters'], separators=(',', ':'))}")
    guide = "\n".join(lines)
    out: list[ChatMessage] = []
    names: dict[str, str] = {}
    if not messages or messages[0].get("role") != "system":
        out.append({"role": "system", "content": guide})
    for index, message in enumerate(messages):
        role = message.get("role")
        if index == 0 and role == "system":
            out.append({"role": "system", "content": f"{message.get('content') or ''}\n\n{guide}"})
        elif role == "assistant" and message.get("tool_calls"):
            out.extend(_calls_as_replies(message, names))
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), "the tool")
            out.append({"role": "user", "content": f"Result of {name}: "
                                                    f"{_text(message.get('content'))}"})
        else:
            out.append(message)
    return out


def _calls_as_replies(message: ChatMessage, names: dict[str, str]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    if message.get("content"):
        out.append({"role": "assistant", "content": json.dumps(
            {"reply": {"answer": _text(message["content"])}})})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        names[str(call.get("id"))] = str(function.get("name"))
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {}
        out.append({"role": "assistant", "content": json.dumps(
            {"reply": {"tool": function.get("name"), "arguments": arguments}})})
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return "" if content is None else str(content)


def read_reply(text: str | None, names: set[str], *, cut: bool = False
               ) -> ToolCall | str | None:
    """A reply in the JSON tool form as a tool call or the answer's text; None when it is not
    such a reply (no JSON at all, or a tool call cut short). An answer cut short by the
    reply-length cap (``cut``) is the text written so far, as a cut plain-text reply is."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return _partial_answer(text or "") if cut else None
    reply = data.get("reply") if isinstance(data, dict) else None
    if not isinstance(reply, dict):
        return None
    if isinstance(reply.get("answer"), str):
        return str(reply["answer"])
    name, arguments = reply.get("tool"), reply.get("arguments")
    if not isinstance(name, str) or name not in names:
        return None
    if not isinstance(arguments, dict):
        arguments = {}
    return ToolCall(f"call_{uuid.uuid4().hex[:12]}", name,
                    json.dumps(arguments, separators=(",", ":")), arguments)
