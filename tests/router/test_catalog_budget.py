"""How much catalog work resolving references may do, and in what order, against a
scripted catalog on loopback (it can be made slow, or down): a request's first
resolution ahead of background refreshes, a bounded wait for a catalog call, unknown
names kept briefly, capped per tenant and never refreshed, versions an alias named
served during an outage, and the event feed long-polled through the client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from aiohttp import web

from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_router.routing.resolver import AdapterResolver, Unresolved
from mol_router.settings import ResolverLimits

PROFILE = "default.demo"


class ScriptedCatalog:
    """Adapters ``demo/nope*`` are unknown (404); every other name exists, its aliases
    naming ``aliases[ns/name@alias]`` (v1 unless set). Answers after ``delay`` seconds,
    503 while ``down``; ``seen`` lists the references asked, in order of arrival."""

    def __init__(self) -> None:
        self.url = ""
        self.delay = 0.0
        self.down = False
        self.aliases: dict[str, int] = {}
        self.seen: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.waits: list[str] = []
        self.inflight = self.peak = 0  # resolutions being answered now, and at most

    async def resolve(self, request: web.Request) -> web.Response:
        ns, (name, ref) = request.match_info["ns"], request.match_info["rest"].split("@", 1)
        self.seen.append(f"{ns}/{name}@{ref}")
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.inflight -= 1
        if self.down:
            return web.json_response({"detail": "down for maintenance"}, status=503)
        if name.startswith("nope"):
            return web.json_response({"detail": f"no adapter {ns}/{name}"}, status=404)
        version = int(ref[1:]) if ref[:1] == "v" else self.aliases.get(f"{ns}/{name}@{ref}", 1)
        return web.json_response({
            "adapter": f"{ns}/{name}", "version": version, "digest": "sha256:" + "0" * 64,
            "status": "ready", "yank_reason": None, "base": "tiny@main", "files": [],
            "verdict": {"compatible": True, "reasons": []}, "signature": None,
            "signed_by": None, "signer_key": None, "signer_revoked": False,
            "signature_required": False})

    async def feed(self, request: web.Request) -> web.Response:
        if self.down:
            return web.json_response({"detail": "down"}, status=503)
        after, limit = int(request.query["after"]), int(request.query["limit"])
        wait = request.query.get("wait")
        items = [e for e in self.events if e["id"] > after][:limit]
        if wait is not None:
            self.waits.append(wait)
            if not items:
                await asyncio.sleep(min(float(wait), 0.5))
        return web.json_response({"items": items, "last": items[-1]["id"] if items else after})

    def move(self, adapter: str, alias: str, version: int) -> None:
        self.aliases[f"{adapter}@{alias}"] = version
        self.events.append({"id": len(self.events) + 1, "type": "alias.set",
                            "adapter": adapter, "version": version, "alias": alias,
                            "data": None, "created_at": None})


@asynccontextmanager
async def scripted_catalog() -> AsyncIterator[ScriptedCatalog]:
    fake = ScriptedCatalog()
    app = web.Application()
    app.router.add_get("/v1/resolve/{ns}/{rest}", fake.resolve)
    app.router.add_get("/v1/events", fake.feed)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()


@asynccontextmanager
async def resolver_for(fake: ScriptedCatalog, **limits: Any) -> AsyncIterator[AdapterResolver]:
    """A started resolver on the scripted catalog, with a client sized as the router's."""
    settings = ResolverLimits(**limits)
    async with AsyncCatalogClient(fake.url, None, timeout=10.0,
                                  max_connections=settings.catalog_connections) as client:
        resolver = AdapterResolver(client, PROFILE, limits=settings)
        await resolver.start()
        try:
            await _until(lambda: fake.waits != [])  # the feed is being followed
            yield resolver
        finally:
            await resolver.stop()


async def _until(check: Any, within: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_new_reference_resolves_at_once_while_everything_known_is_refreshed() -> None:
    """100,000 unknown names kept and a refresh of every known reference under way: a
    new reference is the next thing the catalog hears of, and resolves within 1 s."""
    async with scripted_catalog() as fake, resolver_for(
            fake, missing_max=100_000, missing_per_tenant=100_000) as resolver:
        for first in range(0, 300, 10):
            await asyncio.gather(*(resolver.resolve(f"demo/ok-{i}@stable")
                                   for i in range(first, first + 10)))
        now = asyncio.get_running_loop().time()
        for i in range(100_000):
            resolver._missing.add(f"demo/nope-{i}@stable", "flood",
                                  Unresolved(404, "unknown"), now)
        assert resolver.cached("demo/nope-99999@stable") is not None
        fake.delay = 0.05
        fake.seen.clear()
        resolver._apply([{"type": "profile.set", "adapter": None}])
        await _until(lambda: len(fake.seen) >= 1)
        started = asyncio.get_running_loop().time()
        found = await resolver.resolve("demo/fresh@stable")
        elapsed = asyncio.get_running_loop().time() - started
        assert found.name == "demo/fresh@v1"
        assert elapsed < 1.0
        # Not behind the refresh: it reached the catalog after at most a lane's worth
        # of refresh calls, with most of the refresh still to come.
        assert fake.seen.index("demo/fresh@stable") <= 2 * resolver.limits.refresh_slots
        assert resolver.pending() > 400
        # every known reference (300 aliases, the 300 versions they name), and only those
        await _until(lambda: len(fake.seen) >= 601, within=20)
        refreshed = [r for r in fake.seen if r != "demo/fresh@stable"]
        assert not [r for r in refreshed if "nope" in r]  # unknown names: never refreshed


async def test_refreshes_go_in_batches_at_a_bounded_rate() -> None:
    async with scripted_catalog() as fake, resolver_for(
            fake, refresh_batch=10, refresh_rate=20.0) as resolver:
        for first in range(0, 50, 10):
            await asyncio.gather(*(resolver.resolve(f"demo/ok-{i}@v1")
                                   for i in range(first, first + 10)))
        fake.seen.clear()
        fake.delay, fake.peak = 0.05, 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        resolver._apply([{"type": "profile.set", "adapter": None}])
        await _until(lambda: len(fake.seen) == 50)
        # 50 references at 20 a second: the fifth batch of ten starts after 2 s, and
        # at most a lane's worth is asked at once
        assert loop.time() - started >= 2.0
        assert fake.peak <= resolver.limits.refresh_slots


async def test_unknown_names_are_kept_briefly_dropped_by_an_event_and_never_refreshed(
        ) -> None:
    async with scripted_catalog() as fake, resolver_for(fake, missing_ttl=0.5) as resolver:
        for _ in range(3):
            with pytest.raises(Unresolved) as err:
                await resolver.resolve("demo/nope-1@stable")
            assert err.value.status == 404
        assert fake.seen.count("demo/nope-1@stable") == 1
        await resolver.resolve("demo/ok@stable")
        resolver._apply([{"type": "profile.set", "adapter": None}])
        await _until(lambda: fake.seen.count("demo/ok@stable") == 2)
        assert fake.seen.count("demo/nope-1@stable") == 1
        await asyncio.sleep(0.55)  # expired: asked again
        assert resolver.cached("demo/nope-1@stable") is None
        with pytest.raises(Unresolved):
            await resolver.resolve("demo/nope-1@stable")
        assert fake.seen.count("demo/nope-1@stable") == 2
        # published meanwhile: the event drops the 404 at once
        resolver._apply([{"type": "version.published", "adapter": "demo/nope-1"}])
        assert resolver.cached("demo/nope-1@stable") is None


async def test_a_tenant_past_its_cap_of_unknown_names_gets_429_and_nobody_loses_theirs(
        ) -> None:
    async with scripted_catalog() as fake, resolver_for(
            fake, missing_per_tenant=2, missing_ttl=30.0) as resolver:
        for name in ("nope-1", "nope-2"):
            with pytest.raises(Unresolved) as err:
                await resolver.resolve(f"demo/{name}@stable", tenant="flood")
            assert err.value.status == 404
        with pytest.raises(Unresolved) as err:
            await resolver.resolve("demo/nope-3@stable", tenant="flood")
        assert err.value.status == 429
        assert "demo/nope-3@stable" not in fake.seen  # past the cap: no catalog call
        assert err.value.retry_after is not None
        assert 0 < err.value.retry_after <= 30.0
        assert "too many unknown adapter names" in err.value.detail
        assert resolver.cached("demo/nope-3@stable") is None  # not kept
        with pytest.raises(Unresolved) as err:
            await resolver.resolve("demo/nope-4@stable", tenant="other")
        assert err.value.status == 404
        # nobody's entries went; a new adapter is looked up for others, and names of
        # adapters already known still resolve for the capped tenant
        for ref in ("demo/nope-1@stable", "demo/nope-2@stable", "demo/nope-4@stable"):
            assert isinstance(resolver.cached(ref), Unresolved)
        with pytest.raises(Unresolved) as err:
            await resolver.resolve("demo/ok@stable", tenant="flood")
        assert err.value.status == 429
        assert (await resolver.resolve("demo/ok@stable", tenant="other")).name == "demo/ok@v1"
        assert (await resolver.resolve("demo/ok@v2", tenant="flood")).name == "demo/ok@v2"


async def test_a_first_resolution_waits_a_bounded_time_for_a_catalog_call() -> None:
    async with scripted_catalog() as fake, resolver_for(
            fake, request_slots=1, slot_wait=0.2) as resolver:
        fake.delay = 2.0
        loop = asyncio.get_running_loop()
        slow = asyncio.create_task(resolver.resolve("demo/ok-1@stable"))
        await _until(lambda: "demo/ok-1@stable" in fake.seen)
        started = loop.time()
        with pytest.raises(Unresolved) as err:
            await resolver.resolve("demo/ok-2@stable")
        assert loop.time() - started < 1.0
        assert err.value.status == 0
        assert err.value.retry_after == 0.2
        assert "busy" in err.value.detail
        assert (await slow).name == "demo/ok-1@v1"


async def test_a_name_of_a_known_adapter_goes_ahead_of_names_nobody_has_seen() -> None:
    """A flood of made-up names fills the request lane: a new version of an adapter
    already served takes the next free call, ahead of the flood's queue."""
    async with scripted_catalog() as fake, resolver_for(
            fake, request_slots=1, slot_wait=5.0) as resolver:
        await resolver.resolve("demo/ok@stable")
        fake.delay = 0.3
        flood = [asyncio.create_task(resolver.resolve(f"demo/nope-{i}@stable"))
                 for i in range(6)]
        await _until(lambda: "demo/nope-0@stable" in fake.seen)
        await asyncio.sleep(0.05)  # the other five queue for the one call
        assert (await resolver.resolve("demo/ok@v2")).name == "demo/ok@v2"
        assert fake.seen.index("demo/ok@v2") == fake.seen.index("demo/nope-0@stable") + 1
        for task in flood:
            with pytest.raises(Unresolved):
                await task


async def test_the_router_answers_429_and_503_with_retry_after(
        router_config: Any, start_router: Any) -> None:
    async with scripted_catalog() as fake:
        cfg = router_config(["http://127.0.0.1:9"], catalog_url=fake.url, profile=PROFILE,
                            adapter_namespaces=["demo"])
        limits = ResolverLimits(missing_per_tenant=1, request_slots=1, slot_wait=0.2)
        async with start_router(cfg, resolver=limits) as router, \
                httpx.AsyncClient(timeout=10) as http:
            url = router.url + "/v1/chat/completions"
            msg = [{"role": "user", "content": "hi"}]
            fake.delay = 1.5
            slow = asyncio.create_task(
                http.post(url, json={"model": "demo/ok-1@stable", "messages": msg}))
            await _until(lambda: "demo/ok-1@stable" in fake.seen)
            r = await http.post(url, json={"model": "demo/ok-2@stable", "messages": msg})
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "catalog_unavailable"
            assert "busy" in r.json()["error"]["message"]
            assert r.headers["Retry-After"] == "1"
            slow.cancel()  # resolved, it would wait for an engine: there is none
            with contextlib.suppress(asyncio.CancelledError):
                await slow
            fake.delay = 0.0
            r = await http.post(url, json={"model": "demo/nope-a@stable", "messages": msg})
            assert r.status_code == 404
            r = await http.post(url, json={"model": "demo/nope-b@stable", "messages": msg})
            assert r.status_code == 429, r.text
            assert r.json()["error"]["code"] == "too_many_unknown_adapters"
            assert int(r.headers["Retry-After"]) >= 1


async def test_versions_an_alias_named_are_served_while_the_catalog_is_down() -> None:
    """Versions are immutable: ``a0@v1``, learnt by resolving ``a0@stable``, and ``a0@v2``,
    learnt when the alias moved, both serve while the catalog is down."""
    async with scripted_catalog() as fake, resolver_for(fake) as resolver:
        assert (await resolver.resolve("demo/a0@stable")).name == "demo/a0@v1"
        fake.move("demo/a0", "stable", 2)
        await _until(lambda: getattr(resolver.cached("demo/a0@stable"), "version", 0) == 2)
        fake.down = True
        asked = len(fake.seen)
        assert (await resolver.resolve("demo/a0@v1")).name == "demo/a0@v1"
        assert (await resolver.resolve("demo/a0@v2")).name == "demo/a0@v2"
        assert (await resolver.resolve("demo/a0@stable")).name == "demo/a0@v2"
        assert len(fake.seen) == asked  # all from what was known
        with pytest.raises(Unresolved) as err:
            await resolver.resolve("demo/a0@v3")  # never seen: cannot be vouched for
        assert err.value.status == 0


async def test_the_feed_is_long_polled_through_the_client() -> None:
    async with scripted_catalog() as fake:
        async with AsyncCatalogClient(fake.url, None, timeout=0.3) as client:
            # the catalog holds the call 0.5 s, past the client's 0.3 s: the wait
            # lengthens the call's time limit
            page = await client.events(after=0, limit=10, wait=0.5)
        assert page.items == []
        assert page.last == 0
        assert fake.waits == ["0.5"]
        fake.waits.clear()
        async with resolver_for(fake, poll_wait=7.0):
            pass
        assert fake.waits[0] == "7.0"
