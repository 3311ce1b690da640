"""The FastAPI application. Engines and clients are created in the lifespan, never at import."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from fastapi.telemetry import TelemetryConfig
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from mol_catalog import openapi
from mol_catalog.adapters.endpoints import lean_routes as adapters_routes
from mol_catalog.adapters.endpoints import router as adapters_router
from mol_catalog.adapters.name_sample import NameSample
from mol_catalog.admin.endpoints import router as admin_router
from mol_catalog.base_models.endpoints import router as base_models_router
from mol_catalog.blobs import leftovers
from mol_catalog.blobs.store import open_blob_store
from mol_catalog.console import apidocs, stack_pages
from mol_catalog.console import endpoints as console
from mol_catalog.console import tools as console_tools
from mol_catalog.console.render import STATIC_DIR
from mol_catalog.db import Database
from mol_catalog.db_urls import Timeouts
from mol_catalog.deps import Catalog, CatalogDep
from mol_catalog.errors import ERROR_RESPONSES, RETRY_AFTER_SECONDS, ErrorBody, json_response
from mol_catalog.evals.endpoints import router as evals_router
from mol_catalog.events.endpoints import router as events_router
from mol_catalog.heads.endpoints import router as heads_router
from mol_catalog.metrics import CatalogMetrics
from mol_catalog.middleware import CatalogMiddleware
from mol_catalog.namespaces.endpoints import router as namespaces_router
from mol_catalog.namespaces.service import BindingRecorder
from mol_catalog.profiles.endpoints import router as profiles_router
from mol_catalog.resolve.endpoints import lean_routes as resolve_routes
from mol_catalog.resolve.endpoints import router as resolve_router
from mol_catalog.routing.endpoints import router as routing_router
from mol_catalog.settings import CatalogSettings
from mol_catalog.signing.endpoints import router as signing_router
from mol_catalog.tokens.endpoints import router as tokens_router
from mol_catalog.tools.endpoints import router as tools_router
from mol_catalog.tools.example import ExampleRunner
from mol_catalog.usage.endpoints import router as usage_router
from mol_catalog.usage.service import UNUSED_DAYS, UnusedGauge
from mol_catalog.util import ResponseBody
from mol_catalog.webhooks.delivery import WebhookSender
from mol_catalog.webhooks.endpoints import router as webhooks_router
from mol_platform.clients.tracing import make_tracing

ops = APIRouter(tags=["operations"])
log = logging.getLogger("mol.catalog")
READY_TIMEOUT = 5.0  # seconds each backend may take to answer a readiness probe


class CatalogAPI(FastAPI):
    """FastAPI with the catalog's own middleware stack: ``CatalogMiddleware`` (metrics,
    and every error in the catalog's one shape), FastAPI's exit stack (it closes
    uploaded files) and the route table.

    Starlette's ServerErrorMiddleware and ExceptionMiddleware would catch the same
    errors a second time, and FastAPI's telemetry and body-limit layers have nothing to
    do here (the catalog's few spans are its own: resolve and publish; upload limits
    are the catalog's own); the five layers
    cost more CPU than a cached resolve's own work (docs/benchmarks.md, "Catalog")."""

    def __init__(self, *, metrics: CatalogMetrics, **kwargs: Any) -> None:
        self.catalog_metrics = metrics
        super().__init__(**kwargs)

    def build_middleware_stack(self) -> ASGIApp:
        return CatalogMiddleware(AsyncExitStackMiddleware(self.router),
                                 metrics=self.catalog_metrics)


class StatusOut(ResponseBody):
    status: str


NO_AUTH: dict[str, Any] = {"security": []}
# The catalog exports Prometheus metrics; FastAPI's native OpenTelemetry would check the
# global providers on every request.
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


@ops.get("/healthz", response_model=StatusOut, openapi_extra=NO_AUTH)
async def healthz() -> Response:
    return json_response({"status": "ok"})


@ops.get("/readyz", response_model=StatusOut, openapi_extra=NO_AUTH,
         responses={503: {"model": ErrorBody, "description": "A backend is unreachable"}})
async def readyz(catalog: CatalogDep) -> Response:
    """Ready when both the database and the blob store answer (each within its timeout)."""
    for what, ping in (("database", catalog.db.ping), ("blob store", catalog.blobs.ping)):
        try:
            await asyncio.wait_for(ping(), READY_TIMEOUT)
        except Exception as exc:
            return json_response({"error": "NotReady",
                                  "detail": f"{what} unreachable: {exc!r}"}, 503,
                                 {"Retry-After": str(RETRY_AFTER_SECONDS)})
    return json_response({"status": "ready"})


@ops.get("/metrics", response_class=Response, openapi_extra=NO_AUTH, responses={200: {
    "description": "Prometheus text exposition",
    "content": {"text/plain": {"schema": {"type": "string"}}}}})
async def metrics(catalog: CatalogDep) -> Response:
    try:
        await catalog.unused.refresh(catalog.db)
    except Exception as exc:  # an outage must not take the other metrics with it
        log.warning("counting unused adapters failed: %r", exc)
    body, ctype = catalog.metrics.render(catalog.unused)
    return Response(body, media_type=ctype)


def create_app(settings: CatalogSettings | None = None) -> FastAPI:
    """The catalog app; the database and blob store open when the app starts."""
    settings = settings or CatalogSettings()
    metrics_obj = CatalogMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(settings.db_url, settings.pool_size,
                      Timeouts(settings.db_timeout, settings.db_connect_timeout))
        blobs = open_blob_store(settings.blob_url, settings.s3_endpoint_url,
                                settings.presign_seconds, settings.s3_timeout)
        await leftovers.clean_at_start(blobs, settings.leftover_grace_seconds)
        names = NameSample(settings.search_sample)
        names.preload(db)
        bindings = BindingRecorder(db, settings.alias_binding_retention_seconds,
                                   settings.alias_binding_refresh_seconds)
        sender = WebhookSender(db, settings, metrics_obj) if settings.webhooks else None
        tracing = make_tracing(settings.tracing_service_name, settings.tracing_endpoint,
                               settings.tracing_sample_ratio, settings.tracing_trust_parent)
        app.state.catalog = Catalog(settings=settings, db=db, blobs=blobs, metrics=metrics_obj,
                                    names=names, bindings=bindings, webhooks=sender,
                                    unused=UnusedGauge(UNUSED_DAYS, settings.usage_gauge_seconds),
                                    tracing=tracing,
                                    examples=ExampleRunner.from_settings(settings))
        if sender is not None:
            sender.start()
        try:
            yield
        finally:
            if sender is not None:
                await sender.close()
            await bindings.drain()
            if app.state.catalog.examples is not None:
                await app.state.catalog.examples.close()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)
            await names.close()
            await blobs.close()
            await db.dispose()

    # One route table: the lean hot GETs first (matched first), then the FastAPI routers.
    app = CatalogAPI(metrics=metrics_obj, title="MoL catalog", version="1", lifespan=lifespan,
                     description="Versions LoRA adapters and knows which base model each "
                                 "fits.",
                     routes=[*resolve_routes, *adapters_routes], telemetry=NO_TELEMETRY,
                     docs_url=None, redoc_url=None,  # served with local assets (apidocs)
                     redirect_slashes=False)  # a redirect's Location comes from Host
    for router in (adapters_router, evals_router, resolve_router, base_models_router,
                   profiles_router, events_router, namespaces_router, webhooks_router,
                   tokens_router, signing_router, usage_router, routing_router, heads_router, ops,
                   tools_router, admin_router):
        app.include_router(router, responses=ERROR_RESPONSES)
    for router in (apidocs.router, console.pages, console.calls, stack_pages.pages,
                   stack_pages.calls, console_tools.pages):
        app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="console-static")
    openapi.install(app)
    return app


def app_factory() -> FastAPI:
    """For ``uvicorn --factory`` (workers > 1): settings come from MOL_CATALOG_* env."""
    from mol_catalog.runtime import tune_gc

    app = create_app(CatalogSettings())
    tune_gc()
    return app
