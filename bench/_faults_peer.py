"""The named peer under the same faults (bench/faults.py): vLLM's own router.

`vllm-router` (PyPI, the vLLM project's Rust router; pinned in pyproject's
``bench-router`` extra) at its defaults (its retries and circuit breaker on), policy
``round_robin``, in front of the same simulated engines, with the same traffic and the
same fault at the same moment as our router's rows. It has no catalog, so requests name
the immutable adapter versions directly, which is what our router sends the engines
after resolving; a *wrong* answer therefore cannot happen here and is not claimed.

It has no status page listing ready engines, so recovery is timed from the engines'
side: the restarted engine healthy -> the first request it receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from _faults_load import Traffic
from _faults_scenarios import NOT_LOADED, Row, Shape
from _faults_stack import Proc, engine_proc
from _vllm_router import command
from mol_testkit.net import free_port

POLICY = "round_robin"
PEER = "vllm-router"
PEER_EXTRA = {"router": PEER}


@contextlib.contextmanager
def peer_fleet(work: Path, shape: Shape, engines: int = 2) -> Iterator[tuple[Proc, list[Proc]]]:
    work.mkdir(parents=True, exist_ok=True)
    fleet = [engine_proc(work, f"engine-{i}", output_tokens=shape.output_tokens,
                         itl_s=shape.itl_s, ttft_s=shape.ttft_s) for i in range(engines)]
    port = free_port()
    router = Proc(PEER, command([e.url for e in fleet], POLICY, port, free_port()), port,
                  work / f"{PEER}.log", "/health")
    try:
        for e in fleet:
            e.start(wait=60)
        router.start(wait=60)
        yield router, fleet
    finally:
        for p in [router, *fleet]:
            p.stop()


async def _received(engine: Proc) -> int:
    async with httpx.AsyncClient(timeout=2.0) as c:
        state = (await c.get(engine.url + "/sim/state")).json()
    return len(state.get("received", [])) if isinstance(state, dict) else 0


async def _first_request(engine: Proc, within: float = 30.0) -> float | None:
    """Seconds until ``engine`` receives a request it had not before."""
    started = time.monotonic()
    before = await _received(engine)
    while time.monotonic() - started < within:
        if await _received(engine) > before:
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    return None


def _traffic(router: Proc, expect: dict[str, str], shape: Shape) -> Traffic:
    names = {v: v for v in expect.values()}  # immutable names, sent as they are
    return Traffic(router.url, names, concurrency=shape.concurrency, hung_s=shape.hung_s,
                   max_tokens=shape.output_tokens)


async def peer_engine_killed(work: Path, expect: dict[str, str], shape: Shape) -> Row:
    """As ``engine_killed_mid_stream``: SIGKILL at a third, a new process at two thirds."""
    with peer_fleet(work / "peer-kill", shape) as (router, engines):
        victim = engines[0]
        traffic = _traffic(router, expect, shape)
        marks: dict[str, Any] = {}

        async def fault() -> float | None:
            await asyncio.sleep(shape.seconds / 3)
            marks["inflight"] = traffic.inflight
            marks["at"] = time.monotonic()
            await asyncio.to_thread(victim.kill)
            await asyncio.sleep(shape.seconds / 3)
            await asyncio.to_thread(victim.start, wait=0)
            await asyncio.to_thread(victim.wait_healthy, 60)
            return await _first_request(victim)

        _, recovery = await asyncio.gather(traffic.run(shape.seconds), fault())
        return Row(f"engine SIGKILL mid-stream ({PEER})", "unplanned", traffic.outcomes,
                   None, recovery, fault_at=marks["at"], extra=PEER_EXTRA,
                   notes=[f"{marks['inflight']} requests in flight at the kill",
                          "recovery: the new process healthy -> its first request" + (
                              "" if recovery is not None else
                              " (none reached it before the traffic ended)")])


async def peer_engine_stalled(work: Path, expect: dict[str, str], shape: Shape) -> Row:
    """As ``engine_stalled``: SIGSTOP one engine for ``stall_s``, then SIGCONT."""
    seconds = max(shape.seconds, shape.stall_s * 2.5)
    with peer_fleet(work / "peer-stall", shape) as (router, engines):
        victim = engines[0]
        traffic = _traffic(router, expect, shape)
        marks: dict[str, Any] = {}

        async def fault() -> float | None:
            await asyncio.sleep(seconds / 4)
            marks["at"] = time.monotonic()
            victim.signal(signal.SIGSTOP)
            await asyncio.sleep(shape.stall_s)
            victim.signal(signal.SIGCONT)
            return await _first_request(victim)

        _, recovery = await asyncio.gather(traffic.run(seconds), fault())
        late = [o for o in traffic.outcomes if o.kind == "answered"
                and o.ms > shape.stall_s * 500]
        return Row(f"engine stalled (SIGSTOP {shape.stall_s:g} s) ({PEER})", "unplanned",
                   traffic.outcomes, None, recovery, fault_at=marks["at"], extra=PEER_EXTRA,
                   notes=[f"{len(late)} requests answered after waiting over half the stall",
                          "recovery: SIGCONT -> the engine's next new request"])


async def peer_adapter_fails(work: Path, expect: dict[str, str], shape: Shape) -> Row:
    """As ``adapter_fails_on_one_replica``: engine 0 refuses one adapter from a third in."""
    with peer_fleet(work / "peer-adapter", shape) as (router, engines):
        name = next(iter(expect.values()))
        traffic = _traffic(router, expect, shape)
        marks: dict[str, Any] = {}

        async def fault() -> None:
            await asyncio.sleep(shape.seconds / 3)
            marks["at"] = time.monotonic()
            async with httpx.AsyncClient() as c:
                r = await c.post(engines[0].url + "/sim/script", json={
                    "model": name, "failure": {"status": 400,
                                               "message": NOT_LOADED.format(name)}})
                r.raise_for_status()

        await asyncio.gather(traffic.run(shape.seconds), fault())
        failed = sum(1 for o in traffic.outcomes if o.ref == name and o.kind != "answered"
                     and o.sent > marks["at"])
        return Row(f"adapter load fails on one replica ({PEER})", "unplanned",
                   traffic.outcomes, None, fault_at=marks["at"], extra=PEER_EXTRA,
                   notes=[f"{failed} requests for {name} sent after the fault failed"])


PEER_SCENARIOS = {"engine-kill": peer_engine_killed, "engine-stall": peer_engine_stalled,
                  "adapter-fails": peer_adapter_fails}
