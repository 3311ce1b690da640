"""Register, list and delete a namespace's webhooks (their deliveries: ``delivery``)."""

from __future__ import annotations

from typing import Any

from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.errors import Conflict, NotFound, ValidationFailed
from mol_catalog.events import repository as events_repo
from mol_catalog.models import utcnow
from mol_catalog.util import valid_name
from mol_catalog.webhooks import repository
from mol_catalog.webhooks.schemas import EVENT_KINDS, WebhookCreate
from mol_catalog.webhooks.targets import Allowlist, url_refusal

MAX_PER_NAMESPACE = 100


async def create(uow: UnitOfWork, namespace: str, body: WebhookCreate, who: str | None,
                 allow: Allowlist) -> dict[str, Any]:
    """A new webhook; it gets the events committed after this one (``after_event``). Its
    URL may not name an address webhooks may not reach (``targets``)."""
    valid_name(namespace, "namespace")
    refusal = url_refusal(body.url, allow)
    if refusal is not None:
        raise ValidationFailed(f"url: {refusal}")
    if await repository.count(uow.conn, namespace) >= MAX_PER_NAMESPACE:
        raise Conflict(f"namespace {namespace!r} has {MAX_PER_NAMESPACE} webhooks, the most "
                       "allowed: delete one first")
    events = [k for k in EVENT_KINDS if k in set(body.events)]
    now = utcnow()
    values = {"namespace": namespace, "url": body.url, "secret": body.secret,
              "events": events, "after_event": await events_repo.latest_id(uow.conn),
              "created_by": who, "created_at": now}
    webhook_id = await repository.insert_webhook(uow.conn, values)
    return {"id": webhook_id, "namespace": namespace, "url": body.url, "events": events,
            "created_by": who, "created_at": now}


async def list_webhooks(conn: ReadConn, namespace: str) -> list[dict[str, Any]]:
    valid_name(namespace, "namespace")
    return await repository.list_webhooks(conn, namespace)


async def _existing(conn: ReadConn, namespace: str, webhook_id: int) -> None:
    valid_name(namespace, "namespace")
    if not await repository.exists(conn, namespace, webhook_id):
        raise NotFound(f"namespace {namespace!r} has no webhook {webhook_id}")


async def delete(uow: UnitOfWork, namespace: str, webhook_id: int) -> None:
    """Remove the webhook and its deliveries (pending ones are dropped)."""
    await _existing(uow.conn, namespace, webhook_id)
    await repository.delete_webhook(uow.conn, webhook_id)


async def deliveries(conn: ReadConn, namespace: str, webhook_id: int,
                     limit: int) -> list[dict[str, Any]]:
    await _existing(conn, namespace, webhook_id)
    return await repository.deliveries(conn, webhook_id, limit)
