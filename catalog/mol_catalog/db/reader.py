"""The read style: Core statements compiled once per dialect (``Prepared``), run as
driver SQL on a ``Reader`` or on a unit of work's connection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

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
    back as the driver returns them (see ``mol_catalog.db.values`` for decoding).
    Parameters are passed by name; ``compile`` fixes their order. Runs on a ``Reader`` or
    on a SQLAlchemy connection (inside a unit of work).
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
