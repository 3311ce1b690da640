"""What the chart's values do once they reach the operator: the operator Deployment's
env is read by the real ``OperatorSettings``, and its builders render MoLDeployments
with the result. A value either changes what is rendered or does not exist; platform
defaults never override what a MoLDeployment says."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from mol_operator.builders import Facts, build_all
from mol_operator.settings import OperatorSettings
from mol_platform.contract.spec import MoLDeployment

from .conftest import CHART, FULL, render

ROOT = Path(__file__).resolve().parents[2]


def _deployment(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "Deployment"
                and o["metadata"]["name"].endswith(suffix))


def _settings(objects: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> OperatorSettings:
    """The operator's settings exactly as its container would read them."""
    container = _deployment(objects, "-operator")["spec"]["template"]["spec"]["containers"][0]
    for key in [k for k in os.environ if k.startswith("MOL_OPERATOR_")]:
        monkeypatch.delenv(key)
    # Values from the downward API stand for what the kubelet fills in; Secrets are not read.
    downward = {"metadata.name": "mol-operator-0", "metadata.namespace": "mol-system"}
    for env in container["env"]:
        if "value" in env:
            monkeypatch.setenv(env["name"], env["value"])
        elif "fieldRef" in env.get("valueFrom", {}):
            monkeypatch.setenv(env["name"], downward[env["valueFrom"]["fieldRef"]["fieldPath"]])
    return OperatorSettings()


def _build(settings: OperatorSettings, **spec: Any) -> dict[tuple[str, str], dict[str, Any]]:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["metadata"]["namespace"] = "team-a"
    data["spec"].update(spec)
    facts = Facts(obj=MoLDeployment.model_validate(data), uid="u", token="t", token_id=1,
                  token_scopes=("read:demo",), defaults=settings.defaults())
    return {(o["kind"], o["metadata"]["name"]): o for o in build_all(facts)}


def test_a_deployments_router_replicas_win_over_the_chart(
        chart: helm.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(render(chart, {}), monkeypatch)
    router = {"mode": "explicit", "default": "chat", "replicas": 5}
    built = _build(settings, router=router)
    assert built[("Deployment", "macaron-router")]["spec"]["replicas"] == 5


def test_router_and_engine_resources_are_the_charts(
        chart: helm.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _build(_settings(render(chart, FULL), monkeypatch))
    router = built[("Deployment", "macaron-router")]["spec"]["template"]["spec"]
    assert router["containers"][0]["resources"] == FULL["router"]["resources"]
    engine = built[("Deployment", "macaron-engine")]["spec"]["template"]["spec"]
    requests = engine["containers"][0]["resources"]["requests"]
    assert {k: requests[k] for k in ("cpu", "memory")} == FULL["engine"]["resources"]["requests"]
    shm = next(v for v in engine["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["sizeLimit"] == FULL["engine"]["shmSize"]
    # The defaults: the router's memory limit is the chart's limit, not its request.
    defaults = _build(_settings(render(chart, {}), monkeypatch))
    resources = defaults[("Deployment", "macaron-router")]["spec"]["template"]["spec"][
        "containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "250m", "memory": "128Mi"},
                         "limits": {"memory": "512Mi"}}


def _router_env(built: dict[tuple[str, str], dict[str, Any]]) -> dict[str, str]:
    container = built[("Deployment", "macaron-router")]["spec"]["template"]["spec"][
        "containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_router_access_log_is_the_charts(chart: helm.Chart,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    on = _build(_settings(render(chart, {"router": {"accessLog": True}}), monkeypatch))
    assert _router_env(on)["MOL_ROUTER_ACCESS_LOG"] == "true"
    off = _build(_settings(render(chart, {}), monkeypatch))
    assert "MOL_ROUTER_ACCESS_LOG" not in _router_env(off)


def test_operator_rendered_monitors_carry_the_charts_monitor_labels(
        chart: helm.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _build(_settings(render(chart, FULL), monkeypatch))
    monitors = [o for (kind, _), o in built.items() if kind == "ServiceMonitor"]
    assert len(monitors) == 2
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "prom"


def test_engine_network_policy_admits_the_charts_operator_pods(
        chart: helm.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(chart, {})
    built = _build(_settings(objects, monkeypatch))
    policy = built[("NetworkPolicy", "macaron-engine")]["spec"]
    operator_peer = policy["ingress"][0]["from"][1]
    pod = _deployment(objects, "-operator")["spec"]["template"]["metadata"]
    assert operator_peer["podSelector"]["matchLabels"].items() <= pod["labels"].items()
    assert operator_peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "mol-system"}
    # networkPolicy.enabled=false: neither the catalog's nor the engines' policy.
    off = render(chart, {"networkPolicy": {"enabled": False}})
    assert not [o for o in off if o["kind"] == "NetworkPolicy"]
    assert ("NetworkPolicy", "macaron-engine") not in _build(_settings(off, monkeypatch))


def _admits(rule: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = rule["podSelector"]
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    return all(labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []))


@pytest.mark.parametrize("mode", ["raw", "kserve"])
def test_catalog_network_policy_admits_every_operator_rendered_pod(
        chart: helm.Chart, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    objects = render(chart, {})
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    peers = policy["spec"]["ingress"][0]["from"]
    built = _build(_settings(objects, monkeypatch), serving={"mode": mode})
    pods = [o["spec"]["template"]["metadata"]["labels"]
            for (kind, _), o in built.items() if kind == "Deployment"]
    if mode == "kserve":  # KServe's pods get the LLMInferenceService's spec.labels
        pods.append(built[("LLMInferenceService", "macaron")]["spec"]["labels"])
    assert len(pods) == 2
    for labels in pods:
        assert any("namespaceSelector" in p and _admits(p, labels) for p in peers), labels


def test_admin_token_changes_roll_the_catalog_and_the_operator(chart: helm.Chart) -> None:
    objects = render(chart, {})
    secret = next(o for o in objects if o["kind"] == "Secret")
    checksum = hashlib.sha256(secret["data"]["token"].encode()).hexdigest()
    for suffix in ("-catalog", "-operator"):
        pod = _deployment(objects, suffix)["spec"]["template"]["metadata"]
        assert pod["annotations"]["checksum/admin-token"] == checksum, suffix
    # Another render generates another token (no cluster to ask): the pods roll with it.
    again = render(chart, {})
    assert (_deployment(again, "-catalog")["spec"]["template"]["metadata"]["annotations"]
            != _deployment(objects, "-catalog")["spec"]["template"]["metadata"]["annotations"])


def _notes(chart: helm.Chart, values: dict[str, Any]) -> str:
    out = chart.render(values, name="mol", namespace="mol-system", is_install=True)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def test_notes_name_existing_secret_as_the_gitops_path(chart: helm.Chart) -> None:
    generated = _notes(chart, {})
    assert "adminToken.existingSecret" in generated
    assert "GitOps" in generated
    assert "GitOps" not in _notes(chart, FULL)
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    assert "## GitOps" in docs
    assert "adminToken.existingSecret" in docs


def test_workload_identity_reaches_service_accounts_and_pods(chart: helm.Chart) -> None:
    objects = render(chart, FULL)
    for workload in ("catalog", "operator"):
        values = FULL[workload]
        account = next(o for o in objects if o["kind"] == "ServiceAccount"
                       and o["metadata"]["name"].endswith(f"-{workload}"))
        assert account["metadata"]["annotations"] == values["serviceAccount"]["annotations"]
        pod = _deployment(objects, f"-{workload}")["spec"]["template"]["metadata"]
        assert values["podLabels"].items() <= pod["labels"].items()
        # The selector stays the chart's: extra labels never break a rollout.
        selector = _deployment(objects, f"-{workload}")["spec"]["selector"]["matchLabels"]
        assert not set(selector) & set(values["podLabels"])


_REF = re.compile(r"\.Values((?:\.[A-Za-z0-9_]+)+)")
_ALIAS = re.compile(r"(\$[A-Za-z0-9_]+)\s*:=\s*\.Values((?:\.[A-Za-z0-9_]+)+)")


def _referenced_paths() -> set[str]:
    """Every ``.Values`` path the templates read, through ``$x := .Values.y`` too."""
    out: set[str] = set()
    for template in (CHART / "templates").glob("*"):
        text = template.read_text()
        aliases = {name: path for name, path in _ALIAS.findall(text)}
        out |= {m.lstrip(".") for m in _REF.findall(_ALIAS.sub("", text))}
        for name, path in aliases.items():
            for rest in re.findall(re.escape(name) + r"((?:\.[A-Za-z0-9_]+)*)", text):
                out.add((path + rest).lstrip("."))
    return out


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        out += _leaves(value, path + ".") if isinstance(value, dict) and value else [path]
    return out


def test_every_value_is_read_by_a_template() -> None:
    refs = _referenced_paths()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    unused = [leaf for leaf in _leaves(defaults)
              if not any(leaf == r or leaf.startswith(r + ".") for r in refs)]
    assert unused == [], f"values no template reads: {unused}"
