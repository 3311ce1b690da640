"""Adapter warm-up end to end: Pod objects (the emulator runs no pods) that turn Ready
point at vLLM simulators; the operator warms each expert's immutable adapter name on
them, again after a restart and on scale-up, and status tells which warm-ups failed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from mol_platform.testing.kube_client import KubeClient
from mol_platform.testing.simulator import SimConfig, SimulatorCluster

WAIT = 30.0
pytestmark = pytest.mark.timeout(120)
ENGINE_LABELS = {
    "app.kubernetes.io/name": "mol-engine", "app.kubernetes.io/instance": "macaron",
    "app.kubernetes.io/component": "engine", "app.kubernetes.io/part-of": "mol-platform",
    "app.kubernetes.io/managed-by": "mol-operator",
}
WARMED = {"demo/chat@v1", "demo/coding@v1", "demo/coding@v2", "demo/router@v1"}


def _pod(name: str, port: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": ENGINE_LABELS},
            "spec": {"containers": [{"name": "vllm", "image": "vllm",
                                     "ports": [{"name": "http", "containerPort": port}]}]}}


def _ready(kube_client: KubeClient, name: str) -> None:
    kube_client.patch_status("Pod", name, {
        "phase": "Running", "podIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "True"}]})


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_warmup_on_ready_restart_and_scale_up(kube_client: KubeClient, run_operator: Any,
                                              make_manifest: Any) -> None:
    config = SimConfig(model="tiny-llama", dynamic_loras=True)
    with SimulatorCluster(replicas=2, config=config) as sims:
        sims.script_failure("demo/router@v1", status=500)
        run_operator()
        kube_client.create(make_manifest())
        kube_client.wait_for("MoLDeployment", "macaron",
                             lambda o: o.get("status", {}).get("observedGeneration") == 1,
                             timeout=WAIT)
        # a pod that is not Ready yet is never warmed
        kube_client.create(_pod("macaron-engine-a", _port(sims.urls[0])))
        time.sleep(1.0)
        assert sims.state(0).requests_by_model == {}

        _ready(kube_client, "macaron-engine-a")
        # the scripted failure answers before the simulator counts a request
        _until(lambda: set(sims.state(0).requests_by_model) == WARMED - {"demo/router@v1"},
               "warm-up of pod a")
        assert all(n == 1 for n in sims.state(0).requests_by_model.values())
        obj = kube_client.wait_for(
            "MoLDeployment", "macaron",
            lambda o: any(e.get("warmupErrors") for e in o["status"]["experts"]), timeout=WAIT)
        experts = {e["name"]: e for e in obj["status"]["experts"]}
        assert experts["chat"]["serving"] is True
        assert experts["coding"]["serving"] is True
        assert experts["router"]["serving"] is False
        assert experts["router"]["warmupErrors"][0].startswith(
            "macaron-engine-a: demo/router@v1: HTTP 500")

        # restart: the pod comes back as a new object (new uid) and is warmed again
        kube_client.delete("Pod", "macaron-engine-a")
        kube_client.wait_gone("Pod", "macaron-engine-a", timeout=WAIT)
        kube_client.create(_pod("macaron-engine-a", _port(sims.urls[0])))
        _ready(kube_client, "macaron-engine-a")
        _until(lambda: sims.state(0).requests_by_model.get("demo/chat@v1") == 2,
               "warm-up after restart")

        # scale-up: a second pod on the other simulator, its router adapter now works
        sims.clear_scripts()
        kube_client.create(_pod("macaron-engine-b", _port(sims.urls[1])))
        _ready(kube_client, "macaron-engine-b")
        _until(lambda: set(sims.state(1).requests_by_model) == WARMED, "warm-up of pod b")
        obj = kube_client.get("MoLDeployment", "macaron")
        errors = next(e for e in obj["status"]["experts"] if e["name"] == "router")
        assert all(not x.startswith("macaron-engine-b") for x in errors.get("warmupErrors", []))
