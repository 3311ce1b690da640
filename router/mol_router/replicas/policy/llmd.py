"""Baselines from llm-d: its LoRA load-state rules and its precise prefix-cache scorer.

Re-implemented from the published rules so they can be compared on the same traffic.

``llmd-precise-prefix`` is llm-d's "precise prefix-cache aware" scheduling profile:
the ``precise-prefix-cache-scorer`` (an index of the engines' KV events, keyed by
block hash and LoRA name: ``policy.kvindex``) scores each pod by the blocks of the
longest prefix of the request's block hashes it holds, min-max normalised over the
pods holding the first block (the others score 0; one such pod alone scores 1); with
the ``kv-cache-utilization-scorer`` (1 - usage) and the ``queue-scorer`` (min-max
normalised waiting queue), weights 3, 2 and 2 as llm-d's guide sets them, best score
wins, ties at random. It has no LoRA scorer: adapters count only through the block
keys.

``llmd-lora-load-state`` is llm-d-router's ``lora-residency-filter`` +
``lora-load-state-scorer``:

Filter: endpoints where the adapter is resident are its homes. With no home, every
endpoint passes. If some home is not saturated (waiting queue over ``queue_threshold``
or KV cache over ``kv_cache_threshold``), only the homes pass. If every home is
saturated and ``max_replicas`` homes exist, the homes pass anyway; otherwise the
unsaturated other endpoints pass (one new copy), or the homes when none has room.

Scorer tiers: resident on the GPU 1.0, in host memory only 0.7, a free GPU slot 0.6,
full but with an idle resident to evict 0.3, full of busy adapters 0; tiers are
scaled by 1 - (placement + headroom bonus); the endpoint a rendezvous hash of the
adapter selects gets the placement bonus (0.03) unless the adapter is resident
there, and every endpoint gets the headroom bonus (0.03) times its share of free
slots. It is combined with the queue and KV-cache scorers, best score wins.

What vLLM publishes decides what the tiers can see: ``vllm:lora_requests_info``
lists only adapters with running requests, so "resident" means running, a free slot
means fewer running adapters than ``max_lora``, and the host-memory and evictable
tiers cannot be told apart from the ones around them.
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
from mol_router.replicas.policy.hashing import home
from mol_router.replicas.policy.interface import EngineStats, FleetStats, RouteRequest
from mol_router.replicas.policy.kvindex import KvBlockIndex

GPU_RESIDENT, FREE_SLOT, SATURATED = 1.0, 0.6, 0.0
PLACEMENT_BONUS = HEADROOM_BONUS = 0.03


class LlmdLoraLoadState(EligibleFirst):
    """``llmd-lora-load-state``: residency filter, then load-state + queue + KV scorers."""

    name = "llmd-lora-load-state"
    KNOBS = (
        "max_replicas", "queue_threshold", "kv_cache_threshold",
        "lora_weight", "queue_weight", "kv_cache_weight", "seed",
    )  # fmt: skip

    def __init__(self, knobs: Mapping[str, Any] | None = None) -> None:
        k = Knobs(self.name, knobs or {}, self.KNOBS)
        self.max_replicas = k.get("max_replicas", int, 2, 0, 1_000_000)
        self.queue_threshold = k.get("queue_threshold", int, 8, 0, 1_000_000)
        self.kv_cache_threshold = k.get("kv_cache_threshold", float, 0.8, 0.0, 1.0)
        self.weights = (
            k.get("lora_weight", float, 1.0, 0.0, 100.0),
            k.get("queue_weight", float, 1.0, 0.0, 100.0),
            k.get("kv_cache_weight", float, 1.0, 0.0, 100.0),
        )
        self._rng = random.Random(k.get("seed", int, 0, 0, 2**63))

    def _saturated(self, s: EngineStats) -> bool:
        if self.queue_threshold > 0 and s.waiting > self.queue_threshold:
            return True
        return self.kv_cache_threshold > 0 and s.kv_cache_usage > self.kv_cache_threshold

    def residency_filter(self, candidates: Candidates, adapter: str | None) -> Candidates:
        if adapter is None or len(candidates) <= 1:
            return candidates
        homes = [c for c in candidates if adapter in c[1].running_adapters]
        if not homes:
            return candidates
        if any(not self._saturated(s) for _, s in homes):
            return homes
        if self.max_replicas > 0 and len(homes) >= self.max_replicas:
            return homes
        spare = [c for c in candidates if c not in homes and not self._saturated(c[1])]
        return spare or homes

    @staticmethod
    def load_state_scores(candidates: Candidates, adapter: str | None) -> list[float]:
        scale = 1.0 - (PLACEMENT_BONUS + HEADROOM_BONUS)
        out = []
        if adapter is None:  # base model: share of slots not busy with an adapter
            for _, s in candidates:
                free = 1.0 if s.max_lora <= 0 else max(s.max_lora - len(s.running_adapters), 0)
                out.append((free if s.max_lora <= 0 else free / s.max_lora) * scale)
            return out
        preferred = home(adapter, [e for e, _ in candidates])
        for endpoint, s in candidates:
            used = len(s.running_adapters)
            resident = adapter in s.running_adapters
            if resident:
                tier = GPU_RESIDENT
            elif used < s.max_lora:
                tier = FREE_SLOT
            else:
                tier = SATURATED
            score = tier * scale
            if endpoint == preferred and not resident:
                score += PLACEMENT_BONUS
            if s.max_lora > 0 and used < s.max_lora:
                score += HEADROOM_BONUS * (s.max_lora - used) / s.max_lora
            out.append(score)
        return out

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        adapter = request.adapter
        lw, qw, kw = self.weights
        return max_score(
            self.residency_filter(candidates, adapter),
            [
                (lw, lambda cs: self.load_state_scores(cs, adapter)),
                (qw, queue_scores),
                (kw, kv_cache_scores),
            ],
            self._rng,
        )


def precise_prefix_scores(
    candidates: Candidates, request: RouteRequest, index: KvBlockIndex | None
) -> list[float]:
    """llm-d's precise prefix-cache scores: blocks of the longest cached prefix per pod,
    min-max normalised over the pods that hold its first block (1 when they all hold
    as many), 0 for the pods that hold none of it."""
    if index is None or not request.blocks:
        return [0.0] * len(candidates)
    depth = index.longest_prefix(request.adapter, request.blocks, [e for e, _ in candidates])
    if not depth:
        return [0.0] * len(candidates)
    lo, hi = min(depth.values()), max(depth.values())
    return [
        (1.0 if hi == lo else (depth[e] - lo) / (hi - lo)) if e in depth else 0.0
        for e, _ in candidates
    ]


class LlmdPrecisePrefix(EligibleFirst):
    """``llmd-precise-prefix``: KV-event prefix + KV-utilisation + queue scorers."""

    name = "llmd-precise-prefix"
    KNOBS = ("prefix_weight", "kv_cache_weight", "queue_weight", "seed")
    reads_kv_events = True
    """The benchmark subscribes this policy's routers to the engines' KV events."""

    def __init__(self, knobs: Mapping[str, Any] | None = None) -> None:
        k = Knobs(self.name, knobs or {}, self.KNOBS)
        self.weights = (
            k.get("prefix_weight", float, 3.0, 0.0, 100.0),
            k.get("kv_cache_weight", float, 2.0, 0.0, 100.0),
            k.get("queue_weight", float, 2.0, 0.0, 100.0),
        )
        self._rng = random.Random(k.get("seed", int, 0, 0, 2**63))

    def choose_in(
        self, candidates: Candidates, request: RouteRequest, stats: Mapping[str, EngineStats]
    ) -> str | None:
        index = stats.kv_blocks if isinstance(stats, FleetStats) else None
        pw, kw, qw = self.weights
        return max_score(
            candidates,
            [
                (pw, lambda cs: precise_prefix_scores(cs, request, index)),
                (kw, kv_cache_scores),
                (qw, queue_scores),
            ],
            self._rng,
        )

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        return self.choose_in(candidates, request, {})
