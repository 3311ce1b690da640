"""The operator's Prometheus metrics and its ``/metrics`` + ``/healthz`` endpoint."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry()
RECONCILES = Counter("mol_operator_reconcile_total",
                     "Reconciles of MoLDeployments by result (ok, retry, invalid).",
                     ["result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("mol_operator_reconcile_duration_seconds",
                              "Wall time of one reconcile.", registry=REGISTRY,
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
WRITES = Counter("mol_operator_writes_total", "Kubernetes writes of children by verb.",
                 ["verb"], registry=REGISTRY)
CANARY_TRANSITIONS = Counter("mol_operator_canary_transitions_total",
                             "Canary decisions by result (step, promoted, rolled_back).",
                             ["result"], registry=REGISTRY)
CANARY_WEIGHT = Gauge("mol_canary_weight", "Percent of an expert's traffic on its canary.",
                      ["deployment", "expert"], registry=REGISTRY)
WARMUPS = Counter("mol_operator_warmups_total", "Adapter warm-up requests by result.",
                  ["result"], registry=REGISTRY)


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(REGISTRY),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _health(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def start_server(host: str, port: int) -> web.AppRunner:
    """Serve ``/metrics`` and ``/healthz`` (``/readyz`` too) until the runner is cleaned up."""
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _health)
    app.router.add_get("/readyz", _health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
