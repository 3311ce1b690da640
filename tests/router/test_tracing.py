"""Tracing across the stack: the router's spans (GenAI semantic conventions) exported
over OTLP/HTTP to a receiver on loopback, the engine getting the router's
``traceparent``, the catalog's resolve span as a child of the router's resolve span;
sampling (a client cannot force it unless trusted); off means no SDK object at all."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port, stop_process, wait_port
from mol_testkit.otlp import OtlpReceiver, ReceivedSpan
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
PROFILE = "default.demo"
MSG = {"messages": [{"role": "user", "content": "hi"}]}
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"
TRACING = {"tracing_sample_ratio": 1.0}


def _sampled(flags: str) -> bool:
    """W3C trace-flags: bit 0 is ``sampled`` (bit 1, ``random``, is set by the SDK)."""
    return bool(int(flags, 16) & 1)


def _by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.span_id: s for s in spans}


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


async def _until(rx: OtlpReceiver, name: str, within: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not rx.named(name):
        assert loop.time() < deadline, f"no {name} span among {[s.name for s in rx.spans]}"
        await asyncio.sleep(0.05)


@contextmanager
def traced_catalog(tmp_path: Any, otlp: str) -> Iterator[str]:
    """``mol catalog serve`` exporting to ``otlp`` (every span, caller's traceparent
    trusted), with a base, a profile and demo/chat v1 published."""
    port = free_port()
    cmd = [sys.executable, "-m", "mol_platform", "catalog", "serve", "--host", "127.0.0.1",
           "--port", str(port), "--db", f"sqlite:///{tmp_path / 'c.db'}",
           "--blobs", f"file://{tmp_path / 'blobs'}", "--no-auth"]
    env = {**os.environ, "MOL_CATALOG_URL": "", "MOL_CATALOG_TRACING_ENDPOINT": otlp,
           "MOL_CATALOG_TRACING_SAMPLE_RATIO": "1", "MOL_CATALOG_TRACING_TRUST_PARENT": "true",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    proc = subprocess.Popen(cmd, env=env)
    try:
        wait_port(port, timeout=60)
        url = f"http://127.0.0.1:{port}"
        model = SyntheticLlama()
        with httpx.Client(base_url=url, timeout=30) as c:
            assert c.post("/v1/base-models", json=model.base_body()).is_success
            base = f"{model.name}@{model.revision}"
            r = c.put(f"/v1/serving-profiles/{PROFILE}", json={
                "base_model": base, "max_lora_rank": 8, "max_loras": 4, "engine": "vllm"})
            assert r.is_success, r.text
            cfg, weights = model.lora_files(8, seed=1)
            r = c.post("/v1/adapters/demo/chat/versions", data={"base": base}, files={
                "adapter_config.json": ("adapter_config.json", cfg),
                "adapter_model.safetensors": ("adapter_model.safetensors", weights)})
            assert r.status_code == 201, r.text
        yield url
    finally:
        stop_process(proc)


async def test_one_request_end_to_end_router_engine_and_catalog(
        tmp_path: Any, router_config: Any, start_router: Any, ready: Any) -> None:
    async with OtlpReceiver() as rx, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        with traced_catalog(tmp_path, rx.url) as catalog:
            cfg = router_config(sims.urls, catalog_url=catalog, profile=PROFILE,
                                adapter_namespaces=["demo"],
                                experts=[{"name": "chat", "adapter": "demo/chat@v1"}])
            async with start_router(cfg, tracing_endpoint=rx.url, **TRACING) as router, \
                    httpx.AsyncClient(timeout=10) as http:
                await ready(router)
                # an adapter reference no expert names: resolved on this request
                r = await http.post(router.url + "/v1/chat/completions",
                                    json={**MSG, "model": "demo/chat@latest", "max_tokens": 3})
                assert r.status_code == 200, r.text
            received = sims.state(0).received
            # the router flushed at stop; the catalog exports within 100 ms
            await _until(rx, "mol.catalog.resolve")
            # the publish came first, in a trace of its own
            publish = _one(rx.spans, "mol.catalog.publish")
            assert publish.service == "mol-catalog"
            assert publish.parent_id == ""
            assert publish.attributes["mol.adapter.name"] == "chat"
            assert publish.attributes["mol.adapter.version"] == 1
    spans = [s for s in rx.spans if s.name != "mol.catalog.publish"]
    by_id = _by_id(spans)
    root = _one(spans, "chat demo/chat@latest")
    assert root.kind == "SERVER"
    assert root.parent_id == ""
    assert root.service == "mol-router"
    assert root.attributes["gen_ai.operation.name"] == "chat"
    assert root.attributes["gen_ai.request.model"] == "demo/chat@latest"
    assert root.attributes["gen_ai.response.model"] == "demo/chat@v1"
    assert root.attributes["gen_ai.request.max_tokens"] == 3
    assert root.attributes["gen_ai.usage.output_tokens"] == 3
    assert root.attributes["gen_ai.usage.input_tokens"] > 0
    assert root.attributes["http.response.status_code"] == 200
    # the router's start warmed its experts' references: catalog traces of their own
    others = [s for s in spans if s.trace_id != root.trace_id]
    assert {(s.name, s.parent_id) for s in others} <= {("mol.catalog.resolve", "")}
    spans = [s for s in spans if s.trace_id == root.trace_id]
    assert {s.service for s in spans} == {"mol-router", "mol-catalog"}

    resolve = _one(spans, "mol.router.resolve")
    assert resolve.parent_id == root.span_id
    assert resolve.attributes["mol.adapter.ref"] == "demo/chat@latest"
    assert resolve.attributes["mol.adapter.name"] == "demo/chat@v1"
    served = _one(spans, "mol.catalog.resolve")
    assert served.service == "mol-catalog"
    assert served.kind == "SERVER"
    assert served.parent_id == resolve.span_id
    assert served.attributes["http.response.status_code"] == 200

    call = _one(spans, "chat demo/chat@v1")
    assert call.kind == "CLIENT"
    assert call.parent_id == root.span_id
    assert call.attributes["gen_ai.request.model"] == "demo/chat@v1"
    assert call.attributes["gen_ai.response.model"] == "demo/chat@v1"
    assert call.attributes["server.address"] == "127.0.0.1"
    assert call.attributes["server.port"] == int(sims.urls[0].rsplit(":", 1)[1])
    pick = _one(spans, "mol.router.pick")
    assert by_id[pick.parent_id] is call
    assert pick.attributes["mol.replica"] == sims.urls[0]
    # the engine got the engine call's context, sampled
    assert len(received) == 1
    version, trace_id, parent, flags = received[0].headers["traceparent"].split("-")
    assert (version, trace_id, parent) == ("00", root.trace_id, call.span_id)
    assert _sampled(flags)


async def test_handoff_hops_and_stream_are_spans(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with OtlpReceiver() as rx, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, handoff_enabled=True, handoff_max_hops=2)
        async with start_router(cfg, tracing_endpoint=rx.url, **TRACING) as router, \
                httpx.AsyncClient(timeout=10) as http:
            await ready(router)
            sims.script_tool_call("demo/chat@v1", "handoff",
                                  {"expert": "coding", "summary": "a parser"}, times=1)
            r = await http.post(router.url + "/v1/chat/completions", json={
                **MSG, "model": "chat", "stream": True})
            assert r.status_code == 200, r.text
        received = sims.state(0).received
    spans = rx.spans
    root = _one(spans, "chat chat")
    hop = _one(spans, "mol.router.handoff")
    assert hop.parent_id == root.span_id
    assert hop.attributes["mol.handoff.from"] == "chat"
    assert hop.attributes["mol.handoff.to"] == "coding"
    resolves = rx.named("mol.router.resolve")
    assert sorted(s.parent_id for s in resolves) == sorted([root.span_id, hop.span_id])
    first, second = _one(spans, "chat demo/chat@v1"), _one(spans, "chat demo/coding@v1")
    assert first.parent_id == second.parent_id == root.span_id
    assert second.attributes["gen_ai.usage.output_tokens"] > 0
    assert [r.headers["traceparent"].split("-")[2] for r in received] == [
        first.span_id, second.span_id]
    assert root.attributes["gen_ai.response.model"] == "demo/coding@v1"


@pytest.mark.parametrize("trusted", [False, True])
async def test_a_client_traceparent_is_a_parent_only_when_trusted(
        trusted: bool, router_config: Any, start_router: Any, ready: Any) -> None:
    """Ratio 0: nothing of the router's own is sampled. A client's sampled
    traceparent forces a trace only when the router trusts it."""
    async with OtlpReceiver() as rx, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        async with start_router(router_config(sims.urls), tracing_endpoint=rx.url,
                                tracing_sample_ratio=0.0,
                                tracing_trust_parent=trusted) as router, \
                httpx.AsyncClient(timeout=10) as http:
            await ready(router)
            for _ in range(3):
                r = await http.post(router.url + "/v1/chat/completions", json=MSG,
                                    headers={"traceparent": CLIENT_PARENT})
                assert r.status_code == 200, r.text
        received = sims.state(0).received
    parents = [r.headers["traceparent"] for r in received]
    assert len(parents) == 3
    if trusted:
        roots = rx.named("chat")
        assert len(roots) == 3
        assert {s.trace_id for s in rx.spans} == {CLIENT_TRACE}
        assert {s.parent_id for s in roots} == {"b7ad6b7169203331"}
        assert all(p.startswith(f"00-{CLIENT_TRACE}-") and _sampled(p[-2:]) for p in parents)
    else:
        assert rx.spans == []
        # the engine still follows the router's decision: a new trace, not sampled
        assert not any(_sampled(p[-2:]) or CLIENT_TRACE in p for p in parents)
        assert len({p.split("-")[1] for p in parents}) == 3


async def test_tracing_off_creates_no_sdk_object(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Default settings: no span processor, no exporter, no span; engines get no
    traceparent from the router (a client's is not forwarded either). With tracing on,
    the same count sees the processor, so the count can fail."""
    import opentelemetry.sdk.trace.export as sdk_export

    made: list[object] = []
    original = sdk_export.BatchSpanProcessor.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)

    sdk_export.BatchSpanProcessor.__init__ = counting  # type: ignore[method-assign]
    try:
        async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
            async with start_router(router_config(sims.urls)) as router, \
                    httpx.AsyncClient(timeout=10) as http:
                await ready(router)
                assert router.runtime.tracing is None
                r = await http.post(router.url + "/v1/chat/completions", json=MSG,
                                    headers={"traceparent": CLIENT_PARENT})
                assert r.status_code == 200, r.text
            received = sims.state(0).received
            assert made == []
            async with OtlpReceiver() as rx, \
                    start_router(router_config(sims.urls), tracing_endpoint=rx.url,
                                 tracing_sample_ratio=0.0) as traced:
                await ready(traced)
                assert traced.runtime.tracing is not None
    finally:
        sdk_export.BatchSpanProcessor.__init__ = original  # type: ignore[method-assign]
    assert len(made) == 1
    assert "traceparent" not in received[0].headers


async def test_exemplars_carry_the_trace_id(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with OtlpReceiver() as rx, AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(router_config(sims.urls), tracing_endpoint=rx.url,
                         **TRACING) as router, httpx.AsyncClient(timeout=10) as http:
        await ready(router)
        r = await http.post(router.url + "/v1/chat/completions", json=MSG)
        assert r.status_code == 200, r.text
        text = (await http.get(router.url + "/metrics", headers={
            "Accept": "application/openmetrics-text; version=1.0.0"})).text
    root = _one(rx.spans, "chat")
    line = next(x for x in text.splitlines()
                if x.startswith("mol_router_request_duration_seconds_bucket") and " # " in x)
    assert f'trace_id="{root.trace_id}"' in line
