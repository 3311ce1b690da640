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
from mol_testkit.pod_security import pod_spec_of, restricted_violations

ROOT = Path(__file__).resolve().parents[2]
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
    "cpu": {"nodePool": {"gpusPerReplica": 0}},
    "cpu-hf-weights": {"nodePool": {"gpusPerReplica": 0},
                       "baseModel": {"name": "tiny-llama", "uri": "hf://org/tiny"}},
    "semantic": {"router": {"mode": "semantic", "default": "chat", "semantic": {
        "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}},
    "semantic-kserve-hf": {"serving": {"mode": "kserve"}, "router": {
        "mode": "semantic-then-classifier", "classifier": {"expert": "router"},
        "default": "chat", "semantic": {
            "engine": {"uri": "hf://BAAI/bge-small-en-v1.5", "secretRef": "hf",
                       "cpu": "500m", "memory": "1Gi", "replicas": 2},
            "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}},
    "semantic-s3": {"router": {"mode": "semantic", "default": "chat", "semantic": {
        "engine": {"uri": "s3://models/minilm/", "secretRef": "s3-creds"},
        "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}},
}
# What the chart passes: a NetworkPolicy per deployment, monitors for kube-prometheus-stack.
CHART_DEFAULTS = Defaults(prometheus_url="http://prometheus:9090", network_policy=True,
                          operator_namespace="mol-system",
                          operator_pod_labels={"app.kubernetes.io/component": "operator"},
                          monitor_labels={"release": "kube-prometheus-stack"})


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_validates(variant: str) -> None:
    objects = build_all(_facts(_obj(**VARIANTS[variant]), defaults=CHART_DEFAULTS))
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
    assert c["args"][:2] == ["serve", "/models/demo/tiny-llama"]
    for flag in ("--enable-lora", "--enable-auto-tool-choice", "--tool-call-parser"):
        assert flag in c["args"]
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "2"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert c["resources"]["requests"] == {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "2"}
    assert c["image"] == "ghcr.io/mol-platform/vllm-mol:0.32.0"
    env = {e["name"]: e for e in c["env"]}
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]["value"] == "True"
    assert env["MOL_SERVING_PROFILE"]["value"] == "default.macaron"
    assert env["MOL_CATALOG_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "macaron-catalog", "key": "token"}
    assert pod["nodeSelector"] == {"pool": "l4"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert int(volumes["adapters"]["emptyDir"]["sizeLimit"]) > 20 * 1024**3
    assert pod["terminationGracePeriodSeconds"] > 30
    assert dep["spec"]["replicas"] == 2
    # A surge pod would wait for a spare GPU: replace one pod at a time instead.
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_pod_passes_pod_security_restricted(variant: str) -> None:
    pods = 0
    for obj in build_all(_facts(_obj(**VARIANTS[variant]), defaults=CHART_DEFAULTS)):
        pod = pod_spec_of(obj)
        if pod is None and obj["kind"] == "LLMInferenceService":
            pod = obj["spec"]["template"]
        if pod is None:
            continue
        pods += 1
        assert restricted_violations(pod) == [], obj["metadata"]["name"]
        for c in (*pod.get("initContainers", []), *pod["containers"]):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, c["name"]
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), c["name"]
            written = {m["mountPath"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in written, c["name"]
    assert pods == (3 if variant.startswith("semantic") else 2)


def test_a_cpu_engine_runs_the_cpu_build_and_surges() -> None:
    dep = _by_kind(build_all(_facts(_obj(**VARIANTS["cpu"]))))[("Deployment", "macaron-engine")]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in c["resources"]["requests"]
    assert "limits" not in c["resources"]
    assert c["args"][c["args"].index("--dtype") + 1] == "float32"
    assert {e["name"] for e in c["env"]} >= {"VLLM_CPU_KVCACHE_SPACE", "HOME"}
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    # The CPU build runs offline, except where the weights come from the Hub.
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in c["env"]
    hub = _by_kind(build_all(_facts(_obj(**VARIANTS["cpu-hf-weights"]))))
    env = hub[("Deployment", "macaron-engine")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "HF_HUB_OFFLINE" not in {e["name"] for e in env}
    assert {"name": "HF_HOME", "value": "/models"} in env


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
    assert router["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}
    assert router["template"]["spec"]["serviceAccountName"] == "macaron-router"
    secret = objects[("Secret", "macaron-catalog")]
    assert base64.b64decode(secret["data"]["token"]) == b"mol_secret"


def test_router_replicas_are_the_specs_and_resources_the_settings() -> None:
    obj = _obj(router={"mode": "explicit", "default": "chat", "replicas": 5})
    defaults = Defaults(router_cpu="100m", router_memory="128Mi", router_cpu_limit="1",
                        router_memory_limit="512Mi")
    router = _by_kind(build_all(_facts(obj, defaults=defaults)))[("Deployment", "macaron-router")]
    assert router["spec"]["replicas"] == 5
    assert router["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"}}


def test_service_monitors_carry_the_configured_labels() -> None:
    objects = build_all(_facts(_obj(), defaults=CHART_DEFAULTS))
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == 2
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert monitor["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "mol-operator"


def test_engines_admit_only_their_router_the_operator_and_prometheus() -> None:
    objects = _by_kind(build_all(_facts(_obj(), defaults=CHART_DEFAULTS)))
    policy = objects[("NetworkPolicy", "macaron-engine")]["spec"]
    engine = objects[("Deployment", "macaron-engine")]["spec"]["template"]["metadata"]
    router = objects[("Deployment", "macaron-router")]["spec"]["template"]["metadata"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["podSelector"]["matchLabels"].items() <= engine["labels"].items()
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    own_router, operator, prometheus = rule["from"]
    assert own_router == {"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "mol-router", "app.kubernetes.io/instance": "macaron"}}}
    assert own_router["podSelector"]["matchLabels"].items() <= router["labels"].items()
    assert operator == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mol-system"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}}}
    assert prometheus == {"namespaceSelector": {}, "podSelector": {
        "matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    # Off (the operator's own default outside the chart): none rendered.
    assert not [o for o in build_all(_facts(_obj())) if o["kind"] == "NetworkPolicy"]


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
    assert model["uri"] == "file:///models/demo/tiny-llama"
    assert model["lora"] == {"maxAdapters": 8, "maxRank": 32, "maxCpuAdapters": 64}
    env = {e["name"] for e in isvc["spec"]["template"]["containers"][0]["env"]}
    assert {"MOL_CATALOG_URL", "MOL_CATALOG_TOKEN", "MOL_SERVING_PROFILE"} <= env
    config = yaml.safe_load(objects[("ConfigMap", "macaron-router")]["data"]["router.yaml"])
    assert config["endpointSlice"]["serviceName"] == "macaron-kserve-workload-svc"
    main = isvc["spec"]["template"]["containers"][0]
    assert main["image"] == obj.spec.engine.image
    # The catalog's NetworkPolicy admits pods with this label, KServe's engines included.
    assert isvc["spec"]["labels"] == {"mol.dev/component": "engine"}
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_names_are_deterministic() -> None:
    first = build_all(_facts(_obj()))
    assert first == build_all(_facts(_obj()))
    assert {o["metadata"]["name"] for o in first} == {
        "macaron-catalog", "macaron-router", "macaron-engine"}


def test_monitors_name_their_job_and_label_vllm_metrics_with_the_deployment() -> None:
    objects = _by_kind(build_all(_facts(_obj())))
    engine = objects[("ServiceMonitor", "macaron-engine")]["spec"]["endpoints"][0]
    router = objects[("ServiceMonitor", "macaron-router")]["spec"]["endpoints"][0]
    # The alert rules' up/absent select on the job.
    assert router["relabelings"] == [{"targetLabel": "job", "replacement": "mol-router"}]
    # vLLM's own series carry no MoLDeployment; the dashboards filter on `deployment`.
    # (The router exports `deployment` itself: relabelling it would rename its label.)
    assert engine["relabelings"] == [
        {"targetLabel": "job", "replacement": "mol-engine"},
        {"sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_instance"],
         "targetLabel": "deployment"}]
    service = objects[("Service", "macaron-engine")]
    assert service["metadata"]["labels"]["app.kubernetes.io/instance"] == "macaron"


SEMANTIC = {"experts": [{"name": "coding", "examples": ["fix my bug"], "keywords": ["python"]}]}
SEMANTIC_ROUTER = {"mode": "semantic-then-classifier", "classifier": {"expert": "router"},
                   "default": "chat"}


def test_semantic_routing_uses_the_named_embeddings_server_and_renders_no_engine() -> None:
    obj = _obj(router={**SEMANTIC_ROUTER, "semantic": {
        **SEMANTIC, "embeddingsUrl": "http://embeddings.ml.svc:8000"}})
    config = router_config(_facts(obj))
    assert config.mode == "semantic-then-classifier"
    assert config.semantic is not None
    assert config.semantic.embeddings_url == "http://embeddings.ml.svc:8000"
    assert config.semantic.experts[0].keywords == ["python"]
    objects = build_all(_facts(obj, defaults=CHART_DEFAULTS))
    assert not [o for o in objects if o["metadata"]["name"] == "macaron-embedding"]


def test_a_catalog_head_and_its_canary_reach_the_router_config() -> None:
    obj = _obj(router={**SEMANTIC_ROUTER, "semantic": {
        "embeddingsUrl": "http://embeddings.ml.svc:8000", "head": "shop/router@stable",
        "canary": {"head": "shop/router@candidate", "weight": 10}}})
    objects = _by_kind(build_all(_facts(obj, defaults=CHART_DEFAULTS)))
    config = yaml.safe_load(objects[("ConfigMap", "macaron-router")]["data"]["router.yaml"])
    assert config["semantic"]["head"] == "shop/router@stable"
    assert config["semantic"]["canary"] == {"head": "shop/router@candidate", "weight": 10.0}
    assert config["semantic"]["experts"] == []  # the head decides, not examples
    assert config["catalogUrl"]


@pytest.mark.parametrize(("semantic", "folder", "served"), [
    ({}, "/models/embedding/all-minilm-l6-v2-l3", "all-minilm-l6-v2-l3"),  # the default
    ({"model": "all-minilm-l6-v2"}, "/models/embedding/all-minilm-l6-v2", "all-minilm-l6-v2"),
    ({"model": "bge-small", "engine": {"uri": "/models/bge"}}, "/models/bge", "bge-small"),
])
def test_the_embedding_engine_serves_the_image_folder_of_the_named_model(
        semantic: dict[str, Any], folder: str, served: str) -> None:
    """Unset, ``engine.uri`` is the CPU image's folder of the packaged model the router
    names, so the served name and the weights never disagree."""
    obj = _obj(router={**SEMANTIC_ROUTER, "semantic": {**SEMANTIC, **semantic}})
    objects = _by_kind(build_all(_facts(obj, defaults=CHART_DEFAULTS)))
    (c,) = objects[("Deployment", "macaron-embedding")]["spec"]["template"]["spec"][
        "containers"]
    assert c["args"][:2] == ["serve", folder]
    assert c["args"][c["args"].index("--served-model-name") + 1] == served


def test_semantic_routing_without_a_server_renders_the_embedding_engine() -> None:
    obj = _obj(router={**SEMANTIC_ROUTER, "semantic": {**SEMANTIC,
                                                        "model": "all-minilm-l6-v2"}})
    objects = _by_kind(build_all(_facts(obj, defaults=CHART_DEFAULTS)))
    config = yaml.safe_load(objects[("ConfigMap", "macaron-router")]["data"]["router.yaml"])
    service = objects[("Service", "macaron-embedding")]
    (port,) = service["spec"]["ports"]
    assert config["semantic"]["embeddingsUrl"] == (
        f"http://macaron-embedding.default.svc:{port['port']}")
    assert config["semantic"]["model"] == "all-minilm-l6-v2"
    dep = objects[("Deployment", "macaron-embedding")]
    assert service["spec"]["selector"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items())
    assert dep["spec"]["replicas"] == 1
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "ghcr.io/mol-platform/vllm-mol-cpu:0.32.0"
    args = c["args"]
    assert args[:2] == ["serve", "/models/embedding/all-minilm-l6-v2"]
    assert args[args.index("--runner") + 1] == "pooling"
    assert args[args.index("--served-model-name") + 1] == "all-minilm-l6-v2"
    assert args[args.index("--port") + 1] == str(port["port"])
    assert "--enable-lora" not in args
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_PLUGINS"] == ""
    assert "MOL_CATALOG_TOKEN" not in env  # no catalog access
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"},
                              "limits": {"memory": "2Gi"}}
    assert pod["automountServiceAccountToken"] is False
    # Only the deployment's router (and Prometheus) may call it.
    policy = objects[("NetworkPolicy", "macaron-embedding")]["spec"]
    assert policy["podSelector"]["matchLabels"] == service["spec"]["selector"]
    own_router, prometheus = policy["ingress"][0]["from"]
    assert own_router["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "mol-router"
    assert prometheus["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


def test_embedding_engine_settings_and_weights() -> None:
    objects = _by_kind(build_all(_facts(_obj(**VARIANTS["semantic-kserve-hf"]))))
    # KServe serves the LLM; the embedding engine is the same CPU Deployment.
    assert ("LLMInferenceService", "macaron") in objects
    config = yaml.safe_load(objects[("ConfigMap", "macaron-router")]["data"]["router.yaml"])
    assert config["semantic"]["embeddingsUrl"].startswith("http://macaron-embedding.")
    dep = objects[("Deployment", "macaron-embedding")]
    assert dep["spec"]["replicas"] == 2
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][1] == "BAAI/bge-small-en-v1.5"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert "HF_HUB_OFFLINE" not in env  # hf:// weights download
    assert c["envFrom"] == [{"secretRef": {"name": "hf"}}]
    assert c["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    s3 = _by_kind(build_all(_facts(_obj(**VARIANTS["semantic-s3"]))))
    pod = s3[("Deployment", "macaron-embedding")]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert "s3://models/minilm/" in init["command"]


def test_embedding_engine_goes_when_semantic_routing_goes() -> None:
    from mol_operator.builders import managed_objects
    from mol_operator.planner import Key, plan
    semantic = build_all(_facts(_obj(**VARIANTS["semantic"])))
    observed: dict[Key, Any] = {Key.of(o): o for o in semantic}
    explicit = build_all(_facts(_obj()))
    for kind, name in managed_objects(_facts(_obj()).names):
        observed.setdefault(Key(kind.api_version, kind.kind, name), None)
    deletes = {str(a.key) for a in plan(explicit, observed, owner_uid="0f4e2c1a-uid").actions
               if a.verb == "delete"}
    assert deletes == {"Deployment macaron-embedding", "Service macaron-embedding"}


@pytest.mark.parametrize(("semantic", "message"), [
    ({"embeddingsUrl": "http://e:8000", "engine": {}}, "not both"),
    ({"engine": {"cpu": "lots"}}, "Kubernetes quantity"),
    ({"engine": {"replicas": 0}}, "greater than or equal to 1"),
    ({"engine": {"uri": "pvc:///x"}}, r"semantic\.engine\.uri\n.*pvc://<claim>"),
])
def test_bad_embedding_engine_specs_are_refused(semantic: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _obj(router={"mode": "semantic", "default": "chat",
                     "semantic": {**SEMANTIC, **semantic}})
