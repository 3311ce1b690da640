"""The chart's shutdown values: the catalog's preStop wait and grace period, and the
router and engine numbers the operator renders pods with (through its settings)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from mol_operator.settings import OperatorSettings

from .conftest import render


def _pod(chart: helm.Chart, values: dict[str, Any], component: str) -> dict[str, Any]:
    (deployment,) = [o for o in render(chart, values) if o["kind"] == "Deployment" and (
        o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == component]
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_catalog_waits_then_drains_within_its_grace(chart: helm.Chart) -> None:
    pod = _pod(chart, {}, "catalog")
    (container,) = pod["containers"]
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert pod["terminationGracePeriodSeconds"] == 60
    off = _pod(chart, {"catalog": {"shutdown": {"preStopSeconds": 0}}}, "catalog")
    assert "lifecycle" not in off["containers"][0]


def test_a_grace_period_no_longer_than_the_wait_is_refused(chart: helm.Chart) -> None:
    with pytest.raises(Exception, match=r"longer than catalog\.shutdown\.preStopSeconds"):
        render(chart, {"catalog": {"shutdown": {"preStopSeconds": 60,
                                                "terminationGracePeriodSeconds": 60}}})


@pytest.mark.parametrize("bad", [
    {"router": {"shutdown": {"preStopSeconds": -1}}},
    {"engine": {"shutdown": {"minGracePeriodSeconds": 5}}},
    {"catalog": {"shutdown": {"grace": 30}}},
])
def test_bad_shutdown_values_are_refused(chart: helm.Chart, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(chart, bad)


def test_router_and_engine_shutdown_values_reach_the_operator(chart: helm.Chart) -> None:
    values = {"router": {"shutdown": {"preStopSeconds": 8, "drainDelaySeconds": 2,
                                      "drainTimeoutSeconds": 45}},
              "engine": {"shutdown": {"preStopSeconds": 15, "minGracePeriodSeconds": 200}}}
    (container,) = _pod(chart, values, "operator")["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = OperatorSettings(**{k.removeprefix("MOL_OPERATOR_").lower(): v
                                   for k, v in env.items()
                                   if "PRESTOP" in k or "DRAIN" in k or "GRACE" in k})
    d = settings.defaults()
    assert (d.router_prestop_seconds, d.router_drain_delay, d.router_drain_timeout) == (8, 2, 45)
    assert (d.engine_prestop_seconds, d.engine_grace_seconds) == (15, 200)
