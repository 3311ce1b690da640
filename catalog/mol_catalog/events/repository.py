"""SQL for the outbox (its inserts are the unit of work's, see ``mol_catalog.db.unit``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, Integer, bindparam, func, select

from mol_catalog.db import Prepared, ReadConn
from mol_catalog.models import Event

EVENT_COLUMNS = ("id", "type", "adapter", "version", "alias", "data", "created_at")
_AFTER = Prepared(select(*(Event.__table__.c[c] for c in EVENT_COLUMNS))
                  .where(Event.id > bindparam("after", type_=BigInteger))
                  .order_by(Event.id).limit(bindparam("limit", type_=Integer)))

_LATEST = Prepared(select(func.max(Event.id)))


async def after(conn: ReadConn, last_id: int, limit: int) -> list[Sequence[Any]]:
    """Rows of EVENT_COLUMNS with id > ``last_id``, in id order."""
    return await _AFTER.all(conn, after=last_id, limit=limit)


async def latest_id(conn: ReadConn) -> int:
    """The newest event's id (0 when there is none): the primary key's last entry."""
    rows = await _LATEST.all(conn)
    return int(rows[0][0] or 0)
