"""Adapters that fail to load on one replica, avoided there for a while.

An engine whose copy of an adapter cannot be loaded (a broken file in its cache, its
catalog unreachable from that pod) answers every request for that adapter with the
same error while its other adapters, and the other replicas, serve fine. Ejecting the
replica would cost every other adapter; retrying there costs each request a failed
attempt. So the pair (replica, adapter) is avoided: for ``retry_after`` seconds after
a first failure, doubling with each failure in a row up to ``retry_max``
(:data:`mol_router.backoff.ADAPTER_AVOIDANCE`), cleared by one success there. Bounded:
past ``limit`` pairs the adapter failing longest ago is forgotten (it is then tried
again, which is what an unknown pair gets anyway).

Engines do not always say "could not be loaded": a broken adapter can as well make
every request for it answer 500. :meth:`AdapterFailures.confined` tells such a 5xx
from a failing replica: the error is the pair's when another adapter succeeded on that
replica lately (within ``CONFINED_WINDOW``) and after the last 5xx of any other adapter
there. A replica failing for everything stops having such successes, so its second
adapter's 5xx already counts against it.
"""

from __future__ import annotations

import time

from mol_router.backoff import ADAPTER_AVOIDANCE, Backoff

RETRY_AFTER = ADAPTER_AVOIDANCE.first
RETRY_MAX = ADAPTER_AVOIDANCE.most
LIMIT = 10_000
CONFINED_WINDOW = 30.0
"""Seconds a success of another adapter counts as "its other adapters succeed there"."""
_RECENT = 4  # adapters remembered per replica, per kind of outcome: the latest few


class AdapterFailures:
    def __init__(self, retry_after: float = RETRY_AFTER, retry_max: float = RETRY_MAX,
                 limit: int = LIMIT) -> None:
        self.retry_after = retry_after
        self.retry_max = max(retry_max, retry_after)
        self.backoff = Backoff(retry_after, self.retry_max, ADAPTER_AVOIDANCE.jitter)
        self.limit = limit
        self._failing: dict[str, dict[str, tuple[int, float]]] = {}
        """adapter -> {endpoint: (failures in a row, avoided until)}"""
        self._pairs = 0
        self._ok: dict[str, dict[str, float]] = {}
        """endpoint -> {adapter: its last success there}, the latest few adapters"""
        self._errors: dict[str, dict[str, float]] = {}
        """endpoint -> {adapter: its last 5xx there}, the latest few adapters"""

    def failed(self, endpoint: str, adapter: str) -> float:
        """Book a failure; the seconds the pair is now avoided."""
        failing = self._failing.setdefault(adapter, {})
        count, _ = failing.get(endpoint, (0, 0.0))
        if count == 0:
            self._pairs += 1
        wait = self.backoff.after(count + 1)
        failing[endpoint] = (count + 1, time.monotonic() + wait)
        while self._pairs > self.limit:
            oldest = next(iter(self._failing))
            self._pairs -= len(self._failing.pop(oldest))
        return wait

    def cleared(self, endpoint: str, adapter: str, now: float | None = None) -> None:
        """A success of ``adapter`` on ``endpoint``: noted (what :meth:`confined` compares a
        5xx against), and the pair's failures cleared (usually a dict miss)."""
        _note(self._ok, endpoint, adapter, time.monotonic() if now is None else now)
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

    def confined(self, endpoint: str, adapter: str, now: float | None = None) -> bool:
        """Book a 5xx answer of ``endpoint`` for ``adapter``; True when it is confined to
        that adapter (the pair's, see the module docstring), False when it counts
        against the replica."""
        now = time.monotonic() if now is None else now
        errors = self._errors.get(endpoint)
        other_error = max((t for a, t in errors.items() if a != adapter), default=None) \
            if errors else None
        _note(self._errors, endpoint, adapter, now)
        ok = self._ok.get(endpoint)
        other_ok = max((t for a, t in ok.items() if a != adapter), default=None) \
            if ok else None
        return (other_ok is not None and now - other_ok <= CONFINED_WINDOW
                and (other_error is None or other_ok > other_error))

    def forget(self, endpoint: str) -> None:
        """The replica left, or came back as a new process: its failures are history."""
        self._ok.pop(endpoint, None)
        self._errors.pop(endpoint, None)
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


def _note(seen: dict[str, dict[str, float]], endpoint: str, adapter: str, now: float) -> None:
    """Remember ``adapter``'s latest outcome of one kind on ``endpoint`` (the latest
    ``_RECENT`` adapters per replica: enough to tell "another adapter" apart)."""
    recent = seen.get(endpoint)
    if recent is None:
        seen[endpoint] = {adapter: now}
        return
    if recent.pop(adapter, None) is None and len(recent) >= _RECENT:
        del recent[next(iter(recent))]
    recent[adapter] = now
