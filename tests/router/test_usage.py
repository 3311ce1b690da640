"""Usage from the router to a real catalog process (auth on, the router's token scoped
``read:demo`` + ``usage:demo``) in front of simulated engines: the round trip to
``mol catalog ls --unused-for``, requests served while the catalog is down with the
usage held and delivered after it returns, and the reporter's bounds."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from mol_catalog.cli.main import app as catalog_cli
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_router.reporting.usage import UsageReporter
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port, stop_process, wait_port
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
MSG = {"messages": [{"role": "user", "content": "hi"}]}
PROFILE = "default.demo"
ADMIN = "mol_" + "r" * 43


@dataclass
class Catalog:
    url: str
    port: int
    tmp: Path
    token_file: Path  # the router's token: read:demo, usage:demo
    read_token: str  # read:demo only
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "mol_platform", "catalog", "serve", "--host",
               "127.0.0.1", "--port", str(self.port), "--db", f"sqlite:///{self.tmp / 'c.db'}",
               "--blobs", f"file://{self.tmp / 'blobs'}"]
        self.proc = subprocess.Popen(cmd, env={**os.environ, "MOL_CATALOG_URL": "",
                                               "MOL_CATALOG_ADMIN_TOKEN": ADMIN})
        wait_port(self.port, timeout=60)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {ADMIN}"})

    def usage(self, adapter: str) -> dict[str, Any]:
        with self.admin() as c:
            r = c.get(f"/v1/adapters/{adapter}/usage")
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            return body


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    """A catalog with demo/chat v1 and demo/coding v1 and the router's tokens."""
    port = free_port()
    cat = Catalog(f"http://127.0.0.1:{port}", port, tmp_path, tmp_path / "token", "")
    cat.start()
    try:
        model = SyntheticLlama()
        with cat.admin() as c:
            assert c.post("/v1/base-models", json=model.base_body()).is_success
            base = f"{model.name}@{model.revision}"
            assert c.put(f"/v1/serving-profiles/{PROFILE}", json={
                "base_model": base, "max_lora_rank": 8, "max_loras": 4,
                "engine": "vllm"}).is_success
            for seed, name in enumerate(("chat", "coding")):
                cfg, weights = model.lora_files(8, seed=seed + 1)
                r = c.post(f"/v1/adapters/demo/{name}/versions", data={"base": base}, files={
                    "adapter_config.json": ("adapter_config.json", cfg),
                    "adapter_model.safetensors": ("adapter_model.safetensors", weights)})
                assert r.status_code == 201, r.text
            r = c.post("/v1/tokens", json={"name": "router", "scopes": ["read:demo",
                                                                        "usage:demo"]})
            cat.token_file.write_text(r.json()["token"])
            r = c.post("/v1/tokens", json={"name": "reader", "scopes": ["read:demo"]})
            cat.read_token = r.json()["token"]
        yield cat
    finally:
        cat.stop()


def _config(router_config: Any, urls: list[str], cat: Catalog) -> Any:
    return router_config(urls, catalog_url=cat.url, profile=PROFILE,
                         catalog_token_file=str(cat.token_file),
                         experts=[{"name": "chat", "adapter": "demo/chat@v1"},
                                  {"name": "coding", "adapter": "demo/coding@v1"}])


async def _wait_for(check: Any, within: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await asyncio.to_thread(check):
        assert loop.time() < deadline, "usage never reached the catalog"
        await asyncio.sleep(0.1)


async def test_round_trip_to_unused_listing(catalog: Catalog, router_config: Any,
                                            start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(_config(router_config, sims.urls, catalog),
                         usage_interval=0.2) as router, \
            httpx.AsyncClient(timeout=10) as http:
        await ready(router)
        answers = [await http.post(router.url + "/v1/chat/completions", json=MSG)
                   for _ in range(3)]
        assert all(r.status_code == 200 for r in answers)
        completion = sum(r.json()["usage"]["completion_tokens"] for r in answers)
        prompt = sum(r.json()["usage"]["prompt_tokens"] for r in answers)
        await _wait_for(lambda: catalog.usage("demo/chat")["total"]["requests"] == 3)
    total = catalog.usage("demo/chat")["total"]
    assert (total["input_tokens"], total["output_tokens"]) == (prompt, completion)
    assert catalog.usage("demo/coding")["total"]["requests"] == 0

    result = CliRunner().invoke(catalog_cli, ["--catalog-url", catalog.url, "--token", ADMIN,
                                              "ls", "--unused-for", "30d", "-q"])
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["demo/coding@v1"]
    result = CliRunner().invoke(catalog_cli, ["--catalog-url", catalog.url, "--token", ADMIN,
                                              "ls", "--sort", "usage", "--by", "adapter"])
    assert result.exit_code == 0, result.output
    rows = [line.split()[:2] for line in result.output.splitlines()[1:]]
    assert rows == [["demo/chat", "3"], ["demo/coding", "0"]]
    result = CliRunner().invoke(catalog_cli, ["--catalog-url", catalog.url, "--token", ADMIN,
                                              "show", "demo/chat"])
    assert result.exit_code == 0, result.output
    assert "usage (30d): 3 requests" in result.output


async def test_catalog_outage_holds_usage_and_delivers_it_after(
        catalog: Catalog, router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(_config(router_config, sims.urls, catalog), usage_interval=0.2,
                         usage_backoff_max=0.5) as router, \
            httpx.AsyncClient(timeout=10) as http:
        await ready(router)
        url = router.url + "/v1/chat/completions"
        assert (await http.post(url, json=MSG)).status_code == 200  # resolved and cached
        await _wait_for(lambda: catalog.usage("demo/chat")["total"]["requests"] == 1)
        catalog.stop()
        for _ in range(4):  # served from the resolve cache; usage held
            assert (await http.post(url, json=MSG)).status_code == 200
        usage = router.runtime.usage
        assert usage is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while usage.batches.labels("failed")._value.get() < 2:
            assert loop.time() < deadline, "no delivery was attempted during the outage"
            await asyncio.sleep(0.1)
        # Held, one entry per (version, day) per sealing, whatever the request count.
        held = sum(e["requests"] for b in usage.outbox for e in b.entries) + sum(
            c.requests for c in usage._open.values())
        assert held == 4
        assert usage.held_entries() <= 1 + len(usage.outbox) <= 1 + usage.max_batches
        catalog.start()
        await _wait_for(lambda: catalog.usage("demo/chat")["total"]["requests"] == 5)
        assert usage.held_entries() == 0
        await asyncio.sleep(0.5)  # retried batches were not counted twice
        assert catalog.usage("demo/chat")["total"]["requests"] == 5


async def test_reporter_bounds_and_refusals(catalog: Catalog) -> None:
    """Seven versions through a reporter holding 2 keys and 2 batches while the catalog
    cannot be reached: the oldest batch goes (counted), the rest arrive once it can; a
    token without the usage scope gets its batch refused and dropped."""
    sink: list[AsyncCatalogClient] = [
        AsyncCatalogClient(f"http://127.0.0.1:{free_port()}", "mol_x", timeout=2.0)]
    registry = CollectorRegistry()
    rep = UsageReporter(lambda: sink[0], registry, max_versions=2, max_batches=2)
    for version in range(7, 0, -1):
        rep.record("demo/chat", version, 5, 1)
    assert registry.get_sample_value("mol_router_usage_dropped_entries_total",
                                     {"reason": "overflow"}) == 2  # v7 and v6
    assert rep.held_entries() == 5
    assert await rep.flush() is False  # unreachable: kept in order, within the bound
    assert [len(b.entries) for b in rep.outbox] == [2, 1]  # sealing v1 pushed out v5, v4
    assert registry.get_sample_value("mol_router_usage_dropped_entries_total",
                                     {"reason": "overflow"}) == 4
    assert rep.held_entries() == 3
    await sink[0].aclose()

    sink[0] = AsyncCatalogClient(catalog.url, catalog.read_token, timeout=5.0)
    assert await rep.flush() is True  # 403: nothing could make these succeed
    assert registry.get_sample_value("mol_router_usage_batches_total",
                                     {"result": "rejected"}) == 2
    assert registry.get_sample_value("mol_router_usage_dropped_entries_total",
                                     {"reason": "rejected"}) == 3
    assert catalog.usage("demo/chat")["total"]["requests"] == 0
    await sink[0].aclose()

    sink[0] = AsyncCatalogClient(catalog.url, catalog.token_file.read_text(), timeout=5.0)
    rep.record("demo/chat", 1, 5, 1)
    rep.seal()
    twin = {"batch_id": rep.outbox[0].batch_id, "entries": [
        {**rep.outbox[0].entries[0], "requests": 9}]}
    assert (await sink[0].report_usage(twin)).duplicate is False  # as if an earlier try
    assert await rep.flush() is True  # arrived and its answer was lost: not counted again
    assert registry.get_sample_value("mol_router_usage_batches_total",
                                     {"result": "duplicate"}) == 1
    rep.record("demo/chat", 1, 5, 1)
    assert await rep.flush() is True
    assert registry.get_sample_value("mol_router_usage_batches_total",
                                     {"result": "counted"}) == 1
    assert catalog.usage("demo/chat")["total"]["requests"] == 10
    assert rep.held_entries() == 0
    await sink[0].aclose()
