"""SQL for signing keys and the namespaces' signature policy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import String, Table, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import Namespace, SigningKey

KEYS = cast(Table, SigningKey.__table__)
NAMESPACES = cast(Table, Namespace.__table__)


@dataclass(frozen=True)
class KeyRow:
    key_id: str
    name: str
    public_key: str
    created_by: str | None
    created_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: Any) -> KeyRow:
        return cls(row[0], row[1], row[2], row[3], datetime_value(row[4]),
                   datetime_value(row[5]))


@dataclass(frozen=True)
class NamespacePolicy:
    """A namespace's id and signature policy (``keys`` None: any of its active keys)."""

    namespace_id: int
    required: bool
    keys: list[str] | None


_POLICY = Prepared(select(Namespace.id, Namespace.require_signatures, Namespace.signature_keys)
                   .where(Namespace.name == bindparam("name", type_=String)))
_KEY_COLUMNS = (SigningKey.key_id, SigningKey.name, SigningKey.public_key, SigningKey.created_by,
                SigningKey.created_at, SigningKey.revoked_at)
_KEYS = Prepared(select(*_KEY_COLUMNS).join(Namespace, Namespace.id == SigningKey.namespace_id)
                 .where(Namespace.name == bindparam("name", type_=String))
                 .order_by(SigningKey.id))
_KEY = Prepared(select(*_KEY_COLUMNS).join(Namespace, Namespace.id == SigningKey.namespace_id)
                .where(Namespace.name == bindparam("name", type_=String),
                       SigningKey.key_id == bindparam("key_id", type_=String)))
_INSERT_KEY = insert(KEYS)
_REVOKE = (update(KEYS).where(KEYS.c.namespace_id == bindparam("b_namespace_id"),
                              KEYS.c.key_id == bindparam("b_key_id"),
                              KEYS.c.revoked_at.is_(None)))
_SET_POLICY = update(NAMESPACES).where(NAMESPACES.c.id == bindparam("b_id"))


async def policy(conn: ReadConn, namespace: str) -> NamespacePolicy | None:
    """The namespace's policy; None when the namespace has no row yet."""
    row = await _POLICY.first(conn, name=namespace)
    if row is None:
        return None
    return NamespacePolicy(int(row[0]), bool(row[1]), json_value(row[2]))


async def keys(conn: ReadConn, namespace: str) -> list[KeyRow]:
    """The namespace's keys, revoked ones too, oldest first."""
    return [KeyRow.of(r) for r in await _KEYS.all(conn, name=namespace)]


async def key(conn: ReadConn, namespace: str, key_id: str) -> KeyRow | None:
    row = await _KEY.first(conn, name=namespace, key_id=key_id)
    return KeyRow.of(row) if row is not None else None


async def insert_key(conn: AsyncConnection, namespace_id: int, row: KeyRow) -> None:
    await conn.execute(_INSERT_KEY, {
        "namespace_id": namespace_id, "key_id": row.key_id, "name": row.name,
        "public_key": row.public_key, "created_by": row.created_by,
        "created_at": row.created_at, "revoked_at": None})


async def revoke_key(conn: AsyncConnection, namespace_id: int, key_id: str,
                     when: datetime) -> bool:
    result = await conn.execute(_REVOKE, {"b_namespace_id": namespace_id, "b_key_id": key_id,
                                          "revoked_at": when})
    return bool(result.rowcount)


async def set_policy(conn: AsyncConnection, namespace_id: int, required: bool,
                     key_ids: list[str] | None) -> None:
    await conn.execute(_SET_POLICY, {"b_id": namespace_id, "require_signatures": required,
                                     "signature_keys": key_ids})
