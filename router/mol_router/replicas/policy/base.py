"""Helpers every policy shares: eligibility, knob parsing, scored picking."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from mol_router.replicas.policy.interface import EngineStats, RouteRequest

DEFAULT_STATS = EngineStats()
"""Stats of an endpoint never scraped yet: assumed healthy and idle."""

N = TypeVar("N", int, float)
Candidates = list[tuple[str, EngineStats]]


def eligible(
    endpoints: Sequence[str], stats: Mapping[str, EngineStats], exclude: frozenset[str]
) -> Candidates:
    """Endpoints a request may go to, in the given order: healthy and not excluded."""
    out = []
    for endpoint in endpoints:
        if endpoint in exclude:
            continue
        s = stats.get(endpoint, DEFAULT_STATS)
        if s.healthy:
            out.append((endpoint, s))
    return out


class EligibleFirst:
    """``pick`` for every policy: drop unhealthy and excluded endpoints, answer None
    when nothing is left, else let ``choose`` decide among the rest."""

    name: str

    def pick(
        self,
        endpoints: Sequence[str],
        stats: Mapping[str, EngineStats],
        request: RouteRequest,
        exclude: frozenset[str] = frozenset(),
    ) -> str | None:
        candidates = eligible(endpoints, stats, exclude)
        return self.choose_in(candidates, request, stats) if candidates else None

    def choose_in(
        self, candidates: Candidates, request: RouteRequest, stats: Mapping[str, EngineStats]
    ) -> str | None:
        """``choose``, for a policy that also reads what ``stats`` knows about the whole
        fleet (a ``FleetStats``' demand estimate)."""
        return self.choose(candidates, request)

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        raise NotImplementedError


class Knobs:
    """Reads a policy's knobs from the router config, refusing unknown names and values
    out of range with a message naming the policy, the knob and what is allowed."""

    def __init__(self, policy: str, knobs: Mapping[str, Any], allowed: Sequence[str]) -> None:
        unknown = sorted(set(knobs) - set(allowed))
        if unknown:
            known = ", ".join(allowed) or "none"
            raise ValueError(
                f"policy {policy!r} has no knob(s) {', '.join(unknown)}; its knobs: {known}"
            )
        self.policy = policy
        self.knobs = knobs

    def get(self, name: str, kind: type[N], default: N, lo: N, hi: N) -> N:
        value = self.knobs.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"policy {self.policy!r} knob {name!r} must be a number")
        if kind is int and not isinstance(value, int):
            raise ValueError(f"policy {self.policy!r} knob {name!r} must be an integer")
        if not lo <= value <= hi:
            raise ValueError(
                f"policy {self.policy!r} knob {name!r} must be in [{lo}, {hi}], got {value}"
            )
        return kind(value)


Scorer = Callable[[Candidates], list[float]]


def max_score(
    candidates: Candidates,
    weighted: Sequence[tuple[float, Scorer]],
    rng: random.Random,
) -> str | None:
    """Sum each scorer's [0, 1] scores times its weight and pick the best endpoint; ties
    are broken at random, as the Gateway API Inference Extension's max-score picker does
    (seeded here, so a run is reproducible)."""
    if not candidates:
        return None
    totals = [0.0] * len(candidates)
    for w, scorer in weighted:
        for i, score in enumerate(scorer(candidates)):
            totals[i] += w * score
    best = max(totals)
    tied = [c[0] for c, t in zip(candidates, totals, strict=True) if t >= best - 1e-12]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


def queue_scores(candidates: Candidates) -> list[float]:
    """Min-max normalised waiting queue: the shortest queue scores 1, the longest 0."""
    queues = [s.waiting for _, s in candidates]
    lo, hi = min(queues), max(queues)
    if hi == lo:
        return [1.0] * len(queues)
    return [(hi - q) / (hi - lo) for q in queues]


def kv_cache_scores(candidates: Candidates) -> list[float]:
    """1 - KV-cache usage: emptier engines score higher."""
    return [1.0 - min(max(s.kv_cache_usage, 0.0), 1.0) for _, s in candidates]
