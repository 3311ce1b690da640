"""What a replica-picking policy sees and returns.

A policy is a pure function of its inputs: the endpoints, a snapshot of each engine's
state and the request. Everything stateful (scraping metrics, counting in-flight
requests, remembering what was sent where) lives in the tracker, which hands the
policy an immutable :class:`EngineStats` per endpoint. Keeping policies pure is what
makes independent router replicas agree: given the same engine metrics they pick the
same few engines for an adapter without talking to each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class EngineStats:
    """One engine replica as the router last saw it.

    ``running``/``waiting``/``kv_cache_usage`` come from the engine's own metrics;
    ``max_lora`` and ``running_adapters`` from ``vllm:lora_requests_info`` (vLLM lists
    only the adapters whose requests are running, at most ``max_lora``). The router's
    own bookkeeping adds ``recent_adapters`` (adapters it sent there lately, so an
    adapter loaded between two scrapes already counts as resident) and ``inflight``
    (requests this router has open there, fresher than the scraped queue lengths).
    """

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    max_lora: int = 0
    running_adapters: frozenset[str] = frozenset()
    recent_adapters: frozenset[str] = frozenset()
    inflight: int = 0
    healthy: bool = True

    @property
    def resident(self) -> frozenset[str]:
        """Adapters believed to be loaded on the engine: its metrics plus our record."""
        return self.running_adapters | self.recent_adapters

    @property
    def load(self) -> int:
        """Queue depth seen from here: scraped running + waiting, or our in-flight count
        when that is higher (metrics lag; our own count does not)."""
        return max(self.running + self.waiting, self.inflight)


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """The parts of a request a policy may use. ``adapter`` is the immutable name the
    engine will see (``ns/name@vN``), or ``None`` for the base model."""

    adapter: str | None
    user: str | None = None
    prompt_tokens: int = 0


class Policy(Protocol):
    """Picks one endpoint for a request, or ``None`` when none is eligible.

    ``exclude`` names endpoints already tried for this request (a retry after a
    connect error or a 5xx must go elsewhere). Unhealthy endpoints are never picked.
    """

    name: str

    def pick(
        self,
        endpoints: Sequence[str],
        stats: Mapping[str, EngineStats],
        request: RouteRequest,
        exclude: frozenset[str] = frozenset(),
    ) -> str | None: ...
