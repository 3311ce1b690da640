"""The chart's ``harness`` values: the code harness section the operator gives
MoLDeployments that leave ``spec.harness`` out, checked from the values through the
operator's settings to the session pods it renders."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import pytest
import yaml

from mol_operator.builders import Facts, build_all
from mol_operator.settings import OperatorSettings
from mol_platform.contract.spec import MoLDeployment

from .conftest import CHART, FULL, ROOT, render


def _operator_settings(chart: helm.Chart, values: dict[str, Any]) -> OperatorSettings:
    """OperatorSettings from the env the chart gives the operator's container."""
    (deployment,) = [o for o in render(chart, values) if o["kind"] == "Deployment" and (
        o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "operator"]
    env = {e["name"]: e["value"] for e in
           deployment["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    assert ("MOL_OPERATOR_HARNESS" in env) == bool(values.get("harness"))
    fields = {k.removeprefix("MOL_OPERATOR_").lower(): v for k, v in env.items()
              if k in ("MOL_OPERATOR_HARNESS", "MOL_OPERATOR_ROUTER_IMAGE")}
    if "harness" in fields:
        fields["harness"] = json.loads(fields["harness"])
    return OperatorSettings.model_validate(fields)


def _session_pod(settings: OperatorSettings, harness: dict[str, Any] | None) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["spec"]["experts"][0]["harness"] = True
    if harness is not None:
        data["spec"]["harness"] = harness
    facts = Facts(obj=MoLDeployment.model_validate(data), uid="u", token="t", token_id=1,
                  defaults=settings.defaults())
    (config,) = [o for o in build_all(facts) if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"].endswith("-sandbox-session")]
    pod: dict[str, Any] = json.loads(config["data"]["pod.json"])
    return pod


def test_harness_values_reach_deployments_without_their_own_section(chart: helm.Chart) -> None:
    settings = _operator_settings(chart, FULL)
    pod = _session_pod(settings, None)["spec"]
    assert pod["runtimeClassName"] == "gvisor"
    (session,) = pod["containers"]
    assert session["resources"]["limits"]["memory"] == "1Gi"
    env = {e["name"]: e["value"] for e in session["env"]}
    assert env["MOL_SANDBOX_CALL_TIMEOUT"] == "20.0"
    # A section of its own wins, taking the chart's runtime class when it names none.
    own = _session_pod(settings, {"limits": {"memory": "2Gi"}})["spec"]
    assert own["runtimeClassName"] == "gvisor"
    assert own["containers"][0]["resources"]["limits"]["memory"] == "2Gi"
    assert _session_pod(settings, {"runtimeClassName": "kata"})["spec"][
        "runtimeClassName"] == "kata"


def test_no_harness_values_keep_the_built_in_defaults(chart: helm.Chart) -> None:
    pod = _session_pod(_operator_settings(chart, {}), None)["spec"]
    assert "runtimeClassName" not in pod
    assert pod["containers"][0]["resources"]["limits"]["memory"] == "512Mi"


@pytest.mark.parametrize("bad", [
    {"harness": {"surprise": 1}},
    {"harness": {"limits": {"timeoutSeconds": 0}}},
    {"harness": {"limits": {"memory": "lots"}}},
    {"harness": {"runtimeClassName": "Not_A_Class"}},
    {"harness": {"egress": {"allow": ["example.com"]}}},
])
def test_values_schema_refuses_bad_harness_values(chart: helm.Chart, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)


def test_the_chart_harness_schema_is_the_crds() -> None:
    """values.schema.json's harness is spec.harness of the CRD, less what JSON schema in
    Helm cannot say (defaults, nullable, CEL rules) and closed to unknown keys."""
    crd = yaml.safe_load((ROOT / "deploy/crds/moldeployments.mol.dev.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def strip(node: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in node.items() if k not in ("default", "nullable", "description")
               and not k.startswith("x-kubernetes")}
        if "properties" in out:
            out["properties"] = {k: strip(v) for k, v in out["properties"].items()}
            out["additionalProperties"] = False
        if "items" in out:
            out["items"] = strip(out["items"])
        return out

    chart = json.loads((CHART / "values.schema.json").read_text())["properties"]["harness"]
    assert strip(chart) == strip(spec["properties"]["harness"]), (
        "values.schema.json's harness drifted from the CRD's spec.harness")
