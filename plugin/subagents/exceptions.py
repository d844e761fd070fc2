"""Errors raised by subagents, in two families.

1. **Errors the model should see.** A tool that fails, times out, gets invalid arguments or is not
   available does not end a run: the failure becomes an error tool result
   (:class:`ToolInvocationError` and its subclasses) that the model reads and can recover from.
   Only ``raise_on_tool_invocation_failure: true`` turns them into fatal errors.
2. **Errors that end a run or refuse a configuration.** Everything else derives from
   :class:`SubagentsError` and carries a stable ``code`` (for example
   ``agent.validation.mandatory.fields_missing``) that tests and users match on, never the text.

:class:`ProjectInvalidError` bundles every :class:`ConfigIssue` found while loading a project, so a
user sees all problems at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in a project file."""

    code: str
    """Stable error code, e.g. ``agent.validation.mandatory.fields_missing``."""
    message: str
    """What is wrong, in one sentence."""
    file: str | None = None
    """The file, relative to the project folder when possible."""
    line: int | None = None
    """1-based line of the offending key, when known."""
    key: str | None = None
    """Dotted path of the offending key, e.g. ``configuration.tool_timeout``."""
    hint: str | None = None
    """One line telling the user how to fix it."""
    severity: str = "error"
    """``error`` (loading fails) or ``warning`` (reported, loading goes on)."""

    def format(self) -> str:
        """``file:line: severity [code] key: message (fix: hint)``."""
        where = self.file or "<project>"
        if self.line is not None:
            where += f":{self.line}"
        text = f"{where}: {self.severity} [{self.code}]"
        if self.key:
            text += f" {self.key}:"
        text += f" {self.message}"
        if self.hint:
            text += f" (fix: {self.hint})"
        return text


class SubagentsError(Exception):
    """Base class of errors that end a run or refuse a configuration."""

    code: str = "subagents.error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ConfigError(SubagentsError):
    """A single configuration problem found outside project loading (e.g. at runtime)."""

    code = "config.invalid"

    def __init__(self, issue: ConfigIssue) -> None:
        super().__init__(issue.format(), code=issue.code)
        self.issue = issue


class ProjectInvalidError(SubagentsError):
    """Loading a project found at least one error; ``issues`` lists every problem."""

    code = "project.invalid"

    def __init__(self, issues: list[ConfigIssue], project_dir: Path | None = None) -> None:
        errors = [i for i in issues if i.severity == "error"]
        head = f"{len(errors)} error(s) in project {project_dir or ''}".rstrip()
        super().__init__(head + ":\n" + "\n".join(i.format() for i in issues))
        self.issues = issues

    @property
    def codes(self) -> list[str]:
        """The codes of the errors (not warnings)."""
        return [i.code for i in self.issues if i.severity == "error"]


class LLMError(SubagentsError):
    """The model endpoint failed: HTTP error, timeout, dropped connection, bad credentials."""

    code = "llm.request_failed"


class MCPConnectionError(SubagentsError):
    """An MCP server could not be reached (after retries)."""

    code = "mcp.connection_failed"


class AgentInitializationError(SubagentsError):
    """An agent could not be built or connected at startup."""

    code = "agent.initialization_failed"


class ToolInvocationError(Exception):
    """A tool call failed in a way the model should be told about (an error tool result)."""

    code = "tool.failed"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ToolTimeoutError(ToolInvocationError):
    """A tool did not finish within its timeout."""

    code = "tool.timeout"


class ToolArgumentsError(ToolInvocationError):
    """The model's arguments do not match the tool's input schema; the tool did not run."""

    code = "tool.arguments_invalid"


class ToolNotAvailableError(ToolInvocationError):
    """The tool is not available to this agent (filtered out, or its pre-call hook failed)."""

    code = "tool.not_available"
