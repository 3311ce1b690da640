"""Adapter references -> immutable names, through the catalog, cached.

The catalog is the source of truth for what ``acme/coding@stable`` means. The router
asks it once per reference, keeps the answer, and follows the catalog's event feed
(long-polled) to refresh exactly the references an event touches, so a moved alias
takes effect within about a second without a per-request catalog call. When the
catalog cannot be reached, cached answers keep serving; only references never seen
before fail (503). Refreshing happens beside the request path: a request never
waits for a refresh, only for a first resolution.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mol_platform.clients.catalog import CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract import catalog_models

log = logging.getLogger("mol.router.resolver")

_MAX_ENTRIES = 100_000
_RETRY_SECONDS = 1.0
_LISTING_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a reference means now: the immutable name engines get, and the verdict."""

    adapter: str  # ns/name
    version: int
    digest: str
    compatible: bool
    reasons: tuple[dict[str, Any], ...] = ()
    name: str = field(init=False, compare=False)
    """``ns/name@vN``, built once: every proxied request reads it several times."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.adapter}@v{self.version}")


class Unresolved(Exception):
    """A reference the catalog could not resolve: ``status`` 404 (unknown) or 0
    (catalog unreachable and nothing cached)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _parse(body: catalog_models.Resolved) -> Resolved:
    verdict = body.verdict
    return Resolved(adapter=body.adapter, version=body.version, digest=body.digest,
                    compatible=verdict is None or verdict.compatible,
                    reasons=tuple(r.model_dump() for r in verdict.reasons) if verdict else ())


class AdapterResolver:
    """Cache of ``ref -> Resolved | Unresolved(404)`` kept fresh from the event feed."""

    def __init__(self, client: AsyncCatalogClient, profile: str | None, *,
                 poll_wait: float = 10.0, full_refresh_seconds: float = 300.0) -> None:
        self.client = client
        self.profile = profile
        self.poll_wait = poll_wait
        self.full_refresh_seconds = full_refresh_seconds
        self._cache: dict[str, Resolved | Unresolved] = {}
        self.max_entries = _MAX_ENTRIES  # bounded whatever the traffic; oldest out first
        self._inflight: dict[str, asyncio.Future[Resolved | Unresolved]] = {}
        self._after: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._warming: set[asyncio.Task[None]] = set()
        self._listings: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self.feed_ok = False  # True while the event feed is being followed
        self._warned = False
        # Others following the same feed (the trained heads' source): one long poll per
        # router, whatever follows it.
        self.listeners: list[Callable[[list[dict[str, Any]]], None]] = []

    # --- request path ----------------------------------------------------------------

    def cached(self, ref: str) -> Resolved | Unresolved | None:
        return self._cache.get(ref)

    async def resolve(self, ref: str, traceparent: str | None = None) -> Resolved:
        """The cached answer, or one catalog call shared by concurrent askers (the
        first asker's ``traceparent`` goes with it)."""
        hit = self._cache.get(ref)
        if hit is None:
            hit = await self._fetch_shared(ref, traceparent)
        if isinstance(hit, Unresolved):
            raise hit
        return hit

    async def _fetch_shared(self, ref: str, traceparent: str | None = None
                            ) -> Resolved | Unresolved:
        fut = self._inflight.get(ref)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._inflight[ref] = fut
            try:
                result = await self._fetch(ref, traceparent)
                fut.set_result(result)
            except BaseException as exc:  # cancellation included: wake the others
                fut.set_exception(exc)
                fut.exception()  # mark retrieved when nobody else waits
                raise
            finally:
                self._inflight.pop(ref, None)
            return result
        return await asyncio.shield(fut)

    async def _fetch(self, ref: str, traceparent: str | None = None) -> Resolved | Unresolved:
        """Ask the catalog; 404 answers are cached too (an event clears them)."""
        try:
            result: Resolved | Unresolved = _parse(await self.client.resolve(
                ref, self.profile, traceparent=traceparent))
        except CatalogError as exc:
            if exc.status == 404:
                result = Unresolved(404, exc.detail)
            else:
                old = self._cache.get(ref)
                if old is not None:
                    return old  # unreachable or failing: keep serving what we know
                return Unresolved(0, f"the catalog could not resolve {ref}: {exc.detail}")
        if ref not in self._cache:
            while len(self._cache) >= self.max_entries:
                # the oldest answer goes, one at a time: clearing all would leave every
                # reference to the catalog at once, and none if it is down right then
                del self._cache[next(iter(self._cache))]
        self._cache[ref] = result
        return result

    async def listing(self, namespace: str, limit: int = 100) -> list[dict[str, Any]]:
        """Adapters of a namespace for ``/v1/models`` (first ``limit``), cached 30 s; the
        last answer (or nothing) while the catalog is unreachable."""
        loop = asyncio.get_running_loop()
        hit = self._listings.get(namespace)
        if hit is not None and loop.time() - hit[0] < _LISTING_SECONDS:
            return hit[1]
        try:
            response = await self.client.request(
                "GET", "/v1/adapters", params={"namespace": namespace, "limit": limit})
            items = [i for i in response.json().get("items") or () if isinstance(i, dict)]
        except (CatalogError, ValueError) as exc:
            log.info("cannot list namespace %s: %s", namespace, exc)
            return hit[1] if hit is not None else []
        self._listings[namespace] = (loop.time(), items)
        return items

    # --- keeping it fresh --------------------------------------------------------------

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._follow(), name="mol-resolver-feed"))
        self._tasks.append(asyncio.create_task(self._periodic(), name="mol-resolver-refresh"))

    async def stop(self) -> None:
        self._tasks.extend(self._warming)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def warm(self, refs: Iterable[str]) -> None:
        """Resolve these in the background (the experts of a new config)."""
        for ref in refs:
            if ref not in self._cache and ref not in self._inflight:
                task = asyncio.create_task(self._warm_one(ref))
                self._warming.add(task)
                task.add_done_callback(self._warming.discard)

    async def _warm_one(self, ref: str) -> None:
        with contextlib.suppress(Unresolved, CatalogError):
            await self._fetch_shared(ref)

    async def refresh(self, refs: Iterable[str]) -> None:
        await asyncio.gather(*(self._fetch(r) for r in list(refs)), return_exceptions=True)

    async def _tail(self) -> int:
        """The newest event id: past events say nothing about an empty cache.
        ``after=N`` answers ``last == N`` exactly when no event is newer than N."""
        lo, hi = 0, 1
        while (await self.client.events(after=hi, limit=1)).last != hi:
            lo, hi = hi, hi * 2
        while lo < hi:
            mid = (lo + hi) // 2
            if (await self.client.events(after=mid, limit=1)).last == mid:
                hi = mid
            else:
                lo = mid + 1
        return lo

    async def _follow(self) -> None:
        while True:
            try:
                if self._after is None:
                    self._after = await self._tail()
                    # Anything cached before we knew the tail may predate an event.
                    await self.refresh(list(self._cache))
                response = await self.client.request(
                    "GET", "/v1/events",
                    params={"after": self._after, "limit": 500, "wait": self.poll_wait},
                    timeout=self.poll_wait + 10.0)
                page = response.json()
                self.feed_ok = True
                await self._apply(page.get("items") or [])
                self._after = int(page.get("last", self._after))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the catalog is down or answering nonsense
                if self.feed_ok or not self._warned:
                    log.warning("catalog event feed unavailable (%s); serving from cache, "
                                "retrying every %.0f s", exc or type(exc).__name__,
                                _RETRY_SECONDS)
                self.feed_ok, self._warned = False, True
                await asyncio.sleep(_RETRY_SECONDS)

    async def _apply(self, events: list[dict[str, Any]]) -> None:
        for listener in self.listeners:
            listener(events)
        stale: set[str] = set()
        for event in events:
            if str(event.get("type", "")).startswith("router_head."):
                continue  # a router head's, not an adapter's
            adapter = event.get("adapter")
            if event.get("type") == "profile.set" or adapter is None:
                stale.update(self._cache)  # verdicts may have changed for everything
                continue
            prefix = f"{adapter}@"
            stale.update(r for r in self._cache if r.startswith(prefix))
        if stale:
            log.info("catalog changes: refreshing %d reference(s)", len(stale))
            await self.refresh(stale)

    async def _periodic(self) -> None:
        """A slow full refresh: a safety net should an event ever be missed."""
        while True:
            await asyncio.sleep(self.full_refresh_seconds)
            await self.refresh(list(self._cache))
