"""Process settings of ``mol router serve`` (env ``MOL_ROUTER_*``), one object.

What a deployment decides (experts, limits, timeouts) lives in the RouterConfig file;
these are the process's own: where to listen, which file to read and how to reach
the Kubernetes API when engines come from EndpointSlices.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mol_platform.clients.kube import SA_DIR, in_cluster


class RouterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MOL_ROUTER_", extra="ignore")

    config: Path = Path("router.yaml")
    host: str = "0.0.0.0"
    port: int = Field(default=8000, ge=0, le=65535)
    reload_interval: float = Field(default=1.0, gt=0, le=300)  # seconds between file checks
    log_level: str = "INFO"
    # One JSON line per request on logger mol.router.access (docs/observability.md); off
    # by default like the catalog's: it costs about a quarter more CPU per request.
    access_log: bool = False
    # Tracing (docs/observability.md): off unless an OTLP/HTTP collector is set, e.g.
    # http://otel-collector:4318. New traces are sampled with this probability; a
    # client's traceparent is a parent only when trusted (else any client could force
    # sampling), and engines get the router's traceparent either way.
    tracing_endpoint: str | None = None
    tracing_sample_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    tracing_trust_parent: bool = False
    tracing_service_name: str = Field(default="mol-router", min_length=1, max_length=128)
    # Kubernetes API for EndpointSlices: in a pod, the service account's; else set these.
    kube_api_url: str | None = None
    kube_token_file: Path = SA_DIR / "token"
    kube_ca_file: Path = SA_DIR / "ca.crt"
    max_connections_per_engine: int = Field(default=0, ge=0)  # 0: unlimited pool
    # SIGTERM drains (docs/router.md): /readyz fails at once and connections close after
    # their response; new requests are still served for drain_delay seconds (while load
    # balancers notice), then the listener closes and requests in flight get up to
    # drain_timeout seconds to finish. The pod's terminationGracePeriodSeconds must be
    # longer than its preStop wait plus both.
    drain_delay: float = Field(default=1.0, ge=0, le=300)
    drain_timeout: float = Field(default=20.0, ge=0, le=3600)
    # Adapters labelled by name in per-adapter metrics (the rest: "other"), ranked by a
    # count that halves every top_adapters_half_life seconds.
    top_adapters: int = Field(default=100, ge=0, le=10_000)
    top_adapters_half_life: float = Field(default=300.0, gt=0, le=86_400)

    # Usage reported to the catalog (POST /v1/usage; the catalog token needs the
    # `usage` or `usage:<ns>` scope): on when the config names a catalogUrl.
    usage_report: bool = True
    usage_interval: float = Field(default=10.0, gt=0, le=3600)  # seconds between batches
    # Distinct (version, day) keys counted in memory before they are sealed into batches,
    # and sealed batches (up to 1000 entries each) held while the catalog is unreachable;
    # past that the oldest batch is dropped (mol_router_usage_dropped_entries_total).
    usage_max_versions: int = Field(default=10_000, ge=1, le=1_000_000)
    usage_max_batches: int = Field(default=100, ge=1, le=10_000)
    usage_backoff_max: float = Field(default=60.0, gt=0, le=3600)  # retry pause cap, seconds

    # Automatic routing decisions recorded in the catalog (semantic.recordDecisions in the
    # config; POST /v1/routing/decisions with the usage scope): seconds between batches,
    # sealed batches (up to 500 decisions each, a turn up to 4000 characters) held while
    # the catalog is unreachable, past which the oldest is dropped
    # (mol_router_decisions_dropped_total), and the retry pause's cap.
    decisions_interval: float = Field(default=10.0, gt=0, le=3600)
    decisions_max_batches: int = Field(default=20, ge=1, le=1000)
    decisions_backoff_max: float = Field(default=60.0, gt=0, le=3600)

    def kube_url(self) -> str | None:
        """Explicit URL, else the in-cluster one from the service environment."""
        if self.kube_api_url:
            return self.kube_api_url.rstrip("/")
        pod = in_cluster(self.kube_token_file, self.kube_ca_file)
        return pod.url if pod is not None else None
