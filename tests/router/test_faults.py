"""Faults on the serving path, each injected into simulated engines behind a real
router: what the client sees (docs/router.md, "When an engine fails")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig, parse_sse

SIM = SimConfig(model="tiny", dynamic_loras=True, max_loras=4, output_tokens=6)
NOT_LOADED = "LoRA adapter 'demo/chat@v1' was found but could not be loaded."


def chat(text: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def metric(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name`` with exactly ``labels`` (0 if there is none)."""

    values = [sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples
              if sample.name == name and sample.labels == labels]
    assert len(values) <= 1, values
    return values[0] if values else 0.0


@asynccontextmanager
async def breaking_engine() -> AsyncIterator[tuple[str, list[str]]]:
    """An engine that passes its health checks and, to every generation request, sends
    a 200 head and then closes the connection: an answer broken before its first byte.
    Yields its URL and the paths it was asked."""
    asked: list[str] = []

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="")

    async def generate(request: web.Request) -> web.StreamResponse:
        asked.append(request.path)
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        assert request.transport is not None
        request.transport.close()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", health)
    app.router.add_post("/v1/chat/completions", generate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", asked
    finally:
        await runner.cleanup()


async def test_an_answer_broken_before_its_first_byte_is_retried_elsewhere(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Nothing reached the client yet, so the request goes once more to another replica:
    streams and whole answers alike come back complete."""
    async with breaking_engine() as (broken, asked), \
            AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config([broken, *sims.urls], policy="round-robin",
                            eject_after_failures=50)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            for i in range(6):
                stream = i % 2 == 0
                async with http.post(router.url + "/v1/chat/completions",
                                     json=chat(stream=stream)) as resp:
                    assert resp.status == 200, await resp.text()
                    if stream:
                        events = parse_sse(await resp.text())
                        assert events[-1] == "[DONE]"
                        assert not any(e != "[DONE]" and "error" in e for e in events)
                    else:
                        assert (await resp.json())["choices"][0]["message"]["content"]
            metrics = await (await http.get(router.url + "/metrics")).text()
        assert len(asked) >= 2  # round-robin sent it some, each then went elsewhere
        assert metric(metrics, "mol_router_retries_total", deployment="demo", reason="broken") \
            == len(asked)
        assert 'status="502"' not in metrics


async def test_a_broken_answer_with_nowhere_else_to_go_is_a_clean_502(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with breaking_engine() as (broken, asked):
        async with start_router(router_config([broken])) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            async with http.post(router.url + "/v1/chat/completions", json=chat()) as resp:
                assert resp.status == 502
                assert (await resp.json())["error"]["code"] == "upstream_error"
            async with http.post(router.url + "/v1/chat/completions",
                                 json=chat(stream=True)) as resp:
                events = parse_sse(await resp.text())
            assert events[-1] == "[DONE]"
            assert events[-2]["error"]["code"] == "upstream_error"
        assert len(asked) == 2  # no retry on the same replica


async def test_an_adapter_that_fails_to_load_on_one_replica_is_served_by_the_others(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Replica 0 says it cannot load demo/chat@v1 (vLLM's words): the request goes to
    replica 1, replica 0 is avoided for that adapter only (a metric and /status say so),
    and keeps serving the other adapter."""
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        cfg = router_config(sims.urls, policy="round-robin")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            for _ in range(2):  # twice: the adapter earns its own metric label
                async with http.post(router.url + "/v1/chat/completions", json=chat()) as resp:
                    assert resp.status == 200
            warm = len(sims.state(0).received)
            sims.script_failure("demo/chat@v1", replica=0, status=400, message=NOT_LOADED)
            for _ in range(8):
                for model in ("chat", "coding"):
                    async with http.post(router.url + "/v1/chat/completions",
                                         json=chat(model=model)) as resp:
                        assert resp.status == 200, await resp.text()
                        assert (await resp.json())["model"] == f"demo/{model}@v1"
            metrics = await (await http.get(router.url + "/metrics")).text()
            status = await (await http.get(router.url + "/status")).json()
        after = sims.state(0).received[warm:]
        chat0 = [r for r in after if r.body["model"] == "demo/chat@v1"]
        coding0 = [r for r in after if r.body["model"] == "demo/coding@v1"]
        assert len(chat0) == 1  # the first failure, then avoided there
        assert coding0  # the replica still serves its other adapter
        assert metric(metrics, "mol_router_adapter_replica_failures_total",
                      deployment="demo", adapter="demo/chat") == 1
        assert metric(metrics, "mol_router_retries_total", deployment="demo",
                      reason="adapter") == 1
        assert metric(metrics, "mol_router_avoided_adapter_replicas", deployment="demo") == 1
        assert [(a["endpoint"], a["adapter"]) for a in status["avoided"]] == [
            (sims.urls[0], "demo/chat@v1")]


async def test_an_adapter_no_replica_can_load_is_a_503_and_a_bad_request_passes_through(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims, \
            start_router(router_config(sims.urls)) as router, aiohttp.ClientSession() as http:
        await ready(router, 2)
        sims.script_failure("demo/chat@v1", status=400, message=NOT_LOADED)
        async with http.post(router.url + "/v1/chat/completions", json=chat()) as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"]
            error = (await resp.json())["error"]
        assert error["code"] == "adapter_unavailable"
        assert NOT_LOADED in error["message"]
        sims.clear_scripts()
        # A client's own bad request that names the adapter is not the engine failing
        # to load it: passed on as is, once, and nothing is avoided.
        sims.script_failure("demo/coding@v1", status=400,
                            message="demo/coding@v1: max_tokens must be at least 1")
        before = sum(len(s.received) for s in sims.states())
        async with http.post(router.url + "/v1/chat/completions",
                             json=chat(model="coding")) as resp:
            assert resp.status == 400
            assert "max_tokens" in (await resp.json())["error"]["message"]
        assert sum(len(s.received) for s in sims.states()) == before + 1
        tracker = router.runtime.tracker
        assert tracker.adapter_failures.avoid("demo/coding@v1") == frozenset()


async def test_a_dead_engine_is_ejected_at_once_and_back_within_a_scrape_interval(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Refused connections eject the replica on the first one (no count to reach); the
    requests go elsewhere; once the process listens again, the next health check
    re-admits it."""
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        cfg = router_config(sims.urls, policy="round-robin", eject_after_failures=50,
                            readmit_after_seconds=300)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            await sims.stop_replica(0)
            for i in range(6):
                async with http.post(router.url + "/v1/chat/completions",
                                     json=chat(stream=i % 2 == 0)) as resp:
                    assert resp.status == 200, await resp.text()
            tracker = router.runtime.tracker
            assert tracker.ready_endpoints() == [sims.urls[1]]
            metrics = await (await http.get(router.url + "/metrics")).text()
            assert metric(metrics, "mol_router_ejections_total", deployment="demo",
                          reason="down") == 1
            # the first request found it down; the later ones were not sent there
            assert metric(metrics, "mol_router_retries_total", deployment="demo",
                          reason="connect") <= 1
            async with http.get(router.url + "/readyz") as resp:
                assert resp.status == 200  # one replica can serve
            await sims.start_replica(0)
            loop = asyncio.get_running_loop()
            back = loop.time()
            while len(tracker.ready_endpoints()) < 2:
                assert loop.time() - back < 2 * cfg.scrape_interval_seconds + 0.3
                await asyncio.sleep(0.02)
            await sims.stop_replica(1)
            await sims.stop_replica(0)
            while tracker.ready_endpoints():
                assert loop.time() - back < 5
                await asyncio.sleep(0.02)
            async with http.get(router.url + "/readyz") as resp:
                assert resp.status == 503
                assert (await resp.json())["endpoints"] == 0


async def test_drain_serves_what_is_in_flight_and_fails_readiness_first(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """SIGTERM's drain: /readyz answers 503 at once, a stream in flight finishes whole,
    requests arriving during the delay are served on connections that then close, and
    after it nothing listens."""
    slow = SimConfig(model="tiny", dynamic_loras=True, output_tokens=40, itl_s=0.02)
    async with AsyncSimulatorCluster(replicas=1, config=slow) as sims, \
            start_router(router_config(sims.urls), drain_delay=3,
                         drain_timeout=10) as router, aiohttp.ClientSession() as http:
        await ready(router)
        streaming = await http.post(router.url + "/v1/chat/completions",
                                    json=chat(stream=True))
        assert streaming.status == 200
        await streaming.content.readany()
        draining = asyncio.create_task(router.drain())
        await asyncio.sleep(0.05)
        async with http.get(router.url + "/readyz") as resp:
            assert resp.status == 503
            assert (await resp.json())["draining"] is True
            assert resp.headers.get("Connection", "").lower() == "close"
        async with http.post(router.url + "/v1/chat/completions", json=chat()) as resp:
            assert resp.status == 200  # still served while load balancers catch up
            assert resp.headers.get("Connection", "").lower() == "close"
        async with http.post(router.url + "/v1/chat/completions",
                             json=chat(stream=True)) as resp:
            assert resp.headers.get("Connection", "").lower() == "close"  # said in the head
            assert parse_sse(await resp.text())[-1] == "[DONE]"
        events = parse_sse((await streaming.read()).decode())
        assert events[-1] == "[DONE]"
        assert not any(e != "[DONE]" and "error" in e for e in events)
        await asyncio.wait_for(draining, 15)
        try:
            await http.get(router.url + "/healthz")
        except aiohttp.ClientConnectionError:
            pass
        else:
            raise AssertionError("the router still listens after its drain")
