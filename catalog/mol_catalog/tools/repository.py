"""SQL for tools: names, their immutable versions (the documents themselves) and the
``approved`` alias. Reads are ``Prepared`` statements; writes Core statements on the
unit's connection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Integer, String, Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import Tool, ToolAlias, ToolVersion

TOOLS = cast(Table, Tool.__table__)
VERSIONS = cast(Table, ToolVersion.__table__)
ALIASES = cast(Table, ToolAlias.__table__)
T, V, A = TOOLS.c, VERSIONS.c, ALIASES.c

_NS = bindparam("namespace", type_=String)
_NAME = bindparam("name", type_=String)
_NUMBER = bindparam("number", type_=Integer)
_ALIAS = bindparam("alias", type_=String)


@dataclass(frozen=True)
class VersionRow:
    """A stored version with its document (a few KiB: every read shows the source)."""

    namespace: str
    name: str
    number: int
    digest: str
    description: str
    checks: list[dict[str, Any]]
    size_bytes: int
    document: bytes
    signature: str | None
    signed_by: str | None
    session_id: str | None
    deployment: str | None
    expert: str | None
    tenant: str | None
    created_by: str | None
    created_at: datetime | None

    @classmethod
    def of(cls, r: Sequence[Any]) -> VersionRow:
        return cls(r[0], r[1], int(r[2]), r[3], r[4], json_value(r[5]), int(r[6]), bytes(r[7]),
                   r[8], r[9], r[10], r[11], r[12], r[13], r[14], datetime_value(r[15]))


@dataclass(frozen=True)
class Approval:
    """Where ``approved`` points, who moved it and when."""

    version: int
    by: str | None
    at: datetime | None


_VERSION_COLUMNS = (T.namespace, T.name, V.number, V.digest, V.description, V.checks,
                    V.size_bytes, V.document, V.signature, V.signed_by, V.session_id,
                    V.deployment, V.expert, V.tenant, V.created_by, V.created_at)
_WIDTH = len(_VERSION_COLUMNS)
_JOINED = TOOLS.join(VERSIONS, V.tool_id == T.id)
_OF_NAME = (T.namespace == _NS, T.name == _NAME)
_VERSION = Prepared(select(*_VERSION_COLUMNS).select_from(_JOINED)
                    .where(*_OF_NAME, V.number == _NUMBER))
_VERSIONS = Prepared(select(*_VERSION_COLUMNS).select_from(_JOINED).where(*_OF_NAME)
                     .order_by(V.number.desc()))
_LATEST = Prepared(select(*_VERSION_COLUMNS, T.updated_at).select_from(
    TOOLS.join(VERSIONS, (V.tool_id == T.id) & (V.number == T.latest_version)))
    .where(T.namespace == _NS).order_by(T.name))
_APPROVALS = Prepared(select(T.name, A.version, A.updated_by, A.updated_at)
                      .select_from(TOOLS.join(ALIASES, A.tool_id == T.id))
                      .where(T.namespace == _NS, A.name == _ALIAS).order_by(T.name))
_AT_ALIAS = Prepared(select(*_VERSION_COLUMNS, A.updated_by, A.updated_at).select_from(
    _JOINED.join(ALIASES, (A.tool_id == T.id) & (A.version == V.number)))
    .where(T.namespace == _NS, A.name == _ALIAS).order_by(T.name))
_TOOL = Prepared(select(T.id, T.latest_version).where(*_OF_NAME))
_LOCKED_TOOL = Prepared(select(T.id, T.latest_version).where(*_OF_NAME)
                        .with_for_update(of=TOOLS))
_SAME_CONTENT = Prepared(select(V.number).where(
    V.tool_id == bindparam("tool_id"), V.digest == bindparam("digest", type_=String)))
_ALIAS_OF_ID = Prepared(select(A.version).where(A.tool_id == bindparam("tool_id"),
                                                A.name == _ALIAS))


async def version(conn: ReadConn, namespace: str, name: str, number: int) -> VersionRow | None:
    r = await _VERSION.first(conn, namespace=namespace, name=name, number=number)
    return VersionRow.of(r) if r is not None else None


async def versions(conn: ReadConn, namespace: str, name: str) -> list[VersionRow]:
    return [VersionRow.of(r) for r in await _VERSIONS.all(conn, namespace=namespace,
                                                          name=name)]


async def latest(conn: ReadConn, namespace: str) -> list[tuple[VersionRow, datetime | None]]:
    """Each tool of the namespace (by name) with its newest version and last change."""
    return [(VersionRow.of(r), datetime_value(r[_WIDTH]))
            for r in await _LATEST.all(conn, namespace=namespace)]


async def approvals(conn: ReadConn, namespace: str, alias: str) -> dict[str, Approval]:
    """tool name -> where ``alias`` points, for the whole namespace."""
    return {r[0]: Approval(int(r[1]), r[2], datetime_value(r[3]))
            for r in await _APPROVALS.all(conn, namespace=namespace, alias=alias)}


async def at_alias(conn: ReadConn, namespace: str,
                   alias: str) -> list[tuple[VersionRow, Approval]]:
    """The version ``alias`` names, of every tool of the namespace that has it (by name)."""
    return [(VersionRow.of(r), Approval(int(r[2]), r[_WIDTH], datetime_value(r[_WIDTH + 1])))
            for r in await _AT_ALIAS.all(conn, namespace=namespace, alias=alias)]


async def tool(conn: ReadConn, namespace: str, name: str, *,
               lock: bool = False) -> tuple[int, int] | None:
    """(id, latest version) of a tool, locked on Postgres when ``lock`` (SQLite's writers
    are serialized by BEGIN IMMEDIATE)."""
    r = await (_LOCKED_TOOL if lock else _TOOL).first(conn, namespace=namespace, name=name)
    return (int(r[0]), int(r[1])) if r is not None else None


async def same_content(conn: ReadConn, tool_id: int, digest: str) -> int | None:
    """The number of the tool's version with this digest, if any."""
    r = await _SAME_CONTENT.first(conn, tool_id=tool_id, digest=digest)
    return int(r[0]) if r is not None else None


async def insert_tool(conn: AsyncConnection, namespace: str, name: str, now: datetime) -> int:
    """A new tool name (no version yet). A concurrent creator of the same name makes this
    raise IntegrityError: the caller's transaction is retried and finds it."""
    stmt = insert(TOOLS).values(namespace=namespace, name=name, latest_version=0,
                                created_at=now, updated_at=now).returning(T.id)
    return int((await conn.execute(stmt)).scalar_one())


async def insert_version(conn: AsyncConnection, tool_id: int, values: dict[str, Any],
                         now: datetime) -> None:
    await conn.execute(insert(VERSIONS).values(tool_id=tool_id, **values))
    await conn.execute(update(TOOLS).where(T.id == tool_id)
                       .values(latest_version=values["number"], updated_at=now))


async def alias_version(conn: ReadConn, tool_id: int, alias: str) -> int | None:
    r = await _ALIAS_OF_ID.first(conn, tool_id=tool_id, alias=alias)
    return int(r[0]) if r is not None else None


async def set_alias(conn: AsyncConnection, tool_id: int, alias: str, number: int,
                    previous: int | None, who: str | None, now: datetime) -> None:
    if previous is None:
        await conn.execute(insert(ALIASES).values(tool_id=tool_id, name=alias, version=number,
                                                  updated_by=who, updated_at=now))
    else:
        await conn.execute(update(ALIASES).where(A.tool_id == tool_id, A.name == alias)
                           .values(version=number, updated_by=who, updated_at=now))
    await conn.execute(update(TOOLS).where(T.id == tool_id).values(updated_at=now))


async def delete_alias(conn: AsyncConnection, tool_id: int, alias: str, now: datetime) -> None:
    await conn.execute(delete(ALIASES).where(A.tool_id == tool_id, A.name == alias))
    await conn.execute(update(TOOLS).where(T.id == tool_id).values(updated_at=now))
