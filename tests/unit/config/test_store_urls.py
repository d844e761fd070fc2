"""Store URLs may name secrets as ${ENV_VAR}; a missing variable is a clear ConfigError."""

from __future__ import annotations

import pytest
from subagents.config.endpoints import StoreConfig
from subagents.exceptions import ConfigError
from subagents.stores.factory import tracker_store_from_config


async def test_the_tracker_store_url_reads_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBAGENTS_TEST_DB_DIR", str(tmp_path))
    store = tracker_store_from_config(
        StoreConfig(type="sql", url="sqlite+aiosqlite:///${SUBAGENTS_TEST_DB_DIR}/t.db"),
        tmp_path / "project")
    try:
        await store.load("someone")
    finally:
        await store.close()
    assert (tmp_path / "t.db").exists()


def test_a_missing_variable_in_the_url_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SUBAGENTS_TEST_NOT_SET", raising=False)
    with pytest.raises(ConfigError) as caught:
        tracker_store_from_config(StoreConfig(
            type="sql", url="postgresql+asyncpg://u:${SUBAGENTS_TEST_NOT_SET}@db/x"), tmp_path)
    assert caught.value.code == "config.env_var_missing"
