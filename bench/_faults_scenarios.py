"""The fault scenarios on the simulated fleet (bench/faults.py): one fault each, under
steady traffic, through the real catalog and router processes.

Each scenario starts its own engines and routers (the catalog is shared and seeded
once), runs :class:`_faults_load.Traffic` for a bounded time, injects its fault at a
set moment, and returns a :class:`Row` of what the clients got.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from _faults_lb import Balancer
from _faults_load import Outcome, Traffic, counts
from _faults_stack import (
    NAMESPACE,
    Proc,
    catalog_proc,
    engine_proc,
    retries,
    router_proc,
    wait_router_sees,
    write_router_config,
)
from _report import percentile

NOT_LOADED = "LoRA adapter '{}' was found but could not be loaded."


@dataclass
class Row:
    scenario: str
    kind: str  # baseline, unplanned, planned, dependency
    outcomes: list[Outcome]
    retried: float | None = 0.0  # None: the router does not count them
    recovery_s: float | None = None
    baseline_p99_ms: float | None = None
    fault_at: float | None = None  # monotonic time of the fault
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        c = counts(self.outcomes)
        ms = [o.ms for o in self.outcomes if o.kind == "answered"]
        failed_after = (sum(1 for o in self.outcomes if o.kind != "answered"
                            and o.sent > self.fault_at) if self.fault_at is not None else 0)
        return {"scenario": self.scenario, "kind": self.kind, "requests": len(self.outcomes),
                "answered": c["answered"], "clean_errors": c["clean"], "cut": c["cut"],
                "retried": None if self.retried is None else int(self.retried),
                "hung": c["hung"], "wrong": c["wrong"],
                "bad": c["bad"], "failed_sent_after_fault": failed_after,
                "p50_ms": round(percentile(ms, 50), 1) if ms else None,
                "p99_ms": round(percentile(ms, 99), 1) if ms else None,
                "baseline_p99_ms": self.baseline_p99_ms,
                "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 2),
                "notes": "; ".join(self.notes + self.unexpected()), **self.extra}

    def unexpected(self) -> list[str]:
        """What the bad, hung and wrong answers said (the first few of each kind)."""
        seen: dict[str, int] = {}
        for o in self.outcomes:
            if o.kind in ("bad", "hung", "wrong"):
                key = f"{o.kind}: {o.detail}"
                seen[key] = seen.get(key, 0) + 1
        return [f"{n} x {k}" for k, n in sorted(seen.items(), key=lambda kv: -kv[1])[:3]]


@dataclass
class Shape:
    """Traffic and engine timing of every scenario (production router defaults)."""

    seconds: float = 20.0
    concurrency: int = 16
    output_tokens: int = 16
    itl_s: float = 0.02
    ttft_s: float = 0.05
    hung_s: float = 30.0
    catalog_down_s: float = 30.0
    stall_s: float = 10.0


class Fleet:
    """Engines and routers (one, or several behind a balancer) of one scenario."""

    def __init__(self, work: Path, catalog_url: str, shape: Shape, *, engines: int = 2,
                 routers: int = 1) -> None:
        self.work, self.shape, self.catalog_url = work, shape, catalog_url
        work.mkdir(parents=True, exist_ok=True)
        self.engines = [self.new_engine(f"engine-{i}") for i in range(engines)]
        self.config = work / "router.yaml"
        write_router_config(self.config, [e.url for e in self.engines], catalog_url)
        self.routers = [router_proc(work, f"router-{i}", self.config) for i in range(routers)]
        self.balancer: Balancer | None = None

    def new_engine(self, name: str, port: int | None = None) -> Proc:
        s = self.shape
        return engine_proc(self.work, name, port=port, output_tokens=s.output_tokens,
                           itl_s=s.itl_s, ttft_s=s.ttft_s)

    def start(self) -> None:
        for e in self.engines:
            e.start(wait=0)
        for e in self.engines:
            e.wait_healthy(60)
        for r in self.routers:
            r.start(wait=0)
        for r in self.routers:
            r.wait_healthy(60)
            wait_router_sees(r.url, {e.url for e in self.engines}, 30)
        if len(self.routers) > 1:
            self.balancer = Balancer([r.port for r in self.routers]).start()

    @property
    def url(self) -> str:
        if self.balancer is not None:
            return f"http://127.0.0.1:{self.balancer.port}"
        return self.routers[0].url

    def set_endpoints(self, engines: list[Proc]) -> None:
        write_router_config(self.config, [e.url for e in engines], self.catalog_url)

    def retried(self) -> float:
        return sum(retries(r.url) for r in self.routers)

    def stop(self) -> None:
        if self.balancer is not None:
            self.balancer.stop()
        for p in [*self.routers, *self.engines]:
            p.stop()


@contextlib.contextmanager
def fleet(work: Path, catalog_url: str, shape: Shape, **kw: Any) -> Iterator[Fleet]:
    f = Fleet(work, catalog_url, shape, **kw)
    try:
        f.start()
        yield f
    finally:
        f.stop()


async def drive(f: Fleet, expect: dict[str, str], fault: Callable[[Traffic], Awaitable[Any]],
                seconds: float | None = None) -> tuple[Traffic, Any]:
    """Traffic for ``seconds`` with ``fault`` run beside it; (traffic, fault's result)."""
    s = f.shape
    traffic = Traffic(f.url, expect, concurrency=s.concurrency, hung_s=s.hung_s,
                      max_tokens=s.output_tokens)
    _, result = await asyncio.gather(traffic.run(seconds or s.seconds), fault(traffic))
    return traffic, result


def since(t0: float) -> float:
    return time.monotonic() - t0


async def wait_seen(router: str, want: set[str], within: float = 30) -> float:
    return await asyncio.to_thread(wait_router_sees, router, want, within)


# --- scenarios ----------------------------------------------------------------------


async def baseline(work: Path, catalog: str, expect: dict[str, str], shape: Shape) -> Row:
    with fleet(work / "baseline", catalog, shape) as f:
        async def nothing(_t: Traffic) -> None:
            return None
        traffic, _ = await drive(f, expect, nothing)
        return Row("no fault (baseline)", "baseline", traffic.outcomes, f.retried())


async def engine_killed_mid_stream(work: Path, catalog: str, expect: dict[str, str],
                                   shape: Shape) -> Row:
    """SIGKILL one of two engines a third of the way in; a new process on its port at
    two thirds; recovery: its health check passing -> the router sending to it."""
    with fleet(work / "kill-mid", catalog, shape) as f:
        victim = f.engines[0]
        marks: dict[str, Any] = {}

        async def fault(t: Traffic) -> float:
            await asyncio.sleep(shape.seconds / 3)
            marks["inflight"] = t.inflight
            marks["at"] = time.monotonic()
            await asyncio.to_thread(victim.kill)
            await asyncio.sleep(shape.seconds / 3)
            await asyncio.to_thread(victim.start, wait=0)
            await asyncio.to_thread(victim.wait_healthy, 60)
            return await wait_seen(f.routers[0].url, {e.url for e in f.engines})

        traffic, recovery = await drive(f, expect, fault)
        return Row("engine SIGKILL mid-stream", "unplanned", traffic.outcomes, f.retried(),
                   recovery, fault_at=marks["at"],
                   notes=[f"{marks['inflight']} requests in flight on both engines at the kill",
                          "recovery: the new process's health check passing -> the router "
                          "picking it"])


async def engine_killed_between_requests(work: Path, catalog: str, expect: dict[str, str],
                                         shape: Shape) -> Row:
    """Traffic stops, one engine dies while nothing is in flight, traffic resumes: every
    request must be answered (the dead replica is found at the first connect)."""
    with fleet(work / "kill-idle", catalog, shape) as f:
        async def nothing(_t: Traffic) -> None:
            return None
        first, _ = await drive(f, expect, nothing, shape.seconds / 3)
        at = time.monotonic()
        await asyncio.to_thread(f.engines[0].kill)
        second, _ = await drive(f, expect, nothing, shape.seconds * 2 / 3)
        return Row("engine SIGKILL between requests", "unplanned",
                   first.outcomes + second.outcomes, f.retried(), fault_at=at,
                   notes=["killed with no request in flight; not restarted"])


async def engine_stalled(work: Path, catalog: str, expect: dict[str, str],
                         shape: Shape) -> Row:
    """SIGSTOP one engine for ``stall_s`` (a hung process: it still accepts connections),
    then SIGCONT; recovery: SIGCONT -> the router sending to it again."""
    seconds = max(shape.seconds, shape.stall_s * 2.5)
    with fleet(work / "stall", catalog, shape) as f:
        victim = f.engines[0]
        marks: dict[str, Any] = {}

        async def fault(t: Traffic) -> float:
            await asyncio.sleep(seconds / 4)
            marks["at"] = time.monotonic()
            marks["inflight"] = t.inflight
            victim.signal(signal.SIGSTOP)
            router = f.routers[0].url
            marks["ejected"] = await wait_seen(router, {f.engines[1].url}, shape.stall_s)
            await asyncio.sleep(max(shape.stall_s - since(marks["at"]), 0))
            victim.signal(signal.SIGCONT)
            return await wait_seen(router, {e.url for e in f.engines})

        traffic, recovery = await drive(f, expect, fault, seconds)
        stalled = [o for o in traffic.outcomes
                   if o.sent < marks["at"] + marks["ejected"] and o.done > marks["at"]
                   and o.ms > shape.stall_s * 500]
        return Row(f"engine stalled (SIGSTOP {shape.stall_s:g} s)", "unplanned",
                   traffic.outcomes, f.retried(), recovery, fault_at=marks["at"],
                   notes=[f"ejected {marks['ejected']:.1f} s after the stop (health check "
                          f"timeout 2 s)", f"{len(stalled)} requests waited out the stall on "
                          "it and were answered late"])


async def adapter_fails_on_one_replica(work: Path, catalog: str, expect: dict[str, str],
                                       shape: Shape) -> Row:
    """Engine 0 answers every request for one adapter with vLLM's words for a load that
    failed (as a damaged file in its adapter cache makes it); the others serve it."""
    with fleet(work / "adapter-fails", catalog, shape) as f:
        victim_ref = next(iter(expect))
        name = expect[victim_ref]
        marks: dict[str, Any] = {}

        async def fault(_t: Traffic) -> None:
            await asyncio.sleep(shape.seconds / 3)
            marks["at"] = time.monotonic()
            async with httpx.AsyncClient() as c:
                r = await c.post(f.engines[0].url + "/sim/script", json={
                    "model": name, "failure": {"status": 400,
                                               "message": NOT_LOADED.format(name)}})
                r.raise_for_status()

        traffic, _ = await drive(f, expect, fault)
        async with httpx.AsyncClient() as c:
            state = (await c.get(f.engines[0].url + "/sim/state")).json()
            status = (await c.get(f.routers[0].url + "/status")).json()
        failed_there = sum(1 for r in state.get("received", [])
                           if r.get("body", {}).get("model") == name) if isinstance(
            state, dict) else 0
        return Row("adapter load fails on one replica", "unplanned", traffic.outcomes,
                   f.retried(), fault_at=marks["at"],
                   notes=[f"{name} refused by engine-0 from a third of the way in; the router "
                          f"avoided the pair ({len(status['avoided'])} pair listed in /status "
                          "at the end), the other adapters still went there",
                          f"engine-0 saw {failed_there} requests for {name} over the run "
                          "(those before the fault, then one per back-off)"])


async def catalog_down(work: Path, catalog: Proc, expect: dict[str, str],
                       shape: Shape) -> Row:
    """The catalog stopped (SIGTERM) for ``catalog_down_s`` while traffic for references
    already resolved goes on; a reference never resolved before is asked for during the
    outage (it must get a clean 503) and again after (recovery: catalog healthy -> that
    reference served)."""
    seconds = shape.catalog_down_s + shape.seconds
    with fleet(work / "catalog-down", catalog.url, shape) as f:
        fresh = f"{NAMESPACE}/a{len(expect)}@stable"  # seeded, never asked for yet
        marks: dict[str, Any] = {}

        async def fault(t: Traffic) -> float | None:
            await asyncio.sleep(shape.seconds / 3)
            marks["at"] = time.monotonic()
            await asyncio.to_thread(catalog.terminate)
            await asyncio.sleep(1.0)
            async with httpx.AsyncClient(timeout=30) as c:
                during = await c.post(f.url + "/v1/chat/completions", json={
                    "model": fresh, "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}]})
                marks["new_ref"] = f"{during.status_code} {during.json()['error']['code']}" \
                    if during.status_code != 200 else "200"
                await asyncio.sleep(max(shape.catalog_down_s - since(marks["at"]), 0))
                await asyncio.to_thread(catalog.start, wait=0)
                await asyncio.to_thread(catalog.wait_healthy, 60)
                back = time.monotonic()
                while since(back) < 30:
                    r = await c.post(f.url + "/v1/chat/completions", json={
                        "model": fresh, "max_tokens": 2,
                        "messages": [{"role": "user", "content": "hi"}]})
                    if r.status_code == 200:
                        return since(back)
                    await asyncio.sleep(0.1)
            return None

        traffic, recovery = await drive(f, expect, fault, seconds)
        during = [o for o in traffic.outcomes
                  if marks["at"] <= o.sent <= marks["at"] + shape.catalog_down_s]
        ok = sum(1 for o in during if o.kind == "answered")
        return Row(f"catalog down {shape.catalog_down_s:g} s", "dependency", traffic.outcomes,
                   f.retried(), recovery, fault_at=None,
                   notes=[f"{ok} of {len(during)} requests sent while it was down answered "
                          "(references resolved before it went down)",
                          f"a reference first asked for during the outage: {marks['new_ref']}",
                          "recovery: catalog healthy -> that reference served"])


async def router_restarted(work: Path, catalog: str, expect: dict[str, str],
                           shape: Shape) -> Row:
    """Two routers behind one address; each in turn gets SIGTERM (it drains) and a new
    process takes its port, as a rolling restart of the router Deployment does."""
    with fleet(work / "router-restart", catalog, shape, routers=2) as f:
        async def fault(_t: Traffic) -> float:
            took = 0.0
            for r in f.routers:
                await asyncio.sleep(shape.seconds / 4)
                started = time.monotonic()
                await asyncio.to_thread(r.terminate)
                await asyncio.to_thread(r.start, wait=60)
                took = max(took, since(started))
            return took

        traffic, took = await drive(f, expect, fault)
        return Row("router restarted (SIGTERM, then a new one; 2 replicas)", "planned",
                   traffic.outcomes, f.retried(),
                   notes=[f"each router drained and was back within {took:.1f} s",
                          "retried: counted by the routers running at the end only"])


async def router_killed(work: Path, catalog: str, expect: dict[str, str],
                        shape: Shape) -> Row:
    """Two routers behind one address; one is SIGKILLed a third of the way in and a new
    one started on its port a third later."""
    with fleet(work / "router-kill", catalog, shape, routers=2) as f:
        victim = f.routers[0]
        marks: dict[str, Any] = {}

        async def fault(t: Traffic) -> float:
            await asyncio.sleep(shape.seconds / 3)
            marks["at"] = time.monotonic()
            marks["inflight"] = t.inflight
            await asyncio.to_thread(victim.kill)
            await asyncio.sleep(shape.seconds / 3)
            started = time.monotonic()
            await asyncio.to_thread(victim.start, wait=60)
            await wait_seen(victim.url, {e.url for e in f.engines})
            return since(started)

        traffic, recovery = await drive(f, expect, fault)
        return Row("router killed (SIGKILL; 2 replicas)", "unplanned", traffic.outcomes,
                   f.retried(), recovery, fault_at=marks["at"],
                   notes=[f"{marks['inflight']} requests in flight on both routers at the kill",
                          "cut: connections held by the killed router; recovery: new process "
                          "started -> ready with every engine"])


async def engine_rolled(work: Path, catalog: str, expect: dict[str, str],
                        shape: Shape) -> Row:
    """Both engines replaced one at a time as a rollout does: a new replica starts and
    becomes ready, the old one leaves the endpoints, then gets SIGTERM (it finishes
    what it has)."""
    with fleet(work / "engine-roll", catalog, shape) as f:
        async def fault(_t: Traffic) -> float:
            live = list(f.engines)
            slowest = 0.0
            for i, old in enumerate(list(f.engines)):
                await asyncio.sleep(shape.seconds / 4)
                new = f.new_engine(f"engine-{i}-new")
                f.engines.append(new)
                await asyncio.to_thread(new.start, wait=60)
                started = time.monotonic()
                f.set_endpoints([*live, new])
                await wait_seen(f.routers[0].url, {e.url for e in [*live, new]})
                slowest = max(slowest, since(started))
                live = [e for e in live if e is not old] + [new]
                f.set_endpoints(live)
                await wait_seen(f.routers[0].url, {e.url for e in live})
                await asyncio.to_thread(old.terminate)
            return slowest

        traffic, took = await drive(f, expect, fault)
        return Row("engine replica rolled (2 of 2, one at a time)", "planned", traffic.outcomes,
                   f.retried(), took,
                   notes=["recovery: a new replica listed in the endpoints -> the router "
                          "sending to it"])


def ejections(router: str) -> float:
    """mol_router_ejections_total summed over reasons (0 when the router is gone)."""
    try:
        text = httpx.get(router + "/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("mol_router_ejections_total{"))


async def _walk_away(url: str, ref: str, n: int, at_once: int, *, drop: bool,
                     timeout_s: float) -> int:
    """``n`` streams for ``ref``, ``at_once`` at a time, each abandoned mid-stream: after
    its first event (``drop``), or by a client timeout of ``timeout_s``; the number of
    them that did leave before their end."""
    left = 0

    async def one(http: httpx.AsyncClient, i: int) -> None:
        nonlocal left
        body = {"model": ref, "stream": True, "messages": [
            {"role": "user", "content": f"walk away {i}"}]}
        try:
            async with asyncio.timeout(timeout_s), \
                    http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
                async for chunk in resp.aiter_bytes():
                    if drop and chunk:
                        left += 1
                        return  # the response closes: the client hung up
        except TimeoutError:
            left += 1

    async with httpx.AsyncClient(timeout=None) as http:
        for start in range(0, n, at_once):
            await asyncio.gather(*(one(http, i) for i in range(start, min(n, start + at_once))))
    return left


async def _clients_walk_away(work: Path, catalog: str, expect: dict[str, str], shape: Shape,
                             *, drop: bool) -> Row:
    name = "client-drops" if drop else "client-timeouts"
    with fleet(work / name, catalog, shape) as f:
        marks: dict[str, Any] = {}
        # a client timeout of a third of an answer's time: every one leaves mid-stream
        answer_s = shape.ttft_s + shape.output_tokens * shape.itl_s
        timeout_s = 60.0 if drop else answer_s / 3

        async def fault(_t: Traffic) -> int:
            await asyncio.sleep(shape.seconds / 4)
            marks["at"] = time.monotonic()
            return await _walk_away(f.url, next(iter(expect)), 200 if drop else 60,
                                    20 if drop else 6, drop=drop, timeout_s=timeout_s)

        traffic, left = await drive(f, expect, fault)
        out = ejections(f.routers[0].url)
        what = (f"{left} streams dropped after their first event, 20 at a time" if drop
                else f"{left} streams given up by clients with a {timeout_s:.2f} s timeout "
                f"on {answer_s:.2f} s answers, 6 at a time")
        return Row("streams dropped mid-stream by clients" if drop
                   else "clients time out mid-stream", "unplanned", traffic.outcomes,
                   f.retried(), fault_at=marks["at"],
                   notes=[f"{what}, beside the steady traffic (whose figures these are) on "
                          f"a healthy pool; {out:g} ejections"],
                   extra={"ejections": int(out), "walked_away": left})


async def clients_drop_streams(work: Path, catalog: str, expect: dict[str, str],
                               shape: Shape) -> Row:
    """200 streams dropped by their clients after the first event, 20 at a time, while
    other clients go on: no engine may be ejected, nobody else may fail."""
    return await _clients_walk_away(work, catalog, expect, shape, drop=True)


async def clients_time_out(work: Path, catalog: str, expect: dict[str, str],
                           shape: Shape) -> Row:
    """60 clients that give up mid-stream (a timeout a third of the answer's time), 6 at
    a time, while other clients go on: as for drops."""
    return await _clients_walk_away(work, catalog, expect, shape, drop=False)


async def adapter_500_on_one_replica(work: Path, catalog: str, expect: dict[str, str],
                                     shape: Shape) -> Row:
    """Engine 0 answers 500 to every request for one adapter while it serves the others:
    the pair is avoided, the replica stays in."""
    with fleet(work / "adapter-500", catalog, shape) as f:
        name = expect[next(iter(expect))]
        marks: dict[str, Any] = {}

        async def fault(_t: Traffic) -> None:
            await asyncio.sleep(shape.seconds / 3)
            marks["at"] = time.monotonic()
            async with httpx.AsyncClient() as c:
                r = await c.post(f.engines[0].url + "/sim/script", json={
                    "model": name, "failure": {"status": 500,
                                               "message": "internal error"}})
                r.raise_for_status()

        traffic, _ = await drive(f, expect, fault)
        out = ejections(f.routers[0].url)
        async with httpx.AsyncClient() as c:
            status = (await c.get(f.routers[0].url + "/status")).json()
        return Row("an adapter answers 500 on one replica", "unplanned", traffic.outcomes,
                   f.retried(), fault_at=marks["at"],
                   notes=[f"{name} answered 500 by engine-0 from a third of the way in; "
                          f"{len(status['avoided'])} pair avoided in /status at the end, "
                          f"{out:g} ejections"],
                   extra={"ejections": int(out)})


SCENARIOS: dict[str, Callable[..., Awaitable[Row]]] = {
    "engine-kill": engine_killed_mid_stream,
    "engine-kill-idle": engine_killed_between_requests,
    "engine-stall": engine_stalled,
    "adapter-fails": adapter_fails_on_one_replica,
    "router-restart": router_restarted,
    "router-kill": router_killed,
    "engine-roll": engine_rolled,
    "client-drops": clients_drop_streams,
    "client-timeouts": clients_time_out,
    "adapter-500": adapter_500_on_one_replica,
}
"""Scenarios on the simulated fleet taking the catalog's URL; ``catalog-down`` takes its
process and is run on its own."""


def start_catalog(work: Path) -> Proc:
    return catalog_proc(work).start(wait=60)



