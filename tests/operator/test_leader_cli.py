"""``mol operator run`` twice against one cluster: two processes, one Lease. The
standby answers ``/healthz`` (it counts as ready) and has reconciled nothing; SIGTERM
makes the leader hand over at once and exit 0; the standby then reconciles."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mol_testkit.kube_client import KubeClient
from mol_testkit.net import free_port, stop_process, wait_port

pytestmark = pytest.mark.timeout(150)
WAIT = 60.0


class Replica:
    def __init__(self, kube: Any, catalog: Any, identity: str, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "MOL_OPERATOR_CATALOG_TOKEN": catalog.admin_token,
               "MOL_OPERATOR_LEASE_IDENTITY": identity,
               "MOL_OPERATOR_LEASE_DURATION_SECONDS": "3"}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mol_platform", "operator", "run", "--kube-url",
                 kube.url, "--catalog-url", catalog.url, "--prometheus-url",
                 "http://127.0.0.1:9", "--metrics-port", str(self.port),
                 "--retry-seconds", "1"], env=env, stdout=out, stderr=subprocess.STDOUT)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=5)

    def reconciled(self) -> bool:
        try:
            return 'mol_operator_reconcile_total{result="ok"}' in self.get("/metrics").text
        except httpx.HTTPError:
            return False


@pytest.fixture
def replicas(operator_kube: Any, catalog: Any, tmp_path: Path
             ) -> Iterator[Callable[[str], Replica]]:
    started: list[Replica] = []

    def start(identity: str) -> Replica:
        replica = Replica(operator_kube, catalog, identity, tmp_path / f"{identity}.log")
        started.append(replica)
        return replica

    yield start
    for replica in started:
        stop_process(replica.proc)


def until(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def holder(kube_client: KubeClient) -> str | None:
    lease = kube_client.find("Lease", "mol-operator", "default")
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_two_processes_one_works_the_other_takes_over(
        kube_client: KubeClient, replicas: Callable[[str], Replica],
        make_manifest: Any) -> None:
    first = replicas("first")
    until(lambda: holder(kube_client) == "first", "the first replica to lead")
    second = replicas("second")
    wait_port(second.port, timeout=WAIT)
    assert second.get("/healthz").status_code == 200  # a standby is ready
    kube_client.create(make_manifest())
    kube_client.wait_for("MoLDeployment", "macaron",
                         lambda o: (o.get("status") or {}).get("observedGeneration") == 1,
                         timeout=WAIT)
    assert first.reconciled()
    assert not second.reconciled()
    assert holder(kube_client) == "first"

    first.proc.terminate()
    assert first.proc.wait(timeout=30) == 0
    until(lambda: holder(kube_client) == "second", "the hand-over", timeout=15)
    kube_client.patch("MoLDeployment", "macaron", {"spec": {"replicas": 3}})
    kube_client.wait_for("MoLDeployment", "macaron",
                         lambda o: (o.get("status") or {}).get("observedGeneration") == 2,
                         timeout=WAIT)
    until(second.reconciled, "the second replica's reconcile")
