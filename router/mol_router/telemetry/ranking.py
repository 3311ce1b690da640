"""Which adapters get their own metric labels: the top K by recent traffic.

A fleet may serve a million adapters; a label per adapter would give Prometheus a
million series per family. So each request's adapter is counted in a decayed table
(each request weighs ``2 ** (t / half_life)``, t in seconds, so a count halves every
``half_life`` seconds without touching old entries), and only the ``k`` adapters with
the largest counts are *members*, labelled by name; the rest are labelled
``other``. The table keeps at most ``4 k`` candidates: past that the rarest half is
forgotten, as :class:`mol_router.replicas.policy.interface.Demand` does.

An adapter becomes a member once it has had a second request while remembered (one
request alone never earns a label, so a stream of one-off adapters labels none); it
joins at once while members are fewer than ``k``, else at the next re-rank. A
re-rank runs every ``k`` requests and when the table overflows: the ``k`` largest
eligible counts win, members counting 1.5 times (so two adapters of nearly equal
traffic do not swap labels back and forth). Per request that is a few dict
operations; a re-rank is a partial sort of at most ``4 k`` entries, so the amortized
cost is about ``4 log k`` comparisons. Re-ranks return the adapters that left, so the
caller can remove their series.

Pure: no I/O, the clock is the caller's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

OTHER = "other"
"""The label of every adapter outside the top K (adapter names hold a ``/``)."""

_KEEP_BONUS = 1.5
_RESCALE_AT = 1e150


class TopAdapters:
    __slots__ = ("_counts", "_epoch", "_half_life", "_limit", "_on_leave", "_repeat",
                 "_since_rank", "k", "members")

    def __init__(self, k: int, half_life: float = 300.0,
                 on_leave: Callable[[str], None] | None = None) -> None:
        if k < 0:
            raise ValueError("k must be >= 0")
        if half_life <= 0:
            raise ValueError("half_life must be > 0 seconds")
        self.k = k
        self.members: set[str] = set()
        self._half_life = half_life
        self._limit = max(4 * k, 16)
        self._counts: dict[str, float] = {}
        self._repeat: set[str] = set()  # remembered adapters with two requests or more
        self._epoch: float | None = None
        self._since_rank = 0
        self._on_leave = on_leave or (lambda _adapter: None)

    def add(self, adapter: str, now: float) -> None:
        """Count one request for ``adapter`` at ``now`` (seconds, monotonic)."""
        if self._epoch is None:
            self._epoch = now
        weight = 2.0 ** ((now - self._epoch) / self._half_life)
        counts = self._counts
        before = counts.get(adapter)
        counts[adapter] = weight if before is None else before + weight
        if before is not None and adapter not in self.members:
            self._repeat.add(adapter)
            if len(self.members) < self.k:
                self.members.add(adapter)
        if weight > _RESCALE_AT:
            self._rescale(now)
        self._since_rank += 1
        if len(counts) > self._limit:
            self._counts = dict(heapq.nlargest(self._limit // 2, counts.items(), key=_count))
            self._repeat &= self._counts.keys()
            self._rank()
        elif self._since_rank >= self.k > 0:
            self._rank()

    def label(self, adapter: str) -> str:
        """The label ``adapter``'s series carry now."""
        return adapter if adapter in self.members else OTHER

    def _rank(self) -> None:
        self._since_rank = 0
        members, counts = self.members, self._counts
        scored = [(counts.get(a, 0.0) * (_KEEP_BONUS if a in members else 1.0), a)
                  for a in members | self._repeat]
        top = {a for c, a in heapq.nlargest(self.k, scored) if c > 0.0}
        for gone in members - top:
            self._on_leave(gone)
        self.members = top

    def _rescale(self, now: float) -> None:
        assert self._epoch is not None
        w = 2.0 ** ((now - self._epoch) / self._half_life)
        self._counts = {a: c / w for a, c in self._counts.items() if c / w > 1e-12}
        self._repeat &= self._counts.keys()
        self._epoch = now


def _count(item: tuple[str, float]) -> float:
    return item[1]
