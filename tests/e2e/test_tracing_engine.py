"""The real vLLM engine (CPU build) started with the tracing flags the operator and
``mol up`` give it: its own request span lands in the router's trace, as a child of
the router's engine call, through the ``traceparent`` the router sends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mol_platform.apps.demo import DemoResult
from mol_platform.contract.engine_args import engine_args
from mol_platform.contract.router_config import RouterConfig
from mol_platform.contract.spec import MoLDeploymentSpec
from mol_router.server import RouterServer
from mol_router.settings import RouterSettings
from mol_testkit.engine import running_engine
from mol_testkit.otlp import receiver_thread

pytestmark = pytest.mark.e2e


def _tracing_launch(endpoint: str) -> tuple[list[str], dict[str, str]]:
    """The tracing part of the product's engine command line and env."""
    spec = MoLDeploymentSpec.model_validate({
        "baseModel": {"name": "demo-base", "uri": "/models/demo"},
        "experts": [{"name": "chat", "adapter": "demo/chat@v1"}]})
    launch = engine_args(spec, otlp_traces_endpoint=endpoint)
    i = launch.flags.index("--otlp-traces-endpoint")
    return launch.flags[i:i + 2], {k: v for k, v in launch.env.items() if k.startswith("OTEL_")}


async def test_the_engine_span_is_a_child_of_the_routers_engine_call(
        engine_venv: Path, demo_assets: DemoResult, tmp_path: Path) -> None:
    with receiver_thread() as rx:
        flags, env = _tracing_launch(rx.url)
        with running_engine(engine_venv, demo_assets.base,
                            lora_modules={"demo/chat@v1": demo_assets.adapters["chat"]},
                            served_model_name="demo-base", extra_args=flags,
                            env={**env, "OTEL_BSP_SCHEDULE_DELAY": "100"}, timeout=600) as eng:
            cfg = RouterConfig.model_validate({
                "deployment": "demo", "profile": "local", "base_model": eng.model,
                "experts": [{"name": "chat", "adapter": "demo/chat@v1"}], "default": "chat",
                "endpoints": [eng.base_url], "scrape_interval_seconds": 0.5})
            path = tmp_path / "router.yaml"
            path.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))
            server = RouterServer(RouterSettings(
                config=path, host="127.0.0.1", port=0, tracing_endpoint=rx.url,
                tracing_sample_ratio=1.0))
            await server.start()
            try:
                async with httpx.AsyncClient(timeout=120) as http:
                    r = await http.post(server.url + "/v1/chat/completions", json={
                        "model": "chat", "max_tokens": 4,
                        "messages": [{"role": "user", "content": "hi"}]})
                    assert r.status_code == 200, r.text
            finally:
                await server.stop()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not [s for s in rx.spans if s.service == "mol-engine"
                       and s.parent_id]:
                assert loop.time() < deadline, ([s.name for s in rx.spans], eng.log_tail())
                await asyncio.sleep(0.2)
    spans: list[Any] = rx.spans
    call = next(s for s in spans if s.name == "chat demo/chat@v1")
    # the engine's span of the router's request is a child of the router's engine call
    # (the engine also exported a span in a trace of its own, not the router's request)
    engine_spans = [s for s in spans if s.service == "mol-engine"
                    and s.trace_id == call.trace_id]
    tops = [s for s in engine_spans if s.parent_id == call.span_id]
    assert len(tops) == 1, [(s.name, s.parent_id) for s in engine_spans]
    assert tops[0].kind == "SERVER"
