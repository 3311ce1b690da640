"""Pod shutdown in every rendered pod: a preStop wait, readiness that fails first, and a
termination grace period longer than the wait plus the process's own drain (the kubelet
kills the container when the period ends, drained or not)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from mol_operator.builders import Defaults, Facts, build_all
from mol_operator.builders.common import grace_seconds, shutdown_timeout
from mol_operator.settings import OperatorSettings
from mol_platform.contract.engine_args import ENGINE_DRAIN_SECONDS
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.pod_security import pod_spec_of

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = Defaults(prometheus_url="http://prometheus:9090")


def _objects(defaults: Defaults = DEFAULTS, **spec: Any) -> list[dict[str, Any]]:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["spec"].update(spec)
    obj = MoLDeployment.model_validate(data)
    return build_all(Facts(obj=obj, uid="uid-1", token="mol_secret", token_id=7,
                           token_scopes=("read:demo",), defaults=defaults))


def _pods(objects: list[dict[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """component -> pod spec, for every rendered workload (KServe's template included)."""
    out = {}
    for o in objects:
        pod = pod_spec_of(o)
        if pod is None and o["kind"] == "LLMInferenceService":
            pod = o["spec"]["template"]
        if pod is not None:
            labels = o["metadata"]["labels"]
            out[labels.get("mol.dev/component") or labels["app.kubernetes.io/component"]] = pod
    return out


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def _prestop(container: Mapping[str, Any]) -> int:
    return int(((container.get("lifecycle") or {}).get("preStop") or {})
               .get("sleep", {}).get("seconds", 0))


SEMANTIC = {"mode": "semantic", "default": "chat",
            "semantic": {"experts": [{"name": "coding", "examples": ["fix my bug"]}]}}


@pytest.mark.parametrize("spec", [
    {}, {"nodePool": {"gpusPerReplica": 0}}, {"serving": {"mode": "kserve"}},
    {"router": SEMANTIC},
], ids=["raw", "cpu", "kserve", "semantic-embedding-engine"])
def test_every_pod_outlives_its_prestop_and_drain(spec: dict[str, Any]) -> None:
    pods = _pods(_objects(**spec))
    assert {"router", "engine"} <= set(pods)
    for component, pod in pods.items():
        (container,) = pod["containers"]
        wait = _prestop(container)
        assert wait > 0, f"{component}: no preStop wait"
        drain = 0.0
        if component == "router":
            env = _env(container)
            drain = float(env["MOL_ROUTER_DRAIN_DELAY"]) + float(env["MOL_ROUTER_DRAIN_TIMEOUT"])
        else:
            drain = shutdown_timeout(container.get("args") or [])
        if component == "engine":
            assert drain == ENGINE_DRAIN_SECONDS, "engines drain their streams"
        grace = pod["terminationGracePeriodSeconds"]
        assert grace > wait + drain, (component, grace, wait, drain)
        # Readiness fails (and the pod leaves its endpoints) within the preStop wait.
        probe = container.get("readinessProbe")
        if probe is not None:
            assert probe["periodSeconds"] * probe["failureThreshold"] <= wait, component


def test_router_grace_is_prestop_plus_drain_plus_margin() -> None:
    pod = _pods(_objects())["router"]
    (container,) = pod["containers"]
    assert _prestop(container) == 5
    assert _env(container)["MOL_ROUTER_DRAIN_DELAY"] == "1"
    assert _env(container)["MOL_ROUTER_DRAIN_TIMEOUT"] == "20"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_a_users_longer_engine_drain_raises_the_grace_period() -> None:
    pods = _pods(_objects(engine={"extraArgs": ["--shutdown-timeout", "600"]}))
    assert pods["engine"]["terminationGracePeriodSeconds"] == 10 + 600 + 4
    kserve = _pods(_objects(serving={"mode": "kserve"},
                            engine={"extraArgs": ["--shutdown-timeout=300"]}))["engine"]
    args = kserve["containers"][0]["args"]
    assert args[-1] == "--shutdown-timeout=300", "a user's flag comes last and wins"
    assert kserve["terminationGracePeriodSeconds"] == 10 + 300 + 4


def test_the_default_engine_grace_is_the_floor_of_120() -> None:
    assert _pods(_objects())["engine"]["terminationGracePeriodSeconds"] == 120


def test_shutdown_settings_reach_the_rendered_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"ROUTER_PRESTOP_SECONDS": "0", "ROUTER_DRAIN_DELAY": "3",
                        "ROUTER_DRAIN_TIMEOUT": "60", "ENGINE_PRESTOP_SECONDS": "30",
                        "ENGINE_GRACE_SECONDS": "45"}.items():
        monkeypatch.setenv(f"MOL_OPERATOR_{name}", value)
    pods = _pods(_objects(OperatorSettings().defaults()))
    router, engine = pods["router"], pods["engine"]
    assert "lifecycle" not in router["containers"][0] or \
        router["containers"][0]["lifecycle"] is None, "a wait of 0 renders no preStop"
    assert _env(router["containers"][0])["MOL_ROUTER_DRAIN_TIMEOUT"] == "60"
    assert router["terminationGracePeriodSeconds"] == 0 + 63 + 4
    assert _prestop(engine["containers"][0]) == 30
    assert engine["terminationGracePeriodSeconds"] == 30 + 90 + 4


@pytest.mark.parametrize(("name", "value"), [
    ("ROUTER_PRESTOP_SECONDS", "-1"), ("ROUTER_DRAIN_TIMEOUT", "nan"),
    ("ENGINE_GRACE_SECONDS", "10"), ("ENGINE_PRESTOP_SECONDS", "1e9"),
])
def test_bad_shutdown_settings_are_refused(monkeypatch: pytest.MonkeyPatch, name: str,
                                           value: str) -> None:
    monkeypatch.setenv(f"MOL_OPERATOR_{name}", value)
    with pytest.raises(ValueError, match=name.lower()):
        OperatorSettings()


@pytest.mark.parametrize(("args", "seconds"), [
    ([], 0.0), (["--shutdown-timeout", "90"], 90.0), (["--shutdown-timeout=7"], 7.0),
    (["--shutdown-timeout", "90", "--shutdown-timeout", "5"], 5.0),
    (["--shutdown-timeout", "soon"], 0.0), (["--shutdown-timeout"], 0.0),
])
def test_shutdown_timeout_reads_the_last_flag(args: list[str], seconds: float) -> None:
    assert shutdown_timeout(args) == seconds


def test_grace_is_strictly_longer_than_wait_plus_drain() -> None:
    assert grace_seconds(5, 21) == 30
    assert grace_seconds(0, 0) == 30
    assert grace_seconds(10, 90.5, floor=0) == 105
