"""SQL of the publish transaction: prebuilt Core statements, no ORM flushes.

Statements are built once at import with bind parameters, so each execution skips
statement construction and cache-key generation and goes straight to the compiled
form. Every function is one round trip (``executemany`` for rows of one table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Row, Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.models import (
    Adapter,
    AdapterTag,
    Alias,
    AliasHistory,
    Namespace,
    ServingProfile,
    Verdict,
    Version,
    VersionBlob,
)

ADAPTERS = cast(Table, Adapter.__table__)
VERSIONS = cast(Table, Version.__table__)
VERSION_BLOBS = cast(Table, VersionBlob.__table__)
ADAPTER_TAGS = cast(Table, AdapterTag.__table__)
VERDICTS = cast(Table, Verdict.__table__)
ALIASES = cast(Table, Alias.__table__)
ALIAS_HISTORY = cast(Table, AliasHistory.__table__)
NAMESPACES = cast(Table, Namespace.__table__)

_EXISTING = (select(Version.number)
             .where(Version.adapter_id == Adapter.id, Version.digest == bindparam("digest"))
             .scalar_subquery())
_ALIAS_VERSION = (select(Alias.version)
                  .where(Alias.adapter_id == Adapter.id, Alias.name == bindparam("alias"))
                  .scalar_subquery())
# FOR UPDATE OF adapters on Postgres; SQLite has no row locks (its writers are
# serialized by BEGIN IMMEDIATE) and renders none.
_TARGET = (select(Adapter.id, Adapter.version_count, Adapter.base_model_id, Adapter.tags,
                  _EXISTING.label("existing"), _ALIAS_VERSION.label("alias_version"))
           .where(Adapter.full_name == bindparam("full_name"))
           .with_for_update(of=ADAPTERS))
_NAMESPACE = select(Namespace.id).where(Namespace.name == bindparam("name"))
_INSERT_NAMESPACE = insert(NAMESPACES).returning(NAMESPACES.c.id)
_INSERT_ADAPTER = insert(ADAPTERS).returning(ADAPTERS.c.id)
_UPDATE_ADAPTER = update(ADAPTERS).where(ADAPTERS.c.id == bindparam("b_id"))
_INSERT_VERSION = insert(VERSIONS).returning(VERSIONS.c.id)
_DELETE_TAGS = delete(ADAPTER_TAGS).where(ADAPTER_TAGS.c.adapter_id == bindparam("adapter_id"))
_PROFILES = (select(ServingProfile.id, ServingProfile.name, ServingProfile.max_lora_rank,
                    ServingProfile.supported_modules, ServingProfile.generation)
             .where(ServingProfile.base_model_id == bindparam("base_model_id"))
             .order_by(ServingProfile.name))
_INSERTS = {t.name: insert(t) for t in (VERSION_BLOBS, ADAPTER_TAGS, VERDICTS, ALIASES,
                                        ALIAS_HISTORY)}
_UPDATE_ALIAS = update(ALIASES).where(ALIASES.c.adapter_id == bindparam("b_adapter_id"),
                                      ALIASES.c.name == bindparam("b_name"))


async def target(conn: AsyncConnection, full_name: str, digest: str,
                 alias: str | None) -> Row[Any] | None:
    """The adapter row (locked on Postgres) with, in the same statement, the number of a
    version that already has this content and the current version of ``alias``."""
    return (await conn.execute(_TARGET, {"full_name": full_name, "digest": digest,
                                         "alias": alias})).first()


async def namespace_id(conn: AsyncConnection, name: str) -> int:
    """The namespace's id, created when missing (a concurrent creator makes the caller
    retry through the unique constraint)."""
    found = (await conn.execute(_NAMESPACE, {"name": name})).scalar()
    if found is not None:
        return int(found)
    return int((await conn.execute(_INSERT_NAMESPACE, {"name": name})).scalar_one())


async def insert_adapter(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int((await conn.execute(_INSERT_ADAPTER, values)).scalar_one())


async def update_adapter(conn: AsyncConnection, adapter_id: int, values: dict[str, Any]) -> None:
    await conn.execute(_UPDATE_ADAPTER, {"b_id": adapter_id, **values})


async def insert_version(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int((await conn.execute(_INSERT_VERSION, values)).scalar_one())


async def insert_rows(conn: AsyncConnection, table: Table, rows: list[dict[str, Any]]) -> None:
    """One statement for all rows (executemany when there are several)."""
    if len(rows) == 1:
        await conn.execute(_INSERTS[table.name], rows[0])
    elif rows:
        await conn.execute(_INSERTS[table.name], rows)


async def set_tags(conn: AsyncConnection, adapter_id: int, tags: list[str], base_name: str,
                   base_model_id: int, fresh: bool) -> None:
    """Rows of the (tag, base, adapter) side table; ``fresh`` = the adapter has none yet."""
    if not fresh:
        await conn.execute(_DELETE_TAGS, {"adapter_id": adapter_id})
    await insert_rows(conn, ADAPTER_TAGS, [
        {"tag": t, "adapter_id": adapter_id, "base_name": base_name,
         "base_model_id": base_model_id} for t in tags])


async def profiles_for_base(conn: AsyncConnection, base_model_id: int) -> Sequence[Row[Any]]:
    return (await conn.execute(_PROFILES, {"base_model_id": base_model_id})).all()


async def point_alias(conn: AsyncConnection, adapter_id: int, name: str, number: int,
                      exists: bool, now: Any) -> None:
    if exists:
        await conn.execute(_UPDATE_ALIAS, {"b_adapter_id": adapter_id, "b_name": name,
                                           "version": number, "updated_at": now})
    else:
        await insert_rows(conn, ALIASES, [{"adapter_id": adapter_id, "name": name,
                                           "version": number, "updated_at": now}])
