"""A lower bound on adapter loads for a recorded workload, whatever the schedule.

The bound is computed on the trace itself (its sample path), not on an expectation
of its rates, so it holds for stationary, drifting, bursty and overloaded traffic
alike, and for every schedule, including one that knows the future. The model it
relaxes:

- the fleet has ``slots`` GPU adapter slots (replicas x ``max_loras``), pooled: an
  adapter may sit in any slot, so a real fleet can only do worse;
- a load puts an adapter into a slot and takes at least ``load_s`` of that slot;
- request ``i`` (adapter ``a``) starts within ``wait_s`` of its arrival on a slot
  holding ``a`` and keeps it for at least ``service_s`` (its own tokens, no queueing);
  a slot serves at most ``max_num_seqs`` requests at once.

Two bounds follow, each valid; the floor is the larger:

1. **Belady** (``wait_s == 0`` only): with requests served as they arrive, the fleet is a
   cache of ``slots`` adapters and a load is a miss; Belady's rule (evict the adapter
   needed again farthest in the future) gives the fewest misses any cache can have.
2. **Slot time**: an adapter loaded ``k`` times holds a slot for at least
   ``k * load_s + max(concurrency, span)`` seconds, where *concurrency* is its requests'
   total service time over ``max_num_seqs`` (the exact counterpart of "extra copies for
   busy adapters": a slot serves at most ``max_num_seqs`` at once) and *span* is the
   time its ``k`` residencies must cover: the union of its service intervals less the
   ``k - 1`` largest holes, less ``wait_s`` per residency. Every ``k`` costs one load;
   slot time is convex in ``k``, so adding loads where they save the most slot time,
   until everything fits in ``slots`` x the window, gives the fewest loads exactly for
   this relaxation. It is computed per window (traffic that changes gets the bound of
   each of its stretches, not of its average), less the residencies that may carry
   over from the window before, and summed; and it says **infeasible** when even one
   load per request cannot fit, or the requests' service time exceeds the batches'.

The floor is a bound, not a target: a router decides without knowing the future, so
no online policy reaches it. For stationary Poisson traffic :func:`online_floor` gives
the bound for routers that do not (in expectation, from the trace's rates): requests see
their adapter resident a fraction ``f`` of the time (Poisson arrivals see time averages),
so an adapter at rate ``r`` needs ``r (1 - f) / (1 + r wait)`` loads a second (a load
deferred by up to ``wait`` serves the requests that arrive meanwhile), each holding a
slot for the load and a request; its busy periods need ``E[ceil(N / max_num_seqs)]``
copies, ``N ~ Poisson(r * service)`` requests in service (exact at no wait, the mean
``r * service / max_num_seqs`` otherwise). Residency goes to the highest effective rates
first. It is an expectation, so one trace may land a little under it; on traffic that
changes it is not a bound at all (``load_floor`` is).

``tests/router/test_floor.py`` checks ``load_floor`` against every policy in the repo and
against hand-made schedules on stationary, drifting, bursty and overloaded workloads.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from _workload import Arrival

DEFAULT_WINDOWS_S = (10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True, slots=True)
class Fleet:
    """What the floor knows of the fleet: slots, batch size, and the cheapest load."""

    slots: int
    max_num_seqs: int
    load_s: float
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class Floor:
    """Adapter loads no schedule can beat, or why no schedule fits at all."""

    loads: int
    requests: int
    wait_s: float
    infeasible: str | None = None
    """Set when no schedule can serve the workload within ``wait_s``: the reason."""
    belady: int | None = None
    """Belady's misses (``wait_s == 0`` only)."""
    slot_time: int = 0
    """The slot-time bound."""

    @property
    def per_1000(self) -> float | None:
        if self.infeasible is not None:
            return None
        return 1000.0 * self.loads / max(self.requests, 1)

    def describe(self) -> str:
        if self.infeasible is not None:
            return f"infeasible within {self.wait_s:g} s wait ({self.infeasible})"
        return f"{self.per_1000:.1f} per 1,000 (wait <= {self.wait_s:g} s)"


ServiceFn = Callable[[Arrival], float]


def belady_misses(arrivals: Sequence[Arrival], slots: int) -> int:
    """Fewest adapter loads of a cache of ``slots`` adapters serving ``arrivals`` in
    order (Belady's MIN; base-model requests need no slot)."""
    seq = [a.adapter for a in sorted(arrivals, key=lambda a: a.t) if a.adapter is not None]
    if not seq:
        return 0
    if slots <= 0:
        return len(seq)
    nxt = [math.inf] * len(seq)
    seen: dict[str, int] = {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i] = seen.get(seq[i], math.inf)
        seen[seq[i]] = i
    resident: dict[str, float] = {}  # adapter -> its next use
    heap: list[tuple[float, str]] = []  # (-next use, adapter), stale entries skipped
    misses = 0
    for i, name in enumerate(seq):
        if name not in resident:
            misses += 1
            if len(resident) >= slots:
                while True:
                    neg, victim = heapq.heappop(heap)
                    if resident.get(victim) == -neg:
                        del resident[victim]
                        break
        resident[name] = nxt[i]
        heapq.heappush(heap, (-nxt[i], name))
    return misses


@dataclass(frozen=True, slots=True)
class _Adapter:
    concurrency: float  # total service time / max_num_seqs
    span: float  # union of service intervals, holes included
    holes: tuple[float, ...]  # holes of that union, largest first
    requests: int
    min_service: float


def _adapter_facts(times: list[tuple[float, float]], max_num_seqs: int) -> _Adapter:
    times.sort()
    holes: list[float] = []
    end = times[0][0] + times[0][1]
    for t, s in times[1:]:
        if t > end:
            holes.append(t - end)
        end = max(end, t + s)
    holes.sort(reverse=True)
    return _Adapter(
        concurrency=sum(s for _, s in times) / max_num_seqs,
        span=end - times[0][0],
        holes=tuple(holes),
        requests=len(times),
        min_service=min(s for _, s in times),
    )


def _slot_time(a: _Adapter, k: int, load_s: float, wait_s: float, cut: float) -> float:
    """Least slot time of ``a`` with ``k`` loads; ``cut`` is the sum of its k-1 largest holes."""
    span = max(k * a.min_service, a.span - cut - k * wait_s)
    return k * load_s + max(a.concurrency, span)


def _window_bound(
    window: Sequence[Arrival], fleet: Fleet, service: ServiceFn, wait_s: float, budget: float
) -> tuple[int, str | None]:
    """Fewest loads covering ``window``'s requests within ``budget`` slot-seconds."""
    by_adapter: dict[str, list[tuple[float, float]]] = defaultdict(list)
    batch_time = 0.0
    for a in window:
        s = service(a)
        batch_time += s
        if a.adapter is not None:
            by_adapter[a.adapter].append((a.t, s))
    if not by_adapter:
        return 0, None
    facts = [_adapter_facts(v, fleet.max_num_seqs) for v in by_adapter.values()]
    loads = [1] * len(facts)
    cuts = [0.0] * len(facts)
    costs = [_slot_time(f, 1, fleet.load_s, wait_s, 0.0) for f in facts]
    total = sum(costs)
    heap: list[tuple[float, int]] = []

    def push(i: int) -> None:
        f, k = facts[i], loads[i]
        if k >= f.requests:
            return
        hole = f.holes[k - 1] if k - 1 < len(f.holes) else 0.0
        saving = costs[i] - _slot_time(f, k + 1, fleet.load_s, wait_s, cuts[i] + hole)
        if saving > 0:
            heapq.heappush(heap, (-saving, i))

    for i in range(len(facts)):
        push(i)
    while total > budget:
        if not heap:
            return sum(loads), (
                f"the adapters need {total:.0f} slot-seconds in a stretch of traffic "
                f"where the fleet has {budget:.0f}"
            )
        _, i = heapq.heappop(heap)
        f, k = facts[i], loads[i]
        cuts[i] += f.holes[k - 1] if k - 1 < len(f.holes) else 0.0
        loads[i] = k + 1
        new = _slot_time(f, k + 1, fleet.load_s, wait_s, cuts[i])
        total -= costs[i] - new
        costs[i] = new
        push(i)
    return sum(loads), None


def _expected_copies(mean: float, max_num_seqs: int) -> float:
    """E[ceil(N / max_num_seqs)] for N ~ Poisson(mean), summed until the tail is tiny."""
    if mean <= 0:
        return 0.0
    total, n, p = 0.0, 0, math.exp(-mean)
    cdf = p
    while cdf < 1 - 1e-12 or n <= mean:
        n += 1
        p *= mean / n
        cdf += p
        total += p * math.ceil(n / max_num_seqs)
        if n > mean + 50 * math.sqrt(mean) + 50:
            break
    return total


def online_floor(
    arrivals: Sequence[Arrival], fleet: Fleet, service_s: float, *, wait_s: float = 0.0
) -> Floor:
    """Expected adapter loads of the best router that does not know the future, on
    stationary Poisson traffic with the trace's rates (see the module docstring)."""
    counts: dict[str, int] = defaultdict(int)
    for a in arrivals:
        if a.adapter is not None:
            counts[a.adapter] += 1
    n = len(arrivals)
    span = max((a.t for a in arrivals), default=0.0) - min((a.t for a in arrivals), default=0.0)
    if not counts or span <= 0:
        return Floor(0, n, wait_s)
    hold = fleet.load_s + service_s
    rows = []
    budget = float(fleet.slots)
    for c in counts.values():
        r = c / span
        eff = r / (1 + r * wait_s)
        mean = r * service_s
        if wait_s == 0:
            extra = _expected_copies(mean, fleet.max_num_seqs) - (1 - math.exp(-mean))
        else:
            extra = max(mean / fleet.max_num_seqs - (1 - math.exp(-mean)), 0.0)
        f_min = hold * eff / (1 + hold * eff)
        budget -= extra + f_min
        rows.append((eff, f_min))
    if budget < 0:
        return Floor(0, n, wait_s, infeasible=(
            f"the adapters' least residency needs {fleet.slots - budget:.1f} slots of "
            f"{fleet.slots}"))  # fmt: skip
    loads = 0.0
    for eff, f_min in sorted(rows, reverse=True):
        add = min(budget, 1.0 - f_min)
        budget -= add
        loads += eff * (1.0 - f_min - add)
    # every adapter's first load comes on top of the steady state's
    return Floor(max(round(loads * span), len(counts)), n, wait_s)


def load_floor(
    arrivals: Sequence[Arrival],
    fleet: Fleet,
    service: ServiceFn,
    *,
    wait_s: float = 0.0,
    windows_s: Sequence[float] = DEFAULT_WINDOWS_S,
) -> Floor:
    """The floor on adapter loads for ``arrivals`` (see the module docstring).

    ``service(a)`` must not exceed request ``a``'s time once running on an idle
    replica (its first token plus the rest at the engine's fastest pace), ``fleet.load_s``
    the cheapest load (a copy from host memory where there is a host tier).
    """
    if wait_s < 0 or fleet.slots < 0 or fleet.max_num_seqs < 1 or fleet.load_s < 0:
        raise ValueError("wait_s, slots and load_s must be >= 0, max_num_seqs >= 1")
    ordered = sorted(arrivals, key=lambda a: a.t)
    n = len(ordered)
    if n == 0:
        return Floor(0, 0, wait_s)
    if fleet.slots == 0 and any(a.adapter is not None for a in ordered):
        return Floor(0, n, wait_s, infeasible="the fleet has no adapter slots")
    start, stop = ordered[0].t, ordered[-1].t
    longest = max(service(a) for a in ordered)
    # Residencies of the window before that can still serve this one's requests.
    carry = fleet.slots * (1 + math.ceil(wait_s / max(min(service(a) for a in ordered), 1e-9)))
    best = 0
    for length in (*windows_s, math.inf):
        if length != math.inf and length >= stop - start:
            continue
        total = 0
        lo = 0
        first = True
        while lo < n:
            edge = ordered[lo].t + length if length != math.inf else math.inf
            hi = lo
            while hi < n and ordered[hi].t < edge:
                hi += 1
            window = ordered[lo:hi]
            stretch = (window[-1].t - window[0].t) if length == math.inf else length
            slack = fleet.load_s + wait_s + longest
            busy = sum(service(a) for a in window)
            lanes = fleet.replicas * fleet.max_num_seqs
            if busy > lanes * (stretch + slack):
                return Floor(0, n, wait_s, infeasible=(
                    f"{busy:.0f} s of service in {stretch:.0f} s exceeds the fleet's "
                    f"{lanes} batch lanes"))  # fmt: skip
            budget = fleet.slots * (stretch + slack) + (0 if first else carry * fleet.load_s)
            loads, why = _window_bound(window, fleet, service, wait_s, budget)
            if why is not None:
                return Floor(0, n, wait_s, infeasible=why)
            total += loads if first else max(0, loads - carry)
            first = False
            lo = hi
        best = max(best, total)
    belady = belady_misses(ordered, fleet.slots) if wait_s == 0 else None
    return Floor(max(best, belady or 0), n, wait_s, belady=belady, slot_time=best)
