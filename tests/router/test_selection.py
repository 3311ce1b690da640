"""Expert selection in docs/design.md's order, the classifier with its fallback, named
adapters in adapterNamespaces, and the sticky canary split."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from mol_platform.contract.router_config import RouterConfig
from mol_router.routing.rules import Routing, in_canary
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
MSG = [{"role": "user", "content": "fix my parser"}]


def _auto(urls: list[str], router_config: Any, **kw: Any) -> RouterConfig:
    cfg: RouterConfig = router_config(
        urls, mode="auto", classifier="router", adapter_namespaces=["acme"],
        experts=[{"name": "chat", "adapter": "demo/chat@v1", "description": "small talk"},
                 {"name": "coding", "adapter": "demo/coding@v1", "description": "code"},
                 {"name": "router", "adapter": "demo/router@v1"}], **kw)
    return cfg


async def _served_by(http: aiohttp.ClientSession, url: str,
                     body: dict[str, Any]) -> tuple[str, str]:
    """(the expert that answered, what decided: the x-mol-route header)."""
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return str(resp.headers["x-mol-expert"]), str(resp.headers["x-mol-route"])


async def _served(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> str:
    return (await _served_by(http, url, body))[0]


async def test_selection_order(router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        async with start_router(_auto(sims.urls, router_config)) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_text("demo/router@v1", "coding", when_prompt_contains="parser")
            url = router.url
            # "router" wins over "model".
            assert await _served_by(http, url, {"messages": MSG, "model": "chat",
                                                "router": "coding"}) == ("coding", "router")
            assert await _served(http, url, {"messages": MSG, "model": "chat"}) == "chat"
            # auto / the deployment's name / no model: the classifier decides.
            for model in ("auto", "demo", None):
                body = {"messages": MSG} if model is None else {"messages": MSG, "model": model}
                assert await _served_by(http, url, body) == ("coding", "classifier")
            # A named adapter in an adapter namespace goes to that adapter.
            async with http.post(url + "/v1/chat/completions",
                                 json={"messages": MSG, "model": "acme/bot@v7"}) as resp:
                assert resp.status == 200
                assert resp.headers["x-mol-adapter-version"] == "acme/bot@v7"
            metrics = await (await http.get(url + "/metrics")).text()
        received = sims.state(0).received
    classifier_calls = [r.body for r in received if r.body["model"] == "demo/router@v1"]
    assert len(classifier_calls) == 3
    assert classifier_calls[0]["structured_outputs"] == {"choice": ["chat", "coding"]}
    assert ('mol_router_route_decisions_total{deployment="demo",'
            'expert="coding",mode="classifier",signal="classifier"} 3.0') in metrics
    assert ('mol_router_route_decisions_total{deployment="demo",'
            'expert="coding",mode="router",signal="request"} 1.0') in metrics
    assert ('mol_router_route_decisions_total{deployment="demo",'
            'expert="adapter",mode="adapter",signal="request"} 1.0') in metrics


async def test_classifier_failure_and_timeout_fall_back_to_default(
        router_config: Any, start_router: Any, ready: Any) -> None:
    slow = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3, ttft_s=0.5)
    async with AsyncSimulatorCluster(replicas=1, config=slow) as sims:
        cfg = _auto(sims.urls, router_config, timeouts={"classifier": 0.2})
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            started = asyncio.get_running_loop().time()
            assert await _served(http, router.url, {"messages": MSG}) == "chat"
            assert asyncio.get_running_loop().time() - started < 2.0
            sims.script_failure("demo/router@v1", status=500)
            assert await _served_by(http, router.url, {"messages": MSG}) == (
                "chat", "default; classifier=no-answer")
            metrics = await (await http.get(router.url + "/metrics")).text()
    assert ('mol_router_route_decisions_total{deployment="demo",'
            'expert="chat",mode="classifier",signal="default"} 2.0') in metrics


async def test_explicit_mode_auto_means_default(router_config: Any, start_router: Any,
                                                ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        async with start_router(router_config(sims.urls, default="coding")) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            assert await _served(http, router.url, {"messages": MSG, "model": "auto"}) == "coding"
        assert len(sims.state(0).received) == 1  # no classifier call


@pytest.mark.parametrize(("model", "status", "fragment"), [
    ("nope", 404, "available: chat, coding, auto, demo or adapters acme/<name>@<ref>"),
    ("codin", 404, "did you mean 'coding'?"),
    ("tiny", 404, "that is the base model"),
    ("other/bot@v1", 404, "adapter namespace 'other'"),
    ("acme/Bad@v1", 400, "invalid adapter reference"),
])
async def test_unknown_models(model: str, status: int, fragment: str, router_config: Any,
                              start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, adapter_namespaces=["acme"])
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            async with http.post(router.url + "/v1/chat/completions",
                                 json={"messages": MSG, "model": model}) as resp:
                assert resp.status == status
                err = (await resp.json())["error"]
            assert fragment in err["message"]
            assert "  " not in err["message"]
            assert ", ," not in err["message"]
            assert not err["message"].rstrip(". ").endswith((",", ";")), err["message"]
            assert err["type"] in ("not_found_error", "invalid_request_error")


def test_canary_split_is_sticky_and_weighted(router_config: Any) -> None:
    cfg = router_config(["http://e"], experts=[
        {"name": "chat", "adapter": "demo/chat@v1",
         "canary": {"adapter": "demo/chat@v2", "weight": 25}}])
    routing = Routing.build(cfg)
    users = [f"user-{i}" for i in range(4000)]
    first = [routing.expert_choice("chat", "model", u) for u in users]
    again = [routing.expert_choice("chat", "model", u) for u in users]
    assert first == again  # sticky
    share = sum(c.canary for c in first) / len(users)
    assert 0.22 < share < 0.28
    assert {c.ref for c in first if c.canary} == {"demo/chat@v2"}
    assert not in_canary("chat", "someone", 0.0)
    assert in_canary("chat", "someone", 100.0)


async def test_canary_by_header_and_weight_metric(router_config: Any, start_router: Any,
                                                  ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, experts=[
            {"name": "chat", "adapter": "demo/chat@v1",
             "canary": {"adapter": "demo/chat@v2", "weight": 50}}])
        routing = Routing.build(cfg)
        canary_user = next(f"u{i}" for i in range(100) if in_canary("chat", f"u{i}", 50))
        stable_user = next(f"u{i}" for i in range(100) if not in_canary("chat", f"u{i}", 50))
        assert routing.expert_choice("chat", "m", canary_user).canary
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            for user, version in ((canary_user, "demo/chat@v2"), (stable_user, "demo/chat@v1")):
                for _ in range(3):
                    async with http.post(router.url + "/v1/chat/completions",
                                         json={"messages": MSG},
                                         headers={"x-mol-user": user}) as resp:
                        assert resp.headers["x-mol-adapter-version"] == version
            async with http.post(router.url + "/v1/chat/completions",
                                 json={"messages": MSG, "user": canary_user}) as resp:
                assert resp.headers["x-mol-canary"] == "true"
            metrics = await (await http.get(router.url + "/metrics")).text()
    assert 'mol_canary_weight{deployment="demo",expert="chat"} 50.0' in metrics
