"""Outages are answered, not hung: database and blob store failures become 503/504.

A request that meets a backend which is down (connection refused or lost, server
shutting down) gets 503, one that meets a backend which stops answering gets 504 once
the timeout setting passes (``DB_TIMEOUT``, ``S3_TIMEOUT``); both carry ``Retry-After``
and the usual ``{"error", "detail"}`` body. Nothing is half-written: a publish stores
blobs before its one transaction, and an interrupted transaction rolls back. Pools drop
broken connections, so the service recovers by itself when the backend returns.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

from mol_catalog.errors import ApiError, BackendTimeout, Unavailable

# OSErrors that mean "the other side is not there" (disk full and I/O errors included:
# the local store cannot take the request either).
_DOWN_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED,
                          errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EPIPE,
                          errno.ENOSPC, errno.EIO})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what it wraps (SQLAlchemy's ``orig``) and its causes."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        orig = getattr(e, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, e.__cause__,
                 e.__context__]


def _kind(e: BaseException) -> str | None:
    """"timeout", "down" or None for one exception of the chain."""
    import asyncpg
    import botocore.exceptions as boto
    import sqlalchemy.exc as sa

    if isinstance(e, TimeoutError | sa.TimeoutError | boto.ReadTimeoutError
                  | boto.ConnectTimeoutError | asyncpg.QueryCanceledError):
        return "timeout"
    if isinstance(e, ConnectionError | socket.gaierror | asyncpg.PostgresConnectionError
                  | asyncpg.InterfaceError | asyncpg.CannotConnectNowError
                  | asyncpg.AdminShutdownError | asyncpg.CrashShutdownError
                  | boto.EndpointConnectionError | boto.ConnectionClosedError):
        return "down"
    if isinstance(e, OSError) and e.errno in _DOWN_ERRNOS:
        return "down"
    if isinstance(e, sa.DBAPIError) and e.connection_invalidated:
        return "down"
    if isinstance(e, boto.ClientError):
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return "down" if status in (500, 502, 503) else "timeout" if status == 504 else None
    return _driver_kind(e)


def _driver_kind(e: BaseException) -> str | None:
    """psycopg's and SQLite's own words for the same conditions."""
    import psycopg

    if isinstance(e, psycopg.errors.QueryCanceled):
        return "timeout"
    if isinstance(e, psycopg.OperationalError):
        return "down"
    if type(e).__name__ == "OperationalError" and "database is locked" in str(e):
        return "down"  # SQLite busy past its timeout
    return None


def backend_error(exc: BaseException) -> ApiError | None:
    """The 503/504 for a backend failure, None for any other exception."""
    kinds = {_kind(e) for e in _chain(exc)}
    what = _backend(exc)
    if "timeout" in kinds:
        return BackendTimeout(f"the {what} did not answer in time; retry shortly")
    if "down" in kinds:
        return Unavailable(f"the {what} is unavailable; retry shortly")
    return None


def _backend(exc: BaseException) -> str:
    modules = {type(e).__module__.split(".", 1)[0] for e in _chain(exc)}
    return "blob store" if modules & {"botocore", "boto3", "urllib3"} else "database"
