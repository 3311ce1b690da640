"""Manifest validation tells good manifests from bad ones, built-in and custom."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mol_testkit.kube_validate import (
    REPO_ROOT,
    ManifestError,
    crd_dirs,
    custom_resource_errors,
    find_crd_schema,
    validate_builtin,
    validate_custom_resource,
    validate_manifest,
)

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "engine"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "engine"}},
        "template": {
            "metadata": {"labels": {"app": "engine"}},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
        },
    },
}
SCALED_OBJECT: dict[str, Any] = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {"name": "engine"},
    "spec": {
        "scaleTargetRef": {"name": "engine"},
        "minReplicaCount": 1,
        "maxReplicaCount": 4,
        "triggers": [{"type": "prometheus", "metadata": {
            "serverAddress": "http://prometheus:9090", "query": "sum(vllm:num_requests_waiting)",
            "threshold": "5"}}],
    },
}


def test_builtin_good_and_bad() -> None:
    validate_builtin(DEPLOYMENT)
    bad = copy.deepcopy(DEPLOYMENT)
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(ManifestError, match="imagePullPolicy"):
        validate_builtin(bad)
    unknown = copy.deepcopy(DEPLOYMENT)
    unknown["spec"]["replicaz"] = 2
    with pytest.raises(ManifestError, match="replicaz"):
        validate_builtin(unknown)


def test_builtin_other_kinds() -> None:
    validate_builtin({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                      "metadata": {"name": "p"},
                      "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}}})
    validate_builtin({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                      "data": {"router.yaml": "x: 1"}})
    with pytest.raises(ManifestError):
        validate_builtin({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                          "spec": {"ports": [{"port": "http"}]}})


def test_custom_resource_good_and_bad() -> None:
    validate_custom_resource(SCALED_OBJECT)
    bad = copy.deepcopy(SCALED_OBJECT)
    bad["spec"]["minReplicaCount"] = "one"
    bad["spec"]["scaleTargetRef"]["nmae"] = "typo"
    errors = custom_resource_errors(bad)
    assert any(e.startswith("spec.minReplicaCount:") for e in errors)
    assert any("nmae" in e for e in errors)
    with pytest.raises(ManifestError, match="minReplicaCount"):
        validate_custom_resource(bad)


def test_monitoring_and_kserve_kinds() -> None:
    monitor: dict[str, Any] = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
               "metadata": {"name": "router"},
               "spec": {"selector": {"matchLabels": {"app": "router"}},
                        "endpoints": [{"port": "http", "interval": "15s"}]}}
    validate_manifest(monitor)
    monitor["spec"]["endpoints"][0]["interval"] = "soon"
    with pytest.raises(ManifestError, match="interval"):
        validate_manifest(monitor)
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "m"},
            "spec": {"predictor": {"containers": [{"name": "kserve-container", "image": "v"}]}}}
    validate_manifest(isvc)


def test_explicit_schema_and_unknown_kind() -> None:
    schema = {"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["baseModel"], "properties": {
            "baseModel": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "replicas": {"type": "integer", "nullable": True}}}}}
    mold = {"apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment", "metadata": {"name": "a"},
            "spec": {"baseModel": {"name": "x", "anything": 1}, "replicas": None}}
    validate_custom_resource(mold, schema)
    with pytest.raises(ManifestError, match="baseModel"):
        validate_custom_resource({**mold, "spec": {}}, schema)
    with pytest.raises(LookupError, match="no CRD schema"):
        validate_custom_resource({"apiVersion": "example.com/v1", "kind": "Nope"})


def test_schemas_come_from_inside_the_repository() -> None:
    """A clone, a fork or a packaged source tree has nothing beside it: every folder the
    loader searches by default lies inside the repository, and the kinds the operator and
    the chart render are all found there."""
    root = REPO_ROOT.resolve()
    for folder in crd_dirs():
        assert folder.resolve().is_relative_to(root), folder
        assert folder.is_dir(), folder
    for group, version, kind in [("keda.sh", "v1alpha1", "ScaledObject"),
                                 ("monitoring.coreos.com", "v1", "ServiceMonitor"),
                                 ("monitoring.coreos.com", "v1", "PodMonitor"),
                                 ("monitoring.coreos.com", "v1", "PrometheusRule"),
                                 ("serving.kserve.io", "v1beta1", "InferenceService"),
                                 ("serving.kserve.io", "v1alpha1", "ServingRuntime"),
                                 ("serving.kserve.io", "v1alpha1", "LLMInferenceService")]:
        assert find_crd_schema(group, version, kind) is not None, kind


def test_schema_tests_pass_from_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    """The schema-reading tests run from a copy of the tracked tree placed in an empty
    folder (no sibling folders at all), importing the copy's packages, not this clone's."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    copy_root = tmp_path / "alone" / "mol-platform"
    for name in filter(None, listed):
        src = REPO_ROOT / name
        if src.is_file():
            dst = copy_root / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    assert sorted(p.name for p in (tmp_path / "alone").iterdir()) == ["mol-platform"]
    packages = ["platform", "catalog", "operator", "router", "testkit"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(copy_root / p) for p in packages)}
    env.pop("MOL_CRD_DIRS", None)
    probe = subprocess.run(
        [sys.executable, "-c", "import mol_testkit.kube_validate as k; print(k.__file__)"],
        cwd=copy_root, env=env, check=True, capture_output=True, text=True)
    assert probe.stdout.strip().startswith(str(copy_root)), probe.stdout
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/platform/test_infra_kube_validate.py", "tests/operator/test_builders.py",
         "-k", "not copy_with_nothing_beside_it"],
        cwd=copy_root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout, run.stdout[-2000:]
    assert "skipped" not in run.stdout, run.stdout[-2000:]
