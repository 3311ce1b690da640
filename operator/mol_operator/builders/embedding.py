"""The semantic signal's embedding engine: a CPU Deployment and Service running vLLM's
pooling runner on a sentence-embedding model (OpenAI ``/v1/embeddings``).

Rendered when the router uses a semantic mode and ``router.semantic.embeddingsUrl`` is
not set; the RouterConfig then points at this Service. The command and env come from
``mol_platform.contract.engine_args.embedding_args``, the one ``mol up`` runs. It is a
plain Deployment in KServe mode too: KServe's LLMInferenceService renders a generative
vLLM server on accelerators, while this engine is a small CPU pod with no LoRA, no
plugin and no catalog token.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from kubernetes.client import (
    V1Container,
    V1ContainerPort,
    V1Deployment,
    V1DeploymentSpec,
    V1DeploymentStrategy,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1HTTPGetAction,
    V1LabelSelector,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplateSpec,
    V1Probe,
    V1ResourceRequirements,
    V1RollingUpdateDeployment,
    V1Service,
    V1ServicePort,
    V1ServiceSpec,
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
)
from mol_operator.builders.engine import (
    ENGINE_HOME,
    BuildError,
    scratch_mounts,
    scratch_volumes,
    weights,
)
from mol_platform.contract.embedding_models import image_dir
from mol_platform.contract.engine_args import embedding_args
from mol_platform.contract.spec_router import MSG_MODEL_WEIGHTS, EmbeddingEngineSpec

COMPONENT = "embedding"
SHM_SIZE = "256Mi"
# Readiness: out after 2 failed checks 5 s apart (10 s: no longer than the preStop wait).
READINESS_PERIOD_SECONDS = 5
READINESS_FAILURES = 2


def wants_embedding_engine(facts: Facts) -> bool:
    """A semantic mode with no embeddings server of the user's own."""
    sem = facts.obj.spec.router.semantic
    return sem is not None and sem.embeddings_url is None


def embedding_url(facts: Facts) -> str:
    """The base URL the router embeds through (the Service, inside the cluster)."""
    return f"http://{facts.names.embedding}.{facts.namespace}.svc:{ENGINE_PORT}"


def embedding_spec(facts: Facts) -> EmbeddingEngineSpec:
    sem = facts.obj.spec.router.semantic
    return (sem.engine if sem is not None and sem.engine is not None
            else EmbeddingEngineSpec())


def _probe(period: int, failures: int) -> V1Probe:
    return V1Probe(http_get=V1HTTPGetAction(path="/health", port="http"),
                   period_seconds=period, failure_threshold=failures, timeout_seconds=5)


def embedding_container(facts: Facts) -> tuple[V1Container, list[V1Volume],
                                                list[V1Container]]:
    """The container, the volumes it needs besides scratch, and init containers."""
    spec = embedding_spec(facts)
    sem = facts.obj.spec.router.semantic
    assert sem is not None
    uri = spec.uri or image_dir(sem.model)
    if uri is None:  # the spec's own rule refuses this at admission
        raise BuildError(MSG_MODEL_WEIGHTS)
    w = weights(uri, spec.secret_ref, facts.defaults.s3_sync_image,
                "router.semantic.engine.uri")
    launch = embedding_args(w.model, served_model_name=sem.model, host="0.0.0.0",
                            port=ENGINE_PORT, cpu=True)
    offline = {"HF_HUB_OFFLINE"} if urlparse(uri).scheme == "hf" else set()
    env = [V1EnvVar(name=k, value=v) for k, v in sorted(launch.env.items()) if k not in offline]
    env.append(V1EnvVar(name="HOME", value=ENGINE_HOME))
    container = V1Container(
        name="vllm",
        image=spec.image,
        command=["vllm"],
        args=launch.serve_args,
        ports=[V1ContainerPort(name="http", container_port=ENGINE_PORT)],
        env=[*env, *w.env],
        env_from=w.env_from or None,
        # No CPU limit: CFS throttling would land on the routing step's latency.
        resources=V1ResourceRequirements(requests={"cpu": spec.cpu, "memory": spec.memory},
                                         limits={"memory": spec.memory}),
        security_context=container_security(),
        startup_probe=_probe(5, 120),
        readiness_probe=_probe(READINESS_PERIOD_SECONDS, READINESS_FAILURES),
        liveness_probe=_probe(10, 6),
        # The router embeds through the Service (kube-proxy): wait until it has let go.
        lifecycle=pre_stop(facts.defaults.engine_prestop_seconds),
        volume_mounts=[*w.mounts, V1VolumeMount(name="dshm", mount_path="/dev/shm"),
                       *scratch_mounts()],
    )
    volumes = [*w.volumes, V1Volume(name="dshm", empty_dir=V1EmptyDirVolumeSource(
        medium="Memory", size_limit=SHM_SIZE))]
    return container, volumes, w.init


def embedding_grace_seconds(facts: Facts, args: list[str]) -> int:
    """preStop + the engine's --shutdown-timeout (vLLM's default 0: an embedding
    request lasts milliseconds) + the exit margin, at least 30."""
    return grace_seconds(facts.defaults.engine_prestop_seconds, shutdown_timeout(args))


def embedding_deployment(facts: Facts) -> dict[str, Any]:
    name = facts.names.embedding
    container, volumes, init = embedding_container(facts)
    obj = V1Deployment(
        api_version="apps/v1", kind="Deployment",
        metadata=meta(facts, name, COMPONENT),
        spec=V1DeploymentSpec(
            replicas=embedding_spec(facts).replicas,
            selector=V1LabelSelector(match_labels=selector(facts, COMPONENT)),
            # A CPU pod: surge one so the router never loses its embeddings.
            strategy=V1DeploymentStrategy(type="RollingUpdate", rolling_update=(
                V1RollingUpdateDeployment(max_surge=1, max_unavailable=0))),
            template=V1PodTemplateSpec(
                metadata=V1ObjectMeta(labels=pod_labels(facts, COMPONENT)),
                spec=V1PodSpec(
                    containers=[container],
                    init_containers=init or None,
                    security_context=pod_security(),
                    automount_service_account_token=False,
                    termination_grace_period_seconds=embedding_grace_seconds(
                        facts, container.args or []),
                    volumes=[*volumes, *scratch_volumes()],
                ),
            ),
        ),
    )
    out: dict[str, Any] = serialize(obj)
    return out


def embedding_service(facts: Facts) -> dict[str, Any]:
    obj = V1Service(
        api_version="v1", kind="Service",
        metadata=meta(facts, facts.names.embedding, COMPONENT),
        spec=V1ServiceSpec(selector=selector(facts, COMPONENT), ports=[
            V1ServicePort(name="http", port=ENGINE_PORT, target_port="http", protocol="TCP")]),
    )
    out: dict[str, Any] = serialize(obj)
    return out
