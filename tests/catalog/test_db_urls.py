"""Postgres URLs as users write them: libpq parameters work on every connection path
(SQLAlchemy on asyncpg, the raw asyncpg read pools, Alembic on psycopg), and a worker
never opens more than POOL_SIZE plus as many overflow connections."""

from __future__ import annotations

import asyncio

import psycopg
from sqlalchemy import text

from mol_catalog.db import Database, migrate
from mol_testkit.postgres import PostgresCluster, fresh_database

CA = "/etc/ssl/certs/ca-certificates.crt"


def _with_params(url: str, app: str) -> str:
    # sslmode=prefer: the test server has no TLS, so every client falls back to plain.
    return (f"{url}?sslmode=prefer&sslrootcert={CA}&application_name={app}"
            "&connect_timeout=5&keepalives=1")


async def test_libpq_parameters_on_every_path(postgres_cluster: PostgresCluster) -> None:
    base = fresh_database(postgres_cluster, "urls", driver=None)
    migrate(_with_params(base, "mol-migrate"))  # Alembic, psycopg
    for scheme in ("postgresql", "postgresql+asyncpg", "postgresql+psycopg"):
        url = _with_params(base.replace("postgresql", scheme, 1), "mol-test")
        db = Database(url, pool_size=2)
        try:
            async with db.unit() as uow:
                written = (await uow.conn.execute(
                    text("SELECT current_setting('application_name')"))).scalar()
            names = [written]
            for generic in (False, True):
                async with db.read(generic_plans=generic) as conn:
                    rows = await conn.fetch("SELECT current_setting('application_name')", ())
                names.append(rows[0][0])
        finally:
            await db.dispose()
        assert names == ["mol-test"] * 3, scheme


async def test_a_worker_opens_at_most_pool_size_plus_overflow(
        postgres_cluster: PostgresCluster) -> None:
    base = fresh_database(postgres_cluster, "pool", driver=None)
    migrate(base)
    url = base.replace("postgresql", "postgresql+asyncpg", 1) + "?application_name=mol-pool"
    pool_size = 4
    db = Database(url, pool_size=pool_size)
    peak = 0

    def count() -> int:
        with psycopg.connect(base, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                               "WHERE application_name = 'mol-pool'").fetchone()
        return int(row[0]) if row else 0

    async def hold(i: int) -> None:
        if i % 3 == 0:
            async with db.unit() as uow:
                await uow.conn.execute(text("SELECT pg_sleep(0.05)"))
        else:
            async with db.read(generic_plans=i % 3 == 1) as conn:
                await conn.fetch("SELECT pg_sleep(0.05)", ())

    async def watch(done: asyncio.Event) -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, await asyncio.to_thread(count))
            await asyncio.sleep(0.01)

    try:
        done = asyncio.Event()
        watcher = asyncio.create_task(watch(done))
        for _ in range(3):
            await asyncio.gather(*(hold(i) for i in range(60)))
        done.set()
        await watcher
    finally:
        await db.dispose()
    assert db.pool_sizes.total == 2 * pool_size
    assert pool_size < peak <= 2 * pool_size
