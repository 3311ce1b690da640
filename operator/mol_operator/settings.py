"""The operator's settings: ``mol operator run`` flags, else ``MOL_OPERATOR_*`` env."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mol_operator.builders.common import Defaults
from mol_platform.contract.spec_sandbox import HarnessSpec

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_DEFAULTS = Defaults()


class OperatorSettings(BaseSettings):
    """One object for the whole operator; every field is ``MOL_OPERATOR_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="MOL_OPERATOR_", extra="ignore")

    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty: the whole cluster.")
    kube_url: str | None = Field(
        default=None, description="Kubernetes API URL (default: in-cluster, else kubeconfig).")
    catalog_url: str = Field(default="http://mol-catalog:8080",
                             description="Catalog URL the operator calls.")
    catalog_public_url: str | None = Field(
        default=None, description="Catalog URL engines and routers use (default: catalog_url).")
    catalog_token: str | None = Field(default=None, description="Admin catalog token.")
    catalog_token_file: Path | None = Field(
        default=None, description="File holding the admin token (a mounted Secret).")
    prometheus_url: str | None = Field(
        default=None, description="Prometheus for canary analysis and KEDA ScaledObjects.")
    router_image: str = Field(default=_DEFAULTS.router_image,
                              description="Image of the rendered routers.")
    router_cpu: str = Field(default=_DEFAULTS.router_cpu, description="Router CPU request.")
    router_access_log: bool = Field(
        default=_DEFAULTS.router_access_log,
        description="Routers write one JSON access-log line per request.")
    router_memory: str = Field(default=_DEFAULTS.router_memory,
                               description="Router memory request.")
    router_cpu_limit: str | None = Field(default=None, description="Router CPU limit (none).")
    router_memory_limit: str | None = Field(
        default=None, description="Router memory limit (default: the request).")
    engine_cpu: str = Field(default=_DEFAULTS.engine_cpu,
                            description="CPU request of every engine replica.")
    engine_memory: str = Field(default=_DEFAULTS.engine_memory,
                               description="Memory request of every engine replica.")
    engine_shm_size: str = Field(default=_DEFAULTS.engine_shm_size,
                                 description="Size limit of the engines' /dev/shm.")
    s3_sync_image: str = _DEFAULTS.s3_sync_image
    router_prestop_seconds: int = Field(
        default=_DEFAULTS.router_prestop_seconds, ge=0, le=300,
        description="preStop wait of router pods: they keep serving while Services and "
                    "ingresses let go of them (docs/operator.md, Pod shutdown).")
    router_drain_delay: float = Field(
        default=_DEFAULTS.router_drain_delay, ge=0, le=300,
        description="After SIGTERM a router keeps taking requests this long (readyz 503).")
    router_drain_timeout: float = Field(
        default=_DEFAULTS.router_drain_timeout, ge=0, le=3600,
        description="Then requests in flight get this long to finish.")
    engine_prestop_seconds: int = Field(
        default=_DEFAULTS.engine_prestop_seconds, ge=0, le=300,
        description="preStop wait of engine pods: the routers' EndpointSlice watches "
                    "let go of them before vLLM's own drain starts.")
    engine_grace_seconds: int = Field(
        default=_DEFAULTS.engine_grace_seconds, ge=30, le=86400,
        description="The least terminationGracePeriodSeconds of an engine pod (raised "
                    "to cover preStop plus --shutdown-timeout).")
    adapter_cache_bytes: int = Field(default=_DEFAULTS.adapter_cache_bytes, ge=1)
    monitor_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels added to every rendered ServiceMonitor (JSON object), e.g. "
                    '{"release": "kube-prometheus-stack"} for its serviceMonitorSelector.')
    network_policy: bool = Field(
        default=False, description="Render a NetworkPolicy per deployment: engines admit "
                                   "their router, the operator's pods and Prometheus only.")
    pod_namespace: str | None = Field(
        default=None, description="The operator's own namespace (the engines' NetworkPolicy "
                                  "admits its pods for warm-up).")
    pod_labels: dict[str, str] = Field(
        default_factory=dict, description="Labels selecting the operator's own pods (JSON).")
    prometheus_pod_labels: dict[str, str] = Field(
        default_factory=lambda: dict(_DEFAULTS.prometheus_pod_labels),
        description="Labels of the Prometheus pods engines admit (any namespace).")
    harness: HarnessSpec | None = Field(
        default=None, description="The code harness section (JSON, the fields of a "
        "MoLDeployment's spec.harness) of deployments that leave theirs out; its image and "
        "runtimeClassName also fill a section that names none.")
    metrics_port: int = Field(default=8090, ge=0, le=65535,
                              description="/metrics and /healthz; 0 turns them off.")
    metrics_host: str = "0.0.0.0"
    resync_seconds: float = Field(default=300.0, gt=0,
                                  description="Re-check each deployment this often.")
    retry_seconds: float = Field(default=30.0, gt=0,
                                 description="Delay before retrying a temporary failure.")
    warmup_timeout: float = Field(default=120.0, gt=0,
                                  description="Timeout of one adapter warm-up request.")
    adapter_failure_window: str = Field(
        default="10m", pattern=r"^[1-9][0-9]*(s|m|h)$",
        description="How far back the routers' adapter failures (from Prometheus) make the "
        "operator ask the engine pods which of them fail (a PromQL duration).")
    canary_tick_seconds: float = Field(
        default=10.0, gt=0, description="How often running canaries are analysed and stepped.")
    catalog_timeout: float = Field(default=10.0, gt=0)
    tracing_endpoint: str | None = Field(
        default=None, description="OTLP/HTTP collector (http://otel-collector:4318): a span "
        "per reconcile, and routers and engines export there too; unset: tracing off.")
    tracing_sample_ratio: float = Field(
        default=0.1, ge=0.0, le=1.0, description="Share of reconciles and of router "
        "requests traced (engines follow the router).")
    token_sweep_seconds: float = Field(
        default=3600.0, gt=0, description="How often catalog tokens of deleted deployments "
        "are looked for and revoked (also once at startup).")
    max_concurrent_reconciles: int = Field(
        default=32, ge=1, le=1024,
        description="Reconciles in flight at once; the rest wait their turn (a thousand "
                    "deployments at startup must not swamp the catalog and the API server).")
    leader_election: bool = Field(
        default=True, description="Run under a Lease so that of several replicas one "
        "works and the others stand by (docs/operator.md, High availability).")
    lease_name: str = Field(default="mol-operator", min_length=1, max_length=253)
    lease_namespace: str | None = Field(
        default=None, description="Namespace of the Lease (default: the pod's own, from "
        "its service account, else default).")
    lease_identity: str | None = Field(
        default=None, description="This replica's name in the Lease (default: host name "
        "plus a random suffix).")
    lease_duration_seconds: float = Field(
        default=15.0, gt=0, le=3600, description="How long a dead leader's Lease holds; "
        "renewed every duration/7.5 s, given up after 2/3 of it without a renewal.")

    def lease_namespace_or_default(self) -> str:
        if self.lease_namespace or self.pod_namespace:
            return str(self.lease_namespace or self.pod_namespace)
        own = SA_NAMESPACE_FILE
        return own.read_text().strip() if own.exists() else "default"

    @model_validator(mode="after")
    def _network_policy(self) -> OperatorSettings:
        if self.network_policy and not (self.pod_namespace and self.pod_labels):
            raise ValueError(
                "network_policy needs pod_namespace and pod_labels (MOL_OPERATOR_POD_NAMESPACE,"
                " MOL_OPERATOR_POD_LABELS): the engines' NetworkPolicy must admit the "
                "operator's warm-up")
        return self

    def admin_token(self) -> str | None:
        if self.catalog_token_file is not None:
            return self.catalog_token_file.read_text().strip() or None
        return self.catalog_token

    def defaults(self) -> Defaults:
        return Defaults(
            catalog_url=self.catalog_public_url or self.catalog_url,
            prometheus_url=self.prometheus_url,
            router_image=self.router_image,
            router_cpu=self.router_cpu,
            router_memory=self.router_memory,
            router_cpu_limit=self.router_cpu_limit,
            router_memory_limit=self.router_memory_limit,
            engine_cpu=self.engine_cpu,
            engine_memory=self.engine_memory,
            engine_shm_size=self.engine_shm_size,
            s3_sync_image=self.s3_sync_image,
            adapter_cache_bytes=self.adapter_cache_bytes,
            monitor_labels=dict(self.monitor_labels),
            network_policy=self.network_policy,
            operator_namespace=self.pod_namespace or "",
            operator_pod_labels=dict(self.pod_labels),
            prometheus_pod_labels=dict(self.prometheus_pod_labels),
            tracing_endpoint=self.tracing_endpoint,
            tracing_sample_ratio=self.tracing_sample_ratio,
            router_access_log=self.router_access_log,
            router_prestop_seconds=self.router_prestop_seconds,
            router_drain_delay=self.router_drain_delay,
            router_drain_timeout=self.router_drain_timeout,
            engine_prestop_seconds=self.engine_prestop_seconds,
            engine_grace_seconds=self.engine_grace_seconds,
            harness=self.harness,
        )
