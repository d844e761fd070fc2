"""``@tool``: a typed Python function becomes a custom tool; custom tools as :class:`Tool`.

The schema comes from the signature (pydantic) and the docstring's first paragraph. A parameter
annotated ``AgentToolContext`` receives the tool context and is hidden from the model. Decorated
methods of an agent subclass are picked up by ``get_custom_tool_definitions()``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from pydantic import BaseModel, create_model

from subagents.config.sub_agent import ToolSettings
from subagents.tools.base import CallContext, Tool
from subagents.types import AgentToolContext, AgentToolResult, CustomToolSchema, JsonObject

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__subagents_tool__"


class ToolSpec:
    """What ``@tool`` learned about a function: name, description, argument model."""

    def __init__(self, fn: Callable[..., Any], name: str | None, description: str | None,
                 read_only: bool) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc = inspect.getdoc(fn) or ""
        self.description = description or doc.split("\n\n")[0].replace("\n", " ").strip() or \
            self.name
        self.read_only = read_only
        self.signature = inspect.signature(fn)
        self.context_param = next((p.name for p in self.signature.parameters.values()
                                   if p.annotation in (AgentToolContext, "AgentToolContext")),
                                  None)
        fields: dict[str, Any] = {}
        for param in self.signature.parameters.values():
            if param.name in ("self", self.context_param):
                continue
            annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (annotation, default)
        self.model: type[BaseModel] = create_model(f"{self.name}_arguments", **fields)

    def definition(self, owner: Any = None) -> JsonObject:
        """The OpenAI-format tool dict with its ``tool_executor`` (bound to ``owner``)."""
        schema = self.model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)

        async def executor(arguments: JsonObject, context: AgentToolContext
                           ) -> AgentToolResult:
            parsed = self.model.model_validate(arguments)
            kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
            if self.context_param:
                kwargs[self.context_param] = context
            fn = self.fn.__get__(owner) if owner is not None else self.fn
            value = fn(**kwargs)
            if inspect.isawaitable(value):
                value = await value
            if isinstance(value, AgentToolResult):
                return value
            text = value if isinstance(value, str) else json.dumps(
                value.model_dump(mode="json") if isinstance(value, BaseModel) else value,
                ensure_ascii=False, default=str)
            return AgentToolResult(tool_name=self.name, result=text)

        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": schema},
                "tool_executor": executor, "read_only": self.read_only}


@overload
def tool(fn: F) -> F: ...
@overload
def tool(*, name: str | None = None, description: str | None = None,
         read_only: bool = False) -> Callable[[F], F]: ...


def tool(fn: Any = None, *, name: str | None = None, description: str | None = None,
         read_only: bool = False) -> Any:
    """Mark a function (or an agent method) as a custom tool."""

    def mark(func: Any) -> Any:
        setattr(func, _MARK, ToolSpec(func, name, description, read_only))
        return func

    return mark(fn) if fn is not None else mark


def discover_python_tools(agent: Any) -> list[JsonObject]:
    """Definitions of the agent's ``@tool`` methods and of functions in ``python_tools``."""
    found: list[JsonObject] = []
    for attr in dir(type(agent)):
        member = getattr(type(agent), attr, None)
        spec = getattr(member, _MARK, None)
        if isinstance(spec, ToolSpec):
            found.append(spec.definition(owner=agent))
    for fn in getattr(agent, "python_tools", []) or []:
        spec = getattr(fn, _MARK, None) or ToolSpec(fn, None, None, False)
        found.append(spec.definition())
    return found


MetadataHook = Callable[[JsonObject], Awaitable[JsonObject]]


def custom_tool(custom: CustomToolSchema, settings: ToolSettings | None,
                metadata_hook: MetadataHook | None, agent_name: str) -> Tool:
    """A custom tool as a :class:`Tool`: ``metadata_hook`` (when given) adds call metadata
    (credentials) to the tool context, which the model never sees."""
    read_only = custom.read_only
    if settings is not None and settings.read_only is not None:
        read_only = settings.read_only

    executor: Callable[..., Any] = custom.tool_executor

    async def finish(pending: Awaitable[Any]) -> AgentToolResult:
        return _as_result(custom.tool_name, await pending)

    def call(arguments: JsonObject, metadata: JsonObject) -> Any:
        result = executor(dict(arguments), AgentToolContext(metadata=metadata))
        if type(result) is AgentToolResult:
            return result
        return finish(result) if inspect.isawaitable(result) else \
            _as_result(custom.tool_name, result)

    async def run_with_hook(arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
        assert metadata_hook is not None
        hook_ctx = {"sender_id": ctx.agent_input.recipient_id, "server_name": None,
                    "tool_name": custom.tool_name, "agent_id": agent_name}
        try:
            extra = await metadata_hook(hook_ctx)
        except Exception as exc:  # noqa: BLE001 - reported to the model
            return AgentToolResult(tool_name=custom.tool_name, is_error=True,
                                   error_message=f"the call-metadata hook failed for "
                                                 f"{custom.tool_name!r}: {exc}")
        outcome = call(arguments, {**ctx.tool_context.metadata, **(extra or {})})
        result: AgentToolResult = await outcome if inspect.isawaitable(outcome) else outcome
        return result

    def run(arguments: JsonObject, ctx: CallContext) -> Any:
        # without a hook a synchronous executor's result comes back as is, not as a coroutine:
        # the call then needs no timeout (nothing to interrupt) and no event-loop machinery
        if metadata_hook is not None:
            return run_with_hook(arguments, ctx)
        return call(arguments, ctx.tool_context.metadata)

    return Tool(schema=custom.tool_definition, run=run, source="custom",
                read_only=read_only, timeout=settings.timeout if settings else None)


def _as_result(tool_name: str, value: Any) -> AgentToolResult:
    if isinstance(value, AgentToolResult):
        return value
    if isinstance(value, str):
        return AgentToolResult(tool_name=tool_name, result=value)
    raise TypeError(f"tool {tool_name!r} returned {type(value).__name__}, not an AgentToolResult")
