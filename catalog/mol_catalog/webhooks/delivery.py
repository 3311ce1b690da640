"""Webhook deliveries: from the outbox (the events table) to each receiver, in the
background, at least once.

Two steps, each its own transaction, so a restart loses nothing:

1. Fan-out: the events past the cursor (``webhook_cursor``) become one delivery row per
   matching webhook, and the cursor moves past them, in one transaction. Event ids are
   allocated in commit order (``mol_catalog.db.unit``), so no event is skipped; on
   Postgres the cursor row is locked, so replicas fan out one at a time.
2. Send: due deliveries are claimed (their next attempt pushed past the request
   timeout, so a sender that dies leaves them to be retried; one that stops releases
   what it still holds, so the next process sends them at once), posted with at most
   ``webhook_concurrency`` requests in flight, then marked delivered (2xx), rescheduled
   with exponential backoff, or failed after ``webhook_max_attempts``. A host that
   resolves to an address webhooks may not reach (``targets``) fails the delivery at
   once, its reason in ``last_error`` (``transport`` checks the addresses it connects to).

Every attempt carries the same ``X-Mol-Delivery`` id (receivers dedupe on it) and a fresh
``X-Mol-Signature: t=<unix seconds>,v1=<hex>``, the HMAC-SHA256 with the webhook's secret
of ``"<t>." + body`` (receivers check it and refuse old ``t``: replay).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import time
import uuid
from datetime import timedelta
from typing import Any

import httpx

from mol_catalog.db import Database, UnitOfWork
from mol_catalog.errors import json_bytes
from mol_catalog.events import repository as events_repo
from mol_catalog.metrics import CatalogMetrics
from mol_catalog.models import utcnow
from mol_catalog.settings import CatalogSettings
from mol_catalog.webhooks import repository
from mol_catalog.webhooks.transport import RefusedTarget, guarded_transport

log = logging.getLogger("mol_catalog.webhooks")
FAN_OUT_BATCH = 500  # events per fan-out transaction
CLAIM_MARGIN = 30.0  # seconds past the request timeout a claimed delivery stays held
MAX_ERROR_CHARS = 500
USER_AGENT = "mol-catalog-webhooks/1"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Mol-Signature`` header value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def backoff(settings: CatalogSettings, attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones."""
    delay: float = settings.webhook_backoff_seconds * 2.0 ** (attempts - 1)
    return min(delay, settings.webhook_backoff_max_seconds)


class WebhookSender:
    """The background sender of one catalog process (started in the app's lifespan)."""

    def __init__(self, db: Database, settings: CatalogSettings, metrics: CatalogMetrics,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.db = db
        self.settings = settings
        self.metrics = metrics
        self.http = httpx.AsyncClient(timeout=settings.webhook_timeout,
                                      transport=transport or guarded_transport(
                                          settings.webhook_allowlist),
                                      follow_redirects=False,
                                      headers={"User-Agent": USER_AGENT})
        self.slots = asyncio.Semaphore(settings.webhook_concurrency)
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._held: set[int] = set()  # claimed deliveries whose outcome is not recorded

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self._held:
            await self._release(sorted(self._held))
        await self.http.aclose()

    async def _release(self, ids: list[int]) -> None:
        """Make deliveries claimed by a stopping sender due now, not after the claim's
        hold (``webhook_timeout + CLAIM_MARGIN``): the next process sends them at once
        (at least once: their receivers may have seen them already, and dedupe)."""
        async def release(uow: UnitOfWork) -> None:
            await repository.update_delivery(uow.conn, ids, {"next_attempt_at": utcnow()})

        try:
            await self.db.transact(release)
        except Exception:  # the database is away: the hold runs out instead
            log.warning("could not release %d claimed webhook deliveries", len(ids),
                        exc_info=True)
        self._held.clear()

    async def _run(self) -> None:
        while True:
            try:
                busy = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is away: try again at the next poll
                log.warning("webhook sender step failed", exc_info=True)
                busy = False
            if not busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wakeup.wait(), self.settings.webhook_poll_seconds)
                self.wakeup.clear()

    async def step(self) -> bool:
        """One fan-out and one round of sends; whether there was anything to do."""
        fanned = await self.db.transact(self._fan_out)
        sent = await self._send_due()
        return fanned > 0 or sent > 0

    async def _fan_out(self, uow: UnitOfWork) -> int:
        last = await repository.cursor(uow.conn, lock=uow.postgres)
        events = await events_repo.after(uow.conn, last, FAN_OUT_BATCH)
        if not events:
            return 0
        hooks = await repository.all_webhooks(uow.conn)
        now = utcnow()
        rows = []
        for event_id, type_, adapter, *_ in events:
            if adapter is None:
                continue  # not a namespace's event (base models, profiles, policies)
            namespace = adapter.split("/", 1)[0]
            for hook_id, hook_ns, kinds, after in hooks:
                if hook_ns == namespace and type_ in kinds and event_id > after:
                    rows.append({"delivery_id": str(uuid.uuid4()), "webhook_id": hook_id,
                                 "event_id": event_id, "status": "pending", "attempts": 0,
                                 "next_attempt_at": now, "created_at": now})
        await repository.insert_deliveries(uow.conn, rows)
        await repository.set_cursor(uow.conn, int(events[-1][0]))
        return len(events)

    async def _claim(self, uow: UnitOfWork) -> list[dict[str, Any]]:
        now = utcnow()
        due = await repository.due(uow.conn, now, self.settings.webhook_concurrency * 4,
                                   uow.postgres)
        if due:
            held = now + timedelta(seconds=self.settings.webhook_timeout + CLAIM_MARGIN)
            await repository.update_delivery(uow.conn, [d["id"] for d in due],
                                             {"next_attempt_at": held})
        return due

    async def _send_due(self) -> int:
        due = await self.db.transact(self._claim)
        self._held.update(d["id"] for d in due)
        await asyncio.gather(*(self._send(d) for d in due))
        return len(due)

    async def _send(self, d: dict[str, Any]) -> None:
        body = json_bytes({"delivery": d["delivery_id"], "event": {
            "id": d["event_id"], "type": d["type"], "adapter": d["adapter"],
            "version": d["version"], "alias": d["alias"], "data": d["data"] or {},
            "created_at": d["created_at"]}})
        status: int | None = None
        error: str | None = None
        refused = False
        async with self.slots:
            headers = {"Content-Type": "application/json", "X-Mol-Event": d["type"],
                       "X-Mol-Delivery": d["delivery_id"],
                       "X-Mol-Signature": signature(d["secret"], int(time.time()), body)}
            try:
                response = await self.http.post(d["url"], content=body, headers=headers)
                status = response.status_code
                if not 200 <= status < 300:
                    error = f"HTTP {status}: {response.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:  # ValueError: a URL httpx refuses
                error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            except RefusedTarget as exc:  # a setting to change, not a fault to wait out
                error, refused = f"refused: {exc}"[:MAX_ERROR_CHARS], True
        attempts = int(d["attempts"]) + 1
        now = utcnow()
        values: dict[str, Any] = {"attempts": attempts, "last_status": status,
                                  "last_error": error}
        if error is None:
            values.update(status="delivered", delivered_at=now)
            result = "delivered"
        elif refused or attempts >= self.settings.webhook_max_attempts:
            values.update(status="failed")
            result = "refused" if refused else "failed"
        else:
            values["next_attempt_at"] = now + timedelta(seconds=backoff(self.settings,
                                                                        attempts))
            result = "retry"
        self.metrics.webhook_deliveries.labels(result).inc()

        async def record(uow: UnitOfWork) -> None:
            await repository.update_delivery(uow.conn, [d["id"]], values)

        await self.db.transact(record)
        self._held.discard(d["id"])
