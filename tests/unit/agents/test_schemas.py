"""Tool schema normalisation and the OpenAI tool shape."""

from __future__ import annotations

import pytest
from subagents.agents.schemas import AgentToolSchema, CustomToolSchema


def test_parameters_are_closed_at_the_top_level_and_never_narrowed_below():
    schema = AgentToolSchema(name="t", parameters={"type": "object", "properties": {
        "a": {}, "b": {"type": "object", "properties": {"c": {}}},
        "d": {"enum": ["x", "y"]}, "e": {"anyOf": [{"type": "string"}, {"type": "null"}]}}})
    params = schema.parameters
    assert params["additionalProperties"] is False
    assert params["required"] == []
    assert params["properties"]["a"] == {}  # untyped stays untyped: it accepts anything
    assert params["properties"]["b"] == {"type": "object", "properties": {"c": {}}}
    assert params["properties"]["d"] == {"enum": ["x", "y"]}
    assert "type" not in params["properties"]["e"]
    assert AgentToolSchema(name="t").parameters == {}


def test_openai_format_round_trip_and_rejections():
    tool = {"type": "function", "function": {"name": "f", "description": "d",
                                             "parameters": {"type": "object"}, "strict": True}}
    schema = AgentToolSchema.from_openai_json_format(tool)
    assert (schema.name, schema.strict, schema.description) == ("f", True, "d")
    assert schema.to_openai()["function"]["name"] == "f"
    with pytest.raises(ValueError, match="OpenAI format"):
        AgentToolSchema.from_openai_json_format({"name": "f", "description": "d",
                                                 "input_schema": {}})
    with pytest.raises(ValueError, match="'name' and 'description'"):
        AgentToolSchema.from_openai_json_format({"type": "function", "function": {"name": "f"}})
    with pytest.raises(ValueError, match="tool_executor"):
        CustomToolSchema.from_dict(tool)


def test_argument_validation_uses_each_tools_own_schema():
    from subagents.tools.base import Tool
    from subagents.tools.executor import validate_arguments

    async def run(arguments, ctx):
        raise AssertionError("not called")

    def tool(name, props, required):
        schema = AgentToolSchema(name=name, parameters={"type": "object", "properties": props,
                                                        "required": required})
        return Tool(schema=schema, run=run, source="custom")

    for _ in range(200):  # fresh schema objects each time: ids get reused by the allocator
        ids = tool("a", {"id": {"type": "string"}}, ["id"])
        amount = tool("b", {"amount": {"type": "number"}}, ["amount"])
        assert validate_arguments(ids, {"id": "A1"}) == {"id": "A1"}
        assert validate_arguments(amount, {"amount": 5}) == {"amount": 5}


def test_arguments_a_schema_cannot_reject_skip_the_validator_and_others_still_check():
    from subagents.exceptions import ToolArgumentsError
    from subagents.tools.base import Tool
    from subagents.tools.executor import _validator_for, validate_arguments

    async def run(arguments, ctx):
        raise AssertionError("not called")

    def tool(parameters):
        return Tool(schema=AgentToolSchema(name="t", parameters=parameters), run=run,
                    source="custom")

    _validator_for.cache_clear()
    no_arguments = tool({"type": "object", "properties": {}})  # closed by the schema model
    assert validate_arguments(no_arguments, {}) == {}
    for parameters in ({"type": "object", "additionalProperties": True},
                       {"type": "object", "properties": {}, "required": [],
                        "additionalProperties": True, "description": "none"}):
        assert validate_arguments(tool(parameters), {"extra": 1}) == {"extra": 1}
    assert _validator_for.cache_info().misses == 0
    with pytest.raises(ToolArgumentsError):
        validate_arguments(no_arguments, {"extra": 1})
    needs = tool({"type": "object", "properties": {}, "required": ["id"]})
    with pytest.raises(ToolArgumentsError):
        validate_arguments(needs, {})
    typed_extra = tool({"type": "object", "additionalProperties": {"type": "string"}})
    with pytest.raises(ToolArgumentsError):
        validate_arguments(typed_extra, {"extra": 1})
    assert _validator_for.cache_info().misses == 3
