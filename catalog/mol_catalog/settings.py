"""Service settings: one object, read from the environment with the prefix MOL_CATALOG_."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from mol_catalog.logs import LogFormat, LogLevel
from mol_catalog.webhooks.targets import Allowlist

GIB = 1024**3


class CatalogSettings(BaseSettings):
    """Everything the catalog needs to start; flags of ``mol catalog serve`` override these."""

    model_config = SettingsConfigDict(env_prefix="MOL_CATALOG_", extra="ignore")

    db_url: str = "sqlite:///.mol/catalog.db"
    blob_url: str = "file://.mol/blobs"
    s3_endpoint_url: str | None = None
    auth: Literal["on", "off"] = "on"
    admin_token: str | None = None
    max_upload_bytes: int = GIB
    public_url: str | None = None
    migrate: bool = True
    presign_seconds: int = 3600
    # Postgres connections per worker, plus as many overflow: the most a worker opens.
    pool_size: int = Field(default=10, ge=2)
    # Seconds a database statement (or the wait for a pooled connection) may take, and
    # opening a connection, before the request is answered 504/503.
    db_timeout: float = Field(default=30.0, gt=0)
    db_connect_timeout: float = Field(default=10.0, gt=0)
    # Leftovers of killed publishes (temp upload folders, partial blobs) older than this
    # are removed at start; gc uses its own grace period.
    leftover_grace_seconds: float = Field(default=3600.0, ge=0)
    # Seconds per S3 attempt (connect, and between bytes read); a call makes two at most.
    s3_timeout: float = Field(default=20.0, gt=0)
    # Ids a search for a common term scans in key order before the trigram index takes
    # over; 0: the index only.
    search_window: int = Field(default=20_000, ge=0)
    # Random names per process that tell rare search terms (straight to the trigram
    # index) from common ones; 0: every term is scanned for first.
    search_sample: int = Field(default=4000, ge=0)
    # Logging of `serve`: level, one line per request (off by default: it costs throughput
    # on the hot reads), and text or JSON lines.
    log_level: LogLevel = "info"
    access_log: bool = False
    log_format: LogFormat = "text"
    # Days of per-version usage kept (daily roll-ups routers report); gc prunes older
    # days. `ls --unused-for` can look back this far at most.
    usage_retention_days: int = Field(default=90, ge=1, le=3650)
    # Seconds the unused-adapter gauge (mol_catalog_unused_adapters) is cached.
    usage_gauge_seconds: float = Field(default=300.0, gt=0, le=86_400)
    # The console's stack page and playground (/ui/stack, /ui/playground) show and call
    # this router (its /status, /metrics and chat API); the key when its API keys are on.
    router_url: str | None = None
    router_api_key: str | None = None
    # The sandbox service (docs/sandbox.md) that runs a proposed tool's example at
    # publish (the ``example_runs`` check), the bearer token the catalog calls it with
    # (its own tenant there), and the seconds one run may take in all (making the session,
    # running, ending it). No URL: the check says "not run".
    sandbox_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    sandbox_token: str | None = None
    sandbox_timeout: float = Field(default=10.0, gt=0, le=300)
    # A protected alias is "served under" the profiles it was resolved under within this
    # many seconds (else every profile of its base); a process records a binding at most
    # once per refresh.
    alias_binding_retention_seconds: float = Field(default=7 * 86400.0, gt=0)
    alias_binding_refresh_seconds: float = Field(default=600.0, ge=0)
    # Webhook deliveries: off stops the background sender (deliveries wait in the
    # database); concurrent requests, seconds per request, attempts before a delivery
    # fails, first retry delay (doubled per attempt, at most backoff_max), and how often
    # the sender looks for new events when idle.
    webhooks: bool = True
    webhook_concurrency: int = Field(default=8, ge=1, le=256)
    webhook_timeout: float = Field(default=10.0, gt=0)
    webhook_max_attempts: int = Field(default=10, ge=1, le=100)
    webhook_backoff_seconds: float = Field(default=5.0, gt=0)
    webhook_backoff_max_seconds: float = Field(default=3600.0, gt=0)
    webhook_poll_seconds: float = Field(default=1.0, gt=0)
    # Targets that are not public addresses which webhooks may reach all the same
    # (webhooks.targets): networks (10.0.0.0/8, 127.0.0.1) and host names (hooks.internal,
    # *.svc.cluster.local), comma-separated or a JSON list. Empty: public addresses only.
    webhook_allow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Tracing (docs/observability.md): off unless an OTLP/HTTP collector is set. Spans
    # for resolve and publish; a caller's traceparent is their parent only when trusted
    # (the router's and the operator's calls, in a cluster where clients cannot reach
    # the catalog directly), else each sampled request starts a trace.
    tracing_endpoint: str | None = None
    tracing_sample_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    tracing_trust_parent: bool = False
    tracing_service_name: str = Field(default="mol-catalog", min_length=1, max_length=128)

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_words(cls, value: object) -> object:
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str):
            low = value.strip().lower()
            if low in {"1", "true", "yes", "on"}:
                return "on"
            if low in {"0", "false", "no", "off"}:
                return "off"
        return value

    @field_validator("webhook_allow", mode="before")
    @classmethod
    def _allow_entries(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("[") else text.split(",")
        return value

    @field_validator("webhook_allow")
    @classmethod
    def _allow_parses(cls, value: list[str]) -> list[str]:
        Allowlist.parse(value)  # a bad entry stops the catalog at start, named
        return [v.strip() for v in value if v.strip()]

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lowercase(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @property
    def auth_enabled(self) -> bool:
        return self.auth == "on"

    @property
    def webhook_allowlist(self) -> Allowlist:
        return Allowlist.parse(self.webhook_allow)
