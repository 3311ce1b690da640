"""Against a real catalog (SQLite + local blobs, started with ``mol catalog serve``):
references resolved to immutable names, a moved alias taking effect within about a
second through the event feed, 422 with the catalog's reasons for an incompatible
adapter, and serving from the cache while the catalog is down."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port, stop_process, wait_port
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
MSG = {"messages": [{"role": "user", "content": "hi"}]}
PROFILE = "default.demo"


@dataclass
class LiveCatalog:
    url: str
    proc: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def live_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCatalog]:
    """A catalog process with a base, a serving profile (max rank 8) and adapters:
    demo/chat v1, v2 (alias stable -> v1), demo/coding v1 and a rank-16 demo/big v1 (alias
    trial: stable, protected, refuses a version the profile cannot load)."""
    tmp_path = tmp_path_factory.mktemp("catalog")
    port = free_port()
    cmd = [sys.executable, "-m", "mol_platform", "catalog", "serve", "--host", "127.0.0.1",
           "--port", str(port), "--db", f"sqlite:///{tmp_path / 'c.db'}",
           "--blobs", f"file://{tmp_path / 'blobs'}", "--no-auth"]
    proc = subprocess.Popen(cmd, env={**os.environ, "MOL_CATALOG_URL": ""})
    try:
        wait_port(port, timeout=60)
        url = f"http://127.0.0.1:{port}"
        model = SyntheticLlama()
        with httpx.Client(base_url=url, timeout=30) as c:
            assert c.post("/v1/base-models", json=model.base_body()).is_success
            base = f"{model.name}@{model.revision}"
            r = c.put(f"/v1/serving-profiles/{PROFILE}",
                      json={"base_model": base, "max_lora_rank": 8, "max_loras": 4,
                            "engine": "vllm"})
            assert r.is_success, r.text
            for name, rank, seed, alias in (("chat", 8, 1, "stable"), ("chat", 8, 2, None),
                                            ("coding", 8, 3, "stable"), ("big", 16, 4, "trial")):
                cfg, weights = model.lora_files(rank, seed=seed)
                data = {"base": base, **({"alias": alias} if alias else {})}
                r = c.post(f"/v1/adapters/demo/{name}/versions", data=data, files={
                    "adapter_config.json": ("adapter_config.json", cfg),
                    "adapter_model.safetensors": ("adapter_model.safetensors", weights)})
                assert r.status_code == 201, r.text
        yield LiveCatalog(url, proc)
    finally:
        stop_process(proc)


@pytest.fixture
def catalog(live_catalog: LiveCatalog) -> str:
    if live_catalog.proc.poll() is not None:
        pytest.fail("the catalog process is gone (stopped by an earlier test)")
    return live_catalog.url


def _config(router_config: Any, urls: list[str], catalog: str) -> Any:
    return router_config(urls, catalog_url=catalog, profile=PROFILE, adapter_namespaces=["demo"],
                         experts=[{"name": "chat", "adapter": "demo/chat@stable"},
                                  {"name": "coding", "adapter": "demo/coding@latest"}])


async def _ask(http: httpx.AsyncClient, url: str, **body: Any) -> httpx.Response:
    return await http.post(url + "/v1/chat/completions", json={**MSG, **body})


async def test_alias_move_takes_effect_within_a_second(
        catalog: str, router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(_config(router_config, sims.urls, catalog)) as router, \
            httpx.AsyncClient(timeout=10) as http:
        await ready(router)
        r = await _ask(http, router.url)
        assert r.status_code == 200, r.text
        assert r.headers["x-mol-adapter-version"] == "demo/chat@v1"
        assert r.json()["model"] == "demo/chat@v1"
        r = await _ask(http, router.url, model="coding")
        assert r.headers["x-mol-adapter-version"] == "demo/coding@v1"
        moved = await http.put(catalog + "/v1/adapters/demo/chat/aliases/stable",
                               json={"version": 2})
        assert moved.is_success
        loop = asyncio.get_running_loop()
        start = loop.time()
        while (await _ask(http, router.url)).headers["x-mol-adapter-version"] != "demo/chat@v2":
            assert loop.time() - start < 1.5, "the moved alias did not take effect"
            await asyncio.sleep(0.05)
        back = await http.put(catalog + "/v1/adapters/demo/chat/aliases/stable",
                              json={"version": 1})
        assert back.is_success
        # Engines only ever saw immutable names.
        assert {r.body["model"] for r in sims.state(0).received} == {
            "demo/chat@v1", "demo/chat@v2", "demo/coding@v1"}


async def test_incompatible_adapter_is_refused_with_reasons(
        catalog: str, router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(_config(router_config, sims.urls, catalog)) as router, \
            httpx.AsyncClient(timeout=10) as http:
        await ready(router)
        r = await _ask(http, router.url, model="demo/big@trial")
        assert r.status_code == 422
        err = r.json()["error"]
        assert err["code"] == "adapter_incompatible"
        assert err["reasons"]
        assert "rank" in err["message"]
        r = await _ask(http, router.url, model="demo/missing@stable")
        assert r.status_code == 404
        assert not sims.state(0).received


async def test_a_canary_that_cannot_be_served_falls_back_to_stable(
        catalog: str, router_config: Any, start_router: Any, ready: Any) -> None:
    cfg = router_config(["http://127.0.0.1:9"], catalog_url=catalog, profile=PROFILE,
                        experts=[{"name": "chat", "adapter": "demo/chat@stable",
                                  "canary": {"adapter": "demo/big@trial", "weight": 100}}])
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = cfg.model_copy(update={"endpoints": sims.urls})
        async with start_router(cfg) as router, httpx.AsyncClient(timeout=10) as http:
            await ready(router)
            r = await _ask(http, router.url, user="anyone")
            assert r.status_code == 200, r.text
            assert r.headers["x-mol-adapter-version"] == "demo/chat@v1"
            assert "x-mol-canary" not in r.headers


async def test_models_lists_the_namespace_adapters(
        catalog: str, router_config: Any, start_router: Any) -> None:
    cfg = _config(router_config, ["http://127.0.0.1:9"], catalog)
    async with start_router(cfg) as router, httpx.AsyncClient(timeout=10) as http:
        data = (await http.get(router.url + "/v1/models")).json()["data"]
    cards = {m["id"]: m for m in data}
    assert {"chat", "coding", "auto", "demo", "demo/chat@latest"} <= set(cards)
    # demo/big (rank 16, the profile allows 8) would answer 422: not offered, even on the
    # first listing, before anything asked for it
    assert "demo/big@latest" not in cards
    assert cards["demo/chat@latest"]["root"] == "demo/chat@v2"
    assert cards["demo/chat@latest"]["description"] == "catalog adapter"  # no "(tags: )"
    assert cards["chat"]["root"] in ("demo/chat@v1", "demo/chat@stable")


async def test_the_resolution_cache_is_bounded_oldest_out_first(
        catalog: str, router_config: Any, start_router: Any) -> None:
    cfg = _config(router_config, ["http://127.0.0.1:9"], catalog)
    async with start_router(cfg) as router:
        resolver = router.runtime.resolver
        resolver.max_entries = 2
        for ref in ("demo/chat@v1", "demo/chat@v2", "demo/coding@v1"):
            await resolver.resolve(ref)
        assert resolver.cached("demo/chat@v1") is None
        assert resolver.cached("demo/chat@v2") is not None
        assert resolver.cached("demo/coding@v1") is not None
        await resolver.refresh(["demo/chat@v2"])  # a refreshed answer keeps its place
        assert resolver.cached("demo/coding@v1") is not None


async def test_serves_from_cache_while_the_catalog_is_down(
        live_catalog: LiveCatalog, catalog: str, router_config: Any, start_router: Any,
        ready: Any) -> None:
    """Runs last in this module: it stops the catalog."""
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(router_config, sims.urls, catalog)
        async with start_router(cfg) as router, httpx.AsyncClient(timeout=10) as http:
            await ready(router)
            assert (await _ask(http, router.url)).status_code == 200
            assert (await _ask(http, router.url, model="demo/coding@v1")).status_code == 200
            # The catalog goes away: cached references keep working, new ones get a 503.
            stop_process(live_catalog.proc)
            await router.runtime.resolver.refresh(["demo/chat@stable"])
            assert router.runtime.resolver.cached("demo/chat@stable") is not None
            r = await _ask(http, router.url)
            assert r.status_code == 200
            assert r.headers["x-mol-adapter-version"] == "demo/chat@v1"
            assert (await _ask(http, router.url, model="demo/coding@v1")).status_code == 200
            # never asked for by name, but the version stable named: immutable, so known
            r = await _ask(http, router.url, model="demo/chat@v1")
            assert r.status_code == 200, r.text
            assert r.headers["x-mol-adapter-version"] == "demo/chat@v1"
            r = await _ask(http, router.url, model="demo/chat@v2")
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "catalog_unavailable"
            assert "Retry-After" in r.headers
