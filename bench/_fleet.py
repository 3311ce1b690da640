"""Simulated engine replicas driven in-process by router policies, on virtual time.

Each replica is the simulator's own engine model (``SlotEngine``: vLLM's batch and
``max_loras`` scheduling, LRU GPU adapter slots and a host-memory tier, a prefix cache
of KV blocks, preemption when KV runs out); adapter loads and prefills of uncached
prompt tokens stall the whole replica; a request's first token is due ``ttft_s`` after
its prefill, then one token per ``itl_s``, as the simulator's HTTP server times them;
an adapter shows as running from its first token, and KV usage grows with the tokens.
A trace line's ``segments`` become the prompt's token ids (equal ids, equal tokens), so
its blocks are shared with every request that has the same prefix and adapter. Each
router replica is a real ``EngineTracker`` and policy: it observes every engine every
``scrape_interval`` (what ``/metrics`` would say: queue lengths, KV usage, and the
adapters with running requests, as vLLM lists them) and books what it sends. A policy
that reads the engines' KV events (``reads_kv_events``: llm-d's precise prefix scorer)
gets them as vLLM publishes them over ZMQ, not at the scrape: each engine's events of
the last ``KV_EVENT_STEP_S`` in one batch, applied to every router's own index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import orjson

from _kvcapacity import H100_LLAMA3_8B_BLOCKS
from _workload import Arrival
from mol_router.replicas.engine_metrics import EngineMetrics
from mol_router.replicas.policy import Policy, RouteRequest, make_policy
from mol_router.replicas.policy.interface import FleetStats
from mol_router.replicas.policy.kvindex import KvBlockIndex
from mol_router.replicas.policy.mol import MolAffinity
from mol_router.replicas.policy.prefix import prefix_keys
from mol_router.replicas.tracker import EngineTracker
from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.kvcache import BlockHash, block_hashes
from mol_testkit.simulator.kvevents import external_hash
from mol_testkit.simulator.model import SlotEngine
from mol_testkit.simulator.segments import prompt_text, prompt_token_ids

TOKEN_STEPS = 4
KV_EVENT_STEP_S = 0.02
"""KV events reach the routers this often (vLLM publishes a batch per engine step, about
one ITL; ZMQ on a cluster network adds well under a millisecond)."""
"""Generated tokens are booked in this many steps per request (not one event each)."""


@dataclass(frozen=True)
class FleetShape:
    """The replicas' sizes and costs; the defaults stand for Llama-3-8B in BF16 on one
    H100 80 GB per replica, with rank-16 all-linear LoRAs (84 MB each)."""

    replicas: int = 16
    max_loras: int = 4
    max_num_seqs: int = 8
    ttft_s: float = 0.04
    itl_s: float = 0.02
    lora_load_s: float = 0.01
    """Copy of an adapter from host memory into a GPU slot (stalls the replica)."""
    scrape_interval: float = 0.1
    lora_disk_load_s: float = 0.1
    """Further stall when the adapter is not in host memory and is read from disk."""
    prefill_s_per_token: float = 5e-5
    """Per uncached prompt token (~20,000 prompt tokens a second)."""
    max_cpu_loras: int | None = 32
    """Adapters kept in host memory: the MoLDeployment's default (``engine.maxCpuLoras``;
    None: ``max_loras``, vLLM's own default, so every slot miss reads the disk)."""
    block_size: int = 16
    kv_cache_blocks: int = H100_LLAMA3_8B_BLOCKS
    """26,306 blocks: vLLM's 51.38 GiB of available KV for Llama-3-8B BF16 (128 KiB a
    token) on an H100 80 GB at ``gpu_memory_utilization`` 0.9 (bench/_kvcapacity.py)."""

    def scaled(self, speed: float) -> FleetShape:
        """Token, load and prefill times divided by ``speed`` (a trace replayed faster)."""
        return replace(
            self, ttft_s=self.ttft_s / speed, itl_s=self.itl_s / speed,
            lora_load_s=self.lora_load_s / speed, scrape_interval=self.scrape_interval / speed,
            lora_disk_load_s=self.lora_disk_load_s / speed,
            prefill_s_per_token=self.prefill_s_per_token / speed,
        )  # fmt: skip

    def config(self) -> SimConfig:
        """One replica's engine configuration."""
        return SimConfig(
            model="base", dynamic_loras=True, max_loras=self.max_loras,
            max_cpu_loras=self.max_cpu_loras, max_num_seqs=self.max_num_seqs, ttft_s=self.ttft_s,
            itl_s=self.itl_s,
            lora_load_s=self.lora_load_s, lora_disk_load_s=self.lora_disk_load_s,
            prefill_s_per_token=self.prefill_s_per_token, block_size=self.block_size,
            kv_cache_blocks=self.kv_cache_blocks, max_model_len=1 << 20,
        )  # fmt: skip

    def capacity(self, mean_tokens: float, prompt_tokens: float = 0.0) -> float:
        """Requests per second the fleet completes when no request waits for a slot: a
        replica runs ``max_num_seqs`` at once, and each request's prefill (no cache hit)
        stalls all of them."""
        per_request = self.ttft_s + max(mean_tokens - 1, 0) * self.itl_s
        stall = prompt_tokens * self.prefill_s_per_token * self.max_num_seqs
        return self.replicas * self.max_num_seqs / (per_request + stall)


@dataclass
class RunResult:
    label: str
    requests: int
    ttft: list[float] = field(default_factory=list)
    makespan: float = 0.0
    adapter_loads: int = 0
    """Adapters entering GPU slots (each a copy from host memory)."""
    disk_loads: int = 0
    """Of those, adapters first read from disk (not in host memory)."""
    prefix_queries: int = 0
    """Prompt tokens looked up in the replicas' prefix caches, and found:"""
    prefix_hits: int = 0
    preemptions: int = 0
    estimated_loads: int = 0
    """What the routers counted in ``mol_router_adapter_loads_total``, summed over them
    (as a dashboard's ``sum(rate(...))`` does)."""
    replicas_per_adapter: float = 0.0
    """Mean number of replicas that ever loaded each adapter that was requested."""
    loads_by_adapter: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    """Requests that got no reply (HTTP runs only)."""

    @property
    def loads_per_1000(self) -> float:
        return 1000.0 * self.adapter_loads / max(self.requests, 1)

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0

    @property
    def throughput(self) -> float:
        return self.requests / self.makespan if self.makespan > 0 else 0.0


class OursWithKvEvents(MolAffinity):
    """``mol-affinity`` told what is cached by the engines' KV events (each request's
    block hashes against their index, as ``llmd-precise-prefix`` is) instead of its
    own prefix index: measured here to tell whether the router should subscribe to
    vLLM's KV events; the router does not. Session keys still come from the prefix
    index, which the tracker keeps as before."""

    name = "mol-affinity+kv-events"
    reads_kv_events = True

    def __init__(self, knobs: Mapping[str, Any] | None = None, block_tokens: int = 16) -> None:
        super().__init__(knobs)
        self.block_tokens = block_tokens

    def cached(
        self, request: RouteRequest, endpoints: Sequence[str], fleet: FleetStats
    ) -> dict[str, int]:
        if fleet.kv_blocks is None or not request.blocks:
            return super().cached(request, endpoints, fleet)
        blocks = fleet.kv_blocks.longest_prefix(request.adapter, request.blocks, endpoints)
        return {e: min(n * self.block_tokens, request.prompt_tokens) for e, n in blocks.items()}


def build_policy(name: str, knobs: Mapping[str, Any] | None, shape: FleetShape) -> Policy:
    """A router's policy by name: the registry's, or the KV-events variant of ours."""
    if name == OursWithKvEvents.name:
        return OursWithKvEvents(knobs, shape.block_size)
    return make_policy(name, knobs)


def _metrics(engine: SlotEngine) -> EngineMetrics:
    """What the replica's /metrics shows (the simulator's own bookkeeping of it)."""
    return EngineMetrics(
        running=len(engine.running),
        waiting=len(engine.waiting),
        kv_cache_usage=engine.kv_cache_usage(),
        max_lora=engine.config.max_loras,
        running_adapters=tuple(engine.lora_requests),
    )


async def _drive(
    label: str, policy: str, routers: int, arrivals: Sequence[Arrival], shape: FleetShape,
    knobs: Mapping[str, Any] | None = None,
) -> RunResult:
    loop = asyncio.get_running_loop()
    config = shape.config()
    urls = [f"http://sim-{i}" for i in range(shape.replicas)]
    engines = {u: SlotEngine(config) for u in urls}
    estimated = [0]
    async with aiohttp.ClientSession() as session:
        trackers = []

        def counted(_endpoint: str) -> None:
            estimated[0] += 1

        for _ in range(routers):
            t = EngineTracker(session, scrape_interval=shape.scrape_interval,
                              on_adapter_load=counted)  # fmt: skip
            t.set_endpoints(urls)
            for u in urls:
                t.record_health(u, True)
            trackers.append(t)
        policies = [build_policy(policy, knobs, shape) for _ in range(routers)]
        events = bool(getattr(policies[0], "reads_kv_events", False))
        indexes = [KvBlockIndex() for _ in range(routers)] if events else []
        for e in engines.values():
            if events:
                e.enable_kv_events()
        result = RunResult(label, len(arrivals))
        done = asyncio.Event()
        left = [len(arrivals)]
        reference = engines[urls[0]]

        async def publish() -> None:
            while not done.is_set():
                await asyncio.sleep(KV_EVENT_STEP_S)
                for u, e in engines.items():
                    batch = e.publish_kv_events(loop.time())
                    if batch is not None:
                        for index in indexes:
                            index.apply(u, batch.events)

        def view(r: int) -> FleetStats:
            snap = trackers[r].snapshot()
            if not events:
                return snap
            return FleetStats.of(snap, snap.demand, snap.prefix, indexes[r], snap.last_sent)

        async def scrape(r: int) -> None:
            tracker = trackers[r]
            await asyncio.sleep(shape.scrape_interval * r / routers)  # unsynchronised
            while not done.is_set():
                for u, e in engines.items():
                    tracker.observe(u, _metrics(e))
                await asyncio.sleep(shape.scrape_interval)

        async def one(i: int, a: Arrival) -> None:
            tracker, pol = trackers[i % routers], policies[i % routers]
            ids = prompt_token_ids(a.segments) if a.segments is not None else None
            hashes = prompt_hashes(reference, reference.resolve_model(a.adapter), ids)
            request = route_request(a, hashes if events else ())
            endpoint = pick_and_book(pol, tracker, urls, view(i % routers), request)
            assert endpoint is not None
            engine = engines[endpoint]
            adapter = engine.resolve_model(a.adapter)
            sim = engine.submit(config.model, adapter, a.prompt_tokens, a.max_tokens,
                                hashes=hashes, token_ids=ids if events else None)  # fmt: skip
            await engine.wait_due(sim)
            result.ttft.append(loop.time() - a.t)
            engine.token(sim)
            per_step = max(1, a.max_tokens // TOKEN_STEPS)
            while sim.generated < a.max_tokens:  # in a few steps: KV grows as tokens do
                step = min(a.max_tokens - sim.generated, per_step)
                await engine.wait_due(sim, step - 1)
                for _ in range(step):
                    if sim.state != "running":
                        break  # preempted: the rest once it runs again
                    engine.token(sim)
            engine.finish(sim, "stop")
            tracker.end(endpoint, a.adapter)
            result.makespan = max(result.makespan, loop.time())
            left[0] -= 1
            if not left[0]:
                done.set()

        scrapers = [asyncio.create_task(scrape(r)) for r in range(routers)]
        if events:
            scrapers.append(asyncio.create_task(publish()))
        tasks = []
        for i, a in enumerate(arrivals):
            await asyncio.sleep(max(0.0, a.t - loop.time()))
            tasks.append(asyncio.create_task(one(i, a)))
        if tasks:
            await done.wait()
        await asyncio.gather(*tasks)
        for s in scrapers:
            s.cancel()
        await asyncio.gather(*scrapers, return_exceptions=True)
    holders: dict[str, int] = {}
    for e in engines.values():
        result.disk_loads += e.total_loads["cpu"]
        result.prefix_queries += e.prefix_queries
        result.prefix_hits += e.prefix_hits
        result.preemptions += e.preemptions
        for name, count in e.slot_loads.items():
            result.adapter_loads += count
            result.loads_by_adapter[name] = result.loads_by_adapter.get(name, 0) + count
            holders[name] = holders.get(name, 0) + 1
    result.estimated_loads = estimated[0]
    result.replicas_per_adapter = sum(holders.values()) / max(len(holders), 1)
    return result


def route_prefix(a: Arrival) -> tuple[int, ...]:
    """The prefix keys the router's proxy computes for a trace request with segments:
    of the prompt the HTTP leg sends, as JSON, seeded by the adapter (none without
    segments: a prompt of its own shares no prefix)."""
    if a.segments is None:
        return ()
    return prefix_keys(orjson.dumps(prompt_text(a.segments)), a.adapter or "")


def route_request(a: Arrival, hashes: Sequence[BlockHash] = ()) -> RouteRequest:
    """What the proxy hands the policy for a trace request (``hashes``: the prompt's
    block hashes, for a policy that reads KV events, as the events publish them)."""
    blocks = tuple(external_hash(h) for h in hashes)
    return RouteRequest(a.adapter, a.user, a.prompt_tokens, route_prefix(a), blocks)


def pick_and_book(
    policy: Policy, tracker: EngineTracker, endpoints: Sequence[str], stats: FleetStats,
    request: RouteRequest,
) -> str | None:  # fmt: skip
    """The policy's pick, booked in the tracker with the prompt's prefix keys, as the
    router's upstream does (both legs send through this: what ours remembers of where
    prefixes went is the proxy's)."""
    endpoint = policy.pick(endpoints, stats, request)
    if endpoint is not None:
        tracker.begin(endpoint, request.adapter, request.prefix)
    return endpoint


def prompt_hashes(
    engine: SlotEngine, adapter: str | None, ids: Sequence[int] | None
) -> list[BlockHash]:
    """The block hashes of a trace request's prompt token ``ids`` (none without
    segments: a prompt of its own shares no block); every replica registers an
    adapter under the same path, so any one computes them."""
    if ids is None:
        return []
    return block_hashes(ids, engine.config.block_size, engine.lora_key(adapter))


def run_policy(
    label: str, policy: str, routers: int, arrivals: Sequence[Arrival], shape: FleetShape,
    knobs: Mapping[str, Any] | None = None,
) -> RunResult:
    """One policy (with ``knobs``, else its defaults) over the whole workload, on a
    fresh fleet and a virtual clock."""
    from _vclock import run_virtual

    result: RunResult = run_virtual(_drive(label, policy, routers, arrivals, shape, knobs))
    return result
