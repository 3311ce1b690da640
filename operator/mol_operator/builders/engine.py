"""The vLLM engine: container, pod template, Deployment, Service, PDB, ScaledObject.

The container's flags and env come from the shared engine-args builder
(``mol_platform.contract.engine_args``), so a cluster engine and ``mol up`` run the same
command. The catalog token never appears in a manifest: it is read from the
deployment's catalog Secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kubernetes.client import (
    V1Container,
    V1ContainerPort,
    V1Deployment,
    V1DeploymentSpec,
    V1DeploymentStrategy,
    V1EmptyDirVolumeSource,
    V1EnvFromSource,
    V1EnvVar,
    V1HTTPGetAction,
    V1LabelSelector,
    V1ObjectMeta,
    V1PersistentVolumeClaimVolumeSource,
    V1PodDisruptionBudget,
    V1PodDisruptionBudgetSpec,
    V1PodSpec,
    V1PodTemplateSpec,
    V1Probe,
    V1ResourceRequirements,
    V1RollingUpdateDeployment,
    V1SecretEnvSource,
    V1Service,
    V1ServicePort,
    V1ServiceSpec,
    V1Toleration,
    V1Volume,
    V1VolumeMount,
)

from mol_operator.builders.common import (
    ENGINE_PORT,
    Facts,
    container_security,
    grace_seconds,
    meta,
    pod_labels,
    pod_security,
    pre_stop,
    selector,
    serialize,
    shutdown_timeout,
    token_env,
)
from mol_platform.contract.engine_args import PluginSettings, engine_args
from mol_platform.contract.router_config import profile_name

MODEL_DIR = "/models"
ADAPTER_CACHE_DIR = "/var/cache/mol-adapters"
# The engine image's home (deploy/images/engine.Dockerfile): vLLM, Triton and torch
# write their caches under it, so it is an emptyDir beside /tmp (the root is read-only).
ENGINE_HOME = "/home/mol"
GPU_RESOURCE = "nvidia.com/gpu"
# Room over the plugin's own cache limit: the kubelet evicts a pod whose emptyDir
# passes its sizeLimit, and a download may finish just past the plugin's bound.
CACHE_HEADROOM = 1.25
TMP_SIZE = "1Gi"
HOME_SIZE = "4Gi"
# Readiness: /health every 5 s, out after 2 failures in a row (10 s: no longer than
# the preStop wait), so a wedged engine leaves the routers' EndpointSlices quickly.
READINESS_PERIOD_SECONDS = 5
READINESS_FAILURES = 2


class BuildError(ValueError):
    """A spec the builders cannot render (the message says what to change)."""


@dataclass(frozen=True)
class Weights:
    """How the engine gets base weights: the model argument plus volumes/init/env."""

    model: str
    volumes: list[V1Volume] = field(default_factory=list)
    mounts: list[V1VolumeMount] = field(default_factory=list)
    init: list[V1Container] = field(default_factory=list)
    env: list[V1EnvVar] = field(default_factory=list)
    env_from: list[V1EnvFromSource] = field(default_factory=list)


def base_weights(facts: Facts) -> Weights:
    """The base model's weights (``baseModel``)."""
    base = facts.obj.spec.base_model
    return weights(base.uri, base.secret_ref, facts.defaults.s3_sync_image, "baseModel.uri")


def weights(uri: str, secret: str | None, s3_sync_image: str, field_name: str) -> Weights:
    """``pvc://claim/path`` mounts the claim; ``s3://`` syncs into a volume first;
    ``hf://org/model`` passes through; a path or ``file://`` is used as is."""
    env_from = [V1EnvFromSource(secret_ref=V1SecretEnvSource(name=secret))] if secret else []
    parsed = urlparse(uri)
    if parsed.scheme == "pvc":
        claim, path = parsed.netloc, parsed.path.strip("/")
        if not claim:
            raise BuildError(f"{field_name} {uri!r}: write pvc://<claim>/<path in the claim>")
        return Weights(
            model=f"{MODEL_DIR}/{path}".rstrip("/"),
            volumes=[V1Volume(name="model", persistent_volume_claim=(
                V1PersistentVolumeClaimVolumeSource(claim_name=claim, read_only=True)))],
            mounts=[V1VolumeMount(name="model", mount_path=MODEL_DIR, read_only=True)],
        )
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise BuildError(f"{field_name} {uri!r}: write s3://<bucket>/<prefix>")
        sync = V1Container(
            name="fetch-model",
            image=s3_sync_image,
            command=["aws", "s3", "sync", "--only-show-errors", uri, MODEL_DIR],
            env=[V1EnvVar(name="HOME", value="/tmp")],
            env_from=env_from or None,
            security_context=container_security(),
            resources=V1ResourceRequirements(requests={"cpu": "100m", "memory": "256Mi"}),
            volume_mounts=[V1VolumeMount(name="model", mount_path=MODEL_DIR),
                           V1VolumeMount(name="tmp", mount_path="/tmp")],
        )
        return Weights(
            model=MODEL_DIR,
            volumes=[V1Volume(name="model", empty_dir=V1EmptyDirVolumeSource())],
            mounts=[V1VolumeMount(name="model", mount_path=MODEL_DIR, read_only=True)],
            init=[sync],
        )
    if parsed.scheme == "hf":
        repo = (parsed.netloc + parsed.path).strip("/")
        if not repo:
            raise BuildError(f"{field_name} {uri!r}: write hf://<org>/<model>")
        return Weights(
            model=repo,
            volumes=[V1Volume(name="model", empty_dir=V1EmptyDirVolumeSource())],
            mounts=[V1VolumeMount(name="model", mount_path=MODEL_DIR)],
            env=[V1EnvVar(name="HF_HOME", value=MODEL_DIR)],
            env_from=env_from,
        )
    if parsed.scheme in ("", "file"):
        return Weights(model=parsed.path if parsed.scheme == "file" else uri, env_from=env_from)
    raise BuildError(
        f"{field_name} {uri!r}: unsupported scheme {parsed.scheme!r}; use s3://, pvc://, hf://,"
        " file:// or a path inside the image"
    )


def plugin_env(facts: Facts) -> list[V1EnvVar]:
    """The resolver plugin's ``MOL_*`` env (docs/design.md), the token from the Secret."""
    settings = PluginSettings(
        catalog_url=facts.defaults.catalog_url,
        serving_profile=profile_name(facts.name, facts.namespace),
        cache_dir=ADAPTER_CACHE_DIR,
        cache_bytes=facts.defaults.adapter_cache_bytes,
    )
    env = [V1EnvVar(name=k, value=v) for k, v in sorted(settings.env().items())]
    return [*env, token_env(facts)]


def _probe(path: str, period: int, failures: int) -> V1Probe:
    return V1Probe(http_get=V1HTTPGetAction(path=path, port="http"), period_seconds=period,
                   failure_threshold=failures, timeout_seconds=5)


def scratch_volumes() -> list[V1Volume]:
    """The engine's writable paths besides its caches: /tmp and its home."""
    return [V1Volume(name="tmp", empty_dir=V1EmptyDirVolumeSource(size_limit=TMP_SIZE)),
            V1Volume(name="home", empty_dir=V1EmptyDirVolumeSource(size_limit=HOME_SIZE))]


def scratch_mounts() -> list[V1VolumeMount]:
    return [V1VolumeMount(name="tmp", mount_path="/tmp"),
            V1VolumeMount(name="home", mount_path=ENGINE_HOME)]


def engine_resources(facts: Facts) -> V1ResourceRequirements:
    """CPU and memory requests (never BestEffort) plus the pool's GPUs; no CPU or memory
    limit: vLLM's host-memory adapter tier grows with ``maxCpuLoras``."""
    d = facts.defaults
    gpus = facts.obj.spec.node_pool.gpus_per_replica
    gpu = {GPU_RESOURCE: str(gpus)} if gpus else {}
    return V1ResourceRequirements(requests={"cpu": d.engine_cpu, "memory": d.engine_memory,
                                            **gpu}, limits=gpu or None)


def engine_container(facts: Facts, weights: Weights) -> V1Container:
    spec = facts.obj.spec
    # gpusPerReplica 0 is vLLM's CPU build (kind, k3d, CI): its dtype and env.
    launch = engine_args(spec, model=weights.model, host="0.0.0.0", port=ENGINE_PORT,
                         cpu=spec.node_pool.gpus_per_replica == 0,
                         otlp_traces_endpoint=facts.defaults.tracing_endpoint)
    # The CPU env is offline (HF_HUB_OFFLINE); hf:// weights must still download.
    offline = {"HF_HUB_OFFLINE"} if urlparse(spec.base_model.uri).scheme == "hf" else set()
    env = [V1EnvVar(name=k, value=v) for k, v in sorted(launch.env.items()) if k not in offline]
    env.append(V1EnvVar(name="HOME", value=ENGINE_HOME))
    return V1Container(
        name="vllm",
        image=spec.engine.image,
        command=["vllm"],
        args=launch.serve_args,
        ports=[V1ContainerPort(name="http", container_port=ENGINE_PORT)],
        env=[*env, *weights.env, *plugin_env(facts)],
        env_from=weights.env_from or None,
        resources=engine_resources(facts),
        security_context=container_security(),
        # Loading a large base takes minutes: the startup probe allows 20 of them.
        startup_probe=_probe("/health", 10, 120),
        readiness_probe=_probe("/health", READINESS_PERIOD_SECONDS, READINESS_FAILURES),
        liveness_probe=_probe("/health", 10, 6),
        lifecycle=pre_stop(facts.defaults.engine_prestop_seconds),
        volume_mounts=[
            *weights.mounts,
            V1VolumeMount(name="dshm", mount_path="/dev/shm"),
            V1VolumeMount(name="adapters", mount_path=ADAPTER_CACHE_DIR),
            *scratch_mounts(),
        ],
    )


def engine_grace_seconds(facts: Facts, args: list[str]) -> int:
    """preStop + vLLM's --shutdown-timeout in ``args`` (90 by default, a user's
    extraArgs win) + the exit margin, and at least ``engine_grace_seconds`` (120)."""
    d = facts.defaults
    return grace_seconds(d.engine_prestop_seconds, shutdown_timeout(args),
                         floor=d.engine_grace_seconds)


def engine_pod_spec(facts: Facts) -> V1PodSpec:
    spec = facts.obj.spec
    weights = base_weights(facts)
    pool = spec.node_pool
    container = engine_container(facts, weights)
    return V1PodSpec(
        containers=[container],
        init_containers=weights.init or None,
        node_selector=dict(pool.node_selector) or None,
        tolerations=[V1Toleration(**t.model_dump(exclude_none=True)) for t in pool.tolerations]
        or None,
        security_context=pod_security(),
        # Engines never call the Kubernetes API (the plugin reads its catalog token from env).
        automount_service_account_token=False,
        # vLLM finishes in-flight requests on SIGTERM (--shutdown-timeout): the grace
        # period covers the preStop wait and that drain.
        termination_grace_period_seconds=engine_grace_seconds(facts, container.args or []),
        volumes=[
            *weights.volumes,
            V1Volume(name="dshm", empty_dir=V1EmptyDirVolumeSource(
                medium="Memory", size_limit=facts.defaults.engine_shm_size)),
            V1Volume(name="adapters", empty_dir=V1EmptyDirVolumeSource(
                size_limit=str(int(facts.defaults.adapter_cache_bytes * CACHE_HEADROOM)))),
            *scratch_volumes(),
        ],
    )


def rollout_strategy(facts: Facts) -> V1DeploymentStrategy:
    """GPU pools replace a pod before starting its successor (a surge pod would need a
    spare GPU and wait Pending); CPU engines surge one so capacity never dips."""
    gpus = facts.obj.spec.node_pool.gpus_per_replica
    surge, unavailable = (0, 1) if gpus else (1, 0)
    return V1DeploymentStrategy(type="RollingUpdate", rolling_update=V1RollingUpdateDeployment(
        max_surge=surge, max_unavailable=unavailable))


def engine_deployment(facts: Facts) -> dict[str, Any]:
    spec = facts.obj.spec
    names = facts.names
    # Under autoscaling KEDA owns the replica count: leaving it out keeps apply from fighting.
    replicas = None if spec.autoscaling is not None else spec.effective_replicas
    obj = V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=meta(facts, names.engine, "engine"),
        spec=V1DeploymentSpec(
            replicas=replicas,
            selector=V1LabelSelector(match_labels=selector(facts, "engine")),
            strategy=rollout_strategy(facts),
            template=V1PodTemplateSpec(
                metadata=V1ObjectMeta(labels=pod_labels(facts, "engine")),
                spec=engine_pod_spec(facts),
            ),
        ),
    )
    out: dict[str, Any] = serialize(obj)
    return out


def engine_service(facts: Facts) -> dict[str, Any]:
    obj = V1Service(
        api_version="v1",
        kind="Service",
        metadata=meta(facts, facts.names.engine, "engine"),
        spec=V1ServiceSpec(
            selector=selector(facts, "engine"),
            ports=[V1ServicePort(name="http", port=ENGINE_PORT, target_port="http",
                                 protocol="TCP")],
        ),
    )
    out: dict[str, Any] = serialize(obj)
    return out


def engine_pdb(facts: Facts) -> dict[str, Any]:
    obj = V1PodDisruptionBudget(
        api_version="policy/v1",
        kind="PodDisruptionBudget",
        metadata=meta(facts, facts.names.engine, "engine"),
        spec=V1PodDisruptionBudgetSpec(
            max_unavailable=1, selector=V1LabelSelector(match_labels=selector(facts, "engine"))),
    )
    out: dict[str, Any] = serialize(obj)
    return out


def scaled_object(facts: Facts) -> dict[str, Any] | None:
    """A KEDA ScaledObject on the engine Deployment, or None without ``autoscaling``.

    With ``minReplicas: 0`` a second trigger on the router's pending requests wakes the
    engines from zero (the vLLM metric has no series while no engine runs).
    """
    spec = facts.obj.spec
    auto = spec.autoscaling
    if auto is None:
        return None
    server = facts.defaults.prometheus_url
    if not server:
        raise BuildError(
            "autoscaling needs Prometheus: start the operator with --prometheus-url"
            " (MOL_OPERATOR_PROMETHEUS_URL)"
        )
    ns, names = facts.namespace, facts.names
    engine_query = f'sum({auto.metric}{{namespace="{ns}",service="{names.engine}"}})'
    triggers: list[dict[str, Any]] = [{
        "type": "prometheus",
        "name": "engine",
        "metadata": {"serverAddress": server, "query": engine_query,
                     "threshold": _num(auto.target)},
    }]
    if auto.min_replicas == 0:
        pending = (f'sum(mol_router_pending_requests{{namespace="{ns}",'
                   f'deployment="{facts.name}"}})')
        triggers.append({
            "type": "prometheus",
            "name": "router-pending",
            "metadata": {"serverAddress": server, "query": pending, "threshold": "1",
                         "activationThreshold": "0"},
        })
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": serialize(meta(facts, names.engine, "engine")),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                               "name": names.engine},
            "minReplicaCount": auto.min_replicas,
            "maxReplicaCount": auto.max_replicas,
            "cooldownPeriod": 300,
            "triggers": triggers,
        },
    }


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
