"""SQL tracker store (SQLAlchemy async): SQLite by default, PostgreSQL with the extra."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .base import ConversationRecord, TrackerStore


class SQLTrackerStore(TrackerStore):
    """Tables ``subagents_conversations`` (stack, event count) and ``subagents_events``.

    A turn is one transaction: its events are inserted and the conversation row updated
    together, so a crash mid-turn leaves the previous turn's state.
    """

    def __init__(self, url: str) -> None:
        from sqlalchemy import (
            Column,
            Float,
            Integer,
            MetaData,
            String,
            Table,
            Text,
            UniqueConstraint,
        )
        from sqlalchemy.ext.asyncio import create_async_engine

        self.url = url
        if url.startswith("sqlite"):
            path = url.split(":///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.engine = create_async_engine(url)
        self.meta = MetaData()
        self.conversations = Table(
            "subagents_conversations", self.meta,
            Column("sender_id", String(255), primary_key=True),
            Column("stack", Text, nullable=False),
            Column("event_count", Integer, nullable=False),
            Column("updated_at", Float, nullable=False))
        self.events = Table(
            "subagents_events", self.meta,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("sender_id", String(255), nullable=False, index=True),
            Column("seq", Integer, nullable=False),
            Column("data", Text, nullable=False),
            UniqueConstraint("sender_id", "seq"))
        self._ready = False

    async def _init(self) -> None:
        if not self._ready:
            async with self.engine.begin() as conn:
                await conn.run_sync(self.meta.create_all)
            self._ready = True

    async def load(self, sender_id: str) -> ConversationRecord:
        from sqlalchemy import select

        await self._init()
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(self.conversations.c.stack).where(
                self.conversations.c.sender_id == sender_id))).first()
            if row is None:
                return ConversationRecord(sender_id)
            rows = await conn.execute(select(self.events.c.data).where(
                self.events.c.sender_id == sender_id).order_by(self.events.c.seq))
            events = [json.loads(r[0]) for r in rows]
        return ConversationRecord(sender_id, events, json.loads(row[0]))

    async def save_turn(self, sender_id: str, new_events: list[dict[str, Any]],
                        stack: list[dict[str, Any]], previous_count: int) -> None:
        from sqlalchemy import insert, select, update

        await self._init()
        count = previous_count + len(new_events)
        async with self.engine.begin() as conn:
            existing = (await conn.execute(select(self.conversations.c.event_count).where(
                self.conversations.c.sender_id == sender_id))).first()
            stored = existing[0] if existing else 0
            if stored != previous_count:
                raise RuntimeError(f"conversation {sender_id!r} changed while a turn ran "
                                   f"({stored} events stored, {previous_count} expected)")
            if new_events:
                await conn.execute(insert(self.events), [
                    {"sender_id": sender_id, "seq": previous_count + i,
                     "data": json.dumps(e, default=str)} for i, e in enumerate(new_events)])
            values = {"stack": json.dumps(stack, default=str), "event_count": count,
                      "updated_at": time.time()}
            if existing:
                await conn.execute(update(self.conversations).where(
                    self.conversations.c.sender_id == sender_id).values(**values))
            else:
                await conn.execute(insert(self.conversations).values(sender_id=sender_id,
                                                                     **values))

    async def senders(self) -> list[str]:
        from sqlalchemy import select

        await self._init()
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(self.conversations.c.sender_id))
            return [r[0] for r in rows]

    async def close(self) -> None:
        await self.engine.dispose()
