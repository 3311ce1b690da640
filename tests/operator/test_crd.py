"""The generated CRD: committed copy up to date, structural, examples valid against it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mol_operator.crd import CRD_FILE, crd_manifest, crd_yaml
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.kube_validate import custom_resource_errors, validate_builtin

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_is_current() -> None:
    committed = (ROOT / CRD_FILE).read_text()
    assert committed == crd_yaml(), (
        f"{CRD_FILE} is stale: regenerate it with `mol operator crd > {CRD_FILE}`")


def test_crd_is_a_valid_builtin_manifest() -> None:
    validate_builtin(yaml.safe_load(crd_yaml()))


def test_crd_names_columns_and_status() -> None:
    spec = crd_manifest()["spec"]
    assert spec["names"]["shortNames"] == ["mold"]
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Ready", "Reason", "Replicas", "Experts", "Canary", "URL", "Age"]


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_schema_is_structural() -> None:
    for node in _walk(_schema()):
        assert "$ref" not in node
        assert "anyOf" not in node
        assert "title" not in node
        if "properties" in node:
            assert node.get("type") == "object"


def test_schema_carries_enums_minimums_required_defaults() -> None:
    spec = _schema()["properties"]["spec"]
    assert set(spec["required"]) == {"baseModel", "experts"}
    engine = spec["properties"]["engine"]["properties"]
    assert 64 in engine["maxLoraRank"]["enum"]
    assert engine["maxLoras"]["minimum"] == 1
    assert engine["maxLoras"]["default"] == 4
    assert spec["properties"]["serving"]["properties"]["mode"]["enum"] == ["raw", "kserve"]
    assert spec["properties"]["router"]["properties"]["mode"]["enum"] == [
        "explicit", "classifier", "semantic", "semantic-then-classifier", "auto"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_validate_against_crd_and_model(path: Path) -> None:
    manifest = yaml.safe_load(path.read_text())
    assert custom_resource_errors(manifest, _schema()) == []
    MoLDeployment.model_validate(manifest)


def test_there_is_a_multi_tenant_example_with_100_adapters() -> None:
    obj = MoLDeployment.from_yaml((ROOT / "deploy/examples/multi-tenant.yaml").read_text())
    assert len(obj.spec.experts) == 100
    assert len(obj.spec.adapter_namespaces) == 5


@pytest.mark.parametrize(("path", "value", "where"), [
    (("engine", "maxLoraRank"), 48, "maxLoraRank"),
    (("engine", "maxLoras"), 0, "maxLoras"),
    (("serving", "mode"), "docker", "mode"),
    (("replicas",), -1, "replicas"),
    (("engine", "surprise"), 1, "surprise"),
])
def test_schema_rejects_what_it_can(path: tuple[str, ...], value: Any, where: str) -> None:
    manifest = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    node = manifest["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = custom_resource_errors(copy.deepcopy(manifest), _schema())
    assert errors
    assert any(where in e for e in errors), errors
