"""The same workload over HTTP: simulated replicas on loopback, real clients, real time.

Used where a router can only be driven over HTTP (the vLLM project's `vllm-router`),
and for ours on the same replicas and the same requests so the two compare fairly:
ours runs in the load generator's process (each router replica is an `EngineTracker`
scraping every replica's real `/metrics` over HTTP, plus the policy) and sends each
request straight to the replica it picked; vllm-router is a separate process between
the load generator and the replicas. Both stream every reply (TTFT is the first SSE
token seen by the client) from the same `SimulatorCluster`, restarted for each run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiohttp

from _fleet import FleetShape, RunResult
from _workload import Arrival
from mol_platform.testing.net import free_port
from mol_platform.testing.simulator import SimConfig, SimulatorCluster
from mol_router.policy import RouteRequest, make_policy
from mol_router.tracker import EngineTracker


def sim_config(shape: FleetShape, max_tokens: int) -> SimConfig:
    return SimConfig(
        model="base", dynamic_loras=True, max_loras=shape.max_loras,
        max_num_seqs=shape.max_num_seqs, lora_load_s=shape.lora_load_s,
        ttft_s=shape.ttft_s, itl_s=shape.itl_s, output_tokens=max_tokens,
    )  # fmt: skip


def body(a: Arrival) -> dict[str, object]:
    """A completion request; the prompt starts with a per-adapter system line, as real
    per-adapter applications do (it gives prefix-aware routing something to key on)."""
    words = " ".join(["lorem"] * max(a.prompt_tokens - 4, 0))
    return {
        "model": a.adapter or "base", "prompt": f"[system: {a.adapter}] {words}",
        "max_tokens": a.max_tokens, "stream": True, "user": a.user,
    }  # fmt: skip


async def _stream(
    session: aiohttp.ClientSession, url: str, a: Arrival, headers: dict[str, str]
) -> float | None:
    """POST and read the whole SSE stream; seconds from send to the first token."""
    t0 = time.monotonic()
    first = None
    async with session.post(f"{url}/v1/completions", json=body(a), headers=headers) as resp:
        if resp.status != 200:
            await resp.read()
            return None
        async for line in resp.content:
            if first is None and line.startswith(b"data: {"):
                first = time.monotonic() - t0
    return first


async def _replay(
    arrivals: Sequence[Arrival], send: Callable[[aiohttp.ClientSession, Arrival],
                                                Awaitable[float | None]],
) -> tuple[list[float], int, float]:  # fmt: skip
    conn = aiohttp.TCPConnector(limit=0)
    ttft: list[float] = []
    errors = [0]
    async with aiohttp.ClientSession(connector=conn) as session:
        start = time.monotonic()

        async def one(a: Arrival) -> None:
            delay = start + a.t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                got = await send(session, a)
            except (aiohttp.ClientError, TimeoutError):
                got = None
            if got is None:
                errors[0] += 1
            else:
                ttft.append(got)

        await asyncio.gather(*(one(a) for a in arrivals))
        return ttft, errors[0], time.monotonic() - start


def _finish(
    label: str, cluster: SimulatorCluster, arrivals: Sequence[Arrival], ttft: list[float],
    errors: int, makespan: float, speed: float,
) -> RunResult:  # fmt: skip
    """Times are scaled back by ``speed`` to the nominal workload's."""
    result = RunResult(label, len(arrivals), [t * speed for t in ttft], makespan * speed)
    holders = 0
    for state in cluster.states():
        result.adapter_loads += sum(state.slot_loads.values())
        holders += len(state.slot_loads)
    names = {a.adapter for a in arrivals if a.adapter}
    result.replicas_per_adapter = holders / max(len(names), 1)
    result.errors = errors
    return result


def run_vllm_router(
    policy: str, arrivals: Sequence[Arrival], shape: FleetShape, max_tokens: int,
    speed: float, log: Path,
) -> RunResult:  # fmt: skip
    import _vllm_router

    with SimulatorCluster(shape.replicas, sim_config(shape, max_tokens)) as cluster:
        port = free_port()
        proc = _vllm_router.start(cluster.urls, policy, port, free_port(), log)
        url = f"http://127.0.0.1:{port}"
        try:
            # consistent_hash keys on X-Session-ID first: the adapter, for LoRA affinity.
            async def send(s: aiohttp.ClientSession, a: Arrival) -> float | None:
                return await _stream(s, url, a, {"X-Session-ID": a.adapter or "base"})

            ttft, errors, makespan = asyncio.run(_replay(arrivals, send))
        finally:
            proc.stop()
        return _finish(f"vllm-router {policy}", cluster, arrivals, ttft, errors, makespan, speed)


def run_ours(
    policy: str, routers: int, arrivals: Sequence[Arrival], shape: FleetShape,
    max_tokens: int, speed: float,
) -> RunResult:  # fmt: skip
    with SimulatorCluster(shape.replicas, sim_config(shape, max_tokens)) as cluster:
        urls = cluster.urls

        async def main() -> tuple[list[float], int, float]:
            async with aiohttp.ClientSession() as scraper:
                trackers = [EngineTracker(scraper, scrape_interval=shape.scrape_interval)
                            for _ in range(routers)]  # fmt: skip
                policies = [make_policy(policy) for _ in range(routers)]
                for t in trackers:
                    t.set_endpoints(urls)
                    await t.start()
                counter = iter(range(len(arrivals)))

                async def send(s: aiohttp.ClientSession, a: Arrival) -> float | None:
                    r = next(counter) % routers
                    tracker = trackers[r]
                    request = RouteRequest(a.adapter, a.user, a.prompt_tokens)
                    endpoint = policies[r].pick(urls, tracker.snapshot(), request)
                    if endpoint is None:
                        return None
                    tracker.begin(endpoint, a.adapter)
                    try:
                        return await _stream(s, endpoint, a, {})
                    finally:
                        tracker.end(endpoint, a.adapter)

                try:
                    return await _replay(arrivals, send)
                finally:
                    for t in trackers:
                        await t.stop()

        ttft, errors, makespan = asyncio.run(main())
        label = policy if routers == 1 else f"{policy} x{routers}"
        return _finish(f"{label} (HTTP)", cluster, arrivals, ttft, errors, makespan, speed)
