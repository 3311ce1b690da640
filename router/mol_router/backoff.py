"""Exponential back-off with jitter: the one rule for every wait that grows with failures.

The router waits longer after each failure in a row in four places: a replica ejected
for failed requests (``readmitAfterSeconds``, doubling up to 8x), an adapter avoided on
one replica, the usage and decision outboxes while the catalog refuses their batches,
and the catalog event feed while it cannot be read. They share this rule, and their
settings sit here side by side, so that a change to one is a change seen against the
others. Jitter takes a random share off each wait, so that routers (and replicas
ejected by the same burst) do not come back in step.

Pure: the random draw is the only outside input, and callers may pass their own.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

_MAX_DOUBLINGS = 30  # 2**30 times the first wait is past any cap worth setting


@dataclass(frozen=True, slots=True)
class Backoff:
    """``first`` seconds after one failure, doubling with each further failure in a row,
    at most ``most``; ``jitter`` is the share of each wait that is drawn at random (0:
    exact, 0.5: between half and all of it)."""

    first: float
    most: float
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.first < 0 or self.most < 0:
            raise ValueError("back-off waits must be >= 0 seconds")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("back-off jitter must be between 0 and 1")

    def ceiling(self, failures: int) -> float:
        """The wait after ``failures`` in a row before jitter (0 for none)."""
        if failures <= 0:
            return 0.0
        return min(self.first * 2.0 ** min(failures - 1, _MAX_DOUBLINGS), max(self.most,
                                                                              self.first))

    def after(self, failures: int, draw: Callable[[], float] | None = None) -> float:
        """The wait after ``failures`` in a row, jitter drawn from ``draw`` (uniform in
        [0, 1), ``random.random`` by default): between ``(1 - jitter)`` and all of
        :meth:`ceiling`."""
        wait = self.ceiling(failures)
        if not self.jitter or not wait:
            return wait
        u = (draw or random.random)()
        return wait * (1.0 - self.jitter + self.jitter * u)


# --- the settings, in one place -----------------------------------------------------------

EJECTION_JITTER = 0.1
"""A replica ejected for failed requests: ``readmitAfterSeconds`` (the config) doubling
up to ``EJECTION_MAX_FACTOR`` times it; a tenth of each wait drawn at random."""
EJECTION_MAX_FACTOR = 8.0

ADAPTER_AVOIDANCE = Backoff(first=5.0, most=300.0, jitter=0.1)
"""A (replica, adapter) pair that failed: avoided 5 s, doubling up to 5 minutes."""

CATALOG_FEED = Backoff(first=1.0, most=5.0, jitter=0.5)
"""The catalog's event feed could not be read: the next try after 1 s, up to 5 s (a
change made while it was away reaches the router within that of its return)."""

OUTBOX_JITTER = 0.5
"""Usage and decision batches the catalog did not take: the flush interval doubling
up to the outbox's ``backoff_max`` (settings), between half and all of each wait."""


def ejection(readmit_after: float, readmit_after_max: float | None = None) -> Backoff:
    """The ejection back-off for a config's ``readmitAfterSeconds``."""
    most = (EJECTION_MAX_FACTOR * readmit_after if readmit_after_max is None
            else max(readmit_after_max, readmit_after))
    return Backoff(readmit_after, most, EJECTION_JITTER)


def outbox(interval: float, backoff_max: float) -> Backoff:
    """The back-off of an outbox flushing every ``interval`` seconds."""
    return Backoff(interval, max(backoff_max, 0.0), OUTBOX_JITTER)
