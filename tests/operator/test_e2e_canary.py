"""Canary rollouts through the whole operator: kopf, the real catalog, a real Prometheus
scraping router metrics this test writes. A healthy canary behind an alias is promoted
by moving the alias in the catalog; a failing one is rolled back with the numbers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from mol_platform.clients.catalog import CatalogClient
from mol_testkit.kube_client import KubeClient
from mol_testkit.net import free_port
from mol_testkit.prometheus import PrometheusServer

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(150)]
WAIT = 60.0


class FakeRouter:
    """Writes the router's request metrics for the coding expert: stable v1, canary v2."""

    def __init__(self, canary_error_share: float) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("mol_router_requests", "", ["deployment", "expert", "adapter",
                                                            "version", "code"],
                                registry=self.registry)
        self.duration = Histogram("mol_router_request_duration_seconds", "",
                                  ["deployment", "expert", "version"], registry=self.registry)
        self.error_share = canary_error_share
        self.stop = threading.Event()
        self.port = free_port()

    def tick(self) -> None:
        for version, errors in (("v1", 0), ("v2", round(10 * self.error_share))):
            labels = {"deployment": "macaron", "expert": "coding", "adapter": "demo/coding",
                      "version": version}
            self.requests.labels(**labels, code="200").inc(10 - errors)
            if errors:
                self.requests.labels(**labels, code="503").inc(errors)
            for _ in range(10):
                self.duration.labels("macaron", "coding", version).observe(0.1)

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.tick()


@pytest.fixture
def fake_router(request: pytest.FixtureRequest) -> Iterator[FakeRouter]:
    router = FakeRouter(getattr(request, "param", 0.0))
    server, thread = start_http_server(router.port, "127.0.0.1", registry=router.registry)
    ticker = threading.Thread(target=router.run, daemon=True)
    ticker.start()
    try:
        yield router
    finally:
        router.stop.set()
        ticker.join(5)
        server.shutdown()
        server.server_close()
        thread.join(5)


def _canary(obj: dict[str, Any]) -> dict[str, Any]:
    experts = obj.get("status", {}).get("experts", [])
    coding: dict[str, Any] = next((e for e in experts if e["name"] == "coding"), {})
    return dict(coding.get("canary") or {})


def _start(kube_client: KubeClient, run_operator: Any, make_manifest: Any, catalog: Any,
           prometheus: PrometheusServer, router: FakeRouter) -> None:
    prometheus.configure(targets=[f"127.0.0.1:{router.port}"])
    prometheus.wait_for('sum(mol_router_requests_total{version="v2"})')
    run_operator(catalog_url=catalog.url, prometheus_url=prometheus.url)
    manifest = make_manifest()
    manifest["spec"]["experts"][1]["canary"].update(steps=[50, 100], interval="3s")
    kube_client.create(manifest)


def test_healthy_canary_is_promoted_by_moving_the_alias(
        own_catalog: Any, kube_client: KubeClient, run_operator: Any, make_manifest: Any,
        prometheus: PrometheusServer, fake_router: FakeRouter) -> None:
    _start(kube_client, run_operator, make_manifest, own_catalog, prometheus, fake_router)
    obj = kube_client.wait_for("MoLDeployment", "macaron",
                               lambda o: _canary(o).get("weight") == 50, timeout=WAIT)
    config = yaml.safe_load(kube_client.get("ConfigMap", "macaron-router")["data"]["router.yaml"])
    coding = next(e for e in config["experts"] if e["name"] == "coding")
    assert coding["canary"]["weight"] == 50
    obj = kube_client.wait_for("MoLDeployment", "macaron",
                               lambda o: _canary(o).get("phase") == "Promoted", timeout=WAIT)
    with CatalogClient(own_catalog.url, own_catalog.admin_token) as admin:
        assert admin.resolve("demo/coding@stable").version == 2
    obj = kube_client.wait_for(
        "MoLDeployment", "macaron",
        lambda o: next(e for e in o["status"]["experts"] if e["name"] == "coding")[
            "version"] == 2, timeout=WAIT)
    healthy = next(c for c in obj["status"]["conditions"] if c["type"] == "CanaryHealthy")
    assert healthy["status"] == "True"


@pytest.mark.parametrize("fake_router", [0.5], indirect=True)
def test_failing_canary_is_rolled_back(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any, catalog: Any,
        prometheus: PrometheusServer, fake_router: FakeRouter) -> None:
    _start(kube_client, run_operator, make_manifest, catalog, prometheus, fake_router)
    obj = kube_client.wait_for("MoLDeployment", "macaron",
                               lambda o: _canary(o).get("phase") == "RolledBack", timeout=WAIT)
    assert _canary(obj)["weight"] == 0
    healthy = next(c for c in obj["status"]["conditions"] if c["type"] == "CanaryHealthy")
    assert healthy["status"] == "False"
    assert "error" in healthy["message"]
    config = yaml.safe_load(kube_client.get("ConfigMap", "macaron-router")["data"]["router.yaml"])
    coding = next(e for e in config["experts"] if e["name"] == "coding")
    assert coding["canary"]["weight"] == 0
    with CatalogClient(catalog.url, catalog.admin_token) as admin:
        assert admin.resolve("demo/coding@stable").version == 1


def _held(obj: dict[str, Any]) -> bool:
    healthy: dict[str, Any] = next((c for c in obj.get("status", {}).get("conditions", [])
                                    if c["type"] == "CanaryHealthy"), {})
    return _canary(obj).get("phase") == "Paused" and healthy.get("status") == "Unknown"


def test_canary_without_measurement_is_unknown_not_healthy(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any, catalog: Any,
        prometheus: PrometheusServer) -> None:
    """A real Prometheus that scrapes no router has no canary traffic to judge: the
    rollout holds and CanaryHealthy is Unknown, saying so, never True."""
    prometheus.configure(targets=[])
    run_operator(catalog_url=catalog.url, prometheus_url=prometheus.url)
    manifest = make_manifest()
    manifest["spec"]["experts"][1]["canary"].update(steps=[50, 100], interval="2s")
    kube_client.create(manifest)
    obj = kube_client.wait_for("MoLDeployment", "macaron", _held, timeout=WAIT)
    healthy = next(c for c in obj["status"]["conditions"] if c["type"] == "CanaryHealthy")
    assert healthy["reason"] == "NoMeasurement"
    assert "coding" in healthy["message"]
    assert "no canary requests" in healthy["message"]
    assert _canary(obj)["weight"] == 50


def test_unreachable_prometheus_is_unknown_with_the_cause(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any, catalog: Any) -> None:
    run_operator(catalog_url=catalog.url, prometheus_url=f"http://127.0.0.1:{free_port()}")
    manifest = make_manifest()
    manifest["spec"]["experts"][1]["canary"].update(steps=[50, 100], interval="2s")
    kube_client.create(manifest)
    obj = kube_client.wait_for("MoLDeployment", "macaron", _held, timeout=WAIT)
    healthy = next(c for c in obj["status"]["conditions"] if c["type"] == "CanaryHealthy")
    assert healthy["reason"] == "NoMeasurement"
    assert "unreachable" in healthy["message"]
