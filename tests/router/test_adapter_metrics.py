"""Per-adapter metrics stay bounded: 100,000 distinct adapters through one router
leave at most K + 1 adapter label values on ``/metrics``; the busy adapters keep
their own series; trace ids ride the latency histograms as OpenMetrics exemplars;
cold requests and their wait are counted per adapter."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import aiohttp
import orjson
import uvloop

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

ANSWER = orjson.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "k"}}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}})
_POST = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(ANSWER), ANSWER)
_IDLE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class _Engine(asyncio.Protocol):
    """A near-free engine: every POST gets the same answer, anything else 200 empty
    (idle ``/health`` and ``/metrics``). Requests are counted by their head's end."""

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        out = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buf[:end]
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            length = int(m.group(1)) if m else 0
            if len(self.buf) < end + 4 + length:
                break
            self.buf = self.buf[end + 4 + length:]
            out.append(_POST if head.startswith(b"POST") else _IDLE)
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


@asynccontextmanager
async def fast_engine() -> AsyncIterator[str]:
    server = await asyncio.get_running_loop().create_server(_Engine, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


def _request(model: str) -> bytes:
    body = b'{"model":"%s","max_tokens":1,"messages":[{"role":"user","content":"x"}]}' % (
        model.encode())
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


async def _pipelined(port: int, models: list[str], batch: int = 400) -> None:
    """Send ``models`` over one keep-alive connection, ``batch`` requests in flight;
    every answer must be 200."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for start in range(0, len(models), batch):
            chunk = models[start:start + batch]
            writer.write(b"".join(_request(m) for m in chunk))
            seen = 0
            while seen < len(chunk):
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200"), head
                m = re.search(rb"(?i)content-length: *(\d+)", head)
                assert m is not None
                await reader.readexactly(int(m.group(1)))
                seen += 1
    finally:
        writer.close()


def _series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def _adapter_values(lines: list[str]) -> set[str]:
    return {m.group(1) for line in lines for m in [re.search(r'adapter="([^"]*)"', line)] if m}


def test_100k_distinct_adapters_leave_a_bounded_metrics_page(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """On uvloop, as ``mol router serve`` runs: the run takes half the time."""
    k = 100
    hot = [f"hot/h{i}@v1" for i in range(20)]

    async def run() -> tuple[list[int], list[str]]:
        async with fast_engine() as url:
            cfg = router_config([url], adapter_namespaces=["acme", "hot"])
            async with start_router(cfg, top_adapters=k) as router, \
                    aiohttp.ClientSession() as http:
                await ready(router)
                sizes = []
                for half in range(2):
                    # Per connection: one-off adapters, a busy one every 21st request.
                    conns = [[hot[(i // 21) % 20] if i % 21 == 20 else
                              f"acme/a{half}-{c}-{i}@v1" for i in range(13_125)]
                             for c in range(4)]
                    await asyncio.gather(*(_pipelined(router.port, m) for m in conns))
                    text = await (await http.get(router.url + "/metrics")).text()
                    sizes.append(len(_series(text)))
        return sizes, _series(text)

    sizes, lines = uvloop.run(run())
    distinct = sum(1 for _ in range(8) for i in range(13_125) if i % 21 != 20)
    assert distinct == 100_000
    values = _adapter_values(lines)
    assert len(values) <= k + 1
    assert {h.split("@")[0] for h in hot} <= values  # the busy ones keep their labels
    assert "other" in values
    # The bound: each adapter label costs at most 53 series in the adapter families
    # (three histograms of 18, 18 and 14, two token counters, one cold counter) plus
    # one mol_router_requests_total row per code; the rest is fixed (< 400 here).
    assert len(lines) <= (k + 1) * (53 + 1) + 400
    assert sizes[1] <= sizes[0] + 10  # the second half grew nothing
    requests = sum(float(line.rsplit(" ", 1)[1]) for line in lines
                   if line.startswith("mol_router_requests_total{"))
    assert requests == 105_000


SIM = SimConfig(model="tiny", dynamic_loras=True, max_loras=2, output_tokens=3,
                lora_load_s=0.3)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _chat(model: str, stream: bool = True) -> dict[str, Any]:
    return {"model": model, "stream": stream, "max_tokens": 3,
            "messages": [{"role": "user", "content": "hi"}]}


async def test_exemplars_cold_requests_and_tenants(router_config: Any, start_router: Any,
                                                   ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, adapter_namespaces=["acme"])
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            url = router.url + "/v1/chat/completions"

            async def send(model: str, stream: bool = True,
                           headers: dict[str, str] | None = None) -> None:
                async with http.post(url, json=_chat(model, stream), headers=headers) as r:
                    assert r.status == 200
                    await r.read()

            trace = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
            await send("acme/x@v1", headers=trace)  # a first request earns no label: "other"
            await send("acme/x@v1", headers=trace)  # labelled from now on; warm
            await send("acme/x@v1", False, {"x-request-id": "req-42"})
            await asyncio.sleep(0.5)  # a scrape sees x idle: y and z may push it out
            await send("acme/y@v1", False)
            await send("acme/z@v1", False)  # max_loras=2: x is evicted
            await send("acme/x@v1")  # cold again, loads for lora_load_s
            plain = await (await http.get(router.url + "/metrics")).text()
            async with http.get(router.url + "/metrics", headers={
                    "Accept": "application/openmetrics-text; version=1.0.0"}) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                om = await r.text()
    assert 'mol_router_adapter_cold_requests_total{adapter="acme/x",deployment="demo"} 1.0' \
        in plain
    assert 'mol_router_adapter_cold_requests_total{adapter="other",deployment="demo"} 3.0' \
        in plain
    cold = re.search(r'mol_router_adapter_cold_start_seconds_sum\{adapter="acme/x",'
                     r'deployment="demo"\} ([0-9.e+-]+)', plain)
    assert cold is not None
    assert float(cold.group(1)) >= 0.25  # lora_load_s
    assert ('mol_router_adapter_tokens_total{adapter="acme/x",deployment="demo",'
            'kind="completion"} 9.0') in plain
    assert ('mol_router_tenant_requests_total{code="200",deployment="demo",'
            'tenant="anonymous"} 6.0') in plain
    assert 'mol_router_tenant_time_to_first_token_seconds_count{deployment="demo",' \
           'tenant="anonymous"} 3.0' in plain
    assert "trace_id" not in plain  # exemplars are OpenMetrics only
    # The latest exemplar per bucket: the trace id of a traceparent, else the request id.
    value = r'_bucket\{[^}]*\} [0-9.e+]+ # \{trace_id="'
    assert re.search(r"mol_router_time_to_first_token_seconds" + value + TRACE, om)
    assert re.search(r"mol_router_tenant_time_to_first_token_seconds" + value + TRACE, om)
    assert re.search(r"mol_router_adapter_request_duration_seconds" + value + "req-42", om)
    assert re.search(r"mol_router_adapter_cold_start_seconds" + value + "[0-9a-f]{32}", om)
    assert om.rstrip().endswith("# EOF")
