"""The router's HTTP entry point: routes and error shapes."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mol_router.errors import RouterError
from mol_router.proxy import GenerationProxy
from mol_router.resolver import Resolved
from mol_router.runtime import Runtime
from mol_router.selection import AUTO
from mol_router.tenants import OPEN
from mol_router.wire import Request, Response, error_response

log = logging.getLogger("mol.router")
Handler = Callable[[Request], Awaitable[Response | None]]
_NO_ROUTE = ("; the API is /v1/chat/completions, /v1/completions and /v1/models")
_JSON = {"Content-Type": "application/json"}


class RouterHandler:
    """Every request enters here (from :mod:`mol_router.listener`): a dict lookup on
    (method, path). Refusals of the HTTP layer and unexpected failures become
    OpenAI-style errors; an unexpected failure is logged and answered 503, never a
    bare 500. A handler returns its response, or None when it streamed one."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        proxy = GenerationProxy(runtime)
        self.routes: dict[tuple[str, str], Handler] = {
            # partials, not wrapper coroutines: one frame less on every resume
            ("POST", "/v1/chat/completions"): partial(proxy.handle,
                                                      path="/v1/chat/completions", chat=True),
            ("POST", "/v1/completions"): partial(proxy.handle, path="/v1/completions",
                                                 chat=False),
            ("GET", "/v1/models"): self.models,
            ("GET", "/metrics"): self.metrics,
            ("GET", "/healthz"): self.healthz,
            ("GET", "/readyz"): self.readyz,
        }
        self.paths = {path for _, path in self.routes}

    def body_limits(self) -> tuple[int, float]:
        limits = self.rt.limits
        return limits.body_limit, limits.body_read

    def refusal(self, status: int, message: str, code: str, reason: str | None) -> Response:
        """A refusal by the HTTP layer (bad framing, too large, too slow): counted
        under ``reason`` when given; the connection closes after it."""
        if reason is not None:
            self.rt.metrics.rejected(reason)
        self.rt.metrics.request_done("none", "", "", status, 0.0)
        return error_response(RouterError(status, message, code), close=True)

    async def __call__(self, request: Request) -> Response | None:
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            if request.path in self.paths:
                return error_response(RouterError(
                    405, f"{request.method} is not allowed on {request.path}",
                    "method_not_allowed"))
            return error_response(RouterError(
                404, f"no route {request.method} {request.path}{_NO_ROUTE}", "not_found"))
        try:
            return await handler(request)
        except Exception:
            log.exception("unexpected failure on %s %s", request.method, request.path)
            if request.streamed:
                return None  # the head is gone: the connection closes
            return error_response(RouterError(503, "the router failed on this request; it "
                                              "was logged", "router_error", retry_after=1.0))

    async def models(self, request: Request) -> Response:
        """The deployment's experts, ``auto``, and the adapters of its adapter namespaces
        (those the caller's key may use), as ``ns/name@latest`` from the catalog."""
        rt = self.rt
        tenant = OPEN
        if rt.keys.enabled:
            found = rt.keys.lookup(request.headers.get("authorization"))
            if found is None:
                return error_response(RouterError(401, "missing or invalid API key: send "
                                                  "Authorization: Bearer <key>",
                                                  "invalid_api_key"))
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
                         if cfg.mode != "explicit" else f"the default expert ({cfg.default})"))
        for ns in cfg.adapter_namespaces:
            if not tenant.may_use(ns):
                continue
            items = await rt.resolver.listing(ns)
            for item in items:
                if isinstance(item.get("adapter"), str) and item.get("latest_version"):
                    tags = ", ".join(item.get("tags") or [])
                    data.append(card(f"{item['adapter']}@latest", ns,
                                     f"{item['adapter']}@v{item['latest_version']}",
                                     f"catalog adapter (tags: {tags})"))
            if not items:
                data.append(card(f"{ns}/<name>@<ref>", ns, None,
                                 f"any adapter of catalog namespace {ns!r}"))
        return Response(200, orjson.dumps({"object": "list", "data": data}), _JSON)

    async def metrics(self, request: Request) -> Response:
        return Response(200, generate_latest(self.rt.metrics.registry),
                        {"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: Request) -> Response:
        return Response(200, b"ok", {"Content-Type": "text/plain; charset=utf-8"})

    async def readyz(self, request: Request) -> Response:
        """Ready when an engine is ready; the reason otherwise (503)."""
        rt = self.rt
        ready = rt.tracker.ready_endpoints() if rt.tracker is not None else []
        body = {"ready": bool(ready), "endpoints": len(ready),
                "catalog_feed": bool(getattr(rt.resolver, "feed_ok", True))}
        return Response(200 if ready else 503, orjson.dumps(body), _JSON)
