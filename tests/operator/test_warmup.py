"""Adapter warm-up against simulated engines behind Pod objects in the Kubernetes emulator.

The emulator runs no pods, so the tests create Pod objects (Ready or not, ``podIP`` on
loopback, the engine port pointing at one simulator replica) and check the warm-up
requests each replica receives: only once Ready, again after a restart (a new Pod
object), and on a new pod after a scale-up, with one unknown adapter failing alone.
The last test runs the operator itself (kopf, the real catalog) and reads the outcome
back from the MoLDeployment's status.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mol_operator.handlers import ENGINE_PODS
from mol_operator.warmup import Warmer, warm_adapters
from mol_operator.warmup_plan import (
    immutable_name,
    model_names,
    ready_pod_urls,
)
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.kube_client import KubeClient
from mol_testkit.simulator.cluster import AsyncSimulatorCluster, SimulatorCluster
from mol_testkit.simulator.config import SimConfig

KNOWN = ("acme/coding@v3", "acme/coding@v4", "acme/chat@v1")
UNKNOWN = "acme/gone@v9"  # not in the catalog: the engine answers 404, as vLLM does
SIM = SimConfig(
    check_adapter_paths=False, lora_modules={name: f"/adapters/{name}" for name in KNOWN}
)

MOLD: dict[str, Any] = {
    "apiVersion": "mol.dev/v1alpha1",
    "kind": "MoLDeployment",
    "metadata": {"name": "shop", "namespace": "default"},
    "spec": {
        "baseModel": {"name": "tiny", "uri": "file:///models/tiny"},
        "experts": [
            {"name": "coding", "adapter": "acme/coding@stable",
             "canary": {"adapter": "acme/coding@candidate", "interval": "1m"}},
            {"name": "chat", "adapter": "acme/chat@v1"},
            {"name": "legacy", "adapter": "acme/gone@stable"},
            {"name": "broken", "adapter": "acme/broken@stable"},
        ],
    },
}  # fmt: skip
STATUS = {
    "experts": [
        {"name": "coding", "adapter": "acme/coding@stable", "version": 3, "compatible": True,
         "canary": {"version": 4, "weight": 10.0, "phase": "Progressing"}},
        {"name": "chat", "adapter": "acme/chat@v1", "version": 1, "compatible": True},
        {"name": "legacy", "adapter": "acme/gone@stable", "version": 9, "compatible": True},
        {"name": "broken", "adapter": "acme/broken@stable", "version": 2, "compatible": False},
    ],
}  # fmt: skip


def pod(
    name: str, port: int, *, ready: bool = True, ip: str = "127.0.0.1",
    phase: str = "Running", uid: str | None = None, instance: str = "shop",
) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {
        "name": name, "namespace": "default",
        "labels": {**ENGINE_PODS, "app.kubernetes.io/instance": instance},
    }  # fmt: skip
    if uid is not None:
        meta["uid"] = uid
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "vllm", "image": "vllm",
                                 "ports": [{"name": "http", "containerPort": port}]}]},
        "status": pod_status(ready, ip, phase),
    }  # fmt: skip


def pod_status(ready: bool, ip: str = "127.0.0.1", phase: str = "Running") -> dict[str, Any]:
    return {
        "phase": phase, "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }  # fmt: skip


# -- pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "urls"),
    [
        ([pod("a", 8000), pod("b", 9000, ip="10.0.0.7")],
         ["http://10.0.0.7:9000", "http://127.0.0.1:8000"]),
        ([pod("a", 8000, ready=False)], []),
        ([pod("a", 8000, phase="Pending")], []),
        ([pod("a", 8000, ip="")], []),
        ([{**pod("a", 8000), "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}], []),
        ([{**pod("a", 8000), "spec": {"containers": [{"name": "vllm"}]}}],
         ["http://127.0.0.1:8000"]),  # no named port: vLLM's default
        ([pod("a", 8000, ip="fd00::5")], ["http://[fd00::5]:8000"]),
        ([pod("a", 8000), pod("a2", 8000)], ["http://127.0.0.1:8000"]),
        ([{"metadata": {"name": "bare"}}], []),
    ],
)  # fmt: skip
def test_ready_pod_urls(pods: list[dict[str, Any]], urls: list[str]) -> None:
    assert ready_pod_urls(pods) == urls


def test_model_names_from_spec_and_status() -> None:
    spec = MoLDeployment.model_validate(MOLD).spec
    assert model_names(spec, STATUS) == {
        "acme/coding@v3": "coding", "acme/coding@v4": "coding", "acme/chat@v1": "chat",
        "acme/gone@v9": "legacy",
    }  # fmt: skip
    rolled_back = {"experts": [{**STATUS["experts"][0], "canary": {
        "version": 4, "weight": 0.0, "phase": "RolledBack"}}]}  # fmt: skip
    assert model_names(spec, rolled_back) == {"acme/coding@v3": "coding"}
    assert model_names(spec, {}) == {}  # nothing resolved yet: nothing to warm


def test_immutable_name() -> None:
    assert immutable_name("acme/coding@stable", 3) == "acme/coding@v3"
    assert immutable_name("acme/coding@v2", 5) == "acme/coding@v5"


# -- against simulated engines ------------------------------------------------------------


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


async def test_one_failing_adapter_or_pod_blocks_nothing(black_hole: int) -> None:
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        urls = [*sims.urls, f"http://127.0.0.1:{black_hole}"]
        started = time.monotonic()
        result = await warm_adapters(urls, [*KNOWN, UNKNOWN], timeout=1.0)
        elapsed = time.monotonic() - started
        assert elapsed < 3.0  # concurrent: one timeout, not one per request
        for url in sims.urls:
            assert {name: result[(url, name)] for name in KNOWN} == dict.fromkeys(KNOWN)
            error = result[(url, UNKNOWN)]
            assert error is not None
            assert error.startswith("HTTP 404: ")
            assert UNKNOWN in error
        for name in [*KNOWN, UNKNOWN]:
            assert result[(urls[2], name)] == "timed out after 1s"
        for index in range(2):
            bodies = [r.body for r in sims.state(index).received]
            assert sorted(b["model"] for b in bodies) == sorted([*KNOWN, UNKNOWN])  # type: ignore[type-var]
            assert all(b["max_tokens"] == 1 for b in bodies)


async def test_warmer_warms_each_pod_once_and_retries_failures() -> None:
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        warmer = Warmer(timeout=5.0)
        a, b = pod("a", sims[0].port, uid="uid-a"), pod("b", sims[1].port, uid="uid-b")
        not_ready = pod("c", sims[1].port, uid="uid-c", ready=False)
        result = await warmer.warm([a, not_ready], [*KNOWN, UNKNOWN])
        assert set(result) == {(sims.urls[0], name) for name in [*KNOWN, UNKNOWN]}
        assert sims.state(1).received == ()  # the pod that is not Ready got nothing

        # Same pod again: only the failed adapter is tried again; a new pod gets all.
        again = await warmer.warm([a, b], [*KNOWN, UNKNOWN])
        assert set(again) == {(sims.urls[0], UNKNOWN)} | {
            (sims.urls[1], name) for name in [*KNOWN, UNKNOWN]
        }  # fmt: skip
        assert await warmer.warm([a], KNOWN) == {}

        # A restarted pod is a new object (new uid) on the same address: warmed again.
        warmer.forget("uid-a")
        restarted = pod("a", sims[0].port, uid="uid-a2")
        assert set(await warmer.warm([restarted], KNOWN)) == {
            (sims.urls[0], name) for name in KNOWN
        }  # fmt: skip
        models = sorted(str(r.body["model"]) for r in sims.state(0).received)
        assert models == sorted([*KNOWN, *KNOWN, UNKNOWN, UNKNOWN])


# -- the operator itself ------------------------------------------------------------------


def replica_models(sims: SimulatorCluster, replica: int) -> list[str]:
    return sorted(
        str(r.body["model"]) for r in sims.state(replica).received if r.path == "/v1/completions"
    )


def wait_until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_operator_warms_engine_pods_when_ready_after_restart_and_on_scale_up(
    kube_client: KubeClient, run_operator: Callable[..., Any],
    make_manifest: Callable[..., dict[str, Any]],
) -> None:  # fmt: skip
    run_operator()
    manifest = make_manifest("shop")
    kube_client.create(manifest)
    obj = kube_client.wait_for(
        "MoLDeployment", "shop",
        lambda o: o.get("status", {}).get("observedGeneration") == 1, timeout=30,
    )  # fmt: skip
    names = model_names(MoLDeployment.model_validate(manifest).spec, obj["status"])
    experts = {e["name"]: e for e in obj["status"]["experts"]}
    canary = experts["coding"]["canary"]["version"]
    assert f"demo/coding@v{canary}" in names  # the canary's version is warmed too
    refused = immutable_name("demo/router@stable", experts["router"]["version"])
    served = sorted(n for n in names if n != refused)
    # The engines know every adapter but the router expert's: theirs answer 404 for it.
    config = SimConfig(check_adapter_paths=False, lora_modules={n: f"/cache/{n}" for n in served})

    def expert_status() -> dict[str, dict[str, Any]]:
        status = kube_client.get("MoLDeployment", "shop")["status"]
        return {e["name"]: e for e in status["experts"]}

    with SimulatorCluster(replicas=3, config=config) as sims:
        ports = [replica.port for replica in sims]
        kube_client.create(pod("shop-engine-a", ports[0], ready=False))
        kube_client.patch_status("Pod", "shop-engine-a", pod_status(ready=False))
        kube_client.create(pod("shop-engine-b", ports[1]))
        kube_client.patch_status("Pod", "shop-engine-b", pod_status(ready=True))
        wait_until(lambda: len(replica_models(sims, 1)) == len(names), "warm-up of pod b")
        assert replica_models(sims, 1) == sorted(names)
        assert replica_models(sims, 0) == []  # still loading the base: nothing sent
        for request in sims.state(1).received:
            assert request.body["max_tokens"] == 1

        # Status: the refused adapter is reported, the others serve.
        wait_until(lambda: expert_status()["router"].get("serving") is False, "router status")
        status = expert_status()
        assert status["chat"]["serving"] is True
        assert status["coding"]["serving"] is True
        (error,) = status["router"]["warmupErrors"]
        assert error.startswith(f"shop-engine-b: {refused}: HTTP 404")
        wait_until(
            lambda: any(e.get("reason") == "WarmupFailed" and refused in e.get("message", "")
                        for e in kube_client.list("Event")),
            "the WarmupFailed Event",
        )  # fmt: skip

        kube_client.patch_status("Pod", "shop-engine-a", pod_status(ready=True))
        wait_until(lambda: len(replica_models(sims, 0)) == len(names), "warm-up of pod a")
        assert replica_models(sims, 0) == sorted(names)

        # A restarted engine: a new Pod object in front of an engine that lost its cache.
        sims.stop_replica(0)
        kube_client.delete("Pod", "shop-engine-a")
        kube_client.wait_gone("Pod", "shop-engine-a")
        sims.start_replica(0)
        kube_client.create(pod("shop-engine-a", ports[0]))
        kube_client.patch_status("Pod", "shop-engine-a", pod_status(ready=True))
        wait_until(lambda: len(replica_models(sims, 0)) == 2 * len(names), "the restarted pod")
        assert replica_models(sims, 0) == sorted([*names, *names])

        # Scale-up: only the new pod is warmed.
        before = [replica_models(sims, i) for i in (0, 1)]
        kube_client.create(pod("shop-engine-c", ports[2]))
        kube_client.patch_status("Pod", "shop-engine-c", pod_status(ready=True))
        wait_until(lambda: len(replica_models(sims, 2)) == len(names), "warm-up of pod c")
        assert replica_models(sims, 2) == sorted(names)
        assert [replica_models(sims, i) for i in (0, 1)] == before
        assert served  # not vacuous: some adapters did warm
