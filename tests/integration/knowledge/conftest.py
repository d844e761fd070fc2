"""qdrant-client's local mode, before its first on-disk collection, asks SQLite how it was
built through a connection it leaves open (``with sqlite3.connect(...)`` commits, it does not
close), which Python 3.13 reports as a ``ResourceWarning`` - an error here. The answer is
worked out once per process and kept on the class; working it out first, with the connection
closed, leaves the library nothing to open."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest


@pytest.fixture(autouse=True, scope="session")
def _qdrant_local_thread_check() -> None:
    try:
        from qdrant_client.local.persistence import CollectionPersistence
    except ImportError:
        return
    if CollectionPersistence.CHECK_SAME_THREAD is None:
        with contextlib.closing(sqlite3.connect(":memory:")) as conn:
            (option,) = conn.execute("select * from pragma_compile_options "
                                     "where compile_options like 'THREADSAFE=%'").fetchone()
        CollectionPersistence.CHECK_SAME_THREAD = option != "THREADSAFE=1"
