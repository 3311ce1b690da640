"""Adapters that fail to load on one replica, avoided there for a while.

An engine whose copy of an adapter cannot be loaded (a broken file in its cache, its
catalog unreachable from that pod) answers every request for that adapter with the
same error while its other adapters, and the other replicas, serve fine. Ejecting the
replica would cost every other adapter; retrying there costs each request a failed
attempt. So the pair (replica, adapter) is avoided: for ``retry_after`` seconds after
a first failure, doubling with each failure in a row up to ``retry_max``, cleared by one
success there. Bounded: past ``limit`` pairs the adapter failing longest ago is
forgotten (it is then tried again, which is what an unknown pair gets anyway).
"""

from __future__ import annotations

import time

RETRY_AFTER = 5.0
RETRY_MAX = 300.0
LIMIT = 10_000


class AdapterFailures:
    def __init__(self, retry_after: float = RETRY_AFTER, retry_max: float = RETRY_MAX,
                 limit: int = LIMIT) -> None:
        self.retry_after = retry_after
        self.retry_max = max(retry_max, retry_after)
        self.limit = limit
        self._failing: dict[str, dict[str, tuple[int, float]]] = {}
        """adapter -> {endpoint: (failures in a row, avoided until)}"""
        self._pairs = 0

    def failed(self, endpoint: str, adapter: str) -> float:
        """Book a failure; the seconds the pair is now avoided."""
        failing = self._failing.setdefault(adapter, {})
        count, _ = failing.get(endpoint, (0, 0.0))
        if count == 0:
            self._pairs += 1
        wait = min(self.retry_after * float(2 ** min(count, 30)), self.retry_max)
        failing[endpoint] = (count + 1, time.monotonic() + wait)
        while self._pairs > self.limit:
            oldest = next(iter(self._failing))
            self._pairs -= len(self._failing.pop(oldest))
        return wait

    def cleared(self, endpoint: str, adapter: str) -> None:
        """A success of ``adapter`` on ``endpoint`` (the common case: a dict miss)."""
        if not self._failing:
            return
        failing = self._failing.get(adapter)
        if failing is not None and failing.pop(endpoint, None) is not None:
            self._pairs -= 1
            if not failing:
                del self._failing[adapter]

    def avoid(self, adapter: str | None) -> frozenset[str]:
        """The replicas where ``adapter`` failed and its back-off has not passed."""
        if adapter is None or not self._failing:
            return frozenset()
        failing = self._failing.get(adapter)
        if not failing:
            return frozenset()
        now = time.monotonic()
        return frozenset(e for e, (_, until) in failing.items() if until > now)

    def forget(self, endpoint: str) -> None:
        """The replica left, or came back as a new process: its failures are history."""
        for adapter in [a for a, f in self._failing.items() if endpoint in f]:
            failing = self._failing[adapter]
            del failing[endpoint]
            self._pairs -= 1
            if not failing:
                del self._failing[adapter]

    def avoided(self) -> int:
        """Pairs avoided now (``mol_router_avoided_adapter_replicas``)."""
        now = time.monotonic()
        return sum(1 for failing in self._failing.values()
                   for _, until in failing.values() if until > now)

    def listing(self) -> list[dict[str, object]]:
        """Every remembered pair, for ``/status``."""
        now = time.monotonic()
        return [{"endpoint": e, "adapter": a, "failures": count,
                 "avoided_for_s": round(max(until - now, 0.0), 1)}
                for a, failing in self._failing.items()
                for e, (count, until) in failing.items()]
