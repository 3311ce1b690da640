"""The engine tracker against fake engines on loopback: what it reads from /metrics,
health-based ejection and re-admission, adapter-load estimates, its own bookkeeping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from mol_router.replicas.engine_metrics import parse_engine_metrics
from mol_router.replicas.tracker import EngineTracker

A, B, C = "ns/a@v1", "ns/b@v2", "ns/c@v1"


def lora_line(stamp: float, running: list[str], max_lora: int = 2) -> str:
    names = ",".join(running)
    return (
        f'vllm:lora_requests_info{{max_lora="{max_lora}",running_lora_adapters="{names}",'
        f'waiting_lora_adapters="{names}"}} {stamp}'
    )


def exposition(running: int, waiting: int, kv: float, lora: list[str]) -> str:
    return "\n".join([
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}.0',
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}.0',
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0',
        *lora,
        "",
    ])  # fmt: skip


def test_parse_takes_the_newest_lora_label_set_and_sums_engines() -> None:
    text = exposition(2, 1, 0.25, [
        lora_line(1700000003.0, [A, B]),
        lora_line(1700000009.5, [C]),  # newest: the current state
        lora_line(1700000001.0, []),
    ]) + 'vllm:num_requests_running{engine="1",model_name="m"} 3.0\n'  # fmt: skip
    m = parse_engine_metrics(text)
    assert (m.running, m.waiting, m.kv_cache_usage) == (5, 1, 0.25)
    assert (m.max_lora, m.running_adapters) == (2, (C,))


@pytest.mark.parametrize(
    ("text", "adapters"),
    [
        ("", ()),
        ("garbage {{{\nvllm:num_requests_running oops\n", ()),
        (lora_line(5, []), ()),
        (
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters="x\\"y, z"} 9\n',
            ('x"y', "z"),
        ),
    ],
    ids=["empty", "garbage", "idle-engine", "escapes-and-spaces"],
)
def test_parse_tolerates_odd_input(text: str, adapters: tuple[str, ...]) -> None:
    m = parse_engine_metrics(text)
    assert m.running_adapters == adapters
    assert m.running == 0


@dataclass
class FakeEngine:
    """An engine stand-in whose /health status and /metrics text the test sets."""

    health: int = 200
    running: list[str] = field(default_factory=list)
    queue: tuple[int, int] = (0, 0)
    stamp: float = 1000.0
    history: list[str] = field(default_factory=list)
    url: str = ""

    def set_running(self, names: list[str]) -> None:
        self.stamp += 1
        self.history.append(lora_line(self.stamp, names))
        self.running = names

    async def handle_health(self, _: web.Request) -> web.Response:
        return web.Response(status=self.health)

    async def handle_metrics(self, _: web.Request) -> web.Response:
        body = exposition(*self.queue, 0.5, self.history)
        return web.Response(text=body, content_type="text/plain")


@pytest.fixture
async def engines() -> AsyncIterator[list[FakeEngine]]:
    fakes = [FakeEngine(), FakeEngine()]
    runners = []
    for f in fakes:
        app = web.Application()
        app.router.add_get("/health", f.handle_health)
        app.router.add_get("/metrics", f.handle_metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        f.url = f"http://127.0.0.1:{port}"
        runners.append(runner)
    yield fakes
    for r in runners:
        await r.cleanup()


async def test_scrape_health_and_adapter_load_estimates(engines: list[FakeEngine]) -> None:
    e0, e1 = engines
    loads: list[str] = []
    async with aiohttp.ClientSession() as session:
        t = EngineTracker(session, scrape_interval=60, eject_after_failures=2,
                          readmit_after=0.0, on_adapter_load=loads.append)  # fmt: skip
        e1.health = 503
        t.set_endpoints([e0.url, e1.url + "/"])
        assert t.ready_endpoints() == []  # nothing probed yet
        e0.queue = (3, 2)
        e0.set_running([A, B])
        await t.probe_all()
        assert t.ready_endpoints() == [e0.url]
        s = t.snapshot()[e0.url]
        assert (s.running, s.waiting, s.kv_cache_usage, s.max_lora) == (3, 2, 0.5, 2)
        assert s.running_adapters == {A, B}
        assert loads == []  # another router's sends loaded them: its loads, not ours
        assert t.snapshot()[e1.url].healthy is False

        assert t.begin(e0.url, A) is False  # running there: no load
        assert loads == []
        t.end(e0.url, A)
        assert t.begin(e0.url, C) is True  # two slots, both taken: C waits for a load
        assert loads == [e0.url]
        t.end(e0.url, C)
        e0.set_running([C])  # C took B's slot (B idle longest)
        await t.probe_all()
        assert t.begin(e0.url, C) is False
        t.end(e0.url, C)
        assert t.begin(e0.url, B) is True  # evicted: a second load
        assert loads == [e0.url, e0.url]


async def test_ejection_and_readmission(engines: list[FakeEngine]) -> None:
    """An engine failing its requests (while its health check passes) is ejected after
    N in a row, re-admitted once its back-off has passed and a check passes; a failed
    check starts the wait over, and each ejection no success separates doubles it. (Two
    engines: the last one passing its checks is never ejected for failures.)"""
    e0, e1 = engines
    async with aiohttp.ClientSession() as session:
        t = EngineTracker(session, scrape_interval=60, eject_after_failures=2,
                          readmit_after=0.2, readmit_after_max=0.5)
        t.set_endpoints([e0.url, e1.url])
        await t.probe_all()
        assert t.ready_endpoints() == [e0.url, e1.url]
        t.record_failure(e0.url)
        t.record_success(e0.url)  # a success in between resets the count
        t.record_failure(e0.url)
        assert t.ready_endpoints() == [e0.url, e1.url]
        t.record_failure(e0.url)
        assert t.ready_endpoints() == [e1.url]
        assert t.snapshot()[e0.url].healthy is False
        await t.probe_all()  # passes, but the back-off has not passed
        assert t.ready_endpoints() == [e1.url]
        await asyncio.sleep(0.25)
        e0.health = 500
        await t.probe_all()  # checked, failed: the wait starts over
        assert t.ready_endpoints() == [e1.url]
        e0.health = 200
        await t.probe_all()
        assert t.ready_endpoints() == [e1.url]
        await asyncio.sleep(0.25)
        await t.probe_all()
        assert t.ready_endpoints() == [e0.url, e1.url]
        assert t.snapshot()[e0.url].healthy is True
        # ejected again with no success between: 0.4 s now
        t.record_failure(e0.url)
        t.record_failure(e0.url)
        await asyncio.sleep(0.25)
        await t.probe_all()
        assert t.ready_endpoints() == [e1.url]
        await asyncio.sleep(0.2)
        await t.probe_all()
        assert t.ready_endpoints() == [e0.url, e1.url]
        # a third time: 0.8 s capped at readmit_after_max, 0.5 s
        t.record_failure(e0.url)
        t.record_failure(e0.url)
        await asyncio.sleep(0.55)
        await t.probe_all()
        assert t.ready_endpoints() == [e0.url, e1.url]
        # a success resets the doubling: back to 0.2 s
        t.record_success(e0.url)
        t.record_failure(e0.url)
        t.record_failure(e0.url)
        await asyncio.sleep(0.25)
        await t.probe_all()
        assert t.ready_endpoints() == [e0.url, e1.url]


async def test_a_down_engine_is_ejected_at_once_and_back_on_the_first_check(
        engines: list[FakeEngine]) -> None:
    """Refused connections (a dead process) eject without waiting for a count; the first
    passing check re-admits it, whatever the back-off, and forgets the adapters that
    failed there (it may be a new process)."""
    e0, e1 = engines
    ejected: list[tuple[str, str]] = []
    async with aiohttp.ClientSession() as session:
        t = EngineTracker(session, scrape_interval=60, eject_after_failures=3,
                          readmit_after=30, on_eject=lambda e, why: ejected.append((e, why)))
        t.set_endpoints([e0.url, e1.url])
        await t.probe_all()
        t.record_adapter_failure(e0.url, A)
        assert t.adapter_failures.avoid(A) == {e0.url}
        t.record_failure(e0.url, down=True)
        assert t.ready_endpoints() == [e1.url]
        assert ejected == [(e0.url, "down")]
        await t.probe_all()  # it answers again
        assert sorted(t.ready_endpoints()) == sorted([e0.url, e1.url])
        assert t.adapter_failures.avoid(A) == frozenset()
        for _ in range(3):
            t.record_failure(e1.url)
        assert ejected[-1] == (e1.url, "failures")


async def test_a_stalled_engine_is_ejected_by_its_health_check() -> None:
    """An engine that accepts connections but does not answer (SIGSTOP, a hung event
    loop) is down after one check that times out."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with aiohttp.ClientSession() as session:
            t = EngineTracker(session, scrape_interval=60, eject_after_failures=3,
                              readmit_after=30, probe_timeout=0.2)
            t.set_endpoints([url])
            t.record_health(url, True)
            assert t.ready_endpoints() == [url]
            await t.probe_all()
            assert t.ready_endpoints() == []
            assert accepted
    finally:
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()


async def test_unreachable_engine_is_ejected_by_health_checks(engines: list[FakeEngine]) -> None:
    e0, _ = engines
    async with aiohttp.ClientSession() as session:
        t = EngineTracker(session, scrape_interval=0.05, eject_after_failures=2,
                          readmit_after=30)  # fmt: skip
        t.set_endpoints([e0.url, "http://127.0.0.1:9"])
        await t.start()
        try:
            await asyncio.sleep(0.3)
            assert t.ready_endpoints() == [e0.url]
        finally:
            await t.stop()


async def test_bookkeeping_and_endpoint_changes(engines: list[FakeEngine]) -> None:
    e0, e1 = engines
    async with aiohttp.ClientSession() as session:
        t = EngineTracker(session, scrape_interval=60)
        t.set_endpoints([e0.url])
        await t.probe_all()
        before = t.snapshot()
        t.begin(e0.url, A)
        t.begin(e0.url, None)
        s = t.snapshot()[e0.url]
        assert (s.inflight, s.recent_adapters) == (2, frozenset({A}))
        assert before[e0.url].inflight == 0  # snapshots are never mutated
        for name in (B, C, "ns/d@v1", "ns/e@v1"):  # 4 slots assumed until max_lora is known
            t.begin(e0.url, name)
        assert A not in t.snapshot()[e0.url].recent_adapters
        t.end(e0.url, A)
        t.begin("http://unknown", A)  # ignored, no error
        t.set_endpoints([e0.url, e1.url])  # e0 keeps its state; e1 is new, not ready
        assert t.snapshot()[e0.url].inflight == 5
        assert t.ready_endpoints() == [e0.url]
        t.set_endpoints([e1.url])
        assert list(t.snapshot()) == [e1.url]
        for _ in range(10):
            t.end(e1.url, None)
        assert t.snapshot()[e1.url].inflight == 0


def test_stats_between_begin_and_end_follow_scrapes_and_health() -> None:
    """Stats are reused while only the in-flight count moves; a scrape, a new adapter
    or a health change in between shows in the next snapshot."""
    from mol_router.replicas.engine_metrics import EngineMetrics

    session: aiohttp.ClientSession = None  # type: ignore[assignment]
    t = EngineTracker(session, scrape_interval=60, eject_after_failures=1)
    url = "http://engine:8000"
    t.set_endpoints([url])
    t.record_health(url, True)
    t.begin(url, A)
    busy = t.snapshot()[url]
    t.end(url, A)
    idle = t.snapshot()[url]
    t.begin(url, A)
    assert t.snapshot()[url] is busy
    assert busy.inflight == 1
    assert idle.inflight == 0
    t.observe(url, EngineMetrics(running=3, max_lora=2, running_adapters=(B,)))
    s = t.snapshot()[url]
    assert (s.running, s.running_adapters, s.inflight) == (3, frozenset({B}), 1)
    t.end(url, A)
    assert t.snapshot()[url].running == 3
    assert t.snapshot()[url].inflight == 0
    t.begin(url, C)
    assert t.snapshot()[url].recent_adapters == {A, C}
    t.end(url, C)
    t.record_failure(url, down=True)  # nothing answers there: ejected at once
    assert t.snapshot()[url].healthy is False
    assert t.ready_endpoints() == []
    t.record_health(url, True)  # it came back: re-admitted by the first passing check
    assert t.snapshot()[url].healthy is True
    assert t.ready_endpoints() == [url]


def test_settings_are_range_checked() -> None:
    session: aiohttp.ClientSession = None  # type: ignore[assignment]
    with pytest.raises(ValueError, match="scrape_interval"):
        EngineTracker(session, scrape_interval=0)
    with pytest.raises(ValueError, match="eject_after_failures"):
        EngineTracker(session, eject_after_failures=0)
    with pytest.raises(ValueError, match="readmit_after"):
        EngineTracker(session, readmit_after=-1)
    with pytest.raises(ValueError, match="demand_half_life"):
        EngineTracker(session, demand_half_life=0)


def test_slot_estimate_and_demand_follow_sends_and_scrapes() -> None:
    """The tracker's guess of each engine's GPU slots is an LRU of what it sent there
    and what the engine showed running, never dropping a running adapter; every
    request counts toward its adapter's demand share."""
    from mol_router.replicas.engine_metrics import EngineMetrics
    from mol_router.replicas.policy.interface import FleetStats

    session: aiohttp.ClientSession = None  # type: ignore[assignment]
    t = EngineTracker(session, scrape_interval=60, demand_half_life=1_000_000)
    url = "http://engine:8000"
    t.set_endpoints([url])
    t.observe(url, EngineMetrics(max_lora=2, running_adapters=(A,)))
    t.begin(url, B)
    assert t.snapshot()[url].slot_adapters == (A, B)
    assert t.snapshot()[url].pending_adapters == {B}  # in flight, not in the scrape yet
    # B's request is in flight, so the engine cannot evict B; A, seen running at the
    # last scrape (maybe finished since), is the least recent: it leaves the estimate
    t.begin(url, C)
    assert t.snapshot()[url].slot_adapters == (B, C)
    assert t.snapshot()[url].pending_adapters == {B, C}
    t.observe(url, EngineMetrics(max_lora=2, running_adapters=(B,)))
    # C waits for a slot: the scrape lists only running adapters, so it stays pending
    assert t.snapshot()[url].pending_adapters == {B, C}
    t.end(url, B)
    t.end(url, C)  # both done, C last
    assert t.snapshot()[url].slot_adapters == (B, C)
    assert t.snapshot()[url].pending_adapters == set()  # nothing of ours in flight
    t.begin(url, B)
    assert t.snapshot()[url].slot_adapters == (C, B)
    t.begin(url, B)
    snap = t.snapshot()
    assert isinstance(snap, FleetStats)
    assert snap.demand is t.demand is not None
    assert snap.demand.share(B) == pytest.approx(0.75, rel=1e-4)
    assert snap.demand.share(C) == pytest.approx(0.25, rel=1e-4)
    assert snap.demand.share(A) == 0.0  # seen running, never sent by this router
    t.begin(url, None)  # base-model requests count toward no adapter
    assert snap.demand.share(B) == pytest.approx(0.75, rel=1e-4)


def test_begin_says_when_a_request_waits_for_a_load() -> None:
    """Cold: the engine neither runs the adapter nor holds it in the slots estimated
    from what this router sent there (``mol_router_adapter_cold_requests_total``)."""
    from mol_router.replicas.engine_metrics import EngineMetrics

    session: aiohttp.ClientSession = None  # type: ignore[assignment]
    t = EngineTracker(session, scrape_interval=60)
    url = "http://engine:8000"
    t.set_endpoints([url])
    t.observe(url, EngineMetrics(max_lora=2, running_adapters=(A,)))
    assert t.begin(url, A) is False  # running there
    assert t.begin(url, B) is True  # first send
    assert t.begin(url, B) is False  # sent a moment ago: loaded or loading
    t.end(url, B)
    t.end(url, B)
    assert t.begin(url, C) is True  # two slots: A (running) and C; B (idle) is out
    assert t.begin(url, B) is True
    assert t.begin(url, None) is False  # the base model never loads
    assert t.begin("http://unknown", A) is False


def test_the_snapshot_tells_which_endpoint_was_sent_to_least_recently() -> None:
    session: aiohttp.ClientSession = None  # type: ignore[assignment]
    t = EngineTracker(session, scrape_interval=60)
    a, b = "http://a:8000", "http://b:8000"
    t.set_endpoints([a, b])
    held = t.snapshot()
    t.begin(a, A)
    t.begin(b, A)
    t.end(b, A)  # ends move nothing: the send count is what ages the lanes
    t.begin(a, None)
    assert dict(t.snapshot().last_sent) == {b: 2, a: 3}
    assert held.last_sent[b] < held.last_sent[a]  # live, as the demand estimate is
    t.set_endpoints([a])
    assert dict(t.snapshot().last_sent) == {a: 3}
