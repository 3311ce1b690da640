"""Engines: one async SQLAlchemy engine per database URL, set up per backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from mol_catalog.db_urls import (
    PoolSizes,
    Timeouts,
    async_url,
    asyncpg_args,
    is_sqlite,
    psycopg_args,
)


def _json_text(value: Any) -> str:
    """JSON columns as written: orjson, timestamps as RFC 3339 in UTC like responses."""
    return orjson.dumps(value, option=orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC).decode()


def prepare_sqlite_path(url: str) -> None:
    """Create the folder of a SQLite file: SQLite creates the file, not its parents."""
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)


def create_engine(url: str, pool_size: int = 10, timeouts: Timeouts | None = None,
                  ) -> AsyncEngine:
    """An async engine for the URL; on SQLite with WAL, a busy timeout and explicit BEGINs."""
    timeouts = timeouts or Timeouts()
    aurl = async_url(url)
    if is_sqlite(url):
        prepare_sqlite_path(url)
        # The busy timeout: how long a writer waits for the write lock.
        engine = create_async_engine(aurl, connect_args={"timeout": timeouts.statement},
                                     json_serializer=_json_text, json_deserializer=orjson.loads)

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy, not the driver, decide when transactions begin.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            options = conn.get_execution_options()
            if options.get("mol_autocommit", False):
                return  # single-statement reads: SQLite's own autocommit
            conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get("mol_write", False) else "BEGIN")

        return engine
    raw = asyncpg_args(url, timeouts)
    sizes = PoolSizes.of(pool_size, raw is not None)
    # JSON columns are decoded with orjson (listings decode two per row).
    common: dict[str, Any] = {"pool_size": sizes.engine, "max_overflow": sizes.engine_overflow,
                              "pool_timeout": timeouts.statement,
                              "json_serializer": _json_text, "json_deserializer": orjson.loads,
                              "pool_pre_ping": False}
    if raw is not None:
        import asyncpg

        # Our own connect: the URL's libpq parameters reach asyncpg as a libpq DSN.
        async def connect() -> Any:
            return await asyncpg.connect(**raw)

        return create_async_engine("postgresql+asyncpg://", async_creator=connect, **common)
    return create_async_engine(aurl, connect_args=psycopg_args(url, timeouts), **common)
