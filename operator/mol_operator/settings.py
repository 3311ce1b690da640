"""The operator's settings: ``mol operator run`` flags, else ``MOL_OPERATOR_*`` env."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mol_operator.builders.common import Defaults

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


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
    router_image: str = "ghcr.io/mol-platform/mol:latest"
    router_cpu: str = "250m"
    router_memory: str = "256Mi"
    router_replicas: int | None = Field(
        default=None, ge=0, description="Override every deployment's router.replicas.")
    s3_sync_image: str = "amazon/aws-cli:2.22.0"
    adapter_cache_bytes: int = Field(default=20 * 1024**3, ge=1)
    metrics_port: int = Field(default=8090, ge=0, le=65535,
                              description="/metrics and /healthz; 0 turns them off.")
    metrics_host: str = "0.0.0.0"
    resync_seconds: float = Field(default=300.0, gt=0,
                                  description="Re-check each deployment this often.")
    retry_seconds: float = Field(default=30.0, gt=0,
                                 description="Delay before retrying a temporary failure.")
    warmup_timeout: float = Field(default=120.0, gt=0,
                                  description="Timeout of one adapter warm-up request.")
    canary_tick_seconds: float = Field(
        default=10.0, gt=0, description="How often running canaries are analysed and stepped.")
    catalog_timeout: float = Field(default=10.0, gt=0)
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
        if self.lease_namespace:
            return self.lease_namespace
        own = SA_NAMESPACE_FILE
        return own.read_text().strip() if own.exists() else "default"

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
            router_replicas=self.router_replicas,
            s3_sync_image=self.s3_sync_image,
            adapter_cache_bytes=self.adapter_cache_bytes,
        )
