"""Adapter-blind baselines: round-robin and least-loaded."""

from __future__ import annotations

import itertools

from mol_router.replicas.policy.base import Candidates, EligibleFirst
from mol_router.replicas.policy.interface import RouteRequest


class RoundRobin(EligibleFirst):
    """Each request to the next eligible endpoint in turn (the one counter it keeps)."""

    name = "round-robin"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        return candidates[next(self._counter) % len(candidates)][0]


class LeastLoaded(EligibleFirst):
    """The endpoint with the fewest queued requests (scraped running + waiting, or this
    router's in-flight count when higher); ties go round-robin so idle fleets spread."""

    name = "least-loaded"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        n = len(candidates)
        start = next(self._counter) % n
        best = min(
            range(n),
            key=lambda i: (candidates[i][1].load, candidates[i][1].kv_cache_usage, (i - start) % n),
        )
        return candidates[best][0]
