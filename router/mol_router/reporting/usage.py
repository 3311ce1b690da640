"""Per-version usage, reported to the catalog in batches (``POST /v1/usage``).

Requests only touch a dict (:meth:`UsageReporter.record`, no I/O, no await); a
background task seals what accumulated into batches every ``interval`` seconds and
sends them in order (:mod:`mol_router.reporting.outbox`: ids stable across retries, back-off while
the catalog is down, refusals dropped). Bounded whatever the traffic or the catalog's
health:

- the open aggregate holds at most ``max_versions`` distinct (version, UTC day) keys;
  a new key past that seals the open aggregate into batches at once, so counting goes
  on in a fresh one;
- at most ``max_batches`` sealed batches (of up to 1000 entries) wait for the catalog;
  past that the oldest is dropped and its entries counted in
  ``mol_router_usage_dropped_entries_total{reason="overflow"}``.

A batch the catalog refuses (4xx: a token without the usage scope, a bad entry) is
dropped, logged and counted (``reason="rejected"``), since sending it again cannot
succeed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from mol_platform.contract.catalog_models import UsageRecorded
from mol_platform.contract.usage import MAX_BATCH_ENTRIES, MAX_REQUESTS, MAX_TOKENS
from mol_router.reporting.outbox import Batch, Outbox

__all__ = ["Batch", "UsageReporter", "UsageSink"]

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


def _entry(key: tuple[str, int, int], c: _Counts) -> dict[str, Any]:
    return {"adapter": key[0], "version": key[1], "requests": min(c.requests, MAX_REQUESTS),
            "input_tokens": min(c.input_tokens, MAX_TOKENS),
            "output_tokens": min(c.output_tokens, MAX_TOKENS),
            "last_used": datetime.fromtimestamp(c.last_used, UTC).isoformat()}


class UsageReporter(Outbox):
    what = "usage"

    def __init__(self, sink: Callable[[], UsageSink | None], registry: CollectorRegistry, *,
                 interval: float = 10.0, max_versions: int = 10_000, max_batches: int = 100,
                 backoff_max: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        dropped = Counter("mol_router_usage_dropped_entries", "Usage entries never "
                          "delivered, by reason (overflow: the outbox was full, "
                          "rejected: the catalog refused the batch)", ["reason"],
                          registry=registry)
        super().__init__(dropped, interval=interval, max_batches=max_batches,
                         batch_size=MAX_BATCH_ENTRIES, backoff_max=backoff_max, logger=log)
        self._sink = sink
        self.max_versions = max_versions
        self._clock = clock
        self._open: dict[tuple[str, int, int], _Counts] = {}
        self.batches = Counter("mol_router_usage_batches", "Usage batches sent to the catalog "
                               "by result (counted, duplicate, failed: retried later, "
                               "rejected: dropped)", ["result"], registry=registry)
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
                self.wake()
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
        self.enqueue(items)

    async def deliver(self, batch: Batch) -> bool | None:
        sink = self._sink()
        if sink is None:
            return None
        answer = await sink.report_usage({"batch_id": batch.batch_id,
                                          "entries": batch.entries})
        return answer.duplicate

    def delivered(self, batch: Batch, duplicate: bool) -> None:
        self.batches.labels("duplicate" if duplicate else "counted").inc()

    def failed(self, batch: Batch) -> None:
        self.batches.labels("failed").inc()

    def rejected(self, batch: Batch) -> None:
        self.batches.labels("rejected").inc()
