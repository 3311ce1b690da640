"""Adapter-blind baselines: round-robin and least-loaded."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from mol_router.policy.base import eligible
from mol_router.policy.stats import EngineStats, RouteRequest


class RoundRobin:
    """Each request to the next eligible endpoint in turn (the one counter it keeps)."""

    name = "round-robin"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def pick(
        self,
        endpoints: Sequence[str],
        stats: Mapping[str, EngineStats],
        request: RouteRequest,
        exclude: frozenset[str] = frozenset(),
    ) -> str | None:
        candidates = eligible(endpoints, stats, exclude)
        if not candidates:
            return None
        return candidates[next(self._counter) % len(candidates)][0]


class LeastLoaded:
    """The endpoint with the fewest queued requests (scraped running + waiting, or this
    router's in-flight count when higher); ties go round-robin so idle fleets spread."""

    name = "least-loaded"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def pick(
        self,
        endpoints: Sequence[str],
        stats: Mapping[str, EngineStats],
        request: RouteRequest,
        exclude: frozenset[str] = frozenset(),
    ) -> str | None:
        candidates = eligible(endpoints, stats, exclude)
        if not candidates:
            return None
        n = len(candidates)
        start = next(self._counter) % n
        best = min(
            range(n),
            key=lambda i: (candidates[i][1].load, candidates[i][1].kv_cache_usage, (i - start) % n),
        )
        return candidates[best][0]
