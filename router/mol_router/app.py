"""The router's aiohttp application: routes, error shapes, start-up and shutdown."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mol_router.errors import RouterError, error_response
from mol_router.proxy import GenerationProxy
from mol_router.resolver import Resolved
from mol_router.selection import AUTO
from mol_router.state import Runtime
from mol_router.tenants import OPEN

log = logging.getLogger("mol.router")
RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (404, 405, 413, bad requests) as OpenAI error bodies; an
    unexpected failure is logged and answered 503, never a bare 500."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed",
                413: "body_too_large"}.get(exc.status, "invalid_request")
        message = exc.reason if exc.status != 404 else (
            f"no route {request.method} {request.path}; the API is /v1/chat/completions, "
            "/v1/completions and /v1/models")
        return error_response(RouterError(exc.status, message, code))
    except Exception:
        log.exception("unexpected failure on %s %s", request.method, request.path)
        return error_response(RouterError(503, "the router failed on this request; it was "
                                          "logged", "router_error", retry_after=1.0))


async def models(request: web.Request) -> web.Response:
    """The deployment's experts, ``auto``, and the adapters of its adapter namespaces
    (those the caller's key may use), as ``ns/name@latest`` from the catalog."""
    rt = request.app[RUNTIME]
    tenant = OPEN
    if rt.keys.enabled:
        found = rt.keys.lookup(request.headers.get("Authorization"))
        if found is None:
            return error_response(RouterError(401, "missing or invalid API key: send "
                                              "Authorization: Bearer <key>", "invalid_api_key"))
        tenant = found
    cfg = rt.config
    created = int(time.time())
    parent = cfg.base_model or None

    def card(ident: str, owner: str, root: str | None, description: str) -> dict[str, Any]:
        return {"id": ident, "object": "model", "created": created, "owned_by": owner,
                "root": root, "parent": parent, "description": description}

    data: list[dict[str, Any]] = []
    for e in cfg.experts:
        cached = rt.resolver.cached(e.adapter)
        root = cached.name if isinstance(cached, Resolved) else e.adapter
        data.append(card(e.name, cfg.deployment, root, e.description))
    data.append(card(AUTO, cfg.deployment, None, "the router picks the expert"
                     if cfg.mode == "auto" else f"the default expert ({cfg.default})"))
    for ns in cfg.adapter_namespaces:
        if not tenant.may_use(ns):
            continue
        items = await rt.resolver.listing(ns)
        for item in items:
            if isinstance(item.get("adapter"), str) and item.get("latest_version"):
                data.append(card(f"{item['adapter']}@latest", ns,
                                 f"{item['adapter']}@v{item['latest_version']}",
                                 f"catalog adapter (tags: {', '.join(item.get('tags') or [])})"))
        if not items:
            data.append(card(f"{ns}/<name>@<ref>", ns, None,
                             f"any adapter of catalog namespace {ns!r}"))
    return web.Response(body=orjson.dumps({"object": "list", "data": data}),
                        content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    return web.Response(body=generate_latest(rt.metrics.registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """Ready when an engine is ready; the reason otherwise (503)."""
    rt = request.app[RUNTIME]
    ready = rt.tracker.ready_endpoints() if rt.tracker is not None else []
    body = {"ready": bool(ready), "endpoints": len(ready),
            "catalog_feed": bool(getattr(rt.resolver, "feed_ok", True))}
    return web.Response(status=200 if ready else 503, body=orjson.dumps(body),
                        content_type="application/json")


def create_app(runtime: Runtime) -> web.Application:
    app = web.Application(middlewares=[openai_errors], client_max_size=1 << 30,
                          handler_args={"keepalive_timeout": runtime.limits.header_read,
                                        "lingering_time": 2.0})
    app[RUNTIME] = runtime
    proxy = GenerationProxy(runtime)
    app.router.add_post("/v1/chat/completions", proxy.chat)
    app.router.add_post("/v1/completions", proxy.completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)

    async def lifecycle(app: web.Application) -> Any:
        await runtime.start()
        yield
        await runtime.stop()

    app.cleanup_ctx.append(lifecycle)
    return app
