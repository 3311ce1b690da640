"""``mol-affinity``, the default: adapter affinity with rendezvous homes and bounded load.

Each adapter has a fixed preference order over the endpoints (rendezvous hashing of
its name), the same in every router replica. A request goes to:

1. the least loaded endpoint where the adapter is resident (running there per
   ``vllm:lora_requests_info``, or sent there lately by this router) whose load is
   under the bound, so an adapter already loaded is reused and no slot is spent;
2. else the first endpoint in the adapter's order, among the first ``candidates``
   under the bound, that has a free adapter slot (a new copy, no wait for a slot);
3. else the first endpoint in the adapter's order under the bound.

The bound is ``load_factor`` x the mean load after this request, plus ``slack``
(consistent hashing with bounded loads): an endpoint over it is skipped, so a hot
adapter's traffic spills down its own order onto its next homes and spreads over just
as many engines as its load needs, while every router replica, seeing the same
engine metrics, walks the same order and picks the same few engines. Base-model
requests go to the least loaded endpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mol_router.policy.base import Candidates, EligibleFirst, Knobs
from mol_router.policy.hashing import ranking
from mol_router.policy.stats import EngineStats, RouteRequest


def has_free_slot(s: EngineStats, adapter: str) -> bool:
    """The adapter could start now without waiting for another adapter to drain."""
    return s.max_lora <= 0 or adapter in s.running_adapters or len(s.running_adapters) < s.max_lora


class MolAffinity(EligibleFirst):
    """``mol-affinity``: see the module docstring."""

    name = "mol-affinity"
    KNOBS = ("load_factor", "slack", "candidates")

    def __init__(self, knobs: Mapping[str, Any] | None = None) -> None:
        k = Knobs(self.name, knobs or {}, self.KNOBS)
        self.load_factor = k.get("load_factor", float, 1.25, 1.0, 100.0)
        self.slack = k.get("slack", float, 2.0, 0.0, 1_000_000.0)
        self.candidates = k.get("candidates", int, 2, 1, 1_000_000)

    def bound(self, loads: Sequence[int]) -> float:
        """Load an endpoint must stay under to take the request."""
        mean = (sum(loads) + 1) / len(loads)
        return math.ceil(self.load_factor * mean + self.slack)

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        if len(candidates) == 1:  # every rule below would pick it
            return candidates[0][0]
        by_name = dict(candidates)
        adapter = request.adapter
        order = ranking(adapter if adapter is not None else "", list(by_name))
        if adapter is None:
            return min(order, key=lambda e: by_name[e].load)
        bound = self.bound([s.load for s in by_name.values()])
        under = [e for e in order if by_name[e].load < bound]
        if not under:  # everything is busy: least loaded, earliest home on ties
            return min(order, key=lambda e: by_name[e].load)
        resident = [e for e in under if adapter in by_name[e].resident]
        if resident:
            return min(resident, key=lambda e: by_name[e].load)
        for e in under[: self.candidates]:
            if has_free_slot(by_name[e], adapter):
                return e
        return under[0]
