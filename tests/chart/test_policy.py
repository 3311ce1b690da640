"""The policy gate: checkov's Kubernetes checks over the chart, rendered with every
value set, and over every manifest the operator renders for the example
MoLDeployments (raw and KServe mode; with the code harness on, its session pods both as
agent-sandbox's SandboxTemplate and as the plain Pod in a ConfigMap, each scanned as the
Pod it becomes). A failed check passes only when
deploy/policy/checkov-skips.yaml names it with a reason; a skip that matches nothing
fails too, so the list cannot go stale. All renders are scanned in one run (a minute,
not ten), each under names of its own: checkov's graph checks (CKV2_*, e.g. "the pod
has a NetworkPolicy") join objects across files by their labels, never by namespace,
and must never join two renders."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from mol_operator.builders import Defaults, Facts, build_all
from mol_operator.builders.sandbox import POD_TEMPLATE_KEY
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.checkov import Finding, scan

from .conftest import ROOT, VALUE_SETS, render

SKIPS = ROOT / "deploy" / "policy" / "checkov-skips.yaml"
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
MODES = ("raw", "kserve")


def _skips() -> list[dict[str, str]]:
    skips: list[dict[str, str]] = yaml.safe_load(SKIPS.read_text())["skips"]
    return skips


def _skipped_by(finding: Finding) -> int | None:
    """The index of the skip that accepts ``finding``, if one does."""
    where = f"{finding.file}:{finding.resource}"
    for i, skip in enumerate(_skips()):
        if skip["check"] == finding.check and re.search(skip.get("where", ""), where):
            return i
    return None


def _session_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The code harness's session pods as the cluster gets them: checkov reads neither a
    SandboxTemplate's podTemplate nor a Pod manifest held in a ConfigMap."""
    pods = []
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "ConfigMap" and POD_TEMPLATE_KEY in obj.get("data", {}):
            pod = json.loads(obj["data"][POD_TEMPLATE_KEY])
            pod["metadata"]["name"] = pod["metadata"].pop("generateName") + "pod"
            pods.append(pod)
        elif obj["kind"] == "SandboxTemplate":
            template = obj["spec"]["podTemplate"]
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                **template["metadata"], "name": f"{meta['name']}-pod",
                "namespace": meta["namespace"]}, "spec": template["spec"]})
    return pods


def _operator_manifests(example: Path, mode: str, agent_sandbox: bool = False
                        ) -> list[dict[str, Any]]:
    data = yaml.safe_load(example.read_text())
    data["metadata"]["name"] += f"-{mode}" + ("-as" if agent_sandbox else "")
    data["metadata"]["namespace"] = "team-a"  # not default: kubectl apply -n team-a
    data["spec"]["serving"] = {"mode": mode}
    # A semantic router without embeddingsUrl: the operator's embedding engine is scanned.
    facts = Facts(obj=MoLDeployment.model_validate(data), uid="0f4e2c1a-uid", token="t",
                  token_id=1, token_scopes=("read:demo",),
                  defaults=Defaults(prometheus_url="http://prometheus:9090",
                                    # as the chart sets them (networkPolicy.enabled)
                                    network_policy=True, operator_namespace="mol-system",
                                    operator_pod_labels={"app.kubernetes.io/name": "mol"}),
                  agent_sandbox=agent_sandbox)
    objects = build_all(facts)
    return objects + _session_pods(objects)


def _renders() -> dict[str, tuple[Path, str, bool]]:
    """Scanned file stem -> (example, serving mode, agent-sandbox served); a harness
    example is rendered once more with agent-sandbox's CRDs (raw mode)."""
    out = {}
    for example in EXAMPLES:
        for mode in MODES:
            out[f"operator-{example.stem}-{mode}"] = (example, mode, False)
        if MoLDeployment.model_validate(yaml.safe_load(example.read_text())
                                        ).spec.harness_experts:
            out[f"operator-{example.stem}-raw-agent-sandbox"] = (example, "raw", True)
    return out


@pytest.fixture(scope="module")
def findings(chart: helm.Chart, tmp_path_factory: pytest.TempPathFactory) -> list[Finding]:
    """One scan of every render: chart-<value set>.yaml, operator-<example>-<mode>.yaml."""
    folder = tmp_path_factory.mktemp("policy")
    for name, values in VALUE_SETS.items():
        objects = render(chart, values, release=f"mol-{name}")
        (folder / f"chart-{name}.yaml").write_text(yaml.safe_dump_all(objects))
    for stem, (example, mode, agent_sandbox) in _renders().items():
        (folder / f"{stem}.yaml").write_text(
            yaml.safe_dump_all(_operator_manifests(example, mode, agent_sandbox)))
    return scan(folder)


def _report(found: list[Finding]) -> str:
    return "\n".join(f"{f.check} {f.name}: {f.file} {f.resource}" for f in found)


def test_every_skip_has_a_reason() -> None:
    assert _skips()
    for skip in _skips():
        assert re.fullmatch(r"CKV2?_K8S_\d+", skip["check"]), skip
        assert len(skip["reason"].split()) >= 8, f"{skip['check']}: say why"
        re.compile(skip.get("where", ""))


def test_the_scan_saw_every_render(findings: list[Finding]) -> None:
    # A gate that scanned nothing would pass: the default render has known skipped findings.
    files = {f.file for f in findings}
    assert {f"chart-{name}.yaml" for name in VALUE_SETS if name != "minimal"} <= files
    assert {f"{stem}.yaml" for stem in _renders()} <= files


def test_the_scan_saw_the_session_pods_in_both_forms(findings: list[Finding]) -> None:
    # Images go by tag (a skipped check, CKV_K8S_43): every scanned pod fails it once.
    sessions = {f.file for f in findings if f.check == "CKV_K8S_43"
                and re.match(r"Pod\.[^.]*\.[^.]*-sandbox-session-pod(\.|$)", f.resource)}
    harness = {stem for stem, (_, _, agent) in _renders().items() if agent}
    assert harness, "no example turns the code harness on"
    assert {f"{stem}.yaml" for stem in harness} <= sessions
    assert {f"{stem.removesuffix('-agent-sandbox')}.yaml" for stem in harness} <= sessions


def test_chart_passes_the_policy_scan(findings: list[Finding]) -> None:
    failed = [f for f in findings if f.file.startswith("chart-") and _skipped_by(f) is None]
    assert not failed, "checks the chart fails:\n" + _report(failed)


def test_operator_manifests_pass_the_policy_scan(findings: list[Finding]) -> None:
    failed = [f for f in findings if f.file.startswith("operator-") and _skipped_by(f) is None]
    assert not failed, "checks the operator's manifests fail:\n" + _report(failed)


def test_no_skip_is_stale(findings: list[Finding]) -> None:
    used = {_skipped_by(f) for f in findings}
    stale = [s["check"] for i, s in enumerate(_skips()) if i not in used]
    assert not stale, f"skips that match no finding any more (remove them): {stale}"
