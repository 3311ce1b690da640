"""Per-version usage, reported to the catalog in batches (``POST /v1/usage``).

Requests only touch a dict (:meth:`UsageReporter.record`, no I/O, no await); a
background task seals what accumulated into batches every ``interval`` seconds and
sends them in order. Bounded whatever the traffic or the catalog's health:

- the open aggregate holds at most ``max_versions`` distinct (version, UTC day) keys;
  a new key past that seals the open aggregate into batches at once, so counting goes
  on in a fresh one;
- at most ``max_batches`` sealed batches (of up to 1000 entries) wait for the catalog;
  past that the oldest is dropped and its entries counted in
  ``mol_router_usage_dropped_entries_total{reason="overflow"}``.

A batch keeps its id across retries (the catalog counts an id once), retried with
exponential backoff while the catalog is unreachable or answers 5xx/429; a batch the
catalog refuses (4xx: a token without the usage scope, a bad entry) is dropped, logged
and counted (``reason="rejected"``), since sending it again cannot succeed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from mol_platform.clients.catalog import CatalogError
from mol_platform.contract.catalog_models import UsageRecorded
from mol_platform.contract.usage import MAX_BATCH_ENTRIES, MAX_REQUESTS, MAX_TOKENS

log = logging.getLogger("mol.router.usage")
_DAY = 86_400


class UsageSink(Protocol):
    async def report_usage(self, batch: dict[str, Any]) -> UsageRecorded: ...


@dataclass
class _Counts:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    last_used: float = 0.0


@dataclass
class Batch:
    batch_id: str
    entries: list[dict[str, Any]]
    attempts: int = 0
    sealed_at: float = field(default_factory=time.monotonic)


def _entry(key: tuple[str, int, int], c: _Counts) -> dict[str, Any]:
    return {"adapter": key[0], "version": key[1], "requests": min(c.requests, MAX_REQUESTS),
            "input_tokens": min(c.input_tokens, MAX_TOKENS),
            "output_tokens": min(c.output_tokens, MAX_TOKENS),
            "last_used": datetime.fromtimestamp(c.last_used, UTC).isoformat()}


class UsageReporter:
    def __init__(self, sink: Callable[[], UsageSink | None], registry: CollectorRegistry, *,
                 interval: float = 10.0, max_versions: int = 10_000, max_batches: int = 100,
                 backoff_max: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self._sink = sink
        self.interval = interval
        self.max_versions = max_versions
        self.max_batches = max_batches
        self.backoff_max = backoff_max
        self._clock = clock
        self._open: dict[tuple[str, int, int], _Counts] = {}
        self.outbox: deque[Batch] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = Counter("mol_router_usage_batches", "Usage batches sent to the catalog "
                               "by result (counted, duplicate, failed: retried later, "
                               "rejected: dropped)", ["result"], registry=registry)
        self.dropped = Counter("mol_router_usage_dropped_entries", "Usage entries never "
                               "delivered, by reason (overflow: the outbox was full, "
                               "rejected: the catalog refused the batch)", ["reason"],
                               registry=registry)
        self.held = Gauge("mol_router_usage_held_entries", "Usage entries waiting to reach "
                          "the catalog (open aggregate and sealed batches)", registry=registry)
        self.held.set_function(self.held_entries)

    # --- the request path ---------------------------------------------------------------

    def record(self, adapter: str, version: int, input_tokens: int, output_tokens: int) -> None:
        """Count one request to ``adapter@v{version}`` (no I/O)."""
        now = self._clock()
        key = (adapter, version, int(now // _DAY))
        c = self._open.get(key)
        if c is None:
            if len(self._open) >= self.max_versions:
                self.seal()
                self._wake.set()
            c = self._open[key] = _Counts()
        c.requests += 1
        c.input_tokens += max(input_tokens, 0)
        c.output_tokens += max(output_tokens, 0)
        c.last_used = now

    def held_entries(self) -> int:
        return len(self._open) + sum(len(b.entries) for b in self.outbox)

    # --- batching -----------------------------------------------------------------------

    def seal(self) -> None:
        """Move the open aggregate into batches of at most MAX_BATCH_ENTRIES, dropping the
        oldest batches beyond ``max_batches``."""
        if not self._open:
            return
        if self._sink() is None:  # no catalog configured: nobody to report to
            self._open = {}
            return
        items = [_entry(k, c) for k, c in self._open.items()]
        self._open = {}
        for i in range(0, len(items), MAX_BATCH_ENTRIES):
            self.outbox.append(Batch(uuid.uuid4().hex, items[i:i + MAX_BATCH_ENTRIES]))
        while len(self.outbox) > self.max_batches:
            lost = self.outbox.popleft()
            self.dropped.labels("overflow").inc(len(lost.entries))
            log.warning("usage outbox full (%d batches): dropped the oldest batch of %d "
                        "entries", self.max_batches, len(lost.entries))

    async def send_pending(self) -> bool:
        """Send the sealed batches in order; False when the catalog could not take one
        (it stays first in line, with its id)."""
        while self.outbox:
            sink = self._sink()
            if sink is None:
                return False
            batch = self.outbox[0]
            batch.attempts += 1
            try:
                answer = await sink.report_usage({"batch_id": batch.batch_id,
                                                  "entries": batch.entries})
            except CatalogError as exc:
                if exc.status == 0 or exc.status >= 500 or exc.status == 429:
                    self.batches.labels("failed").inc()
                    log.info("usage batch %s not delivered (%s); retrying", batch.batch_id,
                             exc.detail)
                    return False
                self.outbox.popleft()
                self.batches.labels("rejected").inc()
                self.dropped.labels("rejected").inc(len(batch.entries))
                log.error("catalog refused usage batch %s (%d entries): %s", batch.batch_id,
                          len(batch.entries), exc)
                continue
            self.outbox.popleft()
            self.batches.labels("duplicate" if answer.duplicate else "counted").inc()
        return True

    async def flush(self) -> bool:
        """Seal what accumulated and send everything waiting."""
        self.seal()
        return await self.send_pending()

    # --- the background task --------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mol-usage-reporter")

    async def stop(self, final_flush_seconds: float = 5.0) -> None:
        """Stop the task, then try once (briefly) to deliver what is held."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), final_flush_seconds)

    async def _run(self) -> None:
        failures = 0
        while True:
            delay = self.interval if failures == 0 else min(
                self.backoff_max, self.interval * 2 ** min(failures - 1, 16))
            if failures:
                delay *= 0.5 + random.random() / 2  # jitter: routers do not retry in step
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
            try:
                ok = await self.flush()
            except Exception:  # never let the reporter die; the batch stays queued
                log.exception("usage flush failed")
                ok = False
            failures = 0 if ok else failures + 1
