"""Batches on their way to the catalog: what usage reports and recorded routing
decisions share (:mod:`mol_router.reporting.usage`, :mod:`mol_router.reporting.decisions`).

The request path never sends anything: a reporter accumulates in memory and seals what
it holds into batches (:meth:`Outbox.enqueue`); a background task delivers them in
order every ``interval`` seconds. One loop for both, because the rules that keep a
catalog outage harmless are the same and easy to get subtly wrong twice:

- a batch gets a random id when sealed and keeps it across retries, so the catalog
  (which counts an id once) never counts a batch whose answer was lost twice;
- while the catalog is unreachable or answers 5xx/429, the batch stays first in line and
  the pause doubles from ``interval`` up to ``backoff_max``, with jitter so routers do
  not retry in step;
- a batch the catalog refuses (any other 4xx: a token without the scope, a bad entry)
  is dropped and counted (``reason="rejected"``), since sending it again cannot succeed;
- at most ``max_batches`` sealed batches wait; past that the oldest is dropped and its
  entries counted (``reason="overflow"``), so memory stays bounded whatever the outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from mol_platform.clients.catalog import CatalogError
from mol_router import backoff


@dataclass
class Batch:
    batch_id: str
    entries: list[dict[str, Any]]
    attempts: int = 0
    sealed_at: float = field(default_factory=time.monotonic)


def new_batch_id() -> str:
    """32 hex digits (the catalog's batch ids: 8 to 64 of ``[A-Za-z0-9_-]``); from
    Python's generator, not the OS's: a label, not a secret, made without a syscall."""
    return f"{random.getrandbits(128):032x}"


def retryable(exc: CatalogError) -> bool:
    """Worth sending again later: unreachable (status 0), 5xx or 429."""
    return exc.status == 0 or exc.status >= 500 or exc.status == 429


class Outbox(ABC):
    """Sealed batches and the task that delivers them. Subclasses say how to seal what
    they accumulated (:meth:`seal`), how one batch travels (:meth:`deliver`) and what
    they count of each outcome (:meth:`delivered`, :meth:`failed`, :meth:`rejected`)."""

    what = "batch"  # for log lines: "usage", "decision"

    def __init__(self, dropped: Counter, *, interval: float, max_batches: int,
                 batch_size: int, backoff_max: float, logger: logging.Logger) -> None:
        if batch_size < 1 or max_batches < 1:
            raise ValueError("batch_size and max_batches must be at least 1")
        self.dropped = dropped
        self.interval = interval
        self.max_batches = max_batches
        self.batch_size = batch_size
        self.backoff_max = backoff_max
        self.log = logger
        self.outbox: deque[Batch] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- what subclasses provide ----------------------------------------------------

    @abstractmethod
    def seal(self) -> None:
        """Move what accumulated into batches (:meth:`enqueue`)."""

    @abstractmethod
    async def deliver(self, batch: Batch) -> bool | None:
        """Send one batch: whether the catalog had seen its id already (a duplicate),
        None when there is nobody to send to (no catalog configured now). Raises
        :class:`CatalogError` when it did not take the batch."""

    @abstractmethod
    def delivered(self, batch: Batch, duplicate: bool) -> None:
        """The catalog took ``batch``."""

    @abstractmethod
    def failed(self, batch: Batch) -> None:
        """``batch`` could not be delivered now; it is retried later."""

    @abstractmethod
    def rejected(self, batch: Batch) -> None:
        """The catalog refused ``batch``; it was dropped."""

    # --- batching -------------------------------------------------------------------

    def enqueue(self, entries: list[dict[str, Any]]) -> None:
        """Seal ``entries`` into batches of at most ``batch_size``, dropping the oldest
        batches beyond ``max_batches``."""
        for i in range(0, len(entries), self.batch_size):
            self.outbox.append(Batch(new_batch_id(), entries[i:i + self.batch_size]))
        while len(self.outbox) > self.max_batches:
            lost = self.outbox.popleft()
            self.dropped.labels("overflow").inc(len(lost.entries))
            self.log.warning("%s outbox full (%d batches): dropped the oldest batch of %d "
                             "entries", self.what, self.max_batches, len(lost.entries))

    def wake(self) -> None:
        """Have the task flush now rather than at the end of its pause."""
        self._wake.set()

    async def send_pending(self) -> bool:
        """Send the sealed batches in order; False when the catalog could not take one
        (it stays first in line, with its id) or there is no catalog to send to."""
        while self.outbox:
            batch = self.outbox[0]
            batch.attempts += 1
            try:
                duplicate = await self.deliver(batch)
            except CatalogError as exc:
                if retryable(exc):
                    self.failed(batch)
                    self.log.info("%s batch %s not delivered (%s); retrying", self.what,
                                  batch.batch_id, exc.detail)
                    return False
                self.outbox.popleft()
                self.rejected(batch)
                self.dropped.labels("rejected").inc(len(batch.entries))
                self.log.error("catalog refused %s batch %s (%d entries): %s", self.what,
                               batch.batch_id, len(batch.entries), exc)
                continue
            if duplicate is None:
                batch.attempts -= 1  # nothing was sent
                return False
            self.outbox.popleft()
            self.delivered(batch, duplicate)
        return True

    async def flush(self) -> bool:
        """Seal what accumulated and send everything waiting."""
        self.seal()
        return await self.send_pending()

    # --- the background task --------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mol-{self.what}-outbox")

    async def stop(self, final_flush_seconds: float = 5.0) -> None:
        """Stop the task, then try once (briefly) to deliver what is held."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), final_flush_seconds)

    def pause(self, failures: int) -> float:
        """Seconds before the next flush after ``failures`` failed ones in a row."""
        if failures == 0:
            return self.interval
        # jitter: routers do not retry in step
        return backoff.outbox(self.interval, self.backoff_max).after(failures)

    async def _run(self) -> None:
        failures = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.pause(failures))
            self._wake.clear()
            try:
                ok = await self.flush()
            except Exception:  # never let the task die; the batch stays queued
                self.log.exception("%s flush failed", self.what)
                ok = False
            failures = 0 if ok else failures + 1
