"""Promotion gates through the whole operator: kopf, a real catalog holding the eval
reports, a real Prometheus scraping healthy router metrics. The canary holds at its last
step while the canary's report is missing, then while it scores worse than stable, and is
promoted (the alias moves) once a better report is attached."""

from __future__ import annotations

from typing import Any

import pytest

from mol_platform.clients.catalog import CatalogClient
from mol_testkit.kube_client import KubeClient
from mol_testkit.prometheus import PrometheusServer
from tests.operator.test_e2e_canary import WAIT, FakeRouter, _canary, fake_router

__all__ = ["fake_router"]  # the fixture, shared with test_e2e_canary
pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(200)]
GATE = {"suite": "humaneval", "metric": "pass@1", "minDelta": 0.0}


def _healthy(obj: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", [])
                 if c["type"] == "CanaryHealthy"), {})


def test_canary_waits_for_its_gates_then_is_promoted(
        own_catalog: Any, kube_client: KubeClient, run_operator: Any, make_manifest: Any,
        prometheus: PrometheusServer, fake_router: FakeRouter) -> None:
    prometheus.configure(targets=[f"127.0.0.1:{fake_router.port}"])
    prometheus.wait_for('sum(mol_router_requests_total{version="v2"})')
    with CatalogClient(own_catalog.url, own_catalog.admin_token) as admin:
        admin.attach_eval("demo/coding", 1, "humaneval", {"pass@1": 0.6})
        run_operator(catalog_url=own_catalog.url, prometheus_url=prometheus.url)
        manifest = make_manifest()
        manifest["spec"]["experts"][1]["canary"].update(steps=[50, 100], interval="2s",
                                                        gates=[GATE])
        kube_client.create(manifest)

        obj = kube_client.wait_for("MoLDeployment", "macaron",
                                   lambda o: _healthy(o).get("reason") == "GateMissing",
                                   timeout=WAIT)
        assert (_canary(obj)["phase"], _canary(obj)["weight"]) == ("Paused", 50)
        assert _canary(obj)["gate"] == "GateMissing"
        assert _healthy(obj)["status"] == "Unknown"
        assert ("coding: holding at 50%: gate humaneval/pass@1: canary v2 has no humaneval "
                "eval report") in _healthy(obj)["message"]

        admin.attach_eval("demo/coding", 2, "humaneval", {"pass@1": 0.5})
        obj = kube_client.wait_for("MoLDeployment", "macaron",
                                   lambda o: _healthy(o).get("reason") == "GateFailed",
                                   timeout=WAIT)
        assert _healthy(obj)["status"] == "False"
        assert "canary v2 0.5 - stable v1 0.6 = -0.1 < minDelta 0" in _healthy(obj)["message"]
        assert _canary(obj)["weight"] == 50
        assert admin.resolve("demo/coding@stable").version == 1

        admin.attach_eval("demo/coding", 2, "humaneval", {"pass@1": 0.7})
        obj = kube_client.wait_for("MoLDeployment", "macaron",
                                   lambda o: _canary(o).get("phase") == "Promoted",
                                   timeout=WAIT)
        assert "gate" not in _canary(obj)
        assert admin.resolve("demo/coding@stable").version == 2
    events = kube_client.list("Event")
    reasons = [e.get("reason") for e in events]
    assert "CanaryPaused" in reasons
    assert "CanaryPromoted" in reasons
