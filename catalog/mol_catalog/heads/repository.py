"""SQL for router heads: names, their immutable versions (the documents themselves) and
aliases. Reads are ``Prepared`` statements; writes Core statements on the unit's
connection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Integer, String, Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import RouterHead, RouterHeadAlias, RouterHeadVersion

HEADS = cast(Table, RouterHead.__table__)
VERSIONS = cast(Table, RouterHeadVersion.__table__)
ALIASES = cast(Table, RouterHeadAlias.__table__)
H, V, A = HEADS.c, VERSIONS.c, ALIASES.c

_NS = bindparam("namespace", type_=String)
_NAME = bindparam("name", type_=String)
_NUMBER = bindparam("number", type_=Integer)
_ALIAS = bindparam("alias", type_=String)


@dataclass(frozen=True)
class VersionRow:
    """A stored version, without its document."""

    namespace: str
    name: str
    number: int
    digest: str
    experts: list[str]
    embedding_model: str
    dims: int
    ngram_dims: int
    data_digest: str | None
    source: str | None
    cross_validation: dict[str, Any] | None
    size_bytes: int
    created_by: str | None
    created_at: datetime | None

    @classmethod
    def of(cls, r: Sequence[Any]) -> VersionRow:
        return cls(r[0], r[1], int(r[2]), r[3], json_value(r[4]), r[5], int(r[6]), int(r[7]),
                   r[8], r[9], json_value(r[10]), int(r[11]), r[12], datetime_value(r[13]))


_VERSION_COLUMNS = (H.namespace, H.name, V.number, V.digest, V.experts, V.embedding_model,
                    V.dims, V.ngram_dims, V.data_digest, V.source, V.cross_validation,
                    V.size_bytes, V.created_by, V.created_at)
_JOINED = HEADS.join(VERSIONS, V.head_id == H.id)
_OF_NAME = (H.namespace == _NS, H.name == _NAME)
_VERSION = Prepared(select(*_VERSION_COLUMNS).select_from(_JOINED)
                    .where(*_OF_NAME, V.number == _NUMBER))
_VERSIONS = Prepared(select(*_VERSION_COLUMNS).select_from(_JOINED).where(*_OF_NAME)
                     .order_by(V.number.desc()))
_DOCUMENT = Prepared(select(V.document, V.digest).select_from(_JOINED)
                     .where(*_OF_NAME, V.number == _NUMBER))
_LATEST = Prepared(select(*_VERSION_COLUMNS, H.updated_at).select_from(
    HEADS.join(VERSIONS, (V.head_id == H.id) & (V.number == H.latest_version)))
    .where(H.namespace == _NS).order_by(H.name))
_ALIAS_LIST = Prepared(select(H.name, A.name, A.version, A.updated_at)
                       .select_from(HEADS.join(ALIASES, A.head_id == H.id))
                       .where(H.namespace == _NS).order_by(H.name, A.name))
_ALIASES_OF = Prepared(select(A.name, A.version, A.updated_at)
                       .select_from(HEADS.join(ALIASES, A.head_id == H.id))
                       .where(*_OF_NAME).order_by(A.name))
_AT_ALIAS = Prepared(select(*_VERSION_COLUMNS).select_from(
    _JOINED.join(ALIASES, (A.head_id == H.id) & (A.version == V.number)))
    .where(*_OF_NAME, A.name == _ALIAS))
_HEAD = Prepared(select(H.id, H.latest_version).where(*_OF_NAME))
_LOCKED_HEAD = Prepared(select(H.id, H.latest_version).where(*_OF_NAME)
                        .with_for_update(of=HEADS))
_SAME_CONTENT = Prepared(select(V.number).where(
    V.head_id == bindparam("head_id"), V.digest == bindparam("digest", type_=String)))
_ALIAS_OF_ID = Prepared(select(A.version).where(A.head_id == bindparam("head_id"),
                                                A.name == _ALIAS))
# The first published (name, version) of a digest in a namespace.
_REF = Prepared(select(H.name, V.number).select_from(_JOINED)
                .where(H.namespace == _NS, V.digest == bindparam("digest", type_=String))
                .order_by(V.id).limit(1))


async def version(conn: ReadConn, namespace: str, name: str, number: int) -> VersionRow | None:
    r = await _VERSION.first(conn, namespace=namespace, name=name, number=number)
    return VersionRow.of(r) if r is not None else None


async def versions(conn: ReadConn, namespace: str, name: str) -> list[VersionRow]:
    return [VersionRow.of(r) for r in await _VERSIONS.all(conn, namespace=namespace,
                                                          name=name)]


async def document(conn: ReadConn, namespace: str, name: str,
                   number: int) -> tuple[bytes, str] | None:
    """The stored bytes and their digest."""
    r = await _DOCUMENT.first(conn, namespace=namespace, name=name, number=number)
    return (bytes(r[0]), r[1]) if r is not None else None


async def latest(conn: ReadConn, namespace: str) -> list[tuple[VersionRow, datetime | None]]:
    """Each head of the namespace (by name) with its newest version and last change."""
    return [(VersionRow.of(r), datetime_value(r[14]))
            for r in await _LATEST.all(conn, namespace=namespace)]


async def namespace_aliases(conn: ReadConn, namespace: str) -> dict[str, dict[str, int]]:
    """head name -> {alias: version} for the whole namespace."""
    out: dict[str, dict[str, int]] = {}
    for head, alias, number, _ in await _ALIAS_LIST.all(conn, namespace=namespace):
        out.setdefault(head, {})[alias] = int(number)
    return out


async def aliases(conn: ReadConn, namespace: str, name: str
                  ) -> list[tuple[str, int, datetime | None]]:
    return [(r[0], int(r[1]), datetime_value(r[2]))
            for r in await _ALIASES_OF.all(conn, namespace=namespace, name=name)]


async def at_alias(conn: ReadConn, namespace: str, name: str, alias: str) -> VersionRow | None:
    r = await _AT_ALIAS.first(conn, namespace=namespace, name=name, alias=alias)
    return VersionRow.of(r) if r is not None else None


async def head(conn: ReadConn, namespace: str, name: str, *,
               lock: bool = False) -> tuple[int, int] | None:
    """(id, latest version) of a head, locked on Postgres when ``lock`` (SQLite's writers
    are serialized by BEGIN IMMEDIATE)."""
    r = await (_LOCKED_HEAD if lock else _HEAD).first(conn, namespace=namespace, name=name)
    return (int(r[0]), int(r[1])) if r is not None else None


async def same_content(conn: ReadConn, head_id: int, digest: str) -> int | None:
    """The number of the head's version with this digest, if any."""
    r = await _SAME_CONTENT.first(conn, head_id=head_id, digest=digest)
    return int(r[0]) if r is not None else None


async def insert_head(conn: AsyncConnection, namespace: str, name: str, now: datetime) -> int:
    """A new head name (no version yet). A concurrent creator of the same name makes this
    raise IntegrityError: the caller's transaction is retried and finds it."""
    stmt = insert(HEADS).values(namespace=namespace, name=name, latest_version=0,
                                created_at=now, updated_at=now).returning(H.id)
    return int((await conn.execute(stmt)).scalar_one())


async def insert_version(conn: AsyncConnection, head_id: int, values: dict[str, Any],
                         now: datetime) -> None:
    """The version row, and the head's newest version moved to it."""
    await conn.execute(insert(VERSIONS).values(head_id=head_id, **values))
    await conn.execute(update(HEADS).where(H.id == head_id).values(
        latest_version=values["number"], updated_at=now))


async def alias_version(conn: ReadConn, head_id: int, alias: str) -> int | None:
    r = await _ALIAS_OF_ID.first(conn, head_id=head_id, alias=alias)
    return int(r[0]) if r is not None else None


async def set_alias(conn: AsyncConnection, head_id: int, alias: str, number: int,
                    previous: int | None, now: datetime) -> None:
    if previous is None:
        await conn.execute(insert(ALIASES).values(head_id=head_id, name=alias, version=number,
                                                  updated_at=now))
    else:
        await conn.execute(update(ALIASES).where(A.head_id == head_id, A.name == alias)
                           .values(version=number, updated_at=now))
    await conn.execute(update(HEADS).where(H.id == head_id).values(updated_at=now))


async def delete_alias(conn: AsyncConnection, head_id: int, alias: str, now: datetime) -> None:
    await conn.execute(delete(ALIASES).where(A.head_id == head_id, A.name == alias))
    await conn.execute(update(HEADS).where(H.id == head_id).values(updated_at=now))


async def refs(conn: ReadConn, namespace: str, digests: Sequence[str]) -> dict[str, str]:
    """digest -> ``name@vN`` of its first publish in the namespace (a digest
    published under two names keeps the first); digests never published are left out.
    One indexed probe per digest: a namespace runs a head or two at a time."""
    out: dict[str, str] = {}
    for digest in dict.fromkeys(digests):
        r = await _REF.first(conn, namespace=namespace, digest=digest)
        if r is not None:
            out[digest] = f"{r[0]}@v{int(r[1])}"
    return out
