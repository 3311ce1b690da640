"""Database URLs as users write them, and the connection arguments made from them.

A URL may carry libpq parameters (``sslmode``, ``sslrootcert``, ``application_name``,
``connect_timeout``, ...): psycopg (Alembic, ``postgresql+psycopg`` URLs) hands them to
libpq itself; for asyncpg they travel as a libpq DSN, which asyncpg reads the way libpq
does. Also here: the timeouts every connection gets and how a worker's connection
budget is split between its pools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url


class DatabaseUrlError(ValueError):
    """A database URL the catalog cannot use."""


def async_url(url: str) -> str:
    """The async-driver form of a user URL (sqlite:///x, postgresql://, +psycopg, +asyncpg)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return str(parsed.set(drivername="sqlite+aiosqlite"))
    if backend == "postgresql":
        driver = parsed.get_driver_name() if "+" in parsed.drivername else ""
        if driver in ("psycopg", "asyncpg"):
            return parsed.render_as_string(hide_password=False)
        if driver in ("", "psycopg2"):  # a plain postgresql:// URL gets asyncpg
            return parsed.set(drivername="postgresql+asyncpg").render_as_string(
                hide_password=False
            )
    raise DatabaseUrlError(
        f"unsupported database URL {url!r}: use sqlite:///path or "
        "postgresql+asyncpg://... / postgresql+psycopg://..."
    )


def sync_url(url: str) -> str:
    """The sync-driver form (Alembic): pysqlite or psycopg 3 (libpq takes the URL's
    parameters as they are; asyncpg's ``ssl=`` becomes libpq's ``sslmode=``, and a
    connect timeout is set unless the URL has one: libpq's default waits forever)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return str(parsed.set(drivername="sqlite"))
    if parsed.get_backend_name() == "postgresql":
        query = dict(parsed.query)
        if "ssl" in query:
            query.setdefault("sslmode", query.pop("ssl"))
        query.setdefault("connect_timeout", str(round(Timeouts.connect)))
        return parsed.set(drivername="postgresql+psycopg", query=query).render_as_string(
            hide_password=False)
    raise DatabaseUrlError(f"unsupported database URL {url!r}")


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


@dataclass(frozen=True)
class Timeouts:
    """How long a database may take before a request is answered 503/504 instead.

    ``statement``: one statement (asyncpg's client-side command timeout, so a server
    that stops answering is noticed too, and Postgres' ``statement_timeout``), also the
    wait for a pooled connection; ``connect``: opening a connection (a URL's libpq
    ``connect_timeout`` wins)."""

    statement: float = 30.0
    connect: float = 10.0


@dataclass(frozen=True)
class PoolSizes:
    """How a worker's connection budget (``POOL_SIZE`` plus as many overflow) is split
    when reads use asyncpg directly: SQLAlchemy's pool (writes) gets half of it, the raw
    read pools the other half (a quarter of that for the search pool)."""

    engine: int
    engine_overflow: int
    reads: int
    search_reads: int

    @classmethod
    def of(cls, pool_size: int, raw_reads: bool) -> PoolSizes:
        if not raw_reads:
            return cls(pool_size, pool_size, 0, 0)
        search = max(1, pool_size // 4)
        engine = max(1, pool_size // 2)
        return cls(engine, max(0, pool_size - engine), max(1, pool_size - search), search)

    @property
    def total(self) -> int:
        return self.engine + self.engine_overflow + self.reads + self.search_reads


def psycopg_args(url: str, timeouts: Timeouts) -> dict[str, Any]:
    """psycopg (libpq) takes the URL's parameters itself; add the timeouts it lacks."""
    query = make_url(url).query
    options = str(query.get("options", ""))
    # Timestamps come back in UTC, as on asyncpg (see ``db.values.datetime_value``).
    args: dict[str, Any] = {"options": f"{options} -c statement_timeout="
                                       f"{int(timeouts.statement * 1000)} -c TimeZone=UTC"
                                       .strip()}
    if "connect_timeout" not in query:
        args["connect_timeout"] = max(1, round(timeouts.connect))
    return args


# libpq client-side tuning asyncpg has no equivalent of: accepted and left to the OS.
_LIBPQ_ONLY = frozenset({"keepalives", "keepalives_idle", "keepalives_interval",
                         "keepalives_count", "tcp_user_timeout", "sslcompression", "sslsni"})


def asyncpg_args(url: str, timeouts: Timeouts) -> dict[str, Any] | None:
    """``asyncpg.connect()`` arguments for a Postgres URL using asyncpg, else None
    (psycopg URLs keep SQLAlchemy's read path).

    The URL's query is handed over as libpq parameters in a DSN, which asyncpg reads as
    libpq does (``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey``, ``passfile``,
    ``target_session_attrs``, ``service``, ...; the rest, e.g. ``application_name`` or
    ``options``, become session settings). ``connect_timeout`` is the connect timeout
    and ``ssl`` (asyncpg's spelling) means ``sslmode``."""
    parsed = make_url(async_url(url))
    if parsed.get_driver_name() != "asyncpg":
        return None
    query = {k: v if isinstance(v, str) else v[-1] for k, v in parsed.query.items()}
    connect = timeouts.connect
    if "connect_timeout" in query:
        value = query.pop("connect_timeout")
        try:
            seconds = float(value)
        except ValueError:
            raise DatabaseUrlError(f"connect_timeout must be a number of seconds, got "
                                   f"{value!r}") from None
        connect = seconds if seconds > 0 else 24 * 3600.0  # libpq: 0 = wait forever
    if "ssl" in query:
        query.setdefault("sslmode", query.pop("ssl"))
    fallback = query.pop("fallback_application_name", None)
    if fallback is not None:
        query.setdefault("application_name", fallback)
    for key in _LIBPQ_ONLY:
        query.pop(key, None)
    dsn = parsed.set(drivername="postgresql", query=query).render_as_string(
        hide_password=False)
    return {"dsn": dsn, "timeout": connect, "command_timeout": timeouts.statement,
            "server_settings": {"statement_timeout": str(int(timeouts.statement * 1000))}}
