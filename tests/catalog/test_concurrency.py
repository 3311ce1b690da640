"""Concurrent publishes: exactly one version per content, and a gap-safe event feed."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


async def _prepare(client: httpx.AsyncClient, model: Any) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201


async def test_same_content_concurrently_gives_one_version(make_client: Any, model: Any) -> None:
    clients = [await make_client() for _ in range(4)]
    await _prepare(clients[0], model)
    pair = model.adapter(seed=42)
    results = await asyncio.gather(*[
        c.post("/v1/adapters/acme/race/versions", files=model.files(pair))
        for c in clients for _ in range(2)
    ])
    assert all(r.status_code in (200, 201) for r in results), [r.text for r in results]
    assert sorted(r.status_code for r in results).count(201) == 1
    assert {r.json()["version"] for r in results} == {1}
    versions = (await clients[0].get("/v1/adapters/acme/race/versions")).json()["items"]
    assert [v["version"] for v in versions] == [1]
    events = (await clients[0].get("/v1/events")).json()["items"]
    assert [e["type"] for e in events].count("version.published") == 1


async def test_event_feed_is_gap_safe_under_concurrent_publishers(make_client: Any,
                                                                  model: Any) -> None:
    clients = [await make_client() for _ in range(4)]
    reader = await make_client()
    await _prepare(clients[0], model)
    seen: list[int] = []
    done = asyncio.Event()

    async def poll() -> None:
        after = 0
        while True:
            finished = done.is_set()
            page = (await reader.get("/v1/events", params={"after": after})).json()
            seen.extend(e["id"] for e in page["items"])
            after = page["last"]
            if finished and not page["items"]:
                return
            await asyncio.sleep(0)

    async def publisher(i: int, c: httpx.AsyncClient) -> None:
        for j in range(5):
            path = f"/v1/adapters/acme/a{j % 2}/versions"
            r = await c.post(path, files=model.files(model.adapter(seed=100 * i + j)),
                             data={"alias": f"p{i}"})
            assert r.status_code == 201, r.text

    poller = asyncio.create_task(poll())
    await asyncio.gather(*[publisher(i, c) for i, c in enumerate(clients)])
    done.set()
    await poller
    everything = (await reader.get("/v1/events", params={"limit": 1000})).json()["items"]
    ids = [e["id"] for e in everything]
    assert ids == sorted(ids)
    assert len(ids) == 1 + 4 * 5 * 2  # base + (published + alias moved) per publish
    assert seen == ids  # every event exactly once, in id order
    versions = (await reader.get("/v1/adapters/acme/a0/versions")).json()["items"]
    # a0 gets j = 0, 2, 4 of each of the 4 publishers
    assert sorted(v["version"] for v in versions) == list(range(1, 13))
