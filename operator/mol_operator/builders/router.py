"""The per-deployment router: ServiceAccount, Role/RoleBinding (EndpointSlices),
ConfigMap with the ``RouterConfig``, Deployment and Service.

The ConfigMap holds exactly what ``mol_platform.contract.router_config.router_config_from_spec``
produces (plus the canary weights and pinned promotions the operator decided), so the
router in a cluster reads the same file ``mol up`` writes.
"""

from __future__ import annotations

import posixpath
from typing import Any

import yaml
from kubernetes.client import (
    RbacV1Subject,
    V1ConfigMapVolumeSource,
    V1Container,
    V1ContainerPort,
    V1Deployment,
    V1DeploymentSpec,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1HTTPGetAction,
    V1LabelSelector,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplateSpec,
    V1PolicyRule,
    V1Probe,
    V1ResourceRequirements,
    V1Role,
    V1RoleBinding,
    V1RoleRef,
    V1SecretVolumeSource,
    V1Service,
    V1ServiceAccount,
    V1ServicePort,
    V1ServiceSpec,
    V1Volume,
    V1VolumeMount,
)

from mol_operator.builders.common import (
    ROUTER_PORT,
    Facts,
    container_security,
    grace_seconds,
    meta,
    pod_labels,
    pod_security,
    pre_stop,
    selector,
    serialize,
    token_env,
)
from mol_operator.builders.embedding import embedding_url, wants_embedding_engine
from mol_operator.builders.sandbox import router_sandbox_env, wants_sandbox
from mol_platform.contract.router_config import (
    DEFAULT_API_KEYS_FILE,
    EndpointSliceSelector,
    RouterConfig,
    router_config_from_spec,
)

CONFIG_DIR = "/etc/mol/router"
CONFIG_FILE = "router.yaml"
# The API keys Secret is mounted where the RouterConfig's apiKeysFile points.
API_KEYS_DIR = posixpath.dirname(DEFAULT_API_KEYS_FILE)
# /readyz answers 503 from the first moment of a drain and while no engine can serve:
# two failed checks 2 s apart (4 s, less than the preStop wait) take the pod out of the
# Service's endpoints.
READINESS_PERIOD_SECONDS = 2
READINESS_FAILURES = 2


def drain_env(facts: Facts) -> list[V1EnvVar]:
    """The router's drain, set here so the grace period is computed from the same
    numbers (``router_grace_seconds``)."""
    d = facts.defaults
    return [V1EnvVar(name="MOL_ROUTER_DRAIN_DELAY", value=f"{d.router_drain_delay:g}"),
            V1EnvVar(name="MOL_ROUTER_DRAIN_TIMEOUT", value=f"{d.router_drain_timeout:g}")]


def router_grace_seconds(facts: Facts) -> int:
    """preStop + drain delay + drain timeout + the exit margin: 5 + 1 + 20 + 4 = 30."""
    d = facts.defaults
    return grace_seconds(d.router_prestop_seconds, d.router_drain_delay + d.router_drain_timeout)


def router_config(facts: Facts) -> RouterConfig:
    """The RouterConfig for this deployment, engines found through EndpointSlices."""
    names = facts.names
    service = (names.kserve_workload_service if facts.obj.spec.serving.mode == "kserve"
               else names.engine)
    config = router_config_from_spec(
        facts.obj,
        endpoint_slice=EndpointSliceSelector(namespace=facts.namespace, service_name=service,
                                             port_name="http" if service == names.engine
                                             else "https"),
        catalog_url=facts.defaults.catalog_url,
        canary_weights=dict(facts.canary_weights),
        # router.semantic.embeddingsUrl wins; else the engine the operator renders
        embeddings_url=embedding_url(facts) if wants_embedding_engine(facts) else None,
        # the sandbox service's Service (port 80), when an expert sets harness
        sandbox_url=f"http://{names.sandbox}" if wants_sandbox(facts) else None,
    )
    if not facts.stable_overrides:
        return config
    experts = [
        e.model_copy(update={"adapter": facts.stable_overrides[e.name]})
        if e.name in facts.stable_overrides else e
        for e in config.experts
    ]
    return config.model_copy(update={"experts": experts})


# libyaml's emitter when PyYAML has it: the same text, several times faster than Python's
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def render_router_config(config: RouterConfig) -> str:
    data = config.model_dump(by_alias=True, exclude_none=True, mode="json")
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=True)


def router_resources(facts: Facts) -> V1ResourceRequirements:
    """Requests and limits from the operator's settings (the chart's router.resources);
    without a memory limit set, the request is the limit."""
    d = facts.defaults
    limits = {"memory": d.router_memory_limit or d.router_memory}
    if d.router_cpu_limit:
        limits["cpu"] = d.router_cpu_limit
    return V1ResourceRequirements(requests={"cpu": d.router_cpu, "memory": d.router_memory},
                                  limits=limits)


def router_objects(facts: Facts) -> list[dict[str, Any]]:
    names = facts.names
    name = names.router
    spec = facts.obj.spec
    d = facts.defaults
    objects: list[Any] = [
        V1ServiceAccount(api_version="v1", kind="ServiceAccount",
                         metadata=meta(facts, name, "router")),
        V1Role(api_version="rbac.authorization.k8s.io/v1", kind="Role",
               metadata=meta(facts, name, "router"),
               rules=[V1PolicyRule(api_groups=["discovery.k8s.io"], resources=["endpointslices"],
                                   verbs=["get", "list", "watch"])]),
        V1RoleBinding(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding",
                      metadata=meta(facts, name, "router"),
                      role_ref=V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                         name=name),
                      subjects=[RbacV1Subject(kind="ServiceAccount", name=name,
                                              namespace=facts.namespace)]),
    ]
    config_map = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": serialize(meta(facts, name, "router")),
        "data": {CONFIG_FILE: render_router_config(router_config(facts))},
    }
    # The platform image's HOME is /tmp; the root filesystem stays read-only.
    volumes = [V1Volume(name="config", config_map=V1ConfigMapVolumeSource(name=name)),
               V1Volume(name="tmp", empty_dir=V1EmptyDirVolumeSource(size_limit="256Mi"))]
    mounts = [V1VolumeMount(name="config", mount_path=CONFIG_DIR, read_only=True),
              V1VolumeMount(name="tmp", mount_path="/tmp")]
    if spec.router.api_keys is not None:
        volumes.append(V1Volume(name="api-keys", secret=V1SecretVolumeSource(
            secret_name=spec.router.api_keys.secret_ref)))
        mounts.append(V1VolumeMount(name="api-keys", mount_path=API_KEYS_DIR, read_only=True))
    container = V1Container(
        name="router",
        image=d.router_image,
        command=["mol"],
        args=["router", "serve", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}",
              "--port", str(ROUTER_PORT)],
        ports=[V1ContainerPort(name="http", container_port=ROUTER_PORT)],
        env=[token_env(facts), *drain_env(facts), *tracing_env(facts),
             *access_log_env(facts), *router_sandbox_env(facts)],
        resources=router_resources(facts),
        security_context=container_security(),
        lifecycle=pre_stop(d.router_prestop_seconds),
        readiness_probe=V1Probe(http_get=V1HTTPGetAction(path="/readyz", port="http"),
                                period_seconds=READINESS_PERIOD_SECONDS,
                                failure_threshold=READINESS_FAILURES),
        liveness_probe=V1Probe(http_get=V1HTTPGetAction(path="/healthz", port="http"),
                               period_seconds=10, failure_threshold=6),
        volume_mounts=mounts,
    )
    deployment = V1Deployment(
        api_version="apps/v1", kind="Deployment",
        metadata=meta(facts, name, "router"),
        spec=V1DeploymentSpec(
            replicas=spec.router.replicas,
            selector=V1LabelSelector(match_labels=selector(facts, "router")),
            template=V1PodTemplateSpec(
                metadata=V1ObjectMeta(labels=pod_labels(facts, "router")),
                spec=V1PodSpec(service_account_name=name, containers=[container],
                               security_context=pod_security(),
                               volumes=volumes,
                               termination_grace_period_seconds=router_grace_seconds(facts)),
            ),
        ),
    )
    service = V1Service(
        api_version="v1", kind="Service",
        metadata=meta(facts, name, "router"),
        spec=V1ServiceSpec(selector=selector(facts, "router"), ports=[
            V1ServicePort(name="http", port=80, target_port="http", protocol="TCP")]),
    )
    return [*[serialize(o) for o in objects], config_map, serialize(deployment),
            serialize(service)]


def endpoint(facts: Facts) -> str:
    """The URL clients call: the router Service inside the cluster."""
    return f"http://{facts.names.router}.{facts.namespace}.svc:80/v1"



def access_log_env(facts: Facts) -> list[V1EnvVar]:
    """The router's access log, on only where the chart asks (it costs CPU per request)."""
    if not facts.defaults.router_access_log:
        return []
    return [V1EnvVar(name="MOL_ROUTER_ACCESS_LOG", value="true")]


def tracing_env(facts: Facts) -> list[V1EnvVar]:
    """The router's tracing settings (docs/observability.md); none when off."""
    d = facts.defaults
    if not d.tracing_endpoint:
        return []
    return [V1EnvVar(name="MOL_ROUTER_TRACING_ENDPOINT", value=d.tracing_endpoint),
            V1EnvVar(name="MOL_ROUTER_TRACING_SAMPLE_RATIO",
                     value=f"{d.tracing_sample_ratio:g}")]
