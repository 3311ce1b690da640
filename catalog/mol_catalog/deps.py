"""What every endpoint gets: the catalog context and the calling principal, as the
FastAPI dependencies ``CatalogDep`` and ``PrincipalDep``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends
from starlette.requests import Request

from mol_catalog.adapters.name_sample import NameSample
from mol_catalog.auth import (
    ANONYMOUS_ADMIN,
    Principal,
    TokenCache,
    bearer_token,
    matches_admin_token,
)
from mol_catalog.auth import token_hash as hash_token
from mol_catalog.base_models.service import KnownBase
from mol_catalog.blobs.store import BlobStore
from mol_catalog.db import Database
from mol_catalog.errors import Unauthorized
from mol_catalog.metrics import CatalogMetrics
from mol_catalog.namespaces.service import BindingRecorder
from mol_catalog.settings import CatalogSettings
from mol_catalog.tokens import service as tokens
from mol_catalog.tools.example import ExampleRunner
from mol_catalog.usage.service import UNUSED_DAYS, UnusedGauge
from mol_catalog.webhooks.delivery import WebhookSender
from mol_platform.clients.tracing import Tracing


@dataclass
class Catalog:
    """Created once in the app's lifespan; reached from requests as ``app.state.catalog``."""

    settings: CatalogSettings
    db: Database
    blobs: BlobStore
    tokens: TokenCache = field(default_factory=TokenCache)
    metrics: CatalogMetrics = field(default_factory=CatalogMetrics)
    names: NameSample = field(default_factory=NameSample)  # picks a search's first step
    # Which profiles each alias is resolved under (protected alias checks).
    bindings: BindingRecorder = field(
        default_factory=lambda: BindingRecorder(None, 7 * 86400.0, 600.0))
    # The background sender of webhook deliveries (None: MOL_CATALOG_WEBHOOKS=off).
    webhooks: WebhookSender | None = None
    unused: UnusedGauge = field(default_factory=lambda: UnusedGauge(UNUSED_DAYS, 300.0))
    # What publishes remember (adapters/publish.py), bounded there: base revisions by
    # name@revision and namespace ids by name; neither changes once stored.
    bases: dict[str, KnownBase] = field(default_factory=dict)
    namespace_ids: dict[str, int] = field(default_factory=dict)
    # Awaited between a publish's blob writes and the transaction that references them;
    # tests set it to interleave a gc there (on Postgres they hold a row lock instead).
    after_store: Callable[[], Awaitable[None]] | None = None
    tracing: Tracing | None = None  # None: tracing off, no span objects at all
    # Runs proposed tools' examples in the sandbox service (None: no sandbox configured).
    examples: ExampleRunner | None = None

    @property
    def download_base(self) -> str:
        """PUBLIC_URL, or "" for relative download URLs that clients join to the catalog
        URL; never the request's Host header, which any caller can set."""
        return (self.settings.public_url or "").rstrip("/")


async def get_catalog(request: Request) -> Catalog:
    """``async`` so FastAPI calls it inline instead of in its thread pool."""
    catalog: Catalog = request.app.state.catalog
    return catalog


async def get_principal(request: Request) -> Principal:
    """The caller: anonymous admin when auth is off, else from the bearer token."""
    catalog: Catalog = request.app.state.catalog
    return await principal_for(catalog, request.headers.get("authorization"))


CatalogDep = Annotated[Catalog, Depends(get_catalog)]  # an endpoint's ``catalog`` parameter
PrincipalDep = Annotated[Principal, Depends(get_principal)]  # ... and its caller


async def principal_for(catalog: Catalog, authorization: str | None) -> Principal:
    """The principal of an Authorization header value (the lean routes read the header
    themselves; dependency-injected routes come through ``get_principal``)."""
    if not catalog.settings.auth_enabled:
        return ANONYMOUS_ADMIN
    token = bearer_token(authorization)
    if matches_admin_token(token, catalog.settings.admin_token):
        return Principal("admin", frozenset({"admin"}))
    digest = hash_token(token)
    hit, principal = catalog.tokens.get(digest)
    if not hit:
        principal = await tokens.principal_of(catalog.db, digest)
        catalog.tokens.put(digest, principal)
    if principal is None:
        raise Unauthorized("invalid or revoked token")
    return principal
