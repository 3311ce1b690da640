"""Canary rollouts measured by a real Prometheus scraping router metrics the test writes.

A tiny exporter on loopback stands in for the router: a background thread "serves"
requests at a fixed rate, splitting them between the stable and the canary version
by the canary weight the controller last decided, with error share and latency per
version set by the test. The controller loop is the operator's: measure, step, keep
the state only through the status JSON, look again after a short tick (the operator's
canary timer).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from mol_operator.canary import (
    TERMINAL,
    CanaryMeasurement,
    CanaryStatus,
    canary_step,
    status_from_dict,
    status_to_dict,
    transition_result,
)
from mol_operator.canary_measure import measure_canary
from mol_operator.catalog import BaseRevisions, declare_and_resolve
from mol_operator.metrics import OperatorMetrics
from mol_operator.rollout import step_canaries
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract.router_config import profile_name
from mol_platform.contract.spec import CanarySpec, MoLDeployment
from mol_testkit.lora import SyntheticLlama
from mol_testkit.prometheus import PrometheusServer

pytestmark = pytest.mark.prometheus

EXPERT, STABLE, CANARY = "coding", 3, 4
PER_TICK = 20  # requests per 50 ms tick: 400 req/s
WINDOW = "3s"
ROLLOUT_TIMEOUT_S = 40.0
TICK_S = 0.5


@dataclass
class VersionBehaviour:
    latency_s: float = 0.1
    errors_per_tick_share: float = 0.0


@dataclass
class FakeRouter:
    """Writes ``mol_router_*`` series the way the router does, at a steady rate."""

    requests: Counter
    duration: Histogram
    deployment: str
    weight: float = 0.0
    stable_version: int = STABLE
    canary_version: int = CANARY
    stable: VersionBehaviour = field(default_factory=VersionBehaviour)
    canary: VersionBehaviour = field(default_factory=VersionBehaviour)

    def serve(self, version: int, behaviour: VersionBehaviour, count: int) -> None:
        errors = round(count * behaviour.errors_per_tick_share)
        labels = {"deployment": self.deployment, "expert": EXPERT, "adapter": "acme/coding",
                  "version": f"v{version}"}  # fmt: skip
        if count - errors:
            self.requests.labels(**labels, code="200").inc(count - errors)
        if errors:
            self.requests.labels(**labels, code="503").inc(errors)
        timing = self.duration.labels(self.deployment, EXPERT, f"v{version}")
        for _ in range(count):
            timing.observe(behaviour.latency_s)

    def tick(self) -> None:
        to_canary = round(PER_TICK * self.weight / 100)
        self.serve(self.stable_version, self.stable, PER_TICK - to_canary)
        if to_canary:
            self.serve(self.canary_version, self.canary, to_canary)

    def wait_for_stable_traffic(self, prometheus: PrometheusServer) -> None:
        prometheus.wait_for(
            f'sum(rate(mol_router_requests_total{{deployment="{self.deployment}",'
            f'version="v{self.stable_version}"}}[3s])) > 0'
        )


@dataclass
class Exporter:
    requests: Counter
    duration: Histogram
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def exporter() -> Iterator[Exporter]:
    """One exporter and one Prometheus for the module: a new scrape target takes
    Prometheus about 5 s to pick up, so tests share them and differ by deployment."""
    registry = CollectorRegistry()
    requests = Counter("mol_router_requests", "requests",
                       ["deployment", "expert", "adapter", "version", "code"], registry=registry)
    duration = Histogram("mol_router_request_duration_seconds", "latency",
                         ["deployment", "expert", "version"], registry=registry)  # fmt: skip
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        prometheus = PrometheusServer().start([f"127.0.0.1:{server.server_port}"], "router")
        try:
            yield Exporter(requests, duration, prometheus)
        finally:
            prometheus.stop()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def router(exporter: Exporter, request: pytest.FixtureRequest) -> Iterator[FakeRouter]:
    deployment = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:63]
    fake = FakeRouter(exporter.requests, exporter.duration, deployment)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.wait(0.05):
            fake.tick()

    worker = threading.Thread(target=traffic, name="fake-router-traffic", daemon=True)
    worker.start()
    try:
        fake.wait_for_stable_traffic(exporter.prometheus)
        yield fake
    finally:
        stop.set()
        worker.join(5)


@dataclass
class Rollout:
    statuses: list[CanaryStatus] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    measurements: list[CanaryMeasurement] = field(default_factory=list)
    results: list[str | None] = field(default_factory=list)


async def run_controller(
    spec: CanarySpec, prometheus_url: str, fake: FakeRouter
) -> Rollout:  # fmt: skip
    """The operator's loop for one expert, keeping its state only in status JSON."""
    out = Rollout()
    saved: dict[str, object] | None = None
    deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
    while time.monotonic() < deadline:
        measurement = await measure_canary(
            prometheus_url, deployment=fake.deployment, expert=EXPERT,
            stable_version=STABLE, canary_version=CANARY, window=WINDOW,
        )  # fmt: skip
        out.measurements.append(measurement)
        before = status_from_dict(saved)
        status, event = canary_step(spec, before, CANARY, measurement, datetime.now(UTC))
        saved = json.loads(json.dumps(status_to_dict(status)))
        out.results.append(transition_result(before, status))
        fake.weight = status.weight
        out.statuses.append(status)
        if event is not None:
            out.events.append(event)
        if status.phase in TERMINAL:
            return out
        await asyncio.sleep(TICK_S)
    raise AssertionError(f"no decision in {ROLLOUT_TIMEOUT_S:.0f}s: {out}")


def spec(**analysis: float) -> CanarySpec:
    return CanarySpec.model_validate({
        "adapter": "acme/coding@candidate", "steps": [25, 50, 100], "interval": "2s",
        "analysis": {"maxErrorRate": 0.02, "maxLatencyRatio": 1.25, **analysis},
    })  # fmt: skip


async def test_no_canary_traffic_measures_nothing(
    exporter: Exporter, router: FakeRouter
) -> None:
    m = await measure_canary(
        exporter.prometheus.url, deployment=router.deployment, expert=EXPERT,
        stable_version=STABLE, canary_version=CANARY, window=WINDOW,
    )  # fmt: skip
    assert m == CanaryMeasurement(error_rate=None, latency_ratio=None, requests=0.0)
    due = CanaryStatus(CANARY, 25.0, "Progressing", 0, "2026-01-01T00:00:00.000Z")
    held, _ = canary_step(spec(), due, CANARY, m, datetime.now(UTC))
    assert (held.phase, held.weight) == ("Paused", 25.0)


async def test_healthy_canary_is_promoted(
    exporter: Exporter, router: FakeRouter
) -> None:
    router.canary = VersionBehaviour(latency_s=0.11)
    rollout = await run_controller(spec(), exporter.prometheus.url, router)
    final = rollout.statuses[-1]
    assert (final.phase, final.weight, final.version) == ("Promoted", 100.0, CANARY)
    weights = list(dict.fromkeys(s.weight for s in rollout.statuses))
    assert weights == [25.0, 50.0, 100.0]
    assert "RolledBack" not in {s.phase for s in rollout.statuses}
    measured = [m for m in rollout.measurements if m.requests > 0]
    assert measured, "the canary's traffic never reached Prometheus"
    assert all(m.error_rate == 0.0 for m in measured)
    ratios = [m.latency_ratio for m in measured if m.latency_ratio is not None]
    assert ratios
    assert all(r == pytest.approx(1.1, abs=0.02) for r in ratios)
    assert any("started: 25%" in e for e in rollout.events)
    assert any("advanced to 50%" in e for e in rollout.events)
    assert "promoted" in rollout.events[-1]
    assert [r for r in rollout.results if r not in (None, "paused")] == [
        "started", "advanced", "promoted",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("canary", "expected"),
    [
        pytest.param(VersionBehaviour(errors_per_tick_share=0.4), r"error rate (\S+) > "
                     r"maxErrorRate 0\.02", id="errors"),
        pytest.param(VersionBehaviour(latency_s=0.3), r"latency ratio (\S+) > "
                     r"maxLatencyRatio 1\.25", id="latency"),
    ],
)  # fmt: skip
async def test_unhealthy_canary_is_rolled_back(
    exporter: Exporter, router: FakeRouter, canary: VersionBehaviour, expected: str
) -> None:
    router.canary = canary
    rollout = await run_controller(spec(), exporter.prometheus.url, router)
    final = rollout.statuses[-1]
    assert (final.phase, final.weight) == ("RolledBack", 0.0)
    assert router.weight == 0.0
    assert max(s.weight for s in rollout.statuses) == 25.0  # never went past the first step
    match = re.search(expected, final.message)
    assert match is not None, final.message
    measured = float(match[1])
    assert measured == pytest.approx(0.4 if "error" in expected else 3.0, rel=0.05)
    assert rollout.events[-1].endswith(final.message)
    assert [r for r in rollout.results if r is not None][-1] == "rolled_back"


# -- the operator's rollout step: catalog aliases and pinned promotions --------------------


def publish_versions(catalog: Any, adapter: str) -> None:
    """``adapter`` v1 (@stable) and v2 (@candidate) for the seeded synthetic base."""
    model = SyntheticLlama()
    with catalog.client() as client:
        for seed, alias in ((11, "stable"), (12, "candidate")):
            cfg, weights = model.lora_files(8, seed=seed)
            client.request(
                "POST", f"/v1/adapters/{adapter}/versions",
                data={"base": f"{model.name}@{model.revision}", "alias": alias},
                files={"adapter_config.json": ("adapter_config.json", cfg),
                       "adapter_model.safetensors": ("adapter_model.safetensors", weights)},
            )  # fmt: skip


def prepare(exporter: Exporter, router: FakeRouter, catalog: Any) -> str:
    """A fresh adapter with v1 @stable and v2 @candidate, and router traffic on v1."""
    adapter = f"demo/{router.deployment[:40]}"
    publish_versions(catalog, adapter)
    router.stable_version, router.canary_version = 1, 2
    router.wait_for_stable_traffic(exporter.prometheus)
    return adapter


def deployment(name: str, stable_ref: str, canary_ref: str) -> MoLDeployment:
    return MoLDeployment.model_validate({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "baseModel": {"name": "tiny-llama", "uri": "file:///models/tiny-llama"},
            "engine": {"maxLoraRank": 16},
            "experts": [{"name": EXPERT, "adapter": stable_ref, "canary": {
                "adapter": canary_ref, "steps": [50, 100], "interval": "2s"}}],
        },
    })  # fmt: skip


async def roll_out(
    obj: MoLDeployment, catalog: Any, prometheus_url: str, fake: FakeRouter,
    metrics: OperatorMetrics,
) -> list[Any]:  # fmt: skip
    """The reconcile's canary part, once a second, with status carried between rounds."""
    status: dict[str, Any] = {}
    rounds: list[Any] = []
    deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
    async with AsyncCatalogClient(catalog.url, catalog.admin_token) as client:
        while time.monotonic() < deadline:
            cat = await declare_and_resolve(client, obj, profile_name(obj.metadata.name),
                                            delay=1.0, bases=BaseRevisions())  # fmt: skip
            out = await step_canaries(obj, cat, status, catalog=client,
                                      prometheus_url=prometheus_url, metrics=metrics,
                                      now=datetime.now(UTC), delay=1.0)  # fmt: skip
            status = {"experts": [{"name": n, "canary": c} for n, c in out.states.items()]}
            fake.weight = out.weights[EXPERT]
            if not out.stable_overrides and out.states[EXPERT]["phase"] == "Promoted":
                fake.stable_version = cat.experts[EXPERT].version  # the alias moved
            rounds.append((cat, out))
            if out.states[EXPERT]["phase"] in ("Promoted", "RolledBack") and len(rounds) > 1 and (
                rounds[-2][1].states[EXPERT]["phase"] == out.states[EXPERT]["phase"]
            ):
                return rounds  # one more round after the decision: nothing moves again
            await asyncio.sleep(1.0)
    raise AssertionError(f"no decision in {ROLLOUT_TIMEOUT_S:.0f}s")


@pytest.mark.parametrize(
    ("stable_ref", "pinned", "stable_after"),
    [
        pytest.param("stable", False, 2, id="alias-moved-in-catalog"),
        pytest.param("v1", True, 1, id="pinned-promotion-in-router-config"),
    ],
)
async def test_promotion(
    exporter: Exporter, router: FakeRouter, catalog: Any, stable_ref: str, pinned: bool,
    stable_after: int,
) -> None:  # fmt: skip
    """An alias is moved in the catalog (once, with history); a pinned stable ref keeps
    the catalog as it is and the promotion goes to the router config."""
    adapter = prepare(exporter, router, catalog)
    metrics = OperatorMetrics()
    obj = deployment(router.deployment, f"{adapter}@{stable_ref}", f"{adapter}@candidate")
    rounds = await roll_out(obj, catalog, exporter.prometheus.url, router, metrics)
    last_cat, last = rounds[-1]
    assert last.states[EXPERT]["phase"] == "Promoted"
    assert last.stable_overrides == ({EXPERT: f"{adapter}@v2"} if pinned else {})
    assert last_cat.experts[EXPERT].version == (1 if pinned else 2)
    with catalog.client() as client:
        history = client.alias_history(adapter, "stable")
        assert client.resolve(f"{adapter}@stable").version == stable_after
    assert len(history) == stable_after  # published once; moved at most once
    assert (history[0].version, history[0].previous) == (
        (2, 1) if not pinned else (1, None)
    )  # fmt: skip
    weights = list(dict.fromkeys(out.weights[EXPERT] for _, out in rounds))
    assert weights[0] == 50.0
    assert weights[-1] == 0.0  # promoted: the router's stable entry serves the new version
    kinds = [(kind, reason) for _, out in rounds for kind, reason, _ in out.events]
    assert kinds.count(("Normal", "CanaryPromoted")) == 1
    assert sample(metrics, "mol_operator_canary_transitions_total", deployment=router.deployment,
                  expert=EXPERT, result="promoted") == 1.0


async def test_rollback_through_the_rollout_step(
    exporter: Exporter, router: FakeRouter, catalog: Any
) -> None:
    router.canary = VersionBehaviour(errors_per_tick_share=0.5)
    adapter = prepare(exporter, router, catalog)
    metrics = OperatorMetrics()
    obj = deployment(router.deployment, f"{adapter}@stable", f"{adapter}@candidate")
    rounds = await roll_out(obj, catalog, exporter.prometheus.url, router, metrics)
    _, last = rounds[-1]
    state = last.states[EXPERT]
    assert (state["phase"], state["weight"], last.weights[EXPERT]) == ("RolledBack", 0.0, 0.0)
    assert "error rate 0.5" in state["message"]
    warnings = [m for _, out in rounds for kind, reason, m in out.events
                if (kind, reason) == ("Warning", "CanaryRolledBack")]  # fmt: skip
    assert len(warnings) == 1
    assert state["message"] in warnings[0]
    with catalog.client() as client:
        assert client.resolve(f"{adapter}@stable").version == 1
    assert sample(metrics, "mol_canary_weight", deployment=router.deployment, expert=EXPERT) == 0


def sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)
