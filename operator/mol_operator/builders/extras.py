"""ServiceMonitors, the engines' NetworkPolicies, the catalog-token Secret and KServe's
LLMInferenceService."""

from __future__ import annotations

from typing import Any

import kserve
from kserve.models import V1alpha2LLMInferenceService
from kubernetes.client import (
    V1LabelSelector,
    V1NetworkPolicy,
    V1NetworkPolicyIngressRule,
    V1NetworkPolicyPeer,
    V1NetworkPolicyPort,
    V1NetworkPolicySpec,
    V1Secret,
)

from mol_operator.builders.common import (
    COMPONENT_LABEL,
    TOKEN_ID_ANNOTATION,
    TOKEN_KEY,
    TOKEN_SCOPES_ANNOTATION,
    Facts,
    b64,
    meta,
    pod_security,
    selector,
    serialize,
)
from mol_operator.builders.engine import (
    base_weights,
    engine_container,
    engine_grace_seconds,
    scratch_mounts,
    scratch_volumes,
)
from mol_platform.contract.engine_args import ENGINE_DRAIN_SECONDS, HANDOFF_TOOL_CALL_PARSER

KSERVE_API_VERSION = "serving.kserve.io/v1alpha2"


def service_monitor(facts: Facts, component: str) -> dict[str, Any]:
    """A prometheus-operator ServiceMonitor scraping the component's Service.

    The job is named ``mol-<component>`` (the alert rules' ``up``/``absent`` select on
    it). vLLM's metrics carry no MoLDeployment, so the engine monitor adds
    ``deployment`` from the Service's instance label (the dashboards' ``$deployment``
    filters on it); the router exports its own."""
    name = facts.names.engine if component == "engine" else facts.names.router
    relabel: list[dict[str, Any]] = [{"targetLabel": "job", "replacement": f"mol-{component}"}]
    if component == "engine":
        relabel.append({
            "sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_instance"],
            "targetLabel": "deployment"})
    endpoint = {"port": "http", "path": "/metrics", "interval": "15s", "relabelings": relabel}

    metadata: dict[str, Any] = serialize(meta(facts, name, component))
    # The Prometheus' own selector labels (e.g. release: <kube-prometheus-stack>) first:
    # ours win, so a setting can never take a monitor away from the operator.
    metadata["labels"] = {**facts.defaults.monitor_labels, **metadata["labels"]}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": selector(facts, component)},
            "namespaceSelector": {"matchNames": [facts.namespace]},
            "endpoints": [endpoint],
        },
    }


def network_policy(facts: Facts, component: str) -> dict[str, Any]:
    """Engines admit their own router, the operator's pods (adapter warm-up) and
    Prometheus (``/metrics``), on the engine port only: vLLM's runtime LoRA-load API
    is not open to the cluster. The embedding engine admits its router and Prometheus."""
    d = facts.defaults
    peers = [
        V1NetworkPolicyPeer(pod_selector=V1LabelSelector(match_labels=selector(facts, "router"))),
        *([V1NetworkPolicyPeer(
            namespace_selector=V1LabelSelector(
                match_labels={"kubernetes.io/metadata.name": d.operator_namespace}),
            pod_selector=V1LabelSelector(match_labels=dict(d.operator_pod_labels)))]
          if component == "engine" else []),
        V1NetworkPolicyPeer(namespace_selector=V1LabelSelector(),
                            pod_selector=V1LabelSelector(
                                match_labels=dict(d.prometheus_pod_labels))),
    ]
    name = facts.names.engine if component == "engine" else facts.names.embedding
    obj = V1NetworkPolicy(
        api_version="networking.k8s.io/v1", kind="NetworkPolicy",
        metadata=meta(facts, name, component),
        spec=V1NetworkPolicySpec(
            pod_selector=V1LabelSelector(match_labels=selector(facts, component)),
            policy_types=["Ingress"],
            # By its API name: the client's Python name (var_from) is dropped on output.
            ingress=[V1NetworkPolicyIngressRule.model_validate(
                {"from": peers, "ports": [V1NetworkPolicyPort(port="http", protocol="TCP")]})],
        ),
    )
    out: dict[str, Any] = serialize(obj)
    return out


def catalog_secret(facts: Facts) -> dict[str, Any]:
    """The read token for the engines' plugin and the router (``token`` key)."""
    annotations = {TOKEN_ID_ANNOTATION: str(facts.token_id),
                   TOKEN_SCOPES_ANNOTATION: ",".join(facts.token_scopes)}
    obj = V1Secret(
        api_version="v1", kind="Secret", type="Opaque",
        metadata=meta(facts, facts.names.catalog_secret, "catalog-token", annotations),
        data={TOKEN_KEY: b64(facts.token)},
    )
    out: dict[str, Any] = serialize(obj)
    return out


def llm_inference_service(facts: Facts) -> dict[str, Any]:
    """KServe's LLM path: the model, LoRA limits and our plugin's env on vLLM."""
    spec = facts.obj.spec
    eng = spec.engine
    weights = base_weights(facts)
    container = serialize(engine_container(facts, weights))
    # KServe renders vLLM's command itself; we contribute the LoRA flags and plugin env.
    main: dict[str, Any] = {"name": "main", "image": eng.image, "env": container["env"],
                            "resources": container["resources"],
                            "securityContext": container["securityContext"],
                            "volumeMounts": serialize(scratch_mounts())}
    # vLLM's default --shutdown-timeout (0) would abort every stream of a rolled pod;
    # a user's extraArgs come last and win, as in the raw engine's command.
    args = ["--shutdown-timeout", str(ENGINE_DRAIN_SECONDS), *eng.extra_args]
    if spec.router.handoff.enabled:
        args = ["--enable-auto-tool-choice", "--tool-call-parser", HANDOFF_TOOL_CALL_PARSER,
                *args]
    main["args"] = args
    if "lifecycle" in container:
        main["lifecycle"] = container["lifecycle"]
    lora: dict[str, Any] = {"maxAdapters": eng.max_loras, "maxRank": eng.max_lora_rank}
    if eng.max_cpu_loras is not None:
        lora["maxCpuAdapters"] = eng.max_cpu_loras
    body: dict[str, Any] = {
        "model": {"uri": spec.base_model.uri, "name": spec.base_model.name, "lora": lora},
        # KServe's workload pods carry these: the catalog's NetworkPolicy admits them.
        "labels": {COMPONENT_LABEL: "engine"},
        "template": {"containers": [main], "volumes": serialize(scratch_volumes()),
                     "securityContext": serialize(pod_security()),
                     "terminationGracePeriodSeconds": engine_grace_seconds(facts, args)},
    }
    if spec.autoscaling is None:
        body["replicas"] = spec.effective_replicas
    if eng.tensor_parallel_size > 1:
        body["parallelism"] = {"tensor": eng.tensor_parallel_size}
    pool = spec.node_pool
    if pool.node_selector:
        body["template"]["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        body["template"]["tolerations"] = [t.model_dump(exclude_none=True)
                                           for t in pool.tolerations]
    obj = V1alpha2LLMInferenceService(
        api_version=KSERVE_API_VERSION, kind="LLMInferenceService",
        metadata=meta(facts, facts.names.kserve, "engine"), spec=body,
    )
    # KServe's generated models serialize with KServe's own ApiClient.
    out: dict[str, Any] = kserve.ApiClient().sanitize_for_serialization(obj)
    return out
