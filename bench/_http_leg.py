"""The same workload over HTTP: simulated replicas on loopback, real clients, real time.

Used where a router can only be driven over HTTP (the vLLM project's `vllm-router`),
and for ours on the same replicas and the same requests so the two compare fairly:
ours runs in the load generator's process (each router replica is an `EngineTracker`
scraping every replica's real `/metrics` over HTTP, plus the policy) and sends each
request straight to the replica it picked, booked with the prompt's prefix keys as the
proxy books it (``_fleet.pick_and_book``, as in-process); vllm-router is a separate
process between the load generator and the replicas. Ours reads metrics once a second
(the router's default), since 16 simulated replicas in one Python process cannot answer
much more scraping on 2 cores while streaming every token. Both stream every reply
(TTFT is the first SSE token seen by the client) from the same simulated replicas
(their own process, restarted for each run; adapter loads and prefix-cache hits read
from their `/metrics`).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import aiohttp

from _fleet import FleetShape, RunResult, pick_and_book, route_request
from _workload import Arrival
from mol_router.replicas.policy import make_policy
from mol_router.replicas.tracker import EngineTracker
from mol_testkit.net import free_port
from mol_testkit.simulator.segments import prompt_text, segment_text


@contextmanager
def replicas(shape: FleetShape, max_tokens: int, log: Path) -> Iterator[list[str]]:
    """The simulated replicas in a process of their own (``python -m
    mol_testkit.simulator``), so they do not share a core with the load
    generator; yields their base URLs."""
    argv = [
        sys.executable, "-m", "mol_testkit.simulator", "--replicas",
        str(shape.replicas), "--model", "base", "--dynamic-loras", "--max-loras",
        str(shape.max_loras), "--max-num-seqs", str(shape.max_num_seqs), "--lora-load-s",
        str(shape.lora_load_s), "--ttft-s", str(shape.ttft_s), "--itl-s", str(shape.itl_s),
        "--output-tokens", str(max_tokens), "--lora-disk-load-s", str(shape.lora_disk_load_s),
        "--prefill-s-per-token", str(shape.prefill_s_per_token), "--block-size",
        str(shape.block_size), "--kv-cache-blocks", str(shape.kv_cache_blocks),
        "--max-model-len", str(1 << 20),
        *(["--max-cpu-loras", str(shape.max_cpu_loras)] if shape.max_cpu_loras else []),
    ]  # fmt: skip
    with log.open("ab") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        urls = []
        for line in proc.stdout:  # the URLs, then an empty line once all listen
            if not line.strip():
                break
            urls.append(line.strip())
        if len(urls) != shape.replicas:
            raise RuntimeError(f"simulator did not start; see {log}")
        yield urls
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:  # streams still open: do not wait for them
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


COUNTERS = {"vllm:prefix_cache_queries_total": "queries", "vllm:prefix_cache_hits_total": "hits"}


def replica_counters(urls: Sequence[str]) -> dict[str, int]:
    """Summed over the replicas' /metrics: adapter loads (``mol_engine_adapter_loads``:
    ``gpu`` into GPU slots, ``cpu`` read from disk into host memory) and the prefix
    cache's ``queries`` and ``hits`` in tokens (vLLM's ``prefix_cache_*``)."""
    total = {"gpu": 0.0, "cpu": 0.0, "queries": 0.0, "hits": 0.0}
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith("mol_engine_adapter_loads_total{"):
                    tier = "gpu" if 'tier="gpu"' in line else "cpu"
                    total[tier] += float(line.rsplit(" ", 1)[1])
                elif (name := line.split("{", 1)[0]) in COUNTERS:
                    total[COUNTERS[name]] += float(line.rsplit(" ", 1)[1])
    return {key: int(n) for key, n in total.items()}


def body(a: Arrival) -> dict[str, object]:
    """A completion request. A trace line's segments become their deterministic text
    (``segment_text``: one word a token). Without segments the prompt is a segment of
    its own (no block shared with another request), after a short per-adapter system
    line that a prefix-keyed router can still key on (vllm-router's cache_aware)."""
    if a.segments is not None:
        prompt = prompt_text(a.segments)
    else:
        own = segment_text(f"{a.adapter}|{a.user}|{a.t!r}", max(a.prompt_tokens - 4, 0))
        prompt = f"[system: {a.adapter}]{own}"
    return {
        "model": a.adapter or "base", "prompt": prompt,
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
    request_timeout: float,
) -> tuple[list[float], int, float]:  # fmt: skip
    """Open loop: each request at its time; one that takes over ``request_timeout``
    seconds counts as failed (an overloaded router's backlog would take minutes)."""
    conn = aiohttp.TCPConnector(limit=0)
    ttft: list[float] = []
    errors = [0]
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
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
    label: str, urls: Sequence[str], arrivals: Sequence[Arrival], ttft: list[float],
    errors: int, makespan: float, speed: float,
) -> RunResult:  # fmt: skip
    """Times are scaled back by ``speed`` to the nominal workload's."""
    result = RunResult(label, len(arrivals), [t * speed for t in ttft], makespan * speed)
    got = replica_counters(urls)
    result.adapter_loads, result.disk_loads = got["gpu"], got["cpu"]
    result.prefix_queries, result.prefix_hits = got["queries"], got["hits"]
    result.errors = errors
    return result


def run_vllm_router(
    policy: str, arrivals: Sequence[Arrival], shape: FleetShape, max_tokens: int,
    speed: float, timeout: float, log: Path,
) -> RunResult:  # fmt: skip
    import _vllm_router

    with replicas(shape, max_tokens, log.with_suffix(".sim.log")) as urls:
        port = free_port()
        proc = _vllm_router.start(urls, policy, port, free_port(), log)
        url = f"http://127.0.0.1:{port}"
        try:
            # consistent_hash keys on X-Session-ID first: the adapter, for LoRA affinity.
            async def send(s: aiohttp.ClientSession, a: Arrival) -> float | None:
                return await _stream(s, url, a, {"X-Session-ID": a.adapter or "base"})

            ttft, errors, makespan = asyncio.run(_replay(arrivals, send, timeout))
        finally:
            proc.stop()
        return _finish(f"vllm-router {policy}", urls, arrivals, ttft, errors, makespan, speed)


def run_ours(
    policy: str, routers: int, arrivals: Sequence[Arrival], shape: FleetShape,
    max_tokens: int, speed: float, timeout: float, log: Path,
) -> RunResult:  # fmt: skip
    with replicas(shape, max_tokens, log.with_suffix(".sim.log")) as urls:

        async def main() -> tuple[list[float], int, float]:
            async with aiohttp.ClientSession() as scraper:
                trackers = [
                    EngineTracker(scraper, scrape_interval=max(shape.scrape_interval, 1.0),
                                  eject_after_failures=10)
                    for _ in range(routers)
                ]  # fmt: skip
                policies = [make_policy(policy) for _ in range(routers)]
                for t in trackers:
                    t.set_endpoints(urls)
                    await t.start()
                counter = iter(range(len(arrivals)))

                async def send(s: aiohttp.ClientSession, a: Arrival) -> float | None:
                    r = next(counter) % routers
                    tracker = trackers[r]
                    request = route_request(a)
                    endpoint = pick_and_book(policies[r], tracker, urls, tracker.snapshot(),
                                             request)  # fmt: skip
                    if endpoint is None:
                        return None
                    try:
                        return await _stream(s, endpoint, a, {})
                    finally:
                        tracker.end(endpoint, a.adapter)

                try:
                    return await _replay(arrivals, send, timeout)
                finally:
                    for t in trackers:
                        await t.stop()

        ttft, errors, makespan = asyncio.run(main())
        label = policy if routers == 1 else f"{policy} x{routers}"
        return _finish(f"{label} (HTTP)", urls, arrivals, ttft, errors, makespan, speed)
