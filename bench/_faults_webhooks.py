"""A webhook aimed at an internal address (bench/faults.py), against the real catalog
process the bench runs.

A namespace admin chooses a webhook's URL and the catalog posts to it from inside the
network, so a target on loopback, a private or link-local network or a cloud metadata
service could reach what no outsider should. The row tries three things:

- creating a webhook on an address of each refused class (written in the URL): each
  must be refused (422) with the class named, while a public URL is accepted;
- a webhook on ``localhost`` (a name: it passes creation) aimed at a receiver this
  process runs on 127.0.0.1; events are raised, and no delivery may reach the receiver
  (each is marked failed, ``refused: ...``, when the name resolves to loopback);
- the catalog restarted with ``MOL_CATALOG_WEBHOOK_ALLOW=localhost``: the same webhook's
  next deliveries reach the receiver.

The catalog is left as found: its webhooks deleted, the alias moved back, the process
running without the setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from _faults_scenarios import Row, Shape
from _faults_stack import NAMESPACE, Proc

ALLOW = "MOL_CATALOG_WEBHOOK_ALLOW"
SECRET = "bench-webhook-secret-0123456789"
HOOKS = f"/v1/namespaces/{NAMESPACE}/webhooks"
ADAPTER = f"/v1/adapters/{NAMESPACE}/a3/aliases/hooks"  # an alias no other row reads
# URLs naming an address of each class the catalog refuses; ``{port}``: the receiver's.
INTERNAL: dict[str, list[str]] = {
    "loopback": ["http://127.0.0.1:{port}/hook", "http://2130706433:{port}/hook",
                 "http://127.1:{port}/hook"],
    "private": ["http://10.0.0.7/hook", "http://172.16.5.4/hook", "http://192.168.1.20/hook"],
    "link-local": ["http://169.254.10.10/hook"],
    "metadata": ["http://169.254.169.254/latest/meta-data/iam/",
                 "http://metadata.google.internal/computeMetadata/v1/",
                 "http://100.100.100.200/latest/meta-data/"],
}
PUBLIC = "https://ci.example.com/hooks/mol"  # accepted at creation (deleted at once)
EVENTS = 3  # alias moves raised in each phase


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[dict[str, Any]]:
    """An HTTP receiver on 127.0.0.1 that counts the posts it gets; yields its state
    (``port``, ``posts``: the X-Mol-Event of each)."""
    state: dict[str, Any] = {"posts": []}

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        state["posts"].append(request.headers.get("x-mol-event", "?"))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state["port"] = runner.addresses[0][1]
    try:
        yield state
    finally:
        await runner.cleanup()


def _refused(r: httpx.Response, kind: str) -> bool:
    """A 422 whose detail names the class (``cloud metadata`` for the metadata ones)."""
    word = "metadata" if kind == "metadata" else kind
    return r.status_code == 422 and word in r.text


async def _create(c: httpx.AsyncClient, url: str) -> httpx.Response:
    return await c.post(HOOKS, json={"url": url, "secret": SECRET, "events": ["alias.moved"]})


async def _raise_events(c: httpx.AsyncClient, start: int) -> None:
    """``EVENTS`` alias moves (an ``alias.moved`` event each), between v1 and v2."""
    for i in range(start, start + EVENTS):
        r = await c.put(ADAPTER, json={"version": 1 + i % 2})
        r.raise_for_status()


async def _settled(c: httpx.AsyncClient, hook_id: int, want: int,
                   within: float = 30.0) -> list[dict[str, Any]]:
    """The webhook's deliveries once ``want`` of them are no longer pending."""
    deadline = time.monotonic() + within
    while True:
        r = await c.get(f"{HOOKS}/{hook_id}/deliveries", params={"limit": 500})
        r.raise_for_status()
        items: list[dict[str, Any]] = r.json()["items"]
        if sum(1 for d in items if d["status"] != "pending") >= want or \
                time.monotonic() > deadline:
            return items
        await asyncio.sleep(0.2)


async def _restart(catalog: Proc, allow: str | None) -> None:
    if allow is None:
        catalog.env.pop(ALLOW, None)
    else:
        catalog.env[ALLOW] = allow
    await asyncio.to_thread(catalog.terminate)
    await asyncio.to_thread(catalog.start, wait=60)


async def webhook_internal(work: Path, catalog: Proc, expect: dict[str, str],
                           shape: Shape) -> Row:
    """Webhooks on internal addresses refused at creation, and at delivery for a name
    that resolves to loopback; delivered once the allowlist names it."""
    created: list[int] = []  # to delete at the end
    accepted: list[str] = []  # internal URLs the catalog took (none, if it refuses them)
    async with receiver() as rx, httpx.AsyncClient(base_url=catalog.url, timeout=30) as c:
        port = rx["port"]
        refused: dict[str, tuple[int, int]] = {}
        for kind, urls in INTERNAL.items():
            hits = 0
            for url in urls:
                r = await _create(c, url.format(port=port))
                hits += _refused(r, kind)
                if r.status_code == 201:
                    created.append(int(r.json()["id"]))
                    accepted.append(url.format(port=port))
            refused[kind] = (hits, len(urls))
        control = await _create(c, PUBLIC)
        if control.status_code == 201:
            (await c.delete(f"{HOOKS}/{control.json()['id']}")).raise_for_status()
        try:
            local = await _create(c, f"http://localhost:{port}/hook")
            local.raise_for_status()  # a name: checked when a delivery resolves it
            hook_id = int(local.json()["id"])
            created.append(hook_id)
            await _raise_events(c, 0)
            first = await _settled(c, hook_id, EVENTS)
            reached_refused = len(rx["posts"])
            errors = sorted({str(d.get("last_error")).split(": webhooks reach")[0] for d in first
                             if d["status"] == "failed"})
            failed = sum(1 for d in first if d["status"] == "failed")
            await _restart(catalog, "localhost")
            started = time.monotonic()
            await _raise_events(c, EVENTS)
            second = await _settled(c, hook_id, 2 * EVENTS)
            took = time.monotonic() - started
            delivered = sum(1 for d in second if d["status"] == "delivered")
            reached_allowed = len(rx["posts"]) - reached_refused
        finally:
            for i in created:
                await c.delete(f"{HOOKS}/{i}")
            with contextlib.suppress(httpx.HTTPError):
                (await c.put(ADAPTER, json={"version": 1})).raise_for_status()
            if ALLOW in catalog.env:
                await _restart(catalog, None)
    internal = sum(n for _, n in refused.values())
    hits = sum(h for h, _ in refused.values())
    per_class = ", ".join(f"{k} {h}/{n}" for k, (h, n) in refused.items())
    met = (hits == internal and not accepted and control.status_code == 201
           and reached_refused == 0 and failed == EVENTS and delivered == EVENTS
           and reached_allowed == EVENTS)
    return Row("a webhook aimed at an internal address (catalog)", "misuse", [], None,
               notes=[f"creation refused (422, the class named) for {hits} of {internal} URLs "
                      f"on internal addresses ({per_class}); a public URL accepted "
                      f"({control.status_code})"
                      + (f"; accepted: {', '.join(accepted)}" if accepted else ""),
                      f"a webhook on localhost:{port} (a name, accepted at creation): "
                      f"{failed} of {EVENTS} deliveries failed at once "
                      f"({'; '.join(errors) or 'no error recorded'}), {reached_refused} "
                      "reached the receiver on 127.0.0.1",
                      f"catalog restarted with {ALLOW}=localhost: {delivered} of the next "
                      f"{EVENTS} delivered, {reached_allowed} reached the receiver, the "
                      f"last {took:.1f} s after the first alias move"],
               extra={"internal_urls": internal, "refused_at_create": hits,
                      "reached_receiver_refused": reached_refused,
                      "refused_at_delivery": failed, "delivered_allowed": delivered,
                      "goal": "webhooks on internal addresses: refused at creation and at "
                              "delivery, delivered once the allowlist names them",
                      "goal_met": met})
