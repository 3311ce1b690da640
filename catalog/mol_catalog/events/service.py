"""The change feed. Ids are allocated at commit (see db.UnitOfWork), so ``after=N``
never skips an event that commits later with a smaller id."""

from __future__ import annotations

from typing import Any

from mol_catalog.auth import Principal
from mol_catalog.db import UnitOfWork
from mol_catalog.events import repository
from mol_catalog.util import iso


async def feed(uow: UnitOfWork, who: Principal, after: int,
               limit: int) -> tuple[list[dict[str, Any]], int]:
    rows = await repository.after(uow.session, after, limit)
    last = rows[-1].id if rows else after
    items = []
    for e in rows:
        if e.adapter is not None and not who.can_read(e.adapter.split("/", 1)[0]):
            continue  # other tenants' events; `last` still moves past them
        items.append({"id": e.id, "type": e.type, "adapter": e.adapter, "version": e.version,
                      "alias": e.alias, "data": e.data, "created_at": iso(e.created_at)})
    return items, last
