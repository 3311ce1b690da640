"""``mol-affinity``, the default: prefix-cache locality priced against queues, adapter
affinity, rendezvous homes, eviction by demand and bounded load.

vLLM keeps an adapter in its GPU slot until a newer one needs the slot (least recently
used idle one first), and each request for an adapter that is not in a slot of the
engine it lands on costs a load. The fleet's slots are few (replicas x ``max_loras``)
and popularity is skewed, so the policy spends them on purpose. Each adapter has a
fixed preference order over the endpoints (rendezvous hashing of its name), the same
in every router replica. Steps 1-4 pick where the adapter should run; step 0 weighs
that against the endpoints believed to hold a prefix of the prompt:

0. of the endpoints where the router's prefix index (where it sent each prompt prefix
   lately) believes some prefix of the prompt cached, the one steps 1-4 pick, the
   first idle one (nothing running, waiting or in flight) with room for the adapter,
   and, for a router alone (traffic share up to ``LONE_SHARE``), every endpoint with
   room for it, the one whose first token costs least in prefill-token units:
   ``queue_tokens`` per request this router has in flight there (times its
   ``traffic_share``, so that one of N independent routers prices the whole queue,
   not its 1/N of it; among several routers, the mean of that and the last scrape's
   running + waiting there: its own count is fresh but samples about 1/N of the
   queue, the scrape whole but a second old, and each alone herds), plus the
   prompt tokens not cached there, plus, where the adapter is not resident,
   ``copy_tokens`` into an empty slot (a load's engine-wide stall: up to 2,200
   tokens' worth from disk) or ``load_tokens`` when it evicts another adapter (always,
   for a router among several: a slot it believes empty may hold an adapter another
   router sent there, which its scrapes show only while it runs). A
   session or an agent whose context grows stays where its history is until that
   replica's queue costs more than the history saves. In-flight counts rather than
   scraped queues, as a scrape a second old misreads a replica's queue more than the
   prompt's cost; the idle endpoint keeps a replica that no adapter calls home from
   starving while the others queue (the defaults and these choices measured on the
   routing benchmark's traces, held-out seeds included: docs/replica-picking.md).
   Ties go, for a router alone, to the endpoint it sent to least recently: its batch
   lanes hold the oldest requests, which free first (round-robin's one advantage on
   multi-turn chat, where every replica can hold every expert and the shared system
   prompt, and the history a session leaves behind is worth less than the stagger);
   among several routers, to the least loaded, which their scrapes agree on.
   A router among several (traffic share N > 1) saw only some of a session's turns,
   so its index misses where the others sent the rest; all of them also weigh the
   session's **home**, the rendezvous first for the prompt's session key (the key
   past the shared prompt the session started from: ``PrefixIndex.session``) among
   the endpoints where the adapter is resident, as holding ``1 - 1/N`` of the
   prompt (the chance that another router sent the turn before, there). Routers
   that share nothing thus send a session's turns to the same replica; a router
   alone (N = 1) prices only what it knows;
1. the endpoint where the adapter is resident (running there per
   ``vllm:lora_requests_info``, or sent there lately by this router) under the bound
   with the lowest such cost (its load, scraped or in flight, times
   ``queue_tokens`` plus the prompt tokens not believed cached there), least loaded
   on ties: reuse, no load;
2. else (a load is needed) the first endpoint in the adapter's order, among the first
   ``candidates`` under the bound, that can start it now (fewer adapters busy than
   slots: running at the last scrape, plus those of this router's requests in flight
   there that the scrape did not show, times its traffic share) without
   evicting anything hotter: its eviction cost, the demand share of the least
   recently used idle adapter believed in its slots (0 with a slot empty), is at
   most the adapter's own share and at most ``hot_share``; failing that the one of
   them with the lowest cost (earliest in the order on ties);
3. else the first endpoint in its order under the bound (it waits there for a slot);
4. else, with every endpoint over the bound, the least loaded (earliest in order).

So hot adapters keep their slots (only colder ones are evicted for a new copy), cold
ones churn through the slots of other cold ones, and every router replica, seeing
the same engine metrics and a similar demand estimate, walks the same order. The
bound is ``load_factor`` x the mean load after this request, plus ``slack``
(consistent hashing with bounded loads): a hot adapter's traffic spills down its own
order onto as many engines as its load needs. Base-model requests go to the endpoint
under the bound with the lowest such cost, least loaded on ties. Without a
demand estimate (stats as a plain mapping) every eviction costs nothing, and step 2
takes the first endpoint that can start the adapter now.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mol_router.replicas.policy.base import Candidates, EligibleFirst, Knobs
from mol_router.replicas.policy.hashing import ranking
from mol_router.replicas.policy.interface import Demand, EngineStats, FleetStats, RouteRequest
from mol_router.replicas.policy.prefix import PrefixIndex, key_chars

CHARS_PER_TOKEN = 4
"""The proxy's estimate of a prompt's tokens from its bytes (``prompt_tokens``)."""
LONE_SHARE = 1.5
"""Traffic share up to which a router takes itself to be alone (scrape lag alone reads
1-1.5): its in-flight counts and slot estimates are then the engines' whole truth."""


def has_free_slot(s: EngineStats, adapter: str, share: float = 1.0) -> bool:
    """The adapter could start now without waiting for another adapter to drain: it
    runs there or has a request of ours there, or fewer adapters than slots are busy
    there: the ones running at the last scrape, plus those of this router's requests
    in flight there that it did not show, times ``share`` (the router's
    ``traffic_share``: one of N routers sees about 1/N of the adapters sent there
    since the scrape, or waiting there for a slot, and not the others')."""
    if s.max_lora <= 0 or adapter in s.running_adapters or adapter in s.pending_adapters:
        return True
    unseen = len(s.pending_adapters - s.running_adapters) if s.pending_adapters else 0
    return len(s.running_adapters) + unseen * share < s.max_lora


def eviction_cost(s: EngineStats, demand: Demand | None) -> float:
    """Demand share of the adapter a new load there would evict: vLLM evicts the least
    recently used idle adapter in its slots (none while a slot is empty)."""
    if demand is None:
        return 0.0
    if s.slot_adapters:
        if len(s.slot_adapters) < s.max_lora:
            return 0.0
        victim = next((a for a in s.slot_adapters if a not in s.running_adapters), None)
        return demand.share(victim) if victim is not None else 0.0
    idle = s.resident - s.running_adapters
    if len(s.resident) < s.max_lora:
        return 0.0
    return max((demand.share(a) for a in idle), default=0.0)


def slot_free(s: EngineStats) -> bool:
    """A GPU slot is believed empty there (the tracker's slot estimate, else what the
    metrics and this router show resident): a load evicts nothing."""
    held = len(s.slot_adapters) if s.slot_adapters else len(s.resident)
    return held < s.max_lora


def has_room(s: EngineStats, adapter: str | None) -> bool:
    """``adapter`` can run there now without evicting anything."""
    if adapter is None or adapter in s.resident:
        return True
    return slot_free(s) and has_free_slot(s, adapter)


def is_idle(s: EngineStats) -> bool:
    """Nothing runs or waits there per the last scrape, and nothing of ours is in flight."""
    return s.running + s.waiting == 0 and s.inflight == 0


def traffic_share(stats: Iterable[EngineStats]) -> float:
    """How many times this router's in-flight requests the engines' queues hold (the
    last scrape's running + waiting over the fleet against ours now, at least 1): with
    N router replicas sharing the traffic each sees about 1/N of every queue."""
    scraped = mine = 0
    for s in stats:
        scraped += s.running + s.waiting
        mine += s.inflight
    return min(max(scraped / mine, 1.0), 64.0) if mine else 1.0


def session_home(
    request: RouteRequest, stats: Mapping[str, EngineStats], prefix: PrefixIndex | None,
    share: float,
) -> str | None:  # fmt: skip
    """Where every router sends a session whose turns it did not all see: the
    rendezvous first, for the prompt's session key (``PrefixIndex.session``), of the
    endpoints where the adapter is resident (all of them for the base model); None
    for a router alone (``share`` 1: it saw every turn), or without a session key or
    a resident endpoint."""
    if share <= 1.0 or prefix is None or not request.prefix:
        return None
    key = prefix.session(request.prefix)
    if key is None:
        return None
    adapter = request.adapter
    homes = [e for e, s in stats.items() if adapter is None or adapter in s.resident]
    return ranking(f"{key:016x}", homes)[0] if homes else None


class MolAffinity(EligibleFirst):
    """``mol-affinity``: see the module docstring."""

    name = "mol-affinity"
    KNOBS = ("load_factor", "slack", "candidates", "hot_share", "queue_tokens", "load_tokens",
             "copy_tokens")  # fmt: skip

    def __init__(self, knobs: Mapping[str, Any] | None = None) -> None:
        k = Knobs(self.name, knobs or {}, self.KNOBS)
        self.load_factor = k.get("load_factor", float, 1.25, 1.0, 100.0)
        self.slack = k.get("slack", float, 1.0, 0.0, 1_000_000.0)
        self.candidates = k.get("candidates", int, 16, 1, 1_000_000)
        self.hot_share = k.get("hot_share", float, 0.01, 0.0, 1.0)
        self.queue_tokens = k.get("queue_tokens", float, 2000.0, 0.0, 1_000_000.0)
        self.load_tokens = k.get("load_tokens", float, 5000.0, 0.0, 1_000_000.0)
        self.copy_tokens = k.get("copy_tokens", float, 2200.0, 0.0, 1_000_000.0)

    def choose_in(
        self, candidates: Candidates, request: RouteRequest, stats: Mapping[str, EngineStats]
    ) -> str | None:
        return self.place(candidates, request, stats if isinstance(stats, FleetStats) else None)

    def choose(self, candidates: Candidates, request: RouteRequest) -> str | None:
        return self.place(candidates, request, None)

    def bound(self, loads: Sequence[int]) -> float:
        """Load an endpoint must stay under to take the request."""
        mean = (sum(loads) + 1) / len(loads)
        return math.ceil(self.load_factor * mean + self.slack)

    def cached(
        self, request: RouteRequest, endpoints: Sequence[str], fleet: FleetStats
    ) -> dict[str, int]:
        """Prompt tokens believed cached on each endpoint, from the prefix index (the
        bytes its matched keys cover, ``CHARS_PER_TOKEN`` a token); empty without an
        index or prefix keys."""
        if fleet.prefix is None or not request.prefix:
            return {}
        depth = fleet.prefix.matches(request.prefix, endpoints)
        total = request.prompt_tokens
        return {e: min(key_chars(d) // CHARS_PER_TOKEN, total) for e, d in depth.items()}

    def place(
        self, candidates: Candidates, request: RouteRequest, fleet: FleetStats | None
    ) -> str:
        if len(candidates) == 1:  # every rule below would pick it
            return candidates[0][0]
        by_name = dict(candidates)
        # Prompt tokens believed cached per endpoint: one index lookup per pick.
        cached = self.cached(request, list(by_name), fleet) if fleet is not None else {}
        choice = self.place_cold(candidates, request, fleet, cached, by_name)
        if fleet is None:
            return choice
        return self._warm_or(choice, by_name, request, fleet, cached)

    def _warm_or(
        self, choice: str, by_name: Mapping[str, EngineStats], request: RouteRequest,
        fleet: FleetStats, cached: Mapping[str, int],
    ) -> str:  # fmt: skip
        """``choice``, an endpoint believed to hold a prefix of the prompt, the session's
        home, or an idle one with room for the adapter, where the first token costs
        less (step 0)."""
        names = list(by_name)
        warm = [e for e in names if cached.get(e, 0) > 0]
        adapter = request.adapter
        total = request.prompt_tokens
        share = traffic_share(by_name.values())
        home = session_home(request, by_name, fleet.prefix, share)
        believed = dict(cached)
        if home is not None:
            believed[home] = max(believed.get(home, 0), int(total * (1 - 1 / share)))
            if home not in warm:
                warm.append(home)
        if not warm:
            return choice
        idle = next((e for e in names if is_idle(by_name[e]) and has_room(by_name[e], adapter)),
                    None)  # fmt: skip
        for e in (choice, idle):
            if e is not None and e not in warm:
                warm.append(e)
        lone = share <= LONE_SHARE
        if lone:  # it sees every slot it fills: any endpoint with room may serve
            warm.extend(e for e in names if e not in warm and has_room(by_name[e], adapter))
        q = self.queue_tokens * share
        sent = fleet.last_sent

        def cost(e: str) -> tuple[float, int]:
            s = by_name[e]
            extra = 0.0
            if adapter is not None and adapter not in s.resident:
                # Among several, a slot it believes free may hold another's adapter.
                extra = self.copy_tokens if lone and slot_free(s) else self.load_tokens
            # Among several: the mean of two views of the whole queue, its own count
            # times its share (fresh, a 1/N sample) and the scrape (whole, a scrape old).
            queue = s.inflight * q
            if not lone:
                queue = (queue + (s.running + s.waiting) * self.queue_tokens) / 2
            # Ties: alone, to where it sent least recently; among several, to the least
            # loaded (their scrapes agree on it, their send counts do not).
            return (queue + total - believed.get(e, 0) + extra,
                    sent.get(e, 0) if lone else s.load)  # fmt: skip

        return min(warm, key=cost)

    def place_cold(
        self, candidates: Candidates, request: RouteRequest, fleet: FleetStats | None,
        cached: Mapping[str, int], by_name: Mapping[str, EngineStats],
    ) -> str:  # fmt: skip
        """Steps 1-4 of the module docstring; ``cached``: prompt tokens believed cached
        on each candidate (``cached()``; empty without an index), ``by_name``: the
        candidates' stats by endpoint."""
        demand = fleet.demand if fleet is not None else None
        share = traffic_share(by_name.values())
        loads = {e: s.load for e, s in candidates}
        adapter = request.adapter
        order = ranking(adapter if adapter is not None else "", list(by_name))
        bound = self.bound(list(loads.values()))
        under = [e for e in order if loads[e] < bound]
        if adapter is None:
            return self._cheapest(under or list(order), loads, request, cached)
        if not under:  # everything is busy: least loaded, earliest home on ties
            return min(order, key=loads.__getitem__)
        resident = [e for e in under if adapter in by_name[e].running_adapters
                    or adapter in by_name[e].recent_adapters]  # fmt: skip
        if resident:
            return self._cheapest(resident, loads, request, cached)
        limit = min(demand.share(adapter), self.hot_share) if demand is not None else 0.0
        best, best_cost = None, math.inf
        for e in under[: self.candidates]:
            s = by_name[e]
            if not has_free_slot(s, adapter, share):
                continue
            cost = eviction_cost(s, demand)
            if cost <= limit:
                return e
            if cost < best_cost:
                best, best_cost = e, cost
        return best if best is not None else under[0]

    def _cheapest(
        self, endpoints: list[str], loads: Mapping[str, int], request: RouteRequest,
        cached: Mapping[str, int],
    ) -> str:  # fmt: skip
        """The endpoint where the request's first token costs least: its queue (each
        request ahead ``queue_tokens`` of prefill time) plus the prompt tokens not
        believed cached there; least loaded on ties, then earliest."""
        if not cached or len(endpoints) == 1:
            return min(endpoints, key=loads.__getitem__)
        total = request.prompt_tokens
        q = self.queue_tokens

        def cost(e: str) -> tuple[float, int]:
            return (loads[e] * q + total - cached.get(e, 0), loads[e])

        return min(endpoints, key=cost)
