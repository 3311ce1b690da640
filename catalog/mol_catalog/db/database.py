"""``Database``: the engine, the write units of work and the read connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from mol_catalog.db.engines import create_engine
from mol_catalog.db.reader import Reader
from mol_catalog.db.unit import UnitOfWork
from mol_catalog.db_urls import PoolSizes, Timeouts, asyncpg_args, is_sqlite

T = TypeVar("T")


class Database:
    """The engine plus factories for read and write units of work."""

    def __init__(self, url: str, pool_size: int = 10, timeouts: Timeouts | None = None,
                 ) -> None:
        self.url = url
        self.postgres = not is_sqlite(url)
        self.timeouts = timeouts or Timeouts()
        self.engine = create_engine(url, pool_size, self.timeouts)
        self._write_engine = self.engine.execution_options(mol_write=True)
        # Single-statement reads run without BEGIN/ROLLBACK round trips: AUTOCOMMIT on
        # Postgres; on SQLite the driver already autocommits and the begin hook stands down.
        self._read_engine = (self.engine.execution_options(mol_autocommit=True)
                             if not self.postgres else
                             self.engine.execution_options(isolation_level="AUTOCOMMIT"))
        self._raw_args = asyncpg_args(url, self.timeouts) if self.postgres else None
        self.pool_sizes = PoolSizes.of(pool_size, self._raw_args is not None)
        self._raw_pools: dict[bool, Any] = {}
        self._raw_lock = asyncio.Lock()

    @asynccontextmanager
    async def unit(self) -> AsyncIterator[UnitOfWork]:
        """A write transaction that commits once when the block ends (rolls back on error).

        Reads that need no transaction use ``read()`` instead."""
        async with self._write_engine.connect() as conn, conn.begin():
            uow = UnitOfWork(conn, self.postgres)
            yield uow
            await uow.append_events()

    async def transact(self, work: Callable[[UnitOfWork], Awaitable[T]], attempts: int = 3,
                       pause: float = 0.0) -> T:
        """``work`` in a unit of work, run again in a new one (up to ``attempts`` times in
        all, ``pause`` seconds longer each time) when a concurrent writer won a race on a
        unique key: the next attempt sees the winner's rows."""
        for attempt in range(attempts):
            try:
                async with self.unit() as uow:
                    return await work(uow)
            except IntegrityError:
                if attempt == attempts - 1:
                    raise
                if pause:
                    await asyncio.sleep(pause * (attempt + 1))
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def read(self, generic_plans: bool = False) -> AsyncIterator[Reader]:
        """A connection for consistent single read statements (no transaction, no ORM).

        ``generic_plans``: on Postgres, a connection that always runs prepared statements
        with their generic plan. For the search scans, whose custom plans are no better
        but cost more to make than to run; never for listings by tag, whose plans depend
        on the parameters.
        """
        if self._raw_args is not None:
            pool = self._raw_pools.get(generic_plans) or await self._open_raw_pool(generic_plans)
            async with pool.acquire(timeout=self.timeouts.statement) as raw:
                yield Reader(self.engine.dialect, raw=raw)
            return
        async with self._read_engine.connect() as conn:
            yield Reader(conn.dialect, sa=conn)

    async def _open_raw_pool(self, generic_plans: bool) -> Any:
        import asyncpg

        async with self._raw_lock:
            if generic_plans not in self._raw_pools:
                args = dict(self._raw_args or {})
                settings = {**args.pop("server_settings"), **READ_SESSION,
                            **({"plan_cache_mode": "force_generic_plan"}
                               if generic_plans else {})}
                size = (self.pool_sizes.search_reads if generic_plans
                        else self.pool_sizes.reads)
                self._raw_pools[generic_plans] = await asyncpg.create_pool(
                    **args, min_size=1, max_size=size, init=_text_timestamps,
                    reset=_keep_session, server_settings=settings)
        return self._raw_pools[generic_plans]

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        pools, self._raw_pools = list(self._raw_pools.values()), {}
        for pool in pools:
            await pool.close()
        await self.engine.dispose()


# ISO timestamps in UTC: what ``_text_timestamps`` parses.
READ_SESSION = {"TimeZone": "UTC", "DateStyle": "ISO"}


async def _text_timestamps(conn: Any) -> None:
    """timestamptz values as text, parsed by ``datetime.fromisoformat``: asyncpg's binary
    decoder costs ~3 us a value, most of a listing page's decoding."""
    await conn.set_type_codec("timestamptz", schema="pg_catalog", encoder=str,
                              decoder=datetime.fromisoformat, format="text")


async def _keep_session(_conn: Any) -> None:
    """Read connections change no session state, so releasing one costs no reset query
    (asyncpg still rolls back a transaction left open)."""
