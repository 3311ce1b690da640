"""An OTLP/HTTP trace receiver on loopback: what a collector would get, decoded.

Services export to it exactly as to an OpenTelemetry Collector (``POST /v1/traces``,
protobuf); tests read the spans back as :class:`ReceivedSpan`. ``python -m
mol_testkit.otlp --port N`` runs one standalone (the benchmarks' sink).
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from mol_testkit.net import free_port

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER",
          5: "CONSUMER"}


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, Any]
    links: tuple[str, ...]  # linked trace ids


def _value(v: AnyValue) -> Any:
    field = v.WhichOneof("value")
    if field == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, field) if field else None


def decode(body: bytes) -> list[ReceivedSpan]:
    req = ExportTraceServiceRequest.FromString(body)
    out: list[ReceivedSpan] = []
    for rs in req.resource_spans:
        res = {a.key: _value(a.value) for a in rs.resource.attributes}
        service = str(res.get("service.name", ""))
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(ReceivedSpan(
                    service, sp.name, _KINDS.get(sp.kind, str(sp.kind)), sp.trace_id.hex(),
                    sp.span_id.hex(), sp.parent_span_id.hex(),
                    {a.key: _value(a.value) for a in sp.attributes},
                    tuple(link.trace_id.hex() for link in sp.links)))
    return out


class OtlpReceiver:
    """``async with OtlpReceiver() as rx``: ``rx.url`` is the endpoint to configure."""

    def __init__(self, port: int = 0) -> None:
        self.port = port or free_port()
        self.spans: list[ReceivedSpan] = []
        self.exports = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _traces(self, request: web.Request) -> web.Response:
        self.spans.extend(decode(await request.read()))
        self.exports += 1
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> OtlpReceiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    async def wait_for(self, count: int, within: float = 10.0) -> list[ReceivedSpan]:
        """The spans once at least ``count`` have arrived (AssertionError after
        ``within`` seconds)."""
        deadline = asyncio.get_running_loop().time() + within
        while len(self.spans) < count:
            assert asyncio.get_running_loop().time() < deadline, \
                f"only {len(self.spans)} of {count} spans arrived: {self.spans}"
            await asyncio.sleep(0.05)
        return list(self.spans)


@contextmanager
def receiver_thread() -> Iterator[OtlpReceiver]:
    """An :class:`OtlpReceiver` on a loop of its own, for synchronous tests."""
    rx = OtlpReceiver()
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(rx.start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(rx.stop())
        loop.close()

    thread = threading.Thread(target=run, name="otlp-receiver", daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield rx
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def _serve(port: int) -> None:
    async with OtlpReceiver(port):
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="OTLP/HTTP trace receiver (counts spans)")
    p.add_argument("--port", type=int, required=True)
    asyncio.run(_serve(p.parse_args(argv).port))


if __name__ == "__main__":
    main()
