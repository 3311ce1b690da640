"""Writes of adapters, versions, tags and aliases (the publish transaction's and the
others'), plus the two reads only the publish path makes.

Writes are Core statements built once at import with bind parameters, executed on the
unit of work's connection: each execution skips statement construction and cache-key
generation and goes straight to the compiled form. Every function is one round trip
(``executemany`` for rows of one table); ``precheck`` runs before the transaction, on a
read connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    String,
    Table,
    bindparam,
    delete,
    exists,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.blobs.repository import WATERMARK
from mol_catalog.db import Prepared, ReadConn, json_value
from mol_catalog.models import (
    Adapter,
    AdapterTag,
    Alias,
    AliasHistory,
    EvalReport,
    Namespace,
    Version,
    VersionBlob,
)
from mol_catalog.profiles.repository import PROFILE_COLUMNS, PROFILES, VERDICTS, ProfileRow

ADAPTERS = cast(Table, Adapter.__table__)
VERSIONS = cast(Table, Version.__table__)
VERSION_BLOBS = cast(Table, VersionBlob.__table__)
EVAL_REPORTS = cast(Table, EvalReport.__table__)
ADAPTER_TAGS = cast(Table, AdapterTag.__table__)
ALIASES = cast(Table, Alias.__table__)
ALIAS_HISTORY = cast(Table, AliasHistory.__table__)
NAMESPACES = cast(Table, Namespace.__table__)

_EXISTING = (select(Version.number)
             .where(Version.adapter_id == Adapter.id,
                    Version.digest == bindparam("digest", type_=String))
             .scalar_subquery())
_ALIAS_VERSION = (select(Alias.version)
                  .where(Alias.adapter_id == Adapter.id,
                         Alias.name == bindparam("alias", type_=String))
                  .scalar_subquery())
# FOR UPDATE OF adapters on Postgres; SQLite has no row locks (its writers are
# serialized by BEGIN IMMEDIATE) and renders none.
_TARGET = Prepared(
    select(Adapter.id, Adapter.version_count, Adapter.base_model_id, Adapter.tags,
           _EXISTING.label("existing"), _ALIAS_VERSION.label("alias_version"))
    .where(Adapter.full_name == bindparam("full_name", type_=String))
    .with_for_update(of=ADAPTERS))
MAX_CACHED_NAMESPACES = 4096
_NAMESPACE = Prepared(select(Namespace.id).where(
    Namespace.name == bindparam("name", type_=String)))
_INSERT_NAMESPACE = insert(NAMESPACES).returning(NAMESPACES.c.id)
_INSERT_ADAPTER = insert(ADAPTERS).returning(ADAPTERS.c.id)
_UPDATE_ADAPTER = update(ADAPTERS).where(ADAPTERS.c.id == bindparam("b_id"))
_INSERT_VERSION = insert(VERSIONS).returning(VERSIONS.c.id)
_DELETE_TAGS = delete(ADAPTER_TAGS).where(ADAPTER_TAGS.c.adapter_id == bindparam("adapter_id"))
_INSERTS = {t.name: insert(t) for t in (VERSION_BLOBS, ADAPTER_TAGS, ALIASES, ALIAS_HISTORY)}
# Before the blobs are stored, one statement: the newest blob deletion id (see
# blobs.orphans: the publish's transaction looks for deletions of its blobs past it), whether
# each of the upload's two blobs is already referenced by a version (one index probe
# each: EXISTS, not DISTINCT, since a shared config file may be referenced by millions
# of versions) and the profiles of the base revision. The one-row derived table keeps a
# row when the base has no profile.
_ONE = select(literal_column("1").label("one")).subquery("one")
_PRECHECK = Prepared(
    select(*PROFILE_COLUMNS, WATERMARK.label("deletions"),
           exists().where(VERSION_BLOBS.c.digest == bindparam("a")).label("a"),
           exists().where(VERSION_BLOBS.c.digest == bindparam("b")).label("b"))
    .select_from(_ONE.outerjoin(PROFILES,
                                PROFILES.c.base_model_id == bindparam("base_model_id")))
    .order_by(PROFILES.c.name))
_UPDATE_ALIAS = update(ALIASES).where(ALIASES.c.adapter_id == bindparam("b_adapter_id"),
                                      ALIASES.c.name == bindparam("b_name"))
_UPDATE_VERSION = update(VERSIONS).where(VERSIONS.c.id == bindparam("b_id"))


@dataclass(frozen=True)
class Target:
    """The adapter a publish goes to, as its first statement read it."""

    id: int
    version_count: int
    base_model_id: int
    tags: list[str]
    existing: int | None  # the number of a version with the same content
    alias_version: int | None  # where the form's alias points now


async def target(conn: ReadConn, full_name: str, digest: str,
                 alias: str | None) -> Target | None:
    """The adapter row (locked on Postgres) with, in the same statement, the number of a
    version that already has this content and the current version of ``alias``."""
    r = await _TARGET.first(conn, full_name=full_name, digest=digest, alias=alias)
    if r is None:
        return None
    return Target(int(r[0]), int(r[1]), int(r[2]), json_value(r[3]) or [], r[4], r[5])


async def namespace_id(conn: AsyncConnection, name: str, cache: dict[str, int]) -> int:
    """The namespace's id, created when missing (a concurrent creator makes the caller
    retry through the unique constraint). Ids found committed go to ``cache``: namespaces
    are never deleted; one this transaction inserts is not cached (it may roll back)."""
    hit = cache.get(name)
    if hit is not None:
        return hit
    row = await _NAMESPACE.first(conn, name=name)
    found = row[0] if row is not None else None
    if found is not None:
        if len(cache) < MAX_CACHED_NAMESPACES:
            cache[name] = int(found)
        return int(found)
    return int((await conn.execute(_INSERT_NAMESPACE, {"name": name})).scalar_one())


async def insert_adapter(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int((await conn.execute(_INSERT_ADAPTER, values)).scalar_one())


async def update_adapter(conn: AsyncConnection, adapter_id: int, values: dict[str, Any]) -> None:
    await conn.execute(_UPDATE_ADAPTER, {"b_id": adapter_id, **values})


async def insert_version(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int((await conn.execute(_INSERT_VERSION, values)).scalar_one())


async def insert_rows(conn: AsyncConnection, table: Table, rows: list[dict[str, Any]]) -> None:
    """One statement for all rows (executemany when there are several: cheaper here than a
    multi-row VALUES list, whose bind processing costs more than the driver's pipeline)."""
    if len(rows) == 1:
        await conn.execute(_INSERTS[table.name], rows[0])
    elif rows:
        await conn.execute(_INSERTS[table.name], rows)


async def set_tags(conn: AsyncConnection, adapter_id: int, full_name: str, tags: list[str],
                   base_name: str, base_model_id: int, fresh: bool) -> None:
    """Rows of the (tag, base, adapter) side table; ``fresh`` = the adapter has none yet."""
    if not fresh:
        await conn.execute(_DELETE_TAGS, {"adapter_id": adapter_id})
    await insert_rows(conn, ADAPTER_TAGS, [
        {"tag": t, "adapter_id": adapter_id, "base_name": base_name,
         "base_model_id": base_model_id, "full_name": full_name} for t in tags])


async def move_alias(conn: AsyncConnection, adapter_id: int, name: str, number: int,
                     previous: int | None, who: str | None, now: Any,
                     overridden: list[dict[str, Any]] | None = None) -> None:
    """Point the alias at ``number`` (``previous``: where it pointed, None when it is
    new) and append the move to its history; ``overridden``: the refusal reasons an admin
    forced it past."""
    if previous is not None:
        await conn.execute(_UPDATE_ALIAS, {"b_adapter_id": adapter_id, "b_name": name,
                                           "version": number, "updated_at": now})
    else:
        await insert_rows(conn, ALIASES, [{"adapter_id": adapter_id, "name": name,
                                           "version": number, "updated_at": now}])
    await insert_rows(conn, ALIAS_HISTORY, [{
        "adapter_id": adapter_id, "alias": name, "version": number, "previous": previous,
        "changed_by": who, "changed_at": now, "forced": bool(overridden),
        "overridden": overridden or None}])


async def delete_version(conn: AsyncConnection, adapter_id: int, version_id: int,
                         number: int) -> None:
    """Remove a version with its verdicts, eval reports, blob references and the aliases
    at it (their removals go to the alias history through ``move_alias``'s table). Its
    blobs stay for gc."""
    await conn.execute(delete(ALIASES).where(ALIASES.c.adapter_id == adapter_id,
                                             ALIASES.c.version == number))
    await conn.execute(delete(VERDICTS).where(VERDICTS.c.version_id == version_id))
    await conn.execute(delete(VERSION_BLOBS).where(VERSION_BLOBS.c.version_id == version_id))
    await conn.execute(delete(EVAL_REPORTS).where(EVAL_REPORTS.c.version_id == version_id))
    await conn.execute(delete(VERSIONS).where(VERSIONS.c.id == version_id))


async def update_version(conn: AsyncConnection, version_id: int, values: dict[str, Any]) -> None:
    await conn.execute(_UPDATE_VERSION, {"b_id": version_id, **values})


@dataclass(frozen=True)
class Precheck:
    deletions: int  # the newest blob deletion id
    referenced: set[str]  # the upload's digests a stored version already references
    profiles: list[ProfileRow]  # the base revision's, by name


async def precheck(conn: ReadConn, digests: Sequence[str], base_model_id: int) -> Precheck:
    """What a publish reads before it stores its blobs (one or two ``digests``: a publish
    has exactly two files)."""
    if not 1 <= len(digests) <= 2:
        raise ValueError(f"expected one or two digests, got {len(digests)}")
    a, b = digests[0], digests[-1]
    rows = await _PRECHECK.all(conn, a=a, b=b, base_model_id=base_model_id)
    width = len(PROFILE_COLUMNS)
    referenced = {d for d, hit in zip((a, b), rows[0][width + 1:], strict=True) if hit}
    profiles = [ProfileRow.of(r) for r in rows if r[0] is not None]
    return Precheck(int(rows[0][width]), referenced, profiles)
