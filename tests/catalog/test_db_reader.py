"""The read connection: raw asyncpg on Postgres, SQLAlchemy elsewhere, the same rows.

Reads through asyncpg skip SQLAlchemy's pool; these tests pin what that path must keep:
the URL's connection details, parameters bound by name, rows equal to SQLAlchemy's, the
generic-plan connections kept apart from the default ones, and pools closed on dispose.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import String, bindparam, insert, select

from mol_catalog.db import Database, Prepared, migrate
from mol_catalog.db_urls import DatabaseUrlError, Timeouts, async_url, asyncpg_args
from mol_catalog.models import Namespace
from mol_testkit.postgres import PostgresCluster, fresh_database

_BY_NAME = Prepared(select(Namespace.id, Namespace.name, Namespace.created_at)
                    .where(Namespace.name.in_([bindparam("a", type_=String),
                                               bindparam("b", type_=String)]))
                    .order_by(Namespace.name))

STAMP = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql://u@h/c", "postgresql+asyncpg://u@h/c"),  # plain: asyncpg, as documented
    ("postgresql+psycopg2://u@h/c", "postgresql+asyncpg://u@h/c"),
    ("postgresql+psycopg://u@h/c", "postgresql+psycopg://u@h/c"),
    ("postgresql+asyncpg://u:pw@h:5433/c", "postgresql+asyncpg://u:pw@h:5433/c"),
    ("sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
])
def test_async_driver_of_a_url(url: str, expected: str) -> None:
    assert async_url(url) == expected


def test_unknown_databases_are_refused() -> None:
    with pytest.raises(DatabaseUrlError, match="unsupported database URL"):
        async_url("mysql://u@h/c")


def test_asyncpg_arguments_come_from_the_url() -> None:
    url = ("postgresql://u:p%40ss@db.example:6543/catalog?ssl=require&application_name=x"
           "&connect_timeout=3&keepalives=1")
    args = asyncpg_args(url, Timeouts(statement=7, connect=9))
    assert args == {
        "dsn": "postgresql://u:p%40ss@db.example:6543/catalog?application_name=x&sslmode=require",
        "timeout": 3.0, "command_timeout": 7,
        "server_settings": {"statement_timeout": "7000"}}
    plain = asyncpg_args("postgresql+asyncpg://u@h/c", Timeouts(statement=7, connect=9))
    assert plain is not None
    assert (plain["dsn"], plain["timeout"]) == ("postgresql://u@h/c", 9)
    # psycopg URLs and SQLite keep SQLAlchemy's read path.
    assert asyncpg_args("postgresql+psycopg://u@h/c", Timeouts()) is None
    assert asyncpg_args("sqlite:///x.db", Timeouts()) is None
    with pytest.raises(DatabaseUrlError, match="connect_timeout"):
        asyncpg_args("postgresql://u@h/c?connect_timeout=soon", Timeouts())


async def _rows(db: Database, generic: bool = False) -> list[tuple[object, ...]]:
    async with db.read(generic_plans=generic) as conn:
        return [tuple(r) for r in await _BY_NAME.all(conn, a="beta", b="acme")]


async def _plan_mode(db: Database, generic: bool) -> str:
    async with db.read(generic_plans=generic) as conn:
        rows = await conn.fetch("SHOW plan_cache_mode", ())
    return str(rows[0][0])


async def test_raw_and_sqlalchemy_reads_agree(postgres_cluster: PostgresCluster) -> None:
    url = fresh_database(postgres_cluster, "reader", driver="asyncpg")
    migrate(url)
    raw, sa = Database(url, pool_size=2), Database(url.replace("+asyncpg", "+psycopg"), 2)
    try:
        async with raw.unit() as uow:
            await uow.conn.execute(insert(Namespace), [
                {"name": "acme", "created_at": STAMP},
                *({"name": n, "created_at": datetime.now(UTC)} for n in ("beta", "gamma"))])
        expected = await _rows(sa)
        assert [r[:2] for r in expected] == [(1, "acme"), (2, "beta")]
        # timestamptz as text on the raw path: the same aware datetimes, microseconds kept
        assert expected[0][2] == STAMP
        assert isinstance(expected[1][2], datetime)
        assert expected[1][2].tzinfo is not None
        assert await _rows(raw) == expected
        assert await _rows(raw, generic=True) == expected
        assert await _plan_mode(raw, generic=True) == "force_generic_plan"
        assert await _plan_mode(raw, generic=False) == "auto"
        assert await _plan_mode(sa, generic=True) == "auto"  # SQLAlchemy path: no raw pools
        pools = list(raw._raw_pools.values())
        assert len(pools) == 2
    finally:
        await raw.dispose()
        await sa.dispose()
    assert all(p.is_closing() for p in pools)
    assert raw._raw_pools == {}


async def test_sqlite_reads(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    migrate(url)
    db = Database(url)
    try:
        async with db.unit() as uow:
            await uow.conn.execute(insert(Namespace), [{"name": "beta"}, {"name": "acme"}])
        assert [r[:2] for r in await _rows(db)] == [(2, "acme"), (1, "beta")]
    finally:
        await db.dispose()
