"""Adapter warm-up against simulated engines behind Pod objects in the Kubernetes emulator.

The emulator runs no pods, so the test creates Pod objects (Ready or not, ``podIP`` on
loopback, the engine port pointing at one simulator replica) and checks the warm-up
requests each replica receives: only once Ready, again after a restart (a new Pod
object), and on a new pod after a scale-up, with one unknown adapter failing alone.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import kopf
import pytest

from mol_operator.warmup import (
    ENGINE_POD_LABELS,
    Warmer,
    WarmupResult,
    errors_by_model,
    immutable_name,
    model_names,
    ready_pod_urls,
    register_pod_warmup,
    warm_adapters,
)
from mol_platform.spec import MoLDeployment, MoLDeploymentSpec
from mol_platform.testing.kube import KubeServer
from mol_platform.testing.kube_client import KubeClient
from mol_platform.testing.simulator.cluster import AsyncSimulatorCluster, SimulatorCluster
from mol_platform.testing.simulator.config import SimConfig

KNOWN = ("acme/coding@v3", "acme/coding@v4", "acme/chat@v1")
UNKNOWN = "acme/gone@v9"  # not in the catalog: the engine answers 404, as vLLM does
SIM = SimConfig(lora_modules={name: f"/adapters/{name}" for name in KNOWN})

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
    phase: str = "Running", uid: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {
        "name": name, "namespace": "default",
        "labels": {**ENGINE_POD_LABELS, "app.kubernetes.io/instance": "shop"},
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
    assert model_names(spec, STATUS) == [
        "acme/coding@v3", "acme/coding@v4", "acme/chat@v1", "acme/gone@v9",
    ]  # fmt: skip
    rolled_back = {"experts": [{**STATUS["experts"][0], "canary": {
        "version": 4, "weight": 0.0, "phase": "RolledBack"}}]}  # fmt: skip
    assert model_names(spec, rolled_back) == ["acme/coding@v3"]
    assert model_names(spec, {}) == []  # nothing resolved yet: nothing to warm


def test_immutable_name() -> None:
    assert immutable_name("acme/coding@stable", 3) == "acme/coding@v3"
    assert immutable_name("acme/coding@v2", 5) == "acme/coding@v5"


def test_errors_by_model() -> None:
    result: WarmupResult = {
        ("http://b", "x@v1"): "HTTP 404: no", ("http://a", "x@v1"): "timed out after 1s",
        ("http://a", "y@v1"): None,
    }  # fmt: skip
    assert errors_by_model(result) == {"x@v1": ["http://a: timed out after 1s",
                                                "http://b: HTTP 404: no"]}  # fmt: skip


# -- against simulated engines ------------------------------------------------------------


def warmups(sims: SimulatorCluster, replica: int) -> list[dict[str, object]]:
    return [r.body for r in sims.state(replica).received if r.path == "/v1/completions"]


def models(sims: SimulatorCluster, replica: int) -> list[object]:
    return sorted(body["model"] for body in warmups(sims, replica))  # type: ignore[type-var]


def wait_until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


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


def test_pods_are_warmed_when_ready_after_restart_and_on_scale_up(
    kube: KubeServer, kube_client: KubeClient, kopf_runner: Callable[..., Any]
) -> None:
    registry = kopf.OperatorRegistry()
    warmer = Warmer(timeout=5.0)
    outcomes: dict[str, WarmupResult] = {}
    seen: list[tuple[str, str, bool]] = []
    lock = threading.Lock()

    async def names_for(body: Mapping[str, Any]) -> list[str]:
        instance = body["metadata"]["labels"]["app.kubernetes.io/instance"]
        async with kube.async_client() as client:
            mold = await client.get("MoLDeployment", instance, body["metadata"]["namespace"])
        return model_names(MoLDeploymentSpec.model_validate(mold["spec"]), mold["status"])

    async def on_result(body: Mapping[str, Any], result: WarmupResult) -> None:
        with lock:
            outcomes[body["metadata"]["uid"]] = result

    register_pod_warmup(registry, warmer, names_for, on_result=on_result)

    @kopf.on.event("", "v1", "pods", registry=registry)
    def record(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
        """Runs after the warm-up handler for the same event: marks it as handled."""
        ready = any(c.get("status") == "True" for c in body["status"].get("conditions") or [])
        with lock:
            seen.append((body["metadata"]["name"], body["metadata"]["uid"], ready))

    kube_client.create(MOLD)
    kube_client.patch_status("MoLDeployment", "shop", STATUS)
    expected = sorted(KNOWN)

    with SimulatorCluster(replicas=3, config=SIM) as sims:
        kopf_runner(registry=registry)
        ports = [replica.port for replica in sims]

        # A pod that is still loading the base model gets nothing.
        uid = kube_client.create(pod("shop-engine-a", ports[0], ready=False))["metadata"]["uid"]
        kube_client.patch_status("Pod", "shop-engine-a", pod_status(ready=False))
        wait_until(lambda: ("shop-engine-a", uid, False) in seen, "the not-ready event")
        assert warmups(sims, 0) == []

        # Ready: each adapter once, the unknown one fails alone.
        kube_client.patch_status("Pod", "shop-engine-a", pod_status(ready=True))
        wait_until(lambda: uid in outcomes, "warm-up of pod a")
        assert sorted(m for m in models(sims, 0) if m != UNKNOWN) == expected
        assert all(body["max_tokens"] == 1 for body in warmups(sims, 0))
        failed = errors_by_model(outcomes[uid])
        assert list(failed) == [UNKNOWN]
        assert "HTTP 404" in failed[UNKNOWN][0]
        assert [n for (_, n), e in outcomes[uid].items() if e is None] == list(KNOWN)

        # Another event for the same ready pod warms nothing already warm.
        kube_client.patch("Pod", "shop-engine-a", {"metadata": {"labels": {"touch": "1"}}})
        wait_until(lambda: sum(1 for s in seen if s[1] == uid and s[2]) >= 2, "the touch")
        assert sorted(m for m in models(sims, 0) if m != UNKNOWN) == expected

        # Restart: the engine comes back empty as a new Pod object; warmed again once Ready.
        sims.stop_replica(0)
        kube_client.delete("Pod", "shop-engine-a")
        kube_client.wait_gone("Pod", "shop-engine-a")
        sims.start_replica(0)
        new_uid = kube_client.create(pod("shop-engine-a", ports[0], ready=False))["metadata"][
            "uid"
        ]
        assert new_uid != uid
        kube_client.patch_status("Pod", "shop-engine-a", pod_status(ready=False))
        wait_until(lambda: ("shop-engine-a", new_uid, False) in seen, "the restarted pod")
        assert sorted(m for m in models(sims, 0) if m != UNKNOWN) == expected
        kube_client.patch_status("Pod", "shop-engine-a", pod_status(ready=True))
        wait_until(lambda: new_uid in outcomes, "warm-up of the restarted pod")
        assert sorted(m for m in models(sims, 0) if m != UNKNOWN) == sorted(expected * 2)

        # Scale-up: only the new pod is warmed.
        before = models(sims, 0)
        b_uid = kube_client.create(pod("shop-engine-b", ports[1]))["metadata"]["uid"]
        kube_client.patch_status("Pod", "shop-engine-b", pod_status(ready=True))
        wait_until(lambda: b_uid in outcomes, "warm-up of pod b")
        assert sorted(m for m in models(sims, 1) if m != UNKNOWN) == expected
        assert models(sims, 0) == before
        assert warmups(sims, 2) == []  # no pod points at the third replica
