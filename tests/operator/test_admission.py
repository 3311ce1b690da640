"""MoLDeployments decided at ``kubectl apply`` by the CRD alone (schema + CEL, through the
admission harness that stands for the API server), and the operator's own check agreeing."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mol_operator.crd import crd_manifest
from mol_operator.reconcile import Invalid, parse
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.admission import Admission, AdmissionError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
ADMISSION = Admission(crd_manifest())
_DELETE = object()


def _base(name: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "baseModel": {"name": "qwen3-8b", "uri": "s3://models/qwen3-8b/"},
            "replicas": 2,
            "experts": [{"name": "chat", "adapter": "acme/chat@stable"},
                        {"name": "coding", "adapter": "acme/coding@v3",
                         "canary": {"adapter": "acme/coding@candidate"}}],
            "router": {"mode": "auto", "classifier": {"expert": "chat"}, "default": "chat"},
        },
    }


def _with(changes: dict[str, Any], name: str = "shop") -> dict[str, Any]:
    """The base object with ``a.b.0.c``-style paths set (or deleted with _DELETE)."""
    obj = _base(name)
    for dotted, value in changes.items():
        node: Any = obj
        *path, last = dotted.split(".")
        for key in path:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return obj


VALID: dict[str, dict[str, Any]] = {
    "base": _base(),
    "name-of-63": _base("a" + "-long-name" * 6 + "x" * 2),
    "autoscaled-from-zero": _with({"spec.replicas": _DELETE, "spec.autoscaling": {
        "minReplicas": 0, "maxReplicas": 8, "metric": "vllm:num_requests_running"}}),
    "kserve-explicit": _with({"spec.serving": {"mode": "kserve"},
                              "spec.router": {"mode": "explicit", "default": "coding"}}),
    "pinned-refs": _with({"spec.experts.0.adapter": "acme.prod/chat-v2@sha256:" + "ab" * 32,
                          "spec.experts.1.adapter": "acme/coding@v2147483647",
                          "spec.baseModel.revision": "3f2a9c1.main"}),
    "canary-to-20-percent": _with({"spec.experts.1.canary": {
        "adapter": "acme/coding@v4", "steps": [5, 20], "interval": "90s",
        "analysis": {"maxErrorRate": 0.0, "maxLatencyRatio": 3}}}),
    "cpu-engine": _with({"spec.nodePool": {"gpusPerReplica": 0},
                         "spec.engine": {"maxCpuLoras": None, "extraArgs": ["--dtype=float32"]}}),
    "gpu-pool": _with({"spec.nodePool": {
        "gpusPerReplica": 4, "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"}]},
        "spec.engine": {"tensorParallelSize": 4, "maxLoras": 8, "maxLoraRank": 128}}),
    "weights-in-a-claim": _with({"spec.baseModel.uri": "pvc://weights/qwen3-8b"}),
    "multi-tenant-keys": _with({"spec.adapterNamespaces": ["acme", "globex", "initech.eu"],
                                "spec.router": {"mode": "explicit", "apiKeys": {
                                    "secretRef": "shop-api-keys"}},
                                "spec.baseModel.secretRef": "s3-credentials"}),
    "handoff": _with({"spec.router.handoff": {"enabled": True, "maxHops": 8},
                      "spec.experts.0.description": "small talk " * 50}),
    "semantic-operator-engine": _with({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "model": "bge-small-en-v1.5",
            "engine": {"uri": "hf://BAAI/bge-small-en-v1.5", "cpu": "500m", "memory": "1.5Gi"},
            "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}}),
    "semantic-full-minilm-from-the-image": _with({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "model": "all-minilm-l6-v2",
            "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}}),
    "semantic-own-model-on-own-server": _with({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "model": "bge-small-en-v1.5", "embeddingsUrl": "http://embeddings.ml.svc:8000",
            "head": "shop/router@stable"}}}),
    "semantic-own-server": _with({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "embeddingsUrl": "http://embeddings.ml.svc:8000",
            "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}}),
    "semantic-catalog-head-on-canary": _with({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "head": "shop/router@stable",
            "canary": {"head": "shop/router@candidate", "weight": 10}}}}),
    "explicit-null-optional": _with({"spec.router.default": None, "spec.autoscaling": None}),
    **{f"example-{p.stem}": yaml.safe_load(p.read_text()) for p in EXAMPLES},
}

# (changes, the field the API server names, words of the operator's own refusal)
INVALID: dict[str, tuple[dict[str, Any], str, str]] = {
    "replicas-and-autoscaling": ({"spec.autoscaling": {"maxReplicas": 3}},
                                 "spec.autoscaling", "spec.replicas or spec.autoscaling"),
    "duplicate-expert": ({"spec.experts.1.name": "chat"}, "spec.experts[1]",
                         "expert names must be unique"),
    "default-names-no-expert": ({"spec.router.default": "nobody"}, "spec.router.default",
                                "spec.router.default must name one"),
    "classifier-names-no-expert": ({"spec.router.classifier.expert": "nobody"},
                                   "spec.router.classifier.expert",
                                   "spec.router.classifier.expert must name one"),
    "steps-not-increasing": ({"spec.experts.1.canary.steps": [10, 50, 25]},
                             "spec.experts[1].canary.steps", "strictly increasing"),
    "step-over-100": ({"spec.experts.1.canary.steps": [50, 150]},
                      "spec.experts[1].canary.steps[1]", "less than or equal to 100"),
    "ref-without-namespace": ({"spec.experts.0.adapter": "chat@stable"},
                              "spec.experts[0].adapter", "invalid adapter reference"),
    "ref-upper-case": ({"spec.experts.0.adapter": "Acme/chat@stable"},
                       "spec.experts[0].adapter", "invalid adapter reference"),
    "ref-with-space": ({"spec.experts.1.canary.adapter": "acme/my coding@stable"},
                       "spec.experts[1].canary.adapter", "invalid adapter reference"),
    "ref-with-dots": ({"spec.experts.0.adapter": "a..b/chat@stable"},
                      "spec.experts[0].adapter", "invalid adapter reference"),
    "ref-version-zero": ({"spec.experts.0.adapter": "acme/chat@v0"},
                         "spec.experts[0].adapter", "invalid adapter reference"),
    "expert-name-not-dns": ({"spec.experts.0.name": "Chat_Bot",
                             "spec.router": {"mode": "explicit"}},
                            "spec.experts[0].name", "must be a DNS label"),
    "auto-without-classifier": ({"spec.router.classifier": _DELETE}, "spec.router.classifier",
                                "(or auto) needs spec.router.classifier.expert"),
    "gpus-below-tensor-parallel": ({"spec.engine": {"tensorParallelSize": 2}},
                                   "spec.nodePool.gpusPerReplica", "gpusPerReplica must be >="),
    "cpu-loras-below-loras": ({"spec.engine": {"maxLoras": 64}}, "spec.engine.maxCpuLoras",
                              "maxCpuLoras must be >="),
    "autoscaling-min-over-max": ({"spec.replicas": _DELETE, "spec.autoscaling": {
        "minReplicas": 5, "maxReplicas": 2}}, "spec.autoscaling.minReplicas",
        "minReplicas must be <="),
    "unknown-field": ({"spec.engine": {"maxLora": 4}}, "spec.engine", "maxLora"),
    "rank-not-served": ({"spec.engine": {"maxLoraRank": 48}}, "spec.engine.maxLoraRank",
                        "maxLoraRank 48 is not supported"),
    "duplicate-namespace": ({"spec.adapterNamespaces": ["acme", "acme"]},
                            "spec.adapterNamespaces[1]", "adapterNamespaces must be unique"),
    "interval-two-units": ({"spec.experts.1.canary.interval": "1h30m"},
                           "spec.experts[1].canary.interval", "canary.interval"),
    "metric-with-selector": ({"spec.replicas": _DELETE, "spec.autoscaling": {
        "maxReplicas": 2, "metric": 'up{job="x"}'}}, "spec.autoscaling.metric",
        "autoscaling.metric"),
    "secret-not-a-name": ({"spec.baseModel.secretRef": "S3 creds"},
                          "spec.baseModel.secretRef", "object name"),
    "no-experts": ({"spec.experts": [], "spec.router": {}}, "spec.experts", "at least 1 item"),
    "blank-uri": ({"spec.baseModel.uri": "   "}, "spec.baseModel.uri",
                  "baseModel.uri '   ' must be"),
    "weights-scheme": ({"spec.baseModel.uri": "gs://bucket/qwen"}, "spec.baseModel.uri",
                       "baseModel.uri: use s3://"),
    "weights-bucketless": ({"spec.baseModel.uri": "s3:///qwen"}, "spec.baseModel.uri",
                           "baseModel.uri: use s3://"),
    "serving-mode": ({"spec.serving": {"mode": "docker"}}, "spec.serving.mode", "'raw'"),
    "name-of-64": ({"metadata.name": "a" * 64}, "metadata.name", "DNS-1035 label"),
    "name-starts-with-digit": ({"metadata.name": "9lives"}, "metadata.name",
                               "DNS-1035 label"),
    "embedding-server-and-engine": ({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "embeddingsUrl": "http://embeddings.ml.svc:8000", "engine": {},
            "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}},
        "spec.router.semantic.engine", "not both"),
    "embedding-cpu-not-a-quantity": ({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "engine": {"cpu": "two cores"},
            "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}},
        "spec.router.semantic.engine.cpu", "Kubernetes quantity"),
    "semantic-without-examples-or-head": ({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {"model": "all-minilm-l6-v2"}}},
        "spec.router.semantic.experts", "experts (example utterances) or head"),
    "semantic-model-the-image-lacks-without-weights": ({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "model": "bge-small-en-v1.5", "engine": {"cpu": "500m"},
            "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}},
        "spec.router.semantic.model", "not a packaged embedding model"),
    "head-canary-without-head": ({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "experts": [{"name": "coding", "examples": ["fix my bug"]}],
            "canary": {"head": "shop/router@candidate"}}}},
        "spec.router.semantic.head", "trials a head against"),
    "head-canary-weight-over-100": ({"spec.router": {
        "mode": "semantic", "default": "chat", "semantic": {
            "head": "shop/router@stable",
            "canary": {"head": "shop/router@candidate", "weight": 101}}}},
        "spec.router.semantic.canary.weight", "less than or equal to 100"),
    "too-many-steps": ({"spec.experts.1.canary.steps": list(range(1, 22))},
                       "spec.experts[1].canary.steps", "at most 20 items"),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_specs_are_admitted_and_parse_alike(name: str) -> None:
    obj = VALID[name]
    stored = ADMISSION.admit(obj)
    # the API server's defaults are the model's: what is stored parses to the same spec
    assert parse(stored) == parse(obj)


def test_the_valid_table_has_a_name_of_63() -> None:
    assert max(len(o["metadata"]["name"]) for o in VALID.values()) == 63
    assert len(VALID) >= 10


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_specs_are_refused_naming_the_field(name: str) -> None:
    changes, field, words = INVALID[name]
    obj = _with(changes)
    with pytest.raises(AdmissionError) as refused:
        ADMISSION.admit(obj)
    assert any(e.startswith(f"{field}:") or (field == "metadata.name" and field in e)
               for e in refused.value.errors), refused.value.errors
    with pytest.raises(Invalid) as own:
        parse(obj)
    assert words in own.value.message


def test_the_invalid_table_covers_every_kind_the_issue_lists() -> None:
    assert len(INVALID) >= 17


def test_a_stored_object_stays_updatable_when_a_rule_is_new() -> None:
    """Ratcheting: an old object with a name the new rule refuses keeps its updates
    (its finalizer can be removed), while a new one with that name is refused."""
    old = _with({"metadata.name": "9lives"})
    with pytest.raises(AdmissionError):
        ADMISSION.admit(old)
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    new["spec"]["replicas"] = 3
    assert ADMISSION.admit(new, old=old)["spec"]["replicas"] == 3


def _bounded_below(node: Any) -> Iterator[str]:
    """Every unbounded list, string or map below a schema node (what makes CEL cost
    estimates explode)."""
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind == "array" and "maxItems" not in node:
        yield "array"
    if kind == "string" and "maxLength" not in node and "enum" not in node:
        yield "string"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict) and (
            "maxProperties" not in node):
        yield "map"
    for key in ("properties",):
        for sub in (node.get(key) or {}).values():
            yield from _bounded_below(sub)
    for key in ("items", "additionalProperties"):
        yield from _bounded_below(node.get(key))


def test_every_list_and_string_of_the_spec_is_bounded() -> None:
    spec = ADMISSION.schema["properties"]["spec"]
    assert list(_bounded_below(spec)) == []


def test_every_spec_field_has_a_description() -> None:
    def missing(node: dict[str, Any], path: str) -> Iterator[str]:
        for name, sub in (node.get("properties") or {}).items():
            if not sub.get("description"):
                yield f"{path}.{name}"
            yield from missing(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield from missing(node["items"], f"{path}[]")
    schema = ADMISSION.schema
    assert list(missing(schema, "")) == []


def test_examples_parse_to_the_same_objects_as_before_admission() -> None:
    for path in EXAMPLES:
        obj = yaml.safe_load(path.read_text())
        assert MoLDeployment.model_validate(ADMISSION.admit(obj)) == MoLDeployment.model_validate(
            obj)
