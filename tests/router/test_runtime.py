"""Runtime behaviour: the queue when no engine is ready, /v1/models, /readyz, hot
reload of the config file (an invalid file keeps the last good config), and engines
from Kubernetes EndpointSlices."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from mol_router.settings import RouterSettings
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
MSG = {"messages": [{"role": "user", "content": "hi"}]}


async def test_no_ready_engine_queues_then_503_or_served(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        await sims.stop_replica(0)
        cfg = router_config(sims.urls, timeouts={"queue": 0.3}, queue_limit=2,
                            readmit_after_seconds=0.2)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            url = router.url + "/v1/chat/completions"
            async with http.get(router.url + "/readyz") as resp:
                assert resp.status == 503
            async with http.post(url, json=MSG) as resp:
                assert resp.status == 503
                assert int(resp.headers["Retry-After"]) >= 1
                assert (await resp.json())["error"]["code"] == "no_ready_engine"
            # Over the queue limit: refused at once.
            statuses = await asyncio.gather(*(
                _status(http, url) for _ in range(4)))
            assert sorted(statuses) == [503] * 4
            metrics = await (await http.get(router.url + "/metrics")).text()
            assert 'mol_router_ready_endpoints{deployment="demo"} 0.0' in metrics
            # An engine coming up while requests wait serves them.
            router.runtime.limits = router.runtime.limits.__class__(
                **{**_fields(router.runtime.limits), "queue": 10.0})
            waiting = asyncio.ensure_future(_status(http, url))
            await asyncio.sleep(0.3)
            assert router.runtime.metrics.pending_child._value.get() == 1
            await sims.start_replica(0)
            assert await waiting == 200
            async with http.get(router.url + "/readyz") as resp:
                assert resp.status == 200


def _fields(limits: Any) -> dict[str, Any]:
    return {f: getattr(limits, f) for f in limits.__dataclass_fields__}


async def _status(http: aiohttp.ClientSession, url: str) -> int:
    async with http.post(url, json=MSG) as resp:
        await resp.read()
        return resp.status


async def test_models_lists_experts_auto_and_namespaces(router_config: Any,
                                                        start_router: Any) -> None:
    cfg = router_config(["http://127.0.0.1:9"], adapter_namespaces=["acme"])
    async with start_router(cfg) as router, aiohttp.ClientSession() as http:
        async with http.get(router.url + "/v1/models") as resp:
            data = (await resp.json())["data"]
        async with http.get(router.url + "/healthz") as resp:
            assert resp.status == 200
    ids = [m["id"] for m in data]
    assert ids == ["chat", "coding", "auto", "demo", "acme/<name>@<ref>"]
    assert data[0]["root"] == "demo/chat@v1"
    assert data[0]["parent"] == "tiny"


async def test_hot_reload_and_invalid_file_keeps_last_good(
        router_config: Any, start_router: Any, ready: Any, caplog: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(router_config(sims.urls)) as router, aiohttp.ClientSession() as http:
        await ready(router)
        path: Path = router.settings.config
        url = router.url + "/v1/chat/completions"

        async def served() -> str:
            async with http.post(url, json=MSG) as resp:
                assert resp.status == 200
                return str(resp.headers["x-mol-expert"])

        assert await served() == "chat"
        good = _read(path)
        _write(path, good.replace("default: chat", "default: coding"))
        await _until(lambda: router.runtime.config.default == "coding")
        assert await served() == "coding"
        # Invalid: refused with a log line; the last good config keeps serving.
        _write(path, good.replace("default: chat", "default: nobody"))
        await _until(lambda: "refused, keeping the last good config" in caplog.text)
        assert "default 'nobody' is not an expert" in caplog.text
        assert await served() == "coding"
        _write(path, "experts: [unclosed")
        await _until(lambda: caplog.text.count("refused, keeping") == 2)
        _write(path, good.replace("policy: mol-affinity", "policy: no-such-policy"))
        await _until(lambda: caplog.text.count("refused, keeping") == 3)
        assert "unknown routing policy 'no-such-policy'" in caplog.text
        assert await served() == "coding"
        metrics = await (await http.get(router.url + "/metrics")).text()
    assert 'mol_router_config_reloads_total{result="invalid"} 3.0' in metrics
    assert 'mol_router_config_reloads_total{result="ok"} 1.0' in metrics


def _read(path: Path) -> str:
    return path.read_text()


def _write(path: Path, text: str) -> None:
    path.write_text(text)


async def _until(predicate: Any, within: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def _slice(name: str, addresses: list[tuple[str, bool]], port: int) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "demo-engine"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": r}}
                          for a, r in addresses]}


async def test_endpoints_from_endpointslices(kube: Any, router_config: Any,
                                             start_router: Any, tmp_path: Path) -> None:
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        ports = [int(u.rsplit(":", 1)[1]) for u in sims.urls]
        token = tmp_path / "token"
        token.write_text("t0ken")
        cfg = router_config([], endpoint_slice={"namespace": "default",
                                                "service_name": "demo-engine"})
        async with kube.async_client() as k8s:
            await k8s.create(_slice("demo-engine-a", [("127.0.0.1", True),
                                                      ("127.0.0.2", False)], ports[0]))
            async with start_router(cfg, kube_api_url=kube.url,
                                    kube_token_file=token) as router:
                tracker = router.runtime.tracker
                assert tracker is not None
                await _until(lambda: tracker.endpoints == [sims.urls[0]])
                # A second slice (another port: the second simulated replica) joins.
                await k8s.create(_slice("demo-engine-b", [("127.0.0.1", True)], ports[1]))
                await _until(lambda: sorted(tracker.endpoints) == sorted(sims.urls))
                await _until(lambda: len(tracker.ready_endpoints()) == 2)
                await k8s.delete("EndpointSlice", "demo-engine-a")
                await _until(lambda: tracker.endpoints == [sims.urls[1]])
                async with aiohttp.ClientSession() as http, http.post(
                        router.url + "/v1/chat/completions", json=MSG) as resp:
                    assert resp.status == 200
        assert sims.state(1).requests_by_model == {"demo/chat@v1": 1}


def test_settings_from_env(monkeypatch: Any) -> None:
    monkeypatch.setenv("MOL_ROUTER_PORT", "9123")
    monkeypatch.setenv("MOL_ROUTER_CONFIG", "/etc/mol/router.yaml")
    settings = RouterSettings()
    assert settings.port == 9123
    assert str(settings.config) == "/etc/mol/router.yaml"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert settings.kube_url() == "https://10.0.0.1:443"
