"""Console and JUnit output of a conversation test run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO
from xml.etree import ElementTree as ET

from subagents.testing.e2e import CaseResult


def case_line(result: CaseResult) -> str:
    """``PASSED``/``FAILED``, file, name and duration of one test case."""
    mark = "PASSED" if result.passed else "FAILED"
    return f"{mark} {result.case.file}::{result.case.name} ({result.duration:.2f}s)"


def failure_text(result: CaseResult) -> str:
    """Everything about a failed case: what broke, warnings, notes, the conversation."""
    lines = [f"__ {result.case.name} ({result.case.file}:{result.case.line}) __"]
    lines += [f"  {failure}" for failure in result.failures if failure]
    lines += [f"  warning: {warning}" for warning in result.warnings]
    lines += [f"  note: {note}" for note in result.notes]
    if result.transcript:
        lines.append("  conversation so far:")
        lines += [f"    {line}" for line in result.transcript]
    return "\n".join(lines)


def summary(results: list[CaseResult]) -> str:
    """The last line of a run: ``N passed, M failed``."""
    passed = sum(1 for r in results if r.passed)
    return f"{passed} passed, {len(results) - passed} failed"


def pass_rates(results: list[CaseResult]) -> str:
    """One line per test case run more than once (``--repeat``): passed runs, all runs and the
    pass rate; empty when every case ran once."""
    runs: dict[tuple[str, str], list[bool]] = {}
    for result in results:
        runs.setdefault((result.case.file, result.case.name), []).append(result.passed)
    if all(len(outcomes) < 2 for outcomes in runs.values()):
        return ""
    lines = ["pass rates:"]
    for (file, name), outcomes in runs.items():
        passed = sum(outcomes)
        lines.append(f"  {name} ({file}): {passed}/{len(outcomes)} passed "
                     f"({100 * passed / len(outcomes):.0f}%)")
    return "\n".join(lines) + "\n"


def write_junit(results: list[CaseResult], path: Path) -> None:
    """Write the results as JUnit XML (one ``testcase`` per test case)."""
    suite = ET.Element("testsuite", name="subagents-e2e", tests=str(len(results)),
                       failures=str(sum(1 for r in results if not r.passed)),
                       time=f"{sum(r.duration for r in results):.3f}")
    for result in results:
        case = ET.SubElement(suite, "testcase", classname=result.case.file,
                             name=result.case.name, time=f"{result.duration:.3f}")
        if not result.passed:
            failure = ET.SubElement(case, "failure", message=result.failures[0][:200])
            failure.text = failure_text(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


class Progress:
    """A one-line progress bar on a terminal; nothing otherwise."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.stream, self.done = total, stream, 0
        self.enabled = stream.isatty() and total > 5

    def tick(self) -> None:
        """Count one finished case and redraw the bar when it is shown."""
        self.done += 1
        if self.enabled:
            width = 30
            filled = int(width * self.done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        """Erase the bar."""
        if self.enabled:
            self.stream.write("\r" + " " * 50 + "\r")
            self.stream.flush()
