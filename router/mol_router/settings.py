"""Process settings of ``mol router serve`` (env ``MOL_ROUTER_*``), one object.

What a deployment decides (experts, limits, timeouts) lives in the RouterConfig file;
these are the process's own: where to listen, which file to read and how to reach
the Kubernetes API when engines come from EndpointSlices.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mol_platform.clients.kube import SA_DIR, in_cluster
from mol_platform.contract.router_config import DRAIN_DELAY_SECONDS, DRAIN_TIMEOUT_SECONDS


class ResolverLimits(BaseModel):
    """How much catalog work the adapter resolver may do, and in what order
    (``MOL_ROUTER_RESOLVER__*``, docs/router.md).

    A request's first resolution must never wait behind background work. So the
    catalog's connections are split into lanes: ``request_slots`` for references a
    request is waiting on, ``refresh_slots`` for background refreshes, ``listing_slots``
    for ``/v1/models``, and the rest for the event feed, trained heads and usage reports.
    Unknown names (404s) are kept apart from known ones: briefly, capped, per tenant,
    and never refreshed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Catalog connections in all; each lane below gets its own share of them.
    catalog_connections: int = Field(default=24, ge=4, le=1024)
    request_slots: int = Field(default=12, ge=1, le=1000)
    refresh_slots: int = Field(default=4, ge=1, le=1000)
    listing_slots: int = Field(default=2, ge=1, le=100)
    # Longest wait for a request slot; past it the request gets 503 with Retry-After.
    slot_wait: float = Field(default=2.0, gt=0, le=60)
    # Known references kept (oldest out first).
    max_known: int = Field(default=100_000, ge=1, le=10_000_000)
    # Unknown names (404s): kept this long, at most this many, at most this many per
    # tenant (past it the tenant's new unknown names are answered 429, and not kept).
    missing_ttl: float = Field(default=30.0, gt=0, le=3600)
    missing_max: int = Field(default=10_000, ge=1, le=1_000_000)
    missing_per_tenant: int = Field(default=1_000, ge=1, le=1_000_000)
    # Background refreshes go in batches of this many references, at most this many
    # references a second; a full refresh of every known reference every this often.
    refresh_batch: int = Field(default=50, ge=1, le=10_000)
    refresh_rate: float = Field(default=100.0, gt=0, le=100_000)
    full_refresh: float = Field(default=300.0, gt=0, le=86_400)
    # Long-poll of the catalog's event feed, seconds (the catalog holds at most 30).
    poll_wait: float = Field(default=10.0, gt=0, le=30)

    @model_validator(mode="after")
    def _lanes_fit(self) -> ResolverLimits:
        lanes = self.request_slots + self.refresh_slots + self.listing_slots
        if lanes + 2 > self.catalog_connections:
            raise ValueError(
                f"catalog_connections ({self.catalog_connections}) must exceed request, "
                f"refresh and listing slots ({lanes}) by at least 2: the event feed and "
                "the reports need their own")
        return self


class RouterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MOL_ROUTER_", extra="ignore",
                                      env_nested_delimiter="__")

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
    drain_delay: float = Field(default=DRAIN_DELAY_SECONDS, ge=0, le=300)
    drain_timeout: float = Field(default=DRAIN_TIMEOUT_SECONDS, ge=0, le=3600)
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

    # The sandbox service's bearer token for a router without API keys (with keys, each
    # request's own key goes to the sandbox, whose tokens file is the same keys file, so
    # sessions belong to the caller's tenant). None: no token (a sandbox on loopback).
    sandbox_token: SecretStr | None = None

    # How much catalog work resolving adapter references may do, and in what order
    # (docs/router.md): e.g. MOL_ROUTER_RESOLVER__MISSING_PER_TENANT=200.
    resolver: ResolverLimits = Field(default_factory=ResolverLimits)

    def kube_url(self) -> str | None:
        """Explicit URL, else the in-cluster one from the service environment."""
        if self.kube_api_url:
            return self.kube_api_url.rstrip("/")
        pod = in_cluster(self.kube_token_file, self.kube_ca_file)
        return pod.url if pod is not None else None
