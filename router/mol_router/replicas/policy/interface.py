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
from dataclasses import dataclass, field
from typing import Protocol

from mol_router.replicas.policy.kvindex import KvBlockIndex
from mol_router.replicas.policy.prefix import PrefixIndex


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
    pending_adapters: frozenset[str] = frozenset()
    """Adapters of this router's requests in flight there: running, or waiting for a
    slot (the metrics list only running adapters, and not yet the ones sent since the
    last scrape)."""
    slot_adapters: tuple[str, ...] = ()
    """The tracker's estimate of the adapters in the engine's GPU slots, least recently
    used first: the last ``max_lora`` distinct ones seen running there or sent there
    by this router."""

    resident: frozenset[str] = field(init=False, repr=False, compare=False)
    """Adapters believed to be loaded on the engine: its metrics plus our record."""
    load: int = field(init=False, repr=False, compare=False)
    """Queue depth seen from here: scraped running + waiting, or our in-flight count
    when that is higher (metrics lag; our own count does not)."""

    def __post_init__(self) -> None:
        # read many times per pick, built once per snapshot of the engine
        object.__setattr__(self, "resident", self.running_adapters | self.recent_adapters)
        object.__setattr__(self, "load", max(self.running + self.waiting, self.inflight))


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """The parts of a request a policy may use. ``adapter`` is the immutable name the
    engine will see (``ns/name@vN``), or ``None`` for the base model."""

    adapter: str | None
    user: str | None = None
    prompt_tokens: int = 0
    prefix: tuple[int, ...] = ()
    """Keys of the prompt's prefixes, shortest first (``policy.prefix.prefix_keys``;
    seeded with the adapter and tenant, so they match only the same adapter's)."""
    blocks: tuple[bytes | int, ...] = ()
    """The prompt's KV block hashes as the engine computes them, for a policy that
    reads the engines' KV events (it needs the tokens: the router leaves it empty)."""


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


class Demand:
    """Each adapter's share of the requests this router sent lately.

    An exponentially decayed count, by request rather than by clock (so it reads the
    same on a replayed trace): each request weighs ``2 ** (1 / half_life)`` times the
    one before, which makes ``share`` O(1) without touching old entries. Router
    replicas each see a part of the traffic, but the same shares, so they agree on
    which adapters are hot without talking to each other.
    """

    __slots__ = ("_counts", "_growth", "_limit", "_total", "_weight")

    RESCALE_AT = 1e150

    def __init__(self, half_life: int = 2000, limit: int = 4096) -> None:
        if half_life < 1 or limit < 1:
            raise ValueError("half_life and limit must be >= 1")
        self._growth = 2.0 ** (1.0 / half_life)
        self._limit = limit
        self._weight = 1.0
        self._total = 0.0
        self._counts: dict[str, float] = {}

    def add(self, adapter: str) -> None:
        """Count one request for ``adapter``."""
        self._weight *= self._growth
        counts = self._counts
        counts[adapter] = counts.get(adapter, 0.0) + self._weight
        self._total += self._weight
        if self._weight > self.RESCALE_AT:
            self._rescale()
        if len(counts) > self._limit:  # forget the rarest half
            keep = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[: self._limit // 2]
            self._counts = dict(keep)

    def _rescale(self) -> None:
        w = self._weight
        self._counts = {a: c / w for a, c in self._counts.items() if c / w > 1e-12}
        self._total /= w
        self._weight = 1.0

    def share(self, adapter: str) -> float:
        """The adapter's share of recent requests in [0, 1]; 0 for one never seen."""
        return self._counts.get(adapter, 0.0) / self._total if self._total else 0.0


class FleetStats(dict[str, EngineStats]):
    """Per-endpoint stats plus what the router knows about the whole fleet's traffic:
    ``demand``, each adapter's share of recent requests (None when unknown). The
    mapping is never changed once handed out; ``demand`` is the tracker's live
    estimate, read at pick time. Build one with :meth:`of` (dict's own constructor
    keeps copying cheap: the tracker makes one per request's begin and end)."""

    __slots__ = ("demand", "kv_blocks", "last_sent", "prefix")
    demand: Demand | None
    prefix: PrefixIndex | None
    """Where this router sent each prompt prefix lately (None when it keeps no index)."""
    kv_blocks: KvBlockIndex | None
    """What the engines' KV events say each holds (None unless subscribed)."""
    last_sent: Mapping[str, int]
    """This router's send count at its latest send to each endpoint (absent: none yet),
    live like ``demand``: the lower, the older the requests of ours in that engine's
    batch lanes, and the sooner one of them frees."""

    @classmethod
    def of(
        cls, stats: Mapping[str, EngineStats], demand: Demand | None,
        prefix: PrefixIndex | None = None, kv_blocks: KvBlockIndex | None = None,
        last_sent: Mapping[str, int] | None = None,
    ) -> FleetStats:  # fmt: skip
        snap = cls(stats)
        snap.demand = demand
        snap.prefix = prefix
        snap.kv_blocks = kv_blocks
        snap.last_sent = last_sent if last_sent is not None else {}
        return snap
