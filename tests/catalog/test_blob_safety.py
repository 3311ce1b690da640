"""Nothing referenced is ever deleted, and a publish leaves its blobs present: publish
vs gc interleavings on both databases and both stores."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from tests.blob_helpers import assert_all_present, digest_of, store, stored

__all__ = ["store"]  # the fixture, used by the tests below


def _libpq(db_url: str) -> str:
    return make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _wait_for_lock_wait(dsn: str) -> None:
    """Until a backend of the database waits on a lock (the publish on the row lock)."""
    deadline = asyncio.get_running_loop().time() + 10.0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while asyncio.get_running_loop().time() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                               "current_database() AND wait_event_type = 'Lock'").fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.02)
    raise AssertionError("the publish never waited on the adapter's row lock")


async def test_gc_between_store_and_commit_keeps_the_blob(
        backend: str, db_url: str, make_client: Any, store: dict[str, Any], model: Any) -> None:
    """The orphan case: a failed publish left the weights stored; the same weights are
    published again (the store reports them present) and gc runs after that check but
    before the version commits. The blob must be there afterwards."""
    client = await make_client(**store)
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    assert (await client.post("/v1/adapters/acme/a/versions",
                              files=model.files(model.adapter(seed=0)))).status_code == 201
    pair = model.adapter(seed=1)
    weights = digest_of(pair[1])
    failed = await client.post("/v1/adapters/acme/a/versions", files=model.files(pair),
                               data={"parent": "99"})
    assert failed.status_code == 400  # blobs stored, no row: the weights are an orphan
    assert await stored(store, weights) == pair[1]
    gc: dict[str, Any] = {}

    async def run_gc() -> None:
        gc.update((await client.post("/v1/admin/gc", params={"grace_seconds": 0})).json())

    if backend == "postgres":
        with psycopg.connect(_libpq(db_url)) as lock:
            lock.execute("SELECT id FROM adapters WHERE full_name = 'acme/a' FOR UPDATE")
            task = asyncio.create_task(client.post("/v1/adapters/acme/a/versions",
                                                   files=model.files(pair)))
            await _wait_for_lock_wait(_libpq(db_url))
            await run_gc()
            lock.rollback()
            r = await task
    else:
        client.catalog.after_store = run_gc
        r = await client.post("/v1/adapters/acme/a/versions", files=model.files(pair))
    assert r.status_code == 201, r.text
    assert weights in gc["deleted"]  # gc did run in between and removed the orphan
    assert await stored(store, weights) == pair[1]  # ... and the publish stored it again
    assert await assert_all_present(client, store) == 3


async def test_publish_stores_a_referenced_blob_gone_from_the_store(
        db_url: str, make_client: Any, store: dict[str, Any], model: Any) -> None:
    """A blob some version references but the store lost: the next publish of those
    bytes writes it again."""
    client = await make_client(**store)
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    pair = model.adapter(seed=3)
    assert (await client.post("/v1/adapters/acme/a/versions",
                              files=model.files(pair))).status_code == 201
    weights = digest_of(pair[1])
    from mol_catalog.blobs.store import open_blob_store

    blobs = open_blob_store(store["blob_url"], store.get("s3_endpoint_url"))
    await blobs.delete(weights)
    await blobs.close()
    assert await stored(store, weights) is None
    r = await client.post("/v1/adapters/acme/b/versions", files=model.files(pair))
    assert r.status_code == 201, r.text
    assert await stored(store, weights) == pair[1]


async def test_random_publish_failed_publish_gc_interleavings(
        backend: str, db_url: str, make_client: Any, store: dict[str, Any], model: Any) -> None:
    """A bounded random run: waves of concurrent publishes (shared and new contents),
    publishes that fail after storing their blobs, and gc with no grace period. At the
    end every referenced blob is present and hashes to its digest."""
    client = await make_client(**store)
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    rng = random.Random(20261130)
    contents = [model.adapter(seed=s) for s in range(5)]
    gc_runs = 0

    async def op(kind: str, i: int, wave: int) -> None:
        nonlocal gc_runs
        await asyncio.sleep(rng.random() * 0.01)
        if kind == "gc":
            r = await client.post("/v1/admin/gc", params={"grace_seconds": 0})
            assert r.status_code == 200, r.text
            gc_runs += 1
            return
        # A failed publish has new content (a known one would be answered as existing).
        pair = model.adapter(seed=100 + i + 10 * wave) if kind == "fail" else contents[
            rng.randrange(len(contents))]
        name = f"a{rng.randrange(3)}"
        data = {"parent": "999"} if kind == "fail" else {}
        r = await client.post(f"/v1/adapters/acme/{name}/versions", files=model.files(pair),
                              data=data)
        assert r.status_code == (400 if kind == "fail" else 201 if r.json().get("created")
                                 else 200), r.text

    for wave in range(6):
        kinds = [rng.choice(["publish", "publish", "fail", "gc"]) for _ in range(5)]
        kinds[wave % 5] = "gc"
        await asyncio.gather(*(op(k, i, wave) for i, k in enumerate(kinds)))
    assert gc_runs >= 6
    assert await assert_all_present(client, store) >= 2
