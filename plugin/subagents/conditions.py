"""The condition language of ``exit_if`` and ``next: - if:`` (Rasa's pypred-style predicates).

Supported: ``=``/``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``is``, ``is not``, ``contains``,
``matches`` (regex search), ``and``, ``or``, ``not``, parentheses, string/number/boolean literals,
``null`` (also ``none``/``undefined``) and references such as ``slots.city`` or ``context.x``.
Keywords are case-insensitive.

Jinja placeholders are values, never condition text: a bare ``{{ slots.city | lower }}`` is an
operand whose value is the (sandboxed) expression's result, and a quoted string holding
placeholders or ``{% ... %}`` blocks, such as ``'{{ slots.pin }}'``, is an operand whose value is
the rendered string. The condition is parsed once; what a slot holds can never change its shape,
so a value like ``' or true or '`` stays a string.

Evaluation never raises: comparing values of incompatible types (``slots.guests > 1`` while
``guests`` is unset) is false, not an error; a numeric string compares as a number. The parser is a
small recursive-descent one; nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Condition", "ConditionSyntaxError", "parse_condition", "referenced_slots"]


class ConditionSyntaxError(ValueError):
    """The condition text does not parse.

    Attributes:
        code: Stable error code, ``condition.syntax``.
        text: The condition as written.
        position: 1-based character position of the problem in ``text`` (None when the
            problem is the condition as a whole, e.g. an empty one).
        reason: What is wrong, without the condition text.
    """

    code = "condition.syntax"

    def __init__(self, reason: str, *, text: str = "", position: int | None = None) -> None:
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{reason}{where} in {text!r}" if text else reason)
        self.reason = reason
        self.text = text
        self.position = position


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<number>-?\d+(?:\.\d+)?(?![\w.]))
      | (?P<jinja>\{\{.*?\}\}|\{%)
      | (?P<op>==|!=|<=|>=|=|<|>|\(|\)|\{|\}|,)
      | (?P<word>[A-Za-z_][\w\-]*(?:\.[A-Za-z_][\w\-]*)*)
    )""",
    re.VERBOSE | re.DOTALL,
)
_KEYWORDS = {"and", "or", "not", "is", "contains", "matches"}
class _Empty:
    """The ``empty`` constant: equal to None, "", and empty collections."""

    def __repr__(self) -> str:
        return "empty"


EMPTY = _Empty()
_CONSTANTS: dict[str, Any] = {"true": True, "false": False, "null": None, "none": None,
                              "undefined": None, "empty": EMPTY}
_COMPARATORS = {"==", "=", "!=", "<", "<=", ">", ">=", "is", "is not", "contains", "matches"}
_EQUALITY = frozenset({"==", "=", "!=", "is", "is not"})


@dataclass(frozen=True)
class _Tok:
    kind: str
    value: Any
    pos: int


@functools.cache
def _jinja_env() -> Any:
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment()


def _unquote(raw: str) -> str:
    body = raw[1:-1]
    return bytes(body, "utf-8").decode("unicode_escape") if "\\" in body else body


def _string_token(raw: str, text: str, start: int) -> _Tok:
    """A quoted string; one holding Jinja becomes a template rendered at evaluation time."""
    value = _unquote(raw)
    if "{{" not in value and "{%" not in value:
        return _Tok("literal", value, start)
    from jinja2 import TemplateSyntaxError

    try:
        return _Tok("template", (_jinja_env().from_string(value), value), start)
    except TemplateSyntaxError as exc:
        raise ConditionSyntaxError(f"the template string does not parse ({exc.message})",
                                   text=text, position=start + 1) from exc


def _jinja_token(raw: str, text: str, start: int) -> _Tok:
    """A bare ``{{ expression }}``: an operand whose value is the expression's result."""
    if raw == "{%":
        raise ConditionSyntaxError("a '{% ... %}' block is only allowed inside a quoted string",
                                   text=text, position=start + 1)
    from jinja2 import TemplateSyntaxError

    source = raw[2:-2].strip()
    try:
        return _Tok("expr", (_jinja_env().compile_expression(source), source), start)
    except TemplateSyntaxError as exc:
        raise ConditionSyntaxError(f"the expression {source!r} does not parse ({exc.message})",
                                   text=text, position=start + 1) from exc


def _word_token(raw: str, start: int) -> _Tok:
    low = raw.lower()
    if low in _KEYWORDS:
        return _Tok("kw", low, start)
    if low in _CONSTANTS:
        return _Tok("literal", _CONSTANTS[low], start)
    return _Tok("ref", raw, start)


def _tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            where = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise ConditionSyntaxError(f"unexpected character {text[where]!r}", text=text,
                                       position=where + 1)
        kind = match.lastgroup or ""
        raw = match.group(kind)
        start = match.start(kind)
        if kind == "string":
            tokens.append(_string_token(raw, text, start))
        elif kind == "number":
            tokens.append(_Tok("literal", float(raw) if "." in raw else int(raw), start))
        elif kind == "jinja":
            tokens.append(_jinja_token(raw, text, start))
        elif kind == "op":
            tokens.append(_Tok("op", raw, start))
        else:
            tokens.append(_word_token(raw, start))
        pos = match.end()
    return tokens


# AST nodes are tuples: ("lit", v) | ("ref", "a.b") | ("expr", compiled, source)
# | ("template", template, source) | ("not", x) | ("and"/"or", x, y) | ("cmp", op, x, y)
Node = tuple[Any, ...]


def _shown(tok: _Tok) -> str:
    return repr(tok.value[1]) if tok.kind in ("expr", "template") else repr(tok.value)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> _Tok | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise ConditionSyntaxError("unexpected end of condition", text=self.text,
                                       position=len(self.text) + 1)
        self.i += 1
        return tok

    def is_kw(self, word: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "kw" and tok.value == word

    def parse(self) -> Node:
        if not self.tokens:
            raise ConditionSyntaxError("empty condition", text=self.text)
        node = self.parse_or()
        tok = self.peek()
        if tok is not None:
            raise ConditionSyntaxError(f"unexpected {_shown(tok)}", text=self.text,
                                       position=tok.pos + 1)
        return node

    def parse_or(self) -> Node:
        node = self.parse_and()
        while self.is_kw("or"):
            self.take()
            node = ("or", node, self.parse_and())
        return node

    def parse_and(self) -> Node:
        node = self.parse_not()
        while self.is_kw("and"):
            self.take()
            node = ("and", node, self.parse_not())
        return node

    def parse_not(self) -> Node:
        if self.is_kw("not"):
            self.take()
            return ("not", self.parse_not())
        return self.parse_cmp()

    def parse_cmp(self) -> Node:
        left = self.parse_operand()
        tok = self.peek()
        op: str | None = None
        if tok is not None and (
                (tok.kind == "op" and tok.value in _COMPARATORS)
                or (tok.kind == "kw" and tok.value in ("is", "contains", "matches"))):
            op = tok.value
        elif tok is not None and tok.kind == "kw" and tok.value == "not":
            # "x not contains y" / "x not matches y"
            nxt = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
            if nxt is not None and nxt.kind == "kw" and nxt.value in ("contains", "matches"):
                self.take()
                self.take()
                return ("not", ("cmp", nxt.value, left, self.parse_operand()))
        if op is None:
            return left
        self.take()
        if op == "is" and self.is_kw("not"):
            self.take()
            op = "is not"
        return ("cmp", op, left, self.parse_operand())

    def parse_set(self) -> tuple[Any, ...]:
        """``{'a' 'b'}`` or ``{'a', 'b'}``: a set literal (for ``contains``)."""
        items: list[Any] = []
        while True:
            tok = self.take()
            if tok.kind == "op" and tok.value == "}":
                return tuple(items)
            if tok.kind == "op" and tok.value == ",":
                continue
            if tok.kind != "literal":
                raise ConditionSyntaxError(f"a set holds literals, not {_shown(tok)}",
                                           text=self.text, position=tok.pos + 1)
            items.append(tok.value)

    def parse_operand(self) -> Node:
        tok = self.take()
        if tok.kind == "op" and tok.value == "(":
            node = self.parse_or()
            close = self.take()
            if close.kind != "op" or close.value != ")":
                raise ConditionSyntaxError("expected ')'", text=self.text,
                                           position=close.pos + 1)
            return node
        if tok.kind == "op" and tok.value == "{":
            return ("lit", self.parse_set())
        if tok.kind == "literal":
            return ("lit", tok.value)
        if tok.kind == "ref":
            return ("ref", tok.value)
        if tok.kind in ("expr", "template"):
            return (tok.kind, *tok.value)
        raise ConditionSyntaxError(f"unexpected {_shown(tok)}", text=self.text,
                                   position=tok.pos + 1)


_NUMERIC = re.compile(r"^\s*-?\d+(\.\d+)?\s*$")


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _NUMERIC.match(value):
        return float(value)
    return None


def _equal(a: Any, b: Any) -> bool:
    if a is EMPTY or b is EMPTY:
        other = b if a is EMPTY else a
        return other is EMPTY or other is None or (isinstance(other, str | list | tuple | dict)
                                                   and not other)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        def as_bool(v: Any) -> Any:
            if isinstance(v, str) and v.strip().lower() in ("true", "false"):
                return v.strip().lower() == "true"
            return v
        return bool(as_bool(a) == as_bool(b))
    na, nb = _as_number(a), _as_number(b)
    if na is not None and nb is not None:
        return na == nb
    return bool(a == b)


def _compare(op: str, a: Any, b: Any) -> bool:
    if op in ("=", "==", "is"):
        return _equal(a, b)
    if op in ("!=", "is not"):
        return not _equal(a, b)
    if op == "contains":
        if isinstance(a, str):
            return b is not None and str(b) in a
        if isinstance(a, list | tuple | set | dict):
            return any(_equal(item, b) for item in a)
        return False
    if op == "matches":
        if a is None or b is None:
            return False
        try:
            return _regex(str(b)).search(str(a)) is not None
        except re.error:
            return False
    na, nb = _as_number(a), _as_number(b)
    if na is None or nb is None:
        if isinstance(a, str) and isinstance(b, str):
            na_s, nb_s = a, b
            return {"<": na_s < nb_s, "<=": na_s <= nb_s, ">": na_s > nb_s,
                    ">=": na_s >= nb_s}[op]
        return False
    return {"<": na < nb, "<=": na <= nb, ">": na > nb, ">=": na >= nb}[op]


_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


def _regex(pattern: str) -> re.Pattern[str]:
    """A pattern, or ``/pattern/flags`` with flags from ``imsx``."""
    match = re.fullmatch(r"/(.*)/([imsx]*)", pattern, re.S)
    if match:
        flags = 0
        for flag in match.group(2):
            flags |= _FLAGS[flag]
        return re.compile(match.group(1), flags)
    return re.compile(pattern)


def _lookup(path: str, context: Mapping[str, Any]) -> Any:
    current: Any = context
    for part in path.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        else:
            return None
    return current


class _RenderFailedError(Exception):
    """A placeholder could not be evaluated; the whole condition is false."""


def _jinja_value(node: Node, context: Mapping[str, Any]) -> Any:
    try:
        if node[0] == "expr":
            return node[1](**context)
        return node[1].render(**context)
    except Exception as exc:  # sandbox violations, undefined attributes, filter errors
        raise _RenderFailedError(str(exc)) from exc


def _eval(node: Node, context: Mapping[str, Any]) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "ref":
        return _lookup(node[1], context)
    if kind in ("expr", "template"):
        return _jinja_value(node, context)
    if kind == "not":
        return not _truthy(_eval(node[1], context))
    if kind == "and":
        return _truthy(_eval(node[1], context)) and _truthy(_eval(node[2], context))
    if kind == "or":
        return _truthy(_eval(node[1], context)) or _truthy(_eval(node[2], context))
    return _compare(node[1], _eval(node[2], context), _eval(node[3], context))


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false")
    return bool(value)


_SLOT_IN_JINJA = re.compile(r"\bslots\.(\w+)")


def _refs(node: Node) -> list[str]:
    if node[0] == "ref":
        return [node[1]]
    if node[0] == "lit":
        return []
    if node[0] in ("expr", "template"):
        return [f"slots.{name}" for name in _SLOT_IN_JINJA.findall(node[2])]
    if node[0] == "cmp":
        return _refs(node[2]) + _refs(node[3])
    return [ref for child in node[1:] for ref in _refs(child)]


@dataclass(frozen=True)
class Condition:
    """A parsed predicate, built by :func:`parse_condition`; ``evaluate`` never raises.

    Attributes:
        text: The condition as written.
    """

    text: str
    _ast: Node | None
    """The parsed form; None for a condition that did not parse, which is always false."""

    @property
    def slot_names(self) -> list[str]:
        """Slot names referenced as ``slots.<name>``, in order, without duplicates."""
        found: list[str] = []
        refs = (_refs(self._ast) if self._ast is not None
                else [f"slots.{name}" for name in _SLOT_IN_JINJA.findall(self.text)])
        for ref in refs:
            if not ref.startswith("slots."):
                continue
            name = ref.split(".")[1]
            if name not in found:
                found.append(name)
        return found

    def compared_values(self, reference: str) -> list[Any]:
        """The literal values ``reference`` (e.g. ``context.previous_flow_name``) is compared
        with for (in)equality (``=``, ``==``, ``!=``, ``is``, ``is not``), in order."""
        found: list[Any] = []
        nodes = [self._ast] if self._ast is not None else []
        while nodes:
            node = nodes.pop(0)
            if node[0] == "cmp" and node[1] in _EQUALITY:
                for ref, other in ((node[2], node[3]), (node[3], node[2])):
                    if ref == ("ref", reference) and other[0] == "lit":
                        found.append(other[1])
            elif node[0] in ("not", "and", "or"):
                nodes += list(node[1:])
        return found

    def evaluate(self, context: Mapping[str, Any]) -> bool:
        """Evaluate against ``context`` (e.g. ``{"slots": {...}, "context": {...}}``).

        Args:
            context: The values references and placeholders read.

        Returns:
            Whether the condition holds; a placeholder that cannot be evaluated makes it false.
        """
        if self._ast is None:
            return False
        try:
            return _truthy(_eval(self._ast, context))
        except _RenderFailedError:
            return False

    def evaluate_slots(self, slots: Mapping[str, Any]) -> bool:
        """Evaluate with only slot values available (``{"slots": slots}``)."""
        return self.evaluate({"slots": dict(slots)})


def referenced_slots(conditions: Iterable[Condition]) -> list[str]:
    """Slot names referenced by any of ``conditions``, in order, without duplicates."""
    names: list[str] = []
    for cond in conditions:
        names += [n for n in cond.slot_names if n not in names]
    return names


@functools.lru_cache(maxsize=1024)
def parse_condition(text: str) -> Condition:
    """Parse a condition once, into an object evaluated many times.

    Args:
        text: The condition, e.g. ``slots.guests > 2 and '{{ slots.city | lower }}' = 'rome'``.

    Returns:
        The parsed condition.

    Raises:
        ConditionSyntaxError: The text does not parse; ``position`` points at the problem.
    """
    if not isinstance(text, str):
        raise ConditionSyntaxError(f"a condition must be a string, got {type(text).__name__}")
    return Condition(text, _Parser(text).parse())
