"""A lower bound on adapter loads for a workload, whatever the routing policy.

A load brings an adapter into a GPU slot for at least ``hold_s`` (the load plus one
request), and a request needs a load whenever it arrives while its adapter is in no
slot anywhere (unless held back to share a later load, at a cost in TTFT). For an
adapter requested at rate ``r`` (Poisson) and resident somewhere a fraction ``f`` of
the time, that is at least ``r * (1 - f)`` loads a second, holding at least
``max(f, hold_s * r * (1 - f))`` slots. The fleet has ``slots`` slots, less the extra
copies the busiest adapters need for their batch load. Filling the budget greedily,
most requested adapter first, minimises the loads (each unit of residency saves ``r``
loads a second): the floor assumes every slot is busy all the time, which no real
schedule reaches.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from _workload import Arrival


def load_floor(
    arrivals: Sequence[Arrival], slots: int, max_num_seqs: int, service_s: float, load_s: float
) -> float:
    """Adapter loads per 1,000 requests no policy that starts requests promptly can
    beat on this workload (``service_s``: a request's time once running)."""
    counts = Counter(a.adapter for a in arrivals if a.adapter is not None)
    span = max((a.t for a in arrivals), default=0.0)
    if not counts or span <= 0:
        return 0.0
    rates = sorted((n / span for n in counts.values()), reverse=True)
    hold = load_s + service_s
    extra = sum(max(math.ceil(r * service_s / max_num_seqs) - 1, 0) for r in rates)
    floor_f = [hold * r / (1 + hold * r) for r in rates]
    budget = slots - extra - sum(floor_f)
    loads = 0.0
    for r, f in zip(rates, floor_f, strict=True):
        add = min(max(budget, 0.0), 1.0 - f)
        budget -= add
        loads += r * (1.0 - f - add)
    return 1000.0 * loads * span / len(arrivals)
