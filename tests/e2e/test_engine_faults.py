"""Acceptance: one of two real vLLM CPU replicas killed (SIGKILL, its whole process
group, as the kernel's OOM killer or a node loss would) while traffic flows through
the router.

The session engine is replica A; this module starts replica B like it. Eight clients
send streamed and whole chat requests for two adapters; once a third of them are
answered, B dies. What must hold (docs/router.md, "When an engine fails"): no request
hangs, every failure is a clean error (a JSON error, or an SSE error event followed by
``data: [DONE]``) and only for a stream that was mid-answer on B, every request sent
after the kill is answered, each answer comes from the adapter version asked for, and
the router takes B out of selection once (``mol_router_ejections_total``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mol_platform.apps.demo import DemoResult
from mol_platform.contract.engine_args import ENGINE_DRAIN_SECONDS
from mol_platform.contract.router_config import RouterConfig
from mol_router.server import RouterServer
from mol_router.settings import RouterSettings
from mol_testkit.engine import Engine
from mol_testkit.net import free_port
from mol_testkit.simulator import parse_sse

from .conftest import replica

pytestmark = pytest.mark.e2e

REQUESTS = 48
CLIENTS = 8
HUNG_AFTER = 90.0  # seconds without the whole answer: hung


async def one(http: aiohttp.ClientSession, url: str, i: int) -> tuple[str, float]:
    """("answered" | "clean" | "hung" | "wrong: ..." | "bad: ...", when it was sent)."""
    model = ("chat", "coding")[i % 2]
    stream = i % 3 != 0
    body = {"model": model, "stream": stream, "max_tokens": 12, "temperature": 0,
            "ignore_eos": True, "messages": [{"role": "user", "content": f"request {i}"}]}
    sent = time.monotonic()
    try:
        async with http.post(url + "/v1/chat/completions", json=body,
                             timeout=aiohttp.ClientTimeout(total=HUNG_AFTER)) as resp:
            text = await resp.text()
            if not stream or resp.status != 200:
                if resp.status != 200:
                    error = (await resp.json()).get("error", {})
                    return ("clean" if error.get("code") else f"bad: {text[:200]}"), sent
                got = (await resp.json())["model"]
            else:
                events = parse_sse(text)
                if events[-1] != "[DONE]":
                    return f"bad: stream ended without [DONE]: {text[-200:]}", sent
                if any(e != "[DONE]" and "error" in e for e in events):
                    return "clean", sent
                models = {e["model"] for e in events if e != "[DONE]"}
                got = models.pop() if len(models) == 1 else str(models)
    except TimeoutError:
        return "hung", sent
    want = f"demo/{model}@v1"
    return ("answered" if got == want else f"wrong: {got} for {want}"), sent


async def test_killing_one_of_two_replicas_under_traffic(
    engine: Engine, engine_venv: Path, demo_assets: DemoResult, tmp_path: Path
) -> None:
    port_b = free_port()
    config = tmp_path / "router.yaml"
    with replica(engine_venv, demo_assets, port_b) as b:
        cfg = RouterConfig.model_validate({
            "deployment": "demo", "profile": "local", "base_model": "demo-base",
            "default": "chat", "policy": "round-robin",
            "experts": [{"name": "chat", "adapter": "demo/chat@v1"},
                        {"name": "coding", "adapter": "demo/coding@v1"}],
            "endpoints": [engine.base_url, b.base_url], "scrape_interval_seconds": 0.5,
        })
        config.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))
        server = RouterServer(RouterSettings(config=config, host="127.0.0.1", port=0))
        await server.start()
        killed_at: list[float] = []
        try:
            tracker = server.runtime.tracker
            assert tracker is not None
            deadline = time.monotonic() + 60
            while len(tracker.ready_endpoints()) < 2:
                assert time.monotonic() < deadline, tracker.ready_endpoints()
                await asyncio.sleep(0.1)
            results: list[tuple[str, float]] = []
            queue = iter(range(REQUESTS))

            async def client(http: aiohttp.ClientSession) -> None:
                for i in queue:
                    results.append(await one(http, server.url, i))
                    if len(results) == REQUESTS // 3 and not killed_at:
                        os.killpg(b.pid, signal.SIGKILL)
                        killed_at.append(time.monotonic())

            async with aiohttp.ClientSession() as http:
                await asyncio.gather(*(client(http) for _ in range(CLIENTS)))
                metrics = await (await http.get(server.url + "/metrics")).text()
            assert tracker.ready_endpoints() == [engine.base_url]
        finally:
            await server.stop()
    assert killed_at
    outcomes = [o for o, _ in results]
    assert len(outcomes) == REQUESTS
    assert not [o for o in outcomes if o not in ("answered", "clean")], outcomes
    clean = outcomes.count("clean")
    assert clean <= CLIENTS, outcomes  # at most the streams in flight at the kill
    after = [o for o, sent in results if sent > killed_at[0]]
    assert after
    assert all(o == "answered" for o in after), after
    # B out of selection once: at its first refused connection (down), or after the
    # streams it broke (failures in a row), whichever came first
    ejections = [s.value for f in text_string_to_metric_families(metrics)
                 for s in f.samples if s.name == "mol_router_ejections_total"]
    assert sum(ejections) == 1, metrics


async def test_a_sigtermed_replica_finishes_its_streams_first(
    engine_venv: Path, demo_assets: DemoResult
) -> None:
    """A replica being rolled gets SIGTERM (its API server process, as a container's
    PID 1 does) with a stream half-way: with the flag every launch carries
    (``--shutdown-timeout``, ENGINE_DRAIN_SECONDS) the stream ends whole, then the
    process exits. vLLM's own default aborts it."""
    drain = ["--shutdown-timeout", str(ENGINE_DRAIN_SECONDS)]
    with replica(engine_venv, demo_assets, free_port(), drain) as c:
        body = {"model": "chat", "stream": True, "max_tokens": 48, "ignore_eos": True,
                "temperature": 0, "messages": [{"role": "user", "content": "count"}]}
        async with aiohttp.ClientSession() as http, \
                http.post(c.base_url + "/v1/chat/completions", json=body,
                          timeout=aiohttp.ClientTimeout(total=HUNG_AFTER)) as resp:
            assert resp.status == 200
            first = await resp.content.readany()
            os.kill(c.pid, signal.SIGTERM)
            text = (first + await resp.read()).decode()
        events = parse_sse(text)
        assert events[-1] == "[DONE]", text[-500:]
        chunks = [e for e in events if e != "[DONE]"]
        assert not any("error" in e for e in chunks), text[-500:]
        content = [e for e in chunks if e["choices"] and e["choices"][0]["delta"].get("content")]
        assert len(content) >= 40, len(content)  # about one event per token: not cut short
        deadline = time.monotonic() + ENGINE_DRAIN_SECONDS
        while _alive(c.pid):
            assert time.monotonic() < deadline, "the engine did not exit after its drain"
            await asyncio.sleep(0.2)


def _alive(pid: int) -> bool:
    """Running (an exited child not yet reaped is a zombie: not alive)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return not stat.split(") ", 1)[1].startswith("Z")
