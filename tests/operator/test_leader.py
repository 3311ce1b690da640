"""Two operator replicas under one Lease: only the leader runs anything (kopf's
handlers and timers, the child informer, the token sweep: a standby has not even built
its runtime); when the leader stops it hands over at once, when it dies its Lease
expires and a standby takes over, and a leader that cannot renew stops all its work.
The emulator, the real catalog, the operator's handlers in two kopf runners."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import kmock
import pytest

from mol_operator.leader import Leader, lead
from mol_platform.clients.kube import KubeApi
from mol_testkit.kube_client import KubeClient
from mol_testkit.kube_kopf import KopfRunner, Operate

WAIT = 30.0
DURATION = 2.0  # seconds a dead leader's Lease holds, in these tests
LEASES = kmock.resource(group="coordination.k8s.io", version="v1", plural="leases")


def campaign(url: str, identity: str,
             duration: float = DURATION) -> Callable[[Operate, Any], Any]:
    """``lead`` for a KopfRunner: this replica's Leader on Lease default/mol-operator."""
    async def run(operate: Operate, stop: Any) -> bool:
        api = KubeApi(url)
        try:
            return await lead(Leader(api, namespace="default", name="mol-operator",
                                     identity=identity, duration=duration), operate, stop)
        finally:
            await api.aclose()
    return run


def reconciles(runner: KopfRunner) -> float:
    runtime = getattr(runner.memo, "runtime", None)
    if runtime is None:
        return 0.0
    value = runtime.metrics.registry.get_sample_value("mol_operator_reconcile_total",
                                                      {"result": "ok"})
    return float(value or 0.0)


def holder(kube_client: KubeClient) -> str | None:
    lease = kube_client.find("Lease", "mol-operator", "default")
    return None if lease is None else lease["spec"].get("holderIdentity")


def until(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def generation(n: int) -> Callable[[dict[str, Any]], bool]:
    return lambda o: (o.get("status") or {}).get("observedGeneration") == n


def test_only_the_leader_works_and_a_standby_takes_over(
        kube: Any, kube_client: KubeClient, run_operator: Any, make_manifest: Any) -> None:
    first = run_operator(lead=campaign(kube.url, "first"))
    second = run_operator(lead=campaign(kube.url, "second"), wait=False)
    kube_client.create(make_manifest())
    kube_client.wait_for("MoLDeployment", "macaron", generation(1), timeout=WAIT)
    time.sleep(4 * DURATION / 7.5)  # a few campaign rounds of the standby
    assert holder(kube_client) == "first"
    assert reconciles(first) >= 1
    assert second.running
    assert not second.ready
    assert getattr(second.memo, "runtime", None) is None  # no informer, timers, sweep

    handed = time.monotonic()
    first.stop()
    until(lambda: second.ready, "the standby to take over")
    assert time.monotonic() - handed < DURATION + 5  # released: no wait for expiry
    assert holder(kube_client) == "second"
    kube_client.patch("MoLDeployment", "macaron", {"spec": {"replicas": 3}})
    kube_client.wait_for("MoLDeployment", "macaron", generation(2), timeout=WAIT)
    assert reconciles(second) >= 1
    assert kube_client.get("Deployment", "macaron-engine")["spec"]["replicas"] == 3
    lease = kube_client.get("Lease", "mol-operator", "default")
    assert lease["spec"]["leaseTransitions"] == 1


def test_a_dead_leaders_lease_expires(kube_client: KubeClient, kube: Any,
                                      run_operator: Any, make_manifest: Any) -> None:
    from mol_operator.leader import _micro_time

    kube_client.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": "mol-operator", "namespace": "default"},
                        "spec": {"holderIdentity": "dead", "leaseDurationSeconds": 2,
                                 "renewTime": _micro_time(), "leaseTransitions": 0}})
    started = time.monotonic()
    replica = run_operator(lead=campaign(kube.url, "alive"), wait=False)
    until(lambda: replica.ready, "the Lease of a dead leader to expire")
    assert time.monotonic() - started >= 2.0
    assert holder(kube_client) == "alive"
    kube_client.create(make_manifest())
    kube_client.wait_for("MoLDeployment", "macaron", generation(1), timeout=WAIT)


@pytest.mark.timeout(90)
def test_a_leader_that_cannot_renew_stops_all_work(
        kube: Any, kube_client: KubeClient, run_operator: Any, make_manifest: Any) -> None:
    leader = run_operator(lead=campaign(kube.url, "cut-off"))
    standby = run_operator(lead=campaign(kube.url, "standby"), wait=False)
    fault = threading.Event()
    fault.set()
    kube.call(lambda: kube.emulator[kmock.method.PUT, LEASES, fault] << 500)
    until(lambda: not leader.running, "the cut-off leader to stop")
    assert leader.result is True  # leadership lost, not a normal end
    assert not standby.ready  # it cannot write the Lease either
    fault.clear()
    until(lambda: standby.ready, "the standby to take over")
    assert holder(kube_client) == "standby"
    kube_client.create(make_manifest())
    kube_client.wait_for("MoLDeployment", "macaron", generation(1), timeout=WAIT)
    assert reconciles(standby) >= 1


def test_a_leader_whose_lease_is_taken_stops_at_once(
        kube: Any, kube_client: KubeClient, run_operator: Any) -> None:
    from mol_operator.leader import _micro_time

    leader = run_operator(lead=campaign(kube.url, "ousted", duration=45.0))
    kube_client.patch("Lease", "mol-operator", {"spec": {
        "holderIdentity": "usurper", "renewTime": _micro_time(),
        "leaseDurationSeconds": 600}}, "default")
    taken = time.monotonic()
    until(lambda: not leader.running, "the ousted leader to stop")
    assert time.monotonic() - taken < 20  # one renewal (6 s), not the 30 s renew deadline
    assert leader.result is True
