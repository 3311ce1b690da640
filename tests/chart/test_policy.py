"""The policy gate: checkov's Kubernetes checks over the chart, rendered with every
value set, and over every manifest the operator renders for the example
MoLDeployments (raw and KServe mode). A failed check passes only when
deploy/policy/checkov-skips.yaml names it with a reason; a skip that matches nothing
fails too, so the list cannot go stale. All renders are scanned in one run (a minute,
not ten), each under names of its own: checkov's graph checks (CKV2_*, e.g. "the pod
has a NetworkPolicy") join objects across files by their labels, never by namespace,
and must never join two renders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from mol_operator.builders import Defaults, Facts, build_all
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


def _operator_manifests(example: Path, mode: str) -> list[dict[str, Any]]:
    data = yaml.safe_load(example.read_text())
    data["metadata"]["name"] += f"-{mode}"
    data["metadata"]["namespace"] = "team-a"  # not default: kubectl apply -n team-a
    data["spec"]["serving"] = {"mode": mode}
    # A semantic router without embeddingsUrl: the operator's embedding engine is scanned.
    facts = Facts(obj=MoLDeployment.model_validate(data), uid="0f4e2c1a-uid", token="t",
                  token_id=1, token_scopes=("read:demo",),
                  defaults=Defaults(prometheus_url="http://prometheus:9090",
                                    # as the chart sets them (networkPolicy.enabled)
                                    network_policy=True, operator_namespace="mol-system",
                                    operator_pod_labels={"app.kubernetes.io/name": "mol"}))
    return build_all(facts)


@pytest.fixture(scope="module")
def findings(chart: helm.Chart, tmp_path_factory: pytest.TempPathFactory) -> list[Finding]:
    """One scan of every render: chart-<value set>.yaml, operator-<example>-<mode>.yaml."""
    folder = tmp_path_factory.mktemp("policy")
    for name, values in VALUE_SETS.items():
        objects = render(chart, values, release=f"mol-{name}")
        (folder / f"chart-{name}.yaml").write_text(yaml.safe_dump_all(objects))
    for example in EXAMPLES:
        for mode in MODES:
            (folder / f"operator-{example.stem}-{mode}.yaml").write_text(
                yaml.safe_dump_all(_operator_manifests(example, mode)))
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
