"""SQL of webhooks, their deliveries and the fan-out cursor. Statements with timestamps
as parameters are Core statements on a unit's connection (bound as the column's type
on both backends)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import BigInteger, Integer, String, Table, bindparam, delete, func, insert, select
from sqlalchemy import update as sa_update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import Event, Webhook, WebhookCursor, WebhookDelivery

WEBHOOKS = cast(Table, Webhook.__table__)
DELIVERIES = cast(Table, WebhookDelivery.__table__)
CURSOR = cast(Table, WebhookCursor.__table__)
EVENTS = cast(Table, Event.__table__)

WEBHOOK_COLUMNS = (WEBHOOKS.c.id, WEBHOOKS.c.namespace, WEBHOOKS.c.url, WEBHOOKS.c.events,
                   WEBHOOKS.c.created_by, WEBHOOKS.c.created_at)
_LIST = Prepared(select(*WEBHOOK_COLUMNS)
                 .where(WEBHOOKS.c.namespace == bindparam("namespace", type_=String))
                 .order_by(WEBHOOKS.c.id))
_COUNT = Prepared(select(func.count()).select_from(WEBHOOKS)
                  .where(WEBHOOKS.c.namespace == bindparam("namespace", type_=String)))
_ONE = Prepared(select(WEBHOOKS.c.id).where(
    WEBHOOKS.c.namespace == bindparam("namespace", type_=String),
    WEBHOOKS.c.id == bindparam("id", type_=BigInteger)))
_DELIVERIES = Prepared(
    select(DELIVERIES.c.delivery_id, DELIVERIES.c.event_id, DELIVERIES.c.status,
           DELIVERIES.c.attempts, DELIVERIES.c.next_attempt_at, DELIVERIES.c.last_status,
           DELIVERIES.c.last_error, DELIVERIES.c.created_at, DELIVERIES.c.delivered_at)
    .where(DELIVERIES.c.webhook_id == bindparam("webhook_id", type_=BigInteger))
    .order_by(DELIVERIES.c.id.desc()).limit(bindparam("limit", type_=Integer)))
_ALL = Prepared(select(WEBHOOKS.c.id, WEBHOOKS.c.namespace, WEBHOOKS.c.events,
                       WEBHOOKS.c.after_event))


def webhook_item(r: Sequence[Any]) -> dict[str, Any]:
    return {"id": int(r[0]), "namespace": r[1], "url": r[2], "events": json_value(r[3]),
            "created_by": r[4], "created_at": datetime_value(r[5])}


async def list_webhooks(conn: ReadConn, namespace: str) -> list[dict[str, Any]]:
    return [webhook_item(r) for r in await _LIST.all(conn, namespace=namespace)]


async def count(conn: ReadConn, namespace: str) -> int:
    rows = await _COUNT.all(conn, namespace=namespace)
    return int(rows[0][0])


async def exists(conn: ReadConn, namespace: str, webhook_id: int) -> bool:
    return await _ONE.first(conn, namespace=namespace, id=webhook_id) is not None


async def insert_webhook(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int((await conn.execute(insert(WEBHOOKS).returning(WEBHOOKS.c.id), values))
               .scalar_one())


async def delete_webhook(conn: AsyncConnection, webhook_id: int) -> None:
    await conn.execute(delete(DELIVERIES).where(DELIVERIES.c.webhook_id == webhook_id))
    await conn.execute(delete(WEBHOOKS).where(WEBHOOKS.c.id == webhook_id))


async def deliveries(conn: ReadConn, webhook_id: int, limit: int) -> list[dict[str, Any]]:
    rows = await _DELIVERIES.all(conn, webhook_id=webhook_id, limit=limit)
    return [{"delivery_id": r[0], "event_id": int(r[1]), "status": r[2],
             "attempts": int(r[3]), "next_attempt_at": datetime_value(r[4]),
             "last_status": r[5], "last_error": r[6], "created_at": datetime_value(r[7]),
             "delivered_at": datetime_value(r[8])} for r in rows]


async def all_webhooks(conn: ReadConn) -> list[tuple[int, str, list[str], int]]:
    """(id, namespace, event kinds, after_event) of every webhook."""
    return [(int(r[0]), r[1], json_value(r[2]), int(r[3])) for r in await _ALL.all(conn)]


async def cursor(conn: AsyncConnection, lock: bool) -> int:
    """The newest event id fanned out (locked on Postgres: one fan-out at a time)."""
    stmt = select(CURSOR.c.last_event).where(CURSOR.c.id == 1)
    if lock:
        stmt = stmt.with_for_update()
    found = (await conn.execute(stmt)).scalar_one_or_none()
    if found is None:
        await conn.execute(insert(CURSOR), {"id": 1, "last_event": 0})
        return 0
    return int(found)


async def set_cursor(conn: AsyncConnection, last_event: int) -> None:
    await conn.execute(sa_update(CURSOR).where(CURSOR.c.id == 1).values(last_event=last_event))


async def insert_deliveries(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(insert(DELIVERIES), rows[0] if len(rows) == 1 else rows)


async def due(conn: AsyncConnection, now: datetime, limit: int,
              postgres: bool) -> list[dict[str, Any]]:
    """Pending deliveries due by ``now`` with their webhook and event, oldest first
    (locked, skipping rows another sender holds, on Postgres)."""
    stmt = (select(DELIVERIES.c.id, DELIVERIES.c.delivery_id, DELIVERIES.c.attempts,
                   WEBHOOKS.c.url, WEBHOOKS.c.secret, EVENTS.c.id, EVENTS.c.type,
                   EVENTS.c.adapter, EVENTS.c.version, EVENTS.c.alias, EVENTS.c.data,
                   EVENTS.c.created_at)
            .join(WEBHOOKS, WEBHOOKS.c.id == DELIVERIES.c.webhook_id)
            .join(EVENTS, EVENTS.c.id == DELIVERIES.c.event_id)
            .where(DELIVERIES.c.status == "pending", DELIVERIES.c.next_attempt_at <= now)
            .order_by(DELIVERIES.c.next_attempt_at).limit(limit))
    if postgres:
        stmt = stmt.with_for_update(of=DELIVERIES, skip_locked=True)
    keys = ("id", "delivery_id", "attempts", "url", "secret", "event_id", "type", "adapter",
            "version", "alias", "data", "created_at")
    return [dict(zip(keys, r, strict=True)) for r in await conn.execute(stmt)]


async def update_delivery(conn: AsyncConnection, ids: list[int], values: dict[str, Any]) -> None:
    await conn.execute(sa_update(DELIVERIES).where(DELIVERIES.c.id.in_(ids)).values(**values))
