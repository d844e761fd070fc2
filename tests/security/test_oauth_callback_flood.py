"""Issue 30, item 7: unauthenticated OAuth callbacks with made-up states cost the server nothing
worth having: with a Redis lock store (where callbacks are handed between workers), a flood of
them neither opens Redis connections nor waits for an answer from other workers, so real
sign-ins are not starved."""

from __future__ import annotations

import asyncio
import secrets
from urllib.parse import urlparse

import anyio
import pytest
from subagents.testing import FakeModelServer

from tests.security.served import served, served_project
from tests.shared_workers import REDIS

FLOOD = 200


async def _connections(redis, db: int) -> int:
    """Clients connected to Redis with database ``db`` selected."""
    listed = await redis.client_list()
    return sum(1 for client in listed if str(client.get("db")) == str(db))


@pytest.mark.redis
@pytest.mark.skipif(not REDIS, reason="needs SUBAGENTS_TEST_REDIS_URL")
async def test_callbacks_with_unknown_states_cost_no_redis_connections(tmp_path, tools_url):
    from redis.asyncio import Redis

    db = int(urlparse(REDIS).path.strip("/") or 0)
    async with FakeModelServer({}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, endpoints_extra=f"""
            lock_store: {{type: redis, url: "{REDIS}"}}
            """)
        redis = Redis.from_url(REDIS)
        try:
            async with served(project) as (_, client):
                before = await _connections(redis, db)
                peak = before
                done = asyncio.Event()

                async def watch() -> None:
                    nonlocal peak
                    while not done.is_set():
                        peak = max(peak, await _connections(redis, db))
                        await asyncio.sleep(0.02)

                watcher = asyncio.ensure_future(watch())
                with anyio.fail_after(120):
                    pages = await asyncio.gather(*(client.get("/oauth/callback", params={
                        "state": secrets.token_urlsafe(32), "code": "stolen"})
                        for _ in range(FLOOD)))
                done.set()
                await watcher
        finally:
            await redis.aclose()
    assert {page.status_code for page in pages} == {400}
    assert all("expired" in page.text for page in pages)
    assert peak - before <= 20, f"{peak - before} Redis connections opened by the flood"
