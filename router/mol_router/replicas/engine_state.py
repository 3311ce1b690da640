"""One engine replica as the tracker sees it (:mod:`mol_router.replicas.tracker`).

Plain state, no I/O: what was scraped from it, what this router has in flight there,
its estimated adapter slots, and where it stands in outlier detection.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from mol_router.replicas.engine_metrics import EngineMetrics
from mol_router.replicas.policy.interface import EngineStats

DEFAULT_SLOTS = 4
"""Adapter slots assumed for an engine that has not reported ``max_lora`` yet."""


def remember(lru: OrderedDict[str, None], name: str, capacity: int, keep: Iterable[str]) -> bool:
    """Touch ``name`` in ``lru`` (most recent last), evicting the oldest entries not in
    ``keep`` beyond ``capacity``; True when ``name`` was not there before."""
    new = name not in lru
    lru[name] = None
    lru.move_to_end(name)
    if len(lru) > capacity:
        pinned = set(keep)
        for old in [n for n in lru if n not in pinned][: len(lru) - capacity]:
            del lru[old]
    return new


@dataclass(slots=True)
class Engine:
    metrics: EngineMetrics = field(default_factory=EngineMetrics)
    inflight: int = 0
    sent: OrderedDict[str, None] = field(default_factory=OrderedDict)
    in_slots: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Estimated GPU slot contents, least recently used first: adapters sent there or
    seen running, touched again when one of this router's requests on them ends."""
    active: dict[str, int] = field(default_factory=dict)
    """This router's requests in flight there, by adapter: theirs cannot be evicted."""
    probed: bool = False
    """At least one health check passed: until then the engine is not ready."""
    failures: int = 0
    ejected_until: float | None = None
    down: bool = False
    """Ejected because it did not answer at all: re-admitted by the first passing check."""
    ejections: int = 0
    """Ejections since the last success: the next back-off doubles with each."""
    backoff: float = 0.0
    """The current ejection's back-off: a failed health check starts it over."""
    # Frozen views reused across snapshots until their source changes, so the stats
    # rebuilt on every request's begin and end copy no adapter sets.
    running_view: frozenset[str] = frozenset()
    sent_view: frozenset[str] = frozenset()
    slots_view: tuple[str, ...] = ()
    pending: frozenset[str] = frozenset()
    """The adapters in ``active``, as the stats show them."""
    # Stats differ between a request's begin and end only in ``inflight`` and
    # ``pending``: keep them by those until anything else changes (``changed``), so
    # most refreshes build none.
    by_inflight: dict[tuple[int, frozenset[str]], EngineStats] = field(default_factory=dict)

    def changed(self) -> None:
        """Something other than ``inflight`` that the stats show has changed."""
        self.by_inflight.clear()

    @property
    def slots(self) -> int:
        return self.metrics.max_lora or DEFAULT_SLOTS

    @property
    def ready(self) -> bool:
        return self.probed and self.ejected_until is None

    def stats(self) -> EngineStats:
        key = (self.inflight, self.pending)
        stats = self.by_inflight.get(key)
        if stats is None:
            m = self.metrics
            stats = self.by_inflight[key] = EngineStats(
                m.running, m.waiting, m.kv_cache_usage, m.max_lora, self.running_view,
                self.sent_view, self.inflight, self.probed and self.ejected_until is None,
                self.pending, self.slots_view,
            )
        return stats
