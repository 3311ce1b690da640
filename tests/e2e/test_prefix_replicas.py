"""Acceptance: prefix-aware replica picking on two real vLLM CPU replicas.

The session engine is replica A; this module starts replica B like it (same base,
same adapters under the same names) on a port of its own, and later restarts B on
that port. A conversation that starts while B is the only endpoint must keep landing
on B once A joins (B's prefix-cache hits grow, A sees none of its turns), the same
prompt on another adapter must not hit anything (vLLM keys blocks by LoRA, and so
does the router's index), and once B restarts with an empty cache the router must no
longer believe the conversation is cached there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mol_platform.apps.demo import DemoResult
from mol_platform.contract.router_config import RouterConfig
from mol_router.replicas.tracker import EngineTracker
from mol_router.server import RouterServer
from mol_router.settings import RouterSettings
from mol_testkit.engine import Engine
from mol_testkit.net import free_port
from mol_testkit.simulator.segments import prompt_text

from .conftest import replica

pytestmark = pytest.mark.e2e

BLOCK = 128  # vLLM's CPU block size: only whole blocks are cached
SYSTEM_TOKENS = 2 * BLOCK + 20
GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 6, "ignore_eos": True}


def write_config(path: Path, endpoints: list[str]) -> None:
    cfg = RouterConfig.model_validate({
        "deployment": "demo", "profile": "local", "base_model": "demo-base", "default": "chat",
        "experts": [{"name": "chat", "adapter": "demo/chat@v1"},
                    {"name": "coding", "adapter": "demo/coding@v1"}],
        "endpoints": endpoints, "scrape_interval_seconds": 0.5,
    })
    path.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))


async def prefix_counters(http: httpx.AsyncClient, url: str) -> tuple[float, float]:
    """(queried, hit) prompt tokens of ``url``'s prefix cache since it started."""
    text = (await http.get(url + "/metrics")).text
    totals = {"vllm:prefix_cache_queries": 0.0, "vllm:prefix_cache_hits": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name in totals:
            totals[family.name] += sum(s.value for s in family.samples
                                       if s.name.endswith("_total"))
    return totals["vllm:prefix_cache_queries"], totals["vllm:prefix_cache_hits"]


async def ready_exactly(server: RouterServer, count: int, within: float = 120) -> None:
    """Wait until the router has exactly ``count`` ready endpoints (also fewer than now)."""
    tracker = server.runtime.tracker
    assert tracker is not None
    deadline = time.monotonic() + within
    while len(tracker.ready_endpoints()) != count:
        assert time.monotonic() < deadline, tracker.ready_endpoints()
        await asyncio.sleep(0.1)


class Turns:
    """Sends chat turns through the router and tells, from the engines' own prefix
    counters, which replica served each one and how many prompt tokens it hit."""

    def __init__(self, http: httpx.AsyncClient, router: str, engines: dict[str, str]) -> None:
        self.http, self.router, self.engines = http, router, engines

    async def counters(self) -> dict[str, tuple[float, float]]:
        return {name: await prefix_counters(self.http, url) for name, url in self.engines.items()}

    async def send(
        self, model: str, messages: list[dict[str, str]]
    ) -> dict[str, tuple[float, float]]:
        """(queried, hit) tokens the request added on each engine."""
        before = await self.counters()
        r = await self.http.post(self.router + "/v1/chat/completions",
                                 json={"model": model, "messages": messages, **GREEDY})
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 10
        while (after := await self.counters()) == before and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # the engine counts after its step
        messages.append(r.json()["choices"][0]["message"])
        return {n: (after[n][0] - before[n][0], after[n][1] - before[n][1]) for n in before}


def booked(tracker: EngineTracker) -> list[tuple[str, tuple[int, ...]]]:
    """Record the prefix keys the proxy books with each send."""
    sends: list[tuple[str, tuple[int, ...]]] = []
    begin = tracker.begin

    def spy(endpoint: str, adapter: str | None, prefix: tuple[int, ...] = ()) -> bool:
        sends.append((endpoint, prefix))
        return begin(endpoint, adapter, prefix)

    tracker.begin = spy  # type: ignore[method-assign]
    return sends


async def test_a_conversation_stays_where_its_prefix_is_cached(
    engine: Engine, engine_venv: Path, demo_assets: DemoResult, tmp_path: Path
) -> None:
    run = f"{time.time_ns()}"  # text no earlier test sent
    system = {"role": "system", "content": prompt_text([(f"sys-{run}", SYSTEM_TOKENS)])}
    conversation = [system, {"role": "user", "content": prompt_text([(f"q1-{run}", 12)])}]
    port_b = free_port()
    config = tmp_path / "router.yaml"
    with contextlib.ExitStack() as replica_b:
        b = replica_b.enter_context(replica(engine_venv, demo_assets, port_b))
        write_config(config, [b.base_url])
        server = RouterServer(RouterSettings(config=config, host="127.0.0.1", port=0))
        await server.start()
        try:
            tracker = server.runtime.tracker
            assert tracker is not None
            sends = booked(tracker)
            async with httpx.AsyncClient(timeout=120) as http:
                await ready_exactly(server, 1)
                turns = Turns(http, server.url, {"A": engine.base_url, "B": b.base_url})
                first = await turns.send("chat", conversation)
                assert first["B"][0] > SYSTEM_TOKENS, first
                assert first["A"] == (0, 0), first

                # Replica A joins (a scale-up): the conversation stays on B, where its
                # system prompt and history are cached, though A is idle.
                write_config(config, [engine.base_url, b.base_url])
                assert await server.runtime.reload_now()
                await ready_exactly(server, 2)
                for k in (2, 3, 4):
                    conversation.append(
                        {"role": "user", "content": prompt_text([(f"q{k}-{run}", 12)])})
                    seen = await turns.send("chat", conversation)
                    assert seen["A"] == (0, 0), (k, seen)
                    queried, hit = seen["B"]
                    assert SYSTEM_TOKENS - 20 <= hit < queried, (k, seen)
                endpoint, keys = sends[-1]
                assert endpoint == b.base_url, sends[-1]
                assert keys, sends[-1]
                assert tracker.prefix.matches(keys, [b.base_url])[b.base_url] == len(keys)

                # The same prompt on another adapter shares no cached block anywhere.
                other = await turns.send("coding", [dict(m) for m in conversation[:-1]])
                assert sum(q for q, _ in other.values()) > SYSTEM_TOKENS, other
                assert all(h == 0 for _, h in other.values()), other

                # B restarts on its port with an empty cache: the router stops
                # believing the conversation is cached there.
                # (in a thread: the router keeps probing while B is down)
                await asyncio.to_thread(replica_b.close)
                await ready_exactly(server, 1)
                b = await asyncio.to_thread(
                    replica_b.enter_context, replica(engine_venv, demo_assets, port_b))
                await ready_exactly(server, 2, within=60)
                assert tracker.prefix.matches(keys, [b.base_url])[b.base_url] == 0
                assert await prefix_counters(http, b.base_url) == (0, 0)
        finally:
            await server.stop()
