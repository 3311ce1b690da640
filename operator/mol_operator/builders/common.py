"""What every builder shares: names, labels, owner references, serialization.

Names are deterministic functions of the MoLDeployment's name, so the planner finds
an object by name and a restarted operator recognizes what it made earlier; a name
too long for its child is shortened with a stable hash (``names.child_name``).
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import (
    ApiClient,
    V1Capabilities,
    V1EnvVar,
    V1EnvVarSource,
    V1Lifecycle,
    V1LifecycleHandler,
    V1ObjectMeta,
    V1OwnerReference,
    V1PodSecurityContext,
    V1SeccompProfile,
    V1SecretKeySelector,
    V1SecurityContext,
    V1SleepAction,
)

from mol_platform import __version__
from mol_platform.contract.names import NAME_LIMIT, child_name
from mol_platform.contract.router_config import DRAIN_DELAY_SECONDS, DRAIN_TIMEOUT_SECONDS
from mol_platform.contract.spec import API_VERSION, KIND, MoLDeployment
from mol_platform.contract.spec_sandbox import HarnessSpec

MANAGER = "mol-operator"
PART_OF = "mol-platform"
ENGINE_PORT = 8000
ROUTER_PORT = 8080
TOKEN_KEY = "token"
TOKEN_ID_ANNOTATION = "mol.dev/catalog-token-id"
TOKEN_SCOPES_ANNOTATION = "mol.dev/catalog-token-scopes"
# Every pod the operator renders carries this label (router or engine, KServe's engine
# pods included): the catalog's NetworkPolicy admits exactly these.
COMPONENT_LABEL = "mol.dev/component"
# The non-root user of the platform and engine images (deploy/images/).
RUN_AS = 10001
_api = ApiClient()
# Shutdown (docs/operator.md, "Pod shutdown"). A deleted pod leaves its Service's
# endpoints at once, but kube-proxy, ingress controllers and the routers' EndpointSlice
# watches take a few seconds to see it: the preStop wait keeps the process serving
# until they have, then SIGTERM starts its own drain.
ROUTER_PRESTOP_SECONDS = 5
# The router's drain (MOL_ROUTER_DRAIN_DELAY, MOL_ROUTER_DRAIN_TIMEOUT; docs/router.md):
# new requests served for the delay, then requests in flight get the timeout.
ROUTER_DRAIN_DELAY_SECONDS = DRAIN_DELAY_SECONDS
ROUTER_DRAIN_TIMEOUT_SECONDS = DRAIN_TIMEOUT_SECONDS
# Engines are found through EndpointSlices by the routers, which a busy API server
# may tell late; a longer wait costs a rolled replica nothing but time.
ENGINE_PRESTOP_SECONDS = 10
# The least grace an engine gets (long generations); raised when preStop plus vLLM's
# --shutdown-timeout needs more.
ENGINE_GRACE_SECONDS = 120
# Past its drain a process still has to exit (close its pools, flush the last usage
# batch and spans): the grace period is this much longer than preStop plus drain.
EXIT_MARGIN_SECONDS = 4
# The least grace of any rendered pod (Kubernetes' own default).
MIN_GRACE_SECONDS = 30


@dataclass(frozen=True)
class Names:
    """The name of every child of one MoLDeployment."""

    deployment: str

    @property
    def engine(self) -> str:
        return child_name(self.deployment, "-engine")

    @property
    def router(self) -> str:
        return child_name(self.deployment, "-router")

    @property
    def embedding(self) -> str:
        """The semantic signal's embedding engine (Deployment and Service)."""
        return child_name(self.deployment, "-embedding")

    @property
    def sandbox(self) -> str:
        """The code harness's sandbox service (Deployment, Service, its RBAC)."""
        return child_name(self.deployment, "-sandbox")

    @property
    def sandbox_session(self) -> str:
        """The sessions' pod template (SandboxTemplate or ConfigMap), warm pool and
        NetworkPolicy."""
        return child_name(self.deployment, "-sandbox-session")

    @property
    def sandbox_token(self) -> str:
        """The router's token for the sandbox service, made when the deployment has no
        API keys (with keys, each caller's own key is its sandbox identity)."""
        return child_name(self.deployment, "-sandbox-token")

    @property
    def catalog_secret(self) -> str:
        return child_name(self.deployment, "-catalog")

    @property
    def kserve(self) -> str:
        return self.deployment

    @property
    def kserve_workload_service(self) -> str:
        """The Service KServe's LLMInferenceService controller puts in front of vLLM,
        named the way KServe names it (knative's ``kmeta.ChildName``)."""
        return knative_child_name(self.deployment, "-kserve-workload-svc")


def knative_child_name(parent: str, suffix: str) -> str:
    """knative's ``kmeta.ChildName``, which KServe names its children with: past 63
    characters, the parent's head and the md5 of the whole parent (32 hex)."""
    if len(parent) + len(suffix) <= NAME_LIMIT:
        return parent + suffix
    digest = hashlib.md5(parent.encode(), usedforsecurity=False).hexdigest()
    return parent[:NAME_LIMIT - len(digest) - len(suffix)] + digest + suffix


@dataclass(frozen=True)
class Defaults:
    """Operator-wide settings the builders need (from ``OperatorSettings``)."""

    catalog_url: str = "http://mol-catalog:8080"
    prometheus_url: str | None = None
    router_image: str = f"ghcr.io/mol-platform/mol-platform:{__version__}"
    router_cpu: str = "250m"
    router_memory: str = "256Mi"
    router_cpu_limit: str | None = None
    router_memory_limit: str | None = None  # None: the memory request
    engine_cpu: str = "2"
    engine_memory: str = "8Gi"
    engine_shm_size: str = "2Gi"
    s3_sync_image: str = "amazon/aws-cli:2.22.0"
    adapter_cache_bytes: int = 20 * 1024**3
    # Labels added to every rendered ServiceMonitor (a Prometheus' serviceMonitorSelector).
    monitor_labels: Mapping[str, str] = field(default_factory=dict)
    # A NetworkPolicy per deployment: engines admit their router, the operator's pods
    # (warm-up) and Prometheus only.
    network_policy: bool = False
    operator_namespace: str = ""
    operator_pod_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus_pod_labels: Mapping[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/name": "prometheus"})
    # OTLP/HTTP collector for routers and engines (None: tracing off) and the routers'
    # sample ratio (engines follow the router's decision through traceparent).
    tracing_endpoint: str | None = None
    tracing_sample_ratio: float = 0.1
    # Routers write one JSON access-log line per request (chart: router.accessLog).
    router_access_log: bool = False
    # Shutdown (chart: router.drain, engine.drain): the preStop waits and the drains
    # the termination grace periods are computed from (``grace_seconds``).
    router_prestop_seconds: int = ROUTER_PRESTOP_SECONDS
    router_drain_delay: float = ROUTER_DRAIN_DELAY_SECONDS
    router_drain_timeout: float = ROUTER_DRAIN_TIMEOUT_SECONDS
    engine_prestop_seconds: int = ENGINE_PRESTOP_SECONDS
    engine_grace_seconds: int = ENGINE_GRACE_SECONDS
    # The code harness section a deployment without ``spec.harness`` gets (chart:
    # harness); its image and runtime class also fill a section that names none.
    harness: HarnessSpec | None = None


@dataclass(frozen=True)
class Facts:
    """Everything a build needs beyond the spec: decided by the reconcile, not the builder."""

    obj: MoLDeployment
    uid: str
    token: str = ""
    token_id: int | None = None
    token_scopes: tuple[str, ...] = ()
    # the router's sandbox token (Names.sandbox_token's Secret), kept once made
    sandbox_token: str = ""
    canary_weights: Mapping[str, float] = field(default_factory=dict)
    # expert -> the adapter ref the router serves as stable (a pinned promotion)
    stable_overrides: Mapping[str, str] = field(default_factory=dict)
    defaults: Defaults = field(default_factory=Defaults)
    # kubernetes-sigs/agent-sandbox's CRDs are served: sessions are SandboxClaims of a
    # SandboxTemplate (else plain pods from a template in a ConfigMap)
    agent_sandbox: bool = False

    @property
    def name(self) -> str:
        return self.obj.metadata.name

    @property
    def namespace(self) -> str:
        return self.obj.metadata.namespace or "default"

    @property
    def names(self) -> Names:
        return Names(self.name)


def labels(facts: Facts, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": f"mol-{component}",
        "app.kubernetes.io/instance": facts.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": MANAGER,
    }


def selector(facts: Facts, component: str) -> dict[str, str]:
    """The immutable subset of labels used in selectors."""
    return {
        "app.kubernetes.io/name": f"mol-{component}",
        "app.kubernetes.io/instance": facts.name,
    }


def meta(facts: Facts, name: str, component: str,
         annotations: Mapping[str, str] | None = None) -> V1ObjectMeta:
    return V1ObjectMeta(
        name=name,
        namespace=facts.namespace,
        labels=labels(facts, component),
        annotations=dict(annotations) if annotations else None,
        owner_references=[
            V1OwnerReference(api_version=API_VERSION, kind=KIND, name=facts.name,
                             uid=facts.uid, controller=True, block_owner_deletion=True)
        ],
    )



def pod_labels(facts: Facts, component: str) -> dict[str, str]:
    """Labels of a rendered pod: the object's plus the catalog NetworkPolicy's key."""
    return {**labels(facts, component), COMPONENT_LABEL: component}


def pod_security() -> V1PodSecurityContext:
    """Pod Security "restricted": non-root (also for images built to run as root)."""
    # OnRootMismatch: a model PVC of many GiB is not chowned file by file at every mount.
    return V1PodSecurityContext(run_as_non_root=True, run_as_user=RUN_AS, run_as_group=RUN_AS,
                                fs_group=RUN_AS, fs_group_change_policy="OnRootMismatch",
                                seccomp_profile=V1SeccompProfile(type="RuntimeDefault"))


def container_security() -> V1SecurityContext:
    """Every rendered container: no escalation, no capabilities, read-only root (the
    writable paths are emptyDirs)."""
    return V1SecurityContext(allow_privilege_escalation=False, read_only_root_filesystem=True,
                             run_as_non_root=True, capabilities=V1Capabilities(drop=["ALL"]),
                             seccomp_profile=V1SeccompProfile(type="RuntimeDefault"))


def pre_stop(seconds: int) -> V1Lifecycle | None:
    """Kubernetes' own ``sleep`` action (no shell needed in the image; on by default
    since 1.30, the chart's kubeVersion); none for a wait of 0."""
    if seconds <= 0:
        return None
    return V1Lifecycle(pre_stop=V1LifecycleHandler(sleep=V1SleepAction(seconds=seconds)))


def grace_seconds(prestop: float, drain: float, floor: int = MIN_GRACE_SECONDS) -> int:
    """``terminationGracePeriodSeconds`` strictly longer than the preStop wait plus the
    process's own drain (plus ``EXIT_MARGIN_SECONDS`` to exit), and at least ``floor``:
    the kubelet kills the container when the period ends, mid-drain or not."""
    return max(floor, math.ceil(prestop + drain) + EXIT_MARGIN_SECONDS)


def shutdown_timeout(args: Sequence[str]) -> float:
    """vLLM's ``--shutdown-timeout`` in a command line (the last one wins, as in its
    parser; ``--shutdown-timeout=N`` too); 0, vLLM's default, when absent."""
    value = 0.0
    for i, arg in enumerate(args):
        text = None
        if arg == "--shutdown-timeout" and i + 1 < len(args):
            text = args[i + 1]
        elif arg.startswith("--shutdown-timeout="):
            text = arg.split("=", 1)[1]
        if text is not None:
            try:
                value = max(0.0, float(text))
            except ValueError:
                continue  # vLLM refuses it at start; the grace needs no guess
    return value


def serialize(obj: Any) -> Any:
    """A typed model (kubernetes or kserve) -> the API's JSON dict."""
    return _api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def token_env(facts: Facts) -> V1EnvVar:
    """``MOL_CATALOG_TOKEN`` from the deployment's catalog Secret (engines and router)."""
    return V1EnvVar(name="MOL_CATALOG_TOKEN", value_from=V1EnvVarSource(
        secret_key_ref=V1SecretKeySelector(name=facts.names.catalog_secret, key=TOKEN_KEY)))
