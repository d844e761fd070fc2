"""Response templates: placeholders found for checks, filled the same way at run time."""

from __future__ import annotations

import pytest
from subagents.templating import (
    TemplateParseError,
    format_placeholders,
    jinja_variables,
    render_format,
    render_jinja,
)


def test_format_placeholders_skip_literal_braces():
    assert format_placeholders("{a} and {{b}} and { c } and {a}") == ["a", "c"]


@pytest.mark.parametrize(("text", "expected"), [
    ("Booked in {city}.", "Booked in Rome."),
    ("{city} {unknown} {unset}", "Rome {unknown} None"),
    ("{{city}} is literal", "{city} is literal"),
    ("{count} guests", "3 guests"),
])
def test_render_format(text, expected):
    assert render_format(text, {"city": "Rome", "unset": None, "count": 3}) == expected


def test_jinja_variables_are_the_top_level_names_read():
    text = "{% if vip %}{{ name | title }}{% endif %} {{ context.canceled_name }}"
    assert jinja_variables(text) == {"vip", "name", "context"}


def test_a_jinja_syntax_error_has_a_code_and_line():
    with pytest.raises(TemplateParseError) as info:
        jinja_variables("line one\n{% if x %}never closed")
    assert info.value.code == "template.syntax"
    assert info.value.line == 2


def test_render_jinja_keeps_a_failing_template_as_written():
    escape = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    assert render_jinja(escape, {}) == escape
    assert render_jinja("{{ a }}-{{ missing }}", {"a": 1}) == "1-"
