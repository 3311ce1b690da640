"""The change feed. Ids are allocated at commit (see db.UnitOfWork), so ``after=N``
never skips an event that commits later with a smaller id."""

from __future__ import annotations

from typing import Any

from mol_catalog.auth import Principal
from mol_catalog.db import ReadConn, datetime_value, json_text
from mol_catalog.events import repository


async def feed(conn: ReadConn, who: Principal, after: int,
               limit: int) -> tuple[list[dict[str, Any]], int]:
    rows = await repository.after(conn, after, limit)
    last = int(rows[-1][0]) if rows else after
    items = []
    for event_id, type_, adapter, version, alias, data, created_at in rows:
        if adapter is not None and not who.can_read(adapter.split("/", 1)[0]):
            continue  # other tenants' events; `last` still moves past them
        items.append({"id": event_id, "type": type_, "adapter": adapter, "version": version,
                      "alias": alias, "data": json_text(data, "{}"),
                      "created_at": datetime_value(created_at)})
    return items, last


async def latest_id(conn: ReadConn) -> int:
    """Where a feed that shows only what happens from now on starts (its ``after``)."""
    return await repository.latest_id(conn)
