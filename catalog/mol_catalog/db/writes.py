"""Write helpers that differ by backend: the dialect's INSERT (for ``ON CONFLICT``) and
the claim of a batch id that makes a report count once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection


def dialect_insert(conn: AsyncConnection) -> Any:
    """The ``insert`` of the connection's backend: both know ``on_conflict_do_nothing``
    and ``on_conflict_do_update``, the generic one does not."""
    return pg_insert if conn.dialect.name == "postgresql" else sqlite_insert


async def claim_batch(conn: AsyncConnection, table: Table, batch_id: str,
                      now: datetime) -> bool:
    """Record ``batch_id`` in ``table`` (columns ``batch_id``, ``received_at``); False
    when it was recorded before. A concurrent twin waits for the first to commit, then
    sees it, so a batch claimed in the transaction that applies it is applied once."""
    stmt = (dialect_insert(conn)(table).values(batch_id=batch_id, received_at=now)
            .on_conflict_do_nothing(index_elements=["batch_id"])
            .returning(table.c.batch_id))
    return (await conn.execute(stmt)).first() is not None
