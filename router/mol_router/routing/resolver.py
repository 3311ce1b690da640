"""Adapter references -> immutable names, through the catalog, cached.

The catalog is the source of truth for what ``acme/coding@stable`` means. The router
asks it once per reference, keeps the answer, and follows the catalog's event feed
(long-polled) to refresh exactly the references an event touches, so a moved alias
takes effect within about a second without a per-request catalog call. When the
catalog cannot be reached, cached answers keep serving, and so does every version an
alias has been seen to name (versions are immutable); only references never seen
before fail (503).

A request's first resolution never waits behind background work: it has its own lane
of catalog calls (:class:`mol_router.settings.ResolverLimits`), waits a bounded time for a slot
(then 503 with ``Retry-After``), and refreshes go in batches at a bounded rate on a lane
of their own, event-touched references first. Unknown names are kept apart, briefly and
per tenant (:mod:`mol_router.routing.missing`), and never refreshed, so made-up names
cannot slow anyone down nor push known answers out.
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
from mol_router.routing.lanes import Lane
from mol_router.routing.missing import MissingNames, adapter_of
from mol_router.settings import ResolverLimits

log = logging.getLogger("mol.router.resolver")

_RETRY_SECONDS = 1.0
_LISTING_SECONDS = 30.0
_REFRESHER = ""  # the tenant of 404s a refresh finds


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
    """A reference that cannot be served now: ``status`` 404 (unknown), 429 (the tenant
    asked for too many unknown names) or 0 (catalog unreachable or busy, nothing
    cached); ``retry_after``: seconds worth waiting, when known."""

    def __init__(self, status: int, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


def _parse(body: catalog_models.Resolved) -> Resolved:
    verdict = body.verdict
    return Resolved(adapter=body.adapter, version=body.version, digest=body.digest,
                    compatible=verdict is None or verdict.compatible,
                    reasons=tuple(r.model_dump() for r in verdict.reasons) if verdict else ())


class AdapterResolver:
    """Cache of ``ref -> Resolved`` (and, briefly, unknown names) kept fresh from the
    event feed. The client should allow ``limits.catalog_connections`` calls at once."""

    def __init__(self, client: AsyncCatalogClient, profile: str | None, *,
                 limits: ResolverLimits | None = None) -> None:
        self.client = client
        self.profile = profile
        self.limits = limits = limits or ResolverLimits()
        self.max_entries = limits.max_known  # bounded whatever the traffic; oldest out first
        self._known: dict[str, Resolved] = {}
        self._by_adapter: dict[str, set[str]] = {}
        self._missing: MissingNames[Unresolved] = MissingNames(
            limits.missing_ttl, limits.missing_max, limits.missing_per_tenant)
        self._inflight: dict[str, asyncio.Future[Resolved | Unresolved]] = {}
        self._request_slots = Lane(limits.request_slots)
        self._refresh_slots = asyncio.Semaphore(limits.refresh_slots)
        self._listing_slots = asyncio.Semaphore(limits.listing_slots)
        # references waiting for a background refresh: those an event touched first
        self._urgent: dict[str, None] = {}
        self._routine: dict[str, None] = {}
        self._wake = asyncio.Event()
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
        hit = self._known.get(ref)
        if hit is not None:
            return hit
        return self._missing.get(ref, asyncio.get_running_loop().time())

    def pending(self) -> int:
        """References waiting for a background refresh."""
        return len(self._urgent) + len(self._routine)

    async def resolve(self, ref: str, traceparent: str | None = None, *,
                      tenant: str = "") -> Resolved:
        """The cached answer, or one catalog call shared by concurrent askers (the
        first asker's ``traceparent`` goes with it); ``tenant`` is counted for the
        unknown names it asks for."""
        hit = self._known.get(ref)
        if hit is not None:
            return hit
        now = asyncio.get_running_loop().time()
        miss = self._missing.get(ref, now)
        if miss is not None:
            raise miss
        if self._missing.full(tenant, now) and adapter_of(ref) not in self._by_adapter:
            # past its cap, a tenant's names of adapters nobody has seen cost no catalog
            # call: likely more made-up names (those of known adapters still resolve)
            raise self._over_cap(ref, tenant, now)
        result = await self._fetch_shared(ref, traceparent, tenant)
        if isinstance(result, Unresolved):
            raise result
        return result

    async def _fetch_shared(self, ref: str, traceparent: str | None = None,
                            tenant: str = "", *, background: bool = False
                            ) -> Resolved | Unresolved:
        fut = self._inflight.get(ref)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._inflight[ref] = fut
            try:
                if background:  # nobody waits on it: the refresh lane
                    async with self._refresh_slots:
                        result = await self._fetch(ref, traceparent, tenant)
                else:
                    result = await self._first(ref, traceparent, tenant)
                fut.set_result(result)
            except BaseException as exc:  # cancellation included: wake the others
                fut.set_exception(exc)
                fut.exception()  # mark retrieved when nobody else waits
                raise
            finally:
                self._inflight.pop(ref, None)
            return result
        return await asyncio.shield(fut)

    async def _first(self, ref: str, traceparent: str | None, tenant: str
                     ) -> Resolved | Unresolved:
        """A first resolution, on the request lane: a bounded wait for a slot, ahead of
        names of adapters nobody has seen."""
        wait = self.limits.slot_wait
        known = adapter_of(ref) in self._by_adapter
        if not await self._request_slots.acquire(wait, urgent=known):
            return Unresolved(0, f"the catalog is busy: no call free within {wait:g} s",
                              retry_after=wait)
        try:
            return await self._fetch(ref, traceparent, tenant)
        finally:
            self._request_slots.release()

    async def _fetch(self, ref: str, traceparent: str | None = None,
                     tenant: str = _REFRESHER) -> Resolved | Unresolved:
        """Ask the catalog (the caller holds a lane's slot). A 404 is kept briefly; a
        tenant past its cap of those gets 429 (and nothing kept)."""
        loop = asyncio.get_running_loop()
        try:
            found = _parse(await self.client.resolve(ref, self.profile,
                                                     traceparent=traceparent))
        except CatalogError as exc:
            if exc.status != 404:
                old = self._known.get(ref)
                if old is not None:
                    return old  # unreachable or failing: keep serving what we know
                return Unresolved(0, f"the catalog could not resolve {ref}: {exc.detail}")
            self._forget(ref)
            missing = Unresolved(404, exc.detail)
            if self._missing.add(ref, tenant, missing, loop.time()):
                return missing
            return self._over_cap(ref, tenant, loop.time())
        self._keep(ref, found)
        if found.name != ref:
            self._keep(found.name, found)  # the version is immutable: known for good
        return found

    def _over_cap(self, ref: str, tenant: str, now: float) -> Unresolved:
        limits = self.limits
        return Unresolved(429, f"too many unknown adapter names: this tenant asked for "
                          f"{limits.missing_per_tenant} names the catalog does not know in "
                          f"the last {limits.missing_ttl:g} s; {ref} is not looked up until "
                          "some expire (names of adapters already served still resolve)",
                          retry_after=self._missing.retry_after(tenant, now))

    def _keep(self, ref: str, found: Resolved) -> None:
        self._missing.discard(ref)
        if ref not in self._known:
            while len(self._known) >= self.max_entries:
                # the oldest answer goes, one at a time: clearing all would leave every
                # reference to the catalog at once, and none if it is down right then
                self._forget(next(iter(self._known)))
            self._by_adapter.setdefault(adapter_of(ref), set()).add(ref)
        self._known[ref] = found

    def _forget(self, ref: str) -> None:
        if self._known.pop(ref, None) is None:
            return
        refs = self._by_adapter[adapter_of(ref)]
        refs.discard(ref)
        if not refs:
            del self._by_adapter[adapter_of(ref)]

    async def listing(self, namespace: str, limit: int = 100) -> list[dict[str, Any]]:
        """Adapters of a namespace for ``/v1/models`` (first ``limit``), cached 30 s; the
        last answer (or nothing) while the catalog is unreachable."""
        loop = asyncio.get_running_loop()
        hit = self._listings.get(namespace)
        if hit is not None and loop.time() - hit[0] < _LISTING_SECONDS:
            return hit[1]
        try:
            async with self._listing_slots:
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
        self._tasks.append(asyncio.create_task(self._refresher(),
                                               name="mol-resolver-refresher"))

    async def stop(self) -> None:
        self._tasks.extend(self._warming)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def warm(self, refs: Iterable[str]) -> None:
        """Resolve these in the background (the experts of a new config), on the refresh
        lane: requests keep theirs."""
        for ref in refs:
            if ref not in self._known and ref not in self._inflight:
                task = asyncio.create_task(self._warm_one(ref))
                self._warming.add(task)
                task.add_done_callback(self._warming.discard)

    async def _warm_one(self, ref: str) -> None:
        with contextlib.suppress(Unresolved, CatalogError):
            await self._fetch_shared(ref, background=True)

    async def refresh(self, refs: Iterable[str]) -> None:
        """Ask the catalog again about these known references, on the refresh lane
        (unknown names are not refreshed: they expire)."""
        async def one(ref: str) -> None:
            async with self._refresh_slots:
                await self._fetch(ref)

        await asyncio.gather(*(one(r) for r in list(refs) if r in self._known),
                             return_exceptions=True)

    def queue(self, refs: Iterable[str], *, urgent: bool = False) -> None:
        """Refresh these in the background: urgent ones (an event touched them) before
        the rest, in batches at ``limits.refresh_rate``; a reference waits once."""
        target = self._urgent if urgent else self._routine
        for ref in refs:
            if ref not in self._urgent:
                target[ref] = None
                if urgent:
                    self._routine.pop(ref, None)
        self._wake.set()

    def _batch(self) -> list[str]:
        batch: list[str] = []
        for source in (self._urgent, self._routine):
            while source and len(batch) < self.limits.refresh_batch:
                ref = next(iter(source))
                del source[ref]
                batch.append(ref)
        return batch

    async def _refresher(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while batch := self._batch():
                started = loop.time()
                await self.refresh(batch)
                pause = len(batch) / self.limits.refresh_rate - (loop.time() - started)
                if pause > 0:
                    await asyncio.sleep(pause)

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
                    self._missing.clear()
                    self.queue(list(self._known), urgent=True)
                page = await self.client.events(after=self._after, limit=500,
                                                wait=self.limits.poll_wait)
                self.feed_ok = True
                self._apply([event.model_dump() for event in page.items])
                self._after = page.last
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the catalog is down or answering nonsense
                if self.feed_ok or not self._warned:
                    log.warning("catalog event feed unavailable (%s); serving from cache, "
                                "retrying every %.0f s", exc or type(exc).__name__,
                                _RETRY_SECONDS)
                self.feed_ok, self._warned = False, True
                await asyncio.sleep(_RETRY_SECONDS)

    def _apply(self, events: list[dict[str, Any]]) -> None:
        for listener in self.listeners:
            listener(events)
        stale: set[str] = set()
        everything = False
        for event in events:
            if str(event.get("type", "")).startswith("router_head."):
                continue  # a router head's, not an adapter's
            adapter = event.get("adapter")
            if event.get("type") == "profile.set" or adapter is None:
                everything = True  # verdicts may have changed for everything known
                continue
            self._missing.discard_adapter(str(adapter))  # published: ask again
            stale.update(self._by_adapter.get(str(adapter), ()))
        if stale:
            log.info("catalog changes: refreshing %d reference(s)", len(stale))
            self.queue(stale, urgent=True)
        if everything:
            log.info("catalog changes: refreshing all %d known reference(s)",
                     len(self._known))
            self.queue(list(self._known))

    async def _periodic(self) -> None:
        """A slow full refresh: a safety net should an event ever be missed."""
        while True:
            await asyncio.sleep(self.limits.full_refresh)
            self.queue(list(self._known))
