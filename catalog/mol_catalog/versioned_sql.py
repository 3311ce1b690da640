"""SQL for versioned documents with aliases: a name per namespace (its newest version
number on the name's row), immutable numbered versions each holding one document named
by its digest, and aliases naming versions. Router heads and tools are stored so
(``models.VersionedName``); each domain's repository builds one ``VersionedDocs`` over
its three tables and adds the reads only it makes. Reads are ``Prepared`` statements;
writes Core statements on the unit's connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Integer, String, Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import BindParameter

from mol_catalog.db import Prepared, ReadConn, datetime_value
from mol_catalog.models import Base

Row = TypeVar("Row")

NS = bindparam("namespace", type_=String)
NAME = bindparam("name", type_=String)
NUMBER = bindparam("number", type_=Integer)
ALIAS = bindparam("alias", type_=String)
DIGEST = bindparam("digest", type_=String)


@dataclass(frozen=True)
class StoredVersion:
    """What every stored version's row starts with: its name's namespace and name, its
    number and its document's digest (each domain's row adds its own facts)."""

    namespace: str
    name: str
    number: int
    digest: str


class VersionedDocs(Generic[Row]):
    """The statements shared by every versioned-document domain, over its tables.

    ``names``, ``versions`` and ``aliases`` are the domain's models; ``owner`` the
    column of versions and aliases that holds the name's id; ``columns`` the version
    columns a ``Row`` is made of (after the name's namespace and name), which ``row``
    turns a result row into.
    """

    def __init__(self, names: type[Base], versions: type[Base], aliases: type[Base], *,
                 owner: str, columns: Sequence[str],
                 row: Callable[[Sequence[Any]], Row]) -> None:
        self.name_table = cast(Table, names.__table__)
        self.version_table = cast(Table, versions.__table__)
        self.alias_table = cast(Table, aliases.__table__)
        self.owner = owner
        self.row = row
        self.n, self.v, self.a = self.name_table.c, self.version_table.c, self.alias_table.c
        n, v, a = self.n, self.v, self.a
        self.columns = (n.namespace, n.name, *(v[c] for c in columns))
        self.width = len(self.columns)
        self.joined = self.name_table.join(self.version_table, v[owner] == n.id)
        self.of_name = (n.namespace == NS, n.name == NAME)
        owner_id: BindParameter[Any] = bindparam("owner_id")
        self._version = Prepared(select(*self.columns).select_from(self.joined)
                                 .where(*self.of_name, v.number == NUMBER))
        self._versions = Prepared(select(*self.columns).select_from(self.joined)
                                  .where(*self.of_name).order_by(v.number.desc()))
        self._document = Prepared(select(v.document, v.digest).select_from(self.joined)
                                  .where(*self.of_name, v.number == NUMBER))
        newest = self.name_table.join(self.version_table,
                                      (v[owner] == n.id) & (v.number == n.latest_version))
        self._latest = Prepared(select(*self.columns, n.updated_at).select_from(newest)
                                .where(n.namespace == NS).order_by(n.name))
        self._name = Prepared(select(n.id, n.latest_version).where(*self.of_name))
        self._locked_name = Prepared(select(n.id, n.latest_version).where(*self.of_name)
                                     .with_for_update(of=self.name_table))
        self._same_content = Prepared(select(v.number).where(v[owner] == owner_id,
                                                             v.digest == DIGEST))
        self._alias_of_id = Prepared(select(a.version).where(a[owner] == owner_id,
                                                             a.name == ALIAS))

    async def version(self, conn: ReadConn, namespace: str, name: str,
                      number: int) -> Row | None:
        r = await self._version.first(conn, namespace=namespace, name=name, number=number)
        return self.row(r) if r is not None else None

    async def versions(self, conn: ReadConn, namespace: str, name: str) -> list[Row]:
        """The name's versions, newest first."""
        return [self.row(r) for r in await self._versions.all(conn, namespace=namespace,
                                                              name=name)]

    async def document(self, conn: ReadConn, namespace: str, name: str,
                       number: int) -> tuple[bytes, str] | None:
        """The stored bytes and their digest."""
        r = await self._document.first(conn, namespace=namespace, name=name, number=number)
        return (bytes(r[0]), r[1]) if r is not None else None

    async def latest(self, conn: ReadConn, namespace: str) -> list[tuple[Row, datetime | None]]:
        """Each name of the namespace (by name) with its newest version and last change."""
        return [(self.row(r), datetime_value(r[self.width]))
                for r in await self._latest.all(conn, namespace=namespace)]

    async def name(self, conn: ReadConn, namespace: str, name: str, *,
                   lock: bool = False) -> tuple[int, int] | None:
        """(id, latest version) of a name, locked on Postgres when ``lock`` (SQLite's
        writers are serialized by BEGIN IMMEDIATE)."""
        found = self._locked_name if lock else self._name
        r = await found.first(conn, namespace=namespace, name=name)
        return (int(r[0]), int(r[1])) if r is not None else None

    async def same_content(self, conn: ReadConn, owner_id: int, digest: str) -> int | None:
        """The number of the name's version with this digest, if any."""
        r = await self._same_content.first(conn, owner_id=owner_id, digest=digest)
        return int(r[0]) if r is not None else None

    async def insert_name(self, conn: AsyncConnection, namespace: str, name: str,
                          now: datetime) -> int:
        """A new name (no version yet). A concurrent creator of the same name makes this
        raise IntegrityError: the caller's transaction is retried and finds it."""
        stmt = insert(self.name_table).values(
            namespace=namespace, name=name, latest_version=0, created_at=now,
            updated_at=now).returning(self.n.id)
        return int((await conn.execute(stmt)).scalar_one())

    async def insert_version(self, conn: AsyncConnection, owner_id: int,
                             values: dict[str, Any], now: datetime) -> None:
        """The version row, and the name's newest version moved to it."""
        await conn.execute(insert(self.version_table).values({self.owner: owner_id, **values}))
        await self._touch(conn, owner_id, now, latest_version=values["number"])

    async def alias_version(self, conn: ReadConn, owner_id: int, alias: str) -> int | None:
        r = await self._alias_of_id.first(conn, owner_id=owner_id, alias=alias)
        return int(r[0]) if r is not None else None

    async def set_alias(self, conn: AsyncConnection, owner_id: int, alias: str, number: int,
                        previous: int | None, now: datetime, **extra: Any) -> None:
        """Point the alias at ``number`` (``previous``: where it points now, None when it
        does not exist yet); ``extra``: the domain's own alias columns."""
        values = {"version": number, "updated_at": now, **extra}
        if previous is None:
            await conn.execute(insert(self.alias_table).values(
                {self.owner: owner_id, "name": alias, **values}))
        else:
            await conn.execute(update(self.alias_table)
                               .where(*self._alias_is(owner_id, alias)).values(values))
        await self._touch(conn, owner_id, now)

    async def delete_alias(self, conn: AsyncConnection, owner_id: int, alias: str,
                           now: datetime) -> None:
        await conn.execute(delete(self.alias_table).where(*self._alias_is(owner_id, alias)))
        await self._touch(conn, owner_id, now)

    def _alias_is(self, owner_id: int, alias: str) -> tuple[Any, Any]:
        return self.a[self.owner] == owner_id, self.a.name == alias

    async def _touch(self, conn: AsyncConnection, owner_id: int, now: datetime,
                     **values: Any) -> None:
        await conn.execute(update(self.name_table).where(self.n.id == owner_id)
                           .values(updated_at=now, **values))
