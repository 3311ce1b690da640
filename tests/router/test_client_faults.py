"""Faults clients cause, and faults confined to one adapter, on a healthy pool: a real
router in front of simulated engines (docs/router.md, "When an engine fails").

A client that drops its stream or times out is no failure of the engine's: nothing may
be ejected for it, and the other clients must not notice."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig, parse_sse
from tests.router.test_faults import chat, metric

# Answers of ~0.6 s, streamed a token every 20 ms: long enough to leave mid-stream.
SLOW = SimConfig(model="tiny", dynamic_loras=True, max_loras=4, output_tokens=30, itl_s=0.02)
FAST = SimConfig(model="tiny", dynamic_loras=True, max_loras=4, output_tokens=4)


async def _drop_after_first_chunk(http: aiohttp.ClientSession, url: str) -> None:
    async with http.post(url + "/v1/chat/completions", json=chat(stream=True)) as resp:
        assert resp.status == 200
        await resp.content.readany()  # the first event, then the client goes away
        resp.close()


async def _others(http: aiohttp.ClientSession, url: str, n: int) -> list[int]:
    """Statuses of ``n`` requests of another client, whole answers and streams in turn."""
    statuses = []
    for i in range(n):
        async with http.post(url + "/v1/chat/completions",
                             json=chat(stream=i % 2 == 0, max_tokens=3)) as resp:
            body = await resp.text()
            ok = resp.status == 200 and (i % 2 or parse_sse(body)[-1] == "[DONE]")
            statuses.append(resp.status if ok else 599)
    return statuses


async def _settled(router: Any) -> dict[str, Any]:
    """The tracker's view once the router has seen every abandoned request end."""
    tracker = router.runtime.tracker
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while any(s.inflight for s in tracker.snapshot().values()):
        assert loop.time() < deadline, "requests stayed in flight"
        await asyncio.sleep(0.02)
    return {"ready": list(tracker.ready_endpoints()),
            "failures": [e.failures for e in tracker._engines.values()]}


async def test_clients_dropping_streams_mid_stream_eject_no_engine(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """30 streams dropped after their first event, 5 at a time, while another client
    sends: no ejection, no failure booked, every other request answered."""
    async with AsyncSimulatorCluster(replicas=2, config=SLOW) as sims:
        async with start_router(router_config(sims.urls)) as router, \
                aiohttp.ClientSession() as http, aiohttp.ClientSession() as other:
            await ready(router, 2)
            others = asyncio.create_task(_others(other, router.url, 12))
            for _ in range(6):
                await asyncio.gather(*(_drop_after_first_chunk(http, router.url)
                                       for _ in range(5)))
            statuses = await others
            state = await _settled(router)
            metrics = await (await http.get(router.url + "/metrics")).text()
        assert statuses == [200] * 12
        assert state == {"ready": sims.urls, "failures": [0, 0]}
        for reason in ("down", "failures"):
            assert metric(metrics, "mol_router_ejections_total", deployment="demo",
                          reason=reason) == 0


async def test_clients_timing_out_mid_answer_eject_no_engine(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Clients with a 0.2 s timeout on 0.6 s answers, streamed and whole: no ejection,
    and the other client's answers all come back."""
    async with AsyncSimulatorCluster(replicas=2, config=SLOW) as sims:
        async with start_router(router_config(sims.urls)) as router, \
                aiohttp.ClientSession() as http, aiohttp.ClientSession() as other:
            await ready(router, 2)

            async def impatient(stream: bool) -> None:
                try:
                    async with http.post(router.url + "/v1/chat/completions",
                                         json=chat(stream=stream),
                                         timeout=aiohttp.ClientTimeout(total=0.2)) as resp:
                        await resp.read()
                except TimeoutError:
                    return
                raise AssertionError("the answer should have taken longer than 0.2 s")

            others = asyncio.create_task(_others(other, router.url, 10))
            for _ in range(4):
                await asyncio.gather(*(impatient(i % 2 == 0) for i in range(6)))
            statuses = await others
            state = await _settled(router)
        assert statuses == [200] * 10
        assert state == {"ready": sims.urls, "failures": [0, 0]}


async def test_engines_failing_every_request_never_empty_the_pool(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Both engines answer 500 to everything while their health checks pass: one may go
    out (maxEjectionPercent 50), the pool is never emptied, and a client gets the
    engine's error (502), not a wait for an engine that never comes."""
    async with AsyncSimulatorCluster(replicas=2, config=FAST) as sims:
        cfg = router_config(sims.urls, eject_after_failures=1)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            sims.script_failure(None, status=500, message="engine trouble")
            for i in range(10):
                async with http.post(router.url + "/v1/chat/completions",
                                     json=chat(stream=i % 2 == 0)) as resp:
                    assert resp.status == 502, await resp.text()
            tracker = router.runtime.tracker
            assert len(tracker.ready_endpoints()) == 1
            sims.clear_scripts()
            async with http.post(router.url + "/v1/chat/completions", json=chat()) as resp:
                assert resp.status == 200


async def test_a_500_for_one_adapter_avoids_the_pair_not_the_replica(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Replica 0 answers 500 to every request for demo/chat@v1 while it serves
    demo/coding@v1: that pair is avoided (chat goes to replica 1), replica 0 stays in and
    keeps serving coding, and no client sees an error."""
    async with AsyncSimulatorCluster(replicas=2, config=FAST) as sims:
        cfg = router_config(sims.urls, policy="round-robin", eject_after_failures=2)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            for _ in range(4):  # coding succeeds on both replicas
                async with http.post(router.url + "/v1/chat/completions",
                                     json=chat(model="coding")) as resp:
                    assert resp.status == 200
            warm = len(sims.state(0).received)
            sims.script_failure("demo/chat@v1", replica=0, status=500, message="boom")
            for i in range(10):
                async with http.post(router.url + "/v1/chat/completions",
                                     json=chat(stream=i % 2 == 0)) as resp:
                    assert resp.status == 200, await resp.text()
            async with http.post(router.url + "/v1/chat/completions",
                                 json=chat(model="coding")) as resp:
                assert resp.status == 200
            tracker = router.runtime.tracker
            assert tracker.ready_endpoints() == sims.urls
            assert tracker.adapter_failures.avoid("demo/chat@v1") == {sims.urls[0]}
            metrics = await (await http.get(router.url + "/metrics")).text()
        after = sims.state(0).received[warm:]
        assert len([r for r in after if r.body["model"] == "demo/chat@v1"]) == 1
        assert metric(metrics, "mol_router_ejections_total", deployment="demo",
                      reason="failures") == 0
