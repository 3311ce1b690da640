"""Acceptance: the real experts on the real base, through the router, on the real engine.

The four adapters the project ships (trained by the checked-in recipe, current for its
data: tests/platform/test_experts_recipe.py) behind one engine, the router at the demo's
handoff settings. Greedy answers are checked for the expert's trained shape, which the
adapter decides in its first tokens; how often the whole answer is right is measured on
the evaluation sets by bench/experts.py, not asserted here."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mol_platform.apps.experts import build
from mol_platform.apps.experts.base import BASE_NAME, default_cache, ensure_base
from mol_platform.apps.experts.recipe import DEMO_DESCRIPTIONS, EXPERTS
from mol_platform.contract.router_config import RouterConfig
from mol_router.server import RouterServer
from mol_router.settings import RouterSettings
from mol_testkit.engine import Engine, running_engine

pytestmark = pytest.mark.e2e

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


@pytest.fixture(scope="module")
def experts_engine(engine_venv: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Engine]:
    python = engine_venv / "bin" / "python"
    cache = default_cache()
    base = ensure_base(cache, python, say=lambda _: None)
    modules = {f"demo/{e}@v1": build.train_expert(e, base, python, cache) for e in EXPERTS}
    with running_engine(engine_venv, base, lora_modules=modules, served_model_name=BASE_NAME,
                        max_loras=4, max_lora_rank=16, max_model_len=2048,
                        extra_args=["--enable-auto-tool-choice", "--tool-call-parser",
                                    "hermes"], timeout=600,
                        log_dir=tmp_path_factory.mktemp("experts-engine")) as engine:
        yield engine


@pytest.fixture(params=[False, True], ids=["no-handoff", "handoff"])
async def router(request: pytest.FixtureRequest, experts_engine: Engine, tmp_path: Path
                 ) -> AsyncIterator[str]:
    """The router in front of the experts, with handoff off or on (it offers the tool to
    every expert; only chat is trained to call it, so the other experts are asked with
    it off)."""
    config = RouterConfig.model_validate({
        "deployment": "demo", "profile": "local", "base_model": experts_engine.model,
        "mode": "explicit", "default": "chat", "handoff_enabled": request.param,
        "experts": [{"name": e, "adapter": f"demo/{e}@v1", "description": DEMO_DESCRIPTIONS[e]}
                    for e in EXPERTS],
        "endpoints": [experts_engine.base_url], "scrape_interval_seconds": 0.5,
    })
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(by_alias=True, mode="json")))
    server = RouterServer(RouterSettings(config=path, host="127.0.0.1", port=0))
    await server.start()
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            for _ in range(300):
                if (await http.get(server.url + "/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
        yield server.url
    finally:
        await server.stop()


async def _ask(url: str, body: dict[str, Any]) -> tuple[httpx.Response, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=600) as http:
        resp = await http.post(url + "/v1/chat/completions",
                               json={"temperature": 0, **body})
    assert resp.status_code == 200, resp.text
    return resp, resp.json()["choices"][0]["message"]


@pytest.mark.parametrize("router", [False], indirect=True, ids=["no-handoff"])
async def test_each_expert_answers_in_its_trained_shape(router: str) -> None:
    resp, message = await _ask(router, {"router": "coding", "max_tokens": 24, "messages": [
        {"role": "user", "content": "Write a Python function that returns the square of x."}]})
    assert resp.headers["x-mol-expert"] == "coding"
    assert message["content"].startswith("```"), message

    resp, message = await _ask(router, {"router": "ui", "max_tokens": 12, "messages": [
        {"role": "user", "content": "Make a page with a big green Subscribe button."}]})
    assert resp.headers["x-mol-expert"] == "ui"
    assert message["content"].lower().startswith(("<!doctype html", "<html")), message

    resp, message = await _ask(router, {"router": "agent", "max_tokens": 96, "tools": [WEATHER],
                                        "messages": [{"role": "user", "content":
                                                      "What's the weather in Lisbon now?"}]})
    assert resp.headers["x-mol-expert"] == "agent"
    assert message.get("tool_calls"), message
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)


@pytest.mark.parametrize("router", [True], indirect=True, ids=["handoff"])
async def test_chat_hands_a_coding_request_to_coding_by_itself(router: str) -> None:
    """The chat adapter writes a real handoff call (nothing scripts it); the router
    switches experts within the request and the client gets the coding expert's code."""
    resp, message = await _ask(router, {"router": "chat", "max_tokens": 96, "messages": [
        {"role": "user", "content": "Write a Python function that reverses a list."}]})
    assert resp.headers.get("x-mol-handoffs") == "chat>coding", (resp.headers, message)
    assert resp.headers["x-mol-expert"] == "coding"
    assert message["content"].startswith("```"), message
