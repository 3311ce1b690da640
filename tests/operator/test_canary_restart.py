"""Canary weights and phases live in status: a restarted operator continues from them.

The operator runs in-process against the emulator and the real catalog; between two
runs the status is set to what an earlier run had decided (a later step, then a
rollback), and the new run must render exactly that into the router's config instead
of starting the rollout over.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import yaml

from mol_operator.canary import format_time
from mol_testkit.kube_client import KubeClient

WAIT = 30.0


def router_weight(kube_client: KubeClient, name: str) -> float | None:
    data = kube_client.get("ConfigMap", f"{name}-router")["data"]["router.yaml"]
    coding = next(e for e in yaml.safe_load(data)["experts"] if e["name"] == "coding")
    return float(coding["canary"]["weight"]) if coding.get("canary") else None


def canary_of(obj: dict[str, Any]) -> dict[str, Any]:
    coding = next(e for e in obj["status"]["experts"] if e["name"] == "coding")
    return dict(coding["canary"])


def set_canary(kube_client: KubeClient, name: str, **state: Any) -> dict[str, Any]:
    """Write a canary state as an earlier operator run would have left it."""
    experts = kube_client.get("MoLDeployment", name)["status"]["experts"]
    for e in experts:
        if e["name"] == "coding":
            e["canary"] = {**e["canary"], **state}
            written = e["canary"]
    kube_client.patch_status("MoLDeployment", name, {"experts": experts})
    return dict(written)


def test_weights_and_phases_survive_operator_restarts(
    kube_client: KubeClient, run_operator: Callable[..., Any],
    make_manifest: Callable[..., dict[str, Any]],
) -> None:  # fmt: skip
    manifest = make_manifest("restarts")
    coding = next(e for e in manifest["spec"]["experts"] if e["name"] == "coding")
    coding["canary"].update(steps=[25, 50, 100], interval="10m")
    runner = run_operator()
    kube_client.create(manifest)
    obj = kube_client.wait_for(
        "MoLDeployment", "restarts",
        lambda o: o.get("status", {}).get("observedGeneration") == 1, timeout=WAIT,
    )  # fmt: skip
    first = canary_of(obj)
    assert (first["phase"], first["weight"], first["step"]) == ("Progressing", 25.0, 0)
    assert router_weight(kube_client, "restarts") == 25.0

    # An earlier run had moved to the second step: the next run carries on from there.
    runner.stop()
    advanced = set_canary(kube_client, "restarts", weight=50.0, step=1,
                          lastStepAt=format_time(datetime.now(UTC)),
                          message="step 2/3: 50% of traffic")  # fmt: skip
    runner = run_operator()
    kube_client.wait_for(
        "ConfigMap", "restarts-router",
        lambda _: router_weight(kube_client, "restarts") == 50.0, timeout=WAIT,
    )  # fmt: skip
    assert canary_of(kube_client.get("MoLDeployment", "restarts")) == advanced

    # A rollback stays a rollback: no fresh start at the first step after a restart.
    runner.stop()
    rolled_back = set_canary(kube_client, "restarts", weight=0.0, phase="RolledBack",
                             message="rolled back at 50%: error rate 0.2000 > maxErrorRate"
                                     " 0.02 over 40 canary requests")  # fmt: skip
    runner = run_operator()
    obj = kube_client.wait_for(
        "MoLDeployment", "restarts",
        lambda o: any(c["type"] == "CanaryHealthy" and c["status"] == "False"
                      for c in o["status"].get("conditions", [])), timeout=WAIT,
    )  # fmt: skip
    kube_client.wait_for(
        "ConfigMap", "restarts-router",
        lambda _: router_weight(kube_client, "restarts") == 0.0, timeout=WAIT,
    )  # fmt: skip
    assert canary_of(kube_client.get("MoLDeployment", "restarts")) == rolled_back
    healthy = next(c for c in obj["status"]["conditions"] if c["type"] == "CanaryHealthy")
    assert "error rate 0.2000" in healthy["message"]
    runner.stop()
