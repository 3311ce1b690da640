"""Acceptance: the router in front of the real vLLM engine (CPU build) with two
experts, a canary split and the classifier, adapters preloaded under immutable names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mol_platform.contract.router_config import RouterConfig
from mol_router.routing.rules import in_canary
from mol_router.server import RouterServer
from mol_router.settings import RouterSettings
from mol_testkit.engine import Engine

pytestmark = pytest.mark.e2e

ASK = [{"role": "user", "content": "Write a function that adds two numbers."}]


def _config(engine: Engine) -> RouterConfig:
    return RouterConfig.model_validate({
        "deployment": "demo", "profile": "local", "base_model": engine.model,
        "mode": "auto", "classifier": "chat", "default": "chat",
        "experts": [
            {"name": "chat", "adapter": "demo/chat@v1", "description": "small talk"},
            {"name": "coding", "adapter": "demo/coding@v1", "description": "writes code",
             "canary": {"adapter": "demo/coding@v2", "weight": 50}},
        ],
        "endpoints": [engine.base_url], "timeouts": {"classifier": 30},
        "scrape_interval_seconds": 0.5,
    })


def _sse_text(raw: str) -> tuple[str, set[str]]:
    text, models = "", set()
    for line in raw.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            models.add(chunk["model"])
            if chunk["choices"]:
                text += chunk["choices"][0]["delta"].get("content") or ""
    return text, models


async def test_router_on_the_real_engine(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(_config(engine).model_dump(by_alias=True, mode="json")))
    server = RouterServer(RouterSettings(config=path, host="127.0.0.1", port=0))
    await server.start()
    try:
        await _exercise(engine, server)
    finally:
        await server.stop()


async def _exercise(engine: Engine, server: RouterServer) -> None:
    canary_user = next(f"u{i}" for i in range(100) if in_canary("coding", f"u{i}", 50))
    stable_user = next(f"u{i}" for i in range(100) if not in_canary("coding", f"u{i}", 50))
    greedy: dict[str, Any] = {"temperature": 0, "max_tokens": 12}
    async with httpx.AsyncClient(timeout=120) as http:
        for _ in range(100):  # the tracker's first health check
            if (await http.get(server.url + "/readyz")).status_code == 200:
                break
            await asyncio.sleep(0.1)
        # Whole answer from an expert: the adapter and version are named.
        r = await http.post(server.url + "/v1/chat/completions",
                            json={"model": "chat", "messages": ASK, **greedy})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "demo/chat@v1"
        assert r.headers["x-mol-adapter-version"] == "demo/chat@v1"
        # Streamed, through the canary split: each user sticks to one version, and the
        # text is what the engine gives for that immutable name.
        for user, version in ((canary_user, "demo/coding@v2"), (stable_user, "demo/coding@v1")):
            r = await http.post(server.url + "/v1/chat/completions", json={
                "model": "coding", "messages": ASK, "stream": True, "user": user, **greedy})
            assert r.status_code == 200, r.text
            assert r.headers["x-mol-adapter-version"] == version
            text, models = _sse_text(r.text)
            assert models == {version}
            direct = await http.post(engine.base_url + "/v1/chat/completions", json={
                "model": version, "messages": ASK, **greedy})
            assert text == direct.json()["choices"][0]["message"]["content"]
        # The classifier (structured output on the engine) picks one of the experts.
        r = await http.post(server.url + "/v1/chat/completions",
                            json={"model": "auto", "messages": ASK, **greedy})
        assert r.status_code == 200, r.text
        assert r.headers["x-mol-expert"] in {"chat", "coding"}
        metrics = (await http.get(server.url + "/metrics")).text
    assert 'mode="classifier"' in metrics
    assert 'mode="fallback"' not in metrics
    assert 'mol_router_ready_endpoints{deployment="demo"} 1.0' in metrics
    assert 'expert="coding",kind="completion",tenant="anonymous"' in metrics
