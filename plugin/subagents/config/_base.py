"""Shared pieces of the config models: strict base model, ${ENV} secrets, pydantic error mapping."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from subagents._yaml import Loc, YamlDoc
from subagents.exceptions import ConfigError, ConfigIssue

ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_ENV_ANY = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SECRET_CODE = "validation.sensitive_key_string_value_must_be_set_as_env_var"
_SECRET_NAME = re.compile(r"(key|token|secret|password|authorization|cookie|credential)", re.I)


class StrictModel(BaseModel):
    """A config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def looks_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def is_env_ref(value: Any) -> bool:
    return isinstance(value, str) and bool(ENV_REF.match(value.strip()))


def check_secret(value: str | None, what: str) -> str | None:
    """Pydantic validator body: a secret must be written as ``${ENV_VAR}``."""
    if value is None or is_env_ref(value):
        return value
    raise ValueError(f"{SECRET_CODE}: {what} must be written as ${{ENV_VAR}}, not as a "
                     "literal value; put the secret in an environment variable")


def resolve_env(value: str, *, what: str = "value") -> str:
    """Replace every ``${VAR}`` in ``value``; a missing variable is a clear :class:`ConfigError`."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigError(ConfigIssue(
                "config.env_var_missing",
                f"environment variable {name} (used by {what}) is not set",
                hint=f"export {name}=... before starting"))
        return os.environ[name]

    return _ENV_ANY.sub(sub, value)


CodeFor = Callable[[Any], str]


def pydantic_issues(doc: YamlDoc, exc: ValidationError, code_for: CodeFor,
                    base: Loc = ()) -> list[ConfigIssue]:
    """Turn every pydantic error into a ConfigIssue with file, line and key."""
    issues = []
    for err in exc.errors():
        loc = (*base, *[p for p in err["loc"] if not _is_union_tag(p)])
        msg = str(err["msg"])
        code = code_for(err)
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if msg.startswith(SECRET_CODE + ": "):
            code, msg = SECRET_CODE, msg[len(SECRET_CODE) + 2:]
        hint = None
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}"
            hint = _spelling_hint(str(loc[-1]))
        elif err["type"] == "missing":
            msg = f"required key {loc[-1]!r} is missing"
            hint = f"add {loc[-1]!r}"
        issues.append(doc.issue(code, msg, loc, hint=hint))
    return issues


def _known_keys() -> set[str]:
    """Every key some config section takes (the fields of every StrictModel)."""
    keys: set[str] = set()
    todo: list[type[BaseModel]] = [StrictModel]
    while todo:
        model = todo.pop()
        todo += model.__subclasses__()
        for name, info in model.model_fields.items():
            keys.add(info.alias or name)
    return keys


def _spelling_hint(key: str) -> str:
    """``did you mean 'timeout'?`` for a misspelled key, else the general advice."""
    import difflib

    close = difflib.get_close_matches(key, sorted(_known_keys()), n=1, cutoff=0.8)
    return f"did you mean {close[0]!r}?" if close else "remove it or check its spelling"


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part.startswith("function-"))
