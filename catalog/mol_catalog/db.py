"""Engines, the unit of work (one transaction per request) and migrations.

Services never commit: an endpoint opens ``db.unit()``, the services add rows and
events to it, and leaving the block commits once. Events are inserted last, right
before COMMIT, so that event ids are allocated in commit order (gap-safe feed):
on Postgres under a transaction-level advisory lock, on SQLite because writers are
serialized by ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import orjson
from sqlalchemy import Table, bindparam, event, exists, func, insert, select, text
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from mol_catalog.db_urls import PoolSizes, Timeouts, async_url, asyncpg_args, psycopg_args
from mol_catalog.db_urls import is_sqlite as is_sqlite  # re-exported (server, migrations)
from mol_catalog.db_urls import sync_url as sync_url
from mol_catalog.models import Event, utcnow

# Arbitrary constant: the advisory lock that orders outbox inserts on Postgres.
EVENTS_LOCK_KEY = 0x6D6F6C5F657674  # "mol_evt"


def _prepare_sqlite_path(url: str) -> None:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)


def create_engine(url: str, pool_size: int = 10, timeouts: Timeouts | None = None,
                  ) -> AsyncEngine:
    """An async engine for the URL; on SQLite with WAL, a busy timeout and explicit BEGINs."""
    timeouts = timeouts or Timeouts()
    aurl = async_url(url)
    if is_sqlite(url):
        _prepare_sqlite_path(url)
        # The busy timeout: how long a writer waits for the write lock.
        engine = create_async_engine(aurl, connect_args={"timeout": timeouts.statement},
                                     json_deserializer=orjson.loads)

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
                              "json_deserializer": orjson.loads, "pool_pre_ping": False}
    if raw is not None:
        import asyncpg

        # Our own connect: the URL's libpq parameters reach asyncpg as a libpq DSN.
        async def connect() -> Any:
            return await asyncpg.connect(**raw)

        return create_async_engine("postgresql+asyncpg://", async_creator=connect, **common)
    return create_async_engine(aurl, connect_args=psycopg_args(url, timeouts), **common)


@dataclass
class UnitOfWork:
    """One transaction: a session plus the events to append when it commits."""

    session: AsyncSession
    postgres: bool
    events: list[dict[str, Any]] = field(default_factory=list)

    def emit(self, type_: str, *, adapter: str | None = None, version: int | None = None,
             alias: str | None = None, data: dict[str, Any] | None = None) -> None:
        self.events.append({"type": type_, "adapter": adapter, "version": version,
                            "alias": alias, "data": data or {}})

    async def commit(self) -> None:
        await self.session.flush()
        if self.events:
            # Core insert on the table: no ORM bulk-insert bookkeeping per commit. On
            # Postgres the statement takes the advisory lock itself (see _LOCKED_EVENTS).
            now = utcnow()
            rows = [{**e, "created_at": now} for e in self.events]
            await self.session.execute(_LOCKED_EVENTS if self.postgres else _EVENTS_INSERT,
                                       rows[0] if len(rows) == 1 else rows)
            self.events = []
        await self.session.commit()


_EVENTS = cast(Table, Event.__table__)
_EVENT_COLUMNS = ("type", "adapter", "version", "alias", "data", "created_at")
_EVENTS_INSERT = insert(_EVENTS)
# Postgres: INSERT ... SELECT :values WHERE EXISTS (SELECT pg_advisory_xact_lock(k)). The
# uncorrelated EXISTS is a one-time filter, evaluated before the first row is formed and so
# before nextval() allocates its id: the lock and the insert share one round trip and ids
# still come in commit order.
_LOCKED_EVENTS = insert(_EVENTS).from_select(
    list(_EVENT_COLUMNS),
    select(*(bindparam(c, type_=_EVENTS.c[c].type) for c in _EVENT_COLUMNS))
    .where(exists(select(func.pg_advisory_xact_lock(EVENTS_LOCK_KEY)))),
    include_defaults=False)

_REQUIRED = object()


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[tuple[str, Any], ...]
    positional: bool


class Reader:
    """A connection for single read statements: asyncpg's own on Postgres, else SQLAlchemy's.

    On Postgres through asyncpg the read path skips SQLAlchemy's connection pool and
    its greenlet bridge: a resolve is one cached prepared statement on a raw connection.
    """

    __slots__ = ("_raw", "_sa", "dialect")

    def __init__(self, dialect: Dialect, raw: Any = None, sa: AsyncConnection | None = None,
                 ) -> None:
        self.dialect = dialect
        self._raw = raw
        self._sa = sa

    async def fetch(self, sql: str, args: Sequence[Any] | dict[str, Any]) -> list[Any]:
        """Rows (sequences) of one statement; ``args`` positional for ``$n`` SQL."""
        if self._raw is not None:
            rows: list[Any] = await self._raw.fetch(sql, *args)  # asyncpg: a list already
            return rows
        assert self._sa is not None
        result = await self._sa.exec_driver_sql(sql, args if isinstance(args, dict)
                                                else tuple(args))
        return list(result.fetchall())


# What read statements run on: a Reader, or a unit of work's SQLAlchemy connection.
ReadConn = AsyncConnection | Reader


class Prepared:
    """A Core statement compiled once per dialect and run as driver SQL.

    Skips SQLAlchemy's per-execution cache-key walk and result processing: rows come
    back as the driver returns them (JSON columns as text on both backends, booleans as
    0/1 on SQLite), so callers decode with ``json_value``/``bool``. Parameters are passed
    by name; ``compile`` fixes their order. Runs on a ``Reader`` or on a SQLAlchemy
    connection (inside a unit of work).
    """

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._compiled: dict[tuple[str, str], _Compiled] = {}

    def _for(self, dialect: Dialect) -> _Compiled:
        key = (dialect.name, dialect.driver)
        found = self._compiled.get(key)
        if found is None:
            compiled = cast(SQLCompiler, self.statement.compile(dialect=dialect))
            # (name, default): literals the dialect renders as parameters (e.g. SQLite's
            # OFFSET 0) carry their value; parameters the caller must pass carry _REQUIRED.
            order = compiled.positiontup if compiled.positional else list(compiled.binds)
            names = tuple((n, _REQUIRED if compiled.binds[n].required else compiled.binds[n].value)
                          for n in order or ())
            found = self._compiled[key] = _Compiled(compiled.string, names, compiled.positional)
        return found

    async def all(self, conn: ReadConn, **params: Any) -> list[Sequence[Any]]:
        c = self._for(conn.dialect)
        values = [(n, params[n] if d is _REQUIRED else params.get(n, d)) for n, d in c.names]
        args: Any = tuple(v for _, v in values) if c.positional else dict(values)
        if isinstance(conn, Reader):
            return await conn.fetch(c.sql, args)
        result = await conn.exec_driver_sql(c.sql, args)
        return list(result.fetchall())

    async def first(self, conn: ReadConn, **params: Any) -> Sequence[Any] | None:
        rows = await self.all(conn, **params)
        return rows[0] if rows else None


def json_value(value: Any) -> Any:
    """A JSON column read by ``Prepared``: text (or bytes) from the driver, decoded."""
    if isinstance(value, str | bytes):
        return orjson.loads(value)
    return value


def json_text(value: Any, default: str) -> orjson.Fragment:
    """A JSON column read by ``Prepared``, passed through to an orjson-encoded response."""
    if value is None:
        return orjson.Fragment(default)
    return orjson.Fragment(value)


def datetime_value(value: Any) -> datetime | None:
    """A timestamp read by ``Prepared``: SQLite hands back its stored text."""
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return cast(datetime | None, value)


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
    async def unit(self, write: bool = True) -> AsyncIterator[UnitOfWork]:
        """A transaction that commits once when the block ends (rolls back on error).

        ``write=False`` opens no transaction at all (no BEGIN/ROLLBACK round trips): each
        statement sees the data committed when it starts, which is what Postgres' READ
        COMMITTED gave a read-only transaction anyway.
        """
        bind = self._write_engine if write else self._read_engine
        async with AsyncSession(bind, expire_on_commit=False, autoflush=False) as session:
            uow = UnitOfWork(session, self.postgres)
            try:
                yield uow
                if write:
                    await uow.commit()
            except BaseException:
                await session.rollback()
                raise

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


def migrations_dir() -> Path:
    """Alembic's script folder: packaged next to mol_catalog, or the repository's."""
    here = Path(__file__).resolve().parent
    packaged = here / "_migrations"
    if packaged.is_dir():
        return packaged
    return here.parents[1] / "migrations"


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", sync_url(url).replace("%", "%%"))
    return cfg


def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (sync; call before serving)."""
    from alembic import command

    if is_sqlite(url):
        _prepare_sqlite_path(url)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)
