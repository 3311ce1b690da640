"""Outages are answered, not hung: database or blob store down or frozen -> 503/504
with Retry-After, within the timeout settings; the catalog recovers by itself and no
half-written state is visible afterwards."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from mol_catalog.app import create_app
from mol_catalog.db import migrate
from mol_catalog.settings import CatalogSettings
from mol_testkit.postgres import PostgresCluster, fresh_database
from mol_testkit.proxy import TcpProxy
from tests.blob_helpers import assert_all_present

TIMEOUT = 1.0  # DB_TIMEOUT, DB_CONNECT_TIMEOUT and S3_TIMEOUT of these tests
# The longest any request may take: an S3 call makes two attempts of TIMEOUT each, a
# publish a few calls; a hang would take minutes.
BOUND = 8.0
OK = {200, 201}
OUTAGE = {503, 504}


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[PostgresCluster]:
    """A cluster of this module's own: its tests stop and restart it."""
    with PostgresCluster() as cluster:
        yield cluster


@asynccontextmanager
async def catalog(**settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(CatalogSettings(auth="off", pool_size=4, db_timeout=TIMEOUT,
                                     db_connect_timeout=TIMEOUT, s3_timeout=TIMEOUT,
                                     **settings))
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://catalog.test",
            timeout=60) as client:
        yield client


async def timed(call: Any) -> tuple[int, float, httpx.Response]:
    start = time.monotonic()
    r = await asyncio.wait_for(call, 60)
    return r.status_code, time.monotonic() - start, r


def assert_outage(r: httpx.Response) -> None:
    assert r.status_code in OUTAGE, r.text
    assert r.headers["retry-after"] == "5"
    body = r.json()
    assert body["error"] in ("Unavailable", "Timeout", "NotReady")
    assert body["detail"]


class Load:
    """Requests of every kind, each publish with new content; every result recorded."""

    def __init__(self, client: httpx.AsyncClient, model: Any) -> None:
        self.client = client
        self.model = model
        self.results: list[tuple[float, str, int, float]] = []  # (start, kind, status, s)
        self.seed = 1000

    async def one(self, kind: str) -> int:
        c = self.client
        calls = {
            "resolve": lambda: c.get("/v1/resolve/acme/x@latest"),
            "list": lambda: c.get("/v1/adapters", params={"q": "x"}),
            "describe": lambda: c.get("/v1/adapters/acme/x"),
            "versions": lambda: c.get("/v1/adapters/acme/x/versions"),
            "publish": self._publish,
        }
        start = time.monotonic()
        status, took, r = await timed(calls[kind]())
        if status not in OK:
            assert_outage(r)
        self.results.append((start, kind, status, took))
        return status

    def _publish(self) -> Any:
        self.seed += 1
        files = self.model.files(self.model.adapter(seed=self.seed))
        return self.client.post("/v1/adapters/acme/x/versions", files=files)

    async def run(self, seconds: float, workers: int = 3) -> None:
        kinds = ["resolve", "list", "describe", "versions", "publish"]
        deadline = time.monotonic() + seconds

        async def worker(i: int) -> None:
            n = i
            while time.monotonic() < deadline:
                await self.one(kinds[n % len(kinds)])
                n += 1
                await asyncio.sleep(0.01)

        await asyncio.gather(*(worker(i) for i in range(workers)))


async def _setup(client: httpx.AsyncClient, model: Any) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    r = await client.post("/v1/adapters/acme/x/versions", files=model.files(model.adapter()))
    assert r.status_code == 201, r.text


async def assert_consistent(client: httpx.AsyncClient, settings: dict[str, Any]) -> None:
    """Versions 1..n without gaps, latest = n, every referenced blob present and whole."""
    adapter = (await client.get("/v1/adapters/acme/x")).json()
    numbers = [v["version"] for v in (await client.get(
        "/v1/adapters/acme/x/versions", params={"limit": 500})).json()["items"]]
    assert sorted(numbers) == list(range(1, len(numbers) + 1))
    assert adapter["latest_version"] == len(numbers)
    await assert_all_present(client, settings)


async def _recovered(client: httpx.AsyncClient) -> None:
    """The catalog answers again by itself (pools reconnect) within a few seconds."""
    deadline = time.monotonic() + 20
    while (await client.get("/readyz")).status_code != 200:
        assert time.monotonic() < deadline, "the catalog did not recover"
        await asyncio.sleep(0.2)


async def test_frozen_database_gets_503_or_504_within_the_timeout(
        own_cluster: PostgresCluster, model: Any, tmp_path: Path) -> None:
    url = fresh_database(own_cluster, "frozen", driver="asyncpg")
    migrate(url)
    with TcpProxy(own_cluster.port) as proxy:
        settings = {"db_url": url.replace(f":{own_cluster.port}/", f":{proxy.port}/"),
                    "blob_url": f"file://{tmp_path / 'blobs'}"}
        async with catalog(**settings) as client:
            await _setup(client, model)
            load = Load(client, model)
            proxy.freeze()
            kinds = ["resolve", "list", "describe", "versions", "publish"] * 2
            statuses = await asyncio.gather(*(load.one(k) for k in kinds))
            assert set(statuses) <= OUTAGE, load.results
            assert max(r[3] for r in load.results) < BOUND, load.results
            ready = await client.get("/readyz")
            assert_outage(ready)
            proxy.thaw()
            await _recovered(client)
            assert await load.one("publish") == 201
            assert await load.one("resolve") == 200
            await assert_consistent(client, settings)


async def test_database_stopped_and_restarted_under_load(
        own_cluster: PostgresCluster, model: Any, tmp_path: Path) -> None:
    url = fresh_database(own_cluster, "restart", driver="asyncpg")
    migrate(url)
    settings = {"db_url": url, "blob_url": f"file://{tmp_path / 'blobs'}"}
    async with catalog(**settings) as client:
        await _setup(client, model)
        load = Load(client, model)

        async def outage() -> tuple[float, float]:
            await asyncio.sleep(1.0)
            down = time.monotonic()
            await asyncio.to_thread(own_cluster.halt)
            await asyncio.sleep(1.5)
            await asyncio.to_thread(own_cluster.resume)
            return down, time.monotonic()

        (_, up), _ = await asyncio.gather(outage(), load.run(7.0))
        statuses = {r[2] for r in load.results}
        assert statuses <= OK | OUTAGE, load.results
        assert statuses & OUTAGE, "no request met the outage"
        assert max(r[3] for r in load.results) < BOUND, load.results
        assert any(s in OK for t, _, s, _ in load.results if t > up)
        await _recovered(client)
        # Recovered for good: everything after the first success once back up succeeds.
        after = [r for r in load.results if r[0] > up + 1.5]
        assert after, "the load ended before the database was back"
        assert all(r[2] in OK for r in after), after
        await assert_consistent(client, settings)


async def test_frozen_and_stopped_blob_store(s3_server: Any, s3_bucket: str, model: Any,
                                             postgres_cluster: PostgresCluster) -> None:
    url = fresh_database(postgres_cluster, "s3outage", driver="asyncpg")
    migrate(url)
    with TcpProxy(s3_server.port) as proxy:
        settings = {"db_url": url, "blob_url": f"s3://{s3_bucket}/cat",
                    "s3_endpoint_url": f"http://127.0.0.1:{proxy.port}"}
        async with catalog(**settings) as client:
            await _setup(client, model)
            load = Load(client, model)
            proxy.freeze()
            assert await load.one("publish") in OUTAGE
            assert await load.one("resolve") == 200  # presigned: no S3 call
            assert_outage(await client.get("/readyz"))
            assert max(r[3] for r in load.results) < BOUND, load.results
            proxy.thaw()
            await _recovered(client)
            assert await load.one("publish") == 201

            async def outage() -> None:
                await asyncio.sleep(0.5)
                await asyncio.to_thread(s3_server.stop)
                await asyncio.sleep(1.5)
                await asyncio.to_thread(s3_server.start)

            await asyncio.gather(outage(), load.run(4.0))
            statuses = {r[2] for r in load.results}
            assert statuses <= OK | OUTAGE, load.results
            assert statuses & OUTAGE
            assert max(r[3] for r in load.results) < BOUND, load.results
            await _recovered(client)
            assert await load.one("publish") == 201
            await assert_consistent(client, {**settings,
                                             "s3_endpoint_url": s3_server.endpoint_url})
