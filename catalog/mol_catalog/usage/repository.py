"""SQL for usage: the daily roll-ups and the batch ids counted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    Table,
    bindparam,
    case,
    delete,
    exists,
    func,
    null,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, dialect_insert
from mol_catalog.db import claim_batch as claim_batch_id
from mol_catalog.models import Adapter, Namespace, UsageBatch, Version, VersionUsage

USAGE = cast(Table, VersionUsage.__table__)
BATCHES = cast(Table, UsageBatch.__table__)
_DAY = bindparam("day", type_=Integer)


@dataclass(frozen=True)
class Totals:
    requests: int
    input_tokens: int
    output_tokens: int
    last_used: datetime | None


def _totals(r: Sequence[Any], at: int = 0) -> Totals:
    return Totals(int(r[at] or 0), int(r[at + 1] or 0), int(r[at + 2] or 0),
                  datetime_value(r[at + 3]))


async def claim_batch(conn: AsyncConnection, batch_id: str, now: datetime) -> bool:
    """Record the batch id; False when it was recorded before (``db.claim_batch``)."""
    return await claim_batch_id(conn, BATCHES, batch_id, now)


async def version_ids(conn: AsyncConnection, names: Sequence[str]) -> dict[tuple[str, int], int]:
    """(ns/name, number) -> version id, for the versions of these adapters."""
    stmt = (select(Adapter.full_name, Version.number, Version.id)
            .join(Adapter, Adapter.id == Version.adapter_id)
            .where(Adapter.full_name.in_(bindparam("names", expanding=True))))
    rows = await conn.execute(stmt, {"names": list(names)})
    return {(r[0], int(r[1])): int(r[2]) for r in rows}


async def add(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Add counts to the (version, day) roll-ups, in key order (concurrent batches on
    Postgres then lock rows in one order and never deadlock)."""
    if not rows:
        return
    ins = dialect_insert(conn)(USAGE)
    new = ins.excluded
    stmt = ins.on_conflict_do_update(index_elements=["version_id", "day"], set_={
        "requests": USAGE.c.requests + new.requests,
        "input_tokens": USAGE.c.input_tokens + new.input_tokens,
        "output_tokens": USAGE.c.output_tokens + new.output_tokens,
        "last_used": case((new.last_used > USAGE.c.last_used, new.last_used),
                          else_=USAGE.c.last_used),
    })
    await conn.execute(stmt, sorted(rows, key=lambda r: (r["version_id"], r["day"])))


_SUMS = (func.coalesce(func.sum(VersionUsage.requests), 0),
         func.coalesce(func.sum(VersionUsage.input_tokens), 0),
         func.coalesce(func.sum(VersionUsage.output_tokens), 0),
         func.max(VersionUsage.last_used))
_ADAPTER_ID = bindparam("adapter_id", type_=BigInteger)
_PER_VERSION = Prepared(
    select(Version.number, *_SUMS).join(VersionUsage, VersionUsage.version_id == Version.id)
    .where(Version.adapter_id == _ADAPTER_ID, VersionUsage.day >= _DAY)
    .group_by(Version.number).order_by(Version.number.desc()))
_DAILY = Prepared(
    select(Version.number, VersionUsage.day, VersionUsage.requests, VersionUsage.input_tokens,
           VersionUsage.output_tokens, VersionUsage.last_used)
    .join(VersionUsage, VersionUsage.version_id == Version.id)
    .where(Version.adapter_id == _ADAPTER_ID, VersionUsage.day >= _DAY)
    .order_by(VersionUsage.day.desc(), Version.number.desc())
    .limit(bindparam("limit", type_=Integer)))


async def per_version(conn: ReadConn, adapter_id: int, day: int) -> list[tuple[int, Totals]]:
    """Each used version of the adapter since ``day``, newest version first."""
    rows = await _PER_VERSION.all(conn, adapter_id=adapter_id, day=day)
    return [(int(r[0]), _totals(r, 1)) for r in rows]


async def daily(conn: ReadConn, adapter_id: int, day: int, limit: int
                ) -> list[tuple[int, int, Totals]]:
    """(version, day, totals) rows since ``day``, newest day first."""
    rows = await _DAILY.all(conn, adapter_id=adapter_id, day=day, limit=limit)
    return [(int(r[0]), int(r[1]), _totals(r, 2)) for r in rows]


@cache
def _listing(by_adapter: bool, unused: bool, by_usage: bool, namespace: bool) -> Prepared:
    """Versions (or adapters) with their use since ``day`` and their last use in the
    retained rows; ``unused``: only those with no use since ``day``."""
    in_window = VersionUsage.day >= _DAY
    sums = (func.coalesce(func.sum(case((in_window, VersionUsage.requests), else_=0)), 0),
            func.coalesce(func.sum(case((in_window, VersionUsage.input_tokens), else_=0)), 0),
            func.coalesce(func.sum(case((in_window, VersionUsage.output_tokens), else_=0)), 0),
            func.max(VersionUsage.last_used))
    keys: list[Any] = [Adapter.id, Adapter.full_name] if by_adapter else [
        Version.id, Adapter.full_name, Version.number]
    stmt = (select(Adapter.full_name, Version.number if not by_adapter else null(), *sums)
            .select_from(Version).join(Adapter, Adapter.id == Version.adapter_id)
            .outerjoin(VersionUsage, VersionUsage.version_id == Version.id)
            .where(Version.status != "pending").group_by(*keys))
    if namespace:
        stmt = stmt.where(Adapter.namespace_id == select(Namespace.id).where(
            Namespace.name == bindparam("namespace", type_=String)).scalar_subquery())
    if unused:
        stmt = stmt.having(func.coalesce(func.sum(case((in_window, 1), else_=0)), 0) == 0)
    order: list[Any] = [sums[0].desc()] if by_usage else []
    order += [Adapter.full_name] if by_adapter else [Adapter.full_name, Version.number]
    stmt = (stmt.order_by(*order).limit(bindparam("limit", type_=Integer))
            .offset(bindparam("offset", type_=Integer)))
    return Prepared(stmt)


async def listing(conn: ReadConn, *, day: int, by_adapter: bool, unused: bool, by_usage: bool,
                  namespace: str | None, limit: int, offset: int
                  ) -> list[tuple[str, int | None, Totals]]:
    params: dict[str, Any] = {"day": day, "limit": limit, "offset": offset}
    if namespace is not None:
        params["namespace"] = namespace
    rows = await _listing(by_adapter, unused, by_usage, namespace is not None).all(conn,
                                                                                 **params)
    return [(r[0], int(r[1]) if r[1] is not None else None, _totals(r, 2)) for r in rows]


_UNUSED_ADAPTERS = Prepared(
    select(func.count()).select_from(Adapter).where(~exists().where(
        Version.adapter_id == Adapter.id, VersionUsage.version_id == Version.id,
        VersionUsage.day >= _DAY)))


async def unused_adapters(conn: ReadConn, day: int) -> int:
    """Adapters none of whose versions was used since ``day`` (never used included)."""
    row = await _UNUSED_ADAPTERS.first(conn, day=day)
    return int(row[0]) if row is not None else 0


async def prune(conn: AsyncConnection, before_day: int, batches_before: datetime
                ) -> tuple[int, int]:
    """Delete roll-ups of days before ``before_day`` and batch ids received before
    ``batches_before``; (rows, batch ids) deleted."""
    rows = await conn.execute(delete(USAGE).where(USAGE.c.day < before_day))
    ids = await conn.execute(delete(BATCHES).where(BATCHES.c.received_at < batches_before))
    return int(rows.rowcount or 0), int(ids.rowcount or 0)


