"""Counting usage batches into daily roll-ups, and reading them back.

A day is a UTC calendar day, stored as days since 1970-01-01. An entry counts on the
day of its ``last_used``; the router starts a new entry when the day changes, so no
entry spans two days.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

from mol_catalog.auth import Principal
from mol_catalog.db import Database, ReadConn, UnitOfWork
from mol_catalog.errors import BadRequest
from mol_catalog.models import utcnow
from mol_catalog.usage import repository as repo
from mol_catalog.usage.repository import Totals
from mol_catalog.usage.schemas import UsageBatchIn

BATCH_ID_DAYS = 2  # how long a batch id is remembered (a retry comes within minutes)
MAX_UNKNOWN_LISTED = 100
EPOCH = date(1970, 1, 1)
UNUSED_DAYS = 30  # the window of the mol_catalog_unused_adapters gauge


def day_of(when: datetime) -> int:
    return (when.astimezone(UTC).date() - EPOCH).days


def day_text(day: int) -> str:
    return (EPOCH + timedelta(days=day)).isoformat()


def window_start(days: int, now: datetime | None = None) -> int:
    """The first day of a window of ``days`` days ending today (today included)."""
    return day_of(now or utcnow()) - days + 1


def window(days: int, retention: int) -> int:
    """The window asked for, cut to the retention (older days are not kept); answers say
    the window they cover."""
    return min(days, retention)


async def record(uow: UnitOfWork, who: Principal, batch: UsageBatchIn, retention: int
                 ) -> dict[str, Any]:
    """Count a batch once: its id is claimed in the same transaction as the counts."""
    for ns in sorted({e.adapter.split("/", 1)[0] for e in batch.entries}):
        who.require_usage(ns)
    now = utcnow()
    if not await repo.claim_batch(uow.conn, batch.batch_id, now):
        return {"batch_id": batch.batch_id, "duplicate": True, "counted": 0, "expired": 0,
                "unknown": []}
    first_day = window_start(retention, now)
    ids = await repo.version_ids(uow.conn, sorted({e.adapter for e in batch.entries}))
    sums: dict[tuple[int, int], dict[str, Any]] = {}
    unknown: list[str] = []
    expired = counted = 0
    for e in batch.entries:
        # A reporter's clock ahead of ours: its use happened now, as far as we know.
        last_used = min(e.last_used, now)
        day = day_of(last_used)
        version_id = ids.get((e.adapter, e.version))
        if version_id is None:
            unknown.append(f"{e.adapter}@v{e.version}")
            continue
        if day < first_day:
            expired += 1
            continue
        counted += 1
        row = sums.get((version_id, day))
        if row is None:
            sums[(version_id, day)] = {"version_id": version_id, "day": day,
                                       "requests": e.requests, "input_tokens": e.input_tokens,
                                       "output_tokens": e.output_tokens,
                                       "last_used": last_used}
        else:  # the same version twice in a batch: one row (an upsert touches a row once)
            row["requests"] += e.requests
            row["input_tokens"] += e.input_tokens
            row["output_tokens"] += e.output_tokens
            row["last_used"] = max(row["last_used"], last_used)
    await repo.add(uow.conn, list(sums.values()))
    return {"batch_id": batch.batch_id, "duplicate": False, "counted": counted,
            "expired": expired, "unknown": sorted(set(unknown))[:MAX_UNKNOWN_LISTED]}


def totals(t: Totals) -> dict[str, Any]:
    return {"requests": t.requests, "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens, "last_used": t.last_used}


async def adapter_usage(conn: ReadConn, adapter_id: int, full_name: str, days: int,
                        daily_limit: int) -> dict[str, Any]:
    """An adapter's use over the last ``days`` days: per version and per day."""
    start = window_start(days)
    versions = await repo.per_version(conn, adapter_id, start)
    rows = await repo.daily(conn, adapter_id, start, daily_limit)
    last = [t.last_used for _, t in versions if t.last_used is not None]
    total = Totals(sum(t.requests for _, t in versions), sum(t.input_tokens for _, t in versions),
                   sum(t.output_tokens for _, t in versions), max(last) if last else None)
    return {"adapter": full_name, "days": days, "total": totals(total),
            "versions": [{"version": n, **totals(t)} for n, t in versions],
            "daily": [{"version": n, "day": day_text(d), **totals(t)} for n, d, t in rows]}


async def listing(conn: ReadConn, who: Principal, *, days: int, by_adapter: bool, unused: bool,
                  by_usage: bool, namespace: str | None, limit: int, offset: int
                  ) -> dict[str, Any]:
    readable = who.readable_namespaces()
    if namespace is None and readable is not None:
        if len(readable) != 1:
            raise BadRequest("this token reads only some namespaces: pass namespace= "
                             f"(one of {', '.join(sorted(readable)) or 'none'})")
        namespace = next(iter(readable))
    if namespace is not None:
        who.require_read(namespace)
    rows = await repo.listing(conn, day=window_start(days), by_adapter=by_adapter,
                              unused=unused, by_usage=by_usage, namespace=namespace,
                              limit=limit + 1, offset=offset)
    more = len(rows) > limit
    return {"days": days, "items": [{"adapter": a, "version": v, **totals(t)}
                                    for a, v, t in rows[:limit]],
            "next_offset": offset + limit if more else None}


async def prune(uow: UnitOfWork, retention: int) -> dict[str, int]:
    """Drop roll-ups older than the retention window and old batch ids."""
    now = utcnow()
    rows, ids = await repo.prune(uow.conn, window_start(retention, now),
                                 now - timedelta(days=BATCH_ID_DAYS))
    return {"usage_rows_pruned": rows, "usage_batches_pruned": ids}


class UnusedGauge:
    """Adapters unused for ``days`` days, counted at most every ``seconds`` (the count
    is one anti-join over the adapters; /metrics is scraped every few seconds)."""

    def __init__(self, days: int, seconds: float) -> None:
        self.days = days
        self.seconds = seconds
        self.value: int | None = None
        self._at = -float("inf")

    async def refresh(self, db: Database) -> int | None:
        if time.monotonic() - self._at >= self.seconds:
            self._at = time.monotonic()
            async with db.read() as conn:
                self.value = await repo.unused_adapters(conn, window_start(self.days))
        return self.value
