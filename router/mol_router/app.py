"""The router's HTTP entry point: routes and error shapes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from mol_router.errors import RouterError
from mol_router.httpd.wire import Request, Response, error_response
from mol_router.routing.resolver import Resolved
from mol_router.routing.rules import AUTO
from mol_router.runtime import Runtime
from mol_router.serving.proxy import GenerationProxy
from mol_router.tenants import OPEN, Tenant

log = logging.getLogger("mol.router")
Handler = Callable[[Request], Awaitable[Response | None]]
_NO_ROUTE = ("; the API is /v1/chat/completions, /v1/completions and /v1/models")
_JSON = {"Content-Type": "application/json"}
VERDICT_CONCURRENCY = 8  # resolves /v1/models makes at once for adapters not known yet
VERDICT_WAIT_S = 2.0  # ... and how long it waits for them
_NO_KEY = RouterError(401, "missing or invalid API key: send Authorization: Bearer <key>",
                      "invalid_api_key")
_openmetrics: Callable[[CollectorRegistry], bytes] = openmetrics.generate_latest


class RouterHandler:
    """Every request enters here (from :mod:`mol_router.httpd.listener`): a dict lookup on
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
            ("GET", "/status"): self.status,
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
        self.rt.metrics.request_done("none", "", "", "none", status, 0.0, None)
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
        """The deployment's experts, ``auto`` and the deployment's name (both let the
        router pick), and the adapters of its adapter namespaces (those the caller's key
        may use), as ``ns/name@latest`` from the catalog; entries known to be
        incompatible with the serving profile (they would answer 422) are left out."""
        rt = self.rt
        tenant = self._tenant(request)
        if tenant is None:
            return error_response(_NO_KEY)
        cfg = rt.config
        created = int(time.time())
        parent = cfg.base_model or None

        def card(ident: str, owner: str, root: str | None, description: str) -> dict[str, Any]:
            return {"id": ident, "object": "model", "created": created, "owned_by": owner,
                    "root": root, "parent": parent, "description": description}

        data: list[dict[str, Any]] = []
        for e in cfg.experts:
            cached = rt.resolver.cached(e.adapter)
            if isinstance(cached, Resolved) and not cached.compatible:
                continue  # it would answer 422 (the reasons are in the request's error)
            root = cached.name if isinstance(cached, Resolved) else e.adapter
            data.append(card(e.name, cfg.deployment, root, e.description))
        picks = ("the router picks the expert" if cfg.mode != "explicit"
                 else f"the default expert ({cfg.default})")
        data.append(card(AUTO, cfg.deployment, None, picks))
        data.append(card(cfg.deployment, cfg.deployment, None, f"same as {AUTO}: {picks}"))
        for ns in cfg.adapter_namespaces:
            if not tenant.may_use(ns):
                continue
            items = await rt.resolver.listing(ns)
            await self._learn_verdicts([f"{i['adapter']}@latest" for i in items
                                        if isinstance(i.get("adapter"), str)])
            for item in items:
                if isinstance(item.get("adapter"), str) and item.get("latest_version"):
                    ref = f"{item['adapter']}@latest"
                    cached = rt.resolver.cached(ref)
                    if isinstance(cached, Resolved) and not cached.compatible:
                        continue
                    tags = ", ".join(item.get("tags") or [])
                    data.append(card(ref, ns, f"{item['adapter']}@v{item['latest_version']}",
                                     "catalog adapter" + (f" (tags: {tags})" if tags else "")))
            if not items:
                data.append(card(f"{ns}/<name>@<ref>", ns, None,
                                 f"any adapter of catalog namespace {ns!r}"))
        return Response(200, orjson.dumps({"object": "list", "data": data}), _JSON)

    async def _learn_verdicts(self, refs: list[str]) -> None:
        """Resolve (so cache, verdict included) the references not resolved yet, a few at
        a time and for at most ``VERDICT_WAIT_S``: the listing has no verdicts, and an
        adapter that would answer 422 must not be offered. Those still unknown are listed."""
        todo = [ref for ref in refs if self.rt.resolver.cached(ref) is None]
        if not todo:
            return
        gate = asyncio.Semaphore(VERDICT_CONCURRENCY)

        async def learn(ref: str) -> None:
            async with gate:
                with contextlib.suppress(Exception):  # unknown or unreachable: listed as is
                    await self.rt.resolver.resolve(ref)

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(learn(r) for r in todo)), VERDICT_WAIT_S)

    def _tenant(self, request: Request) -> Tenant | None:
        """The caller's tenant; None when keys are on and the request has no valid one."""
        if not self.rt.keys.enabled:
            return OPEN
        return self.rt.keys.lookup(request.headers.get("authorization"))

    async def status(self, request: Request) -> Response:
        """The deployment as it runs, for dashboards (the catalog's console): each
        expert's stable and canary references with what they resolve to now and the
        canary weight, each engine's readiness, queue and resident adapters, and the
        trained heads in use."""
        if self._tenant(request) is None:
            return error_response(_NO_KEY)
        rt = self.rt
        cfg = rt.config

        def ref(adapter: str) -> dict[str, Any]:
            cached = rt.resolver.cached(adapter)
            resolved = cached if isinstance(cached, Resolved) else None
            return {"ref": adapter, "resolved": resolved.name if resolved else None,
                    "compatible": resolved.compatible if resolved else None}

        experts = [{"name": e.name, "description": e.description, "stable": ref(e.adapter),
                    "canary": {**ref(e.canary.adapter), "weight": e.canary.weight}
                    if e.canary is not None else None} for e in cfg.experts]
        snapshot = rt.tracker.snapshot() if rt.tracker is not None else {}
        engines = [{"url": url, "ready": s.healthy, "running": s.running, "waiting": s.waiting,
                    "kv_cache_usage": s.kv_cache_usage, "max_lora": s.max_lora,
                    "adapters": sorted(s.resident)} for url, s in snapshot.items()]
        heads: dict[str, Any] = rt.heads.status() if rt.heads is not None else {}
        if heads and cfg.semantic is not None and cfg.semantic.canary is not None:
            heads.setdefault("candidate", {})["weight"] = cfg.semantic.canary.weight
        body = {"deployment": cfg.deployment, "base_model": cfg.base_model, "mode": cfg.mode,
                "default": cfg.default, "experts": experts, "engines": engines,
                "avoided": rt.tracker.adapter_failures.listing() if rt.tracker is not None
                else [],
                # the trained heads (serving and on trial), with why one is missing
                "heads": heads}
        return Response(200, orjson.dumps(body), _JSON)

    async def metrics(self, request: Request) -> Response:
        """Prometheus text, or OpenMetrics (with the latency histograms' exemplars)
        when the scraper's ``Accept`` asks for it, as Prometheus does with exemplar
        storage on."""
        registry = self.rt.metrics.registry
        if "application/openmetrics-text" in (request.headers.get("accept") or ""):
            return Response(200, _openmetrics(registry),
                            {"Content-Type": openmetrics.CONTENT_TYPE_LATEST})
        return Response(200, generate_latest(registry), {"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: Request) -> Response:
        return Response(200, b"ok", {"Content-Type": "text/plain; charset=utf-8"})

    async def readyz(self, request: Request) -> Response:
        """Ready when an engine is ready and the router is not draining; the reason
        otherwise (503). ``semantic`` says whether the experts' examples are embedded
        (``ready``, ``building``, ``failed``, ``unused``, ``off``): not a condition of
        readiness, since requests fall back meanwhile, but what ``mol up`` waits for
        before it prints examples that rely on it."""
        rt = self.rt
        ready = rt.tracker.ready_endpoints() if rt.tracker is not None else []
        ok = bool(ready) and not rt.draining
        body = {"ready": ok, "endpoints": len(ready), "draining": rt.draining,
                "catalog_feed": bool(getattr(rt.resolver, "feed_ok", True)),
                "semantic": rt.semantic.state if rt.semantic is not None else "off"}
        return Response(200 if ok else 503, orjson.dumps(body), _JSON)
