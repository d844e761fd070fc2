"""A failing test is reported by name even when Python's AST constructor fails spuriously
(python/cpython#106905), which it can on the Python 3.11.7 this suite's CI runs on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.traceback_guard import AFFECTED

ROOT = Path(__file__).resolve().parents[3]

# what the CPython bug does: ast.parse fails while pytest formats a failure
BROKEN_AST = textwrap.dedent("""
    import ast

    import _pytest._code.source as source

    def broken_parse(*args, **kwargs):
        raise SystemError("AST constructor recursion depth mismatch (before=78, after=133)")

    def pytest_runtest_makereport(item, call):
        if call.excinfo is not None:
            source.ast = type("Ast", (), {"parse": staticmethod(broken_parse),
                                         "__getattr__": lambda self, n: getattr(ast, n)})()
""")


@pytest.mark.skipif(not AFFECTED, reason="this Python's AST constructor has the fix")
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_failure_names_the_test_when_the_ast_constructor_breaks(tmp_path, workers):
    (tmp_path / "conftest.py").write_text(BROKEN_AST)
    (tmp_path / "test_sample.py").write_text(
        "def test_sums():\n    assert 1 + 1 == 3\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.traceback_guard", "-p", "no:cacheprovider",
         "-q", *workers, str(tmp_path)], capture_output=True, text=True, timeout=120,
        cwd=ROOT, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert "FAILED" in done.stdout
    assert "test_sample.py::test_sums" in done.stdout
    assert "assert (1 + 1) == 3" in done.stdout
