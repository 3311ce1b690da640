"""Builders: every rendered manifest is valid (built-ins with kubernetes-validate --strict,
custom resources against their CRD schemas) and carries the fields the spec asks for."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from mol_operator.builders import BuildError, Defaults, Facts, build_all, router_config
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.kube_validate import validate_builtin, validate_custom_resource

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT.parent / "shared" / "schemas" / "crds"
CUSTOM = {"ScaledObject", "ServiceMonitor", "LLMInferenceService"}


def _obj(**spec: Any) -> MoLDeployment:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["spec"].update(spec)
    return MoLDeployment.model_validate(data)


def _facts(obj: MoLDeployment, **kw: Any) -> Facts:
    values: dict[str, Any] = {"obj": obj, "uid": "0f4e2c1a-uid", "token": "mol_secret",
                              "token_id": 7, "token_scopes": ("read:acme", "read:demo"),
                              "defaults": Defaults(prometheus_url="http://prometheus:9090")}
    values.update(kw)
    return Facts(**values)


def _by_kind(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


VARIANTS: dict[str, dict[str, Any]] = {
    "raw": {},
    "autoscaled-from-zero": {"replicas": None,
                             "autoscaling": {"minReplicas": 0, "maxReplicas": 4}},
    "kserve": {"serving": {"mode": "kserve"}},
    "s3-weights": {"baseModel": {"name": "tiny-llama", "uri": "s3://models/tiny/",
                                 "secretRef": "s3-creds"}},
    "pvc-weights": {"baseModel": {"name": "tiny-llama", "uri": "pvc://weights/tiny"}},
    "hf-weights": {"baseModel": {"name": "tiny-llama", "uri": "hf://org/tiny",
                                 "secretRef": "hf"}},
    "api-keys": {"router": {"mode": "explicit", "default": "chat",
                            "apiKeys": {"secretRef": "keys"}}},
}


def test_crd_schemas_are_there() -> None:
    assert (SCHEMAS / "serving.kserve.io_llminferenceservices.yaml").exists()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_validates(variant: str) -> None:
    objects = build_all(_facts(_obj(**VARIANTS[variant])))
    kinds = {o["kind"] for o in objects}
    assert "Secret" in kinds
    for manifest in objects:
        if manifest["kind"] in CUSTOM:
            validate_custom_resource(manifest)
        else:
            validate_builtin(manifest)
        meta = manifest["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "mol-operator"
        assert meta["ownerReferences"][0]["uid"] == "0f4e2c1a-uid"
        assert meta["ownerReferences"][0]["controller"] is True


def test_raw_engine_deployment() -> None:
    objects = _by_kind(build_all(_facts(_obj(nodePool={
        "gpusPerReplica": 2, "nodeSelector": {"pool": "l4"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
        engine={"tensorParallelSize": 2, "maxLoraRank": 16}))))
    dep = objects[("Deployment", "macaron-engine")]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["vllm"]
    assert c["args"][:2] == ["serve", "/models/tiny-llama"]
    for flag in ("--enable-lora", "--enable-auto-tool-choice", "--tool-call-parser"):
        assert flag in c["args"]
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "2"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    env = {e["name"]: e for e in c["env"]}
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]["value"] == "True"
    assert env["MOL_SERVING_PROFILE"]["value"] == "default.macaron"
    assert env["MOL_CATALOG_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "macaron-catalog", "key": "token"}
    assert pod["nodeSelector"] == {"pool": "l4"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert pod["terminationGracePeriodSeconds"] > 30
    assert dep["spec"]["replicas"] == 2


def test_no_handoff_no_tool_flags() -> None:
    obj = _obj(router={"mode": "explicit", "default": "chat"})
    dep = _by_kind(build_all(_facts(obj)))[("Deployment", "macaron-engine")]
    assert "--enable-auto-tool-choice" not in dep["spec"]["template"]["spec"]["containers"][0][
        "args"]


def test_autoscaling_leaves_replicas_to_keda() -> None:
    obj = _obj(replicas=None, autoscaling={"minReplicas": 0, "maxReplicas": 4, "target": 3})
    objects = _by_kind(build_all(_facts(obj)))
    assert "replicas" not in objects[("Deployment", "macaron-engine")]["spec"]
    so = objects[("ScaledObject", "macaron-engine")]["spec"]
    assert so["minReplicaCount"] == 0
    assert so["maxReplicaCount"] == 4
    assert so["scaleTargetRef"]["name"] == "macaron-engine"
    engine, pending = so["triggers"]
    assert engine["metadata"]["query"].startswith("sum(vllm:num_requests_waiting{")
    assert engine["metadata"]["threshold"] == "3"
    assert "mol_router_pending_requests" in pending["metadata"]["query"]


def test_autoscaling_without_prometheus_is_refused() -> None:
    obj = _obj(replicas=None, autoscaling={"maxReplicas": 4})
    with pytest.raises(BuildError, match="--prometheus-url"):
        build_all(_facts(obj, defaults=Defaults()))


@pytest.mark.parametrize(("uri", "model", "init"), [
    ("pvc://weights/models/tiny", "/models/models/tiny", False),
    ("s3://bucket/tiny/", "/models", True),
    ("hf://org/tiny", "org/tiny", False),
    ("file:///opt/models/tiny", "/opt/models/tiny", False),
    ("/opt/models/tiny", "/opt/models/tiny", False),
])
def test_base_weights(uri: str, model: str, init: bool) -> None:
    obj = _obj(baseModel={"name": "tiny-llama", "uri": uri, "secretRef": "creds"})
    dep = _by_kind(build_all(_facts(obj)))[("Deployment", "macaron-engine")]
    pod = dep["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"][1] == model
    assert bool(pod.get("initContainers")) is init
    if init:
        assert pod["initContainers"][0]["envFrom"] == [{"secretRef": {"name": "creds"}}]


@pytest.mark.parametrize("uri", ["pvc:///no-claim", "s3:///no-bucket", "gs://bucket/x"])
def test_bad_weight_uris_say_what_to_write(uri: str) -> None:
    """Refused by the spec (and the CRD) before anything is built."""
    with pytest.raises(ValidationError, match=r"baseModel\.uri: use s3://<bucket>/<prefix>"):
        _obj(baseModel={"name": "tiny-llama", "uri": uri})


def test_router_objects_and_config() -> None:
    facts = _facts(_obj(), canary_weights={"coding": 25.0})
    objects = _by_kind(build_all(facts))
    role = objects[("Role", "macaron-router")]
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["get", "list", "watch"]}]
    binding = objects[("RoleBinding", "macaron-router")]
    assert binding["subjects"][0]["name"] == "macaron-router"
    config = yaml.safe_load(objects[("ConfigMap", "macaron-router")]["data"]["router.yaml"])
    assert config == router_config(facts).model_dump(by_alias=True, exclude_none=True,
                                                     mode="json")
    coding = next(e for e in config["experts"] if e["name"] == "coding")
    assert coding["canary"] == {"adapter": "demo/coding@candidate", "weight": 25.0}
    router = objects[("Deployment", "macaron-router")]["spec"]
    assert router["replicas"] == 2
    assert router["template"]["spec"]["serviceAccountName"] == "macaron-router"
    secret = objects[("Secret", "macaron-catalog")]
    assert base64.b64decode(secret["data"]["token"]) == b"mol_secret"


def test_api_keys_secret_is_mounted_where_the_config_points() -> None:
    obj = _obj(router={"mode": "explicit", "default": "chat", "apiKeys": {"secretRef": "keys"}})
    objects = _by_kind(build_all(_facts(obj)))
    config = yaml.safe_load(objects[("ConfigMap", "macaron-router")]["data"]["router.yaml"])
    pod = objects[("Deployment", "macaron-router")]["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "api-keys")
    assert config["apiKeysFile"].startswith(mount["mountPath"] + "/")
    assert {"name": "api-keys", "secret": {"secretName": "keys"}} in pod["volumes"]


def test_pinned_promotion_is_rendered_as_the_stable_adapter() -> None:
    facts = _facts(_obj(), stable_overrides={"coding": "demo/coding@v2"})
    config = router_config(facts)
    coding = config.expert("coding")
    assert coding is not None
    assert coding.adapter == "demo/coding@v2"


def test_kserve_mode() -> None:
    obj = _obj(serving={"mode": "kserve"},
               engine={"maxLoras": 8, "maxLoraRank": 32, "maxCpuLoras": 64})
    objects = _by_kind(build_all(_facts(obj)))
    assert ("Deployment", "macaron-engine") not in objects
    isvc = objects[("LLMInferenceService", "macaron")]
    assert isvc["apiVersion"] == "serving.kserve.io/v1alpha2"
    model = isvc["spec"]["model"]
    assert model["uri"] == "file:///models/tiny-llama"
    assert model["lora"] == {"maxAdapters": 8, "maxRank": 32, "maxCpuAdapters": 64}
    env = {e["name"] for e in isvc["spec"]["template"]["containers"][0]["env"]}
    assert {"MOL_CATALOG_URL", "MOL_CATALOG_TOKEN", "MOL_SERVING_PROFILE"} <= env
    config = yaml.safe_load(objects[("ConfigMap", "macaron-router")]["data"]["router.yaml"])
    assert config["endpointSlice"]["serviceName"] == "macaron-kserve-workload-svc"


def test_names_are_deterministic() -> None:
    first = build_all(_facts(_obj()))
    assert first == build_all(_facts(_obj()))
    assert {o["metadata"]["name"] for o in first} == {
        "macaron-catalog", "macaron-router", "macaron-engine"}
