"""Adapters that start failing on a running engine pod show in the MoLDeployment's status.

The routers' failure counter is written by a tiny exporter that a real Prometheus
scrapes; the engine pods are simulator replicas in the Kubernetes emulator; the
operator runs under kopf. One pod starts refusing one adapter: the deployment names the
pod under ``experts[].failingOn`` with ``AdaptersHealthy`` False; the pod loads it again:
both clear, while Prometheus's window still holds the old failures.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from mol_operator.adapter_health import (
    AdapterHealth,
    apply_health,
    assess,
    failing_adapters,
    failures_query,
    healthy,
    probe_names,
    unknown,
    with_health,
)
from mol_operator.warmup_plan import model_names
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.kube_client import KubeClient
from mol_testkit.prometheus import PrometheusServer
from mol_testkit.simulator.cluster import SimulatorCluster
from mol_testkit.simulator.config import SimConfig
from tests.operator.test_warmup import pod, pod_status, wait_until

NAMES = {"demo/chat@v1": "chat", "demo/coding@v1": "coding", "demo/coding@v2": "coding"}


# -- the pure half ------------------------------------------------------------------------


def test_the_query_is_the_alerts_expression_for_one_deployment() -> None:
    assert failures_query('sh"op', "10m") == (
        'sum by (adapter) (increase(mol_router_adapter_replica_failures_total'
        '{deployment="sh\\"op"}[10m])) > 0')
    samples: list[dict[str, Any]] = [{"metric": {"adapter": "demo/chat"}, "value": [0, "3"]},
                                     {"metric": {}}]
    assert failing_adapters(samples) == {"demo/chat"}


@pytest.mark.parametrize(("failing", "probed"), [
    ({"demo/chat"}, ["demo/chat@v1"]),
    ({"demo/coding"}, ["demo/coding@v1", "demo/coding@v2"]),  # stable and canary
    ({"other"}, sorted(NAMES)),  # past the routers' top K: every adapter is asked for
    ({"demo/gone"}, []),  # no longer served by this deployment
    (set(), []),
])  # fmt: skip
def test_only_the_adapters_the_routers_named_are_probed(failing: set[str],
                                                        probed: list[str]) -> None:
    assert probe_names(failing, NAMES) == probed


def test_assess_names_the_pods_per_expert() -> None:
    health = assess(NAMES, {("pod-a", "demo/chat@v1"): None,
                            ("pod-b", "demo/chat@v1"): "HTTP 400: could not be loaded",
                            ("pod-b", "demo/coding@v2"): "HTTP 404: gone"}, "10m")
    assert health.failing
    assert health.failing_on == {"chat": ["pod-b"], "coding": ["pod-b"]}
    assert "demo/chat@v1 on pod-b: HTTP 400: could not be loaded" in health.message
    assert assess(NAMES, {("pod-a", "demo/chat@v1"): None}, "10m").state == "healthy"


def test_failing_on_is_set_then_cleared_and_kept_while_unknown() -> None:
    experts = [{"name": "chat", "adapter": "demo/chat@v1"}, {"name": "coding", "adapter": "x"}]
    failing = AdapterHealth("failing", "FailingOnPods", "m", {"chat": ["pod-b"]})
    marked = apply_health(experts, failing, [])
    assert marked[0]["failingOn"] == ["pod-b"]
    assert "failingOn" not in marked[1]
    assert apply_health(experts, unknown("NoMeasurement", "down"), marked) == marked
    assert apply_health(marked, healthy("10m"), marked) == experts


def test_the_condition_flips_and_keeps_its_transition_time() -> None:
    base = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}],
            "experts": [{"name": "chat"}]}
    failing = AdapterHealth("failing", "FailingOnPods", "chat on pod-b", {"chat": ["pod-b"]})
    first = with_health(base, failing, {}, 3)
    (cond,) = [c for c in first["conditions"] if c["type"] == "AdaptersHealthy"]
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "False", "FailingOnPods", 3)
    again = with_health(base, failing, first, 3)
    assert again == first  # nothing new: the same status, so no write
    healed = with_health(base, healthy("10m"), first, 3)
    (cond,) = [c for c in healed["conditions"] if c["type"] == "AdaptersHealthy"]
    assert cond["status"] == "True"
    assert "failingOn" not in healed["experts"][0]
    assert with_health(base, unknown("NoPrometheus", "unset"), first, 3)["experts"] == \
        first["experts"]


# -- the operator, a real Prometheus, simulated engines ------------------------------------


@dataclass
class Routers:
    """The routers' adapter failure counter, as Prometheus scrapes it."""

    failures: Counter
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def routers() -> Iterator[Routers]:
    registry = CollectorRegistry()
    failures = Counter("mol_router_adapter_replica_failures", "test", ["deployment", "adapter"],
                       registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        prometheus = PrometheusServer().start([f"127.0.0.1:{server.server_port}"], "router")
        try:
            yield Routers(failures, prometheus)
        finally:
            prometheus.stop()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _experts(kube_client: KubeClient) -> dict[str, dict[str, Any]]:
    status = kube_client.get("MoLDeployment", "shop")["status"]
    return {e["name"]: e for e in status["experts"]}


def _health(kube_client: KubeClient) -> dict[str, Any]:
    status = kube_client.get("MoLDeployment", "shop")["status"]
    return next((c for c in status.get("conditions") or []
                 if c["type"] == "AdaptersHealthy"), {})


@pytest.mark.prometheus
def test_an_adapter_failing_on_a_running_pod_shows_in_status_and_clears_when_it_heals(
    kube_client: KubeClient, run_operator: Callable[..., Any],
    make_manifest: Callable[..., dict[str, Any]], routers: Routers,
) -> None:  # fmt: skip
    run_operator(prometheus_url=routers.prometheus.url, adapter_failure_window="30s")
    # No canary: no canary timer looks again, only the reconcile's own retry while failing.
    manifest = make_manifest("shop", experts=[
        {"name": n, "adapter": f"demo/{n}@stable"} for n in ("chat", "coding", "router")])
    kube_client.create(manifest)
    obj = kube_client.wait_for(
        "MoLDeployment", "shop",
        lambda o: o.get("status", {}).get("observedGeneration") == 1, timeout=30)
    names = model_names(MoLDeployment.model_validate(manifest).spec, obj["status"])
    chat = next(n for n, e in names.items() if e == "chat")
    assert _health(kube_client)["status"] == "True"  # Prometheus answers: nothing failed
    config = SimConfig(check_adapter_paths=False, lora_modules={n: f"/c/{n}" for n in names})
    with SimulatorCluster(replicas=2, config=config) as sims:
        for i, name in enumerate(("shop-engine-a", "shop-engine-b")):
            kube_client.create(pod(name, sims[i].port))
            kube_client.patch_status("Pod", name, pod_status(ready=True))
        # Pod b's copy of chat breaks after its warm-up: only the routers notice.
        wait_until(lambda: all(e.get("serving") for e in _experts(kube_client).values()
                               if e["name"] in names.values()), "the warm-ups")
        sims.script_failure(chat, replica=1, status=400,
                            message=f"LoRA adapter '{chat}' was found but could not be loaded.")
        stop = threading.Event()

        def route() -> None:  # a router retrying the pair once per back-off
            while not stop.wait(0.3):
                routers.failures.labels("shop", chat.rsplit("@", 1)[0]).inc()

        feeder = threading.Thread(target=route, daemon=True)
        feeder.start()
        try:
            routers.prometheus.wait_for(failures_query("shop", "30s"),
                                        lambda r: bool(r), timeout=30)
        finally:
            stop.set()
            feeder.join(5)
        kube_client.patch("MoLDeployment", "shop",
                          {"metadata": {"annotations": {"test/poke": "1"}}})
        wait_until(lambda: _experts(kube_client)["chat"].get("failingOn") == ["shop-engine-b"],
                   "failingOn set", timeout=30)
        cond = _health(kube_client)
        assert (cond["status"], cond["reason"]) == ("False", "FailingOnPods")
        assert f"{chat} on shop-engine-b: HTTP 400" in cond["message"]
        assert all("failingOn" not in e for n, e in _experts(kube_client).items() if n != "chat")
        wait_until(lambda: any(e.get("reason") == "FailingOnPods"
                               for e in kube_client.list("Event")), "the Warning Event")

        # It heals: the next look (soon, not at the resync) clears it, although the
        # window still holds the failures.
        sims.clear_scripts(replica=1)
        wait_until(lambda: "failingOn" not in _experts(kube_client)["chat"], "failingOn cleared",
                   timeout=30)
        assert _health(kube_client)["status"] == "True"
        assert routers.prometheus.query(failures_query("shop", "30s"))
