"""Everything a running router holds, and how a new config replaces it.

A config is checked whole before anything changes (policy, key file, catalog token,
references): an invalid file is refused with a log line and the last good config
keeps serving. The pieces request handlers read (``routing``, ``keys``, ``policy``,
``limits``) are immutable and swapped by assignment, so a request in flight keeps a
consistent view.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.clients.tracing import Tracing, make_tracing
from mol_platform.contract.refs import AdapterRef
from mol_platform.contract.router_config import ApiKeysFile, RouterConfig, load_router_config
from mol_router.auto.heads.source import HeadSource
from mol_router.auto.semantic import SemanticSignal
from mol_router.auto.semantic import check as check_semantic
from mol_router.replicas.discovery import EndpointSource, make_endpoint_source
from mol_router.replicas.policy import Policy, make_policy
from mol_router.replicas.pool import EnginePool
from mol_router.replicas.tracker import EngineTracker
from mol_router.reporting.decisions import DecisionRecorder
from mol_router.reporting.usage import UsageReporter
from mol_router.routing.resolver import AdapterResolver, Resolved, Unresolved
from mol_router.routing.rules import Routing
from mol_router.settings import RouterSettings
from mol_router.telemetry.metrics import RouterMetrics
from mol_router.tenants import KeyTable

log = logging.getLogger("mol.router")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-config numbers the request path reads (timeouts in seconds)."""

    body_limit: int
    header_read: float
    body_read: float
    queue: float
    queue_limit: int
    max_attempts: int
    upstream: float
    classifier: float
    connect: float

    @classmethod
    def of(cls, cfg: RouterConfig) -> Limits:
        t = cfg.timeouts
        return cls(cfg.body_limit_bytes, t.header_read, t.body_read, t.queue, cfg.queue_limit,
                   cfg.max_attempts, t.upstream, t.classifier, t.connect)


class StaticResolver:
    """Without a catalog: references must already be immutable (``@vN``)."""

    feed_ok = True

    def __init__(self) -> None:
        self._cache: dict[str, Resolved] = {}

    async def resolve(self, ref: str, traceparent: str | None = None, *,
                      tenant: str = "") -> Resolved:
        hit = self._cache.get(ref)
        if hit is not None:
            return hit
        parsed = AdapterRef.parse(ref)
        if parsed.version is None:
            raise Unresolved(404, f"{ref}: without catalogUrl only @vN references can be "
                             "served")
        if len(self._cache) > 100_000:
            self._cache.clear()
        hit = self._cache[ref] = Resolved(parsed.adapter, parsed.version, "", True)
        return hit

    def warm(self, refs: object) -> None:
        return None

    def cached(self, ref: str) -> Resolved | None:
        return None

    async def listing(self, namespace: str, limit: int = 100) -> list[dict[str, Any]]:
        return []

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


def _read_secret(path: str | None) -> str | None:
    return Path(path).read_text(encoding="utf-8").strip() or None if path else None


def _fingerprint(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


class Runtime:
    def __init__(self, settings: RouterSettings, config: RouterConfig) -> None:
        self.settings = settings
        self.metrics = RouterMetrics(config.deployment, settings.top_adapters,
                                     settings.top_adapters_half_life)
        self.config = config
        self.routing = Routing.build(config)
        self.semantic: SemanticSignal | None = None  # set by apply()
        self._semantic_key = ""
        self.heads: HeadSource | None = None  # the trained heads, when the config names any
        self._heads_key = ""
        self.keys = KeyTable(None)
        self.policy: Policy = make_policy(config.policy, config.policy_knobs)
        self.limits = Limits.of(config)
        self.resolver: AdapterResolver | StaticResolver = StaticResolver()
        self._catalog: AsyncCatalogClient | None = None
        self._catalog_key = ""
        self.pool = EnginePool(settings.max_connections_per_engine)
        self.draining = False  # SIGTERM: readiness fails while requests in flight finish
        self.session: aiohttp.ClientSession | None = None  # health checks and scrapes
        self.tracker: EngineTracker | None = None
        self.endpoints: EndpointSource | None = None
        self._endpoints_key = ""
        self._file_state: tuple[float, int, str] | None = None
        self._reload_task: asyncio.Task[None] | None = None
        self.usage: UsageReporter | None = (UsageReporter(
            lambda: self._catalog, self.metrics.registry, interval=settings.usage_interval,
            max_versions=settings.usage_max_versions, max_batches=settings.usage_max_batches,
            backoff_max=settings.usage_backoff_max) if settings.usage_report else None)
        self.decisions = DecisionRecorder(
            lambda: self._catalog, self.metrics.registry, interval=settings.decisions_interval,
            max_batches=settings.decisions_max_batches,
            backoff_max=settings.decisions_backoff_max)
        # None when tracing is off: the request path then creates no SDK object.
        self.tracing: Tracing | None = make_tracing(
            settings.tracing_service_name, settings.tracing_endpoint,
            settings.tracing_sample_ratio, settings.tracing_trust_parent)

    # --- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(
            cookie_jar=aiohttp.DummyCookieJar(), timeout=aiohttp.ClientTimeout(total=None))
        cfg = self.config
        self.tracker = EngineTracker(self.session, scrape_interval=cfg.scrape_interval_seconds,
                                     eject_after_failures=cfg.eject_after_failures,
                                     readmit_after=cfg.readmit_after_seconds,
                                     max_ejection_percent=cfg.max_ejection_percent,
                                     on_adapter_load=self._adapter_loaded,
                                     on_eject=lambda _e, why: self.metrics.ejected(why))
        try:
            await self.apply(cfg, first=True)
        except BaseException:
            await self.stop()
            raise
        await self.tracker.start()
        if self.usage is not None:
            self.usage.start()
        self.decisions.start()
        self.metrics.ready_child.set_function(lambda: len(self.tracker.ready_endpoints())
                                              if self.tracker is not None else 0)
        self.metrics.avoided.labels(self.metrics.deployment).set_function(
            lambda: self.tracker.adapter_failures.avoided() if self.tracker is not None else 0)
        with contextlib.suppress(OSError):
            self._file_state = self._stat()
        self._reload_task = asyncio.create_task(self._watch_file(), name="mol-config-reload")

    async def stop(self) -> None:
        # Before the catalog client closes: a last delivery of each, side by side, so a
        # catalog that hangs costs the shutdown one bound (5 s), not one per report.
        await asyncio.gather(self.decisions.stop(),
                             *([self.usage.stop()] if self.usage is not None else []))
        if self._reload_task is not None:
            self._reload_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload_task
        if self.endpoints is not None:
            await self.endpoints.stop()
        if self.tracker is not None:
            await self.tracker.stop()
        if self.heads is not None:
            await self.heads.stop()
        if self.semantic is not None:
            self.semantic.close()
        await self.resolver.stop()
        if self._catalog is not None:
            await self._catalog.aclose()
        if self.session is not None:
            await self.session.close()
        await self.pool.close()
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)

    def _adapter_loaded(self, _endpoint: str) -> None:
        self.metrics.loads_child.inc()

    # --- applying a config -------------------------------------------------------------

    async def apply(self, cfg: RouterConfig, *, first: bool = False) -> None:
        """Check ``cfg`` whole, then switch to it. Raises ValueError/OSError, changing
        nothing, when it cannot be served."""
        policy = make_policy(cfg.policy, cfg.policy_knobs)
        keys = ApiKeysFile.load(cfg.api_keys_file) if cfg.api_keys_file else None
        token = _read_secret(cfg.catalog_token_file)
        if cfg.catalog_url is None:
            for ref in Routing.build(cfg).refs():
                if AdapterRef.parse(ref).version is None:
                    raise ValueError(f"{ref}: without catalogUrl every expert must name an "
                                     "immutable version (ns/name@vN)")
        routing = Routing.build(cfg)
        if cfg.endpoint_slice is not None and self.settings.kube_url() is None:
            raise ValueError("endpointSlice needs the Kubernetes API: run in a pod or set "
                             "MOL_ROUTER_KUBE_API_URL")
        check_semantic(cfg)  # a trained head that cannot be used refuses the config
        # Commit point: nothing below can refuse the config.
        catalog_key = _fingerprint(cfg.catalog_url, token, cfg.profile)
        if first or catalog_key != self._catalog_key:
            old_resolver, old_client = self.resolver, self._catalog
            if cfg.catalog_url is not None:
                limits = self.settings.resolver
                self._catalog = AsyncCatalogClient(
                    cfg.catalog_url, token or None, timeout=10.0,
                    max_connections=limits.catalog_connections)
                self.resolver = AdapterResolver(self._catalog, cfg.profile, limits=limits)
            else:
                self._catalog, self.resolver = None, StaticResolver()
            await self.resolver.start()
            self._catalog_key = catalog_key
            if not first:
                await old_resolver.stop()
                if old_client is not None:
                    await old_client.aclose()
        self.resolver.warm(routing.refs())
        self.routing, self.policy, self.limits = routing, policy, Limits.of(cfg)
        heads_changed = await self._apply_heads(cfg, catalog_key, first)
        semantic_key = _fingerprint(cfg.semantic, cfg.timeouts.embedding)
        if first or heads_changed or semantic_key != self._semantic_key:
            # same examples and heads: keep their vectors and the heads fetched
            if self.semantic is not None:
                self.semantic.close()
            self.semantic = (SemanticSignal(cfg.semantic, cfg.timeouts.embedding, self.heads)
                             if cfg.semantic is not None else None)
            self._semantic_key = semantic_key
            if self.semantic is not None and self.session is not None:
                self.semantic.warm(self.session)
        self.keys = KeyTable(keys, self.keys)
        self.config = cfg
        self.decisions.configure(cfg)
        for e in cfg.experts:
            self.metrics.canary_weight.labels(cfg.deployment, e.name).set(
                e.canary.weight if e.canary is not None else 0.0)
        endpoints_key = _fingerprint(cfg.endpoints, cfg.endpoint_slice)
        if first or endpoints_key != self._endpoints_key:
            assert self.tracker is not None
            assert self.session is not None
            if self.endpoints is not None:
                await self.endpoints.stop()
            self.endpoints = make_endpoint_source(cfg, self.settings, self.tracker.set_endpoints)
            await self.endpoints.start()
            self._endpoints_key = endpoints_key

    async def _apply_heads(self, cfg: RouterConfig, catalog_key: str, first: bool) -> bool:
        """The trained heads' source for ``cfg`` (a file, or references into the catalog
        followed through the resolver's event feed); kept while neither the references
        nor the catalog change. True when it was replaced."""
        sem = cfg.semantic
        refs: dict[str, str | None] = {}
        if sem is not None:
            refs = {"stable": sem.head, "candidate": sem.canary.head if sem.canary else None}
        experts = [e.name for e in cfg.experts]
        key = _fingerprint(catalog_key, refs, sem.head_file if sem else None, experts,
                           sem.model if sem else None)
        if not first and key == self._heads_key:
            return False
        old = self.heads
        self.heads = HeadSource.of(sem, experts, self._catalog, on_change=lambda role, h:
                                   self.metrics.head_in_use(role, h.label if h else None,
                                                            h.digest if h else None))
        if self.heads is not None and self.heads.refs \
                and isinstance(self.resolver, AdapterResolver):
            self.resolver.listeners.append(self.heads.on_events)
        self._heads_key = key
        for role in ("stable", "candidate"):
            loaded = self.heads.heads.get(role) if self.heads is not None else None
            self.metrics.head_in_use(role, loaded.label if loaded else None,
                                     loaded.digest if loaded else None)
        if self.heads is not None:
            await self.heads.start()
        if old is not None:
            await old.stop()
            if isinstance(self.resolver, AdapterResolver) \
                    and old.on_events in self.resolver.listeners:
                self.resolver.listeners.remove(old.on_events)
        return True

    # --- hot reload --------------------------------------------------------------------

    def _stat(self) -> tuple[float, int, str]:
        """What identifies the file's content: ConfigMap volumes swap a symlink, so the
        resolved target and the bytes' digest are compared, not only the mtime."""
        path = self.settings.config
        st = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        extra = ""
        for secret in (self.config.api_keys_file, self.config.catalog_token_file):
            if secret:
                with contextlib.suppress(OSError):
                    extra += hashlib.sha256(Path(secret).read_bytes()).hexdigest()
        return st.st_mtime, st.st_size, digest + extra

    async def reload_now(self) -> bool:
        """Read the file again; True when a new config was applied."""
        try:
            state = self._stat()
        except OSError as exc:
            log.error("config %s unreadable (%s); keeping the last good config",
                      self.settings.config, exc)
            return False
        if state == self._file_state:
            return False
        self._file_state = state
        try:
            cfg = load_router_config(self.settings.config)
            await self.apply(cfg)
        except Exception as exc:  # any refusal keeps the running config
            self.metrics.config_reloads.labels("invalid").inc()
            log.error("config %s refused, keeping the last good config: %s",
                      self.settings.config, exc)
            return False
        self.metrics.config_reloads.labels("ok").inc()
        log.info("config %s reloaded", self.settings.config)
        return True

    async def _watch_file(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_interval)
            await self.reload_now()
