"""pytest plugin: ``tests/e2e/*.yml`` test cases as pytest items, one item per test case.

Installed as a ``pytest11`` entry point but inert until enabled, so that installing subagents
never makes pytest collect YAML files of unrelated projects. Enable it with ``-p subagents`` on
the command line, or with ``subagents_e2e = true`` in the pytest ini options.

The project is the folder holding ``tests/`` (or ``--subagents-project``). One runner per
project lives on a background event loop for the whole session, so MCP servers start once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from subagents.testing.e2e import CaseResult, Runner
from subagents.testing.fixtures import TestCase, load_file
from subagents.testing.report import failure_text

T = TypeVar("T")
_KEY = pytest.StashKey["_Session"]()


PLUGIN_NAMES = ("subagents", "subagents.testing.pytest_plugin")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``--subagents-project``/``--subagents-strict`` options, ``subagents_e2e`` ini key."""
    group = parser.getgroup("subagents")
    group.addoption("--subagents-project", default=None,
                    help="assistant project for tests/e2e/*.yml (default: the folder "
                         "holding tests/)")
    group.addoption("--subagents-strict", action="store_true", default=False,
                    help="strict matching for conversation tests whose file does not say")
    parser.addini("subagents_e2e", type="bool", default=False,
                  help="collect tests/e2e/*.yml conversation tests (or pass -p subagents)")


def enabled(config: pytest.Config) -> bool:
    """True when the plugin was asked for (``-p subagents`` or ``subagents_e2e = true``)."""
    asked = getattr(config.option, "plugins", None) or []
    return any(name in PLUGIN_NAMES for name in asked) or bool(config.getini("subagents_e2e"))


class _Session:
    """A background event loop with one Runner per project."""

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="subagents-e2e")
        self.thread.start()
        self.runners: dict[Path, Runner] = {}

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 600) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def runner(self, project: Path) -> Runner:
        if project not in self.runners:
            self.runners[project] = self.run(Runner(project, strict=self.strict).__aenter__())
        return self.runners[project]

    def close(self) -> None:
        for runner in self.runners.values():
            self.run(runner.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _session(config: pytest.Config) -> _Session:
    """The background runner session, started on first use."""
    session = config.stash.get(_KEY, None)
    if session is None:
        session = _Session(strict=bool(config.getoption("--subagents-strict")))
        config.stash[_KEY] = session
    return session


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the conversation test session, if one was started."""
    session = config.stash.get(_KEY, None)
    if session is not None:
        session.close()


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    """Collect ``tests/e2e/*.yml`` files as conversation tests when the plugin is enabled."""
    if file_path.suffix in (".yml", ".yaml") and file_path.parent.name == "e2e" and \
            file_path.parent.parent.name == "tests" and enabled(parent.config):
        return E2EFile.from_parent(parent, path=file_path)
    return None


class E2EFailedError(Exception):
    """A conversation test case failed; carries its result for the report."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.case.name)
        self.result = result


class E2EFile(pytest.File):
    """A conversation test file: one item per test case."""

    def collect(self) -> Iterator[pytest.Item]:
        """Load the file and yield one item per test case; a load issue fails collection."""
        project = self.project()
        try:
            shown = str(self.path.relative_to(project))
        except ValueError:
            shown = str(self.path)
        loaded = load_file(self.path, display=shown, root=project)
        if loaded.issues:
            raise self.CollectError("\n".join(i.format() for i in loaded.issues))
        for warning in loaded.warnings:
            self.warn(pytest.PytestWarning(warning.format()))
        for case in loaded.cases:
            yield E2EItem.from_parent(self, name=case.name, case=case, project=project)

    def project(self) -> Path:
        """The assistant project: ``--subagents-project``, else the folder holding ``tests/``."""
        option = self.config.getoption("--subagents-project")
        return Path(option).resolve() if option else self.path.parent.parent.parent.resolve()


class E2EItem(pytest.Item):
    """One conversation test case, run by the session's runner for its project."""

    def __init__(self, *, case: TestCase, project: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.project = project

    def runtest(self) -> None:
        """Run the case; raise E2EFailedError when it fails."""
        session = _session(self.config)
        runner = session.runner(self.project)
        result = session.run(runner.run_case(self.case))
        if not result.passed:
            raise E2EFailedError(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        """The conversation test's failure report, or pytest's default for other errors."""
        if isinstance(excinfo.value, E2EFailedError):
            return failure_text(excinfo.value.result)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """The file, line and name pytest shows for the case."""
        return self.path, (self.case.line or 1) - 1, f"e2e: {self.case.name}"
