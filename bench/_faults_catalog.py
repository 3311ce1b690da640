"""Catalog faults on the simulated fleet (bench/faults.py): a slow catalog while new
references arrive, an alias moved and then the catalog down, a flood of unknown names,
and the usage outbox through an outage.

Each takes the shared catalog's process (some stop it, and all leave it as they found
it: aliases moved back, the process running), starts its own engines and router at
the production defaults, and returns a :class:`_faults_scenarios.Row`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from _faults_load import Traffic
from _faults_scenarios import Row, Shape, drive, fleet, since
from _faults_stack import NAMESPACE, PROFILE, Proc
from _faults_webhooks import webhook_internal
from _report import percentile
from mol_testkit.lora import SyntheticLlama

SLOW_S = 3.0  # the slow catalog's answer time
FLOOD_NAMES = 3000  # unknown names in the flood
A0 = f"{NAMESPACE}/a0"


def _fresh_refs(expect: dict[str, str], *, served: bool = False) -> list[str]:
    """Seeded references the traffic never asks for (first asked in the row); ``served``:
    only those of adapters the traffic uses (new versions and aliases of them)."""
    used = {r.partition("@")[0] for r in expect}
    refs = [f"{NAMESPACE}/a{i}@{tag}" for i in range(4) for tag in ("v2", "latest", "v1")]
    return [r for r in refs if r not in expect and (not served or r.partition("@")[0] in used)]


async def _ask(c: httpx.AsyncClient, url: str, ref: str) -> tuple[str, float]:
    """(what came back: the version served or the error code, seconds) for one request."""
    started = time.monotonic()
    try:
        r = await c.post(url + "/v1/chat/completions", json={
            "model": ref, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    except httpx.HTTPError as exc:
        return type(exc).__name__, since(started)
    if r.status_code == 200:
        return r.headers.get("x-mol-adapter-version", "200"), since(started)
    try:
        return f"{r.status_code} {r.json()['error']['code']}", since(started)
    except (ValueError, KeyError, TypeError):
        return str(r.status_code), since(started)


async def _set_profile(catalog: str) -> None:
    """PUT the serving profile as seeded: a ``profile.set`` event, so every router
    refreshes every reference it knows."""
    model = SyntheticLlama()
    async with httpx.AsyncClient(base_url=catalog, timeout=30) as c:
        r = await c.put(f"/v1/serving-profiles/{PROFILE}", json={
            "base_model": f"{model.name}@{model.revision}", "max_lora_rank": 8,
            "max_loras": 8, "engine": "vllm"})
        r.raise_for_status()


async def _move(catalog: str, version: int) -> None:
    async with httpx.AsyncClient(base_url=catalog, timeout=30) as c:
        r = await c.put(f"/v1/adapters/{A0}/aliases/stable", json={"version": version})
        r.raise_for_status()


@contextlib.asynccontextmanager
async def slow_proxy(catalog: str) -> AsyncIterator[dict[str, Any]]:
    """An HTTP proxy to the catalog on loopback whose ``/v1/resolve`` answers take
    ``state["delay"]`` seconds (0 at first); yields the state, its ``url`` included."""
    state: dict[str, Any] = {"delay": 0.0}
    http = httpx.AsyncClient(base_url=catalog, timeout=60)

    async def forward(request: web.Request) -> web.Response:
        if request.path.startswith("/v1/resolve/") and state["delay"]:
            await asyncio.sleep(state["delay"])
        r = await http.request(request.method, request.path_qs, content=await request.read(),
                               headers={k: v for k, v in request.headers.items()
                                        if k.lower() not in ("host", "content-length")})
        return web.Response(status=r.status_code, body=r.content,
                            content_type=r.headers.get("content-type", "application/json")
                            .split(";")[0])

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        await runner.cleanup()
        await http.aclose()


def _latencies(results: list[tuple[str, float]]) -> str:
    secs = [s for _, s in results]
    if not secs:
        return "none sent"
    kinds: dict[str, int] = {}
    for what, _ in results:
        key = "served" if "@v" in what else what
        kinds[key] = kinds.get(key, 0) + 1
    return (f"{len(secs)} sent ({', '.join(f'{n} {k}' for k, n in kinds.items())}), "
            f"p50 {percentile(secs, 50):.2f} s, max {max(secs):.2f} s")


async def slow_catalog(work: Path, catalog: Proc, expect: dict[str, str],
                       shape: Shape) -> Row:
    """The catalog answers resolutions in 3 s (a proxy in front of it). 96 unknown names
    are cached first; then a serving-profile change makes the router refresh what it
    knows (3 s a call) while references it never saw arrive, one every 0.5 s: each should
    take one catalog answer, not wait behind the refresh."""
    async with slow_proxy(catalog.url) as proxy:
        with fleet(work / "catalog-slow", proxy["url"], shape) as f:
            async with httpx.AsyncClient(timeout=60) as c:
                await asyncio.gather(*(_ask(c, f.url, r) for r in expect))
                gate = asyncio.Semaphore(8)

                async def unknown(i: int) -> None:
                    async with gate:
                        await _ask(c, f.url, f"{NAMESPACE}/nope-{i}@stable")

                await asyncio.gather(*(unknown(i) for i in range(96)))
            proxy["delay"] = SLOW_S
            fresh = _fresh_refs(expect)

            async def fault(_t: Traffic) -> list[tuple[str, float]]:
                await asyncio.sleep(shape.seconds / 4)
                await _set_profile(catalog.url)
                async with httpx.AsyncClient(timeout=60) as c:
                    tasks = []
                    for ref in fresh:
                        tasks.append(asyncio.create_task(_ask(c, f.url, ref)))
                        await asyncio.sleep(0.5)
                    return list(await asyncio.gather(*tasks))

            seconds = max(shape.seconds, shape.seconds / 4 + 0.5 * len(fresh) + SLOW_S + 2)
            traffic, results = await drive(f, expect, fault, seconds)
    return Row(f"slow catalog ({SLOW_S:g} s a resolution), new references arriving",
               "dependency", traffic.outcomes, f.retried(),
               notes=[f"new references during a full refresh: {_latencies(results)}",
                      "96 unknown names cached before; already-resolved references: the "
                      "traffic"],
               extra={"new_ref_max_s": round(max((s for _, s in results), default=0), 2)})


async def alias_moved_then_catalog_down(work: Path, catalog: Proc, expect: dict[str, str],
                                        shape: Shape) -> Row:
    """``a0@stable`` moved from v1 to v2; once the router serves v2, the catalog stops.
    ``a0@v1`` (known through the alias before), ``a0@v2`` and ``a0@stable`` are asked for
    during the outage: versions are immutable, so all three should serve."""
    steady = {r: v for r, v in expect.items() if not r.startswith(A0 + "@")}
    seconds = shape.catalog_down_s + shape.seconds
    with fleet(work / "alias-outage", catalog.url, shape) as f:
        marks: dict[str, Any] = {}

        async def fault(_t: Traffic) -> list[str]:
            async with httpx.AsyncClient(timeout=30) as c:
                marks["before"] = (await _ask(c, f.url, f"{A0}@stable"))[0]
                await asyncio.sleep(shape.seconds / 4)
                moved = time.monotonic()
                await _move(catalog.url, 2)
                while (await _ask(c, f.url, f"{A0}@stable"))[0] != f"{A0}@v2":
                    if since(moved) > 10:
                        break
                    await asyncio.sleep(0.05)
                marks["moved_s"] = since(moved)
                await asyncio.to_thread(catalog.terminate)
                down = time.monotonic()
                seen: list[str] = []
                while not seen or since(down) < shape.catalog_down_s:
                    for ref in (f"{A0}@v1", f"{A0}@v2", f"{A0}@stable"):
                        seen.append(f"{ref} -> {(await _ask(c, f.url, ref))[0]}")
                    await asyncio.sleep(1.0)
            await asyncio.to_thread(catalog.start, wait=0)
            await asyncio.to_thread(catalog.wait_healthy, 60)
            await _move(catalog.url, 1)  # as seeded, for the rows after this one
            return seen

        traffic, seen = await drive(f, steady, fault, seconds)
    kinds = sorted(set(seen))
    ok = sum(1 for s in seen if s.split(" -> ")[1].startswith(A0 + "@v"))
    return Row("alias moved, then catalog down", "dependency", traffic.outcomes, f.retried(),
               marks.get("moved_s"),
               notes=[f"a0@stable served {marks.get('before')} before the move",
                      f"during the outage {ok} of {len(seen)} requests for a0@v1, a0@v2, "
                      f"a0@stable served ({'; '.join(kinds)})",
                      "recovery: alias moved -> the router serving the new version"],
               extra={"known_versions_served": ok, "known_versions_asked": len(seen)})


async def unknown_flood(work: Path, catalog: Proc, expect: dict[str, str],
                        shape: Shape) -> Row:
    """3,000 made-up names, 32 at a time, beside the steady traffic; a serving-profile
    change early on (a refresh of everything known); new versions and aliases of the
    adapters served arrive one every 0.25 s and should stay fast. Without API keys every
    caller is one tenant, so past its cap an adapter never served gets 429."""
    marks: dict[str, Any] = {}
    with fleet(work / "unknown-flood", catalog.url, shape) as f:
        async def fault(_t: Traffic) -> tuple[dict[str, int], list[tuple[str, float]],
                                              list[tuple[str, float]]]:
            await asyncio.sleep(shape.seconds / 5)
            answers: dict[str, int] = {}
            names = iter(range(FLOOD_NAMES))
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(
                    max_connections=64)) as c:
                async def flooder() -> None:
                    for i in names:
                        what, _ = await _ask(c, f.url, f"{NAMESPACE}/nope-flood-{i}@stable")
                        answers[what] = answers.get(what, 0) + 1

                async def newcomers() -> list[tuple[str, float]]:
                    out = []
                    for n, ref in enumerate(_fresh_refs(expect, served=True)):
                        if n == 3:
                            await _set_profile(catalog.url)
                        out.append(await _ask(c, f.url, ref))
                        control.append(await _ask(c, f.url, next(iter(expect))))
                        await asyncio.sleep(0.25)
                    return out

                control: list[tuple[str, float]] = []
                flood = asyncio.gather(*(flooder() for _ in range(32)))
                await asyncio.sleep(0.5)
                fresh = await newcomers()
                unseen = [f"{r} -> {(await _ask(c, f.url, r))[0]}"
                          for r in _fresh_refs(expect) if r not in _fresh_refs(expect, served=True)]
                marks["unseen"] = unseen
                await flood
            return answers, fresh, control

        traffic, (answers, fresh, control) = await drive(f, expect, fault)
    return Row(f"flood of unknown names ({FLOOD_NAMES}, 32 at a time)", "dependency",
               traffic.outcomes, f.retried(),
               notes=[f"new references during the flood: {_latencies(fresh)}",
                      f"a resolved reference asked right after each: {_latencies(control)}",
                      "an adapter never served, asked by the flooding tenant (no API keys: "
                      f"one tenant) during the flood: {'; '.join(marks.get('unseen', []))}",
                      "flood answers: " + ", ".join(f"{n} x {k}" for k, n in
                                                    sorted(answers.items()))],
               extra={"new_ref_max_s": round(max((s for _, s in fresh), default=0), 2)})


async def _usage_requests(catalog: str) -> int:
    async with httpx.AsyncClient(base_url=catalog, timeout=30) as c:
        r = await c.get("/v1/usage", params={"namespace": NAMESPACE, "days": 1,
                                             "limit": 1000})
        r.raise_for_status()
        return sum(int(i["requests"]) for i in r.json()["items"])


async def usage_outbox_outage(work: Path, catalog: Proc, expect: dict[str, str],
                              shape: Shape) -> Row:
    """Usage reporting on (the default): the catalog stopped for ``catalog_down_s`` under
    traffic, then back; once the router has stopped (a last delivery), the catalog's
    request count for the row should equal the requests the router served."""
    before = await _usage_requests(catalog.url)
    seconds = shape.catalog_down_s + shape.seconds
    with fleet(work / "usage-outage", catalog.url, shape) as f:
        async def fault(_t: Traffic) -> None:
            await asyncio.sleep(shape.seconds / 3)
            await asyncio.to_thread(catalog.terminate)
            await asyncio.sleep(shape.catalog_down_s)
            await asyncio.to_thread(catalog.start, wait=0)
            await asyncio.to_thread(catalog.wait_healthy, 60)

        traffic, _ = await drive(f, expect, fault, seconds)
    counted = await _usage_requests(catalog.url) - before
    served = sum(1 for o in traffic.outcomes if o.kind in ("answered", "wrong"))
    return Row(f"usage outbox, catalog down {shape.catalog_down_s:g} s", "dependency",
               traffic.outcomes, None,
               notes=[f"the catalog counted {counted} requests for the {served} the router "
                      f"served ({served - counted} lost)"],
               extra={"usage_counted": counted, "usage_served": served})


CATALOG_SCENARIOS: dict[str, Callable[[Path, Proc, dict[str, str], Shape],
                                      Awaitable[Row]]] = {
    "catalog-slow": slow_catalog,
    "alias-move-outage": alias_moved_then_catalog_down,
    "unknown-flood": unknown_flood,
    "usage-outage": usage_outbox_outage,
    "webhook-internal": webhook_internal,
}
"""Scenarios taking the shared catalog's process (they slow, stop or change it)."""
