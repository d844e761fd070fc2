"""A pytest plugin of the suite's own: failures are reported even on Pythons whose AST
constructor can fail spuriously.

CPython 3.11.0-3.11.7 and 3.12.0 sometimes raise ``SystemError: AST constructor recursion depth
mismatch`` from ``ast.parse`` (python/cpython#106905). Pytest parses a failing test's source to
print its long traceback, so on those Pythons a failure could end an xdist worker with an
INTERNALERROR that names no test. There, the suite prints Python's own traceback format, which
reads no source through the AST (assertion explanations are still in the message).
"""

from __future__ import annotations

import sys

import pytest

AFFECTED = sys.version_info < (3, 11, 8) or sys.version_info[:3] == (3, 12, 0)


def pytest_configure(config: pytest.Config) -> None:
    """Use the native traceback format on affected Pythons unless ``--tb`` says otherwise."""
    if AFFECTED and config.option.tbstyle == "auto":
        config.option.tbstyle = "native"
