"""Baseline: the Gateway API Inference Extension's ``lora-affinity-scorer``.

Re-implemented from its published rule so it can be compared on the same traffic.
Per endpoint: 1.0 when the adapter is active there, 0.8 when the endpoint can take
one more adapter (active + waiting adapters < max), 0.6 when the adapter is waiting
there, 0 when the endpoint is full. It is combined, as in the project's default
scheduling profile, with the ``queue-scorer`` (min-max normalised waiting queue), the
``kv-cache-utilization-scorer`` (1 - usage) and the ``prefix-cache-scorer`` (the share
of the prompt's prefix blocks believed cached on the endpoint, estimated from what was
sent where: this router's prefix index stands for the scorer's own per-server LRU),
summed by weight (2, 2, 1 and 3), best score wins and ties are broken at random.

vLLM publishes the same adapter names in ``running_lora_adapters`` and
``waiting_lora_adapters``, so, fed the metric as it is, the rule counts each running
adapter twice when checking for a free slot; this re-implementation does the same.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from mol_router.replicas.policy.base import (
    Candidates,
    EligibleFirst,
    Knobs,
    kv_cache_scores,
    max_score,
    queue_scores,
)
from mol_router.replicas.policy.interface import EngineStats, FleetStats, RouteRequest
from mol_router.replicas.policy.prefix import PrefixIndex


def lora_affinity_score(stats: EngineStats, adapter: str | None) -> float:
    """The scorer's table for one endpoint (base-model requests score like a free slot
    only when one is free, as the adapter name is simply never listed)."""
    active = stats.running_adapters
    waiting = stats.running_adapters  # vLLM lists the same names in both labels
    if adapter is not None and adapter in active:
        return 1.0
    if len(active) + len(waiting) < stats.max_lora:
        return 0.8
    if adapter is not None and adapter in waiting:
        return 0.6
    return 0.0


class GieLoraAffinity(EligibleFirst):
    """``gie-lora-affinity``: queue + KV-cache + lora-affinity scorers, max-score pick."""

    name = "gie-lora-affinity"
    KNOBS = ("queue_weight", "kv_cache_weight", "lora_weight", "prefix_weight", "seed")

    def __init__(self, knobs: Mapping[str, Any] | None = None) -> None:
        k = Knobs(self.name, knobs or {}, self.KNOBS)
        self.weights = (
            k.get("queue_weight", float, 2.0, 0.0, 100.0),
            k.get("kv_cache_weight", float, 2.0, 0.0, 100.0),
            k.get("lora_weight", float, 1.0, 0.0, 100.0),
        )
        self.prefix_weight = k.get("prefix_weight", float, 3.0, 0.0, 100.0)
        self._rng = random.Random(k.get("seed", int, 0, 0, 2**63))

    def choose_in(
        self, candidates: Candidates, request: RouteRequest, stats: Mapping[str, EngineStats]
    ) -> str | None:
        prefix = stats.prefix if isinstance(stats, FleetStats) else None
        return self._pick(candidates, request, prefix)

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        return self._pick(candidates, request, None)

    def _pick(
        self, candidates: Candidates, request: RouteRequest, prefix: PrefixIndex | None
    ) -> str | None:
        adapter = request.adapter
        qw, kw, lw = self.weights
        scorers = [
            (qw, queue_scores),
            (kw, kv_cache_scores),
            (lw, lambda cs: [lora_affinity_score(s, adapter) for _, s in cs]),
        ]
        if prefix is not None and request.prefix and self.prefix_weight:
            total = len(request.prefix)
            depth = prefix.matches(request.prefix, [e for e, _ in candidates])
            scorers.append((self.prefix_weight, lambda cs: [depth[e] / total for e, _ in cs]))
        return max_score(candidates, scorers, self._rng)
