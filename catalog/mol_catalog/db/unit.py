"""The write style: a unit of work, one transaction per request on one connection.

Writes are Core statements (``insert``/``update``/``delete`` on the tables) executed on
``uow.conn``: SQLAlchemy's bind processing turns JSON and timestamps into what each
backend stores, and nothing tracks objects (no ORM session, no flushes). Reads inside a
unit are ``Prepared`` statements on the same connection (see ``mol_catalog.db.reader``).

Services never commit: an endpoint opens ``db.unit()``, the services add rows and
events to it, and leaving the block commits once. Events are inserted last, right
before COMMIT, so that event ids are allocated in commit order (gap-safe feed):
on Postgres under a transaction-level advisory lock, on SQLite because writers are
serialized by ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.models import Event, utcnow

# Arbitrary constant: the advisory lock that orders outbox inserts on Postgres.
EVENTS_LOCK_KEY = 0x6D6F6C5F657674  # "mol_evt"


@dataclass
class UnitOfWork:
    """One transaction: its connection plus the events to append when it commits."""

    conn: AsyncConnection
    postgres: bool
    events: list[dict[str, Any]] = field(default_factory=list)

    def emit(self, type_: str, *, adapter: str | None = None, version: int | None = None,
             alias: str | None = None, data: dict[str, Any] | None = None) -> None:
        self.events.append({"type": type_, "adapter": adapter, "version": version,
                            "alias": alias, "data": data or {}})

    async def append_events(self) -> None:
        """Insert the emitted events: the last statements before COMMIT."""
        if self.events:
            # Core insert on the table: no ORM bulk-insert bookkeeping per commit. On
            # Postgres the statement takes the advisory lock itself (see _LOCKED_EVENTS).
            now = utcnow()
            rows = [{**e, "created_at": now} for e in self.events]
            await self.conn.execute(_LOCKED_EVENTS if self.postgres else _EVENTS_INSERT,
                                    rows[0] if len(rows) == 1 else rows)
            self.events = []


_EVENTS = cast(Table, Event.__table__)
_EVENT_COLUMNS = ("type", "adapter", "version", "alias", "data", "created_at")
_EVENTS_INSERT = insert(_EVENTS)
# Postgres: INSERT ... SELECT :values WHERE (SELECT pg_advisory_xact_lock(k)) IS NOT NULL.
# The uncorrelated scalar subquery is an InitPlan behind a one-time filter, evaluated before
# the first row is formed and so before nextval() allocates its id: the lock and the insert
# share one round trip and ids come in commit order. Not ``EXISTS (SELECT lock(k))``: the
# planner throws an EXISTS subquery's target list away (only whether a row comes back
# matters to it), so the lock function would never run.
_LOCKED_EVENTS = insert(_EVENTS).from_select(
    list(_EVENT_COLUMNS),
    select(*(bindparam(c, type_=_EVENTS.c[c].type) for c in _EVENT_COLUMNS))
    .where(select(func.pg_advisory_xact_lock(EVENTS_LOCK_KEY)).scalar_subquery()
           .is_not(None)),
    include_defaults=False)
